"""The device worker both runtimes share: a process per device running its part of a placed program.

:class:`DeviceRuntime` runs a device's segments as they become ready and counts their memory and time;
its exchange — how tensors reach other devices — is each back-end's (:mod:`autoplace.runtime.shm`: shared
memory, :mod:`autoplace.runtime.dist`: ``torch.distributed``). :func:`serve_messages` answers the driver's
messages over a pipe; :func:`in_environment` starts a worker with the driver's environment.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from collections import deque
from typing import Any

from autoplace.graph import Graph
from autoplace.runtime.program import ExecutionError, Program, TRef
from autoplace.runtime.segments import cut, generate, op_of_error

__all__ = ["DeviceRuntime", "serve_messages", "in_environment", "driver_gone", "die_with_parent"]


_NEVER = -(1 << 62)


SPIN_POLLS = int(os.environ.get("AUTOPLACE_SPIN_POLLS", 200))  # busy polls before sleeping between polls


POLL_SLEEP_S = float(os.environ.get("AUTOPLACE_POLL_SLEEP_S", 20e-6))


#: the process that started this worker (set by :func:`in_environment`): a worker waiting on a peer ends
#: when it is gone
DRIVER_PID: int | None = None


def driver_gone() -> bool:
    """Whether the driver that started this process has ended (a zombie counts as ended; a worker started
    some other way: whether its parent has)."""
    if DRIVER_PID is None:
        return os.getppid() == 1
    try:
        with open(f"/proc/{DRIVER_PID}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True
    except OSError:  # pragma: no cover - no /proc
        try:
            os.kill(DRIVER_PID, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False


def die_with_parent() -> None:
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:  # pragma: no cover - not Linux
        pass


class DeviceRuntime:
    """A device's worker: the program, the current plan and the resident tensors, and the step loop that
    runs the device's segments as they become ready (the whitepaper's executor: a ready queue fed by local
    completions and by arriving tensors), counting memory and time.

    A back-end subclasses it with its exchange — how an op's outputs reach the devices that read them:
    ``_exchange_setup``, ``_begin_step``, ``_end_step``, ``_send``, ``_arrivals`` and ``_idle``
    (:class:`~autoplace.runtime.shm.worker.ShmRuntime`: shared memory; :class:`~autoplace.runtime.dist.rank.
    RankRuntime`: ``torch.distributed`` messages)."""

    def __init__(self, name: str, device: str, cores: list[int] | None):
        self.name, self.device = name, device
        if cores:
            try:
                os.sched_setaffinity(0, cores)
            except (OSError, AttributeError):  # pragma: no cover
                pass
        import torch

        torch.set_num_threads(max(1, len(cores or [0])))
        if device.startswith("cuda"):  # pragma: no cover - no GPU in CI
            torch.cuda.set_device(torch.device(device))
        self.torch = torch
        self.program: Program | None = None
        #: random ops' draws for the next step (op index -> tensor: :meth:`Program.draw`), made by the caller
        self.draws: dict = {}

    # -------------------------------------------------------------- set-up
    def load(self, graph: Graph) -> None:
        self.program = Program(graph)

    def setup(self, plan, transfers, seed: int, capacity: float, keep: set[int], values: dict | None = None,
              *exchange) -> int:
        """Set up ``plan``: its transfers (``(ref, src, dst, offset, shape, dtype)`` per tensor and
        destination), its placeholders (``values`` by op index, else synthetic from ``seed``) and the
        exchange's own set-up (:meth:`_exchange_setup` with ``exchange``); returns the resident bytes."""
        prog = self.program
        self.plan = plan
        self.capacity = capacity
        self.exchange_ptr = -1
        sends: dict[TRef, list[int]] = {}
        self.recv_tid: list[tuple[int, TRef]] = []
        for tid, (ref, src, dst, *_rest) in enumerate(transfers):
            if src == plan.device:
                sends.setdefault(ref, []).append(tid)
            elif dst == plan.device:
                self.recv_tid.append((tid, ref))
        self.sends_of: dict[int, list[tuple[TRef, list[int]]]] = {}  # producer op -> (tensor, slots)
        for ref, tids in sends.items():
            self.sends_of.setdefault(ref.op, []).append((ref, tids))
        self._exchange_setup(transfers, *exchange)
        self.local = set(plan.ops)
        # values are dropped once their last local reader has run (readers run in any ready order)
        self.reads: dict[int, list[Any]] = {i: [] for i in plan.ops}
        self.refcount: dict[Any, int] = {}
        for i in plan.ops:
            c = prog.calls[i]
            if c is None:
                continue
            for key in dict.fromkeys(r.op if r.op in self.local else TRef(r.op, r.k) for r in c.tensor_refs):
                if isinstance(key, TRef) or (prog.calls[key] is not None and key not in keep):
                    self.reads[i].append(key)
                    self.refcount[key] = self.refcount.get(key, 0) + 1
        self.drop_now = {i for i in plan.ops if prog.calls[i] is not None and i not in keep
                         and i not in self.refcount}
        # the runs of ops the device executes without waiting, and what each waits for
        self.segments = cut(prog, plan)
        self.keep = keep
        self.kept_results = [i for i in plan.ops if i in keep and prog.calls[i] is not None]
        self._compiled = None      # their code, written at the first step that runs it
        self._counted = False      # a step has run op by op since this set-up: the segments' memory is known
        self.seg_deps = [len(seg.after) + len(seg.recv) for seg in self.segments]
        self.seg_succ: list[list[int]] = [[] for _ in self.segments]
        for s, seg in enumerate(self.segments):
            for t in seg.after:
                self.seg_succ[t].append(s)
        self.recv_segs: dict[TRef, list[int]] = {}
        for s, seg in enumerate(self.segments):
            for r in seg.recv:
                self.recv_segs.setdefault(r, []).append(s)
        self.seg_initial = [s for s, n in enumerate(self.seg_deps) if n == 0]
        # resident state: this device's placeholders
        self.env: dict[Any, Any] = {}
        self.live: dict[int, list] = {}
        self.live_bytes = 0
        values = values or {}
        for i in plan.ops:
            if prog.calls[i] is None:
                self.env[i] = values[i].to(self.device) if i in values else prog.make_input(i, seed, self.device)
                self._hold(self.env[i])
        self.resident = self.live_bytes
        if self.resident > capacity:
            raise MemoryError(f"{self.name}: its parameters and inputs need {self.resident} bytes, "
                              f"over its {int(capacity)}-byte memory")
        return self.resident

    # -------------------------------------------------------------- memory accounting
    def _tensors(self, v):
        T = self.torch.Tensor
        if isinstance(v, T):
            return (v,)
        if isinstance(v, (tuple, list)):
            return tuple(t for t in v if isinstance(t, T))
        return ()

    def _hold(self, v) -> None:
        for t in self._tensors(v):
            st = t.untyped_storage()
            key = st.data_ptr()
            if key == self.exchange_ptr:
                continue
            e = self.live.get(key)
            if e is None:
                self.live[key] = [st.nbytes(), 1]
                self.live_bytes += st.nbytes()
            else:
                e[1] += 1

    def _storage_bytes(self, v) -> int:
        """The bytes of the distinct storages ``v`` holds (outside the shared-memory block)."""
        storages = {}
        for t in self._tensors(v):
            st = t.untyped_storage()
            if st.data_ptr() != self.exchange_ptr:
                storages[st.data_ptr()] = st.nbytes()
        return sum(storages.values())

    def _release(self, v) -> None:
        for t in self._tensors(v):
            key = t.untyped_storage().data_ptr()
            e = self.live.get(key)
            if e is None:
                continue
            e[1] -= 1
            if e[1] == 0:
                self.live_bytes -= e[0]
                del self.live[key]

    # -------------------------------------------------------------- one step
    #: run segments as their compiled code once a step has run op by op (False: always op by op; read when the
    #: worker starts, :func:`in_environment`)
    compiled = os.environ.get("AUTOPLACE_INTERPRET", "") != "1"

    #: whether sends may wait to be posted (``_pending``), which every op's turn then offers to post
    _pumps = False

    def step(self, step_id: int, profile: bool = False) -> tuple:
        """Run one step; returns (start, end, peak bytes, busy seconds, per-op times if ``profile``,
        exchange counters — see :attr:`MeasuredResult.exchange`).

        The device runs its segments (:mod:`autoplace.runtime.segments`) as they become ready. The first
        step after a set-up, and every profiled one, runs each segment op by op: each op's memory checked
        and counted, its time taken if ``profile``. Later steps run each segment's compiled code, checked
        against the memory the op-by-op step counted for it."""
        prog = self.program
        env = self.env
        device = self.device
        segs = self.segments
        fast = self.compiled and self._counted and not profile
        self._begin_counting(fast)
        n_deps = list(self.seg_deps)
        ready = deque(self.seg_initial) if self.plan.order is None else \
            _InTurn(list(range(len(segs))), self.seg_initial)
        peak = self.live_bytes
        busy = 0.0
        times: dict[int, float] | None = {} if profile else None
        pc = time.perf_counter
        # tensors sent, bytes sent, seconds sending, tensors received, seconds receiving, latency sum, count
        xc = self._counters = [0, 0, 0.0, 0, 0.0, 0.0, 0]
        idle_since = float("inf")
        local = self.local

        def get(r: TRef):
            if r.op in local:
                v = env[r.op]
                return v if r.k is None else v[r.k]
            return env[r]

        scalar = prog.scalar_fn(get, device)
        if fast:
            rc = dict(self._compiled["rc"])
            sends_of = self.sends_of

            def send(i: int) -> None:
                ts = pc()
                self._send(sends_of[i], get, step_id)
                xc[2] += pc() - ts
        else:
            refs = dict(self.refcount)
        t_start = self._begin_step(step_id)
        remaining = len(segs)
        spins = 0
        while remaining:
            if ready:
                s = ready.popleft()
                seg = segs[s]
                spins = 0  # the next wait starts spinning afresh (and its latency counts from then)
                idle_since = float("inf")  # an arrival seen after running ops was not waited for
                if fast:
                    seg_peak, dt = self._run_compiled(seg, rc, scalar, send)
                    peak = max(peak, seg_peak)
                else:
                    peak, dt = self._run_ops(seg, env, get, scalar, refs, peak, times, step_id)
                busy += dt
                for t in self.seg_succ[s]:
                    n_deps[t] -= 1
                    if n_deps[t] == 0:
                        ready.append(t)
                remaining -= 1
            else:
                arrived = self._arrivals(step_id, idle_since)
                if arrived:
                    tr = self._seen_at  # when they were seen: handling them is the receiver's work
                    spins = 0
                    for ref, v in arrived:
                        env[ref] = v
                        self.live_bytes += v.numel() * v.element_size()
                        if self.live_bytes > peak:
                            peak = self.live_bytes
                        for t in self.recv_segs.get(ref, ()):
                            n_deps[t] -= 1
                            if n_deps[t] == 0:
                                ready.append(t)
                    xc[3] += len(arrived)
                    dt = pc() - tr
                    xc[4] += dt
                    busy += dt
                else:
                    if spins == 0:
                        idle_since = pc()
                    spins += 1
                    self._idle(spins)
        t_end = self._end_step()
        if not fast:
            self._counted = True
        return t_start, t_end, float(peak), busy, times, tuple(xc)

    def _run_compiled(self, seg, rc, scalar, send) -> tuple[int, float]:
        """Run segment ``seg``'s compiled code, checked first against the memory the op-by-op step counted
        for it; returns the bytes held at its peak and the seconds it took."""
        base = self.live_bytes
        if base + seg.need > self.capacity:
            k = next(k for k, need in enumerate(seg.needs) if base + need > self.capacity)
            self._out_of_memory(seg.ops[k], base + seg.needs[k])
        t0 = time.perf_counter()
        try:
            seg.fn(self.env, rc, scalar, send, self.draws, self)
        except MemoryError:
            raise
        except Exception as e:  # noqa: BLE001
            op = op_of_error(self._compiled["filename"], self._compiled["line_op"])
            where = f"op {self.program.graph.ops[op].name!r}" if op is not None else self.name
            raise RuntimeError(f"{where}: {type(e).__name__}: {e}") from None
        dt = time.perf_counter() - t0
        self.live_bytes = base + seg.delta
        return base + seg.peak, dt

    def _begin_counting(self, fast: bool) -> None:
        """Before a step: its segments' code written (the first compiled step), the last step's outputs
        dropped, and the bytes it starts holding — those the op-by-op step started with, or counted afresh."""
        if fast and self._compiled is None:
            self._compiled = generate(self.program, self.plan, self.segments, reads=self.reads, keep=self.keep,
                                      sent=set(self.sends_of), device=self.device, name=self.name, pumps=self._pumps)
        for i in self.kept_results:  # the last step's outputs, kept for a fetch until this step begins
            self.env.pop(i, None)
        if fast:
            self.live_bytes = self._start_bytes + self.resident - self._start_resident
        else:
            self.live, self.live_bytes = {}, 0
            for v in self.env.values():
                self._hold(v)
            self._start_bytes, self._start_resident = self.live_bytes, self.resident

    def _run_ops(self, seg, env, get, scalar, refs, peak, times, step_id) -> tuple[float, float]:
        """Run segment ``seg`` op by op, counting each op's memory (and recording the segment's figures
        for its compiled runs); returns the step's peak so far and the seconds it took."""
        prog = self.program
        calls = prog.calls
        device = self.device
        pc = time.perf_counter
        xc = self._counters
        cuda = device.startswith("cuda")
        base = self.live_bytes
        needs = []
        seg_peak = 0
        busy = 0.0
        for i in seg.ops:
            t0 = pc()
            send_dt = 0.0
            c = calls[i]
            if c is not None:
                need = self.live_bytes + self._out_bytes[i]
                needs.append(need - base)
                if need > self.capacity:
                    self._out_of_memory(i, need)
                try:
                    val = prog.call(i, get, scalar, device) if i not in self.draws else \
                        prog.replay(i, self.draws.pop(i), get, device)
                except MemoryError:
                    raise
                except Exception as e:  # noqa: BLE001
                    raise RuntimeError(f"op {prog.graph.ops[i].name!r}: {type(e).__name__}: {e}") from None
                env[i] = val
                self._hold(val)
                if self.live_bytes > peak:
                    peak = self.live_bytes
            else:
                needs.append(_NEVER)  # a placeholder: held since the set-up, never checked
            seg_peak = max(seg_peak, self.live_bytes - base)
            sends = self.sends_of.get(i)
            if sends or self._pending:
                ts = pc()
                self._send(sends or (), get, step_id)
                send_dt = pc() - ts
                xc[2] += send_dt
            for key in self.reads[i]:
                refs[key] -= 1
                if refs[key] == 0:
                    v = env.pop(key)
                    if type(key) is TRef:
                        self.live_bytes -= v.numel() * v.element_size()
                    else:
                        self._release(v)
            if i in self.drop_now:
                self._release(env.pop(i))
            t1 = pc()
            busy += t1 - t0
            if times is not None:
                if cuda:  # pragma: no cover
                    self.torch.cuda.synchronize()
                    t1 = pc()
                times[i] = t1 - t0 - send_dt  # sends are the exchange's cost, charged apart
        seg.needs, seg.need = needs, max(needs, default=_NEVER)
        seg.peak, seg.delta = seg_peak, self.live_bytes - base
        return peak, busy

    def _out_of_memory(self, i: int, need: int) -> None:
        raise MemoryError(f"{self.name} ran out of memory at op {self.program.graph.ops[i].name!r}: "
                          f"{need} bytes over its {int(self.capacity)}-byte budget")

    # -------------------------------------------------------------- the driver's requests
    def finish_setup(self) -> None:
        """Output sizes per op, for the memory check before each op (the graph's declared outputs)."""
        g = self.program.graph
        self._out_bytes = {}
        for i in self.plan.ops:
            op = g.ops[i]
            self._out_bytes[i] = 0 if op.meta.get("view") or self.program.calls[i] is None or \
                self.program.calls[i].mutates is not None else sum(op.out_bytes)

    def set_draws(self, draws: dict) -> None:
        """What the next step's random ops draw (op index -> tensor), made by the caller in eager's order."""
        self.draws = dict(draws)

    def assign(self, values: dict) -> None:
        """Give placeholders (op index -> tensor) of this device new values, as a new batch of inputs."""
        for i, v in values.items():
            if i not in self.env or self.program.calls[i] is not None:
                raise ExecutionError(f"{self.name}: op {self.program.graph.ops[i].name!r} is not an input here")
            # the resident bytes change by the two values' sizes: the live map is only kept up to date by
            # op-by-op steps, so a compiled step's freed storage may share an address with the new value
            before = self._storage_bytes(self.env[i])
            self._release(self.env[i])
            self.env[i] = v.to(self.device)
            self._hold(self.env[i])
            self.resident += self._storage_bytes(self.env[i]) - before

    def fetch(self, refs: list[TRef]) -> list:
        out = []
        for r in refs:
            v = self.env[r.op] if r.op in self.local else None
            if v is not None and r.k is not None:
                v = v[r.k]
            out.append(v.detach().to("cpu").clone() if v is not None else None)
        return out

    # -------------------------------------------------------------- the exchange (each back-end's own)
    #: messages waiting for more than their op's turn (the distributed runtime's staged copies): the loop
    #: then offers every op's turn to ``_send``, which posts them as soon as they may go
    _pending = False

    def _exchange_setup(self, transfers, *exchange) -> None:
        """Set up this device's part of the exchange for ``transfers`` (``(ref, src, dst, offset, shape,
        dtype)`` each) from what the pool sent with the set-up (``exchange``)."""
        raise NotImplementedError

    def _begin_step(self, step_id: int) -> float:
        """Start a step's exchange; returns the step's start time."""
        raise NotImplementedError

    def _end_step(self) -> float:
        """Finish a step's exchange (its device's work done); returns the step's end time."""
        raise NotImplementedError

    def _send(self, sends: list[tuple[TRef, list[int]]], get, step_id: int) -> None:
        """Send an op's outputs (``(tensor, transfer ids)`` each; ``get`` reads a tensor's value)."""
        raise NotImplementedError

    def _arrivals(self, step_id: int, idle_since: float) -> list:
        """The awaited tensors that have arrived, ``(ref, value)`` each (setting ``_seen_at``, when they were
        seen; an arrival raised while the device was already waiting, since ``idle_since``, adds its delay
        to the latency counters)."""
        raise NotImplementedError

    def _idle(self, spins: int) -> None:
        """Nothing to run and nothing arrived (the ``spins``-th time in a row): wait a little."""
        raise NotImplementedError


