"""Using a placement outside autoplace: the placed program as Python, and an Accelerate device map.

:func:`export_python` rebuilds the captured aten program as a ``torch.fx`` graph in which every
cross-device input is an explicit ``.to(device)`` (once per tensor and destination, as Send/Recv) and
every factory op gets its op's device, then lets fx generate the code: what HTF-MPR does when it writes
the model file back with device annotations. The file defines ``step(*inputs)`` (parameters, buffers,
optimizer state and inputs, on their devices), ``INPUTS`` (their names, shapes, dtypes and devices) and
``example_inputs(seed)``; running it executes one placed training step.

:func:`device_map` gives the module -> device map that ``accelerate.dispatch_model`` and
``from_pretrained(device_map=...)`` take, when the placement keeps each module's parameters together.
"""

from __future__ import annotations

import json
import keyword
import operator
import re
import warnings
from typing import Any

import numpy as np

from autoplace.cluster import Cluster
from autoplace.collectives import groups
from autoplace.granularity import module_path, nearest_module, with_granularity
from autoplace.graph import Graph, OpRole
from autoplace.placement import Placement
from autoplace.runtime.program import (
    DEVICE,
    ExecutionError,
    Program,
    SRef,
    TRef,
    _view_or_reshape,
    all_reduce,
    torch_device,
)

__all__ = ["export_python", "device_map", "from_device_map", "input_device", "is_device_map"]


def _ident(name: str) -> str:
    s = re.sub(r"\W", "_", name)
    if not s or s[0].isdigit() or keyword.iskeyword(s):
        s = "_" + s
    return s


def export_python(graph: Graph, placement: Placement, cluster: Cluster) -> str:
    """The placed training step as a readable, runnable Python module (see the module docstring)."""
    program = Program(graph)
    code, inputs = _traced_step(graph, placement, cluster, program)
    return _module_text(graph, placement, cluster, program, code, inputs)


def _traced_step(graph: Graph, placement: Placement, cluster: Cluster, program: Program):
    """The step as an fx graph's Python code, every op on its placed device (an explicit ``.to()`` per tensor
    and destination device); and its placeholders, ``(name, kind, shape, dtype, device)`` each."""
    import torch
    import torch.fx as fx

    dev = placement.to_array(graph, cluster)
    tdev = [torch_device(d.name) for d in cluster.devices]
    fg = fx.Graph()
    value: dict[int, Any] = {}
    items: dict[tuple[int, int], Any] = {}
    moved: dict[tuple[Any, str], Any] = {}
    scalar_nodes: dict[str, Any] = {}
    inputs = []

    def tensor(r: TRef, d: int):
        """Op ``r``'s tensor as read on placement device ``d``: an explicit ``.to()`` (Send/Recv, one copy
        per tensor and destination device) where it was produced on another placement device, even when
        both map to the same torch device (two CPU workers)."""
        n = value[r.op]
        if r.k is not None:
            if (r.op, r.k) not in items:
                items[(r.op, r.k)] = fg.call_function(operator.getitem, (n, r.k))
            n = items[(r.op, r.k)]
        if dev[r.op] != d:
            if (r, d) not in moved:
                moved[(r, d)] = fg.call_method("to", (n, tdev[d]))
            n = moved[(r, d)]
        return n

    def build(a: Any, d: int):
        if isinstance(a, TRef):
            return tensor(a, d)
        if isinstance(a, SRef):
            key = f"{a.name}@{d}"
            if key not in scalar_nodes:
                fn, sargs, skw = program.scalars[a.name]
                scalar_nodes[key] = fg.call_function(fn, tuple(build(x, d) for x in sargs),
                                                     {k: build(v, d) for k, v in skw.items()})
            return scalar_nodes[key]
        if a is DEVICE:
            return torch.device(tdev[d])
        if isinstance(a, list):
            return [build(x, d) for x in a]
        return a

    participants = groups(graph)
    for i in graph.topological_order:
        op = graph.ops[i]
        d = int(dev[i])
        c = program.calls[i]
        if c is not None and c.fn is all_reduce:    # replicas in one program: the all-reduce is their sum
            parts = [tensor(program.calls[j].args[0], d) for j in participants[op.meta["collective"]]]
            node = parts[0]
            for part in parts[1:]:
                node = fg.call_function(torch.ops.aten.add.Tensor, (node, part))
            value[i] = node
            continue
        if c is None:
            value[i] = fg.placeholder(_ident(op.name))
            spec = op.outputs[0]
            inputs.append((op.name, op.type, tuple(spec.shape), spec.dtype, tdev[d]))
            continue
        # a view that may meet other strides than the trace's runs as reshape (a view where it can be)
        fn = torch.ops.aten.reshape.default if c.fn is _view_or_reshape else c.fn
        node = fg.create_node("call_function", fn, tuple(build(a, d) for a in c.args),
                              {k: build(v, d) for k, v in c.kwargs.items()}, name=_ident(op.name))
        value[i] = node
    outs = [tensor(r, int(dev[r.op])) for r in program.outputs]
    updated = [tensor(r, int(dev[r.op])) for r in program.final_versions.values()]
    fg.output((tuple(outs), tuple(updated)))
    code = fg.python_code(root_module="self")
    return code, inputs


