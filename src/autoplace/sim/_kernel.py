"""Numba kernels of the discrete-event simulator (the reference loop; see docs/algorithms.md#simulator).

Two kinds of device. A *synchronous* device (a CPU worker: ``launcher[d] == -1``) runs an op on its own
thread for the op's whole time, overhead included. An *asynchronous* device (a GPU) is driven by a host
thread, its *launcher* (several GPUs may share one): the launcher spends the op's launch cost
(``min(op_overhead_s, op time)``) and the device runs the rest, the kernel, later and in launch order.
Launches run ahead of the device until a synchronisation: a kernel whose output a synchronous device reads
(the launcher waits for it, then submits the copies out), or ``qdepth`` launched kernels not yet finished.

Events, processed in ``(time, kind, id)`` order so that every run is deterministic:

* ``FINISH(op)``   (0) an op (or kernel) ends: its slot frees; each output goes once to each other device
  that reads it (a transfer), and — on a synchronous device — to its local readers; its inputs' buffers
  may be released.
* ``LAUNCHED(op)`` (1) a launch ends: the kernel joins its device's queue; local readers may be launched.
* ``XEND(x)``      (2) a transfer that crosses no shared segment has moved its bytes.
* ``SEGEND(g)``    (3) the earliest end among transfers crossing shared segments (generation ``g``; an
  event of an older generation is stale and skipped).
* ``XLAND(x)``     (4) a transfer lands ``latency`` after its end (a data transfer with latency 0 lands within
  its end event; a control tensor always by this event).
* ``XQUEUE(x)``    (5) a transfer's submit overhead is over: it joins its copy queue.
* ``LFREE(h)``     (6) launcher ``h`` is done submitting copies.

Ops are released (their last input resolved) into a FIFO: their device's (synchronous) or their
launcher's (asynchronous); a device or launcher with a free slot takes the first released. A launcher
also takes copies into its devices from synchronous devices (it submits them), in release order with
its ops. Inputs resolve when their producer finishes (synchronous consumer, same device), is launched
(asynchronous consumer, same device: stream order keeps the kernels in order) or when their transfer
lands (another device).

Transfers: a data tensor goes once to each other device that reads it. Its copy is submitted — by the
source's launcher (after the producer's launch for a peer copy; after waiting for the kernel for a copy
to a synchronous device), by the destination's launcher (a copy from a synchronous device into an
asynchronous one), or after a plain delay (between synchronous devices) — for the link's ``overhead``,
and then joins one FIFO *copy queue*: the send engines of the source if it has any, else the receive
engines of the destination, else the link itself (one copy at a time). A transfer crossing shared
segments shares each of them equally with the transfers crossing it at the time; it moves at the least of
its link's bandwidth and its shares, recomputed whenever a transfer starts or ends on a segment. It lands
``latency`` after its last byte. A control tensor crossing devices takes no resource: it lands one
latency after its producer finishes.

Communication ops (``spos == COMM``: the steps of a collective, :mod:`autoplace.collectives`) are run by a
communication library on its own stream or thread (NCCL, gloo), beside the device's ops: released when their
inputs resolve — a local input from an asynchronous device when its kernel *finishes* (the library's stream
waits for it), not at its launch — they take no slot, no launch and no time, and deliver as a synchronous op
does; their transfers pay no submit overhead (the library copies inside its kernel) and join their copy queue
at once. They are dispatched from one FIFO (dispatch entry ``D + H``), kept in ``fq`` after the devices' ops.

Memory: parameters are resident all step; an op's outputs are allocated when it (its kernel) starts; a
received copy when its transfer is created (its producer's FINISH). Outputs live in buffers: an op's own, or, for a view
(``alias_pair``), the buffer of the input it aliases. A control tensor is a buffer of its own (of no
bytes). A buffer is released when its last reader on that device has finished and its outgoing transfers
have landed — readers of a view count as readers of its base. Outputs nobody reads are released when
their op finishes.

Arguments: :func:`simulate` takes the rows of placements and schedules, the op times and ``_args``'s four
named tuples (graph, cluster, timeline, per-row outputs), as the C loop takes its structs. The helpers
share two named tuples of the loop's state (:class:`_Ready`, :class:`_Transfers`) and are inlined into it
(``inline="always"``): called through numba's calling convention, a tuple of arrays costs more per call than
the work of a small helper.

Size: it is one event loop, kept line for line beside the C loop (``_csim.c``) that
must agree with it bit for bit; splitting it would split the side-by-side reading.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from autoplace.sim._args import COMM  # ``spos`` of a communication op

FINISH = 0
LAUNCHED = 1
XEND = 2
SEGEND = 3
XLAND = 4
XQUEUE = 5
LFREE = 6

# integer run state, one array: release counter, transfers issued, dirty entries, active shared
# transfers, event heap size, SEGEND generation, whether shares need recomputing, released communication ops
SEQ, NX, NDIRTY, NACT, ESIZE, GEN, RESHARE, NCOMM = 0, 1, 2, 3, 4, 5, 6, 7


# launcher states
FREE, BUSY, SYNC, DEPTH = 0, 1, 2, 3

KSHIFT = 40
KB = np.int64(1) << KSHIFT  # event key = kind * KB + id, ordered by (time, kind, id)


class _Ready(NamedTuple):
    """What releasing an op reads and writes: the placement, the schedule, the FIFOs and the dirty list."""

    dev: np.ndarray
    spos: np.ndarray
    launcher: np.ndarray
    cnt: np.ndarray       #: inputs each op still awaits
    fq: np.ndarray
    fbase: np.ndarray
    ftail: np.ndarray
    lq: np.ndarray
    lbase: np.ndarray
    ltail: np.ndarray
    oseq: np.ndarray
    sop: np.ndarray
    turn: np.ndarray
    held: np.ndarray
    ist: np.ndarray
    dirty: np.ndarray
    isdirty: np.ndarray


class _Transfers(NamedTuple):
    """What moving a tensor reads and writes: the graph's tensors and the cluster's links, the transfers'
    timeline, their copy queues, shared segments and rates, the row's link and segment times, and the event
    heap they push to."""

    n_tensors: int
    n_devices: int
    tensor_bytes: np.ndarray
    tensor_alloc: np.ndarray
    tensor_pair_ptr: np.ndarray
    pair_op: np.ndarray
    bandwidth: np.ndarray
    latency: np.ndarray
    route_ptr: np.ndarray
    route_seg: np.ndarray
    seg_bw: np.ndarray
    xf_tensor: np.ndarray
    xf_src: np.ndarray
    xf_dst: np.ndarray
    xf_start: np.ndarray
    xf_end: np.ndarray
    xf_land: np.ndarray
    link_time: np.ndarray
    seg_time: np.ndarray
    xq: np.ndarray
    xbuf: np.ndarray
    qnext: np.ndarray
    qh: np.ndarray
    qt: np.ndarray
    qcap: np.ndarray
    quse: np.ndarray
    nseg: np.ndarray
    sbusy: np.ndarray
    xrem: np.ndarray
    xrate: np.ndarray
    xtl: np.ndarray
    xendp: np.ndarray
    act: np.ndarray
    ist: np.ndarray
    et: np.ndarray
    ek: np.ndarray


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
def _push(et, ek, ist, t, kind, ident):
    ist[ESIZE] = _heap_push(et, ek, 0, ist[ESIZE], t, kind * KB + ident)


@njit(cache=True, inline="always")
def _mark(dirty, isdirty, ist, k):
    """Device ``k`` (``< D``) or launcher ``k - D`` may start work: dispatch it after this event."""
    if isdirty[k] == 0:
        isdirty[k] = 1
        dirty[ist[NDIRTY]] = k
        ist[NDIRTY] += 1


@njit(cache=True, inline="always")
def _release(c, rq):
    """Op ``c``'s last input has resolved. A communication op joins the communication queue (after the
    devices' FIFOs in ``fq``; dispatch entry ``D + H``). Under a schedule an op is held until its device's
    turn comes to it; else it joins its queue (:func:`_admit`)."""
    if rq.spos[c] == COMM:
        D = rq.fbase.shape[0] - 1
        rq.fq[rq.fbase[D] + rq.ist[NCOMM]] = c
        rq.ist[NCOMM] += 1
        _mark(rq.dirty, rq.isdirty, rq.ist, D + rq.lbase.shape[0] - 1)
        return
    if rq.spos[c] >= 0 and rq.spos[c] != rq.turn[rq.dev[c]]:
        rq.held[c] = 1
        return
    _admit(c, rq, True)


@njit(cache=True, inline="always")
def _admit(c, rq, mark):
    """Op ``c`` joins its launcher's FIFO (asynchronous device) or its device's; ``mark``: dispatch that
    queue after this event (not needed when it is being dispatched)."""
    dc = rq.dev[c]
    h = rq.launcher[dc]
    rq.oseq[c] = rq.ist[SEQ]
    rq.ist[SEQ] += 1
    if h >= 0:
        rq.lq[rq.lbase[h] + rq.ltail[h]] = c
        rq.ltail[h] += 1
        if mark:
            _mark(rq.dirty, rq.isdirty, rq.ist, rq.fbase.shape[0] - 1 + h)  # D + h: rq.fbase has D + 1 entries
    else:
        rq.fq[rq.fbase[dc] + rq.ftail[dc]] = c
        rq.ftail[dc] += 1
        if mark:
            _mark(rq.dirty, rq.isdirty, rq.ist, dc)


@njit(cache=True, inline="always")
def _next_turn(d, rq):
    """Device ``d`` has taken the op whose turn it was (started it, or its launcher launched it): the turn
    passes to the next op of its schedule, which joins the queue being dispatched if it was held."""
    rq.turn[d] += 1
    k = rq.fbase[d] + rq.turn[d]
    if k < rq.fbase[d + 1]:
        c = rq.sop[k]
        if rq.held[c] == 1:
            rq.held[c] = 0
            _admit(c, rq, False)


@njit(cache=True, inline="always")
def _buffer_bytes(b, xs):
    """Bytes of buffer ``b``: tensor ``b``'s own allocation (``b < T``) or received copy ``b - T``."""
    T = xs.n_tensors
    if b < T:
        return xs.tensor_alloc[b]
    return xs.tensor_bytes[xs.xf_tensor[b - T]]


