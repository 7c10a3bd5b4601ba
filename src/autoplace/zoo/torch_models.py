"""The papers' benchmark models in plain torch (no torchvision), unrolled like the papers' graphs.

Recurrent models run explicit per-step LSTM cells (each cell of each layer at each time step is its own
set of ops, as in TensorFlow's unrolled graphs) and tag every op with its structural metadata through
:func:`autoplace.capture.tag`: ``layer``, ``step`` and ``role`` (``embedding``, ``lstm``,
``attention``, ``softmax``, ``encoder``/``decoder`` ...), which expert placements and grouping read.

Size: the papers' PyTorch models side by side, a class or a builder each, sharing their tagging
helpers.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from autoplace.capture import tag

__all__ = ["LSTMCell", "RNNLM", "RNNTextClassifier", "Seq2Seq", "sequence_loss", "InceptionV3", "ResNet",
           "AlexNet", "VGG16", "SoftmaxRegression", "TransformerXL", "GPT", "WaveNet", "AmoebaNet"]


class LSTMCell(nn.Module):
    """One LSTM cell (Hochreiter & Schmidhuber 1997), written out so FLOP counters see its matmuls::

        i, f, g, o = split(x W_ih^T + h W_hh^T + b)
        c' = sigmoid(f) * c + sigmoid(i) * tanh(g);   h' = sigmoid(o) * tanh(c')
    """

    def __init__(self, input_size: int, hidden: int):
        super().__init__()
        self.hidden = hidden
        self.weight_ih = nn.Parameter(torch.randn(4 * hidden, input_size) * input_size ** -0.5)
        self.weight_hh = nn.Parameter(torch.randn(4 * hidden, hidden) * hidden ** -0.5)
        self.bias = nn.Parameter(torch.zeros(4 * hidden))

    def forward(self, x, h, c):
        gates = F.linear(x, self.weight_ih, self.bias) + F.linear(h, self.weight_hh)
        i, f, g, o = gates.chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        return h, c


class _UnrolledLSTM(nn.Module):
    """An embedding and ``layers`` LSTM layers of ``hidden`` units unrolled over ``steps`` steps:
    :meth:`states` yields each step's top state, every op tagged with its step, layer and role."""

    def __init__(self, vocab: int, hidden: int, layers: int, steps: int):
        super().__init__()
        self.steps = steps
        self.embedding = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList(LSTMCell(hidden, hidden) for _ in range(layers))

    def states(self, tokens):
        batch = tokens.shape[1]
        h = [tokens.new_zeros(batch, cell.hidden, dtype=torch.float32) for cell in self.layers]
        c = [x.clone() for x in h]
        for t in range(self.steps):
            with tag(step=t, layer=0, role="embedding"):
                x = self.embedding(tokens[t])
            for k, cell in enumerate(self.layers):
                with tag(step=t, layer=k, role="lstm"):
                    h[k], c[k] = cell(x, h[k], c[k])
                x = h[k]
            yield t, x


class RNNLM(_UnrolledLSTM):
    """Recurrent neural network language model (Zaremba et al. 2014; Jozefowicz et al. 2016), as in
    Mirhoseini et al. 2017 §4.1: ``layers`` LSTM layers of ``hidden`` units unrolled for ``steps`` steps,
    a softmax prediction at every step. Input ``tokens`` is ``[steps, batch]``."""

    def __init__(self, vocab: int, hidden: int, layers: int, steps: int):
        super().__init__(vocab, hidden, layers, steps)
        self.softmax = nn.Linear(hidden, vocab)

    def forward(self, tokens):
        logits = []
        for t, x in self.states(tokens):
            with tag(step=t, layer=len(self.layers) - 1, role="softmax"):
                logits.append(self.softmax(x))
        return logits


class RNNTextClassifier(_UnrolledLSTM):
    """Recurrent text classifier (FlexFlow's RNNTC: Jia et al. 2019, Table 1): ``layers`` LSTM layers of
    ``hidden`` units over ``steps`` words, a softmax over ``classes`` on the last step's state. Input
    ``tokens`` is ``[steps, batch]``."""

    def __init__(self, vocab: int, hidden: int, layers: int, steps: int, classes: int):
        super().__init__(vocab, hidden, layers, steps)
        self.softmax = nn.Linear(hidden, classes)

    def forward(self, tokens):
        for _, x in self.states(tokens):
            pass
        with tag(step=self.steps - 1, layer=len(self.layers) - 1, role="softmax"):
            return self.softmax(x)


def sequence_loss(logits, targets):
    """Mean cross-entropy over steps; each step's softmax loss is its own group of ops (role=softmax)."""
    total = 0.0
    for t, step_logits in enumerate(logits):
        with tag(step=t, role="softmax"):
            total = total + F.cross_entropy(step_logits, targets[t])
    return total / len(logits)


class Seq2Seq(nn.Module):
    """Attentional encoder-decoder for translation, unrolled per step and per layer.

    ``gnmt=False`` — NMT as in Mirhoseini et al. 2017 (Bahdanau et al. 2015; Luong-style multiplicative
    attention with input feeding): ``layers`` encoder and decoder LSTM layers, attention and softmax on
    the top decoder layer.

    ``gnmt=True`` — GNMT (Wu et al. 2016): bidirectional first encoder layer, residual connections from
    the third layer up, attention computed from the bottom decoder layer's output and fed to every
    decoder layer above it.

    Inputs: ``src [src_len, batch]`` and ``tgt [tgt_len, batch]`` token ids.
    """

    def __init__(self, vocab: int, hidden: int, layers: int, src_len: int, tgt_len: int, gnmt: bool = False):
        super().__init__()
        self.gnmt, self.src_len, self.tgt_len, self.hidden = gnmt, src_len, tgt_len, hidden
        H = hidden
        self.src_embedding = nn.Embedding(vocab, H)
        self.tgt_embedding = nn.Embedding(vocab, H)
        enc_in = [H] + [2 * H if gnmt else H] + [H] * (layers - 2)
        self.encoder = nn.ModuleList(LSTMCell(enc_in[k], H) for k in range(layers))
        self.encoder_reverse = LSTMCell(H, H) if gnmt else None
        if gnmt:  # bottom layer: [embedding; previous context]; upper layers: [below; context]
            dec_in = [2 * H] * layers
        else:     # input feeding on the bottom layer only
            dec_in = [2 * H] + [H] * (layers - 1)
        self.decoder = nn.ModuleList(LSTMCell(dec_in[k], H) for k in range(layers))
        self.attention = nn.Linear(H, H, bias=False)   # score(h, e) = e . W h
        self.attention_out = nn.Linear(2 * H, H)       # attentional hidden state tanh(W [c; h])
        self.softmax = nn.Linear(H, vocab)

    def _encode(self, src):
        B, H, L = src.shape[1], self.hidden, len(self.encoder)
        zeros = src.new_zeros(B, H, dtype=torch.float32)
        emb = []
        for t in range(self.src_len):
            with tag(part="encoder", role="embedding", layer=0, step=t):
                emb.append(self.src_embedding(src[t]))
        reverse = [None] * self.src_len
        if self.gnmt:
            h = c = zeros
            for t in reversed(range(self.src_len)):
                with tag(part="encoder", role="lstm", layer=0, step=t, direction="reverse"):
                    h, c = self.encoder_reverse(emb[t], h, c)
                reverse[t] = h
        h, c = [zeros] * L, [zeros] * L
        outputs = []
        for t in range(self.src_len):
            x = emb[t]
            for k, cell in enumerate(self.encoder):
                with tag(part="encoder", role="lstm", layer=k, step=t):
                    if self.gnmt and k == 1:
                        x = torch.cat([x, reverse[t]], dim=1)
                    h[k], c[k] = cell(x, h[k], c[k])
                    x = h[k] + x if self.gnmt and k >= 2 else h[k]
            outputs.append(x)
        with tag(part="encoder", role="attention", layer=L - 1):
            return torch.stack(outputs, dim=1)  # [batch, src_len, hidden]

    def _attend(self, memory, query):
        scores = torch.bmm(memory, self.attention(query).unsqueeze(2)).squeeze(2)
        weights = torch.softmax(scores, dim=1)
        return torch.bmm(weights.unsqueeze(1), memory).squeeze(1)

    def forward(self, src, tgt):
        memory = self._encode(src)
        B, H, L = src.shape[1], self.hidden, len(self.decoder)
        zeros = src.new_zeros(B, H, dtype=torch.float32)
        h, c = [zeros] * L, [zeros] * L
        feed = zeros
        logits = []
        top = L - 1
        for t in range(self.tgt_len):
            with tag(part="decoder", role="embedding", layer=0, step=t):
                y = self.tgt_embedding(tgt[t])
            if self.gnmt:
                with tag(part="decoder", role="lstm", layer=0, step=t):
                    h[0], c[0] = self.decoder[0](torch.cat([y, feed], dim=1), h[0], c[0])
                with tag(part="decoder", role="attention", layer=0, step=t):
                    context = self._attend(memory, h[0])
                x = h[0]
                for k in range(1, L):
                    with tag(part="decoder", role="lstm", layer=k, step=t):
                        h[k], c[k] = self.decoder[k](torch.cat([x, context], dim=1), h[k], c[k])
                        x = h[k] + x if k >= 2 else h[k]
                feed = context
                with tag(part="decoder", role="attention", layer=top, step=t):
                    out = torch.tanh(self.attention_out(torch.cat([context, x], dim=1)))
            else:
                x = torch.cat([y, feed], dim=1)
                for k, cell in enumerate(self.decoder):
                    with tag(part="decoder", role="lstm", layer=k, step=t):
                        h[k], c[k] = cell(x, h[k], c[k])
                    x = h[k]
                with tag(part="decoder", role="attention", layer=top, step=t):
                    context = self._attend(memory, x)
                    out = feed = torch.tanh(self.attention_out(torch.cat([context, x], dim=1)))
            with tag(part="decoder", role="softmax", layer=top, step=t):
                logits.append(self.softmax(out))
        return logits


# ---------------------------------------------------------------------- Inception-V3 (Szegedy et al. 2016)
class BasicConv2d(nn.Module):
    """Convolution (no bias) + batch norm + ReLU, the unit every Inception branch is built of."""

    def __init__(self, cin: int, cout: int, **conv):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, bias=False, **conv)
        self.bn = nn.BatchNorm2d(cout, eps=0.001)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


