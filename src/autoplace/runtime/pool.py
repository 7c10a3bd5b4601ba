"""The driver's side of the runtimes: a pool of device worker processes that runs placed steps and
measures them, whichever back-end exchanges their tensors.

For a placement, the pool cuts the program per device (:func:`~autoplace.runtime.plan.plan_all`), lists
every cross-device tensor once per destination (:func:`transfer_layout`), sets each device up and runs
steps. Failures never hang or crash the caller: a worker's Python error, an out-of-memory (the device's
memory budget, counted over the tensors it holds, or CUDA's own), a dead worker or a timeout ends the run
with a failing :class:`MeasuredResult`, and the pool is torn down (processes terminated, then killed) and
restarted on the next run. Workers end with the driver (a worker waiting on a peer checks that the driver
is alive; one waiting for the driver's next message reads the end of its pipe).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import time
import weakref
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from typing import Any, Protocol

import numpy as np

from autoplace.cluster import Cluster
from autoplace.collectives import COLLECTIVES
from autoplace.graph import Graph, Vocabulary
from autoplace.placement import Placement
from autoplace.result import StepResult
from autoplace.runtime.device import in_environment
from autoplace.runtime.plan import plan_all
from autoplace.runtime.program import ExecutionError, Program, TRef, torch_device
from autoplace.schedule import runnable_priorities

__all__ = ["Runtime", "Pool", "ProcessPool", "MeasuredResult", "WorkerFailed", "DEFAULT_STEPS", "DEFAULT_TIMEOUT_S",
           "process_context", "cores_of", "transfer_layout", "slot_bytes", "close_all"]


class Runtime(Vocabulary):
    """What runs placed steps: worker processes exchanging tensors through shared memory (``shm``),
    ``torch.distributed`` ranks (``distributed``), plain PyTorch in this process for a step on one device
    (``eager``: what a placed step reports, never asked for), or the choice (``auto``:
    :func:`~autoplace.runtime.backends.runtime_for`)."""

    AUTO = "auto"
    SHM = "shm"
    DISTRIBUTED = "distributed"
    EAGER = "eager"


DEFAULT_STEPS = 10


DEFAULT_TIMEOUT_S = 120.0


_ALIGN = 64


@dataclass(frozen=True)
class MeasuredResult(StepResult):
    """A placement's measured training step (Mirhoseini et al. 2017 §3.4: run N steps, drop the first,
    average the rest). A failing run (OOM, a crashed worker, a timeout) has ``error`` set and an
    infinite ``step_time``."""

    ENV = "measured"

    step_time: float
    device_names: tuple[str, ...]
    peak_memory: np.ndarray
    memory_capacity: np.ndarray
    step_times: tuple[float, ...] = ()
    busy_time: np.ndarray | None = None
    n_transfers: int = 0
    transfer_bytes: int = 0
    error: str | None = None
    outputs: dict[str, Any] | None = field(default=None, repr=False)
    #: per device, per measured step: (tensors sent, bytes sent, seconds sending, tensors received,
    #: seconds handling arrivals, summed and counted delays from a flag raised to its receiver — already
    #: waiting — seeing it): what ``cluster detect`` fits the per-transfer costs and latency to
    exchange: np.ndarray | None = field(default=None, repr=False)


class WorkerFailed(Exception):
    """A run that failed in a worker (its error, an out-of-memory, a death, a timeout): the driver turns
    it into a failing :class:`MeasuredResult`."""


_POOLS: weakref.WeakSet[ProcessPool] = weakref.WeakSet()


@atexit.register
def close_all() -> None:  # pragma: no cover - interpreter exit
    for p in list(_POOLS):
        p.close()


_SERVER_OWNER: list[int] = []    # the process whose fork server the pools use (a forked copy cannot use it)


def process_context():
    """How workers and ranks start: forked from a server process that imported torch once (multiprocessing's
    ``forkserver``, torch preloaded), so a pool is ready in a fraction of a second instead of each process
    importing torch (about 1.7 s, and 1.6 s of CPU, each here); the server never touches CUDA, so a worker may.
    Each worker imports autoplace from the driver's ``sys.path``, takes the driver's environment as it is at
    launch and watches the driver, not its parent (:func:`in_environment`). Its standard output and error are
    the driver's when the server started. A process forked from the driver after that (which cannot reach
    the driver's server) spawns its workers, each importing torch."""
    import torch.multiprocessing as tmp

    if _SERVER_OWNER and _SERVER_OWNER[0] != os.getpid():
        return tmp.get_context("spawn")
    _SERVER_OWNER[:] = [os.getpid()]
    ctx = tmp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch"])
    return ctx


