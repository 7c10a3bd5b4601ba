"""Numba kernels of the discrete-event simulator (the hot path; see docs/algorithms.md#simulator).

Events, processed in ``(time, kind, id)`` order so that every run is deterministic:

* ``FINISH(op)``   (kind 0) an op ends: its device slot frees, each of its tensors is delivered — to local
  consumers at once, to each other consuming device by one transfer (Send/Recv; sent once per
  destination device) — and then its inputs' buffers may be released.
* ``XFER(x)``      (kind 1) a transfer lands: its consumers may become ready, and the source's buffer is
  released if nothing else needs it.
* ``DISPATCH(d)``  (kind 2) device ``d`` starts ready ops while it has a free slot (``concurrency``),
  taking the one with the earliest ready time, ties by release order (the order in which ops had their
  last input resolved; sources in topological order). Dispatch runs after all finishes and arrivals of
  the same instant. Ops ready at the instant they are released wait in a per-device FIFO (already in
  that order), ops waiting for a later arrival in a per-device heap.

Transfers: a transfer ``src -> dst`` needs the link, every segment on the pair's route, one of the
source's send engines and one of the destination's receive engines (a count of 0 sets no limit). It is
issued when its tensor is ready and starts when all of them are free, taking the engine that frees first;
every resource serves transfers in the order they are issued (a CUDA stream's order), so the start is
known at issue: ``start = max(ready, link free, segments free, engines free)``. It holds them all for
``overhead + bytes / bandwidth`` (the pair's ``transfer_bandwidth``: the least of its link's and
segments') and lands ``latency`` after that. Transfers do not use the devices' compute slots (DMA).

Memory: parameters are resident all step; an op's outputs are allocated when it starts; a received copy
when its transfer is issued. Outputs live in buffers: an op's own, or, for a view (``alias_pair``), the
buffer of the input it aliases. A buffer is released when its last reader on that device has finished
and its outgoing transfers have landed — readers of a view count as readers of its base. Outputs nobody
reads are released when their op finishes.
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


@njit(cache=True, inline="always")
def _buffer_bytes(b, T, tensor_alloc, tensor_bytes, xf_tensor):
    """Bytes of buffer ``b``: tensor ``b``'s own allocation (``b < T``) or received copy ``b - T``."""
    if b < T:
        return tensor_alloc[b]
    return tensor_bytes[xf_tensor[b - T]]


@njit(cache=True, inline="always")
def _first_free(free, base, cap):
    """Index of the engine among ``free[base:base+cap]`` that frees first (the lowest on ties)."""
    k = base
    for j in range(base + 1, base + cap):
        if free[j] < free[k]:
            k = j
    return k


