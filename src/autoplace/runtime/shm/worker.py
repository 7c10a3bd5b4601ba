"""The shared-memory back-end's worker: a process per device, exchanging tensors through one shared-memory
buffer the pool lays out (see :mod:`autoplace.runtime.shm.pool`, the driver's side). A send is a copy into
the tensor's slot followed by a store to the slot's flag; the receiver polls the flags of the tensors it
still waits for and reads the slot in place."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import numpy as np

import autoplace.runtime.device as device
from autoplace.runtime.device import DeviceRuntime, die_with_parent, serve_messages
from autoplace.runtime.plan import plan_device
from autoplace.runtime.program import Program, TRef

__all__ = ["ShmRuntime", "standalone", "worker_main"]


class ShmRuntime(DeviceRuntime):
    """A device's worker whose exchange is a shared-memory buffer the pool lays out: a slot per transfer,
    its flag (the step that last filled it), its layout and send time."""

    def _exchange_setup(self, transfers, shm, flags, layouts) -> None:
        """The shared-memory exchange: a slot per transfer in ``shm``, its flag (the step that filled it)
        in ``flags``, its layout and send time in ``layouts``."""
        torch = self.torch
        self.shm = shm
        self.exchange_ptr = shm.untyped_storage().data_ptr() if shm.numel() else -1
        self.flags = flags.numpy()
        self.layouts = layouts[:, :8].numpy()
        self.stamps = layouts[:, 8].view(torch.float64).numpy()
        self.slots: dict[int, Any] = {}
        for tid, (ref, src, dst, off, shape, dtype) in enumerate(transfers):
            if src == self.plan.device or dst == self.plan.device:
                dt = getattr(torch, dtype)
                n = int(np.prod(shape)) * dt.itemsize
                self.slots[tid] = (shm[off:off + n].view(dt), tuple(shape))

    def _begin_step(self, step_id: int) -> float:
        """Start a step's exchange; returns the step's start time."""
        self._wait_tids = np.array([tid for tid, _ in self.recv_tid], dtype=np.int64)
        self._wait_refs = dict(self.recv_tid)
        return time.perf_counter()

    def _end_step(self) -> float:
        """Finish a step's exchange (its device's work done); returns the step's end time."""
        if self.device.startswith("cuda"):  # pragma: no cover
            self.torch.cuda.synchronize()
        return time.perf_counter()

    def _send(self, sends: list[tuple[TRef, list[int]]], get, step_id: int) -> None:
        """Send an op's outputs (``(tensor, transfer ids)``): copy each into its slots, raise their flags."""
        pc = time.perf_counter
        xc = self._counters
        for ref, tids in sends:
            v = get(ref)
            for tid in tids:
                self._copy_in(tid, v)
                self.stamps[tid] = pc()
                self.flags[tid] = step_id
                xc[0] += 1
                xc[1] += v.numel() * v.element_size()

    def _arrivals(self, step_id: int, idle_since: float) -> list:
        """The awaited tensors that have arrived, ``(ref, value)`` each: the flags of every tensor still
        awaited polled at once (vectorised: a scan in Python would add its own length to every arrival's
        latency). An arrival raised while the device was already waiting (since ``idle_since``) adds its
        delay to the latency counters."""
        wait_tids = self._wait_tids
        if not len(wait_tids):
            return []
        hits = np.flatnonzero(self.flags[wait_tids] == step_id)
        if not len(hits):
            return []
        tr = self._seen_at = time.perf_counter()
        xc = self._counters
        out = []
        for h in hits:
            tid = int(wait_tids[h])
            if self.stamps[tid] >= idle_since:  # raised while we were already waiting: latency
                xc[5] += tr - self.stamps[tid]
                xc[6] += 1
            out.append((self._wait_refs[tid], self._receive(tid)))
        self._wait_tids = np.delete(wait_tids, hits)
        return out

    def _idle(self, spins: int) -> None:
        """Nothing to run and nothing arrived: spin, then back off to short sleeps once the wait is no
        longer short (a spinning core slows its neighbour: shared caches, SMT siblings on the host)."""
        if spins > device.SPIN_POLLS:
            time.sleep(device.POLL_SLEEP_S)
            if spins % 1000 == 0 and device.driver_gone():
                os._exit(1)

    def _copy_in(self, tid: int, v) -> None:
        """Copy ``v`` into its slot. A permuted dense tensor (a transposed weight) is sent in its memory
        order and the permutation with it, so the copy is a memcpy and the receiver gets the same strides."""
        flat, shape = self.slots[tid]
        lay = self.layouts[tid]
        if v.is_contiguous() or v.dim() > len(lay):
            lay[0] = -1
            flat.view(shape).copy_(v)
            return
        order = sorted(range(v.dim()), key=lambda d: (-v.stride(d), d))
        p = v.permute(order)
        if p.is_contiguous():
            lay[:v.dim()] = order
            flat.copy_(p.reshape(-1))
        else:
            lay[0] = -1
            flat.view(shape).copy_(v)

    def _receive(self, tid: int):
        flat, shape = self.slots[tid]
        lay = self.layouts[tid]
        if lay[0] < 0:
            v = flat.view(shape)
        else:
            order = [int(x) for x in lay[:len(shape)]]
            inverse = [order.index(d) for d in range(len(shape))]
            v = flat.view([shape[o] for o in order]).permute(inverse)
        return v.to(self.device) if self.device != "cpu" else v


def standalone(program: Program, *, compiled: bool = True, capacity: float = float("inf"),
               seed: int = 0) -> ShmRuntime:
    """A runtime that runs the whole of ``program`` on one CPU in this process, with no exchange: a
    worker's execution without its process (tests, the overhead benchmark)."""
    import torch


    rt = ShmRuntime("cpu:0", "cpu", None)
    rt.program, rt.compiled = program, compiled
    plan = plan_device(program, np.zeros(program.graph.n_ops, dtype=np.int64), 0)
    keep = {r.op for r in program.outputs} | {r.op for r in program.final_versions.values()}
    rt.setup(plan, [], seed, capacity, keep, None, torch.empty(0, dtype=torch.uint8),
             torch.full((1,), -1, dtype=torch.int64), torch.full((1, 9), -1, dtype=torch.int64))
    rt.finish_setup()
    return rt


def worker_main(conn, name: str, device: str, cores: list[int] | None) -> None:
    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and tears us down
    try:
        rt = ShmRuntime(name, device, cores)
        conn.send(("ready", os.getpid()))
    except Exception as e:  # noqa: BLE001
        conn.send(("error", f"{name}: cannot start: {type(e).__name__}: {e}"))
        return
    serve_messages(conn, rt, name)
    # told to exit (or the parent is gone): the worker holds nothing to save, and an interpreter that has
    # imported torch takes a second or two to tear down, which close() would wait for
    os._exit(0)
