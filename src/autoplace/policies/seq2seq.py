"""The attentional sequence-to-sequence placement policy of Mirhoseini et al. (2017, §3.2, Figure 2).

An LSTM encoder reads the groups in topological order (their features: :mod:`autoplace.policies.features`);
an LSTM decoder with content-based attention (Bahdanau et al. 2015) takes one step per group and outputs
that group's device. The embedding of the device chosen at step ``t - 1`` is the decoder's input at step
``t`` (a learned start embedding at ``t = 0``).

At decoder step ``t``, with encoder outputs ``h_1..h_G`` and decoder state ``s_{t-1}``:

.. math::

    e_{t,j} = v^\\top \\tanh(W_h h_j + W_s s_{t-1}), \\quad
    \\alpha_t = \\mathrm{softmax}(e_t), \\quad c_t = \\sum_j \\alpha_{t,j} h_j

    s_t = \\mathrm{LSTM}([y_{t-1}; c_t], s_{t-1}), \\quad
    \\pi(\\cdot \\mid t) = \\mathrm{softmax}(W_o [s_t; c_t] + \\text{mask}_t)

where ``y_{t-1}`` is the previous device's embedding and ``mask_t`` is ``-inf`` on devices that cannot
run group ``t`` (a device type its ops lack). The paper's π(P|G; θ) is the product over steps.

*Structured exploration* (ours): with ``noise`` σ > 0, each sample draws ε ~ N(0, σ²) once per structural
unit and device (:attr:`GroupFeatures.unit`: a layer's groups at every time step share one draw) and adds
ε[unit_t] to the logits of step ``t`` before sampling; the log-probability is that of the noisy
distribution the sample was drawn from. Noise drawn per step (the authors' later hierarchical placer adds
Gaussian noise to every logit, its deviation half the logits' RMS, in its first 750 steps) mostly flips
single groups, each flip a transfer; a draw per unit moves a whole layer, the kind of move that separates
one device from a layer-per-device split.

**Shapes:** ``forward(features, k)`` samples ``k`` placements: devices ``[k, G]`` (in encoder order) and
their log-probabilities ``[k]``; ``log_prob(features, devices)`` scores given placements ``[k, G]``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from autoplace.policies.features import GroupFeatures

__all__ = ["Seq2SeqPolicy", "device_mask", "ATTENTION"]

#: The decoder's attention scores: Bahdanau's additive ``v^T tanh(W_h h_j + W_s s)`` (the paper's), or the
#: scaled product ``(W_h h_j)^T (W_s s) / sqrt(H)`` (Luong et al. 2015's "general" score, scaled as in
#: Vaswani et al. 2017), which costs one matrix product per step instead of ``k·G·H`` tanh evaluations.
ATTENTION = ("additive", "dot")


class Seq2SeqPolicy(nn.Module):
    """Encoder-decoder over the groups of one graph, for ``n_devices`` devices.

    ``n_types``/``dense_dim``: the feature sizes of the graph (:class:`GroupFeatures`); ``type_dim``: the
    op-type embedding size; ``hidden``: the LSTMs' and the attention's size; ``device_dim``: the device
    embedding size. ``temperature`` divides the logits and ``logit_clip`` bounds them to ``±C`` by
    ``C tanh(logits / C)`` — both keep a policy from collapsing early (not in the 2017 paper; the authors'
    later hierarchical placer has a temperature and a ``c tanh(logits)`` bound); 1 and None leave the
    logits as they are.
    """

    def __init__(self, n_types: int, dense_dim: int, n_devices: int, *, type_dim: int = 32, hidden: int = 128,
                 device_dim: int = 32, temperature: float = 1.0, logit_clip: float | None = None,
                 attention: str = "additive"):
        super().__init__()
        if attention not in ATTENTION:
            raise ValueError(f"attention must be one of {ATTENTION}, got {attention!r}")
        self.n_devices, self.attention = n_devices, attention
        self.temperature, self.logit_clip = float(temperature), logit_clip
        self.type_embedding = nn.EmbeddingBag(n_types, type_dim, mode="mean")
        self.encoder = nn.LSTM(type_dim + dense_dim, hidden, batch_first=True)
        self.device_embedding = nn.Embedding(n_devices + 1, device_dim)     # the last row: the start token
        self.decoder = nn.LSTMCell(device_dim + hidden, hidden)
        self.attn_h = nn.Linear(hidden, hidden, bias=False)
        self.attn_s = nn.Linear(hidden, hidden)
        self.attn_v = nn.Linear(hidden, 1, bias=False)
        self.out = nn.Linear(2 * hidden, n_devices)
        self._scale = float(hidden) ** 0.5

    def encode(self, f: GroupFeatures) -> torch.Tensor:
        """Encoder outputs ``[1, G, hidden]``."""
        dev = self.out.weight.device
        types = self.type_embedding(torch.as_tensor(f.type_index, device=dev),
                                    torch.as_tensor(f.type_offsets, device=dev))
        return self.encode_inputs(torch.cat([types, torch.as_tensor(f.dense, device=dev)], dim=1).unsqueeze(0))

    def encode_inputs(self, x: torch.Tensor) -> torch.Tensor:
        """Encoder outputs ``[k, G, hidden]`` of group embeddings ``x`` ``[k, G, type_dim + dense_dim]`` (a
        caller that embeds its groups itself, as HDP's grouper does, one grouping per sample)."""
        h, _ = self.encoder(x)
        return h

    def _step(self, h, keys, s, c, prev, mask_t):
        """One decoder step: attention over ``h`` from state ``s``, the LSTM cell fed the previous device's
        embedding and the context, and the masked device logits ``[k, D]``. ``h`` and ``keys`` are ``[k, G,
        H]``, or ``[G, H]`` where every sample reads the same encoder outputs (one matrix product then
        serves the batch)."""
        q = self.attn_s(s)                                                              # [k, H]
        if self.attention == "additive":
            e = self.attn_v(torch.tanh(keys + q.unsqueeze(1))).squeeze(2)                 # [k, G]
        elif keys.dim() == 2:
            e = q @ keys.T / self._scale
        else:
            e = torch.bmm(keys, q.unsqueeze(2)).squeeze(2) / self._scale
        a = torch.softmax(e, dim=1)
        context = a @ h if h.dim() == 2 else torch.bmm(a.unsqueeze(1), h).squeeze(1)    # [k, H]
        s, c = self.decoder(torch.cat([self.device_embedding(prev), context], dim=1), (s, c))
        logits = self.out(torch.cat([s, context], dim=1)) / self.temperature
        if self.logit_clip is not None:
            logits = self.logit_clip * torch.tanh(logits / self.logit_clip)
        return logits + mask_t, s, c

    def _decode(self, f: GroupFeatures, mask: torch.Tensor, k: int, devices: torch.Tensor | None,
                generator: torch.Generator | None, noise: float = 0.0
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.decode(self.encode(f).expand(k, -1, -1), mask, devices, generator, noise, f.unit)

    def decode(self, h: torch.Tensor, mask: torch.Tensor, devices: torch.Tensor | None = None,
               generator: torch.Generator | None = None, noise: float = 0.0, unit: np.ndarray | None = None
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The attentional decoder over encoder outputs ``h`` ``[k, G, H]`` with device mask ``[G, D]`` (or
        ``[k, G, D]``): sampled (``devices`` None) or given placements ``[k, G]``, their log-probabilities
        ``[k]`` and mean per-step entropies ``[k]``; ``unit`` ``[G]``: the structural unit of each step for
        the exploration noise (default: one unit per step)."""
        k, G = h.shape[0], h.shape[1]
        if self.attention == "dot" and (k == 1 or h.stride(0) == 0):   # one graph for every sample
            h = h[0]
        keys = self.attn_h(h)
        s = c = h.new_zeros(k, h.shape[-1])
        prev = torch.full((k,), self.n_devices, dtype=torch.long, device=h.device)
        chosen, logp, entropy = [], h.new_zeros(k), h.new_zeros(k)
        eps = None
        if noise > 0:                                                       # one draw per unit and device
            unit = np.arange(G) if unit is None else unit
            eps = torch.randn(k, int(unit.max()) + 1, self.n_devices, generator=generator) * noise
            eps = eps[:, torch.as_tensor(unit)].to(h.device)                # [k, G, D]
        for t in range(G):
            logits, s, c = self._step(h, keys, s, c, prev, mask[..., t, :])
            if eps is not None:
                logits = logits + eps[:, t]
            log_probs = torch.log_softmax(logits, dim=1)
            if devices is None:
                # drawn on the CPU by the seeded CPU generator, wherever the policy runs
                d = torch.multinomial(log_probs.detach().exp().cpu(), 1, generator=generator).squeeze(1).to(h.device)
            else:
                d = devices[:, t]
            logp = logp + log_probs.gather(1, d.unsqueeze(1)).squeeze(1)
            p = log_probs.exp()
            entropy = entropy - (p * torch.where(p > 0, log_probs, torch.zeros_like(log_probs))).sum(1)
            chosen.append(d)
            prev = d
        return torch.stack(chosen, dim=1), logp, entropy / max(G, 1)

    def forward(self, f: GroupFeatures, mask: torch.Tensor, k: int, generator: torch.Generator | None = None,
                noise: float = 0.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample ``k`` placements: devices ``[k, G]``, log-probabilities ``[k]`` (with gradient) and the
        mean per-step entropy ``[k]``; ``noise``: σ of the structured exploration noise (0: none)."""
        return self._decode(f, mask, k, None, generator, noise)

    def log_prob(self, f: GroupFeatures, mask: torch.Tensor, devices: torch.Tensor) -> torch.Tensor:
        """Log-probabilities ``[k]`` of given placements ``[k, G]`` (teacher forcing) under the noise-free
        policy, not under the noisy distribution a sample was drawn from."""
        return self._decode(f, mask, devices.shape[0], devices, None)[1]


def device_mask(feasible: np.ndarray, order: np.ndarray) -> torch.Tensor:
    """``[G, D]`` additive mask in encoder order: 0 where the group can run on the device, ``-inf`` where not."""
    m = np.where(feasible[order], 0.0, -np.inf).astype(np.float32)
    return torch.as_tensor(m)