class _InTurn:
    """The ready ops of a device that runs a schedule: only the op whose turn it is comes out (the
    ``deque`` calls the step loop makes)."""

    __slots__ = ("order", "k", "ready")

    def __init__(self, order: list[int], initial: list[int]):
        self.order, self.k, self.ready = order, 0, set(initial)

    def append(self, i: int) -> None:
        self.ready.add(i)

    def __bool__(self) -> bool:
        return self.k < len(self.order) and self.order[self.k] in self.ready

    def popleft(self) -> int:
        i = self.order[self.k]
        self.k += 1
        self.ready.discard(i)
        return i


def in_environment(env: dict[str, str], driver: int, target, *args) -> None:
    """Run ``target(*args)`` with ``env`` as the process's environment and its settings read from it, started
    by process ``driver``: a worker forked from the pools' server (:func:`autoplace.runtime.pool.
    process_context`, which imported torch once) starts with the server's environment, not the driver's as it
    is now, and its parent is the server, not the driver."""
    global POLL_SLEEP_S, SPIN_POLLS, DRIVER_PID

    os.environ.clear()
    os.environ.update(env)
    SPIN_POLLS = int(os.environ.get("AUTOPLACE_SPIN_POLLS", 200))
    POLL_SLEEP_S = float(os.environ.get("AUTOPLACE_POLL_SLEEP_S", 20e-6))
    DRIVER_PID = driver
    DeviceRuntime.compiled = os.environ.get("AUTOPLACE_INTERPRET", "") != "1"
    target(*args)


