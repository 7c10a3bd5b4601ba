"""PyTorch capture: analytic FLOPs and bytes, phases, co-location, inference-only, untraceable models."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from autoplace.capture import CaptureError, capture_inference, capture_training_step, tag  # noqa: E402
from autoplace.cluster import get_cluster  # noqa: E402
from autoplace.placers import place  # noqa: E402
from autoplace.sim import simulate  # noqa: E402

B, IN, H, C = 8, 16, 32, 4


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(IN, H), nn.ReLU(), nn.Linear(H, C))


def train(model, x, target, opt_cls=torch.optim.SGD, loss=nn.functional.cross_entropy, **opt_kw):
    opt = opt_cls(model.parameters(), lr=0.01, **opt_kw)
    return capture_training_step(model, x, loss, opt, targets=target, name="m")


def by_type(g, t):
    return [op for op in g.ops if op.type == t]


def test_mlp_flops_bytes_phases_and_colocation():
    g = train(mlp(), torch.randn(B, IN), torch.randint(0, C, (B,)))
    phases = {op.phase for op in g.ops}
    assert phases == {"forward", "backward", "update"}
    # forward: addmm = 2*B*IN*H and 2*B*H*C; backward: weight grads of both layers + input grad of layer 2
    fwd = sorted(op.flops for op in by_type(g, "aten.addmm"))
    assert fwd == [2 * B * H * C, 2 * B * IN * H]
    bwd_mm = sorted(op.flops for op in by_type(g, "aten.mm") if op.phase == "backward")
    assert bwd_mm == sorted([2 * B * H * C, 2 * B * H * C, 2 * B * IN * H])
    relu = by_type(g, "aten.relu")[0]
    assert relu.flops == B * H and relu.out_bytes == (B * H * 4,)  # elementwise: its elements; fp32 bytes
    # parameters hold their bytes; each parameter's gradient and update ops share its group
    params = {op.name: op for op in by_type(g, "parameter")}
    assert params["0.weight"].param_bytes == IN * H * 4 and params["2.bias"].param_bytes == C * 4
    for op in g.ops:
        if op.phase == "update":
            assert op.colocation_group in params, op.name
    grads = [op for op in g.ops if op.phase == "backward" and op.colocation_group]
    assert {op.colocation_group for op in grads} == set(params)
    assert ({op.scope for op in g.ops if op.phase == "forward" and op.type.startswith("aten.")}
            >= {"0", "1", "2", "loss"})


def test_adam_state_is_resident_and_updates_are_per_parameter():
    g = train(mlp(), torch.randn(B, IN), torch.randint(0, C, (B,)), torch.optim.Adam)
    state = by_type(g, "optimizer_state")
    assert {op.name for op in state} >= {"0.weight.exp_avg", "0.weight.exp_avg_sq", "2.bias.step"}
    assert all(op.colocation_group == op.name.rsplit(".", 1)[0] for op in state)
    assert sum(op.param_bytes for op in state if op.name.startswith("0.weight.exp_avg")) == 2 * IN * H * 4
    # one final addcdiv_ per parameter: no multi-tensor kernels
    assert len(by_type(g, "aten.addcdiv_")) == 4


@pytest.mark.parametrize("opt_cls", [torch.optim.Adam, torch.optim.AdamW])
def test_a_foreach_adam_update_is_one_op_per_parameter_and_computes_the_same(opt_cls):
    """foreach Adam on a 10-layer MLP: each parameter's update is its step counter and one op running
    torch.optim's foreach update on it (40 update ops for 20 parameters, not 160), costing the foreach
    calls it stands for in one launch group; the program computes what the per-op trace computes, bit for
    bit (foreach rounds as the for-loop does)."""
    from autoplace.runtime.program import Program, run_reference

    torch.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(10) for m in (nn.Linear(16, 16), nn.ReLU())])
    x = torch.randn(4, 16)
    graphs = {flag: capture_training_step(model, x, lambda o: o.pow(2).mean(),
                                          opt_cls(model.parameters(), lr=1e-2, weight_decay=0.01, foreach=flag))
              for flag in (True, False)}
    update = [op for op in graphs[True].ops if op.phase == "update" and op.type.startswith(("aten.", "autoplace."))]
    assert len(update) == 40                                  # 20 parameters: a step add_ and one fused op each
    fused = [op for op in update if op.type.startswith("autoplace.foreach_adam")]
    assert len(fused) == 20 and all(op.meta["launch_group"] == "optimizer.0.update" for op in fused)
    per_param = sum(op.phase == "update" and op.type.startswith("aten.") for op in graphs[False].ops) // 20
    assert fused[0].meta["group_launches"] == per_param - 1 == fused[0].meta["fused_ops"]   # all but the step's add_
    assert fused[0].colocation_group == "0.weight" and fused[0].flops > 0
    prog = Program(graphs[True])
    a, b = run_reference(prog, seed=0, steps=3), run_reference(Program(graphs[False]), seed=0, steps=3)
    for name in ("0.weight", "18.bias", "0.weight.exp_avg", "18.weight.exp_avg_sq"):
        assert torch.equal(a[name], b[name]), name
    start = prog.make_input(graphs[True].index("0.weight"), 0)
    assert not torch.equal(a["0.weight"], start)                          # the update did run


@pytest.mark.parametrize("flags, implementation", [({"foreach": False}, "for-loop"), ({"foreach": True}, "foreach"),
                                                   ({}, "default"), ({"fused": True}, "fused")])
def test_the_update_is_marked_with_the_kernels_pytorch_runs_it_in(flags, implementation):
    """Per parameter, the k-th update op runs in the k-th foreach call (one launch group each, on every
    device, or on GPUs only where the flags are unset: PyTorch's default); fused, the whole update of the
    param group is one kernel; the for-loop has no groups. On one GPU the launches fall accordingly."""
    g = train(mlp(), torch.randn(B, IN), torch.randint(0, C, (B,)), torch.optim.Adam, **flags)
    assert g.meta["optimizer"] == {"class": "Adam", "implementation": [implementation]}
    update = [op for op in g.ops if op.phase == "update" and op.type.startswith(("aten.", "autoplace."))]
    groups = {op.meta.get("launch_group") for op in update}
    per_param = len(update) // 4
    assert len(update) == 4 * per_param and per_param > 1
    if implementation == "for-loop":
        assert groups == {None}
    elif implementation in ("fused", "foreach"):      # the step's add_ and one fused-kernel op per parameter
        assert per_param == 2 and groups == {"optimizer.0" if implementation == "fused" else "optimizer.0.0.aten.add_",
                                             "optimizer.0.update"}
    else:
        assert len(groups) == per_param and None not in groups
        # the same position of each parameter's update shares a group, in the same op type (the default
        # keeps the traced ops: on a CPU PyTorch runs them one by one)
        first = [op for op in update if op.colocation_group == "0.weight"]
        for k, op in enumerate(first):
            members = [o for o in update if o.meta["launch_group"] == op.meta["launch_group"]]
            assert len(members) == 4 and {o.type for o in members} == {op.type}, k
    assert all(("group_device_types" in op.meta) == (implementation == "default")
               for op in update if op.meta.get("launch_group"))
    # on one GPU its host thread pays each other op's launch and each group's once
    from autoplace.cost import op_time_matrix

    cluster = get_cluster("p100x2")
    gpu = cluster.index("gpu:0")
    host = simulate(g, cluster, place(g, cluster, "single-gpu")).host_time[gpu]
    overhead = cluster.devices[gpu].op_overhead_s
    launch = np.minimum(op_time_matrix(g, cluster)[:, gpu], overhead)
    grouped = g.op_group >= 0
    assert host == pytest.approx(launch[~grouped].sum() + g.group_launches.sum() * overhead, rel=1e-9)
    assert len(g.launch_groups) == {"for-loop": 0, "foreach": 2, "default": per_param, "fused": 2}[implementation]


def test_in_place_ops_alias_what_they_write():
    """Captured in-place ops (SGD's ``add_``, Adam's ``lerp_``/``addcdiv_``/``denom.add_(eps)``) are views
    of the tensor they write, so they allocate nothing. One SGD step of a bias-free 1024x1024 linear
    layer on one device peaks at the resident weight (4 MiB) + its gradient ``mm_1`` (4 MiB, alive
    through its two transposes until ``add_`` ends) + the two 8 KiB inputs + the 8-byte learning-rate
    input; were ``add_`` to allocate its output, 4 MiB more."""
    torch.manual_seed(0)
    m = torch.nn.Linear(1024, 1024, bias=False)
    x, y = torch.randn(2, 1024), torch.randn(2, 1024)
    g = capture_training_step(m, x, torch.nn.functional.mse_loss, torch.optim.SGD(m.parameters(), lr=0.1),
                              targets=y)
    add = g.op("add_")
    assert add.meta["view"] and add.inputs[0] == "weight" and g.out_alloc_total[g.index("add_")] == 0
    r = simulate(g, get_cluster("k80x2"), np.full(g.n_ops, 1))
    assert r.peak_memory[1] == 4 * 2**20 + 4 * 2**20 + 2 * 8192 + 8
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))
    g = capture_training_step(model, torch.randn(4, 8), torch.nn.functional.mse_loss,
                              torch.optim.Adam(model.parameters()), targets=torch.randn(4, 2))
    in_place = [op for op in g.ops if op.type.endswith("_") and op.phase == "update"]
    assert {op.type for op in in_place} >= {"aten.add_", "aten.lerp_", "aten.addcdiv_", "aten.mul_"}
    assert all(op.meta.get("view") for op in in_place)


def test_the_learning_rate_is_an_input_beside_each_parameter_and_takes_no_time():
    """Each parameter's update reads its learning rate from a float64 input in its co-location group (the
    group's value captured in ``value``), not from a constant: no ``-lr`` literal is left in the update."""
    import json

    from autoplace.cost import op_time_matrix

    m = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD([{"params": [m.weight]}, {"params": [m.bias], "lr": 0.25}], lr=0.125)
    g = capture_training_step(m, torch.randn(3, 4), torch.nn.functional.mse_loss, opt, targets=torch.randn(3, 2))
    lr = {op.name: op for op in g.ops if op.type == "hyperparameter"}
    assert set(lr) == {"weight.lr", "bias.lr"}
    assert lr["weight.lr"].meta["value"] == 0.125 and lr["bias.lr"].meta["value"] == 0.25
    assert lr["bias.lr"].colocation_group == "bias" and lr["bias.lr"].outputs[0].dtype == "float64"
    calls = json.dumps([op.meta.get("call") for op in g.ops if op.phase == "update"])
    assert "-0.125" not in calls and "-0.25" not in calls
    times = op_time_matrix(g, get_cluster("p100x2"))
    assert (times[[g.index(n) for n in lr]] == 0).all()
    adam = capture_training_step(m, torch.randn(3, 4), torch.nn.functional.mse_loss,
                                 torch.optim.Adam(m.parameters(), betas=(0.5, 0.75)), targets=torch.randn(3, 2))
    betas = {op.name: op.meta["value"] for op in adam.ops if op.type == "hyperparameter"}
    assert betas == {"weight.lr": 0.001, "weight.beta1": 0.5, "weight.beta2": 0.75,
                     "bias.lr": 0.001, "bias.beta1": 0.5, "bias.beta2": 0.75}


def test_conv_net_flops():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 5))
    g = train(model, torch.randn(2, 3, 6, 6), torch.randint(0, 5, (2,)))
    conv = [op for op in g.ops if op.type == "aten.convolution"]
    assert len(conv) == 1 and conv[0].flops == 2 * 2 * 6 * 6 * 8 * 3 * 3 * 3  # 2 * N*H*W*Cout * Cin*k*k
    conv_bwd = [op for op in g.ops if op.type == "aten.convolution_backward"]
    assert conv_bwd and conv_bwd[0].phase == "backward"