class _Block(nn.Module):
    """An Inception block: parallel branches (each a list of layers) concatenated on channels.

    Every op of branch ``k`` is tagged ``block=<name>, branch=k`` (the papers group each branch).
    """

    def __init__(self, name: str, branches: list[list[nn.Module]], split: dict[int, list[nn.Module]] | None = None):
        super().__init__()
        self.block = name
        self.branches = nn.ModuleList(nn.Sequential(*b) for b in branches)
        # branches that fork at their end into two parallel convs (InceptionE's 1x3 / 3x1 pairs)
        self.forks = nn.ModuleDict({str(k): nn.ModuleList(v) for k, v in (split or {}).items()})

    def forward(self, x):
        outs = []
        for k, branch in enumerate(self.branches):
            with tag(block=self.block, branch=k, role="inception"):
                y = branch(x)
                if str(k) in self.forks:
                    y = torch.cat([m(y) for m in self.forks[str(k)]], dim=1)
            outs.append(y)
        with tag(block=self.block, role="inception"):
            return torch.cat(outs, dim=1)


class _Pool(nn.Module):
    def __init__(self, kind: str, k: int, stride: int = 1, padding: int = 0):
        super().__init__()
        self.kind, self.k, self.stride, self.padding = kind, k, stride, padding

    def forward(self, x):
        pool = F.avg_pool2d if self.kind == "avg" else F.max_pool2d
        return pool(x, self.k, stride=self.stride, padding=self.padding)


