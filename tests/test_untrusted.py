"""Files autoplace reads back are untrusted input: checkpoints and policies never unpickle, a checkpoint of
another graph or cluster is refused, and a damaged field is one line naming the file and the field."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from conftest import wait_for  # noqa: E402

from autoplace.cli import main  # noqa: E402
from autoplace.cluster import get_cluster  # noqa: E402
from autoplace.errors import AutoplaceError, FormatError  # noqa: E402
from autoplace.formats import graph_to_dict, save_graph  # noqa: E402
from autoplace.formats.state import decode_state, encode_state, graph_hash, read_state, write_state  # noqa: E402
from autoplace.graph import Graph  # noqa: E402
from autoplace.placers.learned.gdp import GDPConfig, gdp_train, load_policy  # noqa: E402
from autoplace.placers.learned.hdp import HDPConfig, hdp_search  # noqa: E402
from autoplace.placers.learned.htf_mpr import HTFMPRConfig, htf_mpr_search  # noqa: E402
from autoplace.placers.learned.rl import RLConfig, rl_search  # noqa: E402
from autoplace.search import SearchBudget  # noqa: E402
from autoplace.search.checkpoint import CHECKPOINT_FILE  # noqa: E402
from autoplace.zoo import build_graph  # noqa: E402


class _Payload:
    """Unpickling this writes ``marker``: proof that a loader ran code from a file."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "the file ran code"))


def _crafted(marker: Path) -> dict[str, bytes]:
    """A raw pickle and a ``torch.save`` zip, each running the payload when unpickled."""
    import io

    buf = io.BytesIO()
    torch.save({"format": "autoplace.rl/v2", "policy": _Payload(marker)}, buf)
    return {"pickle": pickle.dumps({"format": "autoplace.gdp-policy/v2", "x": _Payload(marker)}),
            "torch.save": buf.getvalue()}


@pytest.mark.parametrize("kind", ["pickle", "torch.save"])
@pytest.mark.parametrize("name", [CHECKPOINT_FILE, "checkpoint.pt"])
def test_a_crafted_pickle_given_to_resume_runs_nothing(tmp_path, capsys, kind, name):
    marker = tmp_path / "marker"
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / name).write_bytes(_crafted(marker)[kind])
    rc = main(["place", "toy-mlp", "-c", "k80x2", "-m", "rl", "--samples", "8", "--resume", str(ck),
               "-o", str(tmp_path / "out.json")])
    err = capsys.readouterr().err
    assert rc == 2 and not marker.exists() and not (tmp_path / "out.json").exists()
    assert err.count("\n") == 1 and ("could run code" in err or "no checkpoint" in err), err


@pytest.mark.parametrize("kind", ["pickle", "torch.save"])
@pytest.mark.parametrize("zero_shot", [False, True])
def test_a_crafted_pickle_given_as_a_policy_runs_nothing(tmp_path, capsys, kind, zero_shot):
    marker = tmp_path / "marker"
    (tmp_path / "policy.pt").write_bytes(_crafted(marker)[kind])
    rc = main(["place", "toy-mlp", "-c", "k80x2", "-m", "gdp", "--samples", "8", "--policy",
               str(tmp_path / "policy.pt"), *(["--zero-shot"] if zero_shot else []), "-o", str(tmp_path / "o.json")])
    err = capsys.readouterr().err
    assert rc == 2 and not marker.exists() and not (tmp_path / "o.json").exists()
    assert "could run code" in err and err.count("\n") == 1, err


def test_the_state_format_round_trips_what_searches_save():
    state = {"a": 1, "b": [1.5, float("inf"), float("nan")], "t": torch.arange(6).reshape(2, 3),
             "n": np.arange(4, dtype=np.int64), "tup": (1, "x"), "bytes": b"\x00\xff", "int_keys": {0: {"s": 1}},
             "dollar": {"$tensor": "not a tag"}, "none": None, "big": 2**100, "np": np.float64(2.5)}
    back = decode_state(encode_state(state), "x")
    assert back["a"] == 1 and back["b"][:2] == [1.5, float("inf")] and np.isnan(back["b"][2])
    assert torch.equal(back["t"], state["t"]) and (back["n"] == state["n"]).all() and back["n"].dtype == np.int64
    assert back["tup"] == (1, "x") and back["bytes"] == b"\x00\xff" and back["int_keys"] == {0: {"s": 1}}
    assert back["dollar"] == {"$tensor": "not a tag"} and back["none"] is None and back["big"] == 2**100
    assert back["np"] == 2.5


