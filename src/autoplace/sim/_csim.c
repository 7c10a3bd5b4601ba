/* The simulator's event loop in C: the same algorithm, event order and arithmetic as
 * autoplace/sim/_kernel.py (the numba kernel, which stays as the portable fallback and as the
 * reference the tests compare this one against). Loaded with ctypes; no Python API is used.
 *
 * Events are ordered by (time, kind, id): FINISH(op)=0, XFER(transfer lands)=1, DISPATCH(device)=2.
 * See _kernel.py's module docstring for the semantics.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int64_t i64;

#define FINISH 0
#define XFER 1
#define DISPATCH 2
#define KSHIFT 40
#define KMASK ((((i64)1) << KSHIFT) - 1)

/* Binary min-heap on (t, k) pairs stored in ht/hk; returns the new size. */
static inline i64 heap_push(double *ht, i64 *hk, i64 size, double t, i64 k) {
    i64 i = size;
    while (i > 0) {
        i64 parent = (i - 1) >> 1;
        double pt = ht[parent];
        if (pt < t || (pt == t && hk[parent] <= k)) break;
        ht[i] = pt;
        hk[i] = hk[parent];
        i = parent;
    }
    ht[i] = t;
    hk[i] = k;
    return size + 1;
}

static inline i64 heap_pop(double *ht, i64 *hk, i64 size) {
    size -= 1;
    if (size == 0) return 0;
    double t = ht[size];
    i64 k = hk[size];
    i64 i = 0;
    for (;;) {
        i64 c = 2 * i + 1;
        if (c >= size) break;
        if (c + 1 < size) {
            double t1 = ht[c + 1], t0 = ht[c];
            if (t1 < t0 || (t1 == t0 && hk[c + 1] < hk[c])) c += 1;
        }
        double tc = ht[c];
        if (tc < t || (tc == t && hk[c] < k)) {
            ht[i] = tc;
            hk[i] = hk[c];
            i = c;
        } else {
            break;
        }
    }
    ht[i] = t;
    hk[i] = k;
    return size;
}

typedef struct {
    /* graph */
    i64 n, T, P, D, S;
    const double *optime; /* [n, D] */
    const i64 *order, *tensor_src, *tensor_bytes, *tensor_alloc, *op_tensor_ptr, *tensor_pair_ptr, *pair_op,
        *pair_tensor, *in_ptr, *in_pair, *out_alloc_total, *unconsumed_alloc, *param_bytes, *alias_pair;
    /* cluster */
    const double *bandwidth, *latency, *overhead; /* [D, D]; bandwidth = the pair's transfer bandwidth */
    const i64 *route_ptr, *route_seg, *send_cap, *recv_cap, *concurrency;
    i64 ES, ER; /* engines per device in send_free / recv_free (at least 1) */
} Problem;

typedef struct {
    /* per device d, ops ready later than the instant they were released wait in a heap
     * (qt/qk[qbase[d]:], key = (ready time, release seq)); ops ready at once wait in a FIFO
     * (ft/fs/fop[qbase[d] + fhead[d] : qbase[d] + ftail[d]]), already in (ready time, seq) order. */
    i64 *qbase, *qsize, *qk, *fs, *fop, *fhead, *ftail, *seq_op, *ek, *cnt, *busy, *ref, *pair_buf, *xf_buf,
        *stamp, *xid_of, *mem, *xf_next, *link_tail;
    double *qt, *ft, *et, *ready, *pend, *link_free, *seg_free, *send_free, *recv_free;
    void *block;
} Work;

