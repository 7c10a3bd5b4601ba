"""A seeded corpus of bad inputs for the command line (``tests/test_fuzz.py`` runs it).

    .venv/bin/python tests/fuzz_corpus.py [--seed 0] [--count]   # print the cases (or how many per class)

Every case is bad by construction — a field of a valid graph, cluster or placement replaced by a value of
the wrong type or outside its range, a broken file, a bad CLI number or output path, a bad zoo parameter, a
learned placer's ``--set`` value out of its range, a damaged search checkpoint or policy file (each field
of a real one replaced, or the file itself broken or a pickle), a damaged bench ``jobs.jsonl`` line —
and must exit with its expected code (2 or 3 for an error) with one line ``autoplace: error: ...`` naming
the culprit, no traceback, and nothing written. Cases are generated, not hand-picked: each class crosses
its fields with a pool of bad values and the verbs that read them. A checkpoint or policy case's file is
made when the case runs (:func:`state_file`: a tiny real search, once per process, then damaged).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

GOLDEN = Path(__file__).parent / "golden"

#: values that are never a valid size, count, rate or time (JSON-representable; -inf/nan as Python floats,
#: which json.dumps writes as -Infinity/NaN, accepted by Python's decoder)
BAD_NUMBERS = [-1, -0.5, -1e308, float("-inf"), float("inf"), float("nan"), 2**63, 2**64, 10**30, 1e308,
               "12", "", [1], {"a": 1}, True, False]  # 2**63, 2**64: beyond every size, time and rate limit
# (docs/formats.md, "Ranges"); an op's FLOPs may reach 1e24, so they are no bad FLOP counts
BAD_COUNTS = BAD_NUMBERS + [1.5, 0.25]
BAD_STRINGS = [1, 2.5, True, [], {}, ["a"], "\ud800", "a\udfffb"]
BAD_NAMES = BAD_STRINGS + [""]


@dataclass
class Case:
    """One CLI run: ``argv`` with ``{dir}`` standing for the case's folder, ``files`` to write there first
    (name -> text, bytes, or a function making the bytes), ``outputs`` the paths it must leave absent (or
    untouched if listed in ``files``), and the exit codes it may end with (an error: 2 or 3, one line)."""

    name: str
    argv: list[str]
    files: dict[str, str | bytes | Callable[[], bytes] | Special] = field(default_factory=dict)
    outputs: list[str] = field(default_factory=list)
    exit_codes: tuple[int, ...] = (2, 3)
    stdout_has: str = ""            #: a text the output must hold (a case that exits 0)
    listener: str = ""              #: a port ``{port}`` stands for: "nobody" listens, or a "mute" listener


@contextlib.contextmanager
def listening(kind: str):
    """A loopback port for a case: nobody listening on it, or a listener that accepts every connection and
    never answers (:class:`Case`'s ``listener``); yields the port (None for no listener asked)."""
    import socket
    import threading

    if not kind:
        yield None
        return
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    if kind == "nobody":
        sock.close()
        yield port
        return
    sock.listen()
    held: list = []

    def accept():
        try:
            while True:
                held.append(sock.accept()[0])
        except OSError:
            pass

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield port
    finally:
        sock.close()
        for c in held:
            c.close()


@dataclass(frozen=True)
class Special:
    """A file that is not a regular one, made by :func:`make_special`: a FIFO, or a symbolic link to
    ``target`` (``/dev/zero``; a missing path: a link to nothing)."""

    kind: str
    target: str = ""


def make_special(path: Path, content: Special) -> None:
    import os

    if content.kind == "fifo":
        os.mkfifo(path)
    elif content.kind == "link":
        os.symlink(content.target, path)
    elif content.kind == "folder":
        path.mkdir()
    else:
        raise ValueError(content.kind)


def _golden(name: str) -> dict:
    return json.loads((GOLDEN / name).read_text())


def _dump(obj) -> str:
    return json.dumps(obj)


def _verbs_for_graph(graph_file: str) -> list[tuple[str, list[str], list[str]]]:
    return [
        ("simulate", ["simulate", graph_file, "-c", "{dir}/cluster.json", "-p", "{dir}/placement.json"], []),
        ("place", ["place", graph_file, "-c", "{dir}/cluster.json", "-m", "single-gpu", "-o", "{dir}/out.json"],
         ["out.json"]),
        ("compare", ["compare", graph_file, "-c", "{dir}/cluster.json", "--methods", "single-gpu,metis"], []),
    ]


def _base_files() -> dict[str, str]:
    return {"graph.json": _dump(_golden("graph_v1.json")), "cluster.json": _dump(_golden("cluster_v1.json")),
            "placement.json": _dump(_golden("placement_v1.json"))}


def _field_cases(rng: random.Random, doc: dict, file: str, key: str, label: str, fields: dict) -> list[Case]:
    """One case per (field, bad value): ``doc[key][k][field] = value`` for a random item ``k`` (``doc[key]``
    itself where it is an object), run through a random graph verb."""
    out = []
    for fname, values in fields.items():
        for v in values:
            d = copy.deepcopy(doc)
            items = d[key]
            k = rng.randrange(len(items)) if isinstance(items, list) else None
            (items[k] if k is not None else items)[fname] = v
            verb, argv, outs = rng.choice(_verbs_for_graph("{dir}/graph.json"))
            where = f"{label}[{k}]" if k is not None else label
            out.append(Case(f"{where}.{fname}={v!r} via {verb}", argv, {**_base_files(), file: _dump(d)}, outs))
    return out


def graph_field_cases(rng: random.Random) -> list[Case]:
    graph = _golden("graph_v1.json")
    fields = {"param_bytes": BAD_COUNTS, "flops": [v for v in BAD_NUMBERS if v not in (2**63, 2**64)],
              "bytes_touched": BAD_NUMBERS,
              "output_bytes": [[v] for v in BAD_COUNTS] + ["7", 3],
              "cost": [{"gpu": v} for v in BAD_NUMBERS] + [[1], "x"],
              "name": BAD_NAMES, "type": BAD_STRINGS, "inputs": [[v] for v in BAD_STRINGS] + ["x", 5],
              "device_types": [[v] for v in BAD_STRINGS] + ["gpu", [], ["tpu"]],
              "colocation_group": BAD_STRINGS, "phase": BAD_STRINGS,
              "outputs": [[{"shape": [v], "dtype": "float32"}] for v in BAD_COUNTS]
              + [[{"shape": [2], "dtype": v}] for v in BAD_STRINGS + ["float99"]]}
    cases = _field_cases(rng, graph, "graph.json", "ops", "graph.ops", fields)
    for value in (["x"], {"a": [1]}, [[1, 2]]):             # an extra field holding any JSON is metadata: it places
        g = copy.deepcopy(graph)
        for op in g["ops"]:                                  # the fields the grouping rules read
            op.update({k: value for k in ("layer", "fwd", "block", "branch", "cell", "step", "part", "stack")})
        cases.append(Case(f"graph.ops[*] metadata={value!r} (valid) via compare", [
            "compare", "{dir}/graph.json", "-c", "{dir}/cluster.json", "--methods", "local-search,rl,hdp,gdp",
            "--budget", "0.2", "--seed", "0"], {**_base_files(), "graph.json": _dump(g)}, exit_codes=(0,),
            stdout_has="local-search"))
    for fname, v in [("name", x) for x in BAD_NAMES] + [("ops", x) for x in ("x", 1, {}, [], [1], None)]:
        g = copy.deepcopy(graph)
        g[fname] = v
        verb, argv, outs = rng.choice(_verbs_for_graph("{dir}/graph.json"))
        cases.append(Case(f"graph.{fname}={v!r} via {verb}", argv, {**_base_files(), "graph.json": _dump(g)}, outs))
    return cases


def graph_structure_cases(rng: random.Random) -> list[Case]:
    graph = _golden("graph_v1.json")
    out = []

    def add(name, g):
        verb, argv, outs = rng.choice(_verbs_for_graph("{dir}/graph.json"))
        out.append(Case(f"{name} via {verb}", argv, {**_base_files(), "graph.json": g}, outs))

    g = copy.deepcopy(graph)
    g["ops"][0]["inputs"] = ["update_w"]
    add("cycle", _dump(g))
    g = copy.deepcopy(graph)
    g["ops"][1]["name"] = "x"
    add("duplicate op name", _dump(g))
    g = copy.deepcopy(graph)
    g["ops"][2]["inputs"] = ["nope"]
    add("unknown input", _dump(g))
    g = copy.deepcopy(graph)
    g["ops"][2]["inputs"] = ["x:7"]
    add("input output index out of range", _dump(g))
    g = copy.deepcopy(graph)
    g["ops"] = [g["ops"][0]] * 2
    add("same op twice", _dump(g))
    for digits in ("²", "٣", "1²"):                         # digits Python's int() does not read
        g = copy.deepcopy(graph)
        g["ops"][2]["inputs"] = [f"x:{digits}"]
        add(f"input index {digits!r}", _dump(g))
    for where in ("flops", "param_bytes", "meta"):        # past Python's 4,300-digit integer limit
        g = copy.deepcopy(graph)
        if where == "meta":
            g["big"] = 0
        else:
            g["ops"][1][where] = 0
        key = "big" if where == "meta" else where
        text = _dump(g).replace(f'"{key}": 0', f'"{key}": ' + "9" * 5001, 1)
        add(f"a 5,001-digit integer as {where}", text)
    # whole-graph sums that overflow 64-bit integers
    g = copy.deepcopy(graph)
    for o in g["ops"]:
        o["param_bytes"] = 2**62
    add("parameter bytes summing past 2^63", _dump(g))
    for text in ("", "{", "[]", "null", "42", '{"format": "autoplace.graph/v2"}', '{"format": "x"}',
                 '{"name": "g"}', "\x00\x01\x02", "[" * 100_000 + "]" * 100_000,
                 '{"format": "autoplace.graph/v1", "name": "g", "ops": [], "meta": ' + "[" * 50_000 + "]" * 50_000
                 + "}"):
        add(f"graph file {text[:20]!r}", text)
    add("graph with no ops", _dump({"format": "autoplace.graph/v1", "name": "empty", "ops": []}))
    add("not UTF-8", b"\xff\xfe\x00{")
    add("corrupt gzip stream",
        b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03" + bytes(rng.randrange(256) for _ in range(64)))
    add("truncated gzip", b"\x1f\x8b\x08\x00")
    return out


def cluster_cases(rng: random.Random) -> list[Case]:
    cluster = _golden("cluster_v1.json")
    fields = {"memory_bytes": BAD_COUNTS + [0], "peak_flops": BAD_NUMBERS + [0, 1e-300],
              "memory_bandwidth": BAD_NUMBERS + [0, 1e-300], "op_overhead_s": BAD_NUMBERS,
              "concurrency": BAD_COUNTS + [0], "send_cost_s_per_byte": BAD_NUMBERS,
              "send_overhead_s": BAD_NUMBERS, "recv_overhead_s": BAD_NUMBERS, "name": BAD_NAMES,
              "type": BAD_NAMES, "send_engines": BAD_COUNTS, "recv_engines": BAD_COUNTS,
              "achievable_flops": BAD_NUMBERS + [0, 1e-300], "achievable_bandwidth": BAD_NUMBERS + [0, 1e-300]}
    out = _field_cases(rng, cluster, "cluster.json", "devices", "cluster.devices", fields)
    out += _field_cases(rng, cluster, "cluster.json", "default_link", "cluster.default_link",
                        {"bandwidth": BAD_NUMBERS + [0, 1e-300], "latency_s": BAD_NUMBERS, "overhead_s": BAD_NUMBERS,
                         "segments": [[v] for v in BAD_STRINGS] + ["board0.up", ["nope"], {"a": 1}]})
    topology = _golden("cluster_v1_topology.json")
    out += _field_cases(rng, topology, "cluster.json", "segments", "cluster.segments",
                        {"name": BAD_NAMES, "bandwidth": BAD_NUMBERS + [0, 1e-300]})
    out += _field_cases(rng, topology, "cluster.json", "links", "cluster.links",
                        {"overhead_s": BAD_NUMBERS,
                         "segments": ["board0.up", ["nope"], ["board0.up", "board0.up"], [3]]})
    for name, mutate in (("duplicate segment", lambda t: t["segments"].append(dict(t["segments"][0]))),
                         ("segments not a list", lambda t: t.update(segments={"name": "s"})),
                         ("segment not an object", lambda t: t.update(segments=["board0.up"])),
                         ("misspelt link field", lambda t: t["links"][0].update(overhed_s=1e-6)),
                         ("misspelt segment field", lambda t: t["segments"][0].update(bandwith=1e9)),
                         ("misspelt default link field",
                          lambda t: t.update(default_link={"bandwidth": 1e9, "latncy_s": 0})),
                         ("achievable above peak", lambda t: t["devices"][0].update(achievable_flops=1e15)),
                         ("achievable bandwidth above peak",
                          lambda t: t["devices"][1].update(achievable_bandwidth=1e15))):
        t = copy.deepcopy(topology)
        mutate(t)
        out.append(Case(name, ["clusters", "{dir}/cluster.json"], {"cluster.json": _dump(t)}))
    c = copy.deepcopy(cluster)
    c["devices"][1]["name"] = c["devices"][0]["name"]
    out.append(Case("duplicate device", ["clusters", "{dir}/cluster.json"], {"cluster.json": _dump(c)}))
    for text in ("", "{", "[]", '{"format": "autoplace.cluster/v9"}'):
        out.append(Case(f"cluster file {text!r}", ["clusters", "{dir}/cluster.json"], {"cluster.json": text}))
    return out


def placement_cases(rng: random.Random) -> list[Case]:
    placement = _golden("placement_v1.json")
    out = []
    variants = []
    p = copy.deepcopy(placement)
    p["assignment"]["nope"] = "gpu:0"
    variants.append(("unknown op", p))
    p = copy.deepcopy(placement)
    p["assignment"].pop(next(iter(p["assignment"])))
    variants.append(("missing op", p))
    p = copy.deepcopy(placement)
    p["assignment"]["mm"] = "gpu:9"
    variants.append(("unknown device", p))
    p = copy.deepcopy(placement)
    p["assignment"]["lookup"] = "gpu:0"
    variants.append(("cpu-only op on a gpu", p))
    p = copy.deepcopy(placement)
    p["assignment"]["w"], p["assignment"]["grad_w"] = "gpu:0", "gpu:1"
    variants.append(("co-location group split", p))
    for v in BAD_STRINGS:
        p = copy.deepcopy(placement)
        p["assignment"]["mm"] = v
        variants.append((f"device {v!r}", p))
    for key, v in [("assignment", []), ("assignment", "x"), ("graph", 1), ("format", "autoplace.placement/v0")]:
        p = copy.deepcopy(placement)
        p[key] = v
        variants.append((f"{key}={v!r}", p))
    for value in (1.5, True, None, float("nan"), 0.0):        # an Accelerate device map's value of the wrong kind
        variants.append((f"device map value {value!r}", {"": value}))
    for name, p in variants:
        argv = rng.choice([["simulate", "{dir}/graph.json", "-c", "{dir}/cluster.json", "-p", "{dir}/placement.json"],
                           ["simulate", "{dir}/graph.json", "-c", "{dir}/cluster.json", "-p", "{dir}/placement.json",
                            "--trace", "{dir}/trace.json"]])
        out.append(Case(f"placement {name}", argv, {**_base_files(), "placement.json": _dump(p)}, ["trace.json"]))
    return out


def network_cases(rng: random.Random) -> list[Case]:
    """A cluster whose rendezvous nobody answers, or something answers that never replies (every wait has
    a deadline: twice ``--timeout``); a valid cluster at the documented limits, which must simulate."""
    out = []
    graph = _golden("graph_v1.json")
    for kind, expect in (("nobody", "no ranks answer"), ("mute", "no answer within its deadline")):
        cluster = json.loads(_hosts_cluster(rendezvous="127.0.0.1:{port}"))
        for verb in (["measure", "{dir}/graph.json", "-c", "{dir}/hosts.json", "-p", "{dir}/dmap.json", "--timeout",
                      "1"],):
            out.append(Case(f"rendezvous where {kind} answers ({expect})", verb,
                            {"graph.json": _dump(graph), "hosts.json": _dump(cluster),
                             "dmap.json": _dump({"": "a/cpu:0"})}, listener=kind))
    limits = json.loads(_hosts_cluster())
    for d in limits["devices"]:
        d.update(op_overhead_s=1e6, achievable_bandwidth=1.0, memory_bandwidth=1.0, peak_flops=1.0)
    limits["default_link"] = {"bandwidth": 1.0, "latency_s": 1e6, "overhead_s": 1e6}
    out.append(Case("a cluster at the documented limits (valid) simulates in every scenario",
                    ["simulate", "{dir}/graph.json", "-c", "{dir}/limits.json", "-p", "{dir}/dmap.json"],
                    {"graph.json": _dump(graph), "limits.json": _dump(limits), "dmap.json": _dump({"": "a/cpu:0"})},
                    exit_codes=(0,), stdout_has="step"))
    return out


SPECIALS = {"a FIFO": Special("fifo"), "a link to /dev/zero": Special("link", "/dev/zero"),
            "a link to nothing": Special("link", "/nonexistent/x"), "a folder": Special("folder")}


def special_file_cases(rng: random.Random) -> list[Case]:
    """Every file a command reads given as a FIFO, a link to a device or to nothing, or a folder: one line
    saying what it is (reading a FIFO or a device would block or never end), nothing written."""
    files = _base_files()
    uses = {"graph": (["simulate", "{dir}/x", "-c", "{dir}/cluster.json", "-p", "{dir}/placement.json"], {}),
            "cluster": (["place", "{dir}/graph.json", "-c", "{dir}/x", "-m", "single-gpu", "-o", "{dir}/out.json"], {}),
            "placement": (["simulate", "{dir}/graph.json", "-c", "{dir}/cluster.json", "-p", "{dir}/x"], {}),
            "policy": (["place", "{dir}/graph.json", "-c", "{dir}/cluster.json", "-m", "gdp", "--policy", "{dir}/x",
                        "--zero-shot", "-o", "{dir}/out.json"], {}),
            "checkpoint": ([*_PLACE, "-m", "rl", *LEARNED_ARGS["rl"], "--resume", "{dir}/ck", "-o", "{dir}/out.json"],
                           {"ck/other.txt": "x"}),
            "onnx model": (["import", "{dir}/x.onnx", "-o", "{dir}/out.json"], {})}
    names = {"checkpoint": "ck/checkpoint.safetensors", "onnx model": "x.onnx"}
    out = []
    for use, (argv, extra) in uses.items():
        for what, special in SPECIALS.items():
            name = names.get(use, "x")
            if use == "checkpoint" and what == "a folder":
                continue                            # a folder there is a checkpoint folder's folder: below
            out.append(Case(f"{use} is {what}", argv, {**files, "placement.json": _dump(_golden("placement_v1.json")),
                                                      **extra, name: special}, ["out.json"]))
    out.append(Case("checkpoint is a folder", [*_PLACE, "-m", "rl", *LEARNED_ARGS["rl"], "--resume", "{dir}/ck",
                                               "-o", "{dir}/out.json"],
                    {**files, "ck/checkpoint.safetensors": Special("folder")}, ["out.json"]))
    return out


def cli_number_cases(rng: random.Random) -> list[Case]:
    out = []
    base = ["{dir}/graph.json", "-c", "{dir}/cluster.json"]
    bad = ["-1", "nan", "inf", "-inf", "abc", "", "1e999", "0x10", "1e308", "1e8"]
    for v in bad:
        out.append(Case(f"place --budget {v}", ["place", *base, "-m", "cp-sat", "--budget", v, "-o", "{dir}/out.json"],
                        _base_files(), ["out.json"]))
        out.append(Case(f"place --refine-budget {v}", ["place", *base, "-m", "single-gpu", "--refine",
                                                        "--refine-budget", v, "-o", "{dir}/out.json"], _base_files(),
                        ["out.json"]))
        out.append(Case(f"compare --budget {v}", ["compare", *base, "--methods", "single-gpu", "--budget", v],
                        _base_files()))
        out.append(Case(f"measure --timeout {v}", ["measure", *base, "-p", "{dir}/placement.json", "--timeout", v],
                        _base_files()))
    for v in ["abc", "1.5", "nan", "-1", "", "1e3", str(2**70)]:
        out.append(Case(f"place --seed {v}", ["place", *base, "-m", "metis", "--seed", v, "-o", "{dir}/out.json"],
                        _base_files(), ["out.json"]))
        out.append(Case(f"compare --seed {v}", ["compare", *base, "--methods", "metis", "--seed", v], _base_files()))
    for v in ["", ",", " , ", "single-gpu,,metis", "nope", "single-gpu,nope", "[/x]", "\udcff"]:
        out.append(Case(f"compare --methods {v!r}", ["compare", *base, "--methods", v], _base_files()))
        out.append(Case(f"place --method {v!r}", ["place", *base, "-m", v, "-o", "{dir}/out.json"], _base_files(),
                        ["out.json"]))
    for v in ["0", "-3", "x", "2.5"]:
        out.append(Case(f"profile --steps {v}", ["profile", *base, "--steps", v, "-o", "{dir}/out.json"],
                        _base_files(), ["out.json"]))
        out.append(Case(f"profile --rounds {v}", ["profile", *base, "--rounds", v, "-o", "{dir}/out.json"],
                        _base_files(), ["out.json"]))
    return out


def output_cases(rng: random.Random) -> list[Case]:
    out = []
    base = ["{dir}/graph.json", "-c", "{dir}/cluster.json"]
    for target in ["", "{dir}", "{dir}/missing/out.json", "{dir}/graph.json/out.json"]:
        out.append(Case(f"place -o {target!r}", ["place", *base, "-m", "single-gpu", "-o", target], _base_files()))
        out.append(Case(f"zoo export -o {target!r}", ["zoo", "export", "toy-mlp", "-o", target], {}))
        out.append(Case(f"clusters -o {target!r}", ["clusters", "k80x2", "-o", target], {}))
        out.append(Case(f"simulate --trace {target!r}", ["simulate", *base, "-p", "{dir}/placement.json",
                                                          "--trace", target], _base_files()))
    for option in ("--checkpoint", "--curve", "--resume"):
        for target in ("", " ", "-") if option != "--curve" else ("", " "):
            out.append(Case(f"place -m rl {option} {target!r}", ["place", *base, "-m", "rl", "--samples", "8", option,
                                                                 target, "-o", "{dir}/out.json"], _base_files(),
                            ["out.json"]))
    out.append(Case("place -m rl --checkpoint a file", ["place", *base, "-m", "rl", "--samples", "8", "--checkpoint",
                                                        "{dir}/graph.json", "-o", "{dir}/out.json"], _base_files(),
                    ["out.json"]))
    out.append(Case("place -m rl --resume a folder that does not exist",
                    ["place", *base, "-m", "rl", "--samples", "8", "--resume", "{dir}/nope", "-o", "{dir}/out.json"],
                    _base_files(), ["out.json"]))
    for target in ("", " "):
        out.append(Case(f"report --png {target!r}", ["report", *base, "-p", "{dir}/placement.json", "--png", target,
                                                     "-o", "{dir}/r.html"], _base_files(), ["r.html"]))
    for target in ("", "-", " ", "{dir}/graph.json"):
        out.append(Case(f"bench -o {target!r}", ["bench", "--quick", "--tables", "htf-mpr", "-o", target],
                        _base_files()))
        out.append(Case(f"bench --list -o {target!r}", ["bench", "--list", "-o", target], _base_files()))
    out.append(Case("bench --list --graph nosuch", ["bench", "--list", "--graph", "nosuch"], {}))
    # an error after the output would have been written: the existing output must stay as it was
    out.append(Case("place onto an existing output, unknown device in the cluster file",
                    ["place", *base, "-m", "single-gpu", "-o", "{dir}/placement.json"],
                    {**_base_files(),
                     "cluster.json": '{"format": "autoplace.cluster/v1", "name": "c", "devices": []}'}))
    return out


def zoo_param_cases(rng: random.Random) -> list[Case]:
    from autoplace.zoo import get_model

    out = []
    bad_int = ["-1", "0", "0.5", "2.5", "nan", "inf", "-inf", "1e12", str(2**40), "true", "[1]", '{"a": 1}', '"x"', ""]
    bad_float = ["-0.1", "1.5", "nan", "inf", "-inf", "true", "[0.5]", '"x"', ""]
    for model in ("toy-mlp", "layered-dag", "rnnlm-2", "inception-v3", "wavenet-2x18", "transformer-xl-2"):
        for key, default in get_model(model).defaults.items():
            pool = bad_float if isinstance(default, float) else [v for v in bad_int if key != "seed" or v != "0"]
            for v in rng.sample(pool, 3):
                out.append(Case(f"zoo export {model} -P {key}={v}", ["zoo", "export", model, "-P", f"{key}={v}",
                                                                      "-o", "{dir}/z.json"], {}, ["z.json"]))
    for v in ["nope=1", "=1", "x", "dtype=float99", "dtype=1"]:
        out.append(Case(f"zoo export toy-mlp -P {v}", ["zoo", "export", "toy-mlp", "-P", v, "-o", "{dir}/z.json"],
                        {}, ["z.json"]))
    return out


def curve_and_tag_cases(rng: random.Random) -> list[Case]:
    """Training curves that are not curves (``report --curve``: NaN rows, negative samples, text), and the
    expert placer's unit tags that are not strings or numbers."""
    header = "samples,wall_s,best_step_s,mean_step_s,failed,mean_reward\n"
    rows = ["8,0.1,nan,0.2,0,1", "8,0.1,0.1,nan,0,1", "-8,0.1,0.1,0.2,0,1", "8,-0.1,0.1,0.2,0,1", "8,0.1,0.1,0.2,2,1",
            "8,0.1,0.1,0.2,0,nan", "8,0.1,0.1,0.2,0,inf", "8.5,0.1,0.1,0.2,0,1", "x,0.1,0.1,0.2,0,1", "8,0.1",
            "8,0.1,0,0.2,0,1", "8,0.1,-1,0.2,0,1"]
    out = []
    for r in rows:
        out.append(Case(f"report --curve with the row {r!r}",
                        ["report", "{dir}/graph.json", "-c", "{dir}/cluster.json", "-p", "{dir}/placement.json",
                         "--curve", "{dir}/c.csv", "-o", "{dir}/r.html"], {**_base_files(), "c.csv": header + r + "\n"},
                        ["r.html"]))
    for text in ("", "a,b\n1,2\n", b"\xff\xfe", header.replace("samples", "samplez")):
        out.append(Case(f"report --curve file {str(text)[:20]!r}",
                        ["report", "{dir}/graph.json", "-c", "{dir}/cluster.json", "-p", "{dir}/placement.json",
                         "--curve", "{dir}/c.csv", "-o", "{dir}/r.html"], {**_base_files(), "c.csv": text}, ["r.html"]))
    graph = _golden("graph_v1.json")
    for key in ("layer", "block", "cell", "role"):
        for v in ([1], {"a": 1}, True, [[0]]):
            g = copy.deepcopy(graph)
            for op in g["ops"]:
                op[key] = 0
            g["ops"][rng.randrange(len(g["ops"]))][key] = v
            out.append(Case(f"expert with {key}={v!r}", ["place", "{dir}/graph.json", "-c", "{dir}/cluster.json", "-m",
                                                         "expert", "-o", "{dir}/out.json"],
                            {**_base_files(), "graph.json": _dump(g)}, ["out.json"]))
    return out


def _captured_graph() -> dict:
    """A tiny captured training step (two linear layers, SGD) with its aten program."""
    import torch

    from autoplace.capture import capture_training_step
    from autoplace.formats import graph_to_dict

    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    g = capture_training_step(m, torch.randn(5, 4), torch.nn.functional.cross_entropy,
                              torch.optim.SGD(m.parameters(), lr=0.1), targets=torch.randint(0, 2, (5,)), name="tiny")
    return graph_to_dict(g)


def program_cases(rng: random.Random) -> list[Case]:
    """Captured programs whose aten calls are damaged, through ``export`` and ``measure``."""
    graph = _captured_graph()
    placement = {"format": "autoplace.placement/v1", "graph": graph["name"], "cluster": "k80x2", "method": "m",
                 "assignment": {o["name"]: "gpu:0" for o in graph["ops"]}}
    called = [i for i, o in enumerate(graph["ops"]) if o.get("call")]
    damage = [("a missing op", lambda c: c["args"].__setitem__(0, {"ref": "no-such-op"})),
              ("an output index out of range", lambda c: c["args"].__setitem__(0, {"ref": c["args"][0]["ref"] + ":9"}
                                                                               if isinstance(c["args"][0], dict)
                                                                               and "ref" in c["args"][0] else 5)),
              ("an unknown target", lambda c: c.__setitem__("target", "aten.no_such_op.default")),
              ("a target that is not aten", lambda c: c.__setitem__("target", "os.system")),
              ("args not a list", lambda c: c.__setitem__("args", "x")),
              ("kwargs not an object", lambda c: c.__setitem__("kwargs", [1])),
              ("a tagged argument of unknown kind", lambda c: c["args"].__setitem__(0, {"what": 1})),
              ("an unknown scalar", lambda c: c["args"].__setitem__(0, {"scalar": "nope"})),
              ("an unknown dtype", lambda c: c["kwargs"].__setitem__("dtype", {"dtype": "torch.float99"}))]
    out = []
    for what, hurt in damage:
        for _ in range(2):
            g = copy.deepcopy(graph)
            k = rng.choice(called)
            hurt(g["ops"][k]["call"])
            files = {"graph.json": _dump(g), "placement.json": _dump(placement)}
            out.append(Case(f"export: op {g['ops'][k]['name']}'s call has {what}",
                            ["export", "{dir}/graph.json", "-p", "{dir}/placement.json", "-o", "{dir}/placed.py",
                             "--device-map", "{dir}/map.json"], files, ["placed.py", "map.json"]))
    for outputs in ([{"ref": "nope"}], "x", [{"ref": graph["ops"][0]["name"] + ":3"}]):
        g = copy.deepcopy(graph)
        g["program"]["outputs"] = outputs
        out.append(Case(f"export: program outputs {outputs!r}",
                        ["export", "{dir}/graph.json", "-p", "{dir}/placement.json", "-o", "{dir}/placed.py"],
                        {"graph.json": _dump(g), "placement.json": _dump(placement)}, ["placed.py"]))
    return out


def onnx_cases(rng: random.Random) -> list[Case]:
    """ONNX files that are not models autoplace can import: bad opsets, broken bytes, unknown ops."""
    import onnx
    from onnx import TensorProto, helper

    def model(opset: int, op_type: str = "Relu", domain: str = "") -> bytes:
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
        graph = helper.make_graph([helper.make_node(op_type, ["x"], ["y"], domain=domain)], "g", [x], [y])
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid(domain, opset)])
        m.ir_version = 8
        return m.SerializeToString()

    out = []
    for opset in (999, 10_000, 0, -1):
        out.append(Case(f"onnx opset {opset}", ["import", "{dir}/m.onnx", "-o", "{dir}/g.json"],
                        {"m.onnx": model(opset)}, ["g.json"]))
    out.append(Case("onnx op from an unknown domain", ["import", "{dir}/m.onnx", "-o", "{dir}/g.json"],
                    {"m.onnx": model(1, "Frob", "com.example")}, ["g.json"]))
    good = model(onnx.defs.onnx_opset_version())
    for cut in sorted(rng.sample(range(1, len(good)), 4)):
        out.append(Case(f"onnx file cut at byte {cut}", ["import", "{dir}/m.onnx", "-o", "{dir}/g.json"],
                        {"m.onnx": good[:cut]}, ["g.json"]))
    for junk in (b"", b"not a model", bytes(range(256))):
        out.append(Case(f"onnx file {junk[:12]!r}", ["import", "{dir}/m.onnx", "-o", "{dir}/g.json"],
                        {"m.onnx": junk}, ["g.json"]))
    return out