def _inception_a(name, cin, pool):
    C = BasicConv2d
    return _Block(name, [[C(cin, 64, kernel_size=1)],
                         [C(cin, 48, kernel_size=1), C(48, 64, kernel_size=5, padding=2)],
                         [C(cin, 64, kernel_size=1), C(64, 96, kernel_size=3, padding=1),
                          C(96, 96, kernel_size=3, padding=1)],
                         [_Pool("avg", 3, 1, 1), C(cin, pool, kernel_size=1)]])


def _inception_b(name, cin):
    C = BasicConv2d
    return _Block(name, [[C(cin, 384, kernel_size=3, stride=2)],
                         [C(cin, 64, kernel_size=1), C(64, 96, kernel_size=3, padding=1),
                          C(96, 96, kernel_size=3, stride=2)],
                         [_Pool("max", 3, 2)]])


def _inception_c(name, cin, c7):
    C = BasicConv2d
    return _Block(name, [[C(cin, 192, kernel_size=1)],
                         [C(cin, c7, kernel_size=1), C(c7, c7, kernel_size=(1, 7), padding=(0, 3)),
                          C(c7, 192, kernel_size=(7, 1), padding=(3, 0))],
                         [C(cin, c7, kernel_size=1), C(c7, c7, kernel_size=(7, 1), padding=(3, 0)),
                          C(c7, c7, kernel_size=(1, 7), padding=(0, 3)), C(c7, c7, kernel_size=(7, 1), padding=(3, 0)),
                          C(c7, 192, kernel_size=(1, 7), padding=(0, 3))],
                         [_Pool("avg", 3, 1, 1), C(cin, 192, kernel_size=1)]])


