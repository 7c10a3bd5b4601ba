"""Charts a person reads at a glance (PNG, matplotlib's Agg backend: no display needed).

:func:`comparison_png`: a comparison of placers — step time per method with the lower bound (simulated
runs), and each method's peak memory per device against the device's capacity.
:func:`step_png`: one simulated step of a placement — each device's compute time split into forward,
backward and update (Mirhoseini et al.'s Figure 8), the memory-copy time per device pair (their
Figure 9), and peak memory against capacity.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from autoplace.formats.images import pyplot, save_png
from autoplace.graph import PHASES
from autoplace.grouping import group_ops
from autoplace.units import fmt_bytes

__all__ = ["comparison_png", "comparison_figure", "comparison_data", "step_png", "step_figure", "step_data",
           "graph_layout", "graph_figure", "GraphLayout", "DEVICE_COLOURS", "PHASE_COLOURS", "svg_text",
           "step_figures", "comparison_figures"]

#: One colour per device index (matplotlib's tab10 without its grey, then tab20's light shades), in the PNGs
#: and the HTML page.
DEVICE_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#393b79",
                  "#bcbd22", "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94")
#: The phases in greys, so that a page showing devices in colour never reads a phase as a device.
PHASE_COLOURS = {"forward": "#bdbdbd", "backward": "#737373", "update": "#252525"}


def comparison_png(comparison, path: str | Path, *, title: str = "") -> None:
    """Write ``comparison`` (:class:`~autoplace.comparison.Comparison`) as a two-panel PNG at ``path``
    (atomically): left, step time per method (a failing placement or a method without one is marked and
    named, not drawn as a bar) with the best lower bound as a line when the runs were simulated; right,
    per method and device, peak memory as a share of the device's capacity (over 100 %: out of memory)."""
    save_png(comparison_figure(comparison), path, title)


def comparison_figure(comparison):
    """The figure of :func:`comparison_png` (matplotlib), to save as PNG or SVG: both panels side by side."""
    plt = pyplot()

    fig, axes = plt.subplots(1, 2, figsize=(12, _comparison_height(comparison)),
                             gridspec_kw={"width_ratios": [3, 2]})
    for draw, ax in zip(_COMPARISON_PANELS, axes):
        draw(fig, ax, comparison)
    return fig


def comparison_figures(comparison) -> list:
    """The two panels of :func:`comparison_figure` as figures of their own (the HTML page lays them out)."""
    plt = pyplot()

    out = []
    for draw in _COMPARISON_PANELS:
        fig, ax = plt.subplots(figsize=(6.4, _comparison_height(comparison)))
        draw(fig, ax, comparison)
        out.append(fig)
    return out


def _comparison_height(comparison) -> float:
    return max(3.0, 0.35 * len(comparison.rows) + 1.2)


def _steps_panel(fig, ax, comparison) -> None:
    """Step time per method (a failing placement or a method without one marked and named), with the best
    lower bound as a line when the runs were simulated."""
    rows = list(comparison.rows)
    methods, steps, _, _ = comparison_data(comparison)
    ok = np.isfinite(steps)
    y = np.arange(len(rows))
    longest = float(steps[ok].max()) if ok.any() else (comparison.bounds.best or 1.0)
    scale, unit = _time_unit(longest)
    ax.barh(y[ok], steps[ok] * scale, color="tab:blue")
    top = max(longest, comparison.bounds.best if comparison.env == "simulated" else 0.0) * scale
    for i in np.flatnonzero(ok):
        ax.text(steps[i] * scale, i, f" {steps[i] * scale:.3g}", va="center", fontsize=8)
    for i in np.flatnonzero(~ok):
        why = "no placement" if rows[i].result is None else "failing"
        ax.text(0, i, f" {why}", va="center", color="tab:red", fontsize=8)
    if comparison.env == "simulated" and comparison.bounds.best > 0:
        ax.axvline(comparison.bounds.best * scale, color="black", ls="--", lw=1, label="lower bound")
        ax.legend(loc="lower right", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)   # above, clear of bars
    ax.set_yticks(y, methods)
    ax.invert_yaxis()
    ax.set_xlim(0, top * 1.15)
    ax.set_xlabel(f"{comparison.env} step time ({unit})")
    ax.grid(axis="x", alpha=0.3)


