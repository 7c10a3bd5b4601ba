"""One placement on one page: ``autoplace report``.

:func:`placement_report` simulates the placement with its timeline and writes one self-contained HTML page
(no network needed to view it): a summary (step time, ops per device, transfers, a banner naming every
device out of memory), the step's charts as inline SVG (:func:`autoplace.plots.step_figure`: compute per
device by phase, memory-copy time per device pair, peak memory against capacity) and an interactive
timeline drawn on a canvas by a few lines of plain JavaScript (wheel to zoom, drag to pan, hover for an
op's name, scope, phase, start and duration), and for a search its training curve. The page reports its own drawing in ``#status`` (``drawn N
ops``, the canvas's painted pixels) and any script error in ``#errors``, which is what a headless browser
test reads.
"""

from __future__ import annotations

import html
import json

import numpy as np

from autoplace.cluster import Cluster
from autoplace.graph import Graph
from autoplace.placement import Placement

__all__ = ["placement_report"]

PHASE_COLOURS = {"forward": "#1f77b4", "backward": "#ff7f0e", "update": "#2ca02c"}


def _timeline_data(graph: Graph, result) -> dict:
    tl = result.timeline
    scopes: dict[str, int] = {}
    ops = []
    for i in np.argsort(tl.start, kind="stable"):
        op = graph.ops[int(i)]
        dur = float(tl.finish[i] - tl.start[i])
        ops.append([int(tl.device[i]), float(tl.start[i]), dur, int(i), scopes.setdefault(op.scope or "", len(scopes)),
                    op.phase or ""])
    return {"devices": list(result.device_names), "step": float(result.step_time), "ops": ops,
            "names": [op.name for op in graph.ops], "scopes": list(scopes), "colours": PHASE_COLOURS}


def placement_report(graph: Graph, cluster: Cluster, placement: Placement, *, curve=None) -> str:
    """The HTML page of ``placement`` (see the module docstring); ``curve``: the search's training curve
    (:class:`~autoplace.search.curve.Curve`, as ``--curve`` writes it), drawn too when given."""
    from autoplace.plots import step_figure, svg_text
    from autoplace.report import fmt_bytes, fmt_time
    from autoplace.sim import simulate

    result = simulate(graph, cluster, placement, trace=True)
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
    charts = svg_text(step_figure(graph, result))
    search = "" if curve is None or not len(curve) else \
        f'<h2>The search</h2><div class="charts" id="curve">{svg_text(curve.figure())}</div>'
    data = json.dumps(_timeline_data(graph, result), separators=(",", ":"))
    title = f"{graph.name} on {cluster.name}: {placement.method}"
    return _PAGE.format(
        title=html.escape(title), banner=banner, step=fmt_time(result.step_time),
        status="ok" if result.ok else "failing", ops=graph.n_ops, transfers=result.n_transfers,
        bytes=fmt_bytes(result.transfer_bytes), rows=rows, charts=charts, search=search, data=data.replace("</", "<\\/"),
        script=_SCRIPT)


_SCRIPT = r"""
(function () {
  const errors = document.getElementById("errors");
  window.onerror = function (msg) { errors.textContent += msg + "\n"; };
  try {
    const d = JSON.parse(document.getElementById("timeline-data").textContent);
    const canvas = document.getElementById("timeline"), ctx = canvas.getContext("2d");
    const tip = document.getElementById("tip");
    const rowH = 22, left = 90, top = 20;
    canvas.width = canvas.clientWidth || 1200;
    canvas.height = top + rowH * d.devices.length + 10;
    let t0 = 0, t1 = d.step > 0 ? d.step : 1;
    const x = t => left + (t - t0) / (t1 - t0) * (canvas.width - left - 10);
    function draw() {
      ctx.clearRect(0, 0, canvas.width, canvas.height);
      ctx.font = "12px sans-serif"; ctx.fillStyle = "#000";
      d.devices.forEach((n, k) => ctx.fillText(n, 4, top + k * rowH + 15));
      for (const [dev, s, dur, , , phase] of d.ops) {
        if (s + dur < t0 || s > t1) continue;
        ctx.fillStyle = d.colours[phase] || "#888";
        ctx.fillRect(x(s), top + dev * rowH + 2, Math.max(1, x(s + dur) - x(s)), rowH - 4);
      }
      ctx.fillStyle = "#000";
      ctx.fillText((t0 * 1e3).toPrecision(4) + " ms", left, 12);
      ctx.fillText((t1 * 1e3).toPrecision(4) + " ms", canvas.width - 80, 12);
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
      const hit = d.ops.find(o => o[0] === dev && o[1] <= t && t <= o[1] + o[2]);
      if (!hit) { tip.style.display = "none"; return; }
      tip.style.display = "block"; tip.style.left = (e.pageX + 12) + "px"; tip.style.top = (e.pageY + 12) + "px";
      tip.textContent = d.names[hit[3]] + "\nscope: " + (d.scopes[hit[4]] || "-") + "\nphase: " + (hit[5] || "-") +
        "\nstart: " + (hit[1] * 1e3).toFixed(4) + " ms\nduration: " + (hit[2] * 1e3).toFixed(4) + " ms";
    });
    draw();
    const px = ctx.getImageData(0, 0, canvas.width, canvas.height).data;
    let painted = 0;
    for (let i = 3; i < px.length; i += 4) if (px[i] > 0) painted++;
    document.getElementById("status").textContent =
      "drawn " + d.ops.length + " ops; painted " + painted + " pixels; svg " + document.querySelectorAll("svg").length;
  } catch (e) { errors.textContent += e + "\n"; }
})();
"""

_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 1.5em; color: #222; }}
table {{ border-collapse: collapse; }} td, th {{ padding: 2px 10px; border-bottom: 1px solid #ddd; text-align: right; }}
td:first-child, th:first-child {{ text-align: left; }}
.oom {{ color: #c00; font-weight: bold; }}
.banner {{ background: #fdd; border: 1px solid #c00; padding: .5em; font-weight: bold; }}
#timeline {{ width: 100%; border: 1px solid #ccc; cursor: grab; }}
#tip {{ position: absolute; display: none; background: #ffe; border: 1px solid #999; padding: 4px; white-space: pre;
        font-size: 12px; pointer-events: none; }}
.charts svg {{ max-width: 100%; height: auto; }}
</style></head><body>
<h1>{title}</h1>
{banner}
<p>Simulated step <b>{step}</b> ({status}); {ops} ops; {transfers} transfers, {bytes}.</p>
<table><tr><th>device</th><th>ops</th><th>busy</th><th>peak memory</th></tr>{rows}</table>
<h2>Where the time goes</h2>
<div class="charts">{charts}</div>
{search}
<h2>Timeline</h2>
<p>Wheel: zoom; drag: pan; hover: the op. Blue forward, orange backward, green update.</p>
<canvas id="timeline"></canvas><div id="tip"></div>
<p id="status"></p><pre id="errors"></pre>
<script type="application/json" id="timeline-data">{data}</script>
<script>{script}</script>
</body></html>
"""