@njit(cache=True)
def simulate(devs, spos, optime, graph, cluster, trace, rows):
    """Simulate each placement, a row of ``devs`` (op -> device index), under its schedule (the row of
    ``spos``): the batch :func:`simulate_one` runs a row of. ``optime[n, D]``; ``graph``, ``cluster``,
    ``trace`` and ``rows`` are ``_args``'s named tuples (``rows`` zeroed by the caller)."""
    for row in range(devs.shape[0]):
        simulate_one(row, devs[row], spos[row], optime, graph, cluster, trace, rows)


@njit(cache=True)
def simulate_one(row, dev, spos, optime, graph, cluster, trace, rows):
    """Simulate row ``row``: placement ``dev`` (op -> device index) under its schedule ``spos`` (each op's place
    in its device's order; -1 on a device the schedule leaves in ready order; :data:`COMM` for a
    communication op). Writes the timeline to ``trace`` and row ``row`` of ``rows``.
    """
    order, tensor_src, tensor_bytes = graph.order, graph.tensor_src, graph.tensor_bytes
    tensor_out, op_tensor_ptr, tensor_pair_ptr = graph.tensor_out, graph.op_tensor_ptr, graph.tensor_pair_ptr
    pair_op, pair_tensor, in_ptr, in_pair = graph.pair_op, graph.pair_tensor, graph.in_ptr, graph.in_pair
    out_alloc_total, unconsumed_alloc, param_bytes = graph.out_alloc_total, graph.unconsumed_alloc, graph.param_bytes
    alias_pair, op_group, group_launch = graph.alias_pair, graph.op_group, graph.group_launch
    latency, overhead, send_cap, recv_cap = cluster.latency, cluster.overhead, cluster.send_cap, cluster.recv_cap
    concurrency, launcher, launch_cost, qdepth = cluster.concurrency, cluster.launcher, cluster.launch_cost, \
        cluster.qdepth
    start, finish, lstart = trace.start, trace.finish, trace.lstart
    xf_tensor, xf_src, xf_dst = trace.xf_tensor, trace.xf_src, trace.xf_dst
    xf_start, xf_end, xf_land = trace.xf_start, trace.xf_end, trace.xf_land
    busy_time, host_time, peak = rows.busy_time[row], rows.host_time[row], rows.peak[row]
    link_time, link_bytes, seg_time = rows.link_time[row], rows.link_bytes[row], rows.seg_time[row]
    n = dev.shape[0]
    D = concurrency.shape[0]
    T = tensor_src.shape[0]
    P = pair_op.shape[0]
    S = seg_time.shape[0]
    H = cluster.n_launchers
    G = group_launch.shape[0] // D
    NQ = 2 * D + D * D  # copy queues: send engines of d, receive engines of d, link s * D + d

    ist = np.zeros(8, np.int64)
    # FIFOs: a device's (ops of a synchronous device; kernels of an asynchronous one) and a launcher's
    # (its devices' ops), each in one shared array at its base
    fbase = np.zeros(D + 1, np.int64)
    lbase = np.zeros(H + 1, np.int64)
    for i in range(n):
        if spos[i] == COMM:
            continue
        fbase[dev[i] + 1] += 1
        if launcher[dev[i]] >= 0:
            lbase[launcher[dev[i]] + 1] += 1
    for d in range(D):
        fbase[d + 1] += fbase[d]
    for h in range(H):
        lbase[h + 1] += lbase[h]
    fq = np.empty(n, np.int64)
    fhead = np.zeros(D, np.int64)
    ftail = np.zeros(D, np.int64)
    lq = np.empty(max(1, lbase[H]), np.int64)
    lhead = np.zeros(H, np.int64)
    ltail = np.zeros(H, np.int64)
    oseq = np.zeros(n, np.int64)
    # a schedule: each device takes its ops in the order sop[fbase[d]:fbase[d + 1]]; turn[d] indexes the op
    # whose turn it is, held[i] marks a released op waiting for its turn
    sop = np.empty(n, np.int64)
    turn = np.zeros(D, np.int64)
    held = np.zeros(n, np.int64)
    for i in range(n):
        if spos[i] >= 0:
            sop[fbase[dev[i]] + spos[i]] = i
    # dirty devices (k < D), launchers (D + h) and the communication queue (D + H), dispatched after each
    # event; _release finds the launchers' offset as fbase.shape[0] - 1 == D
    dirty = np.empty(D + H + 1, np.int64)
    isdirty = np.zeros(D + H + 1, np.int64)
    chead = 0  # the communication queue: fq[fbase[D] + chead:fbase[D] + ist[NCOMM]]

    cap = 3 * n + 6 * P + 2 * D + 2 * H + 8
    et = np.empty(cap, np.float64)
    ek = np.empty(cap, np.int64)

    cnt = np.empty(n, np.int64)
    lend = np.zeros(n, np.float64)   # when an asynchronous op's launch ended
    psum = np.zeros(n, np.float64)   # the launcher's time submitting its peer copies after that
    nfree = concurrency.copy()
    inflight = np.zeros(D, np.int64)  # launched kernels not yet finished
    lstate = np.zeros(H, np.int64)
    lwait = np.zeros(H, np.int64)     # the op a SYNC launcher waits for, the device a DEPTH one waits on
    shead = np.full(H, -1, np.int64)  # copies a launcher has to submit: a list through snext
    stail = np.full(H, -1, np.int64)
    gseen = np.zeros(max(1, G * D), np.int64)
    ref = np.zeros(T + P, np.int64)       # readers and pending sends of each buffer (tensors, then copies)
    pair_buf = np.empty(P, np.int64)      # the buffer each (tensor, consumer) pair reads
    stamp = np.full(D, -1, np.int64)      # the last tensor sent to each device (at FINISH)
    stamp2 = np.full(D, -1, np.int64)     # the same at LAUNCHED
    xid_of = np.zeros(D, np.int64)
    xbuf = np.empty(P, np.int64)          # each transfer's source buffer (-1: a control tensor)
    xq = np.empty(P, np.int64)            # its copy queue
    xsub = np.zeros(P, np.int64)          # 1: submitted by the destination's launcher
    xseq = np.zeros(P, np.int64)          # release number of a copy to submit
    snext = np.empty(P, np.int64)
    qnext = np.empty(P, np.int64)
    xrem = np.zeros(P, np.float64)        # bytes left, rate and when they were last brought up to date
    xrate = np.zeros(P, np.float64)
    xtl = np.zeros(P, np.float64)
    xendp = np.zeros(P, np.float64)       # predicted end of an active shared transfer
    act = np.empty(P, np.int64)           # active transfers that cross shared segments
    qcap = np.empty(NQ, np.int64)
    quse = np.zeros(NQ, np.int64)
    qh = np.full(NQ, -1, np.int64)
    qt = np.full(NQ, -1, np.int64)
    for d in range(D):
        qcap[d] = send_cap[d]
        qcap[D + d] = recv_cap[d]
    for l in range(D * D):
        qcap[2 * D + l] = 1
    nseg = np.zeros(max(1, S), np.int64)
    sbusy = np.zeros(max(1, S), np.float64)
    mem = np.zeros(D, np.int64)
    rq = _Ready(dev, spos, launcher, cnt, fq, fbase, ftail, lq, lbase, ltail, oseq, sop, turn, held, ist, dirty,
                isdirty)
    xs = _Transfers(T, D, tensor_bytes, graph.tensor_alloc, tensor_pair_ptr, pair_op, cluster.bandwidth, latency,
                    cluster.route_ptr, cluster.route_seg, cluster.seg_bw, xf_tensor, xf_src, xf_dst, xf_start, xf_end,
                    xf_land, link_time, seg_time, xq, xbuf, qnext, qh, qt, qcap, quse, nseg, sbusy, xrem, xrate, xtl,
                    xendp, act, ist, et, ek)

    for i in range(n):
        mem[dev[i]] += param_bytes[i]
    for d in range(D):
        peak[d] = mem[d]
    for i in range(n):
        cnt[i] = in_ptr[i + 1] - in_ptr[i]
    for j in range(n):  # sources, in topological order
        i = order[j]
        if cnt[i] == 0:
            _release(i, rq)

    makespan = 0.0
    t = 0.0
    first = True
    finished = 0
    while True:
        if not first:
            if ist[ESIZE] == 0:
                break
            t = et[0]
            key = ek[0]
            ist[ESIZE] = _heap_pop(et, ek, 0, ist[ESIZE])
            kind = key >> KSHIFT
            ident = key & (KB - 1)
            if kind == FINISH:
                i = ident
                d = dev[i]
                h = launcher[d]
                comm = spos[i] == COMM
                if comm:     # it took no slot; it delivers as a synchronous op does
                    h = -1
                else:
                    nfree[d] += 1
                finished += 1
                if t > makespan:
                    makespan = t
                if h >= 0:
                    inflight[d] -= 1
                    if lstate[h] == DEPTH and lwait[h] == d:
                        lstate[h] = FREE
                        _mark(dirty, isdirty, ist, D + h)
                obuf = -1
                if alias_pair[i] >= 0:
                    obuf = pair_buf[alias_pair[i]]
                cum_p = lend[i]   # the launcher's peer submits, in order
                hc = -1.0         # and its submits to synchronous devices, after the kernel
                for tt in range(op_tensor_ptr[i], op_tensor_ptr[i + 1]):
                    ctrl = tensor_out[tt] < 0
                    buf = tt if (ctrl or obuf < 0) else obuf
                    b = tensor_bytes[tt]
                    for p in range(tensor_pair_ptr[tt], tensor_pair_ptr[tt + 1]):
                        c = pair_op[p]
                        dc = dev[c]
                        if dc == d:
                            if h < 0 or spos[c] == COMM:  # a communication op waits for the kernel
                                if h < 0:                 # (an asynchronous source reserved it at LAUNCHED)
                                    pair_buf[p] = buf
                                    ref[buf] += 1
                                cnt[c] -= 1
                                if cnt[c] == 0:
                                    _release(c, rq)
                            continue
                        if stamp[dc] != tt:
                            stamp[dc] = tt
                            x = ist[NX]
                            ist[NX] += 1
                            xid_of[dc] = x
                            xf_tensor[x] = tt
                            xf_src[x] = d
                            xf_dst[x] = dc
                            ref[T + x] = 0
                            l = d * D + dc
                            if ctrl:
                                xbuf[x] = -1
                                xf_start[x] = t
                                xf_end[x] = t
                                xf_land[x] = t + latency[d, dc]
                                _push(et, ek, ist, xf_land[x], XLAND, x)
                            else:
                                xbuf[x] = buf
                                if h < 0:
                                    ref[buf] += 1   # an asynchronous source reserved it at LAUNCHED
                                link_bytes[d, dc] += b
                                mem[dc] += b        # the received copy is allocated when it is created
                                if mem[dc] > peak[dc]:
                                    peak[dc] = mem[dc]
                                if send_cap[d] > 0:
                                    xq[x] = d
                                elif recv_cap[dc] > 0:
                                    xq[x] = D + dc
                                else:
                                    xq[x] = 2 * D + l
                                ov = overhead[d, dc]
                                at = t  # when it joins its copy queue
                                if comm:
                                    pass    # the library moves it inside its kernel: nothing to submit
                                elif h >= 0:
                                    host_time[d] += ov
                                    if launcher[dc] >= 0:
                                        cum_p += ov
                                        if cum_p > at:
                                            at = cum_p
                                    else:
                                        if hc < 0.0:
                                            hc = lend[i] + psum[i]
                                            if hc < t:
                                                hc = t
                                        hc += ov
                                        at = hc
                                elif launcher[dc] >= 0:
                                    hd = launcher[dc]
                                    xseq[x] = ist[SEQ]
                                    ist[SEQ] += 1
                                    _append(snext, shead, stail, hd, x)
                                    _mark(dirty, isdirty, ist, D + hd)
                                    at = -1.0
                                else:
                                    at = t + ov
                                if at > t:
                                    _push(et, ek, ist, at, XQUEUE, x)
                                elif at == t:
                                    _join(x, t, xs)
                        x = xid_of[dc]
                        ref[T + x] += 1
                        pair_buf[p] = T + x
                if h >= 0 and lstate[h] == SYNC and lwait[h] == i:
                    if hc > t:
                        lstate[h] = BUSY
                        _push(et, ek, ist, hc, LFREE, h)
                    else:
                        lstate[h] = FREE
                        _mark(dirty, isdirty, ist, D + h)
                # release the input buffers this op was holding (after delivery: a view's readers hold its base)
                for q in range(in_ptr[i], in_ptr[i + 1]):
                    bq = pair_buf[in_pair[q]]
                    ref[bq] -= 1
                    if ref[bq] == 0:
                        mem[d] -= _buffer_bytes(bq, xs)
                mem[d] -= unconsumed_alloc[i]
                _mark(dirty, isdirty, ist, d)
            elif kind == LAUNCHED:
                i = ident
                d = dev[i]
                h = launcher[d]
                lend[i] = t
                obuf = -1
                if alias_pair[i] >= 0:
                    obuf = pair_buf[alias_pair[i]]
                ps = 0.0
                sync = False
                for tt in range(op_tensor_ptr[i], op_tensor_ptr[i + 1]):
                    ctrl = tensor_out[tt] < 0
                    buf = tt if (ctrl or obuf < 0) else obuf
                    for p in range(tensor_pair_ptr[tt], tensor_pair_ptr[tt + 1]):
                        c = pair_op[p]
                        dc = dev[c]
                        if dc == d:
                            pair_buf[p] = buf
                            ref[buf] += 1
                            if spos[c] != COMM:    # a communication op is released at FINISH (its buffer held)
                                cnt[c] -= 1
                                if cnt[c] == 0:
                                    _release(c, rq)
                        elif stamp2[dc] != tt:
                            stamp2[dc] = tt
                            if not ctrl:
                                ref[buf] += 1  # held for the transfer issued at FINISH
                                if launcher[dc] >= 0:
                                    ps += overhead[d, dc]
                                else:
                                    sync = True
                psum[i] = ps
                fq[fbase[d] + ftail[d]] = i
                ftail[d] += 1
                _mark(dirty, isdirty, ist, d)
                if sync:
                    lstate[h] = SYNC
                    lwait[h] = i
                elif ps > 0.0:
                    _push(et, ek, ist, t + ps, LFREE, h)
                else:
                    lstate[h] = FREE
                    _mark(dirty, isdirty, ist, D + h)
            elif kind == XEND:
                _end(ident, t, xs)
                if latency[xf_src[ident], xf_dst[ident]] == 0.0:
                    _land(ident, xs, rq, ref, mem)
            elif kind == SEGEND:
                if ident == ist[GEN]:
                    while True:  # every shared transfer due by now, lowest id first
                        best = -1
                        for k in range(ist[NACT]):
                            x = act[k]
                            if xendp[x] <= t and (best < 0 or x < act[best]):
                                best = k
                        if best < 0:
                            break
                        x = act[best]
                        ist[NACT] -= 1
                        act[best] = act[ist[NACT]]
                        _end(x, t, xs)
                        if latency[xf_src[x], xf_dst[x]] == 0.0:
                            _land(x, xs, rq, ref, mem)
            elif kind == XLAND:
                _land(ident, xs, rq, ref, mem)
            elif kind == XQUEUE:
                x = ident
                if xsub[x] == 1:
                    hd = launcher[xf_dst[x]]
                    lstate[hd] = FREE
                    _mark(dirty, isdirty, ist, D + hd)
                _join(x, t, xs)
            else:  # LFREE
                lstate[ident] = FREE
                _mark(dirty, isdirty, ist, D + ident)
        first = False

        # dispatch what this event made ready: devices start ops or kernels, launchers launch or submit
        while ist[NDIRTY] > 0:
            ist[NDIRTY] -= 1
            k = dirty[ist[NDIRTY]]
            isdirty[k] = 0
            if k < D:
                d = k
                asyn = launcher[d] >= 0
                while nfree[d] > 0 and fhead[d] < ftail[d]:
                    i = fq[fbase[d] + fhead[d]]
                    fhead[d] += 1
                    if not asyn and spos[i] >= 0:
                        _next_turn(d, rq)
                    s = t
                    ot = optime[i, d]
                    m = launch_cost[d]
                    if ot < m:
                        m = ot
                    if asyn:
                        dt = ot - m
                        if concurrency[d] > 1:  # in stream order: after the local inputs' kernels
                            for q in range(in_ptr[i], in_ptr[i + 1]):
                                pp = tensor_src[pair_tensor[in_pair[q]]]
                                if dev[pp] == d and finish[pp] > s:
                                    s = finish[pp]
                    elif op_group[i] >= 0 and group_launch[op_group[i] * D + d] > 0:
                        g = op_group[i]
                        dt = ot - m
                        if gseen[g * D + d] == 0:
                            gseen[g * D + d] = 1
                            dt += group_launch[g * D + d] * launch_cost[d]
                    else:
                        dt = ot
                    start[i] = s
                    if not asyn:
                        lstart[i] = s
                    finish[i] = s + dt
                    nfree[d] -= 1
                    busy_time[d] += dt
                    mem[d] += out_alloc_total[i]
                    if mem[d] > peak[d]:
                        peak[d] = mem[d]
                    _push(et, ek, ist, s + dt, FINISH, i)
            elif k == D + H:
                # communication ops: no slot, no launch, no time; their outputs are allocated now
                while chead < ist[NCOMM]:
                    c = fq[fbase[D] + chead]
                    chead += 1
                    dc = dev[c]
                    start[c] = t
                    finish[c] = t
                    lstart[c] = t
                    mem[dc] += out_alloc_total[c]
                    if mem[dc] > peak[dc]:
                        peak[dc] = mem[dc]
                    _push(et, ek, ist, t, FINISH, c)
            else:
                h = k - D
                while lstate[h] == FREE:
                    has_op = lhead[h] < ltail[h]
                    x = shead[h]
                    if not has_op and x < 0:
                        break
                    if has_op and (x < 0 or oseq[lq[lbase[h] + lhead[h]]] < xseq[x]):
                        c = lq[lbase[h] + lhead[h]]
                        dc = dev[c]
                        if inflight[dc] >= qdepth[dc]:
                            lstate[h] = DEPTH
                            lwait[h] = dc
                            break
                        lhead[h] += 1
                        if spos[c] >= 0:
                            _next_turn(dc, rq)
                        if op_group[c] >= 0 and group_launch[op_group[c] * D + dc] > 0:
                            g = op_group[c]
                            ln = 0.0
                            if gseen[g * D + dc] == 0:
                                gseen[g * D + dc] = 1
                                ln = group_launch[g * D + dc] * launch_cost[dc]
                        else:
                            ln = launch_cost[dc]
                            if optime[c, dc] < ln:
                                ln = optime[c, dc]
                        lstart[c] = t
                        inflight[dc] += 1
                        host_time[dc] += ln
                        lstate[h] = BUSY
                        _push(et, ek, ist, t + ln, LAUNCHED, c)
                    else:
                        shead[h] = snext[x]
                        if shead[h] < 0:
                            stail[h] = -1
                        ov = overhead[xf_src[x], xf_dst[x]]
                        host_time[xf_dst[x]] += ov
                        if ov > 0.0:
                            xsub[x] = 1
                            lstate[h] = BUSY
                            _push(et, ek, ist, t + ov, XQUEUE, x)
                        else:
                            _join(x, t, xs)
        if ist[RESHARE] == 1:
            ist[RESHARE] = 0
            _reshare(t, xs)
    rows.step_time[row] = makespan
    rows.n_transfers[row] = ist[NX]
    rows.n_finished[row] = finished


