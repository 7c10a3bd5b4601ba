"""A placed training step to call from PyTorch (made by :func:`autoplace.compile`), in the spirit of
``torch.compile`` and Accelerate's ``dispatch_model``.

``step = autoplace.compile(model, inputs, loss_fn, optimizer, targets=targets)`` captures one training
step of ``model`` (forward, backward, the optimizer's update: :func:`~autoplace.capture.capture_training_step`),
places it on ``cluster`` with ``method`` (or takes a saved ``placement``), and sets it up on one worker
process per device (:class:`~autoplace.runtime.shm.pool.WorkerPool`) with the model's own parameters,
buffers and optimizer state. Then ``loss = step(inputs, targets)`` runs forward, backward and update across
the placed devices; parameters and optimizer state stay on the devices the placement put them on, between
steps. ``step.state_dict()`` returns the trained parameters and buffers (``model.load_state_dict`` takes it),
``step.load_into(model, optimizer)`` writes them and the optimizer state back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autoplace.capture.inputs import as_tuple, split_inputs
from autoplace.capture.optimizer import scheduled_value
from autoplace.cluster import Cluster
from autoplace.errors import AutoplaceError
from autoplace.formats import save_placement
from autoplace.graph import Graph, OpRole
from autoplace.placement import Placement
from autoplace.replicas import strategy_graph
from autoplace.runtime.dist.pool import DistributedPool
from autoplace.runtime.eager import EagerRunner
from autoplace.runtime.export import device_map
from autoplace.runtime.pool import DEFAULT_TIMEOUT_S, Runtime, WorkerFailed
from autoplace.runtime.program import ExecutionError
from autoplace.runtime.shm.pool import WorkerPool
from autoplace.runtime.verdict import Verdict

__all__ = ["PlacedStep"]


def _shapes(graph: Graph) -> tuple:
    """The shapes and dtypes of a captured step's batch tensors, in order: which step a batch takes."""
    return tuple((tuple(op.outputs[0].shape), op.outputs[0].dtype) for op in graph.ops if op.type == OpRole.INPUT)


def _flat(inputs: Any, targets: Any, keys: tuple[str, ...]) -> list:
    """A batch's tensors in the captured graph's input order (as the tracer flattened them); keyword inputs
    are matched by name to ``keys``, the captured batch's, whatever order the dict has."""
    from torch.utils._pytree import tree_leaves


    args, kwargs = split_inputs(inputs)
    if set(kwargs) != set(keys):
        raise AutoplaceError(f"the step was compiled with keyword inputs {sorted(keys)}, got {sorted(kwargs)}")
    return tree_leaves((args, {k: kwargs[k] for k in keys}, as_tuple(targets)))


#: optimizer state a fresh optimizer does not start at zero (torch.optim's first-step values): NAdam's
#: running product of momentum factors (ASGD's eta and mu and Rprop's step sizes too, though neither
#: optimizer can be captured or run yet)
_FRESH = {"mu_product": lambda group: 1.0, "mu": lambda group: 1.0, "eta": lambda group: group["lr"],
          "step_size": lambda group: group["lr"]}


def _hyper(optimizer, inputs: dict[int, set[str]] | None = None) -> list[dict]:
    """The optimizer's hyper-parameters that are constants of the captured step (what a change after compile
    would not reach): all but ``inputs[k]`` in group ``k``, the ones the step takes at every call."""
    inputs = inputs or {}
    return [{k: v for k, v in g.items() if k != "params" and k not in inputs.get(i, ())
             and isinstance(v, (int, float, bool, tuple, str, type(None)))}
            for i, g in enumerate(optimizer.param_groups)]