@pytest.mark.parametrize("data", [b"", b"\x00" * 8, b"\xff" * 16, (2**40).to_bytes(8, "little") + b"{}",
                                  (2).to_bytes(8, "little") + b"{}",
                                  (30).to_bytes(8, "little") + b'{"__metadata__": {"x": "1"}}  ',
                                  (40).to_bytes(8, "little") + b'{"__metadata__": {"autoplace": "[1"}}      '])
def test_a_file_that_is_no_state_is_one_format_error(data):
    with pytest.raises(FormatError, match="^here: "):
        decode_state(data, "here")


def test_an_array_of_a_dtype_numpy_lacks_is_a_format_error():
    import safetensors.torch

    data = safetensors.torch.save({"t0": torch.zeros(2, dtype=torch.bfloat16)},
                                  metadata={"autoplace": '{"a": {"$ndarray": "t0"}}'})
    with pytest.raises(FormatError, match="^f: array 't0' has a dtype"):
        decode_state(data, "f")


def test_a_policy_gone_to_nan_is_one_line_and_no_checkpoint(tmp_path):
    """torch's sampler refuses NaN probabilities with a RuntimeError: the search ends with one line saying
    what to change, and writes no checkpoint of the diverged policy."""
    from autoplace.search.engine import run_search

    class Diverged:
        samples = updates = 0
        wall_s, best_step, curve, converged = 0.0, float("inf"), None, False

        def update(self):
            raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")

        def state(self):
            raise AssertionError("a diverged policy was checkpointed")

    with pytest.raises(AutoplaceError, match="rl: the policy diverged after 0 updates"):
        run_search(Diverged(), SearchBudget(samples=8), name="rl", checkpoint=tmp_path)
    assert not list(tmp_path.iterdir())


def test_tagged_values_that_lie_are_format_errors():
    import json

    import safetensors.torch

    for tree in ({"$tensor": "t9"}, {"$float": "1e999"}, {"$bytes": "!!"}, {"$dict": [[1]]}, {"$nope": 1},
                 {"$tuple": 5}, {"$dict": [[[1], 2]]}, {"$tensor": "t0", "x": 1}):
        data = safetensors.torch.save({}, metadata={"autoplace": json.dumps(tree)})
        with pytest.raises(FormatError, match="^f: "):
            decode_state(data, "f")


# ------------------------------------------------------------------------------------------ identity
def _heavier(graph: Graph, factor: float) -> Graph:
    """The same graph (same name, ops and groups) with every op's FLOPs multiplied by ``factor``."""
    from autoplace.formats import graph_from_dict

    d = graph_to_dict(graph)
    for op in d["ops"]:
        if op.get("flops"):
            op["flops"] *= factor
    return graph_from_dict(d)


def test_identity_compares_values_of_the_declared_type_and_shape():
    from autoplace.formats.state import Settings, check_identity

    config = Settings({"lr": 0.1, "sizes": (1, 2)})
    mine = {"seed": 0, "config": config}
    ok = {"format": "f/v1", "seed": 0, "config": {"lr": 0.1, "sizes": [1, 2]}}
    assert check_identity(ok, "f/v1", mine, "x") is ok                 # a list read back for a tuple
    for seed in (np.array([0, 0]), np.array(0), torch.tensor(0), torch.tensor([0, 0]), "0", False, None):
        with pytest.raises(FormatError, match=r"^x: a checkpoint of another search; different: seed \("):
            check_identity({**ok, "seed": seed}, "f/v1", mine, "x")
    for lr in (np.array([0.1, 0.1]), torch.tensor(0.1), "0.1"):
        with pytest.raises(FormatError, match=r"different: config \(lr\)"):
            check_identity({**ok, "config": {"lr": lr, "sizes": [1, 2]}}, "f/v1", mine, "x")
    for fmt in (np.array([1, 2]), torch.tensor(1), ["f/v1"], None):
        with pytest.raises(FormatError, match="of another kind"):
            check_identity({**ok, "format": fmt}, "f/v1", mine, "x")