@njit(cache=True, inline="always")
def _append(nxt, head, tail, k, x):
    """Append ``x`` to list ``k`` (``head[k]`` .. ``tail[k]``, linked through ``nxt``; -1 ends it)."""
    nxt[x] = -1
    if tail[k] < 0:
        head[k] = x
    else:
        nxt[tail[k]] = x
    tail[k] = x


@njit(cache=True, inline="always")
def _join(x, t, xs):
    """Transfer ``x`` joins the tail of its copy queue; the queue starts what it can."""
    r = xs.xq[x]
    _append(xs.qnext, xs.qh, xs.qt, r, x)
    _serve(r, t, xs)


@njit(cache=True, inline="always")
def _serve(r, t, xs):
    """Start transfers from the head of copy queue ``r`` while it has a free engine (0: no limit)."""
    while xs.qh[r] >= 0 and (xs.qcap[r] == 0 or xs.quse[r] < xs.qcap[r]):
        x = xs.qh[r]
        xs.qh[r] = xs.qnext[x]
        if xs.qh[r] < 0:
            xs.qt[r] = -1
        xs.quse[r] += 1
        s = xs.xf_src[x]
        dc = xs.xf_dst[x]
        l = s * xs.n_devices + dc
        xs.xf_start[x] = t
        b = xs.tensor_bytes[xs.xf_tensor[x]]
        if xs.route_ptr[l] == xs.route_ptr[l + 1]:
            _push(xs.et, xs.ek, xs.ist, t + b / xs.bandwidth[s, dc], XEND, x)
        else:
            for k in range(xs.route_ptr[l], xs.route_ptr[l + 1]):
                g = xs.route_seg[k]
                if xs.nseg[g] == 0:
                    xs.sbusy[g] = t
                xs.nseg[g] += 1
            xs.xrem[x] = b
            xs.xrate[x] = 0.0
            xs.xtl[x] = t
            xs.act[xs.ist[NACT]] = x
            xs.ist[NACT] += 1
            xs.xendp[x] = np.inf  # until _reshare gives it a rate
            xs.ist[RESHARE] = 1