def _inception_d(name, cin):
    C = BasicConv2d
    return _Block(name, [[C(cin, 192, kernel_size=1), C(192, 320, kernel_size=3, stride=2)],
                         [C(cin, 192, kernel_size=1), C(192, 192, kernel_size=(1, 7), padding=(0, 3)),
                          C(192, 192, kernel_size=(7, 1), padding=(3, 0)), C(192, 192, kernel_size=3, stride=2)],
                         [_Pool("max", 3, 2)]])


def _inception_e(name, cin):
    C = BasicConv2d

    def fork(c):
        return [C(c, 384, kernel_size=(1, 3), padding=(0, 1)), C(c, 384, kernel_size=(3, 1), padding=(1, 0))]

    return _Block(name, [[C(cin, 320, kernel_size=1)],
                         [C(cin, 384, kernel_size=1)],
                         [C(cin, 448, kernel_size=1), C(448, 384, kernel_size=3, padding=1)],
                         [_Pool("avg", 3, 1, 1), C(cin, 192, kernel_size=1)]],
                  split={1: fork(384), 2: fork(384)})


class InceptionV3(nn.Module):
    """Inception-V3 (Szegedy et al. 2016) without the auxiliary head: stem, 3x InceptionA, InceptionB,
    4x InceptionC, InceptionD, 2x InceptionE, global pooling and the classifier. Input ``[N, 3, 299, 299]``."""

    def __init__(self, classes: int = 1000):
        super().__init__()
        C = BasicConv2d
        self.stem = nn.Sequential(C(3, 32, kernel_size=3, stride=2), C(32, 32, kernel_size=3),
                                  C(32, 64, kernel_size=3, padding=1), _Pool("max", 3, 2),
                                  C(64, 80, kernel_size=1), C(80, 192, kernel_size=3), _Pool("max", 3, 2))
        self.blocks = nn.Sequential(
            _inception_a("Mixed_5b", 192, 32), _inception_a("Mixed_5c", 256, 64), _inception_a("Mixed_5d", 288, 64),
            _inception_b("Mixed_6a", 288),
            _inception_c("Mixed_6b", 768, 128), _inception_c("Mixed_6c", 768, 160),
            _inception_c("Mixed_6d", 768, 160), _inception_c("Mixed_6e", 768, 192),
            _inception_d("Mixed_7a", 768), _inception_e("Mixed_7b", 1280), _inception_e("Mixed_7c", 2048))
        self.fc = nn.Linear(2048, classes)

    def forward(self, x):
        with tag(block="stem", role="stem"):
            x = self.stem(x)
        x = self.blocks(x)
        with tag(block="logits", role="softmax"):
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class _Bottleneck(nn.Module):
    """ResNet's bottleneck block: 1x1, 3x3 (stride), 1x1 convolutions with BatchNorm, a projection where the
    shape changes, the sum through ReLU."""

    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        cout = 4 * width
        self.body = nn.Sequential(
            nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))
                     if stride != 1 or cin != cout else None)

    def forward(self, x):
        skip = x if self.down is None else self.down(x)
        return F.relu(self.body(x) + skip)


