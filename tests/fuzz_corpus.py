"""A seeded corpus of bad inputs for the command line (``tests/test_fuzz.py`` runs it).

    .venv/bin/python tests/fuzz_corpus.py [--seed 0] [--count]   # print the cases (or how many per class)

Every case is bad by construction — a field of a valid graph, cluster or placement replaced by a value of
the wrong type or outside its range, a broken file, a bad CLI number or output path, a bad zoo parameter —
and must exit 2 or 3 with one line ``autoplace: error: ...`` naming the culprit, no traceback, and nothing
written. Cases are generated, not hand-picked: each class crosses its fields with a pool of bad values and
the verbs that read them, and a seeded sample keeps the corpus at a few hundred cases.
"""

from __future__ import annotations

import argparse
import copy
import json
import random
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
    (name -> text or bytes), and ``outputs`` the paths it must leave absent (or untouched if listed in
    ``files``)."""

    name: str
    argv: list[str]
    files: dict[str, str | bytes] = field(default_factory=dict)
    outputs: list[str] = field(default_factory=list)


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
    for name, p in variants:
        argv = rng.choice([["simulate", "{dir}/graph.json", "-c", "{dir}/cluster.json", "-p", "{dir}/placement.json"],
                           ["simulate", "{dir}/graph.json", "-c", "{dir}/cluster.json", "-p", "{dir}/placement.json",
                            "--trace", "{dir}/trace.json"]])
        out.append(Case(f"placement {name}", argv, {**_base_files(), "placement.json": _dump(p)}, ["trace.json"]))
    return out


def cli_number_cases(rng: random.Random) -> list[Case]:
    out = []
    base = ["{dir}/graph.json", "-c", "{dir}/cluster.json"]
    bad = ["-1", "nan", "inf", "-inf", "abc", "", "1e999", "0x10"]
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


CLASSES = {"graph fields": graph_field_cases, "graph structure": graph_structure_cases, "cluster": cluster_cases,
           "placement": placement_cases, "cli numbers": cli_number_cases, "outputs": output_cases,
           "zoo parameters": zoo_param_cases, "captured programs": program_cases, "onnx": onnx_cases}


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
    print(f"total: {sum(map(len, cases.values()))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