# ------------------------------------------------------------------------------------------ learned placers
#: the learned placers' command lines on the golden graph and cluster: tiny searches
LEARNED_ARGS = {
    "rl": ["--set", "samples_per_update=4"],
    "hdp": ["--set", "samples_per_update=4", "--set", "groups=4"],
    "gdp": ["--set", "samples_per_update=4", "--set", "prior=none"],
    "htf-mpr": ["--set", "random_homogeneous=2", "--set", "population=4", "--set", "pairs=2", "--set", "top_x=2"],
}
_PLACE = ["place", "{dir}/graph.json", "-c", "{dir}/cluster.json", "--seed", "0", "--samples", "8"]

#: values no setting of a kind takes (an int setting's pool holds floats, strings and out-of-range ints …)
BAD_SETTING = {"int": ["-1", "1.5", "abc", "true", "1e12", "nan", "[1]", '""'],
               "float": ["-1", "nan", "inf", "-inf", "1e300", "abc", "true", "[0.5]"],
               "str": ["1", "nope", "[]", "true"], "bool": ["2", "abc", "[]", "0.5"]}


def set_cases(rng: random.Random) -> list[Case]:
    """Every learned placer's every ``--set`` key given values outside its range (or of the wrong type),
    and unknown keys: refused before any search."""
    from dataclasses import fields

    from autoplace.placers import get_placer

    out = []
    for method, base in LEARNED_ARGS.items():
        config = get_placer(method).config
        for f in fields(config):
            kind = str(f.type).split("|")[0].strip()
            pool = list(BAD_SETTING.get(kind, BAD_SETTING["str"]))
            if f.name in ("group_rules",):
                pool = ["nope", "", ",", "colocation,nope"]
            if f.name == "torch_device":
                pool = ["cuda:9", "tpu", "cuda:-1", "1", "gpu", "mps", "xpu", "meta"]
            if f.name == "prior":
                pool = ["nope", "1", "[]"]
            if f.name == "model":
                pool = ["nope", "1"]
            if f.name == "coarsen":
                pool = ["nope", "1"]
            if f.name == "temperature":
                pool = ["1e-300", "0", "-1", "nan", "1e300"]
            if kind in ("int", "float"):
                pool = pool + ["1" + "0" * 400]           # an integer no float holds
            if f.name == "invalid_reward":                # a reward: negative is its range
                pool = ["1", "nan", "-inf", "-1e300", "abc", "true"]
            for v in rng.sample(pool, min(len(pool), 5)) + [pool[-1]] * (kind in ("int", "float")):
                out.append(Case(f"{method} --set {f.name}={v}",
                                [*_PLACE, "-m", method, *base, "--set", f"{f.name}={v}", "-o", "{dir}/out.json"],
                                _base_files(), ["out.json"]))
        for v in ("nope=1", "=1", "x", "samples_per_update", "groups=1" + "0" * 5000, "hidden=" + "[" * 5000):
            out.append(Case(f"{method} --set {v}", [*_PLACE, "-m", method, "--set", v, "-o", "{dir}/out.json"],
                            _base_files(), ["out.json"]))
    return out


