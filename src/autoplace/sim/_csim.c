/* The simulator's event loop in C: the same algorithm, event order and arithmetic as
 * autoplace/sim/_kernel.py (the numba kernel, which stays as the portable fallback and as the
 * reference the tests compare this one against). Loaded with ctypes; no Python API is used.
 *
 * Events are ordered by (time, kind, id): FINISH(op)=0, XFER(transfer lands)=1, DISPATCH(device)=2.
 * See _kernel.py's module docstring for the semantics.
 *
 * Priority queues. Every key is unique (or two equal entries are the same event), so any correct
 * priority queue pops the same sequence: the queues below differ from the kernel's binary heaps in
 * speed only. They hold few entries (the event queue: at most one FINISH per busy slot, one XFER per
 * link with transfers in flight and one DISPATCH per device; a device's ready queue: its ops waiting
 * for an arrival), so they are kept as sorted arrays — popping is then free and inserting shifts the
 * few entries that pop earlier (event queue) or later (ready queues), instead of a heap's
 * mispredicted branches and dependent loads at every level — and turn into binary heaps (a sorted
 * array already is one) while they grow past a few dozen entries.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int64_t i64;

#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(addr) __builtin_prefetch(addr)
#define INLINE static inline __attribute__((always_inline))
#else
#define PREFETCH(addr) ((void)0)
#define INLINE static inline
#endif

#define FINISH 0
#define XFER 1
#define DISPATCH 2
#define KSHIFT 40
#define KMASK ((((i64)1) << KSHIFT) - 1)

/* Ready-queue keys: (release seq << QSHIFT) | op. Seqs are unique, so comparing keys compares seqs, and
 * the op comes out of the key without a seq -> op table (ap_simulate checks n < 2^31). */
#define QSHIFT 32
#define QMASK ((((i64)1) << QSHIFT) - 1)

/* A queue stays a sorted array up to this many entries, and is a heap from there until it empties. */
#ifndef SORTED_MAX
#define SORTED_MAX 32
#endif

/* An entry of a priority queue, ordered by (t, k). Time and key side by side: one 16-byte load. */
typedef struct {
    double t;
    i64 k;
} Ent;

/* (ta, ka) < (tb, kb), without branches (the outcome is data-dependent). */
static inline int ent_less(double ta, i64 ka, double tb, i64 kb) { return (ta < tb) | ((ta == tb) & (ka < kb)); }

/* Binary min-heap h[0:size]: push (t, k), return the new size. */
static inline i64 heap_push(Ent *h, i64 size, double t, i64 k) {
    i64 i = size;
    while (i > 0) {
        i64 parent = (i - 1) >> 1;
        if (!ent_less(t, k, h[parent].t, h[parent].k)) break;
        h[i] = h[parent];
        i = parent;
    }
    h[i].t = t;
    h[i].k = k;
    return size + 1;
}