static int work_alloc(Work *w, const Problem *p) {
    i64 n = p->n, T = p->T, P = p->P, D = p->D, S = p->S, cap = 2 * n + P + D + 1;
    size_t ints = (size_t)((D + 1) + D + n + n + n + D + D + n + cap + n + D + (T + P) + P + P + D + D + D + P +
                           D * D);
    size_t dbls = (size_t)(n + n + cap + n + D + D * D + S + D * p->ES + D * p->ER);
    char *b = malloc(ints * sizeof(i64) + dbls * sizeof(double) + 64);
    if (!b) return -1;
    w->block = b;
    i64 *ip = (i64 *)b;
    w->qbase = ip; ip += D + 1;
    w->qsize = ip; ip += D;
    w->qk = ip; ip += n;
    w->fs = ip; ip += n;
    w->fop = ip; ip += n;
    w->fhead = ip; ip += D;
    w->ftail = ip; ip += D;
    w->seq_op = ip; ip += n;
    w->ek = ip; ip += cap;
    w->cnt = ip; ip += n;
    w->busy = ip; ip += D;
    w->ref = ip; ip += T + P;
    w->pair_buf = ip; ip += P;
    w->xf_buf = ip; ip += P;
    w->stamp = ip; ip += D;
    w->xid_of = ip; ip += D;
    w->mem = ip; ip += D;
    w->xf_next = ip; ip += P;
    w->link_tail = ip; ip += D * D;
    double *dp = (double *)ip;
    w->qt = dp; dp += n;
    w->ft = dp; dp += n;
    w->et = dp; dp += cap;
    w->ready = dp; dp += n;
    w->pend = dp; dp += D;
    w->link_free = dp; dp += D * D;
    w->seg_free = dp; dp += S;
    w->send_free = dp; dp += D * p->ES;
    w->recv_free = dp;
    return 0;
}

/* Release op c on device dc, ready at time r (>= t): FIFO if r == t, else the heap. */
static inline void enqueue(Work *w, i64 c, i64 dc, double r, double t, i64 seq) {
    i64 b0 = w->qbase[dc];
    w->seq_op[seq] = c;
    if (r <= t) {
        i64 k = b0 + w->ftail[dc]++;
        w->ft[k] = r;
        w->fs[k] = seq;
    } else {
        w->qsize[dc] = heap_push(w->qt + b0, w->qk + b0, w->qsize[dc], r, seq);
    }
}

static inline int has_queued(const Work *w, i64 d) { return w->qsize[d] > 0 || w->fhead[d] < w->ftail[d]; }

static inline int ready_now(const Work *w, i64 d, double t) {
    return w->fhead[d] < w->ftail[d] || (w->qsize[d] > 0 && w->qt[w->qbase[d]] <= t);
}

/* Start ready ops on device d at time t (earliest ready first, ties by release order) while it has
 * a free slot; keep a DISPATCH pending for the earliest op that becomes ready later. */
static inline i64 dispatch(const Problem *p, Work *w, i64 d, double t, i64 esize, double *start, double *finish,
                           double *busy_time, i64 *peak) {
    i64 D = p->D, b0 = w->qbase[d];
    double *qt = w->qt + b0;
    i64 *qk = w->qk + b0;
    while (w->busy[d] < p->concurrency[d]) {
        int from_fifo;
        i64 fh = b0 + w->fhead[d];
        int fifo = w->fhead[d] < w->ftail[d];
        int heap = w->qsize[d] > 0 && qt[0] <= t;
        if (fifo && heap) from_fifo = w->ft[fh] < qt[0] || (w->ft[fh] == qt[0] && w->fs[fh] < qk[0]);
        else if (fifo) from_fifo = 1;
        else if (heap) from_fifo = 0;
        else break;
        i64 c;
        if (from_fifo) {
            c = w->seq_op[w->fs[fh]];
            w->fhead[d] += 1;
        } else {
            c = w->seq_op[qk[0]];
            w->qsize[d] = heap_pop(qt, qk, w->qsize[d]);
        }
        double dt = p->optime[c * D + d];
        start[c] = t;
        finish[c] = t + dt;
        w->busy[d] += 1;
        busy_time[d] += dt;
        w->mem[d] += p->out_alloc_total[c];
        if (w->mem[d] > peak[d]) peak[d] = w->mem[d];
        esize = heap_push(w->et, w->ek, esize, t + dt, ((i64)FINISH << KSHIFT) + c);
    }
    /* Ops left in the heap become ready when a transfer lands; its XFER event dispatches d then. */
    return esize;
}

