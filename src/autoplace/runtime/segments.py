"""A device's share of a step as straight-line Python: the runs of ops it executes without waiting.

A worker runs its device's ops in *segments*: runs of consecutive ops, each of which can run to its end
once it has started, because only arrivals from other devices make a device wait. :func:`cut` finds them
from the device's plan:

- **Under a schedule** (``plan.order``) the device runs its ops in that order, so a segment is a run of
  that order, cut before every op that reads a received tensor.
- **In ready order** (no schedule) the executor is a FIFO ready queue that takes arrivals when it has
  nothing else to run. :func:`cut` runs that queue once with the device's received tensors arriving one
  by one in message order (the order their producers run in the program), each after the device has run
  everything it could: the first segment is what the device runs before any arrival, each later one what
  an arrival sets free. A segment then waits for the segments its ops read from and the received tensors
  they read, and ready segments run in FIFO order: where arrivals come in that order, one at a time, the
  device runs its ops in the op-by-op queue's order; where several land at once, their segments run one
  after another.

:func:`generate` writes each segment as one Python function — the aten calls in turn, each argument a
local variable or a literal, a value stored for other segments, the sends or a fetch only where needed,
each variable deleted after its last use — and compiles them once (the code fx's ``GraphModule`` writes for
a graph, plus the executor's sends and releases). A step then costs one Python call per op, as eager's
forward does, instead of resolving each op's arguments through the program's interpreter.
"""

from __future__ import annotations

import keyword
import math
import sys
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from autoplace.runtime.plan import DevicePlan
from autoplace.runtime.program import DEVICE, Program, SRef, TRef

__all__ = ["Segment", "cut", "generate", "op_of_error"]


@dataclass
class Segment:
    """A run of a device's ops (``ops``, in the order it runs them), the earlier segments (``after``) and
    received tensors (``recv``) it waits for, and — from a step run op by op — its memory figures relative
    to the bytes held when it starts: ``needs`` (per op, the bytes held before it plus its declared
    output, what the executor checks against the device's memory) and ``need`` their most, ``peak`` (the
    most held after any op) and ``delta`` (what it leaves held)."""

    ops: list[int]
    after: list[int] = field(default_factory=list)
    recv: list[TRef] = field(default_factory=list)
    needs: list[int] | None = None
    need: int = 0
    peak: int = 0
    delta: int = 0
    fn: Any = None


def cut(program: Program, plan: DevicePlan) -> list[Segment]:
    """The segments of ``plan`` (see the module docstring)."""
    readers_of_recv: dict[int, list[TRef]] = {}
    for ref, users in plan.recv_users.items():
        for u in set(users):
            readers_of_recv.setdefault(u, []).append(ref)
    if plan.order is not None:
        runs: list[list[int]] = []
        for i in plan.order:
            if not runs or i in readers_of_recv:
                runs.append([])
            runs[-1].append(i)
    else:
        runs = _fifo_runs(plan, readers_of_recv)
    where = {i: s for s, run in enumerate(runs) for i in run}
    segments = []
    for s, run in enumerate(runs):
        after = sorted({where[j] for i in run for j in plan.deps[i]} - {s})
        recv = list(dict.fromkeys(r for i in run for r in readers_of_recv.get(i, ())))
        segments.append(Segment(run, after, recv))
    return segments


def _fifo_runs(plan: DevicePlan, readers_of_recv: dict[int, list[TRef]]) -> list[list[int]]:
    """The op-by-op FIFO queue's runs with the received tensors arriving one at a time in message order."""
    n_deps = {i: len(plan.deps[i]) + len(readers_of_recv.get(i, ())) for i in plan.ops}
    succ: dict[int, list[int]] = {i: [] for i in plan.ops}
    for i in plan.ops:
        for j in plan.deps[i]:
            succ[j].append(i)
    ready = deque(i for i in plan.ops if n_deps[i] == 0)
    runs: list[list[int]] = []

    def drain() -> None:
        run = []
        while ready:
            i = ready.popleft()
            run.append(i)
            for s in succ[i]:
                n_deps[s] -= 1
                if n_deps[s] == 0:
                    ready.append(s)
        if run:
            runs.append(run)

    drain()
    if plan.sequence is not None:
        arrivals = sorted(plan.recv_users, key=lambda r: (int(plan.sequence[r.op]), r.op, r.k or 0))
    else:
        arrivals = sorted(plan.recv_users, key=lambda r: (r.op, r.k or 0))
    for ref in arrivals:
        for u in dict.fromkeys(plan.recv_users[ref]):
            n_deps[u] -= 1
            if n_deps[u] == 0:
                ready.append(u)
        drain()
    return runs