/* Remove the heap's top h[0]; return the new size. */
static inline i64 heap_pop(Ent *h, i64 size) {
    size -= 1;
    Ent last = h[size];
    i64 i = 0;
    for (;;) {
        i64 c = 2 * i + 1;
        if (c >= size) break;
        if (c + 1 < size) c += ent_less(h[c + 1].t, h[c + 1].k, h[c].t, h[c].k);
        if (!ent_less(h[c].t, h[c].k, last.t, last.k)) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = last;
    return size;
}

/* The event queue: ev[0:size], sorted descending (the next event last) while `heap` is 0, a min-heap
 * (the next event first) while it is 1. */
typedef struct {
    Ent *ev;
    i64 size;
    int heap;
} Events;

static inline const Ent *ev_top(const Events *e) { return e->heap ? &e->ev[0] : &e->ev[e->size - 1]; }

/* Is there no event left at time t or earlier? */
static inline int ev_none_by(const Events *e, double t) { return e->size == 0 || ev_top(e)->t > t; }

static inline void ev_push(Events *e, double t, i64 k) {
    Ent *h = e->ev;
    if (!e->heap) {
        if (e->size < SORTED_MAX) {
            /* shift the events due earlier: h[-1] is a sentinel at +inf, so no bound check; ties on
             * time (rare) are settled by key in a second loop */
            i64 i = e->size++;
            while (h[i - 1].t < t) {
                h[i] = h[i - 1];
                i--;
            }
            while (i > 0 && h[i - 1].t == t && h[i - 1].k < k) {
                h[i] = h[i - 1];
                i--;
            }
            h[i].t = t;
            h[i].k = k;
            return;
        }
        for (i64 i = 0, j = e->size - 1; i < j; i++, j--) { /* ascending order is a heap */
            Ent x = h[i];
            h[i] = h[j];
            h[j] = x;
        }
        e->heap = 1;
    }
    e->size = heap_push(h, e->size, t, k);
}

static inline void ev_pop(Events *e) {
    if (!e->heap) {
        e->size -= 1;
    } else {
        e->size = heap_pop(e->ev, e->size);
        if (e->size == 0) e->heap = 0;
    }
}

/* A device's ready queue: q[head:tail], sorted ascending while `heap` is 0, a min-heap rooted at
 * q[head] while it is 1. Each op enters it at most once, so tail never passes the device's op count. */
typedef struct {
    i64 head, tail;
    int heap;
} Ready;

static inline void rq_push(Ready *r, Ent *q, double t, i64 k) {
    if (!r->heap) {
        if (r->tail - r->head < SORTED_MAX) {
            i64 i = r->tail++;
            while (i > r->head && ent_less(t, k, q[i - 1].t, q[i - 1].k)) { /* shift the ops due later */
                q[i] = q[i - 1];
                i--;
            }
            q[i].t = t;
            q[i].k = k;
            return;
        }
        r->heap = 1;
    }
    r->tail = r->head + heap_push(q + r->head, r->tail - r->head, t, k);
}

static inline void rq_pop(Ready *r, Ent *q) {
    if (!r->heap) {
        r->head += 1;
    } else {
        r->tail = r->head + heap_pop(q + r->head, r->tail - r->head);
        if (r->tail == r->head) r->heap = 0;
    }
}

/* A buffer: tensor tt's own allocation (index tt) or received copy x (index T + x): its readers and
 * pending sends, and its size, side by side. */
typedef struct {
    i64 ref, bytes;
} Buf;

/* An op's state in a run: when its inputs are ready so far, how many it still waits for, its device. */
typedef struct {
    double ready;
    int32_t cnt, dev;
} OpState;

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
    i64 R;      /* the longest route; routes are padded to R with the spare segment S (route[D * D * R]) */
    i64 *route;
} Problem;

typedef struct {
    /* per device d: ops ready later than the instant they were released wait in its ready queue
     * (q[qbase[d]:], rq[d]), ops ready at once in a FIFO (f[qbase[d] + fhead[d] : qbase[d] + ftail[d]]),
     * already in (ready time, key) order. */
    Ent *q, *f, *ev;
    Ready *rq;
    Buf *buf;
    OpState *op;
    i64 *qbase, *fhead, *ftail, *busy, *pair_buf, *xf_buf, *stamp, *xid_of, *mem, *xf_next, *link_tail;
    double *pend, *link_free, *seg_free, *seg_time, *send_free, *recv_free;
    void *block;
} Work;

static int work_alloc(Work *w, const Problem *p) {
    i64 n = p->n, T = p->T, P = p->P, D = p->D, S = p->S, cap = 2 * n + P + D + 1;
    size_t ents = (size_t)(n + n + cap + 1 + (T + P) + n); /* q, f, ev; buf, op (as large as an Ent) */
    size_t ints = (size_t)((D + 1) + D + D + D + P + P + D + D + D + P + D * D);
    size_t dbls = (size_t)(D + D * D + (S + 1) + (S + 1) + D * p->ES + D * p->ER);
    char *b = malloc(ents * sizeof(Ent) + D * sizeof(Ready) + ints * sizeof(i64) + dbls * sizeof(double));
    if (!b) return -1;
    w->block = b;
    Ent *ep = (Ent *)b;
    w->q = ep; ep += n;
    w->f = ep; ep += n;
    ep->t = INFINITY; /* sentinel before the event queue */
    ep->k = 0;
    w->ev = ep + 1; ep += cap + 1;
    w->buf = (Buf *)ep; ep += T + P;
    w->op = (OpState *)ep; ep += n;
    w->rq = (Ready *)ep;
    i64 *ip = (i64 *)(w->rq + D);
    w->qbase = ip; ip += D + 1;
    w->fhead = ip; ip += D;
    w->ftail = ip; ip += D;
    w->busy = ip; ip += D;
    w->pair_buf = ip; ip += P;
    w->xf_buf = ip; ip += P;
    w->stamp = ip; ip += D;
    w->xid_of = ip; ip += D;
    w->mem = ip; ip += D;
    w->xf_next = ip; ip += P;
    w->link_tail = ip; ip += D * D;
    double *dp = (double *)ip;
    w->pend = dp; dp += D;
    w->link_free = dp; dp += D * D;
    w->seg_free = dp; dp += S + 1;
    w->seg_time = dp; dp += S + 1;
    w->send_free = dp; dp += D * p->ES;
    w->recv_free = dp;
    return 0;
}

