"""The papers' benchmark models, registered in the zoo and captured (with caching) on first use."""

from __future__ import annotations

from typing import Any

from autoplace.cache import cached_graph
from autoplace.capture import CaptureError, capture_training_step
from autoplace.errors import InfeasibleError
from autoplace.graph import Graph
from autoplace.replicas import set_micro_batched
from autoplace.zoo.registry import register_model

__all__: list[str] = []


def _captured(name: str, params: dict[str, Any], make, batch_dim: int = 0) -> Graph:
    """Capture ``make(**params) -> (model, inputs, loss_fn, optimizer, targets)`` through the cache; a
    ``micro_batches`` parameter above 1 captures gradient accumulation over that many slices of the batch
    (its dimension ``batch_dim``)."""
    params = dict(params)
    micro = params.pop("micro_batches", 1)
    key = params if micro == 1 else {**params, "micro_batches": micro}   # M = 1 keeps its cached graphs

    def build() -> Graph:
        import torch


        torch.manual_seed(0)
        with torch.device("meta"):  # parameters of the full-size model are never allocated
            model, inputs, loss_fn, optimizer, targets = make(**params)
        return capture_training_step(model, inputs, loss_fn, optimizer, targets=targets, name=name,
                                     micro_batches=micro, batch_dim=batch_dim)

    graph = cached_graph(name, key, build)

    def again(m: int) -> Graph:

        try:
            return _captured(name, {**params, "micro_batches": m}, make, batch_dim)
        except CaptureError as e:          # m does not divide the batch: no such strategy
            raise InfeasibleError(f"{name}: {e}") from None

    return set_micro_batched(graph, again)


def _rnnlm(vocab: int, hidden: int, layers: int, steps: int, batch: int):
    import torch

    from autoplace.zoo.torch_models import RNNLM, sequence_loss

    model = RNNLM(vocab, hidden, layers, steps)
    tokens = torch.zeros(steps, batch, dtype=torch.int64)
    return model, tokens, sequence_loss, torch.optim.Adam(model.parameters(), lr=1e-3), tokens


def _register_rnnlm(name: str, paper: str, **defaults: Any) -> None:
    @register_model(name, description=f"RNN language model, {defaults['layers']} LSTM layers of "
                    f"{defaults['hidden']}, {defaults['steps']} unrolled steps, batch {defaults['batch']}",
                    paper=paper, **defaults, micro_batches=1)
    def factory(**params: Any) -> Graph:
        return _captured(name, params, _rnnlm, batch_dim=1)


_register_rnnlm("rnnlm-2", "Mirhoseini et al. 2017 §4.1", vocab=10000, hidden=2048, layers=2, steps=40, batch=64)
_register_rnnlm("rnnlm-2-large", "Mirhoseini et al. 2017 §4.3 (fits no single device)",
                vocab=10000, hidden=4096, layers=2, steps=40, batch=256)
_register_rnnlm("rnnlm-4", "GDP §4 (Zhou et al.)", vocab=10000, hidden=2048, layers=4, steps=40, batch=64)
_register_rnnlm("rnnlm-8", "GDP §4 (Zhou et al.)", vocab=10000, hidden=2048, layers=8, steps=40, batch=64)


def _seq2seq(vocab: int, hidden: int, layers: int, src_len: int, tgt_len: int, batch: int, gnmt: bool = False):
    import torch

    from autoplace.zoo.torch_models import Seq2Seq, sequence_loss

    model = Seq2Seq(vocab, hidden, layers, src_len, tgt_len, gnmt=gnmt)
    src = torch.zeros(src_len, batch, dtype=torch.int64)
    tgt = torch.zeros(tgt_len, batch, dtype=torch.int64)
    return model, (src, tgt), sequence_loss, torch.optim.Adam(model.parameters(), lr=1e-3), tgt


def _register_seq2seq(name: str, paper: str, gnmt: bool, **defaults: Any) -> None:
    kind = "GNMT (bidirectional first layer, residuals)" if gnmt else "attentional NMT"
    @register_model(name, description=f"{kind}, {defaults['layers']} LSTM layers of {defaults['hidden']}, "
                    f"lengths {defaults['src_len']}/{defaults['tgt_len']}, batch {defaults['batch']}",
                    paper=paper, **defaults, micro_batches=1)
    def factory(**params: Any) -> Graph:
        return _captured(name, params, lambda **p: _seq2seq(**p, gnmt=gnmt), batch_dim=1)


