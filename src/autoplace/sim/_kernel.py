"""Numba kernels of the discrete-event simulator (the hot path; see docs/algorithms.md#simulator).

Events, processed in ``(time, kind, id)`` order so that every run is deterministic:

* ``FINISH(op)``   (kind 0) an op ends: its device slot frees, its inputs' buffers may be released, and
  each of its tensors is delivered — to local consumers at once, to each other consuming device by one
  transfer on the link ``src -> dst`` (Send/Recv; sent once per destination device). Links are FIFO:
  a transfer starts at ``max(tensor ready, link free)`` and occupies the link for
  ``latency + bytes / bandwidth``. Transfers do not use the devices' compute slots (DMA).
* ``XFER(x)``      (kind 1) a transfer lands: the received copy is allocated on the destination and the
  source copy is released if nothing else needs it.
* ``DISPATCH(d)``  (kind 2) device ``d`` starts ready ops while it has a free slot (``concurrency``),
  taking the one with the earliest ready time, ties by release order (the order in which ops had their
  last input resolved; sources in topological order). Dispatch runs after all finishes and arrivals of
  the same instant. Ops ready at the instant they are released wait in a per-device FIFO (already in
  that order), ops waiting for a later arrival in a per-device heap.

Memory: parameters are resident all step; an op's outputs are allocated when it starts; a tensor's
buffer is released after the last consumer on that device finishes (the source copy also waits for its
outgoing transfers); outputs nobody reads are released when their op finishes.
"""

from __future__ import annotations

import numpy as np
from numba import njit

FINISH = 0
XFER = 1
DISPATCH = 2


@njit(cache=True, inline="always")
def _heap_push(ht, hk, base, size, t, k):
    """Push ``(t, k)`` onto the binary min-heap stored in ``ht/hk[base:base+size]``; return new size."""
    i = size
    while i > 0:
        parent = (i - 1) >> 1
        pt = ht[base + parent]
        if pt < t or (pt == t and hk[base + parent] <= k):
            break
        ht[base + i] = pt
        hk[base + i] = hk[base + parent]
        i = parent
    ht[base + i] = t
    hk[base + i] = k
    return size + 1


@njit(cache=True, inline="always")
def _heap_pop(ht, hk, base, size):
    """Remove the top of the heap (read it first from ``ht/hk[base]``); return the new size."""
    size -= 1
    if size == 0:
        return 0
    t = ht[base + size]
    k = hk[base + size]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= size:
            break
        if c + 1 < size:
            t1 = ht[base + c + 1]
            t0 = ht[base + c]
            if t1 < t0 or (t1 == t0 and hk[base + c + 1] < hk[base + c]):
                c += 1
        tc = ht[base + c]
        if tc < t or (tc == t and hk[base + c] < k):
            ht[base + i] = tc
            hk[base + i] = hk[base + c]
            i = c
        else:
            break
    ht[base + i] = t
    hk[base + i] = k
    return size


@njit(cache=True, inline="always")
def _enqueue(c, dc, r, t, seq, qbase, qt, qk, qsize, ft, fs, ftail, seq_op):
    """Release op ``c`` on device ``dc``, ready at ``r >= t``: the FIFO if ``r == t``, else the heap."""
    b0 = qbase[dc]
    seq_op[seq] = c
    if r <= t:
        k = b0 + ftail[dc]
        ftail[dc] += 1
        ft[k] = r
        fs[k] = seq
    else:
        qsize[dc] = _heap_push(qt, qk, b0, qsize[dc], r, seq)


