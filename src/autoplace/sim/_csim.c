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
 *
 * Speed otherwise comes from memory layout and fewer data-dependent branches: a link's and a
 * device's state each sit in one record, an op's run state (ready time, inputs pending, device) in
 * another; the graph's index arrays are int32; an op's graph data is prefetched when it is released
 * and its readers' when it starts (they are cold by the time it finishes on large graphs); buffer
 * releases subtract a masked size instead of branching. Sums (busy seconds, link seconds) are kept in
 * the records and added to the caller's zeroed outputs at the end of a run: the same bits as adding
 * to the outputs directly.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int64_t i64;
typedef int32_t i32; /* op, tensor, pair, buffer and transfer indices (the graph's index arrays come as int32) */

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
 * the op comes out of the key without a seq -> op table (ops are int32). */
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
            if (h[i - 1].t == t) {
                while (i > 0 && h[i - 1].t == t && h[i - 1].k < k) {
                    h[i] = h[i - 1];
                    i--;
                }
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
    i32 cnt, dev;
} OpState;

/* A link (ordered device pair s * D + d): its figures and its state in a run, in one cache line. */
typedef struct {
    double overhead, bandwidth, latency; /* bandwidth: the pair's transfer bandwidth */
    double free, time;                   /* when it is free; seconds busy so far */
    i64 bytes, tail;                     /* bytes sent so far; its newest transfer in flight, or -1 */
    i64 route;                           /* its route: Problem.route[route : route + R] */
} Link;

/* A device's state in a run. Ops ready later than the instant they were released wait in its ready
 * queue (q[qbase:], rq), ops ready at once in a FIFO (f[qbase + fhead : qbase + ftail]), already in
 * (ready time, key) order. */
typedef struct {
    i64 qbase, fhead, ftail;
    Ready rq;
    i64 nfree;              /* free slots: concurrency - running ops */
    i64 mem, peak;          /* bytes allocated now, and at most */
    double pend, busy;      /* its earliest pending DISPATCH (+inf: none); seconds busy */
    i64 stamp, xid;         /* the last tensor sent to it, and that transfer */
    i32 send_cap, recv_cap;        /* copy engines, 0: no limit */
    double *send_free, *recv_free; /* when each of them is free */
} Dev; /* 128 bytes (LP64): indexing it is a shift */

typedef struct {
    /* graph */
    i64 n, T, P, D, S;
    const double *optime; /* [n, D] */
    const i64 *order, *tensor_bytes, *tensor_alloc, *out_alloc_total, *unconsumed_alloc, *param_bytes;
    const i32 *op_tensor_ptr, *tensor_pair_ptr, *pair_op, *in_ptr, *in_pair, *alias_pair;
    const i32 *op_pair_ptr; /* op i's readers: pairs op_pair_ptr[i]:op_pair_ptr[i + 1] (tensor_pair_ptr[op_tensor_ptr]) */
    /* cluster */
    const double *bandwidth, *latency, *overhead;
    const i64 *send_cap, *recv_cap, *concurrency;
    i64 ES, ER; /* engines per device in send_free / recv_free (at least 1) */
    i64 R;      /* the longest route, rounded up to even; routes are padded with the spare segment S */
    i64 *route; /* [D * D * R] */
} Problem;

typedef struct {
    Ent *q, *f, *ev;
    Buf *buf;
    OpState *op;
    Link *link;
    Dev *dev;
    double *seg_free, *seg_time, *send_free, *recv_free;
    i32 *pair_buf, *xf_buf, *xf_next; /* each pair's buffer; each transfer's source buffer and the next on its link */
    void *block;
} Work;