@njit(cache=True, inline="always")
def _end(x, t, xs):
    """Transfer ``x`` has moved its last byte: it frees its engine and segments and lands a latency later
    (the caller lands it now when the latency is 0)."""
    s = xs.xf_src[x]
    dc = xs.xf_dst[x]
    l = s * xs.n_devices + dc
    xs.xf_end[x] = t
    xs.xf_land[x] = t + xs.latency[s, dc]
    xs.link_time[s, dc] += t - xs.xf_start[x]
    for k in range(xs.route_ptr[l], xs.route_ptr[l + 1]):
        g = xs.route_seg[k]
        xs.nseg[g] -= 1
        if xs.nseg[g] == 0:
            xs.seg_time[g] += t - xs.sbusy[g]
        xs.ist[RESHARE] = 1
    if xs.latency[s, dc] != 0.0:
        _push(xs.et, xs.ek, xs.ist, xs.xf_land[x], XLAND, x)
    r = xs.xq[x]
    xs.quse[r] -= 1
    _serve(r, t, xs)


@njit(cache=True, inline="always")
def _land(x, xs, rq, ref, mem):
    """Transfer ``x`` lands: the source may free its buffer (``ref``: each buffer's holders; ``mem``: each
    device's bytes); its readers on the destination may be released."""
    bq = xs.xbuf[x]
    if bq >= 0:
        ref[bq] -= 1
        if ref[bq] == 0:
            mem[xs.xf_src[x]] -= _buffer_bytes(bq, xs)
    tt = xs.xf_tensor[x]
    dc = xs.xf_dst[x]
    for p in range(xs.tensor_pair_ptr[tt], xs.tensor_pair_ptr[tt + 1]):
        c = xs.pair_op[p]
        if rq.dev[c] == dc:
            rq.cnt[c] -= 1
            if rq.cnt[c] == 0:
                _release(c, rq)