def generate(program: Program, plan: DevicePlan, segments: list[Segment], *, reads: dict[int, list[Any]],
             keep: set[int], sent: set[int], device: str, name: str, pumps: bool = False) -> dict:
    """Write and compile every segment's function (``segment.fn``); returns the per-step reference counts
    of the values several segments read (copy it for each step) and the source line of each op.
    ``reads[i]``: the values op ``i`` reads that the executor releases after their last reader (its
    local results, not ``keep``, by op index; received tensors by :class:`TRef`).

    A segment's function is called as ``fn(env, rc, scalar, send, draws, rt)``: ``env`` holds the values
    that outlive a segment (op index or received :class:`TRef` -> value), ``rc`` the counts of readers
    still to run of values read by several segments, ``scalar`` evaluates the program's scalar nodes,
    ``send(i)`` sends op ``i``'s outputs, ``draws`` holds random ops' draws made ahead (op -> tensor) and
    ``rt`` is the runtime (``rt._pending``: a send waits to be posted, ``rt._pump()`` posts it; only with
    ``pumps``)."""
    writer = _Writer(program, plan, segments, reads=reads, keep=keep, sent=sent, device=device, pumps=pumps)
    lines: list[str] = []
    line_op: dict[int, int] = {}
    for s, seg in enumerate(segments):
        lines.append(f"def s{s}(env, rc, scalar, send, draws, rt):")
        body = writer.body(seg)
        if not body:
            lines.append("    pass")
        for text, i in body:
            line_op[len(lines) + 1] = i
            lines.append("    " + text)
        lines.append("")
    filename = f"<autoplace {name}>"
    code = compile("\n".join(lines), filename, "exec")
    exec(code, writer.glb)  # noqa: S102 - the source is written above from decoded aten calls, never read from a file
    for s, seg in enumerate(segments):
        seg.fn = writer.glb[f"s{s}"]
    return {"rc": writer.rc0, "line_op": line_op, "filename": filename, "source": "\n".join(lines)}