class ResNet(nn.Module):
    """ResNet (He et al. 2016) of bottleneck blocks: ResNet-101 is ``blocks=(3, 4, 23, 3)`` (FlexFlow's
    ResNet-101, Jia et al. 2019, Table 1)."""

    def __init__(self, classes: int = 1000, blocks: tuple[int, ...] = (3, 4, 23, 3)):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, padding=1))
        stages, cin = [], 64
        for k, n in enumerate(blocks):
            width = 64 * 2 ** k
            for j in range(n):
                stages.append(_Bottleneck(cin, width, 2 if j == 0 and k > 0 else 1))
                cin = 4 * width
        self.blocks = nn.ModuleList(stages)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        with tag(block="stem", role="stem"):
            x = self.stem(x)
        for k, block in enumerate(self.blocks):
            with tag(block=k, layer=k, role="conv"):
                x = block(x)
        with tag(block="logits", role="softmax"):
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# ---------------------------------------------------------------------- HTF-MPR's benchmarks
class AlexNet(nn.Module):
    """AlexNet as in TensorFlow's ``alexnet_benchmark`` (Krizhevsky 2014 single-tower variant):
    five convolutions (64, 192, 384, 256, 256), three max-pools, three fully connected layers."""

    def __init__(self, classes: int = 1000):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 11, stride=4, padding=2), nn.ReLU(), nn.MaxPool2d(3, 2),
            nn.Conv2d(64, 192, 5, padding=2), nn.ReLU(), nn.MaxPool2d(3, 2),
            nn.Conv2d(192, 384, 3, padding=1), nn.ReLU(),
            nn.Conv2d(384, 256, 3, padding=1), nn.ReLU(),
            nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(), nn.MaxPool2d(3, 2))
        self.classifier = nn.Sequential(nn.AdaptiveAvgPool2d((6, 6)), nn.Flatten(), nn.Linear(256 * 6 * 6, 4096),
                                        nn.ReLU(),
                                        nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, classes))

    def forward(self, x):
        for k, layer in enumerate(self.features):
            with tag(layer=k, role="conv"):
                x = layer(x)
        with tag(role="classifier"):
            return self.classifier(x)


class VGG16(nn.Module):
    """VGG-16 (Simonyan & Zisserman 2015, configuration D): 13 3x3 convolutions in 5 stages, 3 FC layers."""

    STAGES = ((64, 64), (128, 128), (256, 256, 256), (512, 512, 512), (512, 512, 512))

    def __init__(self, classes: int = 1000):
        super().__init__()
        layers, cin = [], 3
        for widths in self.STAGES:
            for w in widths:
                layers += [nn.Conv2d(cin, w, 3, padding=1), nn.ReLU()]
                cin = w
            layers.append(nn.MaxPool2d(2))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.AdaptiveAvgPool2d((7, 7)), nn.Flatten(), nn.Linear(512 * 7 * 7, 4096),
                                        nn.ReLU(),
                                        nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, classes))

    def forward(self, x):
        stage = 0
        for layer in self.features:
            with tag(layer=stage, role="conv"):
                x = layer(x)
            stage += isinstance(layer, nn.MaxPool2d)
        with tag(role="classifier"):
            return self.classifier(x)


class SoftmaxRegression(nn.Module):
    """TensorFlow's MNIST softmax tutorial: ``y = softmax(x W + b)``."""

    def __init__(self, inputs: int = 784, classes: int = 10):
        super().__init__()
        self.fc = nn.Linear(inputs, classes)

    def forward(self, x):
        with tag(role="softmax"):
            return self.fc(x)