class TwoStepLSTM(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.LSTMCell(IN, H)
        self.out = nn.Linear(H, C)

    def forward(self, x):
        h = c = torch.zeros(x.shape[1], H)
        for t in range(x.shape[0]):
            with tag(step=t, role="lstm"):
                h, c = self.cell(x[t], (h, c))
        return self.out(h)


def test_two_step_lstm_cell_keeps_step_tags():
    g = train(TwoStepLSTM(), torch.randn(2, B, IN), torch.randint(0, C, (B,)))
    steps = {op.meta.get("step") for op in g.ops if op.meta.get("role") == "lstm"}
    assert steps == {0, 1}
    gate_mms = [op for op in g.ops if op.type in ("aten.mm", "aten.addmm") and op.phase == "forward"
                and op.scope in ("cell.t0", "cell.t1")]
    assert len(gate_mms) == 4  # input and hidden projections, two steps
    assert sorted({op.flops for op in gate_mms}) == sorted({2 * B * IN * 4 * H, 2 * B * H * 4 * H})
    assert any(op.phase == "backward" and op.scope == "cell.t1" for op in g.ops)


class Attention(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x):
        q, k, v = self.q(x), self.k(x), self.v(x)
        w = torch.softmax(q @ k.transpose(1, 2) / 4.0, dim=-1)
        return (w @ v).sum(dim=1)


def test_small_attention_bmm_flops():
    b, n, d = 2, 5, 16
    g = train(Attention(d), torch.randn(b, n, d), torch.randint(0, d, (b,)))
    fwd_bmm = [op.flops for op in g.ops if op.type == "aten.bmm" and op.phase == "forward"]
    assert sorted(fwd_bmm) == [2 * b * n * n * d, 2 * b * n * n * d]  # QK^T and WV


def test_inference_capture_has_no_backward_or_update():
    g = capture_inference(mlp(), torch.randn(B, IN))
    assert {op.phase for op in g.ops} == {"forward"}
    assert not [op for op in g.ops if "backward" in op.type]


def test_captured_graph_simulates():
    g = train(mlp(), torch.randn(B, IN), torch.randint(0, C, (B,)), torch.optim.Adam)
    cluster = get_cluster("k80x2")
    r = simulate(g, cluster, place(g, cluster, "single-gpu"))
    assert r.ok and r.step_time > 0
    assert r.peak_memory[1] >= sum(op.param_bytes for op in g.ops)
    # one device, no transfers: on the CPU the step is the captured ops' roofline times added up; on the
    # GPU the launches overlap the kernels, so it is between the kernels' sum and that
    from autoplace.cost import device_times, op_time_matrix

    gpu = cluster.index("gpu:0")
    times = op_time_matrix(g, cluster)
    assert r.n_transfers == 0
    assert device_times(g, cluster, times)[:, gpu].sum() <= r.step_time <= times[:, gpu].sum()
    on_cpu = simulate(g, cluster, place(g, cluster, "single-cpu"))
    assert on_cpu.step_time == pytest.approx(times[:, cluster.index("cpu:0")].sum(), rel=1e-12)
    assert r.step_time > sum(op.flops for op in g.ops) / cluster.devices[gpu].peak_flops  # FLOPs were captured


class DataDependent(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(IN, C)

    def forward(self, x):
        if x.sum() > 0:  # Python branch on a tensor value
            return self.fc(x)
        return self.fc(-x)


def test_data_dependent_control_flow_is_a_clear_error_naming_the_users_line():
    import inspect

    line = inspect.getsourcelines(DataDependent.forward)[1] + 1
    with pytest.raises(CaptureError) as e:
        train(DataDependent(), torch.randn(B, IN), torch.randint(0, C, (B,)))
    text = str(e.value)
    assert text.startswith("cannot trace DataDependent training step: data-dependent")
    assert f"{__file__}:{line} in forward `if x.sum() > 0:" in text
    assert text.endswith(".") and "\n" not in text                      # torch's first sentence, whole


def test_a_shape_a_meta_kernel_refuses_is_one_error_and_no_logged_traceback():
    import logging

    from autoplace.capture import capture_training_step

    class Records(logging.Handler):
        def __init__(self):
            super().__init__()
            self.records = []

        def emit(self, record):
            self.records.append(record)

    log, seen = logging.getLogger("torch._subclasses.fake_tensor"), Records()
    log.addHandler(seen)
    try:
        model = nn.Linear(4, 3)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        with pytest.raises(CaptureError, match=r"cannot trace .*RuntimeError.*: a and b must have same reduction dim"):
            capture_training_step(model, torch.randn(3, 4), lambda out, t: (out @ t).sum(), opt,
                                  targets=torch.randn(5, 7))
    finally:
        log.removeHandler(seen)
    assert seen.records == []                             # torch's traceback of the meta kernel: held back
    assert not log.filters                                # the hold ends with the trace


def test_non_scalar_loss_is_rejected():
    with pytest.raises(CaptureError, match="scalar"):
        train(mlp(), torch.randn(B, IN), torch.randint(0, C, (B,)), loss=lambda out, y: out)


FACTORY = '''
import torch


def make():
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    return (m, torch.randn(4, 8), torch.nn.functional.cross_entropy, torch.optim.SGD(m.parameters(), lr=0.1),
            torch.randint(0, 3, (4,)))


def branchy():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 3)

        def forward(self, x):
            return self.fc(x) if x.max() > 0 else self.fc(x * 2)
    m = M()
    return m, torch.randn(4, 8), torch.nn.functional.cross_entropy, torch.optim.SGD(m.parameters(), lr=0.1), \\
        torch.randint(0, 3, (4,))


def broken():
    raise RuntimeError("dataset missing")


def _mlp():
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))


def optimizer_class():
    m = _mlp()
    return m, torch.randn(4, 8), torch.nn.functional.cross_entropy, torch.optim.Adam, torch.randint(0, 3, (4,))


def model_class():
    m = _mlp()
    return (torch.nn.Linear, torch.randn(4, 8), torch.nn.functional.cross_entropy,
            torch.optim.SGD(m.parameters(), lr=0.1), torch.randint(0, 3, (4,)))


def vector_loss():
    m = _mlp()
    return m, torch.randn(4, 8), lambda o, y: o, torch.optim.SGD(m.parameters(), lr=0.1), torch.randint(0, 3, (4,))


def on_meta():
    m = _mlp()
    return (m, torch.randn(4, 8, device="meta"), torch.nn.functional.cross_entropy,
            torch.optim.SGD(m.parameters(), lr=0.1), torch.randint(0, 3, (4,)))
'''


def test_cli_capture(tmp_path, capsys):
    import json

    from autoplace.cli import main
    from autoplace.formats import load_graph

    f = tmp_path / "factory.py"
    f.write_text(FACTORY)
    out = tmp_path / "g.json.gz"
    assert main(["capture", f"{f}:make", "-o", str(out)]) == 0
    g = load_graph(out)
    assert {op.phase for op in g.ops} == {"forward", "backward", "update"}
    assert g.name == "make"                                              # a bare Sequential: the factory's name
    (tmp_path / "named.py").write_text(FACTORY.replace("torch.nn.Sequential(", "Net(").replace(
        "def make():", "class Net(torch.nn.Sequential):\n    pass\n\n\ndef make():"))
    assert main(["capture", f"{tmp_path / 'named.py'}:make", "-o", str(tmp_path / "n.json")]) == 0
    assert load_graph(tmp_path / "n.json").name == "Net"                 # else the model's class
    assert main(["capture", f"{f}:make", "--inference", "-o", str(tmp_path / "fwd.json")]) == 0
    assert {op.phase for op in load_graph(tmp_path / "fwd.json").ops} == {"forward"}
    capsys.readouterr()
    assert main(["capture", f"{f}:make", "-o", str(tmp_path / "j.json"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["ops"] == g.n_ops and summary["phases"]["update"] > 0 and summary["output"].endswith("j.json")
    for spec, message in ((f"{f}:broken", 'in broken `raise RuntimeError("dataset missing")`: dataset missing'),
                          (f"{f}:branchy", "cannot trace M training step: data-dependent"),
                          (f"{f}:nothing", "has no callable 'nothing'"),
                          ("no_such_module_xyz:make", "ModuleNotFoundError"),
                          (f"{f}:optimizer_class", "got the class Adam, not an optimizer: pass an instance"),
                          (f"{f}:model_class", "got the class Linear, not a model: pass an instance"),
                          (f"{f}:vector_loss", "scalar tensor (reduce it, e.g. .mean()), got a tensor of shape (4, 3)"),
                          (f"{f}:on_meta", "input 0 is on the meta device but target 0 is not"),
                          ("justaname", "expected MODULE:FUNCTION")):
        bad = tmp_path / "bad.json"
        assert main(["capture", spec, "-o", str(bad)]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
        assert not bad.exists()
    json.loads(gzip_text(out))


def gzip_text(path):
    import gzip

    return gzip.decompress(path.read_bytes()).decode()


def test_a_module_in_the_current_directory_is_found(tmp_path, monkeypatch):
    from autoplace.cli import main

    (tmp_path / "my_local_models.py").write_text(FACTORY)
    monkeypatch.chdir(tmp_path)
    assert main(["capture", "my_local_models:make", "-o", str(tmp_path / "g.json")]) == 0


class Keyworded(torch.nn.Module):
    """Takes keyword arguments, as Hugging Face models do."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(20, 8)
        self.fc = torch.nn.Linear(8, 3)

    def forward(self, input_ids, attention_mask=None):
        h = self.emb(input_ids)
        if attention_mask is not None:
            h = h * attention_mask[..., None]
        return self.fc(h).mean(1)


def test_keyword_inputs_and_an_exported_program_are_captured_alike():
    from torch.nn.functional import cross_entropy

    model = Keyworded()
    ids, mask, y = torch.randint(0, 20, (4, 5)), torch.ones(4, 5), torch.randint(0, 3, (4,))
    by_kw = capture_training_step(model, {"input_ids": ids, "attention_mask": mask}, cross_entropy,
                                  torch.optim.SGD(model.parameters(), lr=0.1), targets=y)
    both = capture_training_step(model, ((ids,), {"attention_mask": mask}), cross_entropy,
                                 torch.optim.SGD(model.parameters(), lr=0.1), targets=y)
    ep = torch.export.export(model, (ids,), {"attention_mask": mask})
    exported = capture_training_step(ep, None, cross_entropy, torch.optim.SGD(model.parameters(), lr=0.1), targets=y)
    no_mask = capture_training_step(model, {"input_ids": ids}, cross_entropy,
                                    torch.optim.SGD(model.parameters(), lr=0.1), targets=y)
    for g in (by_kw, both, exported):
        assert [tuple(op.outputs[0].shape) for op in g.ops if op.type == "input"] == [(4, 5), (4, 5), (4,)]
        assert g.total_flops == pytest.approx(by_kw.total_flops)
    assert no_mask.total_flops < by_kw.total_flops                      # the mask's multiply is really there
    assert len(capture_inference(ep, None).ops) < len(exported.ops)


def test_an_fx_graph_module_is_captured_as_its_module():
    from torch.nn.functional import cross_entropy

    model = mlp()
    x, y = torch.randn(B, IN), torch.randint(0, C, (B,))
    traced = torch.fx.symbolic_trace(model)
    a = capture_training_step(model, x, cross_entropy, torch.optim.SGD(model.parameters(), lr=0.1), targets=y)
    b = capture_training_step(traced, x, cross_entropy, torch.optim.SGD(traced.parameters(), lr=0.1), targets=y)
    assert b.total_flops == a.total_flops and b.total_param_bytes == a.total_param_bytes


def test_launch_groups_follow_parameters_not_colocation_groups():
    """A norm layer's weight and bias share a co-location group; in different param groups (the bias
    updated by the for-loop) each keeps its own implementation, and every foreach call holds one op per
    parameter of its param group."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(IN, H), nn.BatchNorm1d(H), nn.ReLU(), nn.Linear(H, C))
    bias = model[1].bias
    opt = torch.optim.Adam([{"params": [p for p in model.parameters() if p is not bias], "foreach": False},
                            {"params": [bias]}], lr=0.01)
    opt.param_groups[0]["foreach"] = True
    g = capture_training_step(model, torch.randn(B, IN), nn.functional.cross_entropy, opt,
                              targets=torch.randint(0, C, (B,)))
    assert g.meta["optimizer"]["implementation"] == ["default", "foreach"]
    from autoplace.capture.optimizer import update_params

    param_of = update_params(list(g.ops), [n for n, _ in model.named_parameters()])
    update = [op for op in g.ops if op.phase == "update" and op.type.startswith(("aten.", "autoplace."))]
    assert {op.colocation_group for op in update if param_of[op.name] in ("1.weight", "1.bias")} == {"1.weight"}
    for op in update:
        group = op.meta.get("launch_group", "")
        assert group.startswith("optimizer.1." if param_of[op.name] == "1.bias" else "optimizer.0."), op.name
    members: dict[str, list[str]] = {}
    for op in update:
        members.setdefault(op.meta["launch_group"], []).append(param_of[op.name])
    for group, params in members.items():
        assert len(params) == len(set(params)), group          # one op of each parameter per foreach call
