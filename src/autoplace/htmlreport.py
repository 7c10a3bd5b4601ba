"""One placement on one page: ``autoplace report``.

:func:`placement_report` simulates the placement with its timeline and writes one self-contained HTML page
(no network needed to view it): a summary (step time, ops per device, transfers, a banner naming every
device out of memory), the step's charts as inline SVG, one per panel so that they wrap to the window
(:func:`autoplace.plots.step_figures`: compute per device by phase, memory-copy time per device pair, peak
memory as a share of each device's own capacity), the graph drawn with its groups coloured by device
(:func:`autoplace.plots.graph_layout`; hover names a group), an interactive timeline drawn on a canvas by a
few lines of plain JavaScript (a lane per device and one of copies between devices; time-axis ticks; wheel
to zoom, drag to pan, hover for an op's or a copy's details), for a search its training curve, and with a
comparison of placers (:func:`autoplace.comparison.compare`) its chart and table, the page's own placement
its first row. Devices are in colour (:data:`~autoplace.plots.DEVICE_COLOURS`), phases in greys
(:data:`~autoplace.plots.PHASE_COLOURS`), each with its legend. The page reports its own drawing in a
hidden ``#status`` (ops and transfers drawn, the canvas's painted pixels, the graph's nodes, the smallest
scale a chart is drawn at, the widest element against the window) and any script error in ``#errors``,
which is what a headless browser test reads. :func:`report_pngs` writes the same charts as
PNG files.
"""

from __future__ import annotations

import dataclasses
import html
import json

import numpy as np

from autoplace.cluster import Cluster
from autoplace.comparison import ComparisonRow, failure_reason, row_note, speedup
from autoplace.formats.images import save_png
from autoplace.graph import Graph
from autoplace.placement import Placement
from autoplace.plots import (
    DEVICE_COLOURS,
    PHASE_COLOURS,
    comparison_figure,
    comparison_figures,
    graph_figure,
    graph_layout,
    step_figure,
    step_figures,
    svg_text,
)
from autoplace.sim import simulate
from autoplace.units import fmt_bytes, fmt_time

__all__ = ["placement_report", "report_pngs"]

def _timeline_data(graph: Graph, result) -> dict:

    tl = result.timeline
    scopes: dict[str, int] = {}
    ops = []
    for i in np.argsort(tl.start, kind="stable"):
        op = graph.ops[int(i)]
        dur = float(tl.finish[i] - tl.start[i])
        ops.append([int(tl.device[i]), float(tl.start[i]), dur, int(i), scopes.setdefault(op.scope or "", len(scopes)),
                    op.phase or ""])
    # each transfer: [source, destination, start, end, bytes], drawn in the transfers lane in its source's colour
    transfers = [[int(a), int(b), float(s0), float(s1), float(graph.tensor_bytes[t])]
                 for a, b, s0, s1, t in zip(tl.transfer_src, tl.transfer_dst, tl.transfer_start, tl.transfer_end,
                                            tl.transfer_tensor)]
    return {"devices": list(result.device_names), "step": float(result.step_time), "ops": ops,
            "names": [op.name for op in graph.ops], "scopes": list(scopes), "colours": PHASE_COLOURS,
            "transfers": transfers, "device_colours": list(DEVICE_COLOURS)}


def _graph_data(graph: Graph, cluster: Cluster, placement: Placement) -> dict | None:

    lay = graph_layout(graph, placement.to_array(graph, cluster))
    if lay is None:
        return None
    return {"nodes": [[int(c), float(r), int(d), int(n), int(f)] for c, r, d, n, f in
                      zip(lay.col, lay.row, lay.device, lay.size, lay.first)],
            "edges": lay.edges.tolist(), "cols": lay.n_cols, "rows": lay.n_rows,
            "names": [graph.ops[int(f)].name for f in lay.first],
            "devices": [d.name for d in cluster.devices], "colours": list(DEVICE_COLOURS)}