@njit(cache=True, inline="always")
def _dispatch(d, t, optime, out_alloc_total, qt, qk, qbase, qsize, ft, fs, fhead, ftail, seq_op, busy,
              concurrency, pend, start, finish, busy_time, mem, peak, et, ek, esize, KB):
    """Start ready ops on device ``d`` at time ``t`` (earliest ready first, ties by release order) while it
    has a free slot; keep a DISPATCH pending for the earliest op that becomes ready later. Returns the
    event heap's size."""
    b0 = qbase[d]
    while busy[d] < concurrency[d]:
        fh = b0 + fhead[d]
        from_fifo = 0
        if fhead[d] < ftail[d]:
            from_fifo = 1
            if qsize[d] > 0 and (qt[b0] < ft[fh] or (qt[b0] == ft[fh] and qk[b0] < fs[fh])):
                from_fifo = 0
        elif qsize[d] == 0 or qt[b0] > t:
            break
        if from_fifo == 1:
            c = seq_op[fs[fh]]
            fhead[d] += 1
        else:
            c = seq_op[qk[b0]]
            qsize[d] = _heap_pop(qt, qk, b0, qsize[d])
        dt = optime[c, d]
        start[c] = t
        finish[c] = t + dt
        busy[d] += 1
        busy_time[d] += dt
        mem[d] += out_alloc_total[c]
        if mem[d] > peak[d]:
            peak[d] = mem[d]
        esize = _heap_push(et, ek, 0, esize, t + dt, FINISH * KB + c)
    if busy[d] < concurrency[d] and qsize[d] > 0 and qt[b0] < pend[d]:
        esize = _heap_push(et, ek, 0, esize, qt[b0], DISPATCH * KB + d)
        pend[d] = qt[b0]
    return esize