def _memory_share_panel(fig, ax, comparison) -> None:
    """Per method and device, peak memory in bytes and as a share of the device's capacity."""
    plt = pyplot()


    rows = list(comparison.rows)
    methods, _, names, share = comparison_data(comparison)
    y = np.arange(len(rows))
    mem = ax
    peaks = [None if r.result is None else r.result.peak_memory for r in rows]
    cap = max(100.0, float(np.nanmax(share)) if np.isfinite(share).any() else 100.0)
    image = mem.imshow(np.nan_to_num(share, nan=0.0), aspect="auto", cmap="viridis", vmin=0, vmax=cap)
    for i in range(share.shape[0]):
        for j in range(share.shape[1]):
            v = share[i, j]
            if math.isfinite(v):                # bytes and percent: a small model's 0.01 % still says something
                pct = f"{v:.0f}%" if v >= 10 else f"{v:.2g}%"
                mem.text(j, i, f"{fmt_bytes(float(peaks[i][j]))}\n{pct}", ha="center", va="center",
                         fontsize=6.5, color="white" if v < 0.6 * cap else "black",
                         fontweight="bold" if v > 100 else None)
    over = np.argwhere(share > 100)
    for i, j in over:
        mem.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="red", lw=2))
    mem.set_xticks(range(len(names)), names, rotation=45, ha="right", fontsize=8)
    mem.set_yticks(y, methods)
    mem.set_title("peak memory / capacity (red: out of memory)", fontsize=9)
    fig.colorbar(image, ax=mem, label="% of capacity")


_COMPARISON_PANELS = (_steps_panel, _memory_share_panel)




def step_data(graph, result) -> tuple[np.ndarray, np.ndarray]:
    """``(compute, copies)`` of a simulated step with a timeline (``simulate(..., trace=True)``):
    ``compute[d, k]`` seconds device ``d`` spent on ops of phase ``PHASES[k]`` (ops without a phase count as
    forward), ``copies[s, t]`` seconds transfers held the link from device ``s`` to ``t``."""
    if result.timeline is None:
        raise ValueError("step_data needs a simulated step with its timeline (simulate(..., trace=True))")
    tl = result.timeline
    D = len(result.device_names)
    phase = np.array([PHASES.index(op.phase) if op.phase in PHASES else 0 for op in graph.ops])
    compute = np.zeros((D, len(PHASES)))
    np.add.at(compute, (tl.device, phase), tl.finish - tl.start)
    return compute, np.asarray(result.link_time, dtype=float)


def step_png(graph, cluster, result, path: str | Path, *, title: str = "") -> None:
    """Write one simulated step (with its timeline) as a three-panel PNG at ``path``: compute time per
    device split by phase, memory-copy time per (source, destination) pair, and peak memory per device
    against its capacity (red: out of memory)."""
    save_png(step_figure(graph, result), path, title)


def step_figure(graph, result):
    """The figure of :func:`step_png` (matplotlib), to save as PNG or SVG: the three panels side by side."""
    plt = pyplot()

    fig, axes = plt.subplots(1, 3, figsize=(15, _panel_height(result)), gridspec_kw={"width_ratios": [3, 2, 2]})
    for draw, ax in zip(_STEP_PANELS, axes):
        draw(fig, ax, graph, result)
    return fig


def step_figures(graph, result) -> list:
    """The three panels of :func:`step_figure` as figures of their own (the HTML page lays them out to fit
    its width)."""
    plt = pyplot()

    out = []
    for draw in _STEP_PANELS:
        fig, ax = plt.subplots(figsize=(6.4, _panel_height(result)))
        draw(fig, ax, graph, result)
        out.append(fig)
    return out


def _panel_height(result) -> float:
    return max(3.0, 0.4 * len(result.device_names) + 1.5)


def _compute_panel(fig, ax, graph, result) -> None:
    """Compute time per device, split by phase (greys)."""
    compute, copies = step_data(graph, result)
    names = list(result.device_names)
    y = np.arange(len(names))
    scale, unit = _time_unit(max(float(compute.sum(1).max()), float(copies.max()), 1e-12))
    left = np.zeros(len(names))
    for k, phase in enumerate(PHASES):
        ax.barh(y, compute[:, k] * scale, left=left, color=PHASE_COLOURS[phase], label=phase)
        left += compute[:, k] * scale
    ax.set_yticks(y, names)
    ax.invert_yaxis()
    ax.set_xlabel(f"compute time ({unit})")
    ax.set_title(f"compute per device, by phase (step {result.step_time * scale:.3g} {unit})", fontsize=9)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(axis="x", alpha=0.3)