def _module_text(graph: Graph, placement: Placement, cluster: Cluster, program: Program, code, inputs) -> str:
    """The module around the step's code: what it places where, its inputs, ``example_inputs`` and a main."""
    body = code.src
    # functions of autoplace's own the program calls (torch.optim's foreach Adam on one parameter)
    own = sorted(f"from {obj.__module__} import {obj.__name__} as {name}" for name, obj in code.globals.items()
                 if getattr(obj, "__module__", "").startswith("autoplace."))
    body = body.replace("def forward(self, ", "def step(", 1).replace("def forward(self)", "def step()", 1)
    counts = ", ".join(f"{d}: {n}" for d, n in sorted(placement.counts().items()))
    strategy = placement.meta.get("strategy") or {}
    R = int(strategy.get("replicas", 1))
    replicas = [] if R < 2 else [
        f"{R} data-parallel replicas (ops 'r<k>/...'), each on its 1/{R} of the batch, on devices",
        f"{', '.join('+'.join(g) for g in strategy.get('groups', []))}. Each all-reduce of a gradient bucket is",
        "written as the sum of the replicas' buckets (torch.distributed.all_reduce where replicas are processes).",
        ""]
    lines = [
        f'"""Placed training step of {graph.name!r}: {placement.method} on {cluster.name} ({counts} ops).',
        "",
        *replicas,
        "Generated by `autoplace export`. step(*inputs) runs one training step with every op on its",
        "placed device (`.to(...)` calls are the cross-device transfers) and returns",
        "(outputs, updated_state): the loss first, then the state each in-place update wrote.",
        '"""',
        "import torch",
        "from torch import device",
        *own,
        "",
        'inf, nan = float("inf"), float("nan")',
        "",
        "#: the step's arguments, in order: (name, kind, shape, dtype, device)",
        "INPUTS = [",
        *[f"    {t!r}," for t in inputs],
        "]",
        "#: updated state, in the order step() returns it",
        f"UPDATED = {list(program.final_versions)!r}",
        "#: scheduled hyper-parameters (a parameter's '<name>.lr', '.beta1', '.beta2' inputs), as captured",
        f"HYPER = {({op.name: float(op.meta.get('value', 0.0)) for op in graph.ops if op.type == 'hyperparameter'})!r}",
        "",
        "",
        "def example_inputs(seed=0):",
        '    """Random values of the right shapes on the placed devices (integer inputs in [0, 2))."""',
        "    g = torch.Generator().manual_seed(seed)",
        "    out = []",
        "    for name, kind, shape, dtype, dev in INPUTS:",
        "        dt = getattr(torch, dtype)",
        "        if kind == 'hyperparameter':",
        "            t = torch.full(shape, HYPER[name], dtype=dt)",
        "        elif dt.is_floating_point:",
        "            t = torch.zeros(shape, dtype=dt) if kind == 'optimizer_state' else "
        "torch.randn(shape, generator=g, dtype=dt) * 0.02",
        "        else:",
        "            t = torch.randint(0, 2, shape, generator=g, dtype=dt)",
        "        out.append(t.to(dev))",
        "    return out",
        "",
        body.strip("\n"),
        "",
        "",
        'if __name__ == "__main__":',
        "    outputs, _ = step(*example_inputs())",
        '    print("loss", float(outputs[0]))',
        "",
    ]
    return "\n".join(lines)