# ---------------------------------------------------------------------- Transformer-XL (Dai et al. 2019)
class RelMultiHeadAttention(nn.Module):
    """Transformer-XL attention over ``[memory; segment]`` with relative positions (Dai et al. 2019, §3.3)::

        A_ij = (q_i + u)^T k_j  +  (q_i + v)^T W_R R_{i-j}

    The second term is computed for all distances and aligned with the usual "relative shift".
    """

    def __init__(self, d_model: int, heads: int):
        super().__init__()
        self.h, self.dh = heads, d_model // heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.r_net = nn.Linear(d_model, d_model, bias=False)
        self.u = nn.Parameter(torch.zeros(heads, self.dh))
        self.v = nn.Parameter(torch.zeros(heads, self.dh))
        self.out = nn.Linear(d_model, d_model, bias=False)

    @staticmethod
    def _rel_shift(x):  # [B, H, Q, K] -> entry (i, j) now holds distance (Q - 1 - i) + j offset
        b, h, q, k = x.shape
        x = F.pad(x, (1, 0))
        return x.view(b, h, k + 1, q)[:, :, 1:].view(b, h, q, k)

    def forward(self, x, mem, pos):
        seg, batch, d = x.shape
        cat = torch.cat([mem, x], dim=0)
        q, k, v = self.qkv(cat).chunk(3, dim=-1)
        q = q[-seg:]
        heads = lambda t: t.view(t.shape[0], batch, self.h, self.dh).permute(1, 2, 0, 3)  # noqa: E731
        q, k, v = heads(q), heads(k), heads(v)
        r = self.r_net(pos).view(pos.shape[0], self.h, self.dh).permute(1, 0, 2)            # [H, K, dh]
        content = torch.matmul(q + self.u[None, :, None], k.transpose(-1, -2))
        position = self._rel_shift(torch.matmul(q + self.v[None, :, None], r.transpose(-1, -2).unsqueeze(0)))
        w = torch.softmax((content + position) * self.dh ** -0.5, dim=-1)
        y = torch.matmul(w, v).permute(2, 0, 1, 3).reshape(seg, batch, d)
        return self.out(y)


class TransformerXLLayer(nn.Module):
    def __init__(self, d_model: int, heads: int, d_inner: int):
        super().__init__()
        self.attn = RelMultiHeadAttention(d_model, heads)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, d_inner), nn.ReLU(), nn.Linear(d_inner, d_model))

    def forward(self, x, mem, pos):
        x = self.norm1(x + self.attn(x, mem, pos))
        return self.norm2(x + self.ff(x))


class TransformerXL(nn.Module):
    """Transformer-XL language model: ``layers`` layers over a segment of ``seg_len`` tokens with
    ``mem_len`` cached hidden states per layer (inputs, no gradient), full softmax over ``vocab``.
    Inputs: ``tokens [seg_len, batch]`` and ``mems [layers, mem_len, batch, d_model]``."""

    def __init__(self, vocab: int, d_model: int, heads: int, d_inner: int, layers: int, seg_len: int, mem_len: int):
        super().__init__()
        self.d_model, self.klen = d_model, seg_len + mem_len
        self.embedding = nn.Embedding(vocab, d_model)
        self.layers = nn.ModuleList(TransformerXLLayer(d_model, heads, d_inner) for _ in range(layers))
        self.softmax = nn.Linear(d_model, vocab)

    def forward(self, tokens, mems):
        with tag(role="embedding", layer=0):
            x = self.embedding(tokens)
            dist = torch.arange(self.klen - 1, -1, -1.0, device=tokens.device)
            inv = 1.0 / (10000 ** (torch.arange(0, self.d_model, 2.0, device=tokens.device) / self.d_model))
            angles = dist[:, None] * inv[None, :]
            pos = torch.cat([angles.sin(), angles.cos()], dim=-1)
        for k, layer in enumerate(self.layers):
            with tag(role="transformer", layer=k):
                x = layer(x, mems[k], pos)
        with tag(role="softmax", layer=len(self.layers) - 1):
            return self.softmax(x)