static int work_alloc(Work *w, const Problem *p) {
    i64 n = p->n, T = p->T, P = p->P, D = p->D, S = p->S, cap = 2 * n + P + D + 1;
    size_t ents = (size_t)(n + n + cap + 1 + (T + P) + n); /* q, f, ev; buf, op (as large as an Ent) */
    size_t dbls = (size_t)((S + 1) + (S + 1) + D * p->ES + D * p->ER);
    size_t ints = (size_t)(P + P + P);
    char *b = malloc(ents * sizeof(Ent) + D * D * sizeof(Link) + D * sizeof(Dev) + dbls * sizeof(double) +
                     ints * sizeof(i32));
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
    w->link = (Link *)ep;
    w->dev = (Dev *)(w->link + D * D);
    double *dp = (double *)(w->dev + D);
    w->seg_free = dp; dp += S + 1;
    w->seg_time = dp; dp += S + 1;
    w->send_free = dp; dp += D * p->ES;
    w->recv_free = dp; dp += D * p->ER;
    i32 *ip = (i32 *)dp;
    w->pair_buf = ip; ip += P;
    w->xf_buf = ip; ip += P;
    w->xf_next = ip;
    return 0;
}

/* Release op c on device dc, ready at time r (>= t), as release number seq: FIFO if r == t, else the
 * ready queue. */
static inline void enqueue(const Problem *p, Work *w, i64 c, i64 dc, double r, double t, i64 seq) {
    Dev *v = w->dev + dc;
    i64 key = (seq << QSHIFT) | c;
    /* what the op reads when it starts and finishes */
    PREFETCH(&p->optime[c * p->D]);
    PREFETCH(&p->in_ptr[c]);
    PREFETCH(&p->op_tensor_ptr[c]);
    PREFETCH(&p->alias_pair[c]);
    PREFETCH(&p->op_pair_ptr[c]);
    PREFETCH(&p->out_alloc_total[c]);
    PREFETCH(&p->unconsumed_alloc[c]);
    if (r <= t) {
        Ent *e = w->f + v->qbase + v->ftail++;
        e->t = r;
        e->k = key;
    } else {
        rq_push(&v->rq, w->q + v->qbase, r, key);
    }
}

static inline int has_queued(const Dev *v) { return v->rq.tail > v->rq.head || v->fhead < v->ftail; }

static inline int ready_now(const Work *w, const Dev *v, double t) {
    return v->fhead < v->ftail || (v->rq.tail > v->rq.head && w->q[v->qbase + v->rq.head].t <= t);
}

/* Start ready ops on device d at time t (earliest ready first, ties by release order) while it has
 * a free slot. */
INLINE void dispatch(const Problem *p, Work *w, Events *ev, i64 d, double t, double *start, double *finish) {
    Dev *v = w->dev + d;
    Ent *q = w->q + v->qbase, *f = w->f + v->qbase;
    while (v->nfree > 0) {
        int from_fifo;
        i64 fh = v->fhead, qh = v->rq.head;
        int fifo = fh < v->ftail;
        int queued = v->rq.tail > qh && q[qh].t <= t;
        if (fifo && queued) from_fifo = ent_less(f[fh].t, f[fh].k, q[qh].t, q[qh].k);
        else if (fifo) from_fifo = 1;
        else if (queued) from_fifo = 0;
        else break;
        i64 c;
        if (from_fifo) {
            c = f[fh].k & QMASK;
            v->fhead = fh + 1;
        } else {
            c = q[qh].k & QMASK;
            rq_pop(&v->rq, q);
        }
        double dt = p->optime[c * p->D + d];
        /* what the op's FINISH reads: its inputs' pairs, its outputs' readers */
        PREFETCH(&p->in_pair[p->in_ptr[c]]);
        PREFETCH(&p->pair_op[p->op_pair_ptr[c]]);
        PREFETCH(&p->tensor_pair_ptr[p->op_tensor_ptr[c]]);
        PREFETCH(&p->tensor_bytes[p->op_tensor_ptr[c]]);
        start[c] = t;
        finish[c] = t + dt;
        v->nfree -= 1;
        v->busy += dt;
        v->mem += p->out_alloc_total[c];
        if (v->mem > v->peak) v->peak = v->mem;
        ev_push(ev, t + dt, ((i64)FINISH << KSHIFT) + c);
    }
    /* Ops left in the ready queue become ready when a transfer lands; its XFER event dispatches d then. */
}