def _copies_panel(fig, ax, graph, result) -> None:
    """Memory-copy time per (source, destination) pair."""
    compute, copies = step_data(graph, result)
    names = list(result.device_names)
    scale, unit = _time_unit(max(float(compute.sum(1).max()), float(copies.max()), 1e-12))
    image = ax.imshow(copies * scale, cmap="magma_r", aspect="auto")
    most = float((copies * scale).max())
    for (i, j), v in np.ndenumerate(copies * scale):
        if v > 0:
            ax.text(j, i, f"{v:.3g}", ha="center", va="center", fontsize=7,
                    color="white" if v > 0.6 * most else "black")
    ax.set_xticks(range(len(names)), names, rotation=45, ha="right", fontsize=8)
    ax.set_yticks(np.arange(len(names)), names, fontsize=8)
    ax.set_xlabel("to")
    ax.set_ylabel("from")
    ax.set_title(f"memory copies ({unit})", fontsize=9)
    fig.colorbar(image, ax=ax)


def _memory_panel(fig, ax, graph, result) -> None:
    """Peak memory per device as a share of its own capacity (a CPU's hundreds of GiB beside a GPU's 16
    would make the GPU's bar invisible on one byte axis), each bar labelled in bytes."""

    names = list(result.device_names)
    y = np.arange(len(names))
    peak = np.asarray(result.peak_memory, dtype=float)
    capacity = np.asarray(result.memory_capacity, dtype=float)
    share = 100.0 * peak / np.maximum(capacity, 1.0)
    ax.barh(y, share, color=[DEVICE_COLOURS[i % len(DEVICE_COLOURS)] for i in range(len(names))],
            edgecolor=["red" if p > c else "none" for p, c in zip(peak, capacity)], linewidth=2)
    for i, (p, c, v) in enumerate(zip(peak, capacity, share)):
        ax.text(min(v, 100.0) + 2, i, f"{fmt_bytes(p)} of {fmt_bytes(c)}", va="center", fontsize=8)
    ax.axvline(100.0, color="black", lw=1)
    ax.set_xlim(0, max(160.0, float(share.max()) * 1.1))
    ax.set_yticks(y, names)
    ax.invert_yaxis()
    ax.set_xlabel("peak memory, % of the device's capacity")
    ax.set_title("peak memory, each device in its colour (red edge: out of memory)", fontsize=9)
    ax.grid(axis="x", alpha=0.3)


_STEP_PANELS = (_compute_panel, _copies_panel, _memory_panel)


def svg_text(fig) -> str:
    """``fig`` as an inline SVG element (for a self-contained HTML page); the figure is closed."""
    plt = pyplot()

    fig.tight_layout()
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]


def comparison_data(comparison) -> tuple[list[str], np.ndarray, list[str], np.ndarray]:
    """What :func:`comparison_png` draws: the methods, their step times (``inf``: failing or no
    placement), the device names, and each method's peak memory per device in % of capacity (``nan``
    where a method has no placement)."""
    rows = list(comparison.rows)
    names = _device_names(rows)
    share = np.full((len(rows), len(names)), np.nan)
    for i, r in enumerate(rows):
        if r.result is not None:
            for j, (p, c) in enumerate(zip(r.result.peak_memory, r.result.memory_capacity)):
                share[i, j] = 100.0 * p / c if c > 0 else np.nan
    return [r.method for r in rows], np.array([r.step_time for r in rows], dtype=float), names, share


def _time_unit(seconds: float) -> tuple[float, str]:
    for scale, unit in ((1.0, "s"), (1e3, "ms"), (1e6, "µs")):
        if seconds * scale >= 1:
            return scale, unit
    return 1e9, "ns"


def _device_names(rows) -> list[str]:
    for r in rows:
        if r.result is not None:
            return list(r.result.device_names)
    return []