def _comparison_html(comparison) -> str:

    best = min((r.step_time for r in comparison.rows), default=float("inf"))

    def cells(r) -> tuple[str, str, str]:
        if r.result is None:
            return "none", "–", r.error or "no placement"
        if not r.result.ok:
            why = r.result.error or "out of memory on " + ", ".join(r.result.oom_devices)
            return "fails", "–", why
        return fmt_time(r.step_time), f"{speedup(best, r.step_time):.2f}x", row_note(r)

    rows = "".join(f"<tr><td>{html.escape(r.method)}</td><td>{step}</td><td>{rel}</td><td>{r.search_time_s:.2f} s</td>"
                   f"<td>{html.escape(note)}</td></tr>" for r in comparison.rows for step, rel, note in [cells(r)])
    charts = "".join(f'<div class="chart">{svg_text(f)}</div>' for f in comparison_figures(comparison))
    return (f'<h2>Placers compared</h2><div class="charts" id="compare">{charts}</div>'
            f"<table><tr><th>method</th><th>step</th><th>best / step</th><th>search</th><th>note</th></tr>"
            f"{rows}</table>")


def placement_report(graph: Graph, cluster: Cluster, placement: Placement, *, curve=None, comparison=None,
                     result=None) -> str:
    """The HTML page of ``placement`` (see the module docstring); ``curve``: the search's training curve
    (:class:`~autoplace.search.curve.Curve`, as ``--curve`` writes it), drawn too when given;
    ``comparison``: a :class:`~autoplace.comparison.Comparison` on the same graph and cluster, drawn and
    tabled when given; ``result``: the placement's simulated step with its timeline, when the caller
    has it (``simulate(..., trace=True)``)."""

    result = result if result is not None else simulate(graph, cluster, placement, trace=True)
    counts = placement.counts()
    rows = "".join(
        f"<tr><td>{html.escape(n)}</td><td>{counts.get(n, 0)}</td><td>{fmt_time(float(b))}</td>"
        f"<td{' class=oom' if p > c else ''}>{fmt_bytes(p)} of {fmt_bytes(c)}</td></tr>"
        for n, b, p, c in zip(result.device_names, result.busy_time, result.peak_memory, result.memory_capacity))
    banner = ""
    if result.oom_devices:
        parts = [f"{html.escape(n)} (peak {fmt_bytes(p)}, capacity {fmt_bytes(c)})"
                 for n, p, c in zip(result.device_names, result.peak_memory, result.memory_capacity) if p > c]
        banner = f'<p class="banner" id="oom">Out of memory on {", ".join(parts)}: this placement fails.</p>'
    charts = "".join(f'<div class="chart">{svg_text(f)}</div>' for f in step_figures(graph, result))
    search = "" if curve is None or not len(curve) else \
        f'<h2>The search</h2><div class="charts" id="curve">{svg_text(curve.figure())}</div>'
    data = json.dumps(_timeline_data(graph, result), separators=(",", ":"))
    gdata = _graph_data(graph, cluster, placement)
    gnote = ("Nodes: co-location groups (split by device and phase), in columns by dataflow depth, coloured by "
             "device; grey: tensors between them. Hover: the group's first op." if gdata is not None else
             "The graph has too many groups to draw.")
    title = f"{graph.name} on {cluster.name}: {placement.method}"
    return _PAGE.format(
        title=html.escape(title), banner=banner, step=fmt_time(result.step_time),
        status="ok" if result.ok else "failing", ops=graph.n_ops, transfers=result.n_transfers,
        bytes=fmt_bytes(result.transfer_bytes), rows=rows, charts=charts, search=search,
        compare="" if comparison is None else _comparison_html(_with_own_row(comparison, placement, result)),
        gnote=gnote, phases="".join(f'<span class="swatch" style="background:{c}"></span>{p} '
                                    for p, c in PHASE_COLOURS.items()),
        data=data.replace("</", "<\\/"), gdata=json.dumps(gdata, separators=(",", ":")).replace("</", "<\\/"),
        script=_SCRIPT)


def _with_own_row(comparison, placement: Placement, result):
    """``comparison`` with the page's own placement as its first row ("<method> (this page)"), so that the
    page never rates the placers it compares without the placement it is about."""


    own = ComparisonRow(f"{placement.method} (this page)", placement, result,
                        float(placement.meta.get("search_time_s", 0.0) or 0.0),
                        None if result.ok else failure_reason(result))
    return dataclasses.replace(comparison, rows=[own, *comparison.rows])


