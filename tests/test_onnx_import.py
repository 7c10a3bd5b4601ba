"""ONNX import: a small model written with onnx.helper; FLOPs, bytes, parameters; bad files."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from autoplace.capture import CaptureError  # noqa: E402
from autoplace.capture.onnx_import import import_onnx  # noqa: E402
from autoplace.cli import main  # noqa: E402


def small_model(batch="fixed"):
    dim = 4 if batch == "fixed" else "N"
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [dim, 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [dim, 10])
    inits = [numpy_helper.from_array(np.zeros((6, 3, 3, 3), np.float32), "conv_w"),
             numpy_helper.from_array(np.zeros((6 * 8 * 8, 10), np.float32), "fc_w"),
             numpy_helper.from_array(np.zeros((10,), np.float32), "fc_b"),
             numpy_helper.from_array(np.array([4, 384], np.int64), "shape")]
    nodes = [helper.make_node("Conv", ["x", "conv_w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Reshape", ["r", "shape"], ["flat"], name="flatten"),
             helper.make_node("MatMul", ["flat", "fc_w"], ["m"], name="fc"),
             helper.make_node("Add", ["m", "fc_b"], ["y"], name="bias")]
    graph = helper.make_graph(nodes, "tiny-cnn", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_import_small_model(tmp_path):
    f = tmp_path / "m.onnx"
    onnx.save(small_model(), f)
    g = import_onnx(f)
    assert g.name == "tiny-cnn"
    ops = {op.name: op for op in g.ops}
    assert ops["conv"].flops == 2 * (4 * 6 * 8 * 8) * (3 * 3 * 3)
    assert ops["fc"].flops == 2 * 4 * 10 * 384
    assert ops["relu"].flops == 4 * 6 * 8 * 8 and ops["relu"].out_bytes == (4 * 6 * 8 * 8 * 4,)
    assert ops["flatten"].flops == 0 and ops["flatten"].meta["view"]
    assert ops["fc_w"].param_bytes == 384 * 10 * 4 and ops["fc_w"].type == "parameter"
    assert ops["x"].type == "input" and ops["x"].param_bytes == 0
    assert ops["bias"].inputs == ("fc", "fc_b")
    assert {op.phase for op in g.ops} == {"forward"}


def test_cli_import_and_use_onnx_directly(tmp_path, capsys):
    f = tmp_path / "m.onnx"
    onnx.save(small_model(), f)
    assert main(["import", str(f), "-o", str(tmp_path / "g.json")]) == 0
    assert main(["compare", str(f), "-c", "k80x2", "--json"]) == 0


@pytest.mark.parametrize("content, message", [
    (b"this is not protobuf at all \xff\xfe", "not an ONNX model"),
    (None, "symbolic dimension 'N'"),
])
def test_bad_onnx_files(tmp_path, capsys, content, message):
    f = tmp_path / "bad.onnx"
    if content is None:
        onnx.save(small_model(batch="symbolic"), f)
    else:
        f.write_bytes(content)
    with pytest.raises(CaptureError, match=message):
        import_onnx(f)
    out = tmp_path / "g.json"
    assert main(["import", str(f), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and not out.exists()


@pytest.mark.parametrize("dynamo", [False, True])
def test_a_standard_transformer_encoder_exported_by_torch_imports(tmp_path, dynamo):
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnxscript")                     # the onnx extra: torch.onnx.export needs it
    import warnings

    enc = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(32, 4, 64), 2).eval()
    path = tmp_path / "enc.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(enc, (torch.randn(8, 2, 32),), str(path), dynamo=dynamo)
    g = import_onnx(path)                                # no symbolic dimension, whichever exporter
    weights = sum(p.numel() * 4 for p in enc.parameters())
    assert 0.85 * weights <= sum(op.param_bytes for op in g.ops) <= weights      # exporters fold a few
    # two layers of q, k, v and out projections (4 x 2·16·32·32) and a feed-forward (2 x 2·16·32·64),
    # plus the attention itself and the norms: a little more
    matmuls = 2 * (4 * 2 * 16 * 32 * 32 + 2 * 2 * 16 * 32 * 64)
    assert matmuls <= g.total_flops <= 1.2 * matmuls