/* Bytes of buffer b: tensor b's own allocation (b < T) or received copy b - T. */
static inline i64 buffer_bytes(const Problem *p, i64 b, const i64 *xf_tensor) {
    return b < p->T ? p->tensor_alloc[b] : p->tensor_bytes[xf_tensor[b - p->T]];
}

/* Index of the engine among free[base:base+cap] that frees first (the lowest on ties). */
static inline i64 first_free(const double *free, i64 base, i64 cap) {
    i64 k = base;
    for (i64 j = base + 1; j < base + cap; j++)
        if (free[j] < free[k]) k = j;
    return k;
}

static double run_one(const Problem *p, Work *w, const i64 *dev, double *start, double *finish, double *busy_time,
                      i64 *peak, double *link_time, i64 *link_bytes, double *seg_time, i64 *xf_tensor, i64 *xf_src,
                      i64 *xf_dst, double *xf_start, double *xf_end, double *xf_land, i64 *n_transfers) {
    i64 n = p->n, D = p->D, T = p->T, P = p->P, S = p->S;
    i64 esize = 0, nx = 0;
    memset(w->qbase, 0, sizeof(i64) * (D + 1));
    for (i64 i = 0; i < n; i++) w->qbase[dev[i] + 1] += 1;
    for (i64 d = 0; d < D; d++) w->qbase[d + 1] += w->qbase[d];
    memset(w->qsize, 0, sizeof(i64) * D);
    memset(w->fhead, 0, sizeof(i64) * D);
    memset(w->ftail, 0, sizeof(i64) * D);
    i64 seq = 0;
    memset(w->ready, 0, sizeof(double) * n);
    memset(w->busy, 0, sizeof(i64) * D);
    memset(w->ref, 0, sizeof(i64) * (T + P));
    memset(w->mem, 0, sizeof(i64) * D);
    memset(w->link_free, 0, sizeof(double) * D * D);
    memset(w->seg_free, 0, sizeof(double) * S);
    memset(w->send_free, 0, sizeof(double) * D * p->ES);
    memset(w->recv_free, 0, sizeof(double) * D * p->ER);
    for (i64 l = 0; l < D * D; l++) w->link_tail[l] = -1;
    for (i64 d = 0; d < D; d++) {
        w->pend[d] = INFINITY;
        w->stamp[d] = -1;
        w->xid_of[d] = 0;
    }
    for (i64 i = 0; i < n; i++) w->mem[dev[i]] += p->param_bytes[i];
    for (i64 d = 0; d < D; d++) peak[d] = w->mem[d];
    for (i64 i = 0; i < n; i++) {
        w->cnt[i] = p->in_ptr[i + 1] - p->in_ptr[i];
    }
    for (i64 j = 0; j < n; j++) {  /* sources, in topological order */
        i64 i = p->order[j];
        if (w->cnt[i] == 0) enqueue(w, i, dev[i], 0.0, 0.0, seq++);
    }
    for (i64 d = 0; d < D; d++) {
        if (has_queued(w, d)) {
            esize = heap_push(w->et, w->ek, esize, 0.0, ((i64)DISPATCH << KSHIFT) + d);
            w->pend[d] = 0.0;
        }
    }
    double makespan = 0.0;
    while (esize > 0) {
        double t = w->et[0];
        i64 key = w->ek[0];
        esize = heap_pop(w->et, w->ek, esize);
        i64 kind = key >> KSHIFT, ident = key & KMASK;
        if (kind == FINISH) {
            i64 i = ident, d = dev[i];
            w->busy[d] -= 1;
            if (t > makespan) makespan = t;
            /* a view's outputs live in the buffer of the input it aliases */
            i64 obuf = p->alias_pair[i] >= 0 ? w->pair_buf[p->alias_pair[i]] : -1;
            for (i64 tt = p->op_tensor_ptr[i]; tt < p->op_tensor_ptr[i + 1]; tt++) {
                i64 b = p->tensor_bytes[tt], buf = obuf >= 0 ? obuf : tt;
                for (i64 pr = p->tensor_pair_ptr[tt]; pr < p->tensor_pair_ptr[tt + 1]; pr++) {
                    i64 c = p->pair_op[pr], dc = dev[c];
                    double arrival;
                    if (dc == d) {
                        w->pair_buf[pr] = buf;
                        w->ref[buf] += 1;
                        arrival = t;
                    } else {
                        if (w->stamp[dc] != tt) {
                            w->stamp[dc] = tt;
                            i64 l = d * D + dc, ks = -1, kr = -1;
                            double xs = t > w->link_free[l] ? t : w->link_free[l];
                            if (p->send_cap[d] > 0) {
                                ks = first_free(w->send_free, d * p->ES, p->send_cap[d]);
                                if (w->send_free[ks] > xs) xs = w->send_free[ks];
                            }
                            if (p->recv_cap[dc] > 0) {
                                kr = first_free(w->recv_free, dc * p->ER, p->recv_cap[dc]);
                                if (w->recv_free[kr] > xs) xs = w->recv_free[kr];
                            }
                            for (i64 r = p->route_ptr[l]; r < p->route_ptr[l + 1]; r++)
                                if (w->seg_free[p->route_seg[r]] > xs) xs = w->seg_free[p->route_seg[r]];
                            double occ = p->overhead[l] + (double)b / p->bandwidth[l];
                            double xe = xs + occ;
                            w->link_free[l] = xe;
                            if (ks >= 0) w->send_free[ks] = xe;
                            if (kr >= 0) w->recv_free[kr] = xe;
                            for (i64 r = p->route_ptr[l]; r < p->route_ptr[l + 1]; r++) {
                                w->seg_free[p->route_seg[r]] = xe;
                                seg_time[p->route_seg[r]] += occ;
                            }
                            link_time[l] += occ;
                            link_bytes[l] += b;
                            xf_tensor[nx] = tt;
                            xf_src[nx] = d;
                            xf_dst[nx] = dc;
                            xf_start[nx] = xs;
                            xf_end[nx] = xe;
                            xf_land[nx] = xe + p->latency[l];
                            w->xf_buf[nx] = buf;
                            w->ref[buf] += 1;
                            /* the received copy is allocated when the transfer is issued */
                            w->mem[dc] += b;
                            if (w->mem[dc] > peak[dc]) peak[dc] = w->mem[dc];
                            w->xid_of[dc] = nx;
                            /* A link's transfers land in the order they were issued (starts and ends are
                             * FIFO per link and its latency is fixed), so only its oldest pending landing
                             * needs to be in the event heap; the rest wait on a list (same event order). */
                            w->xf_next[nx] = -1;
                            if (w->link_tail[l] < 0) {
                                esize = heap_push(w->et, w->ek, esize, xf_land[nx], ((i64)XFER << KSHIFT) + nx);
                            } else {
                                w->xf_next[w->link_tail[l]] = nx;
                            }
                            w->link_tail[l] = nx;
                            nx += 1;
                        }
                        i64 x = w->xid_of[dc];
                        w->ref[T + x] += 1;
                        w->pair_buf[pr] = T + x;
                        arrival = xf_land[x];
                    }
                    if (arrival > w->ready[c]) w->ready[c] = arrival;
                    /* No DISPATCH event for a remote device: the op's last input is a transfer to dc
                     * whose XFER event lands exactly at ready[c], and that event dispatches dc. */
                    if (--w->cnt[c] == 0) enqueue(w, c, dc, w->ready[c], t, seq++);
                }
            }
            /* release the input buffers this op was holding (after delivery: a view's readers hold its base) */
            for (i64 q = p->in_ptr[i]; q < p->in_ptr[i + 1]; q++) {
                i64 bq = w->pair_buf[p->in_pair[q]];
                if (--w->ref[bq] == 0) w->mem[d] -= buffer_bytes(p, bq, xf_tensor);
            }
            w->mem[d] -= p->unconsumed_alloc[i];
            if (has_queued(w, d)) {
                if (esize == 0 || w->et[0] > t) {
                    esize = dispatch(p, w, d, t, esize, start, finish, busy_time, peak);
                } else if (t < w->pend[d]) {
                    esize = heap_push(w->et, w->ek, esize, t, ((i64)DISPATCH << KSHIFT) + d);
                    w->pend[d] = t;
                }
            }
        } else if (kind == XFER) {
            i64 x = ident, dc = xf_dst[x], nxt = w->xf_next[x];
            if (nxt >= 0) {
                esize = heap_push(w->et, w->ek, esize, xf_land[nxt], ((i64)XFER << KSHIFT) + nxt);
            } else {
                w->link_tail[xf_src[x] * D + dc] = -1;
            }
            i64 bq = w->xf_buf[x];
            if (--w->ref[bq] == 0) w->mem[xf_src[x]] -= buffer_bytes(p, bq, xf_tensor);
            if (w->busy[dc] < p->concurrency[dc] && ready_now(w, dc, t)) {
                if (esize == 0 || w->et[0] > t) {
                    esize = dispatch(p, w, dc, t, esize, start, finish, busy_time, peak);
                } else if (t < w->pend[dc]) {
                    esize = heap_push(w->et, w->ek, esize, t, ((i64)DISPATCH << KSHIFT) + dc);
                    w->pend[dc] = t;
                }
            }
        } else {
            i64 d = ident;
            if (w->pend[d] <= t) w->pend[d] = INFINITY;
            esize = dispatch(p, w, d, t, esize, start, finish, busy_time, peak);
        }
    }
    *n_transfers = nx;
    return makespan;
}