def report_pngs(graph: Graph, cluster: Cluster, placement: Placement, prefix: str, *, curve=None,
                comparison=None, result=None) -> list[str]:
    """The page's charts as PNG files ``PREFIX.step.png``, ``PREFIX.graph.png`` (where the graph is small
    enough to draw), ``PREFIX.curve.png`` and ``PREFIX.compare.png`` (when given); returns the paths."""

    title = f"{graph.name} on {cluster.name}: {placement.method}"
    result = result if result is not None else simulate(graph, cluster, placement, trace=True)
    figures = [("step", step_figure(graph, result))]
    lay = graph_layout(graph, placement.to_array(graph, cluster))
    if lay is not None:
        figures.append(("graph", graph_figure(lay, [d.name for d in cluster.devices])))
    if curve is not None and len(curve):
        figures.append(("curve", curve.figure()))
    if comparison is not None:
        figures.append(("compare", comparison_figure(comparison)))
    paths = []
    for name, fig in figures:
        paths.append(f"{prefix}.{name}.png")
        save_png(fig, paths[-1], title)
    return paths


_SCRIPT = r"""
(function () {
  const errors = document.getElementById("errors");
  window.onerror = function (msg) { errors.textContent += msg + "\n"; };
  try {
    const d = JSON.parse(document.getElementById("timeline-data").textContent);
    const canvas = document.getElementById("timeline"), ctx = canvas.getContext("2d");
    const tip = document.getElementById("tip");
    const rowH = 22, left = 90, top = 24, lanes = d.devices.length + 1;   // a lane per device, then transfers
    canvas.width = canvas.clientWidth || 1200;
    canvas.height = top + rowH * lanes + 10;
    let t0 = 0, t1 = d.step > 0 ? d.step : 1;
    const x = t => left + (t - t0) / (t1 - t0) * (canvas.width - left - 10);
    function ticks() {                    // 1, 2 or 5 times a power of ten, about every 100 px
      const span = t1 - t0, want = span * 100 / Math.max(100, canvas.width - left - 10);
      const p = Math.pow(10, Math.floor(Math.log10(want)));
      const step = [1, 2, 5, 10].map(m => m * p).find(v => v >= want);
      const unit = span >= 1 ? [1, "s"] : span >= 1e-3 ? [1e3, "ms"] : [1e6, "\u00b5s"];
      const out = [];
      for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) out.push([t, +(t * unit[0]).toPrecision(6) + " " + unit[1]]);
      return out;
    }
    function draw() {
      ctx.clearRect(0, 0, canvas.width, canvas.height);
      ctx.font = "12px sans-serif"; ctx.fillStyle = "#000";
      d.devices.forEach((n, k) => ctx.fillText(n, 4, top + k * rowH + 15));
      ctx.fillText("transfers", 4, top + d.devices.length * rowH + 15);
      for (const [tt, label] of ticks()) {
        ctx.fillStyle = "#ddd"; ctx.fillRect(x(tt), top, 1, rowH * lanes);
        ctx.fillStyle = "#000"; ctx.fillText(label, x(tt) - ctx.measureText(label).width / 2, 14);
      }
      for (const [dev, s, dur, , , phase] of d.ops) {
        if (s + dur < t0 || s > t1) continue;
        ctx.fillStyle = d.colours[phase] || "#888";
        ctx.fillRect(x(s), top + dev * rowH + 2, Math.max(1, x(s + dur) - x(s)), rowH - 4);
      }
      const lane = top + d.devices.length * rowH;
      for (const [src, , s, e] of d.transfers) {
        if (e < t0 || s > t1) continue;
        ctx.fillStyle = d.device_colours[src % d.device_colours.length];
        ctx.fillRect(x(s), lane + 2, Math.max(1, x(e) - x(s)), rowH - 4);
      }
    }
    canvas.addEventListener("wheel", e => {
      e.preventDefault();
      const t = t0 + (e.offsetX - left) / (canvas.width - left - 10) * (t1 - t0);
      const f = e.deltaY < 0 ? 0.8 : 1.25;
      t0 = t - (t - t0) * f; t1 = t + (t1 - t) * f; draw();
    });
    let drag = null;
    canvas.addEventListener("mousedown", e => { drag = [e.offsetX, t0, t1]; });
    window.addEventListener("mouseup", () => { drag = null; });
    canvas.addEventListener("mousemove", e => {
      const span = t1 - t0, w = canvas.width - left - 10;
      if (drag) { const dt = (drag[0] - e.offsetX) / w * span; t0 = drag[1] + dt; t1 = drag[2] + dt; draw(); return; }
      const t = t0 + (e.offsetX - left) / w * span, dev = Math.floor((e.offsetY - top) / rowH);
      if (dev === d.devices.length) {     // the transfers lane
        const x1 = d.transfers.find(o => o[2] <= t && t <= o[3]);
        if (!x1) { tip.style.display = "none"; return; }
        tip.style.display = "block"; tip.style.left = (e.pageX + 12) + "px"; tip.style.top = (e.pageY + 12) + "px";
        tip.textContent = "copy " + d.devices[x1[0]] + " -> " + d.devices[x1[1]] + "\nstart: " + (x1[2] * 1e3).toFixed(4) +
          " ms\nduration: " + ((x1[3] - x1[2]) * 1e3).toFixed(4) + " ms";
        return;
      }
      const hit = d.ops.find(o => o[0] === dev && o[1] <= t && t <= o[1] + o[2]);
      if (!hit) { tip.style.display = "none"; return; }
      tip.style.display = "block"; tip.style.left = (e.pageX + 12) + "px"; tip.style.top = (e.pageY + 12) + "px";
      tip.textContent = d.names[hit[3]] + "\nscope: " + (d.scopes[hit[4]] || "-") + "\nphase: " + (hit[5] || "-") +
        "\nstart: " + (hit[1] * 1e3).toFixed(4) + " ms\nduration: " + (hit[2] * 1e3).toFixed(4) + " ms";
    });
    draw();
    const painted = c => {
      const px = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
      let n = 0;
      for (let i = 3; i < px.length; i += 4) if (px[i] > 0) n++;
      return n;
    };
    const g = JSON.parse(document.getElementById("graph-data").textContent);
    const gc = document.getElementById("graph");
    let gstatus = "graph not drawn";
    if (g) {
      const gx = gc.getContext("2d"), pad = 12;
      gc.width = gc.clientWidth || 1200;
      gc.height = Math.min(700, Math.max(200, 8 * g.rows + 2 * pad));
      const px = n => pad + (g.cols > 1 ? n[0] / (g.cols - 1) : 0.5) * (gc.width - 2 * pad);
      const py = n => gc.height / 2 + (g.rows > 1 ? n[1] / g.rows : 0) * (gc.height - 2 * pad);
      const r = n => Math.min(6, 1.5 + Math.sqrt(n[3]) / 2);
      gx.strokeStyle = "rgba(120,120,120,0.35)"; gx.lineWidth = 0.5; gx.beginPath();
      for (const [a, b] of g.edges) { gx.moveTo(px(g.nodes[a]), py(g.nodes[a])); gx.lineTo(px(g.nodes[b]), py(g.nodes[b])); }
      gx.stroke();
      for (const n of g.nodes) {
        gx.fillStyle = g.colours[n[2] % g.colours.length];
        gx.beginPath(); gx.arc(px(n), py(n), r(n), 0, 2 * Math.PI); gx.fill();
      }
      const legend = document.getElementById("graph-legend");
      [...new Set(g.nodes.map(n => n[2]))].sort((a, b) => a - b).forEach(k => {
        const s = document.createElement("span");
        s.style.color = g.colours[k % g.colours.length]; s.textContent = "\u25cf " + g.devices[k] + "  ";
        legend.appendChild(s);
      });
      gc.addEventListener("mousemove", e => {
        const hit = g.nodes.findIndex(n => Math.hypot(px(n) - e.offsetX, py(n) - e.offsetY) <= r(n) + 2);
        if (hit < 0) { tip.style.display = "none"; return; }
        const n = g.nodes[hit];
        tip.style.display = "block"; tip.style.left = (e.pageX + 12) + "px"; tip.style.top = (e.pageY + 12) + "px";
        tip.textContent = g.names[hit] + "\ndevice: " + g.devices[n[2]] + "\nops: " + n[3];
      });
      const hex = c => [1, 3, 5].map(i => parseInt(c.slice(i, i + 2), 16));
      const coloured = g.nodes.filter(n => {          // the pixel at a node's centre has its device's colour
        const p = gx.getImageData(Math.round(px(n)), Math.round(py(n)), 1, 1).data, want = hex(g.colours[n[2] % g.colours.length]);
        return want.every((v, i) => Math.abs(v - p[i]) < 8);
      }).length;
      gstatus = "graph " + g.nodes.length + " nodes (" + coloured + " in their device's colour), " + g.edges.length +
        " edges, painted " + painted(gc) + " pixels";
    }
    // how the page rendered, for a headless test (hidden): the smallest chart text and widest element, in
    // CSS pixels at this window's width
    let widest = 0;
    for (const el of document.querySelectorAll("svg, canvas, table")) widest = Math.max(widest, el.getBoundingClientRect().right);
    // matplotlib draws text as glyph paths sized in points of the SVG's viewBox: a chart's CSS pixels per
    // point say how large its text renders (1.33: as designed at 96 dpi)
    const glyphs = [...document.querySelectorAll(".charts svg")].map(svg => {
      const vb = svg.viewBox.baseVal, w = svg.getBoundingClientRect().width;
      return vb && vb.width ? w / vb.width : 1;
    });
    document.getElementById("status").textContent =
      "drawn " + d.ops.length + " ops and " + d.transfers.length + " transfers; painted " + painted(canvas) +
      " pixels; svg " + document.querySelectorAll("svg").length + "; " + gstatus + "; chart scale " +
      Math.min(...glyphs).toFixed(3) + "; widest " + Math.round(widest) + " of " + document.documentElement.clientWidth +
      "; hidden: " + getComputedStyle(document.getElementById("status")).display;
  } catch (e) { errors.textContent += e + "\n"; }
})();
"""  # noqa: E501