/* Release op c on device dc, ready at time r (>= t), as release number seq: FIFO if r == t, else the
 * ready queue. */
static inline void enqueue(const Problem *p, Work *w, i64 c, i64 dc, double r, double t, i64 seq) {
    i64 b0 = w->qbase[dc], key = (seq << QSHIFT) | c;
    PREFETCH(&p->optime[c * p->D]);
    PREFETCH(&p->in_ptr[c]);
    PREFETCH(&p->op_tensor_ptr[c]);
    PREFETCH(&p->alias_pair[c]);
    PREFETCH(&p->out_alloc_total[c]);
    PREFETCH(&p->unconsumed_alloc[c]);
    if (r <= t) {
        Ent *e = w->f + b0 + w->ftail[dc]++;
        e->t = r;
        e->k = key;
    } else {
        rq_push(&w->rq[dc], w->q + b0, r, key);
    }
}

static inline int has_queued(const Work *w, i64 d) {
    return w->rq[d].tail > w->rq[d].head || w->fhead[d] < w->ftail[d];
}

static inline int ready_now(const Work *w, i64 d, double t) {
    return w->fhead[d] < w->ftail[d] || (w->rq[d].tail > w->rq[d].head && w->q[w->qbase[d] + w->rq[d].head].t <= t);
}

/* Start ready ops on device d at time t (earliest ready first, ties by release order) while it has
 * a free slot. */
INLINE void dispatch(const Problem *p, Work *w, Events *ev, i64 d, double t, double *start, double *finish,
                            double *busy_time, i64 *peak) {
    i64 D = p->D, b0 = w->qbase[d];
    Ent *q = w->q + b0, *f = w->f + b0;
    Ready *rq = &w->rq[d];
    while (w->busy[d] < p->concurrency[d]) {
        int from_fifo;
        i64 fh = w->fhead[d], qh = rq->head;
        int fifo = fh < w->ftail[d];
        int queued = rq->tail > qh && q[qh].t <= t;
        if (fifo && queued) from_fifo = ent_less(f[fh].t, f[fh].k, q[qh].t, q[qh].k);
        else if (fifo) from_fifo = 1;
        else if (queued) from_fifo = 0;
        else break;
        i64 c;
        if (from_fifo) {
            c = f[fh].k & QMASK;
            w->fhead[d] = fh + 1;
        } else {
            c = q[qh].k & QMASK;
            rq_pop(rq, q);
        }
        double dt = p->optime[c * D + d];
        /* what the op's FINISH reads: its inputs' pairs, its outputs' readers */
        PREFETCH(&p->in_pair[p->in_ptr[c]]);
        PREFETCH(&p->tensor_pair_ptr[p->op_tensor_ptr[c]]);
        PREFETCH(&p->tensor_bytes[p->op_tensor_ptr[c]]);
        start[c] = t;
        finish[c] = t + dt;
        w->busy[d] += 1;
        busy_time[d] += dt;
        w->mem[d] += p->out_alloc_total[c];
        if (w->mem[d] > peak[d]) peak[d] = w->mem[d];
        ev_push(ev, t + dt, ((i64)FINISH << KSHIFT) + c);
    }
    /* Ops left in the ready queue become ready when a transfer lands; its XFER event dispatches d then. */
}

/* Index of the engine among free[base:base+cap] that frees first (the lowest on ties). */
static inline i64 first_free(const double *free, i64 base, i64 cap) {
    i64 k = base;
    for (i64 j = base + 1; j < base + cap; j++)
        if (free[j] < free[k]) k = j;
    return k;
}

static inline double dmax(double a, double b) { return a > b ? a : b; }

