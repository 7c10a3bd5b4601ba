"""The papers' published figures, keyed by our model, cluster and method names.

Every figure here is copied from a table of a paper in ``shared/papers``; ``None`` stands for a cell
the paper marks OOM. Only measured figures are kept: a chart without numbers (GDP's Figure 2, HTF-MPR's
Figure 8) is summarised by the claims its text makes (:data:`GDP_FIGURE2_CLAIMS`, :data:`HTF_FIGURE8_CLAIM`).
"""

from __future__ import annotations

__all__ = ["MIRHOSEINI_TABLE1", "HTF_TABLE1_OPS", "MIRHOSEINI_TABLE2", "MIRHOSEINI_LARGE_RL", "GDP_TABLE1",
           "GDP_TABLE2", "GDP_FIGURE2", "GDP_FIGURE2_CLAIMS", "HTF_SPEEDUP", "HTF_FIGURE8_CLAIM",
           "HTF_ENUMERATION_SHARE", "mirhoseini_seconds", "gdp_table1_seconds"]

#: Mirhoseini et al. 2017, Table 1: each model's TensorFlow graph, (ops, co-location groups).
MIRHOSEINI_TABLE1 = {"rnnlm-2": (8943, 188), "nmt-2": (22097, 280), "inception-v3": (31180, 83)}

#: HTF-MPR (Albaqsami et al.), Table I: each model's graph, ops.
HTF_TABLE1_OPS = {"alexnet": 295, "vgg16": 376, "mnist-softmax": 99}

#: Mirhoseini et al. 2017, Table 2 (seconds per step): single-CPU, single-GPU, then per number of GPUs
#: (2, 4): Scotch, MinCut, Expert, RL.
MIRHOSEINI_TABLE2 = {
    "rnnlm-2": {"single-cpu": 6.89, "single-gpu": 1.57,
                2: {"scotch": 13.43, "mincut": 11.94, "expert": 3.81, "rl": 1.57},
                4: {"scotch": 11.52, "mincut": 10.44, "expert": 4.46, "rl": 1.57}},
    "nmt-2": {"single-cpu": 10.72, "single-gpu": None,
              2: {"scotch": 14.19, "mincut": 11.54, "expert": 4.99, "rl": 4.04},
              4: {"scotch": 11.23, "mincut": 11.78, "expert": 4.73, "rl": 3.92}},
    "inception-v3": {"single-cpu": 26.21, "single-gpu": 4.60,
                     2: {"scotch": 25.24, "mincut": 22.88, "expert": 11.22, "rl": 4.60},
                     4: {"scotch": 23.41, "mincut": 24.52, "expert": 10.65, "rl": 3.85}},
}

#: Mirhoseini et al. 2017, section 4.3: the RL placer's steps (seconds) on RNNLM and NMT at batch 256 with
#: LSTMs of 4,096 and 2,048 (our ``rnnlm-2-large``, ``nmt-2-large``); no baseline ran, the GPUs unstated.
MIRHOSEINI_LARGE_RL = {"rnnlm-2-large": 33.46, "nmt-2-large": 35.84}

#: GDP (Zhou et al.), Table 1: (model, number of GPUs) -> seconds of GDP-one, human placement (our
#: ``expert``), METIS and HDP; None = OOM.
GDP_TABLE1 = {
    ("rnnlm-2", 2): (0.234, 0.257, 0.355, 0.243),
    ("rnnlm-4", 4): (0.409, 0.48, None, 0.490),
    ("gnmt-2", 2): (0.301, 0.384, None, 0.376),
    ("gnmt-4", 4): (0.409, 0.469, None, 0.520),
    ("gnmt-8", 8): (0.649, 0.610, None, 0.693),
    ("transformer-xl-2", 2): (0.386, 0.473, None, 0.435),
    ("transformer-xl-4", 4): (0.580, 0.641, None, 0.621),
    ("transformer-xl-8", 8): (0.748, 0.813, None, 0.789),
    ("inception-v3", 2): (0.405, 0.418, 0.423, 0.417),
    ("amoebanet", 4): (0.394, 0.44, 0.426, 0.418),
    ("wavenet-2x18", 2): (0.317, 0.376, None, 0.354),
    ("wavenet-4x36", 4): (0.659, 0.988, None, 0.721),
}

#: GDP, Table 2: GDP-batch against GDP-one, the run-time improvement the paper prints per model (0.05 =
#: "5 %"; AmoebaNet's batch placement is 5 % slower).
GDP_TABLE2 = {
    ("rnnlm-2", 2): 0.0, ("rnnlm-4", 4): 0.05, ("gnmt-2", 2): 0.0, ("gnmt-4", 4): 0.0,
    ("transformer-xl-2", 2): 0.076, ("transformer-xl-4", 4): 0.03, ("transformer-xl-8", 8): 0.015,
    ("inception-v3", 2): 0.0, ("amoebanet", 4): -0.05, ("wavenet-4x36", 4): 0.033, ("wavenet-2x18", 2): 0.15,
}

#: GDP, Figure 2: its six hold-out settings, (model, number of GPUs) — graphs the policy never saw.
GDP_FIGURE2 = (("transformer-xl-2", 2), ("transformer-xl-4", 4), ("wavenet-2x18", 2), ("wavenet-4x36", 4),
               ("inception-v3", 2), ("amoebanet", 4))

#: GDP, Figure 2 (hold-out graphs; the figure has no printed numbers): what its text claims.
GDP_FIGURE2_CLAIMS = {
    "fine-tune": "beats the human expert and HDP on all six, slightly behind GDP-one",
    "zero-shot": "marginally behind fine-tune, slightly ahead of the human expert and HDP",
}

#: HTF-MPR (Albaqsami et al.): speedup of its best mapping over the default one (every op on the first GPU).
HTF_SPEEDUP = {"alexnet": 1.18, "vgg16": 1.13, "mnist-softmax": 3.33}

#: HTF-MPR, Figure 8 (a chart without printed numbers): what its text says of it.
HTF_FIGURE8_CLAIM = "GBR chosen as the fitness predictor (Kendall tau distance, 5-fold, 5 runs)"

#: HTF-MPR: the share of mnist-softmax's mappings (3^10 in the paper) faster than the default mapping.
HTF_ENUMERATION_SHARE = 0.13


def mirhoseini_seconds(model: str, n_gpus: int, method: str) -> float | None:
    """Mirhoseini et al.'s Table 2 figure for one cell (``None``: OOM); ``KeyError`` where it has none."""
    row = MIRHOSEINI_TABLE2[model]
    if method in ("single-cpu", "single-gpu"):
        return row[method]
    return row[n_gpus][method]


def gdp_table1_seconds(model: str, n_gpus: int, method: str) -> float | None:
    """GDP's Table 1 figure for one cell, our method names (``gdp``: GDP-one; ``expert``: the human
    placement); ``KeyError`` where it has none."""
    gdp, hp, metis, hdp = GDP_TABLE1[(model, n_gpus)]
    return {"gdp": gdp, "expert": hp, "metis": metis, "hdp": hdp}[method]