def device_map(graph: Graph, placement: Placement, cluster: Cluster) -> dict[str, str]:
    """Module path -> device (``{"encoder.layer1": "cuda:0", ...}``), as Accelerate's ``device_map``.

    A module with parameters of its own must be on one device with everything under it (as
    ``--granularity module`` places); the map names the largest subtrees that share a device (``""`` for
    the whole model), each parameter — tied ones under every name — covered by exactly one key; a
    parameter or buffer of the root module's own (a class token) is a key of its own name. Where devices of
    the placement are one torch device (``cpu:0`` and ``cpu:1`` are both ``cpu``), the map merges them:
    a warning says so.
    Devices are torch's: ``cpu`` here means *run on the CPU*, while Accelerate reads ``"cpu"`` as *keep
    the weights in CPU memory and run on the main device* whenever a GPU is in the map: pass
    ``main_device="cpu"`` to ``dispatch_model`` to run those modules on the CPU as placed."""
    if int((placement.meta.get("strategy") or {}).get("replicas", 1)) > 1:
        raise ExecutionError(f"placement {placement.method!r} runs {placement.meta['strategy']['replicas']} "
                             "replicas of the model: a device_map places one copy (export the placed program "
                             "instead, or launch the replicas with torch DDP)")
    dev = placement.to_array(graph, cluster)
    index = {op.name: i for i, op in enumerate(graph.ops)}
    holders = [(op.name, i) for i, op in enumerate(graph.ops) if op.type in (OpRole.PARAMETER, OpRole.BUFFER)]
    holders += [(alias, index[name]) for alias, name in dict(graph.meta.get("tied", {})).items() if name in index]
    module_dev: dict[str, str] = {}
    merged: dict[str, set[str]] = {}
    for name, i in holders:
        module, _, _ = name.rpartition(".")
        module = module or name                   # the root's own tensor: a key of its own
        d = torch_device(cluster.devices[dev[i]].name)
        merged.setdefault(d, set()).add(cluster.devices[dev[i]].name)
        if module_dev.setdefault(module, d) != d:
            raise ExecutionError(f"module {module or '(root)'!r} has parameters on {module_dev[module]} and {d}: "
                                 "a device_map cannot express this placement (place with --granularity module "
                                 "to keep every module whole; the placed program itself exports without it)")
    if not module_dev:
        raise ExecutionError(f"graph {graph.name!r} has no parameters: nothing to map")
    for d, names in merged.items():
        if len(names) > 1:

            warnings.warn(f"device map of {graph.name!r}: {', '.join(sorted(names))} are all torch device {d!r}, "
                          "so the map runs them as one device (the placement itself runs them apart)", stacklevel=2)

    def devices_under(prefix: str) -> set[str]:
        return {d for m, d in module_dev.items() if m == prefix or m.startswith(prefix + ".") or not prefix}

    out: dict[str, str] = {}

    def emit(prefix: str) -> None:
        ds = devices_under(prefix)
        if len(ds) == 1:
            out[prefix] = ds.pop()
            return
        if prefix in module_dev:  # own parameters and children on other devices: no module key covers it once
            raise ExecutionError(f"module {prefix or '(root)'!r} has its own parameters on {module_dev[prefix]} and "
                                 f"submodules on {', '.join(sorted(ds - {module_dev[prefix]}))}: a device_map cannot "
                                 "express this placement (place with --granularity module)")
        depth = prefix.count(".") + 1 if prefix else 0
        children = sorted({".".join(m.split(".")[:depth + 1]) for m in module_dev
                           if (not prefix or m.startswith(prefix + ".")) and m.count(".") >= depth})
        for child in children:
            if child != prefix:
                emit(child)

    emit("")
    return out


def is_device_map(obj) -> bool:
    """Whether ``obj`` (a JSON object) is an Accelerate-style device map: module path -> device (a GPU
    index, ``"cpu"``, ``"cuda:k"`` or a cluster device's name), without autoplace's ``format`` field. A
    value of the wrong kind (a number, a boolean, null) still makes a device map, one :func:`from_device_map`
    refuses by name; an object or a list makes none (a placement file missing its ``format``)."""
    return (isinstance(obj, dict) and "format" not in obj and bool(obj)
            and all(isinstance(k, str) and (v is None or isinstance(v, (str, int, float))) for k, v in obj.items()))


def _kind(value) -> str:
    return {bool: "a boolean", float: "a fractional number", type(None): "null"}.get(type(value), type(value).__name__)