static double run_one(const Problem *p, Work *w, const i64 *dev, double *start, double *finish, double *busy_time,
                      i64 *peak, double *link_time, i64 *link_bytes, double *seg_time, i64 *xf_tensor, i64 *xf_src,
                      i64 *xf_dst, double *xf_start, double *xf_end, double *xf_land, i64 *n_transfers) {
    const i64 n = p->n, D = p->D, T = p->T, S = p->S, R = p->R;
    i64 nx = 0;
    Events ev = {w->ev, 0, 0};
    memset(w->qbase, 0, sizeof(i64) * (D + 1));
    for (i64 i = 0; i < n; i++) w->qbase[dev[i] + 1] += 1;
    for (i64 d = 0; d < D; d++) w->qbase[d + 1] += w->qbase[d];
    memset(w->rq, 0, sizeof(Ready) * D);
    memset(w->fhead, 0, sizeof(i64) * D);
    memset(w->ftail, 0, sizeof(i64) * D);
    i64 seq = 0;
    memset(w->busy, 0, sizeof(i64) * D);
    for (i64 tt = 0; tt < T; tt++) {
        w->buf[tt].ref = 0;
        w->buf[tt].bytes = p->tensor_alloc[tt];
    }
    memset(w->mem, 0, sizeof(i64) * D);
    memset(w->link_free, 0, sizeof(double) * D * D);
    memset(w->seg_free, 0, sizeof(double) * (S + 1));
    memset(w->seg_time, 0, sizeof(double) * (S + 1));
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
        w->op[i].ready = 0.0;
        w->op[i].cnt = (int32_t)(p->in_ptr[i + 1] - p->in_ptr[i]);
        w->op[i].dev = (int32_t)dev[i];
    }
    for (i64 j = 0; j < n; j++) { /* sources, in topological order */
        i64 i = p->order[j];
        if (w->op[i].cnt == 0) enqueue(p, w, i, dev[i], 0.0, 0.0, seq++);
    }
    for (i64 d = 0; d < D; d++) {
        if (has_queued(w, d)) {
            ev_push(&ev, 0.0, ((i64)DISPATCH << KSHIFT) + d);
            w->pend[d] = 0.0;
        }
    }
    double makespan = 0.0;
    while (ev.size > 0) {
        const Ent *top = ev_top(&ev);
        double t = top->t;
        i64 key = top->k;
        ev_pop(&ev);
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
                    i64 c = p->pair_op[pr];
                    OpState *oc = w->op + c;
                    i64 dc = oc->dev;
                    double arrival;
                    if (dc == d) {
                        w->pair_buf[pr] = buf;
                        w->buf[buf].ref += 1;
                        arrival = t;
                    } else {
                        if (w->stamp[dc] != tt) {
                            w->stamp[dc] = tt;
                            i64 l = d * D + dc, ks = -1, kr = -1;
                            const i64 *route = p->route + l * R;
                            double xs = dmax(t, w->link_free[l]);
                            if (p->send_cap[d] > 0) {
                                ks = first_free(w->send_free, d * p->ES, p->send_cap[d]);
                                xs = dmax(xs, w->send_free[ks]);
                            }
                            if (p->recv_cap[dc] > 0) {
                                kr = first_free(w->recv_free, dc * p->ER, p->recv_cap[dc]);
                                xs = dmax(xs, w->recv_free[kr]);
                            }
                            /* a padded route reads the spare segment S, whose free time stays 0 */
                            for (i64 r = 0; r < R; r++) xs = dmax(xs, w->seg_free[route[r]]);
                            double occ = p->overhead[l] + (double)b / p->bandwidth[l];
                            double xe = xs + occ;
                            w->link_free[l] = xe;
                            if (ks >= 0) w->send_free[ks] = xe;
                            if (kr >= 0) w->recv_free[kr] = xe;
                            for (i64 r = 0; r < R; r++) {
                                w->seg_free[route[r]] = xe;
                                w->seg_time[route[r]] += occ;
                            }
                            w->seg_free[S] = 0.0;
                            link_time[l] += occ;
                            link_bytes[l] += b;
                            xf_tensor[nx] = tt;
                            xf_src[nx] = d;
                            xf_dst[nx] = dc;
                            xf_start[nx] = xs;
                            xf_end[nx] = xe;
                            xf_land[nx] = xe + p->latency[l];
                            w->xf_buf[nx] = buf;
                            w->buf[buf].ref += 1;
                            /* the received copy is allocated when the transfer is issued */
                            w->buf[T + nx].ref = 0;
                            w->buf[T + nx].bytes = b;
                            w->mem[dc] += b;
                            if (w->mem[dc] > peak[dc]) peak[dc] = w->mem[dc];
                            w->xid_of[dc] = nx;
                            /* A link's transfers land in the order they were issued (starts and ends are
                             * FIFO per link and its latency is fixed), so only its oldest pending landing
                             * needs to be in the event queue; the rest wait on a list (same event order). */
                            w->xf_next[nx] = -1;
                            if (w->link_tail[l] < 0) {
                                ev_push(&ev, xf_land[nx], ((i64)XFER << KSHIFT) + nx);
                            } else {
                                w->xf_next[w->link_tail[l]] = nx;
                            }
                            w->link_tail[l] = nx;
                            nx += 1;
                        }
                        i64 x = w->xid_of[dc];
                        w->buf[T + x].ref += 1;
                        w->pair_buf[pr] = T + x;
                        arrival = xf_land[x];
                    }
                    oc->ready = dmax(arrival, oc->ready);
                    /* No DISPATCH event for a remote device: the op's last input is a transfer to dc
                     * whose XFER event lands exactly at ready[c], and that event dispatches dc. */
                    if (--oc->cnt == 0) enqueue(p, w, c, dc, oc->ready, t, seq++);
                }
            }
            /* release the input buffers this op was holding (after delivery: a view's readers hold its base) */
            i64 freed = p->unconsumed_alloc[i];
            for (i64 q = p->in_ptr[i]; q < p->in_ptr[i + 1]; q++) {
                Buf *bq = w->buf + w->pair_buf[p->in_pair[q]];
                i64 r = --bq->ref;
                freed += bq->bytes & -(i64)(r == 0); /* without a branch: whether it frees is data-dependent */
            }
            w->mem[d] -= freed;
            if (has_queued(w, d)) {
                if (ev_none_by(&ev, t)) {
                    dispatch(p, w, &ev, d, t, start, finish, busy_time, peak);
                } else if (t < w->pend[d]) {
                    ev_push(&ev, t, ((i64)DISPATCH << KSHIFT) + d);
                    w->pend[d] = t;
                }
            }
        } else if (kind == XFER) {
            i64 x = ident, dc = xf_dst[x], nxt = w->xf_next[x];
            if (nxt >= 0) {
                ev_push(&ev, xf_land[nxt], ((i64)XFER << KSHIFT) + nxt);
            } else {
                w->link_tail[xf_src[x] * D + dc] = -1;
            }
            Buf *bq = w->buf + w->xf_buf[x];
            i64 r = --bq->ref;
            w->mem[xf_src[x]] -= bq->bytes & -(i64)(r == 0);
            if (w->busy[dc] < p->concurrency[dc] && ready_now(w, dc, t)) {
                if (ev_none_by(&ev, t)) {
                    dispatch(p, w, &ev, dc, t, start, finish, busy_time, peak);
                } else if (t < w->pend[dc]) {
                    ev_push(&ev, t, ((i64)DISPATCH << KSHIFT) + dc);
                    w->pend[dc] = t;
                }
            }
        } else {
            i64 d = ident;
            if (w->pend[d] <= t) w->pend[d] = INFINITY;
            dispatch(p, w, &ev, d, t, start, finish, busy_time, peak);
        }
    }
    /* seg_time is zeroed by the caller: adding the run's sums to it stores them exactly */
    for (i64 s = 0; s < S; s++) seg_time[s] += w->seg_time[s];
    *n_transfers = nx;
    return makespan;
}