_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 1.5em; color: #222; }}
table {{ border-collapse: collapse; }} td, th {{ padding: 2px 10px; border-bottom: 1px solid #ddd; text-align: right; }}
td:first-child, th:first-child {{ text-align: left; }}
.oom {{ color: #c00; font-weight: bold; }}
.banner {{ background: #fdd; border: 1px solid #c00; padding: .5em; font-weight: bold; }}
#timeline {{ width: 100%; border: 1px solid #ccc; cursor: grab; }}
#graph {{ width: 100%; border: 1px solid #ccc; }}
#tip {{ position: absolute; display: none; background: #ffe; border: 1px solid #999; padding: 4px; white-space: pre;
        font-size: 12px; pointer-events: none; }}
.charts {{ display: flex; flex-wrap: wrap; gap: 8px; }}
.charts .chart {{ flex: 1 1 560px; max-width: 100%; }}
.charts svg {{ width: 100%; height: auto; }}
.swatch {{ display: inline-block; width: 12px; height: 12px; margin: 0 3px 0 8px; vertical-align: -1px; }}
#status {{ display: none; }}
</style></head><body>
<h1>{title}</h1>
{banner}
<p>Simulated step <b>{step}</b> ({status}); {ops} ops; {transfers} transfers, {bytes}.</p>
<table><tr><th>device</th><th>ops</th><th>busy</th><th>peak memory</th></tr>{rows}</table>
<h2>Where the time goes</h2>
<div class="charts">{charts}</div>
{search}
{compare}
<h2>The graph</h2>
<p>{gnote}</p><p id="graph-legend"></p>
<canvas id="graph"></canvas>
<h2>Timeline</h2>
<p>Wheel: zoom; drag: pan; hover: the op or copy. Phases: {phases}; the last lane: copies between devices,
each in its source device's colour (as in the graph above).</p>
<canvas id="timeline"></canvas><div id="tip"></div>
<p id="status"></p><pre id="errors"></pre>
<script type="application/json" id="timeline-data">{data}</script>
<script type="application/json" id="graph-data">{gdata}</script>
<script>{script}</script>
</body></html>
"""