@functools.cache
def state_file(method: str) -> tuple[bytes, bytes | None]:
    """A real checkpoint of ``method``'s tiny search on the golden graph and cluster (and, for gdp, the
    policy file it trained): made once per process."""
    import contextlib
    import io
    import tempfile

    from autoplace.cli import main
    from autoplace.search.checkpoint import CHECKPOINT_FILE

    with tempfile.TemporaryDirectory() as d:
        for name, text in _base_files().items():
            Path(d, name).write_text(text)
        argv = [a.replace("{dir}", d) for a in [*_PLACE, "-m", method, *LEARNED_ARGS[method]]]
        extra = ["--checkpoint", f"{d}/ck", "-o", f"{d}/out.json"]
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(argv + extra) == 0, method
            policy = None
            if method == "gdp":
                train = ["train", "--graphs", f"{d}/graph.json", "-c", f"{d}/cluster.json", "--samples", "8",
                         "--set", "samples_per_update=4", "--set", "prior=none", "-o", f"{d}/p.safetensors"]
                assert main(train) == 0
                policy = Path(d, "p.safetensors").read_bytes()
        return Path(d, "ck", CHECKPOINT_FILE).read_bytes(), policy


def _damaged(method: str, which: int, change: Callable) -> Callable[[], bytes]:
    """The bytes of ``method``'s checkpoint (``which=0``) or policy (1) with ``change(state)`` applied."""
    def make() -> bytes:
        from autoplace.formats.state import decode_state, encode_state

        state = decode_state(state_file(method)[which], "x")
        change(state)
        return encode_state(state)
    return make