/* Simulate B placements (rows of devs[B, n]). Per-placement outputs have a leading B axis;
 * start/finish/xf_* are scratch shared by all rows (the last row's timeline is left in them).
 * Returns 0, or -1 if memory could not be allocated (or n >= 2^31). */
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
    if (n >= (((i64)1) << 31)) return -1; /* ready-queue keys hold the op in 32 bits */
    Problem p = {n, T, P, D, S, optime, order, tensor_src, tensor_bytes, tensor_alloc, op_tensor_ptr,
                 tensor_pair_ptr, pair_op, pair_tensor, in_ptr, in_pair, out_alloc_total, unconsumed_alloc,
                 param_bytes, alias_pair, bandwidth, latency, overhead, route_ptr, route_seg, send_cap, recv_cap,
                 concurrency, 1, 1, 0, NULL};
    for (i64 d = 0; d < D; d++) {
        if (send_cap[d] > p.ES) p.ES = send_cap[d];
        if (recv_cap[d] > p.ER) p.ER = recv_cap[d];
    }
    for (i64 l = 0; l < D * D; l++)
        if (route_ptr[l + 1] - route_ptr[l] > p.R) p.R = route_ptr[l + 1] - route_ptr[l];
    p.route = malloc(sizeof(i64) * (D * D * p.R + 1));
    Work w;
    if (!p.route || work_alloc(&w, &p) != 0) {
        free(p.route);
        return -1;
    }
    for (i64 l = 0; l < D * D; l++)
        for (i64 r = 0; r < p.R; r++)
            p.route[l * p.R + r] = route_ptr[l] + r < route_ptr[l + 1] ? route_seg[route_ptr[l] + r] : S;
    for (i64 b = 0; b < B; b++) {
        step_time[b] = run_one(&p, &w, devs + b * n, start, finish, busy_time + b * D, peak + b * D,
                               link_time + b * D * D, link_bytes + b * D * D, seg_time + b * S, xf_tensor, xf_src,
                               xf_dst, xf_start, xf_end, xf_land, n_transfers + b);
    }
    free(w.block);
    free(p.route);
    return 0;
}