@contextlib.contextmanager
def _main_not_imported():
    """Start workers without re-importing the caller's ``__main__`` (spawn's default): the workers run only
    autoplace's code, and a user's script without an ``if __name__ == "__main__":`` guard must not run
    again in each of them."""

    main = sys.modules.get("__main__")
    saved = {k: main.__dict__[k] for k in ("__file__", "__spec__") if main is not None and k in main.__dict__}
    try:
        if main is not None:
            main.__dict__.pop("__file__", None)
            main.__dict__["__spec__"] = None
        yield
    finally:
        if main is not None:
            main.__dict__.update(saved)
            if "__spec__" not in saved:
                main.__dict__.pop("__spec__", None)


def cores_of(device, index: int) -> list[int] | None:
    """The cores a CPU device's worker is pinned to: its ``affinity``, else core ``i`` of ``cpu:i`` (a host
    before a slash, ``nodeB/cpu:1``, is not part of the name); None for other devices."""
    name = device.name.rsplit("/", 1)[-1]
    if not name.lower().startswith("cpu"):
        return None
    aff = device.meta.get("affinity")
    if aff:
        return [int(c) for c in aff]
    n = os.cpu_count() or 1
    return [int(name.partition(":")[2] or index) % n]


class Pool(Protocol):
    """What runs placed steps for the rest of autoplace (the measured env, the placed model, the profiler):
    both back-ends' pools (:class:`ProcessPool`) are one."""

    cluster: Cluster
    runtime: str

    def start(self) -> None: ...
    def close(self, now: bool = False) -> None: ...
    def run(self, graph: Graph, placement: Placement, *, steps: int = ..., seed: int = 0, fetch: bool = False,
            profile: bool = False) -> MeasuredResult: ...
    def prepare(self, graph: Graph, placement: Placement, *, seed: int = 0,
                values: dict[str, Any] | None = None) -> None: ...
    def step(self, profile: bool = False) -> list[tuple]: ...
    def assign(self, values: dict[str, Any]) -> None: ...
    def draw_random(self) -> None: ...
    def fetch(self, names: list[str] | None = None) -> dict[str, Any]: ...
    def call(self, device: int, fn, *args, timeout: float | None = None): ...
    def post(self, device: int, fn, *args) -> None: ...