_S2S = dict(vocab=32000, hidden=1024, layers=2, src_len=40, tgt_len=40, batch=64)
_register_seq2seq("nmt-2", "Mirhoseini et al. 2017 §4.1", False, **_S2S)
_register_seq2seq("nmt-2-large", "Mirhoseini et al. 2017 §4.3 (fits no single device)", False,
                  **{**_S2S, "hidden": 2048, "batch": 256})
for _layers in (2, 4, 8):
    _register_seq2seq(f"gnmt-{_layers}", "GDP §4 (Wu et al. 2016 architecture)", True, **{**_S2S, "layers": _layers})


def _inception(batch: int, image: int, classes: int):
    import torch

    from autoplace.zoo.torch_models import InceptionV3

    model = InceptionV3(classes)
    x = torch.zeros(batch, 3, image, image)
    y = torch.zeros(batch, dtype=torch.int64)
    # RMSProp as in Mirhoseini et al. 2017 §4.1 (Szegedy et al.: decay 0.9, epsilon 1.0)
    opt = torch.optim.RMSprop(model.parameters(), lr=0.045, alpha=0.9, eps=1.0)
    return model, x, torch.nn.functional.cross_entropy, opt, y


@register_model("inception-v3", description="Inception-V3 image classifier, RMSProp",
                paper="Mirhoseini et al. 2017 §4.1; GDP §4", batch=32, image=299, classes=1000)
def inception_v3(**params: Any) -> Graph:
    return _captured("inception-v3", params, _inception)


@register_model("resnet-101", description="ResNet-101 (bottleneck blocks 3-4-23-3), SGD with momentum",
                paper="FlexFlow (Jia et al. 2019) Table 1", batch=64, image=224, classes=1000)
def resnet_101(**params: Any) -> Graph:
    def make(batch: int, image: int, classes: int):
        import torch

        from autoplace.zoo.torch_models import ResNet

        model = ResNet(classes)
        x, y = torch.zeros(batch, 3, image, image), torch.zeros(batch, dtype=torch.int64)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        return model, x, torch.nn.functional.cross_entropy, opt, y

    return _captured("resnet-101", params, make)


def _rnntc(vocab: int, hidden: int, layers: int, steps: int, classes: int, batch: int):
    import torch

    from autoplace.zoo.torch_models import RNNTextClassifier

    model = RNNTextClassifier(vocab, hidden, layers, steps, classes)
    tokens = torch.zeros(steps, batch, dtype=torch.int64)
    labels = torch.zeros(batch, dtype=torch.int64)
    return model, tokens, torch.nn.functional.cross_entropy, torch.optim.Adam(model.parameters(), lr=1e-3), labels


@register_model("rnntc", description="RNN text classifier: 4 LSTM layers of 1024 over 40 words, a softmax over 2 "
                "classes", paper="FlexFlow (Jia et al. 2019) Table 1", vocab=20000, hidden=1024, layers=4, steps=40,
                classes=2, batch=64)
def rnntc(**params: Any) -> Graph:
    return _captured("rnntc", params, _rnntc, batch_dim=1)


def _image_classifier(cls_name: str, batch: int, image: int, classes: int, lr: float):
    import torch

    import autoplace.zoo.torch_models as torch_models

    model = getattr(torch_models, cls_name)(classes)
    x = torch.zeros(batch, 3, image, image)
    y = torch.zeros(batch, dtype=torch.int64)
    return model, x, torch.nn.functional.cross_entropy, torch.optim.SGD(model.parameters(), lr=lr), y


@register_model("alexnet", description="AlexNet (TensorFlow alexnet_benchmark), SGD",
                paper="HTF-MPR §V", batch=128, image=224, classes=1000)
def alexnet(**params: Any) -> Graph:
    return _captured("alexnet", params, lambda **p: _image_classifier("AlexNet", lr=0.01, **p))


@register_model("vgg16", description="VGG-16 (configuration D), SGD", paper="HTF-MPR §V",
                batch=32, image=224, classes=1000)
def vgg16(**params: Any) -> Graph:
    return _captured("vgg16", params, lambda **p: _image_classifier("VGG16", lr=0.01, **p))


def _mnist_softmax(batch: int):
    import torch

    from autoplace.zoo.torch_models import SoftmaxRegression

    model = SoftmaxRegression()
    x, y = torch.zeros(batch, 784), torch.zeros(batch, dtype=torch.int64)
    return model, x, torch.nn.functional.cross_entropy, torch.optim.SGD(model.parameters(), lr=0.5), y