@njit(cache=True)
def simulate_one(dev, optime, order, tensor_src, tensor_bytes, tensor_alloc, op_tensor_ptr, tensor_pair_ptr,
                 pair_op, pair_tensor, in_ptr, in_pair, out_alloc_total, unconsumed_alloc, param_bytes,
                 bandwidth, latency, concurrency,
                 start, finish, busy_time, peak, link_time, link_bytes,
                 xf_tensor, xf_src, xf_dst, xf_start, xf_end):
    """Simulate one placement ``dev`` (op -> device index). Fills the output arrays in place.

    Returns ``(step_time, n_transfers)``. ``peak``, ``busy_time``, ``link_time`` and ``link_bytes``
    must be zeroed by the caller; ``xf_*`` need room for one transfer per (tensor, consumer) pair.
    """
    n = dev.shape[0]
    D = concurrency.shape[0]
    T = tensor_src.shape[0]
    P = pair_op.shape[0]
    KB = np.int64(1) << 40  # event key = kind * KB + id, ordered by (time, kind, id)

    # per-device ready queues share one array, device d owning qbase[d]:qbase[d+1]
    qbase = np.zeros(D + 1, np.int64)
    for i in range(n):
        qbase[dev[i] + 1] += 1
    for d in range(D):
        qbase[d + 1] += qbase[d]
    qsize = np.zeros(D, np.int64)
    qt = np.empty(n, np.float64)
    qk = np.empty(n, np.int64)
    ft = np.empty(n, np.float64)
    fs = np.empty(n, np.int64)
    fhead = np.zeros(D, np.int64)
    ftail = np.zeros(D, np.int64)
    seq_op = np.empty(n, np.int64)
    seq = 0

    cap = 2 * n + P + D + 1
    et = np.empty(cap, np.float64)
    ek = np.empty(cap, np.int64)
    esize = 0

    cnt = np.empty(n, np.int64)
    ready = np.zeros(n, np.float64)
    busy = np.zeros(D, np.int64)
    pend = np.full(D, np.inf)
    ref_src = np.zeros(T, np.int64)
    ref_x = np.zeros(P, np.int64)
    pair_copy = np.empty(P, np.int64)
    stamp = np.full(D, -1, np.int64)
    xid_of = np.zeros(D, np.int64)
    link_free = np.zeros((D, D), np.float64)
    mem = np.zeros(D, np.int64)

    for i in range(n):
        mem[dev[i]] += param_bytes[i]
    for d in range(D):
        peak[d] = mem[d]
    for i in range(n):
        cnt[i] = in_ptr[i + 1] - in_ptr[i]
    for j in range(n):  # sources, in topological order
        i = order[j]
        if cnt[i] == 0:
            _enqueue(i, dev[i], 0.0, 0.0, seq, qbase, qt, qk, qsize, ft, fs, ftail, seq_op)
            seq += 1
    for d in range(D):
        if qsize[d] > 0 or fhead[d] < ftail[d]:
            esize = _heap_push(et, ek, 0, esize, 0.0, DISPATCH * KB + d)
            pend[d] = 0.0

    makespan = 0.0
    nx = 0
    while esize > 0:
        t = et[0]
        key = ek[0]
        esize = _heap_pop(et, ek, 0, esize)
        kind = key >> 40
        ident = key & (KB - 1)
        if kind == FINISH:
            i = ident
            d = dev[i]
            busy[d] -= 1
            if t > makespan:
                makespan = t
            # release the input buffers this op was holding
            for q in range(in_ptr[i], in_ptr[i + 1]):
                p = in_pair[q]
                x = pair_copy[p]
                if x < 0:
                    tt = pair_tensor[p]
                    ref_src[tt] -= 1
                    if ref_src[tt] == 0:
                        mem[d] -= tensor_alloc[tt]
                else:
                    ref_x[x] -= 1
                    if ref_x[x] == 0:
                        mem[d] -= tensor_bytes[xf_tensor[x]]
            mem[d] -= unconsumed_alloc[i]
            # deliver each output tensor: locally at once, remotely once per destination device
            for tt in range(op_tensor_ptr[i], op_tensor_ptr[i + 1]):
                b = tensor_bytes[tt]
                for p in range(tensor_pair_ptr[tt], tensor_pair_ptr[tt + 1]):
                    c = pair_op[p]
                    dc = dev[c]
                    if dc == d:
                        pair_copy[p] = -1
                        ref_src[tt] += 1
                        arrival = t
                    else:
                        if stamp[dc] != tt:
                            stamp[dc] = tt
                            xs = t if t > link_free[d, dc] else link_free[d, dc]
                            xe = xs + latency[d, dc] + b / bandwidth[d, dc]
                            link_free[d, dc] = xe
                            link_time[d, dc] += xe - xs
                            link_bytes[d, dc] += b
                            xf_tensor[nx] = tt
                            xf_src[nx] = d
                            xf_dst[nx] = dc
                            xf_start[nx] = xs
                            xf_end[nx] = xe
                            ref_src[tt] += 1
                            xid_of[dc] = nx
                            esize = _heap_push(et, ek, 0, esize, xe, XFER * KB + nx)
                            nx += 1
                        x = xid_of[dc]
                        ref_x[x] += 1
                        pair_copy[p] = x
                        arrival = xf_end[x]
                    if arrival > ready[c]:
                        ready[c] = arrival
                    cnt[c] -= 1
                    if cnt[c] == 0:
                        _enqueue(c, dc, ready[c], t, seq, qbase, qt, qk, qsize, ft, fs, ftail, seq_op)
                        seq += 1
                        # device d itself is dispatched below, once, after all deliveries
                        if dc != d and busy[dc] < concurrency[dc] and ready[c] < pend[dc]:
                            esize = _heap_push(et, ek, 0, esize, ready[c], DISPATCH * KB + dc)
                            pend[dc] = ready[c]
            if qsize[d] > 0 or fhead[d] < ftail[d]:
                if esize == 0 or et[0] > t:
                    # nothing else happens at this instant: dispatch now instead of via an event
                    esize = _dispatch(d, t, optime, out_alloc_total, qt, qk, qbase, qsize, ft, fs, fhead, ftail,
                                      seq_op, busy, concurrency, pend, start, finish, busy_time, mem, peak, et,
                                      ek, esize, KB)
                elif t < pend[d]:
                    esize = _heap_push(et, ek, 0, esize, t, DISPATCH * KB + d)
                    pend[d] = t
        elif kind == XFER:
            x = ident
            tt = xf_tensor[x]
            dc = xf_dst[x]
            mem[dc] += tensor_bytes[tt]
            if mem[dc] > peak[dc]:
                peak[dc] = mem[dc]
            ref_src[tt] -= 1
            if ref_src[tt] == 0:
                mem[xf_src[x]] -= tensor_alloc[tt]
        else:
            d = ident
            if pend[d] <= t:
                pend[d] = np.inf
            esize = _dispatch(d, t, optime, out_alloc_total, qt, qk, qbase, qsize, ft, fs, fhead, ftail, seq_op,
                              busy, concurrency, pend, start, finish, busy_time, mem, peak, et, ek, esize, KB)
    return makespan, nx


@njit(cache=True)
def longest_path(order, in_ptr, in_pair, pair_tensor, tensor_src, weight):
    """Longest node-weighted path through the DAG (the critical path with free transfers)."""
    n = order.shape[0]
    done = np.zeros(n, np.float64)
    best = 0.0
    for j in range(n):
        i = order[j]
        s = 0.0
        for q in range(in_ptr[i], in_ptr[i + 1]):
            p = tensor_src[pair_tensor[in_pair[q]]]
            if done[p] > s:
                s = done[p]
        done[i] = s + weight[i]
        if done[i] > best:
            best = done[i]
    return best
