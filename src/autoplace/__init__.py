"""autoplace: place the ops of an ML training graph on CPUs and GPUs so that a step is fast and fits.

The pieces, each its own module:

* :mod:`autoplace.graph` — the dataflow-graph IR (:class:`Graph`, :class:`Op`);
* :mod:`autoplace.cluster` — devices, links and presets (:func:`get_cluster`);
* :mod:`autoplace.cost` — per-op time on each device (measured cost or roofline);
* :mod:`autoplace.sim` — the execution simulator (:func:`simulate`, :func:`simulate_batch`);
* :mod:`autoplace.placers` — placement algorithms by name (:func:`place`);
* :mod:`autoplace.formats` — the versioned JSON formats;
* :mod:`autoplace.zoo` — built-in graphs;
* :func:`autoplace.compile` — a PyTorch model's training step, placed and run on this machine's devices.

The modules form layers (:data:`LAYERS`, lowest first): a module imports only modules of its own layer or
lower ones, and no import cycle exists (``tests/test_layers.py`` checks both).
"""

__version__ = "0.1.0"

#: the package's layers, lowest first (modules and subpackages, by the name after ``autoplace.``)
LAYERS = (
    ("errors", "validation", "progress", "units", "stats", "paths", "result"),  # no autoplace imports
    ("graph", "cluster"),                                            # the IR
    # costs, assignments, co-location groups, files, caches, collectives, the batch dimension
    ("cost", "placement", "schedule", "grouping", "granularity", "formats", "cache", "collectives", "replicas"),
    ("sim", "capture", "policies"),                                  # the judge, capture, neural parts
    ("robust", "bounds", "zoo", "resolve"),                          # scenarios, bounds, built-in graphs
    ("runtime",),                                                    # real execution
    ("env",),                                                        # what scores a placement
    ("search",),                                                     # what the searches share
    ("placers",),                                                    # the placers, by name
    ("comparison",),                                                 # placers side by side
    ("plots", "htmlreport", "bench", "api", "cli"),                  # presentation and the entry points
)

import importlib  # noqa: E402

from autoplace.cluster import Cluster, Device, Link, LinkSpec, get_cluster  # noqa: E402
from autoplace.errors import AutoplaceError  # noqa: E402
from autoplace.graph import Graph, Op, TensorSpec  # noqa: E402
from autoplace.placement import Placement  # noqa: E402

#: imported on first use (``autoplace.compile`` imports torch; ``import autoplace`` stays light)
_LAZY = {
    "compile": "autoplace.api", "PlacedStep": "autoplace.runtime.placed",
    "place": "autoplace.placers", "simulate": "autoplace.sim", "Simulator": "autoplace.sim",
    "compare": "autoplace.comparison", "build_graph": "autoplace.zoo",
}

__all__ = [
    "__version__", "AutoplaceError", "Graph", "Op", "TensorSpec", "Cluster", "Device", "Link", "LinkSpec",
    "Placement", "get_cluster", *_LAZY,
]


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'autoplace' has no attribute {name!r}")