class GPTBlock(nn.Module):
    """A pre-norm decoder block: causal self-attention and a 4x MLP, each around a residual."""

    def __init__(self, d_model: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.qkv, self.proj = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """A GPT-style decoder-only language model (Radford et al. 2019's layout): token and learned position
    embeddings, ``layers`` pre-norm blocks, a final norm and an untied output layer over ``vocab``.
    Input: ``tokens [batch, seq_len]``."""

    def __init__(self, vocab: int, d_model: int, heads: int, layers: int, seq_len: int):
        super().__init__()
        self.embedding, self.position = nn.Embedding(vocab, d_model), nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList(GPTBlock(d_model, heads) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d_model), nn.Linear(d_model, vocab, bias=False)

    def forward(self, tokens):
        with tag(role="embedding", layer=0):
            x = self.embedding(tokens) + self.position(torch.arange(tokens.shape[1], device=tokens.device))
        for k, block in enumerate(self.blocks):
            with tag(role="transformer", layer=k):
                x = block(x)
        with tag(role="softmax", layer=len(self.blocks) - 1):
            return self.head(self.ln(x))


# ---------------------------------------------------------------------- WaveNet (van den Oord et al. 2016)
class WaveNet(nn.Module):
    """WaveNet: ``stacks`` x ``layers_per_stack`` gated dilated causal convolutions (dilations 1, 2, 4, ...
    per stack), residual and skip 1x1 convolutions, and a softmax over ``classes`` quantised amplitudes::

        z = tanh(W_f * x) . sigmoid(W_g * x);   x' = x + W_r z;   skip += W_s z
    """

    def __init__(self, stacks: int, layers_per_stack: int, residual: int, skip: int, classes: int):
        super().__init__()
        self.stacks, self.per_stack = stacks, layers_per_stack
        self.embed = nn.Conv1d(classes, residual, 1)
        n = stacks * layers_per_stack
        self.dilated = nn.ModuleList(nn.Conv1d(residual, 2 * residual, 2, dilation=2 ** (k % layers_per_stack))
                                     for k in range(n))
        self.res = nn.ModuleList(nn.Conv1d(residual, residual, 1) for _ in range(n))
        self.skip = nn.ModuleList(nn.Conv1d(residual, skip, 1) for _ in range(n))
        self.head = nn.Sequential(nn.ReLU(), nn.Conv1d(skip, skip, 1), nn.ReLU(), nn.Conv1d(skip, classes, 1))

    def forward(self, x):  # x: one-hot [batch, classes, length]
        with tag(role="embedding", layer=0):
            x = self.embed(x)
        skips = 0
        for k in range(len(self.dilated)):
            with tag(role="wavenet", layer=k, stack=k // self.per_stack):
                d = self.dilated[k].dilation[0]
                f, g = self.dilated[k](F.pad(x, (d, 0))).chunk(2, dim=1)
                z = torch.tanh(f) * torch.sigmoid(g)
                skips = skips + self.skip[k](z)
                x = x + self.res[k](z)
        with tag(role="softmax", layer=len(self.dilated) - 1):
            return self.head(skips)


# ---------------------------------------------------------------------- AmoebaNet-A (Real et al. 2018)
#: AmoebaNet-A's cells as published (Real et al. 2018, Fig. 4): per step, two (operation, input) pairs
#: whose results are summed into a new hidden state; the cell outputs the unused states, concatenated.
AMOEBA_NORMAL = (("avg_pool_3x3", 0), ("max_pool_3x3", 0), ("separable_3x3_2", 1), ("none", 1),
                 ("none", 0), ("avg_pool_3x3", 1), ("separable_3x3_2", 0), ("separable_5x5_2", 2),
                 ("avg_pool_3x3", 5), ("separable_3x3_2", 0))
AMOEBA_NORMAL_USED = (1, 0, 1, 0, 0, 1, 0)
AMOEBA_REDUCTION = (("separable_3x3_2", 1), ("avg_pool_3x3", 0), ("max_pool_3x3", 0), ("separable_7x7_2", 2),
                    ("max_pool_3x3", 1), ("max_pool_3x3", 0), ("separable_3x3_2", 4), ("1x7_7x1", 0),
                    ("avg_pool_3x3", 1), ("separable_7x7_2", 0))
AMOEBA_REDUCTION_USED = (1, 1, 0, 0, 0, 0, 0)


class _ReluConvBn(nn.Sequential):
    def __init__(self, cin: int, cout: int, k: int | tuple = 1, stride: int = 1, padding: int | tuple = 0):
        super().__init__(nn.ReLU(), nn.Conv2d(cin, cout, k, stride=stride, padding=padding, bias=False),
                         nn.BatchNorm2d(cout))


def _amoeba_op(name: str, c: int, stride: int) -> nn.Module:
    if name.startswith("separable"):
        k = int(name.split("_")[1][0])
        layers = []
        for rep in range(2):  # "_2": the separable convolution is applied twice
            s = stride if rep == 0 else 1
            layers += [nn.ReLU(), nn.Conv2d(c, c, k, stride=s, padding=k // 2, groups=c, bias=False),
                       nn.Conv2d(c, c, 1, bias=False), nn.BatchNorm2d(c)]
        return nn.Sequential(*layers)
    if name == "1x7_7x1":
        return nn.Sequential(nn.ReLU(), nn.Conv2d(c, c, (1, 7), stride=(1, stride), padding=(0, 3), bias=False),
                             nn.Conv2d(c, c, (7, 1), stride=(stride, 1), padding=(3, 0), bias=False),
                             nn.BatchNorm2d(c))
    if name in ("avg_pool_3x3", "max_pool_3x3"):
        return _Pool(name[:3], 3, stride, 1)
    if name == "none":
        return nn.Identity() if stride == 1 else _ReluConvBn(c, c, 1, stride)
    raise ValueError(f"unknown AmoebaNet operation {name!r}")


class AmoebaCell(nn.Module):
    """A NASNet-style cell: inputs (previous two cell outputs) are brought to ``c`` channels; five steps
    each sum two operations of earlier states; the unused states are concatenated (``len(unused) * c``)."""

    def __init__(self, spec, used, c_prev_prev: int, c_prev: int, c: int, reduction: bool, prev_reduced: bool,
                 index: int):
        super().__init__()
        self.index, self.used, self.spec = index, used, spec
        self.pre0 = _ReluConvBn(c_prev_prev, c, 1, 2 if prev_reduced else 1)  # match the spatial size
        self.pre1 = _ReluConvBn(c_prev, c, 1)
        self.ops = nn.ModuleList(_amoeba_op(name, c, 2 if reduction and src < 2 else 1) for name, src in spec)
        self.out_channels = c * sum(1 for u in used if not u)

    def forward(self, s0, s1):
        with tag(cell=self.index, role="amoeba"):
            states = [self.pre0(s0), self.pre1(s1)]
            for step in range(5):
                with tag(cell=self.index, step=step, role="amoeba"):
                    a = self.ops[2 * step](states[self.spec[2 * step][1]])
                    b = self.ops[2 * step + 1](states[self.spec[2 * step + 1][1]])
                    states.append(a + b)
            return torch.cat([s for s, u in zip(states, self.used) if not u], dim=1)


class AmoebaNet(nn.Module):
    """AmoebaNet-A for ImageNet (Real et al. 2018): a 3x3 stem, two reduction cells, then three stacks
    of ``cells`` normal cells separated by reduction cells (channels double at each reduction)."""

    def __init__(self, cells: int, filters: int, classes: int = 1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, filters // 2, 3, stride=2, padding=1, bias=False),
                                  nn.BatchNorm2d(filters // 2))
        plan = ["R", "R"] + (["N"] * cells + ["R"]) * 2 + ["N"] * cells
        c_pp = c_p = filters // 2
        c, prev_reduced = filters // 4, False
        built = []
        for i, kind in enumerate(plan):
            reduction = kind == "R"
            if reduction:
                c *= 2
            spec, used = (AMOEBA_REDUCTION, AMOEBA_REDUCTION_USED) if reduction else (AMOEBA_NORMAL, AMOEBA_NORMAL_USED)
            # the first cell sees the stem twice; after a reduction, s0 is one resolution larger than s1
            cell = AmoebaCell(spec, used, c_pp, c_p, c, reduction, prev_reduced and i > 0, i)
            built.append(cell)
            c_pp, c_p, prev_reduced = c_p, cell.out_channels, reduction
        self.cells = nn.ModuleList(built)
        self.classifier = nn.Linear(c_p, classes)

    def forward(self, x):
        with tag(role="stem"):
            s0 = s1 = self.stem(x)
        for cell in self.cells:
            s0, s1 = s1, cell(s0, s1)
        with tag(role="softmax"):
            return self.classifier(torch.flatten(F.adaptive_avg_pool2d(F.relu(s1), 1), 1))