class ProcessPool:
    """One worker process per device of ``cluster`` (started lazily, restarted after a failure), driven
    over pipes: the driver's side both back-ends share. A back-end names its worker process
    (``_process``) and its exchange (``_exchange_buffers``); :class:`~autoplace.runtime.shm.pool.WorkerPool`
    and :class:`~autoplace.runtime.dist.pool.DistributedPool` are the two.

    Use as a context manager, or call :meth:`close`; pools left open are closed at exit."""

    #: what exchanges the tensors: ``"shm"`` (shared memory) or ``"distributed"`` (torch.distributed)
    runtime: Runtime | str = ""

    def __init__(self, cluster: Cluster, *, timeout: float = DEFAULT_TIMEOUT_S):
        self.cluster = cluster
        self.timeout = float(timeout)
        self.devices = [torch_device(d.name) for d in cluster.devices]
        self._procs: list = []
        self._conns: list = []
        self._program: Program | None = None
        self._loaded = False  # the workers hold self._program's graph
        self._prepared: dict | None = None  # the placement set up on the workers (prepare)
        self._booting = False  # launched, their ready replies not yet read
        _POOLS.add(self)

    # -------------------------------------------------------------- lifecycle
    @property
    def alive(self) -> bool:
        return bool(self._procs) and all(p.is_alive() for p in self._procs)

    def start(self) -> None:
        """Have every worker running and ready (:meth:`launch` them, if not yet, and wait for them)."""
        if self.alive and not self._booting:
            return
        if not self.alive:
            self.launch()
        self._gather(timeout=max(self.timeout, 60.0))
        self._booting, self._loaded = False, False

    def launch(self) -> None:
        """Start the worker processes without waiting for them to be ready (:meth:`start` waits): they boot
        (:func:`process_context`: the first pool of a process waits for torch's import once) while the caller
        captures and places."""
        if self.alive:
            return
        self.close()
        if any(d.startswith("cuda") for d in self.devices):  # pragma: no cover - no GPU in CI
            import torch

            n = torch.cuda.device_count() if torch.cuda.is_available() else 0
            for d in self.devices:
                if d.startswith("cuda") and int(d.split(":")[1]) >= n:
                    raise ExecutionError(f"device {d!r} is not on this machine ({n} CUDA devices)")
        ctx = process_context()
        env, driver = dict(os.environ), os.getpid()
        with _main_not_imported():
            for k, (dev, tdev) in enumerate(zip(self.cluster.devices, self.devices)):
                parent, child = ctx.Pipe()
                target, args = self._process(k, child)
                p = ctx.Process(target=in_environment, args=(env, driver, target, *args), daemon=True,
                                name=f"autoplace-{dev.name}")
                p.start()
                child.close()
                self._procs.append(p)
                self._conns.append(parent)
        self._booting = True

    def close(self, now: bool = False) -> None:
        """Stop every worker: ask, then terminate, then kill; always reaps the processes. ``now``: terminate
        at once (workers that hold nothing worth an orderly exit: never set up, or still booting)."""
        for c in self._conns:
            try:
                c.send(("exit",))
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + (0.0 if now else 2.0)
        for p in self._procs:
            p.join(max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                p.terminate()
                p.join(1.0)
            if p.is_alive():  # pragma: no cover
                p.kill()
                p.join(1.0)
        for c in self._conns:
            c.close()
        self._procs, self._conns, self._loaded, self._prepared, self._booting = [], [], False, None, False

    def __enter__(self) -> ProcessPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs]

    # -------------------------------------------------------------- messaging
    def _gather(self, *, timeout: float | None = None, which: list[int] | None = None) -> list:
        """Wait for one reply from each worker in ``which``; raise WorkerFailed on error/death/timeout."""

        which = list(range(len(self._conns))) if which is None else which
        replies: dict[int, tuple] = {}
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while len(replies) < len(which):
            left = deadline - time.monotonic()
            if left <= 0:
                slow = [self.cluster.devices[k].name for k in which if k not in replies]
                raise WorkerFailed(f"timeout: {', '.join(slow)} did not finish within "
                                    f"{self.timeout if timeout is None else timeout:g} s")
            objs = {}
            for k in which:
                if k not in replies:
                    objs[self._conns[k]] = k
                    objs[self._procs[k].sentinel] = k
            for obj in wait(list(objs), timeout=left):
                k = objs[obj]
                if k in replies:
                    continue
                if not self._conns[k].poll():  # no reply waiting: the sentinel fired, the worker is gone
                    raise WorkerFailed(self._died(k))
                try:
                    msg = self._conns[k].recv()
                except (EOFError, OSError):
                    raise WorkerFailed(f"worker {self.cluster.devices[k].name} died") from None
                if msg[0] == "oom":
                    raise WorkerFailed(f"out of memory: {msg[1]}")
                if msg[0] == "error":
                    raise WorkerFailed(msg[1])
                replies[k] = msg
        return [replies[k] for k in which]

    def _send(self, k: int, msg) -> None:
        """Send ``msg`` to worker ``k``; a worker that died between messages is a failure, not a crash."""
        try:
            self._conns[k].send(msg)
        except (OSError, ValueError):  # BrokenPipeError, a closed connection
            raise WorkerFailed(self._died(k)) from None

    def _died(self, k: int) -> str:
        """``worker <device> died (signal 9)``: worker ``k``'s death, with its exit code or signal."""
        self._procs[k].join(0.5)
        code = self._procs[k].exitcode
        how = f" (signal {-code})" if code is not None and code < 0 else \
            f" (exit code {code})" if code is not None else ""
        return f"worker {self.cluster.devices[k].name} died{how}"

    def _send_all(self, msg, which: list[int] | None = None) -> None:
        for k in (range(len(self._conns)) if which is None else which):
            self._send(k, msg)

    def post(self, device: int, fn, *args) -> None:
        """Start ``fn(runtime, *args)`` in worker ``device`` without waiting for it (collect its reply with
        :meth:`call`'s ``_gather``, as the profiler's background load and link test do)."""
        self.start()
        self._send(device, ("call", fn, *args))

    def call(self, device: int, fn, *args, timeout: float | None = None):
        """Run ``fn(runtime, *args)`` in worker ``device`` (a picklable module-level function)."""
        self.post(device, fn, *args)
        return self._gather(which=[device], timeout=timeout)[0][1]

    def program_of(self, graph: Graph) -> Program:
        """``graph`` decoded (once per graph); decoding errors are raised here, in the caller."""
        if self._program is None or self._program.graph is not graph:
            self._program = Program(graph)
            self._loaded = False
        return self._program

    def load(self, graph: Graph) -> Program:
        """Send ``graph`` to the workers (once), decoding it first: a graph that cannot run starts nothing."""
        self.program_of(graph)
        self.start()
        if not self._loaded:
            self._send_all(("load", graph))
            self._gather()
            self._loaded = True
        return self._program

    # -------------------------------------------------------------- running a placement
    def prepare(self, graph: Graph, placement: Placement, *, seed: int = 0,
                values: dict[str, Any] | None = None) -> None:
        """Set ``placement`` up on the workers: each device's part of the program, the shared-memory slots of
        its transfers, and its placeholders — ``values`` (op name -> tensor) where given, else synthetic
        from ``seed``. Then :meth:`step` runs steps, :meth:`assign` feeds new inputs, :meth:`fetch` reads
        values back. Raises ``WorkerFailed`` (a failing run) as :meth:`step` does."""
        cluster = self.cluster
        if self.runtime != Runtime.DISTRIBUTED and any(op.type in COLLECTIVES for op in graph.ops):
            raise ExecutionError(f"graph {graph.name!r} synchronises replicas with collectives, which run over "
                                 "torch.distributed: run it on the distributed runtime (runtime='distributed', "
                                 "--runtime distributed)")
        assignment = placement.to_array(graph, cluster)
        priority = runnable_priorities(graph, assignment, placement, cluster.device_names)
        program = self.load(graph)
        index = {op.name: i for i, op in enumerate(graph.ops)}
        by_index = {index[n]: v for n, v in (values or {}).items()}
        plans = plan_all(program, assignment, cluster.n_devices, priority)
        transfers, total = transfer_layout(program, plans)
        keep = {r.op for r in program.outputs} | {r.op for r in program.final_versions.values()}
        used = [k for k, plan in enumerate(plans) if plan.ops]  # idle devices take no part
        buffers = self._exchange_buffers(transfers, total, used)
        self._prepared = None
        for k in used:
            mine = {i: v for i, v in by_index.items() if int(assignment[i]) == k}
            self._send(k, ("setup", plans[k], transfers, seed, float(cluster.devices[k].memory_bytes), keep,
                           mine, *buffers))
        self._gather(which=used)
        self._prepared = {"program": program, "assignment": assignment, "plans": plans, "transfers": transfers,
                          "used": used, "index": index, "steps": 0, "buffers": buffers}

    def step(self, profile: bool = False) -> list[tuple]:
        """One step of the prepared placement on every device taking part: each device's reply
        ``(start, end, peak bytes, busy seconds, op times, exchange counters)``."""
        prep = self._prepared
        if prep is None:
            raise ExecutionError("no placement is prepared on this worker pool")
        self._send_all(("step", prep["steps"], profile), which=prep["used"])
        prep["steps"] += 1
        return [msg[1:] for msg in self._gather(which=prep["used"])]

    def assign(self, values: dict[str, Any]) -> None:
        """New values (op name -> tensor) for placeholders of the prepared placement — the next batch."""
        prep = self._prepared
        if prep is None:
            raise ExecutionError("no placement is prepared on this worker pool")
        self._send_by_device("assign", {prep["index"][name]: v for name, v in values.items()})

    def _send_by_device(self, cmd: str, values: dict[int, Any]) -> None:
        """``(cmd, {op index: value})`` to each device holding some of the ops (those of its own), answered."""
        by_dev: dict[int, dict[int, Any]] = {}
        for i, v in values.items():
            by_dev.setdefault(int(self._prepared["assignment"][i]), {})[i] = v
        for k, vals in by_dev.items():
            self._send(k, (cmd, vals))
        self._gather(which=list(by_dev))

    def draw_random(self) -> None:
        """Make the next step's random draws here, from this process's generator, in program order (eager's
        draws: :meth:`Program.draw`), and give each device those of its random ops."""
        prep = self._prepared
        if prep is None:
            raise ExecutionError("no placement is prepared on this worker pool")
        program = prep["program"]
        self._send_by_device("draws", {i: program.draw(i) for i in program.random})

    def fetch(self, names: list[str] | None = None) -> dict[str, Any]:
        """Values of the prepared placement after its last step: by name the program's outputs
        (``output0``: the loss) and every placeholder's latest value (parameters, buffers, optimizer state);
        all of them when ``names`` is None."""
        prep = self._prepared
        if prep is None:
            raise ExecutionError("no placement is prepared on this worker pool")
        return self._fetch(prep["program"], prep["assignment"], names)

    def run(self, graph: Graph, placement: Placement, *, steps: int = DEFAULT_STEPS, seed: int = 0,
            fetch: bool = False, profile: bool = False) -> MeasuredResult:
        """Run ``steps`` training steps of ``placement``; step time = mean of all steps but the first."""
        cluster = self.cluster
        names = tuple(d.name for d in cluster.devices)
        capacity = np.array([float(d.memory_bytes) for d in cluster.devices])
        try:
            self.prepare(graph, placement, seed=seed)
            prep = self._prepared
            plans, used = prep["plans"], prep["used"]
            starts, ends = np.full((steps, len(plans)), np.inf), np.full((steps, len(plans)), -np.inf)
            peak = np.zeros(len(plans))
            busy = np.zeros(len(plans))
            op_times: list[dict] = []
            exchange = np.zeros((len(plans), 7))
            for s in range(steps):
                for k, (t0, t1, pk, b, times, xfer) in zip(used, self.step(profile)):
                    starts[s, k], ends[s, k] = t0, t1
                    if s > 0 or steps == 1:
                        exchange[k] += xfer
                    peak[k] = max(peak[k], pk)
                    if s > 0 or steps == 1:
                        busy[k] += b
                    if times:
                        op_times.append(times)
            per_step = ends.max(axis=1) - starts.min(axis=1)
            measured = per_step[1:] if steps > 1 else per_step
            outputs = self.fetch() if fetch else None
            if profile:
                outputs = {"op_times": op_times}
            transfers = prep["transfers"]
            return MeasuredResult(float(measured.mean()), names, peak, capacity, tuple(float(x) for x in per_step),
                                  busy / max(1, len(measured)), len(transfers),
                                  int(sum(slot_bytes(t) for t in transfers)), None, outputs,
                                  exchange / max(1, len(measured)))
        except WorkerFailed as e:
            self.close()
            return MeasuredResult(float("inf"), names, np.zeros(len(names)), capacity, error=str(e))
        except KeyboardInterrupt:
            self.close()
            raise

    def _fetch(self, program: Program, assignment: np.ndarray, names: list[str] | None = None) -> dict[str, Any]:
        wanted: dict[str, TRef] = {f"output{j}": r for j, r in enumerate(program.outputs)}
        wanted.update(program.final_versions)
        if names is not None:
            unknown = [n for n in names if n not in wanted]
            if unknown:
                raise ExecutionError(f"no output or state named {unknown[0]!r} in graph {program.graph.name!r}")
            wanted = {n: wanted[n] for n in names}
        by_dev: dict[int, list[tuple[str, TRef]]] = {}
        for name, r in wanted.items():
            by_dev.setdefault(int(assignment[r.op]), []).append((name, r))
        out: dict[str, Any] = {}
        for d, items in by_dev.items():
            self._send(d, ("fetch", [r for _, r in items]))
            (msg,) = self._gather(which=[d])
            out.update({name: v for (name, _), v in zip(items, msg[1])})
        return out

    # -------------------------------------------------------------- each back-end's own
    def _process(self, k: int, conn) -> tuple:
        """``(target, args)`` of device ``k``'s worker process, talking to the pool over ``conn``."""
        raise NotImplementedError

    def _exchange_buffers(self, transfers: list[tuple], total: int, used: list[int]) -> tuple:
        """What the workers exchange tensors through, sent with each one's set-up (``transfers`` as
        :func:`transfer_layout` lists them, ``total`` bytes of slots; ``used``: the devices taking part)."""
        raise NotImplementedError


def slot_bytes(t) -> int:
    import torch

    return int(np.prod(t[4])) * getattr(torch, t[5]).itemsize


def transfer_layout(program: Program, plans) -> tuple[list[tuple], int]:
    """One shared-memory slot per (tensor, destination): (ref, src, dst, offset, shape, dtype)."""
    g = program.graph
    out = []
    off = 0
    for p in plans:
        for r, src in sorted(p.recv.items(), key=lambda x: (x[0].op, x[0].k or 0)):
            spec = g.ops[r.op].outputs[r.k or 0]
            t = (r, src, p.device, off, tuple(spec.shape), spec.dtype)
            out.append(t)
            off += (slot_bytes(t) + _ALIGN - 1) // _ALIGN * _ALIGN
    return out, max(off, _ALIGN)