/* The engine among free[0:cap] that frees first (the lowest on ties). */
static inline double *first_free(double *free, i64 cap) {
    double *k = free;
    for (i64 j = 1; j < cap; j++)
        if (free[j] < *k) k = free + j;
    return k;
}

static inline double dmax(double a, double b) { return a > b ? a : b; }

/* Device d's DISPATCH at time t: now if no other event is due by then, else as an event (once). */
INLINE void dispatch_at(const Problem *p, Work *w, Events *ev, i64 d, double t, double *start, double *finish) {
    if (ev_none_by(ev, t)) {
        dispatch(p, w, ev, d, t, start, finish);
    } else if (t < w->dev[d].pend) {
        ev_push(ev, t, ((i64)DISPATCH << KSHIFT) + d);
        w->dev[d].pend = t;
    }
}

static double run_one(const Problem *p, Work *w, const i64 *dev, double *start, double *finish, double *busy_time,
                      i64 *peak, double *link_time, i64 *link_bytes, double *seg_time, i64 *xf_tensor, i64 *xf_src,
                      i64 *xf_dst, double *xf_start, double *xf_end, double *xf_land, i64 *n_transfers) {
    const i64 n = p->n, D = p->D, T = p->T, P = p->P, S = p->S, R = p->R;
    i64 nx = 0, seq = 0;
    Events ev = {w->ev, 0, 0};
    for (i64 d = 0; d < D; d++) {
        Dev *v = w->dev + d;
        memset(v, 0, sizeof(Dev));
        v->nfree = p->concurrency[d];
        v->pend = INFINITY;
        v->stamp = -1;
        v->send_cap = (i32)p->send_cap[d];
        v->recv_cap = (i32)p->recv_cap[d];
        v->send_free = w->send_free + d * p->ES;
        v->recv_free = w->recv_free + d * p->ER;
    }
    for (i64 l = 0; l < D * D; l++) {
        Link *k = w->link + l;
        k->overhead = p->overhead[l];
        k->bandwidth = p->bandwidth[l];
        k->latency = p->latency[l];
        k->free = k->time = 0.0;
        k->bytes = 0;
        k->tail = -1;
        k->route = l * R;
    }
    for (i64 i = 0; i < n; i++) {
        Dev *v = w->dev + dev[i];
        v->qbase += 1; /* counts for now */
        v->mem += p->param_bytes[i];
        w->op[i].ready = 0.0;
        w->op[i].cnt = (i32)(p->in_ptr[i + 1] - p->in_ptr[i]);
        w->op[i].dev = (i32)dev[i];
    }
    for (i64 d = 0, base = 0; d < D; d++) { /* device d's queues start after those of the devices before it */
        i64 cnt = w->dev[d].qbase;
        w->dev[d].qbase = base;
        w->dev[d].peak = w->dev[d].mem;
        base += cnt;
    }
    for (i64 tt = 0; tt < T; tt++) {
        w->buf[tt].ref = 0;
        w->buf[tt].bytes = p->tensor_alloc[tt];
    }
    memset(w->seg_free, 0, sizeof(double) * (S + 1));
    memset(w->seg_time, 0, sizeof(double) * (S + 1));
    memset(w->send_free, 0, sizeof(double) * D * p->ES);
    memset(w->recv_free, 0, sizeof(double) * D * p->ER);
    for (i64 j = 0; j < n; j++) { /* sources, in topological order */
        i64 i = p->order[j];
        if (w->op[i].cnt == 0) enqueue(p, w, i, dev[i], 0.0, 0.0, seq++);
    }
    for (i64 d = 0; d < D; d++) {
        if (has_queued(w->dev + d)) {
            ev_push(&ev, 0.0, ((i64)DISPATCH << KSHIFT) + d);
            w->dev[d].pend = 0.0;
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
            i64 i = ident, d = w->op[i].dev;
            Dev *vd = w->dev + d;
            Link *links = w->link + d * D; /* the links out of d */
            vd->nfree += 1;
            if (t > makespan) makespan = t;
            /* a view's outputs live in the buffer of the input it aliases */
            i64 obuf = p->alias_pair[i] >= 0 ? w->pair_buf[p->alias_pair[i]] : -1;
            for (i64 tt = p->op_tensor_ptr[i]; tt < p->op_tensor_ptr[i + 1]; tt++) {
                i64 b = p->tensor_bytes[tt], buf = obuf >= 0 ? obuf : tt;
                for (i64 pr = p->tensor_pair_ptr[tt]; pr < p->tensor_pair_ptr[tt + 1]; pr++) {
                    i64 c = p->pair_op[pr];
                    PREFETCH(w->op + p->pair_op[pr + 2 < P ? pr + 2 : P - 1]); /* a later reader's state */
                    OpState *oc = w->op + c;
                    i64 dc = oc->dev;
                    double arrival;
                    if (dc == d) {
                        w->pair_buf[pr] = (i32)buf;
                        w->buf[buf].ref += 1;
                        arrival = t;
                    } else {
                        Dev *vc = w->dev + dc;
                        if (vc->stamp != tt) { /* the first reader of tt on device dc: send tt there */
                            vc->stamp = tt;
                            Link *k = links + dc;
                            const i64 *route = p->route + k->route;
                            double *ks = NULL, *kr = NULL; /* the engines it takes */
                            double xs = dmax(t, k->free);
                            if (vd->send_cap > 0) {
                                ks = first_free(vd->send_free, vd->send_cap);
                                xs = dmax(xs, *ks);
                            }
                            if (vc->recv_cap > 0) {
                                kr = first_free(vc->recv_free, vc->recv_cap);
                                xs = dmax(xs, *kr);
                            }
                            /* a padded route reads the spare segment S, whose free time stays 0 */
                            for (i64 r = 0; r < R; r += 2) /* R is even: two segments a step */
                                xs = dmax(dmax(xs, w->seg_free[route[r]]), w->seg_free[route[r + 1]]);
                            double occ = k->overhead + (double)b / k->bandwidth;
                            double xe = xs + occ;
                            k->free = xe;
                            if (ks) *ks = xe;
                            if (kr) *kr = xe;
                            for (i64 r = 0; r < R; r += 2) {
                                w->seg_free[route[r]] = xe;
                                w->seg_time[route[r]] += occ;
                                w->seg_free[route[r + 1]] = xe;
                                w->seg_time[route[r + 1]] += occ;
                            }
                            w->seg_free[S] = 0.0;
                            k->time += occ;
                            k->bytes += b;
                            xf_tensor[nx] = tt;
                            xf_src[nx] = d;
                            xf_dst[nx] = dc;
                            xf_start[nx] = xs;
                            xf_end[nx] = xe;
                            xf_land[nx] = xe + k->latency;
                            w->xf_buf[nx] = (i32)buf;
                            w->buf[buf].ref += 1;
                            /* the received copy is allocated when the transfer is issued */
                            w->buf[T + nx].ref = 0;
                            w->buf[T + nx].bytes = b;
                            vc->mem += b;
                            if (vc->mem > vc->peak) vc->peak = vc->mem;
                            vc->xid = nx;
                            /* A link's transfers land in the order they were issued (starts and ends are
                             * FIFO per link and its latency is fixed), so only its oldest pending landing
                             * needs to be in the event queue; the rest wait on a list (same event order). */
                            w->xf_next[nx] = -1;
                            if (k->tail < 0) {
                                ev_push(&ev, xf_land[nx], ((i64)XFER << KSHIFT) + nx);
                            } else {
                                w->xf_next[k->tail] = (i32)nx;
                            }
                            k->tail = nx;
                            nx += 1;
                        }
                        i64 x = vc->xid;
                        w->buf[T + x].ref += 1;
                        w->pair_buf[pr] = (i32)(T + x);
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
            vd->mem -= freed;
            if (has_queued(vd)) dispatch_at(p, w, &ev, d, t, start, finish);
        } else if (kind == XFER) {
            i64 x = ident, s = xf_src[x], dc = xf_dst[x], nxt = w->xf_next[x];
            if (nxt >= 0) {
                ev_push(&ev, xf_land[nxt], ((i64)XFER << KSHIFT) + nxt);
            } else {
                w->link[s * D + dc].tail = -1;
            }
            Buf *bq = w->buf + w->xf_buf[x];
            i64 r = --bq->ref;
            w->dev[s].mem -= bq->bytes & -(i64)(r == 0);
            Dev *vc = w->dev + dc;
            if (vc->nfree > 0 && ready_now(w, vc, t)) dispatch_at(p, w, &ev, dc, t, start, finish);
        } else {
            i64 d = ident;
            if (w->dev[d].pend <= t) w->dev[d].pend = INFINITY;
            dispatch(p, w, &ev, d, t, start, finish);
        }
    }
    /* The outputs are zeroed by the caller: adding the run's sums to them stores them exactly. */
    for (i64 d = 0; d < D; d++) {
        busy_time[d] += w->dev[d].busy;
        peak[d] = w->dev[d].peak;
    }
    for (i64 l = 0; l < D * D; l++) {
        link_time[l] += w->link[l].time;
        link_bytes[l] += w->link[l].bytes;
    }
    for (i64 s = 0; s < S; s++) seg_time[s] += w->seg_time[s];
    *n_transfers = nx;
    return makespan;
}

/* The argument list's version: _cbackend refuses a build whose ap_abi differs (or that has none),
 * so a stale build is never called with the wrong arguments. */
int ap_abi(void) { return 3; }

/* Simulate B placements (rows of devs[B, n]). Per-placement outputs have a leading B axis;
 * start/finish/xf_* are scratch shared by all rows (the last row's timeline is left in them).
 * The graph's index arrays (op_tensor_ptr, tensor_pair_ptr, pair_op, in_ptr, in_pair, alias_pair,
 * op_pair_ptr) are int32. Returns 0, -1 if memory could not be allocated, -2 if the graph has 2^31 - 1
 * ops, or tensors and pairs, or more. */
int ap_simulate(i64 B, i64 n, i64 T, i64 P, i64 D, i64 S, const i64 *devs, const double *optime, const i64 *order,
                const i64 *tensor_src, const i64 *tensor_bytes, const i64 *tensor_alloc, const i32 *op_tensor_ptr,
                const i32 *tensor_pair_ptr, const i32 *pair_op, const i64 *pair_tensor, const i32 *in_ptr,
                const i32 *in_pair, const i64 *out_alloc_total, const i64 *unconsumed_alloc,
                const i64 *param_bytes, const i32 *alias_pair, const i32 *op_pair_ptr, const double *bandwidth,
                const double *latency, const double *overhead, const i64 *route_ptr, const i64 *route_seg,
                const i64 *send_cap, const i64 *recv_cap, const i64 *concurrency, double *start, double *finish,
                double *step_time, double *busy_time, i64 *peak, double *link_time, i64 *link_bytes,
                double *seg_time, i64 *n_transfers, i64 *xf_tensor, i64 *xf_src, i64 *xf_dst, double *xf_start,
                double *xf_end, double *xf_land) {
    (void)tensor_src;
    (void)pair_tensor;
    if (n >= INT32_MAX || T + P >= INT32_MAX) return -2; /* indices are int32 */
    Problem p = {n, T, P, D, S, optime, order, tensor_bytes, tensor_alloc, out_alloc_total, unconsumed_alloc,
                 param_bytes, op_tensor_ptr, tensor_pair_ptr, pair_op, in_ptr, in_pair, alias_pair, op_pair_ptr,
                 bandwidth, latency, overhead, send_cap, recv_cap, concurrency, 1, 1, 0, NULL};
    for (i64 d = 0; d < D; d++) {
        if (send_cap[d] > p.ES) p.ES = send_cap[d];
        if (recv_cap[d] > p.ER) p.ER = recv_cap[d];
    }
    for (i64 l = 0; l < D * D; l++)
        if (route_ptr[l + 1] - route_ptr[l] > p.R) p.R = route_ptr[l + 1] - route_ptr[l];
    p.R += p.R & 1; /* even: the loops take two segments a step */
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