@njit(cache=True, inline="always")
def _reshare(t, xs):
    """Each active shared transfer moves at the least of its link's bandwidth and its equal share of every
    segment it crosses; those whose rate changes are brought up to date and get a new predicted end. One
    SEGEND event (a new generation) is due at the earliest predicted end."""
    best = np.inf
    for k in range(xs.ist[NACT]):
        x = xs.act[k]
        s = xs.xf_src[x]
        dc = xs.xf_dst[x]
        l = s * xs.n_devices + dc
        r = xs.bandwidth[s, dc]
        for j in range(xs.route_ptr[l], xs.route_ptr[l + 1]):
            g = xs.route_seg[j]
            share = xs.seg_bw[g] / xs.nseg[g]
            if share < r:
                r = share
        if r != xs.xrate[x]:
            if xs.xrate[x] > 0.0:
                xs.xrem[x] -= xs.xrate[x] * (t - xs.xtl[x])
                if xs.xrem[x] < 0.0:
                    xs.xrem[x] = 0.0
            xs.xtl[x] = t
            xs.xrate[x] = r
            xs.xendp[x] = t + xs.xrem[x] / r
        if xs.xendp[x] < best:
            best = xs.xendp[x]
    if xs.ist[NACT] > 0:
        xs.ist[GEN] += 1
        _push(xs.et, xs.ek, xs.ist, best, SEGEND, xs.ist[GEN])