def _at(state, key: str):
    """The object a dotted path names (``problems.0.cache``: list indices and integer dict keys by number)
    and the path's last part, as a key of it."""
    d = state
    parts = key.split(".")
    for part in parts[:-1]:
        d = d[int(part)] if isinstance(d, list) or (part.isdigit() and int(part) in d) else d[part]
    leaf = parts[-1]
    return d, int(leaf) if leaf.isdigit() and (isinstance(d, list) or int(leaf) in d) else leaf


def _set(key, value):
    def change(state):
        d, leaf = _at(state, key)
        if value is _DELETE:
            d.pop(leaf) if isinstance(d, list) else d.pop(leaf, None)
        else:
            d[leaf] = _made(value)
    return change


def _made(v):
    """``v`` with the functions in it (tensors and arrays made on demand) called."""
    if callable(v):
        return v()
    if isinstance(v, dict):
        return {k: _made(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_made(x) for x in v]
    return v


_DELETE = object()


def _tensor(*shape, dtype="float32"):
    def make():
        import torch

        return torch.zeros(*shape, dtype=getattr(torch, dtype))
    return make


def _array(values, dtype="int64"):
    def make():
        import numpy as np

        return np.array(values, dtype=dtype)
    return make


def _scalar_tensor(value):
    def make():
        import torch

        return torch.tensor(value)
    return make


def _nested(depth: int):
    v: object = 1
    for _ in range(depth):
        v = [v]
    return v


NAN, INF = float("nan"), float("inf")
#: a value of the wrong shape or type where a scalar is stored: arrays, tensors (0-d too)
SHAPE_POOL = [_array([0, 0]), _array(0), _tensor(2), _scalar_tensor(0)]
#: what an unknown field may hold
EXTRA_POOL = [1, NAN, _array([1, 2]), 10**30, _nested(400)]
COUNT_POOL = [-5, "7", 1.5, None, True, 2**70, NAN]
SECONDS_POOL = [-1.0, "1", None, True, NAN, INF, [1.0]]
TENSOR_POOL = ["x", None, 5, [1.0], _tensor(2)]
CURVE_POOL = ["x", [[1, 2]], [[1, 0.1, NAN, 1.0, 0.0, 0.0]], [[-1, 0.1, 1.0, 1.0, 0.0, 0.0]],
              [["a", 0.1, 1.0, 1.0, 0.0, 0.0]], [[1, 0.1, 1.0, 1.0, 2.0, 0.0]], [[1, 0.1, -1.0, 1.0, 0.0, 0.0]],
              ((1, 0.1, 1.0, 1.0, 0.0, 0.0),)]
GROUPS_POOL = ["x", _array([99] * 4), _array([-1] * 4), _array([0.5] * 4, "float64"), _array([[0]]), 7]

#: each checkpoint field, its pool of bad values (the identity fields: another graph, cluster, config, seed)
CHECKPOINT_FIELDS = {
    "format": ["autoplace.rl/v1", "x", None, 1, _array([1, 2])], "graph_hash": ["0" * 64, None, 1, _array([1, 2])],
    "cluster_hash": ["0" * 64, None], "graph": SHAPE_POOL[:1], "config": [{}, "x", None, _array([1, 2])],
    "config.group_rules": SHAPE_POOL[:1], "seed": [7, "0", None, *SHAPE_POOL], "env": SHAPE_POOL[:1],
    "samples": COUNT_POOL, "updates": COUNT_POOL, "extra": EXTRA_POOL, "cache.extra": [1],
    "wall_s": SECONDS_POOL, "curve": CURVE_POOL,
    "cache": ["x", {}, {"groups": _array([[0, 9]]), "step": _array([1.0], "float64"), "ok": _array([True], "bool")},
              {"groups": _array([[0, 0]]), "step": _array([-1.0], "float64"), "ok": _array([True], "bool")},
              {"groups": _array([[0, 0]]), "step": _array([1.0, 2.0], "float64"), "ok": _array([True], "bool")},
              {"groups": _array([[0, 0]]), "step": _array([1.0], "float64"), "ok": _array([False], "bool")}],
    "generator": TENSOR_POOL + [_tensor(3, dtype="uint8")], "torch_rng": TENSOR_POOL + [_tensor(7, dtype="uint8")],
    "optimizer": ["x", {}, {"state": {}, "param_groups": []}, {"state": "x", "param_groups": "x"}],
    "best_step": SECONDS_POOL + [0.0], "best_groups": GROUPS_POOL, "baseline": SECONDS_POOL + [1e300],
}
BIG = 10**400                                          # an integer no float holds
CHECKPOINT_FIELDS.update({
    "optimizer.param_groups.0.lr": [NAN, -1e6, "x", 1.0, _tensor(2), _tensor(1)],
    "optimizer.param_groups.0.betas": ["ab", [0.9]],
    "optimizer.param_groups.0.capturable": [True], "optimizer.param_groups.0.maximize": ["yes", True],
    "optimizer.param_groups.0.params": [[0], "x"], "optimizer.param_groups.0.params.0": [_array([0, 1]), _tensor(2)],
    "optimizer.extra": [1],
    "optimizer.state.0.step": [_tensor(1), "x", 3, lambda: _tensor(1)().sum() + 1e30],
    "optimizer.state.0.exp_avg": ["x", _tensor(1, 2, 3)], "optimizer.state.0.exp_avg_sq": [_DELETE],
    "optimizer.state.0.extra": [_tensor(1)],
})
CHECKPOINT_FIELDS["baseline"] = CHECKPOINT_FIELDS["baseline"] + [BIG]
CHECKPOINT_FIELDS["wall_s"] = CHECKPOINT_FIELDS["wall_s"] + [BIG]
CHECKPOINT_FIELDS["samples"] = CHECKPOINT_FIELDS["samples"] + [BIG]
CHECKPOINT_FIELDS["curve"] = CHECKPOINT_FIELDS["curve"] + [[[1, BIG, 1.0, 1.0, 0.0, 0.0]]]
CHECKPOINT_FIELDS["best_step"] = CHECKPOINT_FIELDS["best_step"] + [1e-9, 1e300]


def _scale(key: str, factor: float):
    """Multiply the array or tensor under ``key`` (a dotted path) in place."""
    def change(state):
        d, leaf = _at(state, key)
        d[leaf] *= factor
    return change


def _empty_mappings(state):
    state["X"], state["steps"], state["families"] = state["X"][:0], state["steps"][:0], []


#: whole-state changes: scores the placements do not have, statistics that cannot be, state emptied
STATE_CHANGES = {
    "rl": {"cache steps / 1e6": _scale("cache.step", 1e-6),
           "exp_avg_sq negative": _scale("optimizer.state.0.exp_avg_sq", -1.0)},
    "hdp": {"cache steps * 3": _scale("cache.step", 3.0)},
    "gdp": {"cache steps * 0.5": _scale("problems.0.cache.step", 0.5)},
    "htf-mpr": {"steps 1e-300": _scale("steps", 1e-300), "no mappings but initialised": _empty_mappings,
                "cache steps * 2": _scale("cache.step", 2.0)},
}
#: fields of one placer's checkpoint only
OWN_FIELDS = {
    "rl": {"policy": ["x", {}, {"nope": _tensor(1)}], "same_streak": COUNT_POOL, "n_groups": [999, None]},
    "hdp": {"grouper": ["x", {}], "placer": ["x", {}, {"nope": _tensor(1)}], "nodes": [999]},
    "gdp": {"policy": ["x", {}], "problems": ["x", [], [{}], [1]], "graphs": [["other"], *SHAPE_POOL[:1]],
            "graphs.0": [_array([1, 2])], "nodes": [[999]], "problems.0.extra": [1],
            "problems.0.reward_n": COUNT_POOL, "problems.0.reward_sq": [-1.0, NAN, "x", BIG],
            "problems.0.reward_sum": [1e300, 5.0, -1e300, NAN],
            "problems.0.best_step": [-1.0, NAN, "x"], "problems.0.best_groups": GROUPS_POOL,
            "problems.0.cache": ["x", {}]},
    "htf-mpr": {"X": ["x", _array([[99, 0]]), _array([1, 2]), None], "steps": ["x", _array([-1.0], "float64"), None],
                "families": ["x", [1], None], "rng": ["x", {}, {"state": 1}, None], "rng.extra": [1],
                "initialised": [1, "x", None],
                "stalled": COUNT_POOL, "screened": COUNT_POOL, "nodes": [999]},
}
#: fields the placer's checkpoint does not hold
NOT_IN = {"rl": (), "hdp": ("same_streak",),
          "gdp": ("best_step", "best_groups", "baseline", "cache", "graph", "graph_hash",
                  "cluster_hash", "same_streak"),
          "htf-mpr": ("generator", "torch_rng", "optimizer", "best_step", "best_groups", "baseline")}
BROKEN_FILES = [b"", b"not a checkpoint", b"\x00" * 64, b"PK\x03\x04" + bytes(60), b"\x80\x04K\x01.",
                (2**40).to_bytes(8, "little") + b"{}", (30).to_bytes(8, "little") + b'{"__metadata__": {"a": "b"}}  ']


def _pickles() -> list[tuple[str, bytes]]:
    """A pickle and a torch.save zip whose loading would write ``{dir}/../ran`` (the harness checks that no
    file appears)."""
    import io
    import pickle

    import torch

    class Marker:
        def __reduce__(self):
            return (print, ("this file ran code",))

    buf = io.BytesIO()
    torch.save({"x": Marker()}, buf)
    return [("a raw pickle", pickle.dumps({"format": "autoplace.rl/v2", "x": Marker()})),
            ("a torch.save zip", buf.getvalue())]


def checkpoint_cases(rng: random.Random) -> list[Case]:
    """Every learned placer's real checkpoint, each field replaced by bad values, and broken files: resumed,
    each is one line naming the file (and the field), nothing written, the checkpoint left as it was."""
    out = []
    for method, base in LEARNED_ARGS.items():
        argv = [*_PLACE, "-m", method, *base, "--resume", "{dir}/ck", "-o", "{dir}/out.json"]
        fields_ = {k: v for k, v in CHECKPOINT_FIELDS.items() if k.split(".")[0] not in NOT_IN[method]}
        fields_.update(OWN_FIELDS[method])
        for key, pool in fields_.items():
            # a config without a setting is one written before the setting existed (its default stands in)
            keep = key.split(".")[-1] == "extra" or key.startswith("config.")
            for v in [*pool, *([_DELETE] if not keep else [])]:
                shown = "deleted" if v is _DELETE else getattr(v, "__name__", None) and "an array or tensor" or repr(v)
                out.append(Case(f"{method} checkpoint {key}={shown[:40]}", argv,
                                {**_base_files(), "ck/checkpoint.safetensors": _damaged(method, 0, _set(key, v))},
                                ["out.json"]))
        for what, change in STATE_CHANGES[method].items():
            out.append(Case(f"{method} checkpoint: {what}", argv,
                            {**_base_files(), "ck/checkpoint.safetensors": _damaged(method, 0, change)}, ["out.json"]))
        for i, data in enumerate(BROKEN_FILES):
            out.append(Case(f"{method} checkpoint file #{i} {data[:12]!r}", argv,
                            {**_base_files(), "ck/checkpoint.safetensors": data}, ["out.json"]))
        out.append(Case(f"{method} --resume a folder without a checkpoint", argv,
                        {**_base_files(), "ck/other.txt": "x"}, ["out.json"]))
        out.append(Case(f"{method} --resume a folder with an old pickle checkpoint", argv,
                        {**_base_files(), "ck/checkpoint.pt": b"\x80\x04K\x01."}, ["out.json"]))
    return out


def policy_cases(rng: random.Random) -> list[Case]:
    """A real GDP policy file, each field damaged, and broken or pickled files: fine-tuned from or placed
    zero-shot, each is one line naming the file, nothing written."""
    out = []
    damage = {"format": ["autoplace.gdp-policy/v1", None, _array([1, 2])], "config": ["x", {}, {"nope": 1}],
              "extra": EXTRA_POOL, "meta.extra": [1], "meta.graphs": ["x", [1], _array([1, 2])],
              "meta.seed": ["x", _array([0, 0])], "meta.samples": [-1, _tensor(2)],
              "config.hidden": [0, -1, "x", 10**6, _array([1, 2])], "config.heads": [0, 3],
              "config.max_devices": [0, 1],
              "config.memory": [-1], "config.sage_layers": [99], "config.ff": [16384],
              "state": ["x", {}, None, {"nope": _tensor(1)}]}
    modes = {"zero-shot": ["--zero-shot"], "fine-tune": ["--samples", "8"]}
    for key, pool in damage.items():
        for v in pool:
            for mode, extra in modes.items():
                shown = getattr(v, "__name__", None) and "a tensor" or repr(v)
                out.append(Case(f"gdp policy {key}={shown[:30]} ({mode})",
                                ["place", "{dir}/graph.json", "-c", "{dir}/cluster.json", "-m", "gdp", "--policy",
                                 "{dir}/p.safetensors", *extra, "-o", "{dir}/out.json"],
                                {**_base_files(), "p.safetensors": _damaged("gdp", 1, _set(key, v))}, ["out.json"]))
    for mode, extra in modes.items():                    # each width in range, together 4.8 G parameters
        out.append(Case(f"gdp policy of an oversized network ({mode})",
                        ["place", "{dir}/graph.json", "-c", "{dir}/cluster.json", "-m", "gdp", "--policy",
                         "{dir}/p.safetensors", *extra, "-o", "{dir}/out.json"],
                        {**_base_files(), "p.safetensors": _damaged("gdp", 1, lambda s: s["config"].update(
                            hidden=4096, ff=16384, placer_layers=16, heads=64))}, ["out.json"]))
    for i, data in enumerate(BROKEN_FILES):
        for mode, extra in modes.items():
            out.append(Case(f"gdp policy file #{i} {data[:12]!r} ({mode})",
                            ["place", "{dir}/graph.json", "-c", "{dir}/cluster.json", "-m", "gdp", "--policy",
                             "{dir}/p.safetensors", *extra, "-o", "{dir}/out.json"],
                            {**_base_files(), "p.safetensors": data}, ["out.json"]))
    out.append(Case("train --policy a damaged policy", ["train", "--graphs", "{dir}/graph.json", "-c",
                                                        "{dir}/cluster.json", "--samples", "8", "--policy",
                                                        "{dir}/p.safetensors", "-o", "{dir}/new.safetensors"],
                    {**_base_files(), "p.safetensors": _damaged("gdp", 1, _set("state", {}))}, ["new.safetensors"]))
    return out


def pickle_cases(rng: random.Random) -> list[Case]:
    """A pickle or torch.save file given as a checkpoint or a policy: refused unread (nothing it holds runs;
    ``tests/test_untrusted.py`` proves it with a payload that writes a file)."""
    out = []
    for what, data in _pickles():
        for method, base in LEARNED_ARGS.items():
            for name in ("checkpoint.safetensors", "checkpoint.pt"):
                out.append(Case(f"{method} --resume with {what} as {name}",
                                [*_PLACE, "-m", method, *base, "--resume", "{dir}/ck", "-o", "{dir}/out.json"],
                                {**_base_files(), f"ck/{name}": data}, ["out.json"]))
        for extra in (["--zero-shot"], ["--samples", "8"]):
            out.append(Case(f"gdp --policy {what} {' '.join(extra)}",
                            ["place", "{dir}/graph.json", "-c", "{dir}/cluster.json", "-m", "gdp", "--policy",
                             "{dir}/p.pt", *extra, "-o", "{dir}/out.json"], {**_base_files(), "p.pt": data},
                            ["out.json"]))
    return out


_RAN = {"step_s": 1.0, "ok": True, "oom": [], "error": None, "search_s": 0.1, "wall_s": 0.2, "peak_gib": [1.0],
        "devices_used": 1, "search": {"samples": 8, "updates": 2, "stop_reason": "samples", "improvements": [[4, 1.0]]}}


def bench_row_cases(rng: random.Random) -> list[Case]:
    """``jobs.jsonl`` lines damaged field by field, read by ``bench --against`` (which runs nothing and
    writes nothing): each is set aside — not even a job "only after" — never a traceback; the comparison of
    the other jobs goes on (exit 0: the same results)."""
    key = json.dumps({"kind": "place", "method": "m", "setting": "s"}, sort_keys=True)
    other = json.dumps({"kind": "place", "method": "n", "setting": "s"}, sort_keys=True)
    good = json.dumps({"job": other, "result": _RAN})
    pools = {"step_s": [-1, "1", [1], {"a": 1}, True, NAN], "ok": [1, "true", None], "oom": ["gpu:0", [1], None],
             "error": [1, [], {}], "search_s": [-1, "x", True], "wall_s": [INF, "1"], "peak_gib": ["1", ["1"], [-1]],
             "devices_used": [-1, 1.5, "1"], "search": ["x", [1], {"samples": -1}, {"improvements": [[1]]},
                                                        {"stop_reason": 1}, {"updates": "2"}],
             "worst_case_speedup": [0, -1, "x"], "deep": [json.loads("[" * 40 + "]" * 40)]}
    lines = []
    for fname, pool in pools.items():
        for v in pool:
            lines.append((f"{fname}={json.dumps(v)[:30]}", json.dumps({"job": key, "result": {**_RAN, fname: v}})))
    for fname in ("step_s", "ok", "oom", "error", "search_s", "wall_s"):
        lines.append((f"{fname} missing", json.dumps({"job": key, "result": {k: v for k, v in _RAN.items()
                                                                             if k != fname}})))
    for text in ("[1]", "{", '{"job": 1, "result": {}}', '{"job": "x", "result": {}}', '"x"', "null",
                 json.dumps({"format": "autoplace.bench-job/v9", "job": key, "result": _RAN}),
                 '{"job": "' + key.replace('"', '\\"') + '", "result": [1]}', "{" * 5000, "9" * 5001,
                 '{"job": "' + key.replace('"', '\\"') + '", "result": {}, "x": 1}'):
        lines.append((f"line {text[:20]!r}", text))
    out = []
    for what, line in lines:
        for position in ("first", "last"):
            rows = [line, good] if position == "first" else [good, line]
            files = {"before/jobs.jsonl": good + "\n", "after/jobs.jsonl": "\n".join(rows) + "\n"}
            out.append(Case(f"bench --against, a damaged line ({what}, {position})",
                            ["bench", "-o", "{dir}/after", "--against", "{dir}/before", "--json"], files, [],
                            exit_codes=(0,), stdout_has='"only_after": []'))     # set aside: not a job at all
    return out


def api_cases() -> list[tuple[str, Callable[[], object], type]]:
    """Bad arguments to the Python API (``compile``, ``place``, ``simulate``, the search entry points): each
    must raise its exception (an :class:`~autoplace.errors.AutoplaceError`; a ``TypeError`` for an unknown
    keyword, as Python does) with a one-line message, before any work."""
    import torch

    import autoplace
    from autoplace.cluster import get_cluster
    from autoplace.errors import AutoplaceError
    from autoplace.placers import place
    from autoplace.search import SearchBudget, SearchOptions
    from autoplace.sim import simulate
    from autoplace.zoo import build_graph

    def model():
        torch.manual_seed(0)
        m = torch.nn.Linear(4, 2)
        return m, torch.optim.SGD(m.parameters(), lr=0.1)

    def compile_with(opt_change=None, **kw):
        def call():
            m, opt = model()
            if opt_change:
                opt_change(opt)
            return autoplace.compile(m, torch.randn(3, 4), torch.nn.functional.mse_loss, opt,
                                     targets=torch.randn(3, 2), **{"cluster": "k80x2", **kw})
        return call

    g, c = build_graph("toy-mlp"), get_cluster("k80x2")
    cases = []
    for v in (5, 1.5, [], {}, object(), b"x"):
        cases.append((f"compile(placement={v!r:.20})", compile_with(placement=v)))
    for v in (NAN, 0, -1, INF, "1", True, 1e308):
        cases.append((f"compile(timeout={v!r})", compile_with(timeout=v)))
    for v in (NAN, -1, INF, "1", 1e308):
        cases.append((f"compile(budget={v!r})", compile_with(budget=v)))
    for k, v in (("lr", NAN), ("lr", INF), ("momentum", NAN), ("weight_decay", -INF)):
        cases.append((f"compile with {k}={v}", compile_with(lambda o, k=k, v=v: o.param_groups[0].update({k: v}))))
    import numpy as np

    for k, values in {"micro_batches": [np.array([2, 2]), torch.tensor([2, 2]), "x", 0, 1.5, True, torch.tensor(2.0)],
                      "seed": ["abc", np.array([0, 1]), -1, torch.tensor([0, 1])], "method": [["metis"], 5, None],
                      "granularity": [5, "nope"], "name": [5, ""], "keep_whole": ["Linear", [1]],
                      "runtime": [["shm"], 5], "progress": ["yes"], "verify": [2], "calibrate": ["x"],
                      "eager_rng": [np.array([True, False])], "cluster": [5, ["k80x2"]],
                      "budget": [np.array([1.0, 2.0])], "timeout": [np.array([1.0, 2.0])]}.items():
        for v in values:
            cases.append((f"compile({k}={v!r:.30})", compile_with(**{k: v})))
    from autoplace.cluster import Cluster, Device, LinkSpec

    for rdv in ("127.0.0.1:²", "127.0.0.1:x", "nohost"):
        hosts = Cluster("hosts", [Device(f"{h}/cpu:0", "cpu", 10**9, 1e9, 1e9, meta={"host": h}) for h in "ab"],
                        default_link=LinkSpec(1e9), meta={"rendezvous": rdv})
        cases.append((f"compile(runtime='distributed') at rendezvous {rdv!r}",
                      compile_with(cluster=hosts, runtime="distributed", method="single-cpu")))
    cases.append(("compile(profiled=5)", compile_with(profiled=5)))

    def mismatched():                                    # a target of a shape a meta kernel refuses
        m, opt = model()
        return autoplace.compile(m, torch.randn(3, 4), lambda out, t: (out @ t).sum(), opt,
                                 targets=torch.randn(5, 7), cluster="localhost", method="single-cpu", cache=False)
    cases.append(("compile with a target of the wrong shape", mismatched))
    cases.append(("compile(optimizer=None)", lambda: autoplace.compile(torch.nn.Linear(2, 2), torch.randn(1, 2),
                                                                       torch.nn.functional.mse_loss, None)))
    for method in ("nope", "", 5):
        cases.append((f"place(method={method!r})", lambda method=method: place(g, c, method)))
    for v in (np.array([2, 2]), torch.tensor([2, 2]), torch.tensor(2.5)):
        cases.append((f"build_graph(layers={v!r:.30})", lambda v=v: build_graph("toy-mlp", layers=v)))
    for v in (np.array([0, 1]), torch.tensor([0, 1])):
        cases.append((f"place(seed={v!r:.30})", lambda v=v: place(g, c, "metis", seed=v)))
    for v in (-1, 1.5, "0", True, 2**70):
        cases.append((f"place(seed={v!r})", lambda v=v: place(g, c, "metis", seed=v)))
    for v in (-1, NAN, INF, "1", 1e308):
        cases.append((f"place(budget={v!r})", lambda v=v: place(g, c, "local-search", budget=v)))
    for v in (5, "x", [], {"a": "gpu:0"}):
        cases.append((f"simulate(placement={v!r:.20})", lambda v=v: simulate(g, c, v)))
    for v in (0, -1, 1.5, True, "8"):
        cases.append((f"SearchBudget(samples={v!r})", lambda v=v: SearchBudget(samples=v)))
    for v in (NAN, -1, INF):
        cases.append((f"SearchBudget(seconds={v!r})", lambda v=v: SearchBudget(seconds=v)))
    for k, v in (("workers", 0), ("workers", 1.5), ("checkpoint_every_s", NAN), ("checkpoint_every_s", -1),
                 ("nope", 1)):
        cases.append((f"SearchOptions({k}={v!r})", lambda k=k, v=v: SearchOptions.of(None, **{k: v}),
                      TypeError if k == "nope" else AutoplaceError))
    for method in ("rl", "hdp", "gdp", "htf-mpr"):
        from autoplace.placers import get_placer

        info = get_placer(method)
        for cfg in ({"nope": 1}, {"samples_per_update": 0} if method != "htf-mpr" else {"top_x": 0},
                    {"group_rules": "nope"}):
            cases.append((f"{method} search(config={cfg})",
                          lambda info=info, cfg=cfg: info.search(g, c, budget=SearchBudget(samples=4), config=cfg)))
        cases.append((f"{method} search(resume=a missing folder)",
                      lambda info=info: info.search(g, c, budget=SearchBudget(samples=4), resume="/nonexistent/ck")))
    return [c if len(c) == 3 else (*c, AutoplaceError) for c in cases]


@dataclass
class RankCase:
    """A rank of the distributed runtime as torchrun starts it (``python -m autoplace.runtime``): ``env``
    over a valid torchrun environment, ``argv`` with ``{dir}`` for the case's folder, ``files`` to write
    there (a cluster file ``{dir}/c.json`` of two hosts by default). It must exit 2 with one line."""

    name: str
    env: dict[str, str]
    argv: list[str]
    files: dict[str, str] = field(default_factory=dict)


def _hosts_cluster(**meta) -> str:
    devs = [{"name": f"{h}/cpu:0", "type": "cpu", "memory_bytes": 10**9, "peak_flops": 1e9, "memory_bandwidth": 1e9,
             "host": h} for h in "ab"]
    return _dump({"format": "autoplace.cluster/v1", "name": "hosts", "devices": devs,
                  "default_link": {"bandwidth": 1e9, "latency_s": 1e-4}, **meta})


def rank_cases() -> list[RankCase]:
    """The rank entry point's environment, cluster, rendezvous, secret and numbers, each wrong."""
    good = {"c.json": _hosts_cluster(rendezvous="127.0.0.1:29400")}
    out = [RankCase(f"${var}={value!r}", {var: value}, ["{dir}/c.json"], good)
           for var, values in {"WORLD_SIZE": ["two", "0", "-1", "²", "", "1e3", "3"],
                               "RANK": ["7", "-1", "²", "", "x", "2"],
                               "MASTER_PORT": ["x", "0", "65536", "²", ""], "MASTER_ADDR": ["", " a"]}.items()
           for value in values]
    for rdv in ("127.0.0.1:²", "127.0.0.1:x", "127.0.0.1:70000", ":29400", "127.0.0.1", None):
        meta = {} if rdv is None else {"rendezvous": rdv}
        out.append(RankCase(f"rendezvous {rdv!r}", {}, ["{dir}/c.json"], {"c.json": _hosts_cluster(**meta)}))
    for name, text in (("garbage", "{not json"), ("empty", ""), ("a graph", _dump(_golden("graph_v1.json")))):
        out.append(RankCase(f"cluster file: {name}", {}, ["{dir}/c.json"], {"c.json": text}))
    out.append(RankCase("no cluster file", {}, ["{dir}/none.json"], {}))
    for flag, value in (("--timeout", "0"), ("--timeout", "nan"), ("--timeout", "-1"), ("--idle", "inf")):
        out.append(RankCase(f"{flag} {value}", {}, ["{dir}/c.json", flag, value], good))
    out.append(RankCase("--secret-file missing", {}, ["{dir}/c.json", "--secret-file", "{dir}/none"], good))
    out.append(RankCase("--secret-file not a secret", {}, ["{dir}/c.json", "--secret-file", "{dir}/s"],
                        {**good, "s": "not hex"}))
    return out


CLASSES = {"graph fields": graph_field_cases, "graph structure": graph_structure_cases, "cluster": cluster_cases,
           "placement": placement_cases, "cli numbers": cli_number_cases, "outputs": output_cases,
           "zoo parameters": zoo_param_cases, "captured programs": program_cases, "onnx": onnx_cases,
           "curves and tags": curve_and_tag_cases, "--set": set_cases, "checkpoints": checkpoint_cases,
           "policies": policy_cases, "pickles": pickle_cases, "special files": special_file_cases,
           "network": network_cases,
           "bench rows": bench_row_cases}


def corpus(seed: int = 0) -> dict[str, list[Case]]:
    """Every class's cases, generated from ``seed``."""
    return {name: gen(random.Random(f"{seed}:{name}")) for name, gen in CLASSES.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--count", action="store_true", help="only the number of cases per class")
    args = ap.parse_args(argv)
    cases = corpus(args.seed)
    for name, cs in cases.items():
        print(f"{name}: {len(cs)}")
        if not args.count:
            for c in cs:
                print(f"  {c.name}: {' '.join(c.argv)}")
    print(f"python api: {len(api_cases())}")
    print(f"rank entry point: {len(rank_cases())}")
    print(f"total: {sum(map(len, cases.values())) + len(api_cases()) + len(rank_cases())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