def _map_device(value, key: str, cluster: Cluster, where: str) -> int:
    """A device map's value as the index of a device of ``cluster``."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ExecutionError(f"{where}: {key!r} -> {json.dumps(value)}: a device map's value is a GPU index, "
                             f"'cpu', 'cuda:K' or a device's name, not {_kind(value)}")
    gpus, cpus = cluster.devices_of_kind("gpu"), cluster.devices_of_kind("cpu")
    if isinstance(value, str) and value in cluster.device_names:
        return cluster.index(value)
    cuda = re.fullmatch(r"cuda(?::(\d+))?", value) if isinstance(value, str) else None
    if isinstance(value, int) or cuda:
        k = value if isinstance(value, int) else int(cuda.group(1) or 0)
        if 0 <= k < len(gpus):
            return gpus[k]
        raise ExecutionError(f"{where}: {key!r} -> {value!r}: cluster {cluster.name!r} has {len(gpus)} GPUs")
    if value == "cpu" and cpus:
        return cpus[0]
    raise ExecutionError(f"{where}: {key!r} -> {value!r}: not a device of cluster {cluster.name!r} "
                         f"(it has: {', '.join(cluster.device_names)}; 'disk' offload is not modelled)")


def from_device_map(graph: Graph, cluster: Cluster, dmap: dict, *, where: str = "device map",
                    method: str = "device-map", inputs_on: str | None = None) -> Placement:
    """The placement ``dispatch_model(model, dmap)`` runs: each op on the device of the longest map key
    that is its module or a module above it (a parameter's module; an op's ``scope``, its ``.tN`` time-step
    suffix left out), and ops no key covers as dispatch runs them (:func:`~autoplace.granularity.with_granularity`'s
    rule: the batch and the loss on the main device — the first GPU in the map, else the CPU —, any other
    op with the producer of its first input, its backward with it; ``inputs_on``: a device of ``cluster``
    the batch is put on instead). Unknown devices are one clear error."""


    keys = {k: _map_device(v, k, cluster, where) for k, v in dmap.items()}

    main = next((d for d in keys.values() if cluster.devices[d].kind == "gpu"), None)
    if main is None:
        main = next(iter(keys.values()))
    if inputs_on is not None:
        main = cluster.index(inputs_on)

    def covered(path: str | None) -> int | None:
        return nearest_module(path, keys)

    roots = {op.name for op in graph.ops if op.type in (OpRole.PARAMETER, OpRole.BUFFER) and "." not in op.name}
    known = set(graph.meta.get("modules", {})) | {""} | roots     # the root's own tensors are keys of their own
    for op in graph.ops:                         # the modules the graph names: its parameters' and its scopes
        path = module_path(op) or ""
        while path and path not in known:
            known.add(path)
            path = path.rpartition(".")[0]
    unknown = sorted(k for k in keys if k not in known)
    if unknown:                                  # as Accelerate's check_device_map would: a typo maps nothing
        raise ExecutionError(f"{where}: {unknown[0]!r} is not a module of {graph.name!r}")
    names = cluster.device_names
    for alias, name in dict(graph.meta.get("tied", {})).items():   # tied weights: one tensor, one device
        mine, theirs = alias.rpartition(".")[0], name.rpartition(".")[0]
        a, b = covered(mine), covered(theirs)
        if a is not None and b is not None and a != b:
            raise ExecutionError(f"{where}: {alias!r} is tied to {name!r} (one tensor), but the map puts module "
                                 f"{mine!r} on {names[a]} and {theirs!r} on {names[b]}: map {mine!r} to "
                                 f"{names[b]} (or {theirs!r} to {names[a]})")
    # the module units (a graph grouped so already keeps its own: grouping it again would lose the units of
    # the root module's own tensors)
    grouped = graph if graph.meta.get("granularity") == "module" else with_granularity(graph, "module")
    dev = np.full(graph.n_ops, -1, dtype=np.int64)
    groups = grouped.colocation_groups()
    state = (OpRole.OPTIMIZER_STATE, OpRole.HYPERPARAMETER)
    for i, op in enumerate(graph.ops):
        # the parameter or buffer an op is (its own name) or holds state of ("<parameter>.<key>")
        tensor = op.name if op.type in (OpRole.PARAMETER, OpRole.BUFFER) else op.name.rpartition(".")[0] \
            if op.type in state else None
        if tensor in roots and tensor in keys:
            d = keys[tensor]
        elif op.colocation_group in roots and op.colocation_group in keys:   # a root tensor's gradient, update
            d = keys[op.colocation_group]
        else:
            d = covered(tensor.rpartition(".")[0] if op.type in state else module_path(op))
        if d is not None:
            dev[i] = d
    for name, members in groups.items():         # a group takes the device its mapped members agree on
        tensor = name.removeprefix("module:(root).")
        if tensor != name and tensor in keys:    # the unit of a root tensor: wholly where its key says
            dev[members] = keys[tensor]
            continue
        known = dev[members][dev[members] >= 0]
        fill = main if name == "module:(inputs and loss)" or not len(known) else int(np.bincount(known).argmax())
        dev[members[dev[members] < 0]] = fill
    dev[dev < 0] = main
    return Placement.from_array(graph, cluster, dev, method, source="device map")


def input_device(graph: Graph, placement: Placement, cluster: Cluster) -> str | None:
    """The torch device the batch goes to for ``placement`` (its input ops'), or None without inputs."""
    inputs = [op.name for op in graph.ops if op.type == OpRole.INPUT]
    return torch_device(placement.assignment[inputs[0]]) if inputs else None