@register_model("mnist-softmax", description="MNIST softmax regression (TensorFlow tutorial), SGD",
                paper="HTF-MPR §V", batch=100)
def mnist_softmax(**params: Any) -> Graph:
    return _captured("mnist-softmax", params, _mnist_softmax)


def _transformer_xl(vocab: int, d_model: int, heads: int, d_inner: int, layers: int, seg_len: int, mem_len: int,
                    batch: int):
    import torch

    from autoplace.zoo.torch_models import TransformerXL

    model = TransformerXL(vocab, d_model, heads, d_inner, layers, seg_len, mem_len)
    tokens = torch.zeros(seg_len, batch, dtype=torch.int64)
    mems = torch.zeros(layers, mem_len, batch, d_model)

    def loss(logits, targets):
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    return model, (tokens, mems), loss, torch.optim.Adam(model.parameters(), lr=2.5e-4), tokens


for _layers in (2, 4, 8):
    register_model(f"transformer-xl-{_layers}", description=f"Transformer-XL language model, {_layers} layers "
                   "(d_model 512, 8 heads, segment 128 + memory 128)", paper="GDP §4 (Dai et al. 2019)",
                   vocab=32000, d_model=512, heads=8, d_inner=2048, layers=_layers, seg_len=128, mem_len=128,
                   batch=32)(lambda _n=f"transformer-xl-{_layers}", **p: _captured(_n, p, _transformer_xl))


def _gpt(vocab: int, d_model: int, heads: int, layers: int, seq_len: int, batch: int):
    import torch

    from autoplace.zoo.torch_models import GPT

    model = GPT(vocab, d_model, heads, layers, seq_len)
    tokens = torch.zeros(batch, seq_len, dtype=torch.int64)

    def loss(logits, targets):
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    return model, tokens, loss, torch.optim.Adam(model.parameters(), lr=3e-4), tokens


register_model("gpt-24", description="GPT-style language model, 24 blocks of d_model 1024 (16 heads), sequence "
               "512, batch 16, Adam (fits no single P100 or K80); micro_batches=M captures M-way gradient "
               "accumulation", paper="autoplace's pipeline benchmark (Radford et al. 2019's layout)",
               vocab=32000, d_model=1024, heads=16, layers=24, seq_len=512, batch=16, micro_batches=1)(
    lambda **p: _captured("gpt-24", p, _gpt))


def _wavenet(stacks: int, layers_per_stack: int, residual: int, skip: int, classes: int, length: int, batch: int):
    import torch

    from autoplace.zoo.torch_models import WaveNet

    model = WaveNet(stacks, layers_per_stack, residual, skip, classes)
    x = torch.zeros(batch, classes, length)
    y = torch.zeros(batch, length, dtype=torch.int64)

    def loss(logits, targets):
        return torch.nn.functional.cross_entropy(logits, targets)

    return model, x, loss, torch.optim.Adam(model.parameters(), lr=1e-3), y


for _stacks, _total in ((2, 18), (4, 36)):
    register_model(f"wavenet-{_stacks}x{_total}", description=f"WaveNet, {_stacks} stacks of {_total // _stacks} "
                   "dilated layers (residual 64, skip 256, 256 classes, 8192 samples)",
                   paper="GDP §4 (van den Oord et al. 2016)", stacks=_stacks, layers_per_stack=_total // _stacks,
                   residual=64, skip=256, classes=256, length=8192, batch=4)(
        lambda _n=f"wavenet-{_stacks}x{_total}", **p: _captured(_n, p, _wavenet))


def _amoebanet(cells: int, filters: int, batch: int, image: int, classes: int):
    import torch

    from autoplace.zoo.torch_models import AmoebaNet

    model = AmoebaNet(cells, filters, classes)
    x, y = torch.zeros(batch, 3, image, image), torch.zeros(batch, dtype=torch.int64)
    opt = torch.optim.RMSprop(model.parameters(), lr=0.256, alpha=0.9, eps=1.0)  # Real et al. 2018 §A
    return model, x, torch.nn.functional.cross_entropy, opt, y


@register_model("amoebanet", description="AmoebaNet-A (3 stacks of 4 normal cells, 64 filters), RMSProp",
                paper="GDP §4 (Real et al. 2018)", cells=4, filters=64, batch=32, image=224, classes=1000)
def amoebanet(**params: Any) -> Graph:
    return _captured("amoebanet", params, _amoebanet)