def serve_messages(conn, rt: DeviceRuntime, name: str) -> None:
    """Answer the parent's messages on ``conn`` until it says exit or goes away."""
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        cmd = msg[0]
        try:
            if cmd == "exit":
                return
            if cmd == "load":
                rt.load(msg[1])
                conn.send(("ok",))
            elif cmd == "setup":
                resident = rt.setup(*msg[1:])
                rt.finish_setup()
                conn.send(("ok", resident))
            elif cmd == "step":
                conn.send(("done",) + rt.step(msg[1], profile=msg[2]))
            elif cmd == "fetch":
                conn.send(("values", rt.fetch(msg[1])))
            elif cmd == "assign":
                rt.assign(msg[1])
                conn.send(("ok",))
            elif cmd == "draws":
                rt.set_draws(msg[1])
                conn.send(("ok",))
            elif cmd == "call":  # run a function in the worker (profiling, link tests)
                conn.send(("ok", msg[1](rt, *msg[2:])))
            else:
                conn.send(("error", f"{name}: unknown command {cmd!r}"))
        except MemoryError as e:
            conn.send(("oom", str(e)))
        except Exception as e:  # noqa: BLE001 - every failure becomes a failing result in the parent
            text = " ".join(str(e).split())[:300]
            if "out of memory" in text.lower():
                conn.send(("oom", f"{name}: {text}"))
            else:
                conn.send(("error", f"{name}: {type(e).__name__}: {text}"))