@dataclass(frozen=True)
class GraphLayout:
    """A placed graph laid out for drawing: one node per co-location group, device and phase (a group split
    over devices is one node per device; its forward, backward and update ops are drawn apart), in columns
    by dataflow depth.

    ``col``, ``row``: each node's column (its ops' median depth, ranked) and place in the column (columns
    centred on row 0, so rows run from ``-n_rows / 2`` to ``n_rows / 2``); ``device``:
    its device index; ``size``: its ops; ``first``: the op that names it; ``edges``: ``[E, 2]`` node pairs
    joined by a tensor; ``n_cols``, ``n_rows``: the grid's extent."""

    col: np.ndarray
    row: np.ndarray
    device: np.ndarray
    size: np.ndarray
    first: np.ndarray
    edges: np.ndarray
    n_cols: int
    n_rows: int

    @property
    def n_nodes(self) -> int:
        return len(self.col)


#: Above this many nodes a drawing is a blur: :func:`graph_layout` returns None.
MAX_DRAWN_NODES = 4000


def graph_layout(graph, assignment: np.ndarray, *, max_nodes: int = MAX_DRAWN_NODES) -> GraphLayout | None:
    """Lay ``graph`` out with each op on device ``assignment[i]`` (see :class:`GraphLayout`); ``None`` when
    it has more than ``max_nodes`` nodes. O(ops + edges)."""

    assignment = np.asarray(assignment, dtype=np.int64)
    n_dev = int(assignment.max()) + 1 if len(assignment) else 1
    phase = np.array([PHASES.index(op.phase) if op.phase in PHASES else 0 for op in graph.ops], dtype=np.int64)
    key = (group_ops(graph).group * n_dev + assignment) * len(PHASES) + phase
    _, first_op, node = np.unique(key, return_index=True, return_inverse=True)
    node = node.ravel()
    if len(first_op) > max_nodes:
        return None
    src, dst, _ = graph.edges()
    depth = np.zeros(graph.n_ops, dtype=np.int64)
    preds = [[] for _ in range(graph.n_ops)]
    for a, b in zip(src.tolist(), dst.tolist()):
        preds[b].append(a)
    for i in graph.topological_order.tolist():
        if preds[i]:
            depth[i] = max(depth[j] for j in preds[i]) + 1
    by_node = np.lexsort((depth, node))                     # ops by node, then depth: each node's median
    counts = np.bincount(node, minlength=len(first_op))
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    node_depth = depth[by_node][starts + counts // 2]
    _, col = np.unique(node_depth, return_inverse=True)
    col = col.ravel()
    dev = assignment[first_op]
    order = np.lexsort((first_op, dev, col))
    row = np.zeros(len(first_op), dtype=np.int64)
    starts = np.searchsorted(col[order], col[order], side="left")
    row[order] = np.arange(len(order)) - starts
    height = np.bincount(col)
    row = row - (height[col] - 1) / 2.0
    pairs = np.stack([node[src], node[dst]], axis=1) if len(src) else np.zeros((0, 2), np.int64)
    pairs = np.unique(pairs[pairs[:, 0] != pairs[:, 1]], axis=0) if len(pairs) else pairs
    return GraphLayout(col, row, dev, counts, first_op, pairs,
                       int(col.max()) + 1 if len(col) else 0, int(height.max()) if len(col) else 0)


def graph_figure(layout: GraphLayout, device_names):
    """The placed graph of ``layout`` drawn: nodes coloured by device, sized by their ops, edges grey."""
    plt = pyplot()
    from matplotlib.collections import LineCollection

    fig, ax = plt.subplots(figsize=(12, min(9.0, 2.5 + 0.12 * layout.n_rows)))
    x, y = layout.col.astype(float), layout.row.astype(float)
    if len(layout.edges):
        segs = np.stack([np.stack([x[layout.edges[:, 0]], y[layout.edges[:, 0]]], 1),
                         np.stack([x[layout.edges[:, 1]], y[layout.edges[:, 1]]], 1)], 1)
        ax.add_collection(LineCollection(segs, colors="#bbbbbb", linewidths=0.4, zorder=1))
    colours = [DEVICE_COLOURS[d % len(DEVICE_COLOURS)] for d in layout.device]
    ax.scatter(x, y, s=6 + 4 * np.sqrt(layout.size), c=colours, zorder=2, edgecolors="none")
    for d in sorted(set(layout.device.tolist())):
        ax.scatter([], [], color=DEVICE_COLOURS[d % len(DEVICE_COLOURS)], label=device_names[d])
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0), markerscale=1.5)
    ax.set_xlabel("dataflow depth (columns of co-location groups)")
    ax.set_yticks([])
    ax.invert_yaxis()
    ax.set_title(f"{layout.n_nodes} groups coloured by device", fontsize=9)
    return fig