class _Replicas:
    """The step a placement runs (``run``: :func:`~autoplace.replicas.strategy_graph`) and how the names of the
    user's step map onto it: the same names for a placement of the step (or of its micro-batch capture, a
    pipeline); for ``R`` replicas (ops ``r{r}/...``) every placeholder ``R`` times — each replica its own copy
    of the state, its ``1 / R`` of the batch along the capture's batch dimension — the state read from replica
    0 (the replicas' parameters and optimizer state are equal after every step; BatchNorm statistics are
    replica 0's, as DDP's ``broadcast_buffers`` makes them) and the loss the replicas' mean."""

    def __init__(self, graph: Graph, placement: Placement):

        self.run = strategy_graph(graph, placement)
        replicated = self.run is not graph and self.run.n_ops and self.run.ops[0].name.startswith("r0/")
        self.R = int(self.run.meta.get("replicas", 1)) if replicated else 1
        self.dim = int(self.run.meta.get("batch_dim", 0))
        program = self.run.meta.get("program")
        self.per = len(program.get("outputs", [])) // self.R if isinstance(program, dict) else 1

    def names(self, name: str) -> list[str]:
        return [name] if self.R == 1 else [f"r{r}/{name}" for r in range(self.R)]

    def values(self, values: dict[str, Any]) -> dict[str, Any]:
        """Placeholder values for the run step: each replica a copy of its own."""
        if self.R == 1:
            return values
        return {f"r{r}/{n}": v if r == 0 else v.clone() for n, v in values.items() for r in range(self.R)
                if f"r{r}/{n}" in self.run}

    def batch(self, values: dict[str, Any], inputs: set[str]) -> dict[str, Any]:
        """New values: each batch tensor (``inputs``) cut into the replicas' shares, the rest given to all."""
        if self.R == 1:
            return values
        out = {}
        for n, v in values.items():
            parts = v.chunk(self.R, self.dim) if n in inputs else [v] * self.R
            out.update({f"r{r}/{n}": parts[r].contiguous() for r in range(self.R)})
        return out

    def fetch(self, pool, names: list[str]) -> dict[str, Any]:
        """``names`` of the user's step (``output0``: the loss) read from the run step."""
        if self.R == 1:
            return pool.fetch(names)
        run = {n: [f"output{r * self.per}" for r in range(self.R)] if n == "output0" else [f"r0/{n}"] for n in names}
        got = pool.fetch(sorted({m for ms in run.values() for m in ms}))
        return {n: sum(got[m] for m in ms) / len(ms) if len(ms) > 1 else got[ms[0]] for n, ms in run.items()}