def test_a_field_no_reader_asked_for_is_refused():
    from autoplace.formats.state import StateFields

    state = {"a": 1, "b": {"c": 2, "d": 3}, "items": [{"e": 1}, {"e": 2, "f": 0}]}
    f = StateFields(state, "x")
    f.int("a")
    f.sub("b").int("c")
    for item in f.items("items", 2):
        item.int("e")
    with pytest.raises(FormatError, match=r"^x: unknown field 'b\.d'$"):
        f.finish()
    state["b"].pop("d")
    with pytest.raises(FormatError, match=r"^x: unknown field 'items\[1\]\.f'$"):
        f.finish()
    state["items"][1].pop("f")
    f.finish()
    with pytest.raises(FormatError, match="field 'items' must be a list, got a tuple"):
        StateFields({"items": ({"e": 1},)}, "x").items("items")


def test_the_graph_hash_sees_content_not_the_name():
    g = build_graph("toy-mlp")
    assert graph_hash(g) == graph_hash(build_graph("toy-mlp"))
    assert graph_hash(_heavier(g, 50)) != graph_hash(g)


def test_resuming_on_a_changed_graph_of_the_same_name_is_refused_on_the_cli(tmp_path, capsys):
    g = build_graph("toy-mlp")
    save_graph(g, tmp_path / "g.json")
    args = ["-c", "k80x2", "-m", "rl", "--set", "samples_per_update=4", "--seed", "1"]
    assert main(["place", str(tmp_path / "g.json"), *args, "--samples", "8", "--checkpoint", str(tmp_path / "ck"),
                 "-o", str(tmp_path / "a.json")]) == 0
    save_graph(_heavier(g, 50), tmp_path / "g.json")
    capsys.readouterr()
    rc = main(["place", str(tmp_path / "g.json"), *args, "--samples", "16", "--resume", str(tmp_path / "ck"),
               "-o", str(tmp_path / "b.json")])
    err = capsys.readouterr().err
    assert rc == 2 and "different: graph content" in err and not (tmp_path / "b.json").exists(), err


SEARCHES = {
    "rl": lambda g, c, **kw: rl_search(g, c, config=RLConfig(samples_per_update=4), **kw),
    "hdp": lambda g, c, **kw: hdp_search(g, c, config=HDPConfig(samples_per_update=4, groups=4), **kw),
    "gdp": lambda g, c, **kw: gdp_train([g], [c], config=GDPConfig(samples_per_update=4, prior="none"), **kw),
    "htf-mpr": lambda g, c, **kw: htf_mpr_search(
        g, c, config=HTFMPRConfig(random_homogeneous=4, population=4, pairs=2, top_x=2), **kw),
}


@pytest.mark.parametrize("method", sorted(SEARCHES))
def test_every_search_refuses_a_checkpoint_of_another_graph_or_cluster(tmp_path, method):
    g, c = build_graph("layered-dag", ops=40, width=4), get_cluster("k80x2")
    run = SEARCHES[method]
    run(g, c, budget=SearchBudget(samples=8), seed=0, checkpoint=tmp_path)
    with pytest.raises(FormatError, match="different: graph content"):
        run(_heavier(g, 50), c, budget=SearchBudget(samples=16), seed=0, resume=tmp_path)
    from autoplace.formats import cluster_from_dict, cluster_to_dict

    d = cluster_to_dict(c)
    d["devices"][1]["memory_bytes"] //= 2                # same name, same devices, less memory on one
    with pytest.raises(FormatError, match="different: cluster content"):
        run(g, cluster_from_dict(d), budget=SearchBudget(samples=16), seed=0, resume=tmp_path)


# ------------------------------------------------------------------------------------------ damaged fields
def _damage(directory: Path, change) -> None:
    path = directory / CHECKPOINT_FILE
    state = read_state(path)
    change(state)
    write_state(path, state)