@njit(cache=True)
def simulate_one(dev, optime, order, tensor_src, tensor_bytes, tensor_alloc, op_tensor_ptr, tensor_pair_ptr,
                 pair_op, pair_tensor, in_ptr, in_pair, out_alloc_total, unconsumed_alloc, param_bytes, alias_pair,
                 bandwidth, latency, overhead, route_ptr, route_seg, send_cap, recv_cap, concurrency,
                 start, finish, busy_time, peak, link_time, link_bytes, seg_time,
                 xf_tensor, xf_src, xf_dst, xf_start, xf_end, xf_land):
    """Simulate one placement ``dev`` (op -> device index). Fills the output arrays in place.

    Returns ``(step_time, n_transfers)``. ``peak``, ``busy_time``, ``link_time``, ``link_bytes`` and
    ``seg_time`` must be zeroed by the caller; ``xf_*`` need room for one transfer per (tensor, consumer)
    pair. ``bandwidth`` is the cluster's ``transfer_bandwidth``.
    """
    n = dev.shape[0]
    D = concurrency.shape[0]
    T = tensor_src.shape[0]
    P = pair_op.shape[0]
    S = seg_time.shape[0]
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
    ref = np.zeros(T + P, np.int64)       # readers and pending sends of each buffer (tensors, then copies)
    pair_buf = np.empty(P, np.int64)      # the buffer each (tensor, consumer) pair reads
    xf_buf = np.empty(P, np.int64)        # the buffer each transfer sends from
    stamp = np.full(D, -1, np.int64)
    xid_of = np.zeros(D, np.int64)
    link_free = np.zeros(D * D, np.float64)
    seg_free = np.zeros(S, np.float64)
    ES = max(1, send_cap.max())
    ER = max(1, recv_cap.max())
    send_free = np.zeros(D * ES, np.float64)
    recv_free = np.zeros(D * ER, np.float64)
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
            # a view's outputs live in the buffer of the input it aliases
            obuf = -1
            if alias_pair[i] >= 0:
                obuf = pair_buf[alias_pair[i]]
            # deliver each output tensor: locally at once, remotely once per destination device
            for tt in range(op_tensor_ptr[i], op_tensor_ptr[i + 1]):
                b = tensor_bytes[tt]
                buf = obuf if obuf >= 0 else tt
                for p in range(tensor_pair_ptr[tt], tensor_pair_ptr[tt + 1]):
                    c = pair_op[p]
                    dc = dev[c]
                    if dc == d:
                        pair_buf[p] = buf
                        ref[buf] += 1
                        arrival = t
                    else:
                        if stamp[dc] != tt:
                            stamp[dc] = tt
                            l = d * D + dc
                            xs = t if t > link_free[l] else link_free[l]
                            ks = -1
                            if send_cap[d] > 0:
                                ks = _first_free(send_free, d * ES, send_cap[d])
                                if send_free[ks] > xs:
                                    xs = send_free[ks]
                            kr = -1
                            if recv_cap[dc] > 0:
                                kr = _first_free(recv_free, dc * ER, recv_cap[dc])
                                if recv_free[kr] > xs:
                                    xs = recv_free[kr]
                            for r in range(route_ptr[l], route_ptr[l + 1]):
                                if seg_free[route_seg[r]] > xs:
                                    xs = seg_free[route_seg[r]]
                            occ = overhead[d, dc] + b / bandwidth[d, dc]
                            xe = xs + occ
                            link_free[l] = xe
                            if ks >= 0:
                                send_free[ks] = xe
                            if kr >= 0:
                                recv_free[kr] = xe
                            for r in range(route_ptr[l], route_ptr[l + 1]):
                                seg_free[route_seg[r]] = xe
                                seg_time[route_seg[r]] += occ
                            link_time[d, dc] += occ
                            link_bytes[d, dc] += b
                            xf_tensor[nx] = tt
                            xf_src[nx] = d
                            xf_dst[nx] = dc
                            xf_start[nx] = xs
                            xf_end[nx] = xe
                            xf_land[nx] = xe + latency[d, dc]
                            xf_buf[nx] = buf
                            ref[buf] += 1
                            # the received copy is allocated when the transfer is issued
                            mem[dc] += b
                            if mem[dc] > peak[dc]:
                                peak[dc] = mem[dc]
                            xid_of[dc] = nx
                            esize = _heap_push(et, ek, 0, esize, xf_land[nx], XFER * KB + nx)
                            nx += 1
                        x = xid_of[dc]
                        ref[T + x] += 1
                        pair_buf[p] = T + x
                        arrival = xf_land[x]
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
            # release the input buffers this op was holding (after delivery: a view's readers hold its base)
            for q in range(in_ptr[i], in_ptr[i + 1]):
                bq = pair_buf[in_pair[q]]
                ref[bq] -= 1
                if ref[bq] == 0:
                    mem[d] -= _buffer_bytes(bq, T, tensor_alloc, tensor_bytes, xf_tensor)
            mem[d] -= unconsumed_alloc[i]
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
            bq = xf_buf[x]
            ref[bq] -= 1
            if ref[bq] == 0:
                mem[xf_src[x]] -= _buffer_bytes(bq, T, tensor_alloc, tensor_bytes, xf_tensor)
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


@njit(cache=True)
def earliest_starts(order, in_ptr, in_pair, pair_tensor, tensor_src, weight, pair_delay):
    """Each op's earliest start when op ``i`` takes ``weight[i]`` and the input pair ``q`` arrives
    ``pair_delay[q]`` after its producer ends (longest path to the op, exclusive)."""
    n = order.shape[0]
    start = np.zeros(n, np.float64)
    for j in range(n):
        i = order[j]
        s = 0.0
        for q in range(in_ptr[i], in_ptr[i + 1]):
            p = tensor_src[pair_tensor[in_pair[q]]]
            a = start[p] + weight[p] + pair_delay[in_pair[q]]
            if a > s:
                s = a
        start[i] = s
    return start