/* Simulate B placements (rows of devs[B, n]). Per-placement outputs have a leading B axis;
 * start/finish/xf_* are scratch shared by all rows (the last row's timeline is left in them).
 * Returns 0, or -1 if memory could not be allocated. */
int ap_simulate(i64 B, i64 n, i64 T, i64 P, i64 D, i64 S, const i64 *devs, const double *optime, const i64 *order,
                const i64 *tensor_src, const i64 *tensor_bytes, const i64 *tensor_alloc, const i64 *op_tensor_ptr,
                const i64 *tensor_pair_ptr, const i64 *pair_op, const i64 *pair_tensor, const i64 *in_ptr,
                const i64 *in_pair, const i64 *out_alloc_total, const i64 *unconsumed_alloc,
                const i64 *param_bytes, const i64 *alias_pair, const double *bandwidth, const double *latency,
                const double *overhead, const i64 *route_ptr, const i64 *route_seg, const i64 *send_cap,
                const i64 *recv_cap, const i64 *concurrency, double *start, double *finish, double *step_time,
                double *busy_time, i64 *peak, double *link_time, i64 *link_bytes, double *seg_time,
                i64 *n_transfers, i64 *xf_tensor, i64 *xf_src, i64 *xf_dst, double *xf_start, double *xf_end,
                double *xf_land) {
    Problem p = {n, T, P, D, S, optime, order, tensor_src, tensor_bytes, tensor_alloc, op_tensor_ptr,
                 tensor_pair_ptr, pair_op, pair_tensor, in_ptr, in_pair, out_alloc_total, unconsumed_alloc,
                 param_bytes, alias_pair, bandwidth, latency, overhead, route_ptr, route_seg, send_cap, recv_cap,
                 concurrency, 1, 1};
    for (i64 d = 0; d < D; d++) {
        if (send_cap[d] > p.ES) p.ES = send_cap[d];
        if (recv_cap[d] > p.ER) p.ER = recv_cap[d];
    }
    Work w;
    if (work_alloc(&w, &p) != 0) return -1;
    for (i64 b = 0; b < B; b++) {
        step_time[b] = run_one(&p, &w, devs + b * n, start, finish, busy_time + b * D, peak + b * D,
                               link_time + b * D * D, link_bytes + b * D * D, seg_time + b * S, xf_tensor, xf_src,
                               xf_dst, xf_start, xf_end, xf_land, n_transfers + b);
    }
    free(w.block);
    return 0;
}