DAMAGE = {
    "samples": lambda s: s.update(samples=-5),
    "best_step": lambda s: s.update(best_step=-1.0),
    "wall_s": lambda s: s.update(wall_s=float("nan")),
    "updates": lambda s: s.update(updates="7"),
    "curve": lambda s: s.update(curve=[[1, 2.0, "x", 1.0, 0.0, 0.0]]),
    "cache": lambda s: s["cache"].update(step=np.full(len(s["cache"]["step"]), -1.0)),
    "best_groups": lambda s: s.update(best_groups=np.full(3, 99)),
    "policy": lambda s: s["policy"].update({next(iter(s["policy"])): torch.zeros(3, 3, 3)}),
    "optimizer": lambda s: s["optimizer"].update(state={0: {"exp_avg": torch.zeros(1, 2, 3)}}),
    "generator": lambda s: s.update(generator=torch.zeros(3, dtype=torch.uint8)),
    "torch_rng": lambda s: s.update(torch_rng=[1, 2]),
    "baseline": lambda s: s.pop("baseline"),
}


@pytest.mark.parametrize("field", sorted(DAMAGE))
def test_a_damaged_rl_checkpoint_names_the_file_and_the_field(tmp_path, field):
    g, c = build_graph("layered-dag", ops=40, width=4), get_cluster("k80x2")
    run = SEARCHES["rl"]
    run(g, c, budget=SearchBudget(samples=8), seed=0, checkpoint=tmp_path)
    _damage(tmp_path, DAMAGE[field])
    with pytest.raises(FormatError, match=rf"{CHECKPOINT_FILE}: .*'{field}[.']"):
        run(g, c, budget=SearchBudget(samples=16), seed=0, resume=tmp_path)


def test_a_damaged_policy_file_names_the_file_and_the_field(tmp_path):
    g, c = build_graph("layered-dag", ops=40, width=4), get_cluster("k80x2")
    path = tmp_path / "p.policy"
    gdp_train([g], [c], budget=SearchBudget(samples=4), config=GDPConfig(samples_per_update=4, prior="none"),
              seed=0, output=path)
    net, cfg = load_policy(path)
    assert cfg.samples_per_update == 4
    saved = read_state(path)
    for change, field in ((lambda s: s["state"].popitem(), "state"), (lambda s: s["config"].update(hidden=0), "hidden"),
                          (lambda s: s["config"].update(nope=1), "nope"),
                          (lambda s: s["state"].update({k: v * float("nan") for k, v in s["state"].items()}), "NaN")):
        import copy

        bad = copy.deepcopy(saved)
        change(bad)
        write_state(path, bad)
        with pytest.raises(AutoplaceError, match=rf"p.policy: .*{field}"):
            load_policy(path)


def test_a_policy_files_record_is_optional_field_by_field_and_its_shape_is_checked(tmp_path):
    import copy

    g, c = build_graph("layered-dag", ops=40, width=4), get_cluster("k80x2")
    path = tmp_path / "p.policy"
    gdp_train([g], [c], budget=SearchBudget(samples=4), config=GDPConfig(samples_per_update=4, prior="none"),
              seed=0, output=path)
    saved = read_state(path)
    for meta in ({}, {"seed": None}, {"graphs": ["a"]}):              # what earlier writers left: it reads
        write_state(path, {**saved, "meta": meta})
        load_policy(path)
    for meta, field in (({"graphs": "a"}, "meta.graphs"), ({"extra": 1}, "meta.extra"), ({"seed": "x"}, "meta.seed")):
        write_state(path, {**saved, "meta": meta})
        with pytest.raises(FormatError, match=rf"'{field}'"):
            load_policy(path)
    bad = copy.deepcopy(saved)
    bad["config"]["hidden"] = np.array([32, 32])
    write_state(path, bad)
    with pytest.raises(AutoplaceError):                               # compared with a --set of it: no ambiguity
        load_policy(path, {"hidden": 32})


# ------------------------------------------------------------------------------------------ Ray addresses
def test_a_ray_address_where_nothing_listens_fails_at_once(capsys):
    import socket

    with socket.socket() as s:                      # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rc = main(["place", "toy-mlp", "-c", "k80x2", "-m", "rl", "--samples", "8", "--ray-address", f"127.0.0.1:{port}",
               "-o", "-"])
    out, err = capsys.readouterr()
    assert rc == 2 and "does not answer" in err and err.count("\n") == 1 and not out