class PlacedStep:
    """One training step of a captured model, placed and set up on worker processes (see the module
    docstring). Call it with a batch; use as a context manager, or :meth:`close` it."""

    def __init__(self, graph: Graph, cluster: Cluster, placement: Placement, values: dict[str, Any], *,
                 timeout: float = DEFAULT_TIMEOUT_S, keys: tuple[str, ...] = (), state_keys: list[str] | None = None,
                 optimizer=None, hyper_inputs: dict[str, tuple[int, str]] | None = None,
                 recompile: Callable[[Any, Any], tuple[Graph, Placement]] | None = None,
                 pool: WorkerPool | None = None, eager: EagerRunner | None = None, eager_rng: bool = False):
        self.graph, self.cluster, self.placement = graph, cluster, placement
        #: where compile's set-up time went (seconds: capture, place, workers), and whether the placement
        #: came from the cache (set by :func:`autoplace.compile`)
        self.setup_seconds: dict[str, float] = {}
        self.placement_cached = False
        self._recompile = recompile                 # (inputs, targets) -> the step of another batch shape
        self._variants = {_shapes(graph): (graph, placement)}
        self._active = _shapes(graph)
        self._keys = tuple(keys)                    # the captured batch's keyword inputs, in captured order
        self._initial = values                      # the state before the first step
        self._optimizer = optimizer
        #: each scheduled input (``"<parameter>.lr"``, ``.beta1``, ``.beta2``) -> the optimizer's param group and
        #: the key it reads there at every call
        self._hyper_inputs = dict(hyper_inputs or {})
        self._inputs_hyper: dict[int, set[str]] = {}   # per param group, the keys the step reads every call
        for k, key in self._hyper_inputs.values():
            self._inputs_hyper.setdefault(k, set()).add("lr" if key == "lr" else "betas")
        self._hyper = _hyper(optimizer, self._inputs_hyper) if optimizer is not None else None
        #: the scheduled inputs' values the workers hold (set up from ``values``)
        self._sent = self._scheduled_in(values)
        self.inputs = [op for op in graph.ops if op.type == OpRole.INPUT]
        self.parameters = [op.name for op in graph.ops if op.type == OpRole.PARAMETER]
        self.buffers = [op.name for op in graph.ops if op.type == OpRole.BUFFER]
        tied = dict(graph.meta.get("tied", {}))
        #: state_dict's keys: the model's own (persistent buffers only, tied names too), in its order
        self.state_keys = list(state_keys) if state_keys is not None else [*self.parameters, *self.buffers, *tied]
        self._source = {k: tied.get(k, k) for k in self.state_keys}
        self.optimizer_state_names = [op.name for op in graph.ops if op.type == OpRole.OPTIMIZER_STATE]
        self.steps = 0
        self._fresh = True                          # the workers hold the state it was set up with
        self._closed = False
        #: how compile chose between the searched placement and one device, measured (None: not measured)
        self.verdict: Verdict | None = None
        #: with ``micro_batches="auto"``: per count tried, what its ranking simulated (set by compile)
        self.micro_batch_choice: list[dict] = []
        self.micro_batches = 1
        self._eager = eager
        #: the random ops draw from this process's generator in eager's order (set by compile's ``eager_rng``)
        self.eager_rng = eager_rng
        if eager is not None:                       # one device, in this process: nothing to set up
            self._pool = None
            return
        self._pool = pool if pool is not None else WorkerPool(cluster, timeout=timeout)
        self._names = _Replicas(graph, placement)
        if eager_rng:
            try:
                self._pool.program_of(self._names.run).check_drawn_ahead()
            except ExecutionError:
                if pool is None:
                    self._pool.close()
                raise
        try:
            self._prepare(graph, placement, values)
        except WorkerFailed as e:
            self._pool.close()
            raise ExecutionError(f"the placed step of {graph.name!r} cannot be set up on {cluster.name}: {e}") from None

    def _prepare(self, graph: Graph, placement: Placement, values: dict[str, Any]) -> None:
        names = _Replicas(graph, placement)
        if names.R > 1 and getattr(self._pool, "runtime", Runtime.SHM) != Runtime.DISTRIBUTED:
            raise ExecutionError(f"placement {placement.method!r} runs {names.R} replicas, whose gradients are "
                                 "all-reduced over torch.distributed: it runs on the distributed runtime only "
                                 "(runtime='distributed')")
        self._pool.prepare(names.run, placement, values=names.values(values))
        self._names = names

    @property
    def run_graph(self) -> Graph:
        """The step the workers run: the captured one, or for a strategy its replicated step."""
        return self.graph if self._eager is not None else self._names.run

    @property
    def replicas(self) -> int:
        """How many data-parallel replicas run the step (1: a placement of the step itself)."""
        return 1 if self._eager is not None else self._names.R

    @property
    def runtime(self) -> str:
        """What runs the step: ``"eager"`` (one device, plain PyTorch in this process:
        :class:`~autoplace.runtime.eager.EagerRunner`), ``"shm"`` (worker processes, tensors through shared
        memory) or ``"distributed"`` (``torch.distributed`` ranks)."""
        if self._eager is not None:
            return Runtime.EAGER

        return Runtime.DISTRIBUTED if isinstance(self._pool, DistributedPool) else Runtime.SHM

    @property
    def devices(self) -> dict[str, str]:
        """Where each parameter and buffer lives: name -> device name (replica 0's, for replicas)."""
        names = self._names if self._eager is None else None
        return {n: self.placement.assignment[n if names is None else names.names(n)[0]]
                for n in (*self.parameters, *self.buffers)}

    def _hyper_changed(self) -> str | None:
        """What says which captured hyper-parameter has another value now, or None (keys added later, as a
        scheduler's ``initial_lr``, are not captured ones; the learning rate is an input, not captured)."""
        now = _hyper(self._optimizer, self._inputs_hyper)
        if len(now) != len(self._hyper):
            return f"the optimizer has {len(now)} param groups, {len(self._hyper)} when compiled"
        for i, (n, g) in enumerate(zip(now, self._hyper)):
            for k, v in g.items():
                if n.get(k) != v:
                    return f"optimizer.param_groups[{i}][{k!r}] changed after compile ({v!r} -> {n.get(k)!r})"
        return None

    def _check_open(self) -> None:
        if self._closed:
            raise AutoplaceError(f"the placed step of {self.graph.name!r} is closed (its state went with its "
                                 "workers: read state_dict() before close())")

    def device_map(self) -> dict[str, str]:
        """Module path -> torch device, as Accelerate's ``dispatch_model`` takes it
        (:func:`~autoplace.runtime.export.device_map`; a placement that splits a module cannot be one:
        compile with ``granularity="module"``)."""

        return device_map(self.graph, self.placement, self.cluster)

    def __call__(self, inputs: Any, targets: Any = None):
        """Run one training step on the batch ``inputs`` (and ``targets``, as ``loss_fn(outputs, *targets)``
        takes them); returns the loss (a CPU tensor) the step computed before its update."""
        self._check_open()
        if self._eager is not None:
            return self._eager_call(inputs, targets)
        changed = self._hyper_changed() if self._optimizer is not None else None
        if changed:
            raise AutoplaceError(f"{changed}: it is a constant of the captured step (the inputs it reads at every "
                                 "call are the learning rate and Adam's betas, where they are numbers); compile "
                                 "again (load_into the module first) to train with the new value")
        flat = _flat(inputs, targets, self._keys)
        if len(flat) != len(self.inputs):
            raise AutoplaceError(f"the step of {self.graph.name!r} takes {len(self.inputs)} tensors (inputs, then "
                                 f"targets), got {len(flat)}")
        shapes = tuple((tuple(t.shape), str(t.dtype).removeprefix("torch.")) if hasattr(t, "shape") else None
                       for t in flat)
        if shapes != self._active and self._recompile is not None and None not in shapes:
            self._switch(shapes, inputs, targets)
        batch = {}
        for op, t in zip(self.inputs, flat):
            spec = op.outputs[0]
            if not hasattr(t, "shape"):
                raise AutoplaceError(f"{op.name}: got a {type(t).__name__}, not a tensor")
            if tuple(t.shape) != tuple(spec.shape) or str(t.dtype).removeprefix("torch.") != spec.dtype:
                raise AutoplaceError(f"{op.name}: got dtype {str(t.dtype).removeprefix('torch.')}, shape "
                                     f"{tuple(t.shape)}; the step was captured with {spec.dtype} {tuple(spec.shape)}")
            batch[op.name] = t.detach().cpu()
        # the learning rates (and betas) as a scheduler left them: those that changed since the workers got them
        # (one scalar per parameter and key: sending them all every step costs more than a small model's step)
        now = self._scheduled_now()
        batch.update({k: v for k, v in now.items() if self._sent.get(k) != float(v)})
        try:
            self._pool.assign(self._names.batch(batch, {op.name for op in self.inputs}))
            if self.eager_rng:
                self._pool.draw_random()
            self._pool.step()
            loss = self._names.fetch(self._pool, ["output0"])["output0"]
        except WorkerFailed as e:
            self.close()
            raise ExecutionError(f"the placed step of {self.graph.name!r} failed: {e}") from None
        except KeyboardInterrupt:                   # the workers' replies are out of step now: start afresh
            self.close()
            raise
        self._sent.update({k: float(v) for k, v in now.items()})
        self.steps += 1
        self._fresh = False
        if self._optimizer is not None:             # it stepped: what torch.optim's step tells a scheduler
            self._optimizer._opt_called = True
        return loss

    def _eager_call(self, inputs: Any, targets: Any):

        n = len(_flat(inputs, targets, self._keys))
        if n != len(self.inputs):
            raise AutoplaceError(f"the step of {self.graph.name!r} takes {len(self.inputs)} tensors (inputs, then "
                                 f"targets), got {n}")
        groups = self._optimizer.param_groups
        if len(groups) != len(self._eager.optimizer.param_groups):
            raise AutoplaceError(f"the optimizer has {len(groups)} param groups, "
                                 f"{len(self._eager.optimizer.param_groups)} when compiled")
        loss = self._eager.step(split_inputs(inputs), as_tuple(targets), groups)
        self.steps += 1
        self._fresh = False
        self._optimizer._opt_called = True
        return loss

    def _scheduled_in(self, values: dict[str, Any]) -> dict[str, float]:
        """The scheduled inputs' values among ``values`` (what the workers hold once set up from them)."""
        return {k: float(values[k]) for k in self._hyper_inputs if k in values}

    def _scheduled_now(self) -> dict[str, Any]:
        """The scheduled inputs' values now, from the optimizer's param groups."""
        import torch


        out = {}
        for name, (k, key) in self._hyper_inputs.items():
            v = scheduled_value(self._optimizer.param_groups[k], key)
            if v is None:
                raise AutoplaceError(f"optimizer.param_groups[{k}] has no {key} as a number now")
            out[name] = torch.tensor(v, dtype=torch.float64)
        return out

    def _switch(self, shapes: tuple, inputs: Any, targets: Any) -> None:
        """Run the step of batches of ``shapes`` from now on: captured and placed the first time (on the same
        devices op for op where its ops are the same), then set up on the workers with the state as it is."""

        if shapes not in self._variants:
            self._variants[shapes] = self._recompile(inputs, targets)
        graph, placement = self._variants[shapes]
        values = {**self._values([*self.parameters, *self.buffers, *self.optimizer_state_names]),
                  **self._scheduled_now()}
        try:
            self._prepare(graph, placement, values)
        except WorkerFailed as e:
            self.close()
            raise ExecutionError(f"the step of {graph.name!r} for inputs of shapes "
                                 f"{[s for s, _ in shapes]} cannot be set up on {self.cluster.name}: {e}") from None
        self.inputs = [op for op in graph.ops if op.type == OpRole.INPUT]
        self._active = shapes
        self._fresh = False
        self._sent = self._scheduled_in(values)

    def reset(self, values: dict[str, Any]) -> None:
        """Set up again from ``values`` (placeholder name -> tensor: the model's and optimizer's state, as
        :func:`initial_values` gives it), no steps run: what compile does after measuring the step
        (:mod:`autoplace.runtime.verdict`). The worker runtimes share the tensors they are set up with."""
        self._check_open()
        if self._eager is not None:
            raise AutoplaceError("reset: a step running in this process is not reset (compile it again)")
        graph, placement = self._variants[self._active]
        try:
            self._prepare(graph, placement, values)
        except WorkerFailed as e:
            self.close()
            raise ExecutionError(f"the placed step of {graph.name!r} cannot be set up again: {e}") from None
        self._initial, self.steps, self._fresh = values, 0, True
        self._sent = self._scheduled_in(values)

    @property
    def variants(self) -> int:
        """How many batch shapes the step has been captured and placed for."""
        return len(self._variants)

    def save(self, path) -> None:
        """Write the placement (``autoplace.placement/v1``): ``autoplace.compile(..., placement=path)`` takes
        it back for the same model, cluster and batch shape, without a search."""

        save_placement(self.placement, path)

    def _values(self, names: list[str]) -> dict[str, Any]:
        self._check_open()
        if self._fresh:                             # nothing ran yet: the state it was set up with
            return {n: self._initial[n].clone() for n in names}
        if self._eager is not None:
            return self._eager.values(names, self._initial)
        try:
            return self._names.fetch(self._pool, names)
        except WorkerFailed as e:
            self.close()
            raise ExecutionError(f"cannot read the state of {self.graph.name!r}: {e}") from None

    def state_dict(self) -> dict[str, Any]:
        """The parameters and buffers as they are now (CPU tensors), keyed as the model's ``state_dict``
        (tied names included, non-persistent buffers not): ``model.load_state_dict`` takes it as it is."""
        values = self._values(sorted(set(self._source.values())))
        return {k: values[self._source[k]] for k in self.state_keys}

    def optimizer_state(self) -> dict[str, dict[str, Any]]:
        """The optimizer's state per parameter name: ``{"fc.weight": {"exp_avg": ..., "step": ...}}``."""
        values = self._values(self.optimizer_state_names)
        out: dict[str, dict[str, Any]] = {}
        for op in self.graph.ops:
            if op.type == OpRole.OPTIMIZER_STATE:
                param, _, key = op.name.rpartition(".")
                out.setdefault(param, {})[key] = values[op.name]
        return out

    def load_into(self, model, optimizer=None) -> None:
        """Copy the trained parameters and buffers into ``model`` (and the optimizer state into
        ``optimizer``, the one the step was compiled with), in place."""
        import torch

        state = self._values([*self.parameters, *self.buffers])
        tied = dict(self.graph.meta.get("tied", {}))
        targets = [*model.named_parameters(), *model.named_buffers()]
        for name, t in targets:                   # every parameter, and every buffer the step holds, must fit
            src = name if name in state else tied.get(name)
            if src not in state:
                if isinstance(t, torch.nn.Parameter):
                    raise AutoplaceError(f"load_into: the model's parameter {name!r} is not one the step of "
                                         f"{self.graph.name!r} trains (another model?)")
                continue
            if tuple(t.shape) != tuple(state[src].shape):
                raise AutoplaceError(f"load_into: the model's {name!r} has shape {tuple(t.shape)}, the step's "
                                     f"{tuple(state[src].shape)} (another model?)")
        missing = sorted(set(self.parameters) - {n for n, _ in targets})
        if missing:
            raise AutoplaceError(f"load_into: the model has no parameter {missing[0]!r} (another model?)")
        with torch.no_grad():
            for name, t in targets:
                src = name if name in state else tied.get(name)
                if src in state:
                    t.copy_(state[src])
        if optimizer is not None:
            params = dict(model.named_parameters())
            for name, st in self.optimizer_state().items():
                p = params[name]
                optimizer.state[p] = {k: v.clone() for k, v in st.items()}

    def close(self) -> None:
        """Stop the worker processes (the state on them is gone: read it first)."""
        self._closed = True
        if self._eager is not None:
            self._eager.close()
        if self._pool is not None:
            self._pool.close()

    def __enter__(self) -> PlacedStep:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        counts = ", ".join(f"{d}: {n}" for d, n in sorted(self.placement.counts().items()))
        where = "in this process" if self.runtime == Runtime.EAGER else "on workers"
        return (f"PlacedStep({self.graph.name!r}, {self.placement.method} on {self.cluster.name}: {counts} ops, "
                f"runtime {self.runtime} ({where}), {self.steps} steps run)")

    def report(self) -> str:
        """What runs, where, and why: the runtime, the ops per device, the simulated step, and — where
        compile measured the searched placement against one device — both measured figures and the
        choice (:class:`Verdict`)."""
        lines = [repr(self)]
        for rec in self.micro_batch_choice:
            m = rec["micro_batches"]
            what = (f"skipped ({rec['skipped']})" if "skipped" in rec else
                    f"{rec['ops']} ops, {rec['ranked_by']} simulates {rec['simulated_s'] * 1e3:.2f} ms"
                    f"{'' if rec['fits'] else ' (out of memory)'}, ranked in {rec['rank_s']:.1f} s")
            lines.append(f"{'*' if rec.get('chosen') else ' '} {m} micro-batch{'es' if m > 1 else ''}: {what}")
        if self.verdict is not None:
            lines.extend(self.verdict.lines())
        return "\n".join(lines)