class _Writer:
    """What :func:`generate` writes a segment's function with: the device's values and readers, and the
    globals (``glb``) its code refers to."""

    def __init__(self, program: Program, plan: DevicePlan, segments: list[Segment], *, reads: dict[int, list[Any]],
                 keep: set[int], sent: set[int], device: str, pumps: bool):
        import torch

        self.program, self.calls, self.reads, self.keep, self.sent, self.pumps = (program, program.calls, reads, keep,
                                                                                   sent, pumps)
        self.local = set(plan.ops)
        self.seg_of = {i: s for s, seg in enumerate(segments) for i in seg.ops}
        self.scalar_read: set[int] = set()
        for fn_args in program.scalars.values():
            refs: list[TRef] = []
            program._collect([fn_args[1], fn_args[2]], refs, [])
            self.scalar_read |= {r.op for r in refs}
        # which segments read each releasable value
        self.read_in: dict[Any, set[int]] = {}
        for i in plan.ops:
            for key in reads[i]:
                self.read_in.setdefault(key, set()).add(self.seg_of[i])
        self.rc0 = {k: len(s) for k, s in self.read_in.items() if len(s) > 1}
        self.glb: dict[str, Any] = {"__builtins__": __builtins__, "DEVICE": torch.device(device)}
        replay = program.replay

        def _replay(i, drawn, target):
            return replay(i, drawn, lambda _r: target, device)

        self.glb["replay"] = _replay

    def key_of(self, r: TRef) -> Any:     # where ``env`` holds a tensor read
        return r.op if r.op in self.local else TRef(r.op, r.k)

    def in_env(self, i: int) -> bool:
        return i in self.keep or i in self.sent or i in self.scalar_read or \
            bool(self.read_in.get(i, set()) - {self.seg_of[i]})

    def var(self, r: TRef) -> str:
        return f"v{r.op}" if r.op in self.local else f"r{r.op}_{'' if r.k is None else r.k}"

    def const(self, a: Any) -> str:
        k = f"c{len(self.glb)}"
        self.glb[k] = a
        return k

    def lit(self, a: Any, uses: list[TRef]) -> str:
        t = type(a)
        if t is TRef:
            uses.append(a)
            v = self.var(a)
            return v if a.k is None or a.op not in self.local else f"{v}[{a.k}]"
        if t is SRef:
            return f"scalar({a.name!r})"
        if t is list:
            return "[" + ", ".join(self.lit(x, uses) for x in a) + "]"
        if a is DEVICE:
            return "DEVICE"
        if a is None or t in (bool, int, str) or (t is float and math.isfinite(a)):
            return repr(a)
        return self.const(a)

    def _calls(self, seg: Segment) -> tuple[dict[int, str], list[list[TRef]]]:
        """Each op's call as source, and the tensors each op of ``seg`` reads."""
        calls, program, lit = self.calls, self.program, self.lit
        calls_of: dict[int, str] = {}
        uses_at: list[list[TRef]] = []
        for i in seg.ops:
            c = calls[i]
            uses: list[TRef] = []
            if c is not None:
                args = [lit(a, uses) for a in c.args] + [_keyword(k, lit(v, uses)) for k, v in c.kwargs.items()]
                self.glb[f"f{i}"] = c.fn
                calls_of[i] = f"f{i}({', '.join(args)})"
                if i in program.random:
                    target = "None"
                    if c.mutates is not None:
                        uses.append(c.mutates)
                        target = lit(c.mutates, [])
                    calls_of[i] = f"(replay({i}, draws.pop({i}), {target}) if {i} in draws else {calls_of[i]})"
            uses_at.append(uses)
        return calls_of, uses_at

    def body(self, seg: Segment) -> list[tuple[str, int]]:
        """Segment ``seg``'s function body: ``(line, op)`` each."""
        calls, reads, sent, keep, glb, rc0 = self.calls, self.reads, self.sent, self.keep, self.glb, self.rc0
        var = self.var
        calls_of, uses_at = self._calls(seg)
        body: list[tuple[str, int]] = []
        last_use: dict[str, int] = {}
        for n, uses in enumerate(uses_at):
            for r in uses:
                last_use[var(r)] = n
        last_read: dict[int, list[Any]] = {}   # position in the segment -> values it reads last here
        seen: set[Any] = set()
        for n in range(len(seg.ops) - 1, -1, -1):
            for key in reads[seg.ops[n]]:
                if key not in seen:
                    seen.add(key)
                    last_read.setdefault(n, []).append(key)
        has: set[str] = set()            # local variables defined so far
        for n, i in enumerate(seg.ops):
            if calls[i] is None:                   # a placeholder: in ``env`` since the set-up
                if i in sent:
                    body.append((f"send({i})", i))
                continue
            for r in dict.fromkeys(uses_at[n]):
                v = var(r)
                if v not in has:
                    has.add(v)
                    body.append((f"{v} = env[{_key_src(self.key_of(r), glb)}]", i))
            body.append((f"v{i} = {calls_of[i]}", i))
            has.add(f"v{i}")
            if self.in_env(i):
                body.append((f"env[{i}] = v{i}", i))
            if i in sent:
                body.append((f"send({i})", i))
            elif self.pumps:
                body.append(("if rt._pending: rt._pump()", i))
            for key in last_read.get(n, ()):
                k_src = _key_src(key, glb)
                if key in rc0:
                    body.append((f"rc[{k_src}] -= 1", i))
                    body.append((f"if not rc[{k_src}]: del env[{k_src}]", i))
                elif isinstance(key, TRef) or self.in_env(key):
                    body.append((f"del env[{k_src}]", i))
            if i not in self.read_in and i not in keep and self.in_env(i):      # sent, read by no one: dropped
                body.append((f"del env[{i}]", i))
            for v in sorted({var(r) for r in uses_at[n]} | {f"v{i}"}):
                if last_use.get(v, -1) <= n and v in has:
                    body.append((f"del {v}", i))
                    has.discard(v)
        return body


def _keyword(name: str, value: str) -> str:
    """A keyword argument's source (``**{...}`` where the name is no Python identifier: ``from``)."""
    return f"{name}={value}" if name.isidentifier() and not keyword.iskeyword(name) else f"**{{{name!r}: {value}}}"


def _key_src(key: Any, glb: dict) -> str:
    if isinstance(key, TRef):
        k = f"R{key.op}_{'' if key.k is None else key.k}"
        glb[k] = key
        return k
    return str(key)


def op_of_error(filename: str, line_op: dict[int, int]) -> int | None:
    """The op whose line raised the exception being handled, in the segments' code ``filename``."""
    tb = sys.exc_info()[2]
    op = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            op = line_op.get(tb.tb_lineno)
        tb = tb.tb_next
    return op