def test_a_ray_address_that_does_not_answer_fails_within_the_timeout(monkeypatch):
    import socket

    from autoplace.search import distributed

    seen = {}

    def silent(address, timeout):
        seen["timeout"] = timeout
        raise TimeoutError

    monkeypatch.setattr(socket, "create_connection", silent)
    with pytest.raises(AutoplaceError, match="no connection within 10 s"):
        distributed.check_answers("10.1.2.3:6379")
    assert seen["timeout"] == distributed.CONNECT_TIMEOUT_S == 10.0
    monkeypatch.setenv("AUTOPLACE_RAY_CONNECT_TIMEOUT_S", "0.5")
    with pytest.raises(AutoplaceError, match="within 0.5 s"):
        distributed.check_answers("ray://10.1.2.3:10001")
    for bad in ("nohost", "h:port", "h:0", "h:70000"):
        with pytest.raises(AutoplaceError, match="not host:port"):
            distributed.check_answers(bad)
    monkeypatch.undo()
    for bad in ("a..b:6379", "x" * 70 + ".example:6379"):    # host names no lookup takes (IDNA)
        with pytest.raises(AutoplaceError, match="does not answer"):
            distributed.check_answers(bad)


# ------------------------------------------------------------------------------------------ temporary files
def test_a_write_killed_where_no_unnamed_file_can_be_linked_leaves_a_temp_file_the_next_write_removes(tmp_path):
    """Where the filesystem cannot link an unnamed file (EXDEV on overlay filesystems), every write goes
    through a named temporary file: a ``kill -9`` mid-write leaves it, and the next write of the same path
    removes it (its process is gone), leaving the temporary files of live processes and other hosts."""
    import os
    import signal
    import subprocess
    import sys

    from autoplace.formats import files

    target = tmp_path / "out.json"
    script = (
        "import os, sys, time\n"
        "from pathlib import Path\n"
        "from autoplace.formats import files\n"
        "files._unnamed_file = lambda folder, mode: None\n"          # as where linking fails
        "real = os.replace\n"
        "files.os.replace = lambda a, b: time.sleep(600)\n"           # stop mid-write: the temp file is whole
        f"files.atomic_write_bytes(Path({str(target)!r}), b'new')\n")
    target.write_bytes(b"old")
    proc = subprocess.Popen([sys.executable, "-c", script])
    try:
        wait_for(lambda: list(tmp_path.glob(".out.json.*.tmp")) or proc.poll() is not None,
                 what="the writer's temporary file")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    left = list(tmp_path.glob(".out.json.*.tmp"))
    assert len(left) == 1 and target.read_bytes() == b"old"
    live = tmp_path / f".out.json.{files._HOST}-{os.getppid()}.abc.tmp"   # this host and namespace, alive
    other_host = tmp_path / f".out.json.otherhost-{proc.pid}.abc.tmp"
    live.write_bytes(b"")
    other_host.write_bytes(b"")
    files.atomic_write_bytes(target, b"again")
    assert target.read_bytes() == b"again"
    assert sorted(tmp_path.glob(".out.json.*.tmp")) == sorted([live, other_host])


# ------------------------------------------------------------------------------------------ settings
def test_the_documented_settings_are_the_declared_ones(capsys):
    text = (Path(__file__).parent.parent / "docs/algorithms.md").read_text()
    block = text.split("<!-- settings: begin -->\n", 1)[1].split("<!-- settings: end -->", 1)[0]
    assert main(["settings", "--markdown"]) == 0
    assert capsys.readouterr().out == block


@pytest.mark.parametrize("method", ["rl", "hdp", "gdp", "htf-mpr"])
def test_every_setting_has_a_declared_range(method):
    from dataclasses import fields

    from autoplace.placers import get_placer

    config = get_placer(method).config
    for f in fields(config):
        if f.name in ("group_rules", "prior") or f.type in ("bool", bool):
            continue                                   # checked by name (rules, placers) or by type
        assert f.name in config.CONSTRAINTS, f"{method}: {f.name} has no declared range"