def initial_values(graph: Graph, model, optimizer) -> dict[str, Any]:
    """The placeholders' starting values: the model's parameters and buffers, and the optimizer's state where
    it has some; where a parameter has none yet, what a fresh optimizer's first step starts from (zeros,
    but :data:`_FRESH`'s keys). The captured update is the steady-state one, so an optimizer whose first
    step takes another path (SGD with momentum and dampening: its buffer starts as the gradient) must have
    stepped once in eager PyTorch first: one clear error says so."""
    import torch

    values: dict[str, Any] = {n: p.detach().cpu().clone() for n, p in model.named_parameters()}
    values.update({n: b.detach().cpu().clone() for n, b in model.named_buffers()})
    params = dict(model.named_parameters())
    group_of = {id(p): g for g in optimizer.param_groups for p in g["params"]}

    for op in graph.ops:
        if op.type == OpRole.HYPERPARAMETER:                           # "<parameter>.<key>": its group's, now
            param, _, key = op.name.rpartition(".")
            values[op.name] = torch.tensor(scheduled_value(group_of[id(params[param])], key), dtype=torch.float64)
        if op.type != OpRole.OPTIMIZER_STATE:
            continue
        param, _, key = op.name.rpartition(".")                  # "<parameter>.<state key>"
        p = params[param]
        own = optimizer.state.get(p, {})
        have = own.get(key)
        spec = op.outputs[0]
        dtype = getattr(torch, spec.dtype)
        group = group_of[id(p)]
        if isinstance(have, torch.Tensor):
            values[op.name] = have.detach().cpu().clone()
        elif key in own:                                          # a number in the optimizer's state
            values[op.name] = torch.full(tuple(spec.shape), float(have), dtype=dtype)
        else:
            if key == "momentum_buffer" and group.get("dampening", 0) and group.get("momentum", 0):
                raise AutoplaceError(f"{type(optimizer).__name__} with momentum and dampening starts its momentum "
                                     "buffer from the first gradient, which the captured steady-state step does "
                                     "not: run one eager optimizer step before compile, or set dampening=0")
            fresh = _FRESH.get(key)
            values[op.name] = torch.full(tuple(spec.shape), float(fresh(group)), dtype=dtype) if fresh else \
                torch.zeros(tuple(spec.shape), dtype=dtype)
    return {op.name: values[op.name] for op in graph.ops if op.name in values}


def hyper_inputs(graph: Graph, model, optimizer) -> dict[str, tuple[int, str]]:
    """Each scheduled input of ``graph`` (``"<parameter>.<key>"``) -> the index of ``optimizer``'s param group
    holding that parameter and the key: where the placed step reads its value at every call."""
    index = {id(p): k for k, g in enumerate(optimizer.param_groups) for p in g["params"]}
    params = dict(model.named_parameters())
    return {op.name: (index[id(params[op.name.rpartition(".")[0]])], op.name.rpartition(".")[2])
            for op in graph.ops if op.type == OpRole.HYPERPARAMETER}
