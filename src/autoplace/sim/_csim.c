/* The simulator's event loop in C: the same algorithm, event order and arithmetic as
 * autoplace/sim/_kernel.py (the numba kernel, which stays as the portable fallback and as the
 * reference the tests compare this one against, bit for bit). Loaded with ctypes; no Python API is used.
 *
 * Events are ordered by (time, kind, id): FINISH(op)=0, LAUNCHED(op)=1, XEND(transfer)=2,
 * SEGEND(generation)=3, XLAND(transfer)=4, XQUEUE(transfer)=5, LFREE(launcher)=6. See _kernel.py's
 * module docstring for the semantics.
 *
 * Every key in the event queue is unique, so any correct priority queue pops the same sequence. The
 * queue holds few entries (a FINISH per busy slot, a LAUNCHED per busy launcher, the transfers in flight),
 * so it is kept as a sorted array — popping is then free and inserting shifts the few entries that pop
 * earlier — and turns into a binary heap while it grows past a few dozen entries. Ops, kernels and copies
 * to submit wait in FIFOs (they are released in the order they become ready), copies in per-queue lists.
 *
 * Why one long file: it is the numba kernel's event loop in C, kept line for line beside it (the two must
 * agree bit for bit, and are read side by side).
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


#define FINISH 0
#define LAUNCHED 1
#define XEND 2
#define SEGEND 3
#define XLAND 4
#define XQUEUE 5
#define LFREE 6

enum { L_FREE = 0, L_BUSY = 1, L_SYNC = 2, L_DEPTH = 3 };

/* spos of a communication op (a collective's step, run by the communication library: never queued) */
#define COMM (-2)

static inline i64 key_of(i64 kind, i64 id) { return (kind << KSHIFT) + id; }
static inline double dmax(double a, double b) { return a > b ? a : b; }

/* The entry points' arguments, a struct each: their fields are autoplace/sim/_args.py's named tuples
 * (GraphArrays, ClusterArrays, TraceArrays, RowArrays) in order, which ap_struct_fields lists so that
 * _cbackend refuses a build whose lists differ. The graph's index arrays are int32. */
typedef struct {
    i64 n_ops, n_tensors, n_pairs;
    const i64 *order, *tensor_src, *tensor_bytes, *tensor_alloc, *tensor_out;
    const i32 *op_tensor_ptr, *tensor_pair_ptr, *pair_op;
    const i64 *pair_tensor;
    const i32 *in_ptr, *in_pair;
    const i64 *out_alloc_total, *unconsumed_alloc, *param_bytes;
    const i32 *alias_pair, *op_pair_ptr, *op_group;
    const i64 *group_launch;
} ApGraph;

typedef struct {
    i64 n_devices, n_segments, n_launchers;
    const double *bandwidth, *latency, *overhead;
    const i64 *route_ptr, *route_seg;
    const double *seg_bw;
    const i64 *send_cap, *recv_cap, *concurrency, *launcher;
    const double *launch_cost;
    const i64 *qdepth;
} ApCluster;

/* A run's timeline: scratch that every row of a call writes (the last row's is left in it). */
typedef struct {
    double *start, *finish, *lstart;
    i64 *xf_tensor, *xf_src, *xf_dst;
    double *xf_start, *xf_end, *xf_land;
} ApTrace;

/* Per-placement outputs, each with a leading row axis (zeroed by the caller where runs add to them). */
typedef struct {
    double *step_time, *busy_time, *host_time;
    i64 *peak;
    double *link_time;
    i64 *link_bytes;
    double *seg_time;
    i64 *n_transfers, *n_finished;
} ApRows;

/* What the loop reads: the graph's and cluster's arrays beside the sizes (G: launch groups). */
typedef struct {
    /* graph */
    i64 n, T, P, D, S, H, G;
    const double *optime; /* [n, D] */
    const i64 *order, *tensor_src, *tensor_bytes, *tensor_alloc, *tensor_out, *pair_tensor, *out_alloc_total,
        *unconsumed_alloc, *param_bytes, *group_launch; /* group_launch[g * D + d]: 0 where g is no group */
    const i32 *op_tensor_ptr, *tensor_pair_ptr, *pair_op, *in_ptr, *in_pair, *alias_pair, *op_pair_ptr, *op_group;
    /* cluster */
    const double *bandwidth, *latency, *overhead, *seg_bw, *launch_cost;
    const i64 *route_ptr, *route_seg, *send_cap, *recv_cap, *concurrency, *launcher, *qdepth;
} Problem;

/* Outputs of one run. */
typedef struct {
    double *start, *finish, *lstart, *busy_time, *host_time, *link_time, *seg_time;
    i64 *peak, *link_bytes, *xf_tensor, *xf_src, *xf_dst;
    double *xf_start, *xf_end, *xf_land;
} Out;

typedef struct {
    i64 ref, bytes;
} Buf;

/* An op's state in a run: inputs still awaited, its device, whether any of its outputs leaves the device
 * (an asynchronous op's FINISH has nothing to deliver otherwise). One record: one cache line touched. */
typedef struct {
    i32 cnt, dev, remote, held; /* held: released, waiting for its turn in its device's schedule */
} OpState;

typedef struct {
    i64 fbase, fhead, ftail; /* FIFO of ops (synchronous) or kernels (asynchronous) in w->fq */
    i64 nfree, inflight;     /* free slots; launched kernels not yet finished */
    i64 mem, peak;
    i64 stamp, stamp2, xid;  /* the last tensor sent to it (at FINISH, at LAUNCHED), and that transfer */
    i64 launcher;            /* -1: synchronous */
    i64 turn;                /* under a schedule: the place in its order of the op whose turn it is */
    double busy, host;       /* seconds busy; seconds its launcher spent on it (added to the outputs at the end) */
} Dev;

typedef struct {
    i64 lbase, lhead, ltail; /* FIFO of ops in w->lq */
    i64 shead, stail;        /* copies to submit: a list through w->snext */
    i64 state, wait;
} Launcher;

typedef struct {
    Ent *ev;
    Buf *buf;
    Dev *dev;
    Launcher *lau;
    OpState *op;
    i64 *fq, *dirty, *isdirty, *gseen; /* fq: the devices' FIFOs, then the communication queue at nq */
    i64 nq;          /* ops that are no communication op */
    const i64 *spos; /* this row's schedule: each op's place in its device's order (-1: ready order) */
    i64 *sop;        /* the schedule's orders: device d's in sop[fbase:fbase + its ops] */
    i64 *lq; /* a launcher's FIFO keys: (release number << QSHIFT) | op */
    i32 *lqd; /* beside each: the op's device */
    double *lend, *psum;
    i32 *pair_buf;
    i64 *xbuf, *xq, *xsub, *xseq, *snext, *qnext, *act;
    double *xrem, *xrate, *xtl, *xendp;
    i64 *qcap, *quse, *qh, *qt, *nseg;
    double *sbusy, *share; /* share[g]: seg_bw[g] / nseg[g], updated as nseg[g] changes */
    i64 *itd; /* where not NULL (a recorded run): the event count at which each op delivered to its readers */
    void *block;
} Work;

typedef struct {
    Events ev;
    i64 seq, nx, ndirty, nact, gen, reshare, finished;
    double t;
    i64 chead, ctail; /* the communication queue: w->fq[nq + chead : nq + ctail] */
    /* The live SEGEND event (generation gen, due at seg_t) while seg_live: kept beside the queue rather than
     * in it, so that a generation a later reshare replaces is never queued and popped for nothing (popping
     * such a stale event changes nothing: the numba kernel pops them, with the same result). */
    int seg_live;
    double seg_t;
    i64 iter;        /* events popped so far */
    double makespan; /* the latest FINISH so far */
} Run;

/* The loop's Problem for an entry point's graph, cluster and op times. */
static Problem problem_of(const ApGraph *g, const ApCluster *c, const double *optime) {
    i64 G = 0;
    for (i64 i = 0; i < g->n_ops; i++)
        if (g->op_group[i] + 1 > G) G = g->op_group[i] + 1;
    Problem p = {g->n_ops, g->n_tensors, g->n_pairs, c->n_devices, c->n_segments, c->n_launchers, G, optime,
                 g->order, g->tensor_src, g->tensor_bytes, g->tensor_alloc, g->tensor_out, g->pair_tensor,
                 g->out_alloc_total, g->unconsumed_alloc, g->param_bytes, g->group_launch, g->op_tensor_ptr,
                 g->tensor_pair_ptr, g->pair_op, g->in_ptr, g->in_pair, g->alias_pair, g->op_pair_ptr, g->op_group,
                 c->bandwidth, c->latency, c->overhead, c->seg_bw, c->launch_cost, c->route_ptr, c->route_seg,
                 c->send_cap, c->recv_cap, c->concurrency, c->launcher, c->qdepth};
    return p;
}

/* Row b's outputs: its slices of rows, the timeline in trace. */
static Out row_out(const Problem *p, const ApTrace *tr, const ApRows *rows, i64 b) {
    const i64 D = p->D;
    Out o = {tr->start, tr->finish, tr->lstart, rows->busy_time + b * D, rows->host_time + b * D,
             rows->link_time + b * D * D, rows->seg_time + b * p->S, rows->peak + b * D, rows->link_bytes + b * D * D,
             tr->xf_tensor, tr->xf_src, tr->xf_dst, tr->xf_start, tr->xf_end, tr->xf_land};
    return o;
}

/* The graph is too large for int32 indices. */
static int too_large(const ApGraph *g) { return g->n_ops >= INT32_MAX || g->n_tensors + g->n_pairs >= INT32_MAX; }

struct Rec;
static void snap_take(const Problem *p, Work *w, const Run *r, Out *o, struct Rec *rec);

static int work_alloc(Work *w, const Problem *p) {
    i64 n = p->n, T = p->T, P = p->P, D = p->D, S = p->S, H = p->H, G = p->G;
    i64 cap = 3 * n + 6 * P + 2 * D + 2 * H + 8, NQ = 2 * D + D * D;
    size_t sz = sizeof(Ent) * (size_t)(cap + 1) + sizeof(Buf) * (size_t)(T + P) + sizeof(OpState) * (size_t)n +
                sizeof(Dev) * (size_t)D + sizeof(Launcher) * (size_t)(H + 1) +
                sizeof(i64) * (size_t)(n + n + n + 2 * (D + H + 1) + (G * D + 1) + P * 7 + NQ * 4 + (S + 1)) +
                sizeof(double) * (size_t)(n + n + P * 4 + 2 * (S + 1)) + sizeof(i32) * (size_t)(P + n);
    char *b = malloc(sz);
    if (!b) return -1;
    w->block = b;
    Ent *ep = (Ent *)b;
    ep->t = INFINITY; /* sentinel before the event queue */
    ep->k = 0;
    w->ev = ep + 1;
    ep += cap + 1;
    w->buf = (Buf *)ep;
    w->op = (OpState *)(w->buf + T + P);
    w->dev = (Dev *)(w->op + n);
    w->lau = (Launcher *)(w->dev + D);
    i64 *ip = (i64 *)(w->lau + H + 1);
    w->fq = ip; ip += n;
    w->lq = ip; ip += n;
    w->sop = ip; ip += n;
    w->dirty = ip; ip += D + H + 1;
    w->isdirty = ip; ip += D + H + 1;
    w->gseen = ip; ip += G * D + 1;
    w->xbuf = ip; ip += P;
    w->xq = ip; ip += P;
    w->xsub = ip; ip += P;
    w->xseq = ip; ip += P;
    w->snext = ip; ip += P;
    w->qnext = ip; ip += P;
    w->act = ip; ip += P;
    w->qcap = ip; ip += NQ;
    w->quse = ip; ip += NQ;
    w->qh = ip; ip += NQ;
    w->qt = ip; ip += NQ;
    w->nseg = ip; ip += S + 1;
    double *dp = (double *)ip;
    w->lend = dp; dp += n;
    w->psum = dp; dp += n;
    w->xrem = dp; dp += P;
    w->xrate = dp; dp += P;
    w->xtl = dp; dp += P;
    w->xendp = dp; dp += P;
    w->sbusy = dp; dp += S + 1;
    w->share = dp; dp += S + 1;
    w->pair_buf = (i32 *)dp;
    w->lqd = w->pair_buf + P;
    w->itd = NULL;
    return 0;
}

static inline void push(Run *r, double t, i64 kind, i64 id) { ev_push(&r->ev, t, key_of(kind, id)); }

/* Device k (< D) or launcher k - D may start work: dispatch it after this event. */
static inline void mark(Work *w, Run *r, i64 k) {
    if (!w->isdirty[k]) {
        w->isdirty[k] = 1;
        w->dirty[r->ndirty++] = k;
    }
}

/* Op c joins its launcher's FIFO (asynchronous device) or its device's; mark: dispatch that queue after
 * this event (not needed when it is being dispatched). */
static inline void admit(const Problem *p, Work *w, Run *r, i64 c, int mk) {
    i64 dc = w->op[c].dev;
    /* what the op reads when it starts and finishes */
    PREFETCH(&p->optime[c * p->D]);
    PREFETCH(&p->in_ptr[c]);
    PREFETCH(&p->op_tensor_ptr[c]);
    PREFETCH(&p->alias_pair[c]);
    PREFETCH(&p->op_pair_ptr[c]);
    PREFETCH(&p->out_alloc_total[c]);
    PREFETCH(&p->unconsumed_alloc[c]);
    i64 h = w->dev[dc].launcher;
    i64 seq = r->seq++;
    if (h >= 0) {
        Launcher *L = w->lau + h;
        w->lqd[L->lbase + L->ltail] = (i32)dc;
        w->lq[L->lbase + L->ltail++] = (seq << QSHIFT) | c;
        if (mk) mark(w, r, p->D + h);
    } else {
        Dev *v = w->dev + dc;
        w->fq[v->fbase + v->ftail++] = c;
        if (mk) mark(w, r, dc);
    }
}

/* Op c's last input has resolved. A communication op joins the communication queue (dispatch entry D + H).
 * Under a schedule an op is held until its device's turn comes to it; else it joins its queue. */
static inline void release(const Problem *p, Work *w, Run *r, i64 c) {
    i64 sp = w->spos[c];
    if (sp == COMM) {
        w->fq[w->nq + r->ctail++] = c;
        mark(w, r, p->D + p->H);
        return;
    }
    if (sp >= 0 && sp != w->dev[w->op[c].dev].turn) {
        w->op[c].held = 1;
        return;
    }
    admit(p, w, r, c, 1);
}

/* Device d has taken the op whose turn it was (started it, or its launcher launched it): the turn passes to
 * the next op of its schedule, which joins the queue being dispatched if it was held. */
static inline void next_turn(const Problem *p, Work *w, Run *r, i64 d) {
    Dev *v = w->dev + d;
    i64 k = ++v->turn;
    i64 end = d + 1 < p->D ? w->dev[d + 1].fbase : w->nq;
    if (v->fbase + k < end) {
        i64 c = w->sop[v->fbase + k];
        if (w->op[c].held) {
            w->op[c].held = 0;
            admit(p, w, r, c, 0);
        }
    }
}

/* Start transfers from the head of copy queue q while it has a free engine (0: no limit). */
static void serve(const Problem *p, Work *w, Run *r, Out *o, i64 q) {
    const i64 D = p->D;
    while (w->qh[q] >= 0 && (w->qcap[q] == 0 || w->quse[q] < w->qcap[q])) {
        i64 x = w->qh[q];
        w->qh[q] = w->qnext[x];
        if (w->qh[q] < 0) w->qt[q] = -1;
        w->quse[q] += 1;
        i64 s = o->xf_src[x], dc = o->xf_dst[x], l = s * D + dc;
        o->xf_start[x] = r->t;
        i64 b = p->tensor_bytes[o->xf_tensor[x]];
        if (p->route_ptr[l] == p->route_ptr[l + 1]) {
            push(r, r->t + (double)b / p->bandwidth[l], XEND, x);
        } else {
            for (i64 k = p->route_ptr[l]; k < p->route_ptr[l + 1]; k++) {
                i64 g = p->route_seg[k];
                if (w->nseg[g] == 0) w->sbusy[g] = r->t;
                w->nseg[g] += 1;
                w->share[g] = p->seg_bw[g] / (double)w->nseg[g];
            }
            w->xrem[x] = (double)b;
            w->xrate[x] = 0.0;
            w->xtl[x] = r->t;
            w->act[r->nact++] = x;
            w->xendp[x] = INFINITY;
            r->reshare = 1;
        }
    }
}

/* Transfer x joins the tail of its copy queue; the queue starts what it can. */
static inline void join(const Problem *p, Work *w, Run *r, Out *o, i64 x) {
    i64 q = w->xq[x];
    w->qnext[x] = -1;
    if (w->qt[q] < 0) w->qh[q] = x;
    else w->qnext[w->qt[q]] = x;
    w->qt[q] = x;
    serve(p, w, r, o, q);
}

/* Transfer x has moved its last byte: it frees its engine and segments and lands a latency later (the
 * caller lands it now when the latency is 0). */
static void end_transfer(const Problem *p, Work *w, Run *r, Out *o, i64 x) {
    const i64 D = p->D;
    i64 s = o->xf_src[x], dc = o->xf_dst[x], l = s * D + dc;
    double t = r->t;
    o->xf_end[x] = t;
    o->xf_land[x] = t + p->latency[l];
    o->link_time[l] += t - o->xf_start[x];
    for (i64 k = p->route_ptr[l]; k < p->route_ptr[l + 1]; k++) {
        i64 g = p->route_seg[k];
        w->nseg[g] -= 1;
        if (w->nseg[g] == 0) o->seg_time[g] += t - w->sbusy[g];
        else w->share[g] = p->seg_bw[g] / (double)w->nseg[g];
        r->reshare = 1;
    }
    if (p->latency[l] != 0.0) push(r, o->xf_land[x], XLAND, x);
    i64 q = w->xq[x];
    w->quse[q] -= 1;
    serve(p, w, r, o, q);
}

/* Transfer x lands: the source may free its buffer; its readers on the destination may be released. */
static void land(const Problem *p, Work *w, Run *r, Out *o, i64 x) {
    i64 bq = w->xbuf[x];
    if (bq >= 0) {
        if (--w->buf[bq].ref == 0) w->dev[o->xf_src[x]].mem -= w->buf[bq].bytes;
    }
    i64 tt = o->xf_tensor[x], dc = o->xf_dst[x];
    for (i64 pr = p->tensor_pair_ptr[tt]; pr < p->tensor_pair_ptr[tt + 1]; pr++) {
        i64 c = p->pair_op[pr];
        OpState *oc = w->op + c;
        if (oc->dev == dc && --oc->cnt == 0) release(p, w, r, c);
    }
}

/* Each active shared transfer moves at the least of its link's bandwidth and its equal share of every
 * segment it crosses; one SEGEND event (a new generation) is due at the earliest predicted end. */
static void reshare(const Problem *p, Work *w, Run *r, Out *o) {
    const i64 D = p->D;
    double t = r->t, best = INFINITY;
    for (i64 k = 0; k < r->nact; k++) {
        i64 x = w->act[k];
        i64 l = o->xf_src[x] * D + o->xf_dst[x];
        double rate = p->bandwidth[l];
        for (i64 j = p->route_ptr[l]; j < p->route_ptr[l + 1]; j++) {
            i64 g = p->route_seg[j];
            double share = w->share[g];
            if (share < rate) rate = share;
        }
        if (rate != w->xrate[x]) {
            if (w->xrate[x] > 0.0) {
                w->xrem[x] -= w->xrate[x] * (t - w->xtl[x]);
                if (w->xrem[x] < 0.0) w->xrem[x] = 0.0;
            }
            w->xtl[x] = t;
            w->xrate[x] = rate;
            w->xendp[x] = t + w->xrem[x] / rate;
        }
        if (w->xendp[x] < best) best = w->xendp[x];
    }
    if (r->nact > 0) {
        r->gen += 1;
        r->seg_live = 1;
        r->seg_t = best;
    }
}

/* Device d starts what it can at time t: the first released ops (synchronous) or launched kernels
 * (asynchronous, in launch order) while it has a free slot. */
static void start_ops(const Problem *p, Work *w, Run *r, Out *o, i64 d) {
    const i64 D = p->D;
    double t = r->t;
    Dev *v = w->dev + d;
    int asyn = v->launcher >= 0;
    while (v->nfree > 0 && v->fhead < v->ftail) {
        i64 i = w->fq[v->fbase + v->fhead++];
        if (!asyn && w->spos[i] >= 0) next_turn(p, w, r, d);
        double s = t, ot = p->optime[i * D + d], m = p->launch_cost[d], dt;
        if (ot < m) m = ot;
        if (asyn) {
            dt = ot - m;
            if (p->concurrency[d] > 1) { /* in stream order: after the local inputs' kernels */
                for (i64 q = p->in_ptr[i]; q < p->in_ptr[i + 1]; q++) {
                    i64 pp = p->tensor_src[p->pair_tensor[p->in_pair[q]]];
                    if (w->op[pp].dev == d && o->finish[pp] > s) s = o->finish[pp];
                }
            }
        } else if (p->op_group[i] >= 0 && p->group_launch[p->op_group[i] * D + d] > 0) {
            i64 g = p->op_group[i];
            dt = ot - m;
            if (w->gseen[g * D + d] == 0) {
                w->gseen[g * D + d] = 1;
                dt += (double)p->group_launch[g * D + d] * p->launch_cost[d];
            }
        } else {
            dt = ot;
        }
        /* what the op's FINISH reads: its inputs' pairs, its outputs' readers */
        PREFETCH(&p->in_pair[p->in_ptr[i]]);
        PREFETCH(&p->pair_op[p->op_pair_ptr[i]]);
        PREFETCH(&p->tensor_pair_ptr[p->op_tensor_ptr[i]]);
        PREFETCH(&p->tensor_bytes[p->op_tensor_ptr[i]]);
        o->start[i] = s;
        if (!asyn) {
            o->lstart[i] = s;
            w->op[i].remote = 1; /* (what it is from the start of a run; an incremental run may follow one
                                  * in which this op ran asynchronously) */
        }
        o->finish[i] = s + dt;
        v->nfree -= 1;
        v->busy += dt;
        v->mem += p->out_alloc_total[i];
        if (v->mem > v->peak) v->peak = v->mem;
        push(r, s + dt, FINISH, i);
    }
}

/* Op i's launch has ended (asynchronous device): its readers on the same device are released, the kernel
 * joins its device's FIFO, the launcher pays the peer copies' submits or waits for a synchronisation.
 * Returns when the launcher is free again if it pays submits (its LFREE event, for the caller to queue or
 * run), else -1. */
static double launched(const Problem *p, Work *w, Run *r, Out *o, i64 i, i64 d) {
    const i64 D = p->D, P = p->P;
    double t = r->t;
    Dev *vd = w->dev + d;
    i64 h = vd->launcher;
    Launcher *L = w->lau + h;
    int remote = 0;
    w->lend[i] = t;
    if (w->itd) w->itd[i] = r->iter;
    i64 obuf = p->alias_pair[i] >= 0 ? w->pair_buf[p->alias_pair[i]] : -1;
    double ps = 0.0;
    int sync = 0;
    for (i64 tt = p->op_tensor_ptr[i]; tt < p->op_tensor_ptr[i + 1]; tt++) {
        int ctrl = p->tensor_out[tt] < 0;
        i64 buf = (ctrl || obuf < 0) ? tt : obuf;
        for (i64 pr = p->tensor_pair_ptr[tt]; pr < p->tensor_pair_ptr[tt + 1]; pr++) {
            i64 c = p->pair_op[pr];
            PREFETCH(w->op + p->pair_op[pr + 2 < P ? pr + 2 : P - 1]);
            OpState *oc = w->op + c;
            i64 dc = oc->dev;
            if (dc == d) {
                w->pair_buf[pr] = (i32)buf;
                w->buf[buf].ref += 1;
                if (w->spos[c] == COMM) { /* a communication op is released at FINISH (its buffer held) */
                    remote = 1;
                    continue;
                }
                if (--oc->cnt == 0) release(p, w, r, c);
            } else {
                remote = 1;
                Dev *vc = w->dev + dc;
                if (vc->stamp2 != tt) {
                    vc->stamp2 = tt;
                    if (!ctrl) {
                        w->buf[buf].ref += 1; /* held for the transfer issued at FINISH */
                        if (vc->launcher >= 0) ps += p->overhead[d * D + dc];
                        else sync = 1;
                    }
                }
            }
        }
    }
    w->psum[i] = ps;
    w->op[i].remote = remote;
    w->fq[vd->fbase + vd->ftail++] = i;
    start_ops(p, w, r, o, d);
    if (sync) {
        L->state = L_SYNC;
        L->wait = i;
    } else if (ps > 0.0) {
        return t + ps;
    } else {
        L->state = L_FREE;
        mark(w, r, D + h);
    }
    return -1.0;
}

/* A run's state before its first event: placement dev under schedule spos, the sources released. */
static void run_init(const Problem *p, Work *w, Run *r, const i64 *dev, const i64 *spos) {
    const i64 n = p->n, D = p->D, T = p->T, S = p->S, H = p->H, G = p->G, NQ = 2 * D + D * D;
    memset(r, 0, sizeof(Run));
    r->ev.ev = w->ev;
    for (i64 d = 0; d < D; d++) {
        Dev *v = w->dev + d;
        memset(v, 0, sizeof(Dev));
        v->nfree = p->concurrency[d];
        v->stamp = v->stamp2 = -1;
        v->launcher = p->launcher[d];
    }
    for (i64 h = 0; h <= H; h++) {
        Launcher *L = w->lau + h;
        memset(L, 0, sizeof(Launcher));
        L->shead = L->stail = -1;
    }
    w->nq = 0;
    for (i64 i = 0; i < n; i++) {
        i64 d = dev[i];
        if (spos[i] != COMM) {
            w->dev[d].fbase += 1; /* counts for now */
            if (p->launcher[d] >= 0) w->lau[p->launcher[d]].lbase += 1;
            w->nq += 1;
        }
        w->dev[d].mem += p->param_bytes[i];
        w->op[i].cnt = p->in_ptr[i + 1] - p->in_ptr[i];
        w->op[i].dev = (i32)d;
        w->op[i].remote = 1;
        w->op[i].held = 0;
    }
    for (i64 d = 0, base = 0; d < D; d++) {
        i64 c = w->dev[d].fbase;
        w->dev[d].fbase = base;
        w->dev[d].peak = w->dev[d].mem;
        base += c;
    }
    w->spos = spos;
    for (i64 i = 0; i < n; i++)
        if (spos[i] >= 0) w->sop[w->dev[dev[i]].fbase + spos[i]] = i;
    for (i64 h = 0, base = 0; h < H; h++) {
        i64 c = w->lau[h].lbase;
        w->lau[h].lbase = base;
        base += c;
    }
    memset(w->isdirty, 0, sizeof(i64) * (D + H + 1));
    memset(w->gseen, 0, sizeof(i64) * (G * D + 1));
    memset(w->nseg, 0, sizeof(i64) * (S + 1));
    for (i64 tt = 0; tt < T; tt++) {
        w->buf[tt].ref = 0;
        w->buf[tt].bytes = p->tensor_alloc[tt];
    }
    for (i64 d = 0; d < D; d++) {
        w->qcap[d] = p->send_cap[d];
        w->qcap[D + d] = p->recv_cap[d];
    }
    for (i64 q = 2 * D; q < NQ; q++) w->qcap[q] = 1;
    for (i64 q = 0; q < NQ; q++) {
        w->quse[q] = 0;
        w->qh[q] = w->qt[q] = -1;
    }
    for (i64 j = 0; j < n; j++) { /* sources, in topological order */
        i64 i = p->order[j];
        if (w->op[i].cnt == 0) release(p, w, r, i);
    }
}

/* The event loop, from a run's start (first: dispatch what run_init released, then pop events) or from a
 * state between two events (first = 0). Where rec is not NULL, a snapshot is taken between events as it
 * asks (snap_take). */
static void run_loop(const Problem *p, Work *w, Run *r, Out *o, int first, struct Rec *rec) {
    const i64 D = p->D, T = p->T, P = p->P, H = p->H;
    for (;;) {
        if (!first) {
            if (rec) snap_take(p, w, r, o, rec);
            double t;
            i64 key;
            const Ent *top = r->ev.size ? ev_top(&r->ev) : NULL;
            if (r->seg_live && (!top || ent_less(r->seg_t, key_of(SEGEND, r->gen), top->t, top->k))) {
                t = r->seg_t;
                key = key_of(SEGEND, r->gen);
                r->seg_live = 0;
            } else if (top) {
                t = top->t;
                key = top->k;
                ev_pop(&r->ev);
            } else {
                break;
            }
            r->t = t;
            r->iter += 1;
            i64 kind = key >> KSHIFT, ident = key & KMASK;
            if (kind == FINISH) {
                i64 i = ident, d = w->op[i].dev;
                Dev *vd = w->dev + d;
                i64 h = vd->launcher;
                int comm = w->spos[i] == COMM;
                if (comm) h = -1; /* it took no slot; it delivers as a synchronous op does */
                else vd->nfree += 1;
                r->finished += 1;
                if (t > r->makespan) r->makespan = t;
                if (w->itd && h < 0) w->itd[i] = r->iter;
                if (h >= 0) {
                    vd->inflight -= 1;
                    Launcher *L = w->lau + h;
                    if (L->state == L_DEPTH && L->wait == d) {
                        L->state = L_FREE;
                        mark(w, r, D + h);
                    }
                }
                i64 obuf = p->alias_pair[i] >= 0 ? w->pair_buf[p->alias_pair[i]] : -1;
                double cum_p = w->lend[i], hc = -1.0;
                /* an asynchronous op delivered to its own device at LAUNCHED: only transfers are left */
                i64 tend = w->op[i].remote ? p->op_tensor_ptr[i + 1] : p->op_tensor_ptr[i];
                for (i64 tt = p->op_tensor_ptr[i]; tt < tend; tt++) {
                    int ctrl = p->tensor_out[tt] < 0;
                    i64 buf = (ctrl || obuf < 0) ? tt : obuf;
                    i64 b = p->tensor_bytes[tt];
                    for (i64 pr = p->tensor_pair_ptr[tt]; pr < p->tensor_pair_ptr[tt + 1]; pr++) {
                        i64 c = p->pair_op[pr];
                        PREFETCH(w->op + p->pair_op[pr + 2 < P ? pr + 2 : P - 1]); /* a later reader's state */
                        OpState *oc = w->op + c;
                        i64 dc = oc->dev;
                        if (dc == d) {
                            if (h < 0 || w->spos[c] == COMM) { /* a communication op waits for the kernel */
                                if (h < 0) { /* (an asynchronous source reserved it at LAUNCHED) */
                                    w->pair_buf[pr] = (i32)buf;
                                    w->buf[buf].ref += 1;
                                }
                                if (--oc->cnt == 0) release(p, w, r, c);
                            }
                            continue;
                        }
                        Dev *vc = w->dev + dc;
                        if (vc->stamp != tt) {
                            vc->stamp = tt;
                            i64 x = r->nx++;
                            vc->xid = x;
                            o->xf_tensor[x] = tt;
                            o->xf_src[x] = d;
                            o->xf_dst[x] = dc;
                            w->xsub[x] = 0;
                            w->buf[T + x].ref = 0;
                            w->buf[T + x].bytes = b;
                            i64 l = d * D + dc;
                            if (ctrl) {
                                w->xbuf[x] = -1;
                                o->xf_start[x] = t;
                                o->xf_end[x] = t;
                                o->xf_land[x] = t + p->latency[l];
                                push(r, o->xf_land[x], XLAND, x);
                            } else {
                                w->xbuf[x] = buf;
                                if (h < 0) w->buf[buf].ref += 1; /* an asynchronous source reserved it at LAUNCHED */
                                o->link_bytes[l] += b;
                                vc->mem += b; /* the received copy is allocated when it is created */
                                if (vc->mem > vc->peak) vc->peak = vc->mem;
                                w->xq[x] = p->send_cap[d] > 0 ? d : (p->recv_cap[dc] > 0 ? D + dc : 2 * D + l);
                                double ov = p->overhead[l], at = t; /* when it joins its copy queue */
                                if (comm) {
                                    /* the library moves it inside its kernel: nothing to submit */
                                } else if (h >= 0) {
                                    vd->host += ov;
                                    if (vc->launcher >= 0) {
                                        cum_p += ov;
                                        if (cum_p > at) at = cum_p;
                                    } else {
                                        if (hc < 0.0) {
                                            hc = w->lend[i] + w->psum[i];
                                            if (hc < t) hc = t;
                                        }
                                        hc += ov;
                                        at = hc;
                                    }
                                } else if (vc->launcher >= 0) {
                                    Launcher *Ld = w->lau + vc->launcher;
                                    w->xseq[x] = r->seq++;
                                    w->snext[x] = -1;
                                    if (Ld->stail < 0) Ld->shead = x;
                                    else w->snext[Ld->stail] = x;
                                    Ld->stail = x;
                                    mark(w, r, D + vc->launcher);
                                    at = -1.0;
                                } else {
                                    at = t + ov;
                                }
                                if (at > t) push(r, at, XQUEUE, x);
                                else if (at == t) join(p, w, r, o, x);
                            }
                        }
                        i64 x = vc->xid;
                        w->buf[T + x].ref += 1;
                        w->pair_buf[pr] = (i32)(T + x);
                    }
                }
                if (h >= 0) {
                    Launcher *L = w->lau + h;
                    if (L->state == L_SYNC && L->wait == i) {
                        if (hc > t) {
                            L->state = L_BUSY;
                            push(r, hc, LFREE, h);
                        } else {
                            L->state = L_FREE;
                            mark(w, r, D + h);
                        }
                    }
                }
                /* release the input buffers this op was holding (after delivery: a view's readers hold its base) */
                i64 freed = p->unconsumed_alloc[i];
                for (i64 q = p->in_ptr[i]; q < p->in_ptr[i + 1]; q++) {
                    Buf *bq = w->buf + w->pair_buf[p->in_pair[q]];
                    if (--bq->ref == 0) freed += bq->bytes;
                }
                vd->mem -= freed;
                start_ops(p, w, r, o, d); /* as its dispatch after this event would: nothing else here touches d */
            } else if (kind == LAUNCHED) {
                i64 d = w->op[ident].dev;
                double lf = launched(p, w, r, o, ident, d);
                if (lf >= 0.0) push(r, lf, LFREE, w->dev[d].launcher);
            } else if (kind == XEND) {
                end_transfer(p, w, r, o, ident);
                if (p->latency[o->xf_src[ident] * D + o->xf_dst[ident]] == 0.0) land(p, w, r, o, ident);
            } else if (kind == SEGEND) {
                if (ident == r->gen) {
                    for (;;) { /* every shared transfer due by now, lowest id first */
                        i64 best = -1;
                        for (i64 k = 0; k < r->nact; k++) {
                            i64 x = w->act[k];
                            if (w->xendp[x] <= t && (best < 0 || x < w->act[best])) best = k;
                        }
                        if (best < 0) break;
                        i64 x = w->act[best];
                        r->nact -= 1;
                        w->act[best] = w->act[r->nact];
                        end_transfer(p, w, r, o, x);
                        if (p->latency[o->xf_src[x] * D + o->xf_dst[x]] == 0.0) land(p, w, r, o, x);
                    }
                }
            } else if (kind == XLAND) {
                land(p, w, r, o, ident);
            } else if (kind == XQUEUE) {
                i64 x = ident;
                if (w->xsub[x]) {
                    i64 hd = w->dev[o->xf_dst[x]].launcher;
                    w->lau[hd].state = L_FREE;
                    mark(w, r, D + hd);
                }
                join(p, w, r, o, x);
            } else { /* LFREE */
                w->lau[ident].state = L_FREE;
                mark(w, r, D + ident);
            }
        }
        first = 0;
        double t = r->t;

        /* dispatch what this event made ready: devices start ops or kernels, launchers launch or submit */
        while (r->ndirty > 0) {
            i64 k = w->dirty[--r->ndirty];
            w->isdirty[k] = 0;
            if (k < D) {
                start_ops(p, w, r, o, k);
            } else if (k == D + H) {
                /* communication ops: no slot, no launch, no time; their outputs are allocated now */
                while (r->chead < r->ctail) {
                    i64 c = w->fq[w->nq + r->chead++];
                    Dev *vc = w->dev + w->op[c].dev;
                    o->start[c] = t;
                    o->finish[c] = t;
                    o->lstart[c] = t;
                    vc->mem += p->out_alloc_total[c];
                    if (vc->mem > vc->peak) vc->peak = vc->mem;
                    push(r, t, FINISH, c);
                }
            } else {
                i64 h = k - D;
                Launcher *L = w->lau + h;
                while (L->state == L_FREE) {
                    int has_op = L->lhead < L->ltail;
                    i64 x = L->shead;
                    if (!has_op && x < 0) break;
                    i64 head = has_op ? w->lq[L->lbase + L->lhead] : 0;
                    if (has_op && (x < 0 || (head >> QSHIFT) < w->xseq[x])) {
                        i64 c = head & QMASK, dc = w->lqd[L->lbase + L->lhead];
                        Dev *vc = w->dev + dc;
                        if (vc->inflight >= p->qdepth[dc]) {
                            L->state = L_DEPTH;
                            L->wait = dc;
                            break;
                        }
                        L->lhead += 1;
                        if (w->spos[c] >= 0) next_turn(p, w, r, dc);
                        double ln;
                        if (p->op_group[c] >= 0 && p->group_launch[p->op_group[c] * D + dc] > 0) {
                            i64 g = p->op_group[c];
                            ln = 0.0;
                            if (w->gseen[g * D + dc] == 0) {
                                w->gseen[g * D + dc] = 1;
                                ln = (double)p->group_launch[g * D + dc] * p->launch_cost[dc];
                            }
                        } else {
                            ln = p->launch_cost[dc];
                            if (p->optime[c * D + dc] < ln) ln = p->optime[c * D + dc];
                        }
                        /* what its LAUNCHED reads: its outputs' readers */
                        PREFETCH(&p->pair_op[p->op_pair_ptr[c]]);
                        PREFETCH(&p->tensor_pair_ptr[p->op_tensor_ptr[c]]);
                        PREFETCH(&p->tensor_out[p->op_tensor_ptr[c]]);
                        o->lstart[c] = t;
                        vc->inflight += 1;
                        vc->host += ln;
                        L->state = L_BUSY;
                        double te = t + ln;
                        i64 key = key_of(LAUNCHED, c);
                        const Ent *top = r->ev.size ? ev_top(&r->ev) : NULL;
                        if (r->ndirty == 0 && !r->reshare && (!top || ent_less(te, key, top->t, top->k)) &&
                            (!r->seg_live || ent_less(te, key, r->seg_t, key_of(SEGEND, r->gen)))) {
                            /* nothing else is due at this time or before the launch ends (no other device or
                             * launcher to dispatch, no event earlier): the LAUNCHED event would be the next one
                             * popped, so run it here; it can only mark this launcher, which this loop goes on
                             * dispatching */
                            r->t = t = te;
                            double lf = launched(p, w, r, o, c, dc);
                            if (r->ndirty == 1 && w->dirty[0] == k) {
                                r->ndirty = 0;
                                w->isdirty[k] = 0;
                            }
                            if (lf >= 0.0) {
                                /* the same for the end of the submits: when the LFREE event would be the
                                 * next one popped, free the launcher here and go on dispatching it */
                                i64 lk = key_of(LFREE, h);
                                top = r->ev.size ? ev_top(&r->ev) : NULL;
                                if (r->ndirty == 0 && (!top || ent_less(lf, lk, top->t, top->k)) &&
                                    (!r->seg_live || ent_less(lf, lk, r->seg_t, key_of(SEGEND, r->gen)))) {
                                    r->t = t = lf;
                                    L->state = L_FREE;
                                } else {
                                    push(r, lf, LFREE, h);
                                }
                            }
                        } else {
                            push(r, te, LAUNCHED, c);
                        }
                    } else {
                        L->shead = w->snext[x];
                        if (L->shead < 0) L->stail = -1;
                        i64 l = o->xf_src[x] * D + o->xf_dst[x];
                        double ov = p->overhead[l];
                        w->dev[o->xf_dst[x]].host += ov;
                        if (ov > 0.0) {
                            w->xsub[x] = 1;
                            L->state = L_BUSY;
                            push(r, t + ov, XQUEUE, x);
                        } else {
                            join(p, w, r, o, x);
                        }
                    }
                }
            }
        }
        if (r->reshare) {
            r->reshare = 0;
            reshare(p, w, r, o);
        }
    }
}

/* A finished run's per-device outputs (zeroed by the caller: adding the run's sums to them stores them
 * exactly), its transfers and ops finished; returns its step. */
static double run_outputs(const Problem *p, const Work *w, const Run *r, Out *o, i64 *n_transfers,
                          i64 *n_finished) {
    for (i64 d = 0; d < p->D; d++) {
        o->peak[d] = w->dev[d].peak;
        o->busy_time[d] += w->dev[d].busy;
        o->host_time[d] += w->dev[d].host;
    }
    *n_transfers = r->nx;
    *n_finished = r->finished;
    return r->makespan;
}

static double run_one(const Problem *p, Work *w, const i64 *dev, const i64 *spos, Out *o, i64 *n_transfers,
                      i64 *n_finished) {
    Run run;
    run_init(p, w, &run, dev, spos);
    run_loop(p, w, &run, o, 1, NULL);
    return run_outputs(p, w, &run, o, n_transfers, n_finished);
}

/* ------------------------------------------------------------------ incremental re-simulation
 *
 * A placement that differs from a recorded one in a few ops runs exactly as the recorded run did up to the
 * first event that reads one of those ops' devices: an op's device is first read when one of its producers
 * delivers to its readers (at the producer's LAUNCHED on an asynchronous device, at its FINISH otherwise),
 * and, before any event, by the run's start (the ops' parameters, resident from time 0, and the devices'
 * FIFO sizes). So the recorded run keeps snapshots between events (snap_take) and, per op, the event count
 * at which its device is first read (touch). A row restores the latest snapshot before its moved ops'
 * first touch, moves those ops (their parameters shift each device's memory, and its peak so far, by a
 * constant; the FIFOs are laid out for the row's counts) and runs the loop on from there: the same events,
 * the same arithmetic, the same result as a run from the start.
 *
 * A snapshot holds what later events may change. What is written once in a run — an op's finish, launch end
 * and submits, a pair's buffer, a landed transfer's buffer size — is not copied into each snapshot: a row
 * restored at snapshot k rewrites only values of ops and transfers that come after k, so these arrays hold
 * the recorded run's values for every snapshot up to the earliest one a row has restored since (valid);
 * a row that needs a later snapshot first copies them back from the recorded run's (pristine). */

typedef struct {
    i64 iter; /* events popped before it */
    Run run;
    i64 nev, xlo, nfifo, nlfifo;
    Ent *ev;
    Dev *dev;
    Launcher *lau;
    i64 *quse, *qh, *qt, *nseg, *gseen, *link_bytes, *fifo, *lfifo, *act;
    double *sbusy, *share, *link_time, *seg_time;
    i64 *x_i64;    /* transfers xlo .. run.nx - 1 (from the first not landed): 9 fields each, see X_I64 */
    double *x_f64; /* and 7 each, see X_F64 */
    i32 *cnt, *ref, *lfifod;
    void *block;
    size_t size; /* the block's bytes */
} Snap;

#define X_I64 9
#define X_F64 7

typedef struct Rec {
    Snap *snaps;  /* in event order */
    i64 n, cap, next, stride;
    Snap *pool;   /* blocks of dropped snapshots, reused by later ones (at most cap blocks in all) */
    i64 npool;
} Rec;

/* A block of at least sz bytes for a snapshot: a pooled one that fits, else a new one (freeing a pooled one
 * that does not, so that the blocks stay at most rec->cap). */
static void *snap_block(Rec *rec, size_t sz, size_t *size) {
    for (i64 j = 0; j < rec->npool; j++)
        if (rec->pool[j].size >= sz) {
            void *b = rec->pool[j].block;
            *size = rec->pool[j].size;
            rec->pool[j] = rec->pool[--rec->npool];
            return b;
        }
    if (rec->npool > 0) free(rec->pool[--rec->npool].block);
    *size = sz + sz / 4; /* room for a later, larger snapshot */
    return malloc(*size);
}

/* The lowest transfer id still to land (r->nx if none). */
static i64 first_in_flight(const Problem *p, const Work *w, const Run *r) {
    const i64 D = p->D, NQ = 2 * D + D * D;
    i64 xlo = r->nx;
    for (i64 k = 0; k < r->ev.size; k++) {
        i64 kind = r->ev.ev[k].k >> KSHIFT, x = r->ev.ev[k].k & KMASK;
        if ((kind == XEND || kind == XLAND || kind == XQUEUE) && x < xlo) xlo = x;
    }
    for (i64 k = 0; k < r->nact; k++)
        if (w->act[k] < xlo) xlo = w->act[k];
    for (i64 q = 0; q < NQ; q++)
        for (i64 x = w->qh[q]; x >= 0; x = w->qnext[x])
            if (x < xlo) xlo = x;
    for (i64 h = 0; h < p->H; h++)
        for (i64 x = w->lau[h].shead; x >= 0; x = w->snext[x])
            if (x < xlo) xlo = x;
    return xlo;
}

/* The small state between snapshot sn (its run, nev and block set) and the run: into the snapshot (save),
 * or back into the run. */
static void snap_copy(const Problem *p, Snap *sn, Work *w, Out *o, int save) {
    const i64 D = p->D, S = p->S, H = p->H, G = p->G, NQ = 2 * D + D * D;
#define COPY(snap, run, bytes) (save ? memcpy((snap), (run), (bytes)) : memcpy((run), (snap), (bytes)))
    COPY(sn->ev, w->ev, sizeof(Ent) * sn->nev);
    COPY(sn->dev, w->dev, sizeof(Dev) * D);
    COPY(sn->lau, w->lau, sizeof(Launcher) * (H + 1));
    COPY(sn->quse, w->quse, sizeof(i64) * NQ);
    COPY(sn->qh, w->qh, sizeof(i64) * NQ);
    COPY(sn->qt, w->qt, sizeof(i64) * NQ);
    COPY(sn->nseg, w->nseg, sizeof(i64) * (S + 1));
    COPY(sn->gseen, w->gseen, sizeof(i64) * (G * D + 1));
    COPY(sn->act, w->act, sizeof(i64) * sn->run.nact);
    COPY(sn->sbusy, w->sbusy, sizeof(double) * (S + 1));
    COPY(sn->share, w->share, sizeof(double) * (S + 1));
    COPY(sn->link_bytes, o->link_bytes, sizeof(i64) * D * D);
    COPY(sn->link_time, o->link_time, sizeof(double) * D * D);
    COPY(sn->seg_time, o->seg_time, sizeof(double) * S);
#undef COPY
}

/* Between two events of a recorded run: keep a snapshot when one is due (every rec->stride events; when
 * rec->cap are kept, every other one is dropped and the stride doubles). A snapshot that cannot be
 * allocated is skipped (rows restore an earlier one). */
static void snap_take(const Problem *p, Work *w, const Run *r, Out *o, Rec *rec) {
    if (r->iter < rec->next) return;
    if (rec->n == rec->cap) {
        i64 k = 0;
        for (i64 j = 0; j < rec->n; j++) {
            if (j % 2 == 0) rec->snaps[k++] = rec->snaps[j];
            else rec->pool[rec->npool++] = rec->snaps[j];
        }
        rec->n = k;
        rec->stride *= 2;
        rec->next = rec->snaps[k - 1].iter + rec->stride;
        if (r->iter < rec->next) return;
    }
    rec->next = r->iter + rec->stride;
    const i64 n = p->n, T = p->T, D = p->D, S = p->S, H = p->H, G = p->G, NQ = 2 * D + D * D;
    i64 nev = r->ev.size, xlo = first_in_flight(p, w, r), nx = r->nx - xlo, nfifo = 0, nlfifo = 0;
    for (i64 d = 0; d < D; d++) nfifo += w->dev[d].ftail - w->dev[d].fhead;
    for (i64 h = 0; h < H; h++) nlfifo += w->lau[h].ltail - w->lau[h].lhead;
    size_t sz = sizeof(Ent) * (size_t)nev + sizeof(Dev) * (size_t)D + sizeof(Launcher) * (size_t)(H + 1) +
                sizeof(i64) * (size_t)(3 * NQ + (S + 1) + (G * D + 1) + D * D + nfifo + nlfifo + r->nact + X_I64 * nx) +
                sizeof(double) * (size_t)(2 * (S + 1) + D * D + S + X_F64 * nx) +
                sizeof(i32) * (size_t)(n + T + r->nx + nlfifo);
    size_t got;
    char *b = snap_block(rec, sz, &got);
    if (!b) return;
    Snap *sn = rec->snaps + rec->n++;
    sn->block = b;
    sn->size = got;
    sn->iter = r->iter;
    sn->run = *r;
    sn->nev = nev;
    sn->xlo = xlo;
    sn->nfifo = nfifo;
    sn->nlfifo = nlfifo;
    sn->ev = (Ent *)b; b += sizeof(Ent) * nev;
    sn->dev = (Dev *)b; b += sizeof(Dev) * D;
    sn->lau = (Launcher *)b; b += sizeof(Launcher) * (H + 1);
    i64 *ip = (i64 *)b;
    sn->quse = ip; ip += NQ;
    sn->qh = ip; ip += NQ;
    sn->qt = ip; ip += NQ;
    sn->nseg = ip; ip += S + 1;
    sn->gseen = ip; ip += G * D + 1;
    sn->link_bytes = ip; ip += D * D;
    sn->fifo = ip; ip += nfifo;
    sn->lfifo = ip; ip += nlfifo;
    sn->act = ip; ip += r->nact;
    sn->x_i64 = ip; ip += X_I64 * nx;
    double *dp = (double *)ip;
    sn->sbusy = dp; dp += S + 1;
    sn->share = dp; dp += S + 1;
    sn->link_time = dp; dp += D * D;
    sn->seg_time = dp; dp += S;
    sn->x_f64 = dp; dp += X_F64 * nx;
    i32 *qp = (i32 *)dp;
    sn->cnt = qp; qp += n;
    sn->ref = qp; qp += T + r->nx;
    sn->lfifod = qp;
    snap_copy(p, sn, w, o, 1);
    for (i64 i = 0; i < n; i++) sn->cnt[i] = w->op[i].cnt;
    for (i64 k = 0; k < T + r->nx; k++) sn->ref[k] = (i32)w->buf[k].ref;
    for (i64 d = 0, f = 0; d < D; d++)
        for (i64 j = w->dev[d].fhead; j < w->dev[d].ftail; j++) sn->fifo[f++] = w->fq[w->dev[d].fbase + j];
    for (i64 h = 0, f = 0; h < H; h++)
        for (i64 j = w->lau[h].lhead; j < w->lau[h].ltail; j++, f++) {
            sn->lfifo[f] = w->lq[w->lau[h].lbase + j];
            sn->lfifod[f] = w->lqd[w->lau[h].lbase + j];
        }
    for (i64 x = xlo, k = 0; x < r->nx; x++, k++) {
        i64 *xi = sn->x_i64 + X_I64 * k;
        double *xd = sn->x_f64 + X_F64 * k;
        xi[0] = o->xf_tensor[x]; xi[1] = o->xf_src[x]; xi[2] = o->xf_dst[x]; xi[3] = w->xbuf[x]; xi[4] = w->xq[x];
        xi[5] = w->xsub[x]; xi[6] = w->xseq[x]; xi[7] = w->snext[x]; xi[8] = w->qnext[x];
        xd[0] = o->xf_start[x]; xd[1] = o->xf_end[x]; xd[2] = o->xf_land[x]; xd[3] = w->xrem[x];
        xd[4] = w->xrate[x]; xd[5] = w->xtl[x]; xd[6] = w->xendp[x];
    }
}

/* A recorded run and what rows need to run on from its snapshots (ap_inc_new). */
typedef struct {
    Problem p;
    Work w;
    Rec rec;
    i64 *base, *spos, *touch, *count, *diff, *itd;
    double *start, *finish, *lstart, *xf_start, *xf_end, *xf_land;
    i64 *xf_tensor, *xf_src, *xf_dst;
    double *pfinish, *plend, *ppsum;
    i64 *pbytes;
    i32 *premote, *ppair;
    i64 valid;
    /* the recorded run's results */
    double step, *busy, *host, *link_time, *seg_time;
    i64 *peak, *link_bytes, nx, finished, events;
    void *block;
} Inc;

void ap_inc_free(void *handle) {
    Inc *h = handle;
    if (!h) return;
    for (i64 j = 0; j < h->rec.n; j++) free(h->rec.snaps[j].block);
    for (i64 j = 0; j < h->rec.npool; j++) free(h->rec.pool[j].block);
    free(h->rec.snaps);
    free(h->rec.pool);
    free(h->w.block);
    free(h->block);
    free(h);
}

static void restore_pristine(Inc *h) {
    const Problem *p = &h->p;
    Work *w = &h->w;
    memcpy(h->finish, h->pfinish, sizeof(double) * p->n);
    memcpy(w->lend, h->plend, sizeof(double) * p->n);
    memcpy(w->psum, h->ppsum, sizeof(double) * p->n);
    memcpy(w->pair_buf, h->ppair, sizeof(i32) * p->P);
    for (i64 i = 0; i < p->n; i++) w->op[i].remote = h->premote[i];
    for (i64 x = 0; x < h->nx; x++) w->buf[p->T + x].bytes = h->pbytes[x];
    h->valid = INT64_MAX;
}

/* Restore snapshot sn for the row dev, which moves the nd ops diff off the recorded placement. */
static void restore(Inc *h, const Snap *sn, const i64 *dev, i64 nd, Run *r, Out *o) {
    const Problem *p = &h->p;
    Work *w = &h->w;
    const i64 n = p->n, T = p->T, D = p->D, H = p->H;
    *r = sn->run;
    r->ev.ev = w->ev;
    snap_copy(p, (Snap *)sn, w, o, 0);
    for (i64 i = 0; i < n; i++) w->op[i].cnt = sn->cnt[i];
    for (i64 k = 0; k < T + sn->run.nx; k++) w->buf[k].ref = sn->ref[k];
    for (i64 x = sn->xlo, k = 0; x < sn->run.nx; x++, k++) {
        const i64 *xi = sn->x_i64 + X_I64 * k;
        const double *xd = sn->x_f64 + X_F64 * k;
        o->xf_tensor[x] = xi[0]; o->xf_src[x] = xi[1]; o->xf_dst[x] = xi[2]; w->xbuf[x] = xi[3]; w->xq[x] = xi[4];
        w->xsub[x] = xi[5]; w->xseq[x] = xi[6]; w->snext[x] = xi[7]; w->qnext[x] = xi[8];
        o->xf_start[x] = xd[0]; o->xf_end[x] = xd[1]; o->xf_land[x] = xd[2]; w->xrem[x] = xd[3];
        w->xrate[x] = xd[4]; w->xtl[x] = xd[5]; w->xendp[x] = xd[6];
    }
    /* the row's ops: devices, parameters (resident from the start: the memory so far, and its peak, shift) */
    i64 *count = h->count;
    for (i64 k = 0; k < nd; k++) {
        i64 c = h->diff[k], d0 = h->base[c], d1 = dev[c];
        w->op[c].dev = (i32)d1;
        count[d0] -= 1;
        count[d1] += 1;
        w->dev[d0].mem -= p->param_bytes[c];
        w->dev[d0].peak -= p->param_bytes[c];
        w->dev[d1].mem += p->param_bytes[c];
        w->dev[d1].peak += p->param_bytes[c];
    }
    /* the FIFOs laid out for the row's counts, their live entries copied back */
    for (i64 d = 0, base = 0, f = 0; d < D; d++) {
        Dev *v = w->dev + d;
        v->fbase = base;
        for (i64 j = v->fhead; j < v->ftail; j++) w->fq[base + j] = sn->fifo[f++];
        base += count[d];
    }
    i64 *lcount = h->count + D;
    for (i64 q = 0; q < H; q++) lcount[q] = 0;
    for (i64 d = 0; d < D; d++)
        if (p->launcher[d] >= 0) lcount[p->launcher[d]] += count[d];
    for (i64 q = 0, base = 0, f = 0; q < H; q++) {
        Launcher *L = w->lau + q;
        L->lbase = base;
        for (i64 j = L->lhead; j < L->ltail; j++, f++) {
            w->lq[base + j] = sn->lfifo[f];
            w->lqd[base + j] = sn->lfifod[f];
        }
        base += lcount[q];
    }
    for (i64 k = 0; k < nd; k++) { /* the counts back to the recorded placement's */
        i64 c = h->diff[k];
        count[h->base[c]] += 1;
        count[dev[c]] -= 1;
    }
}

/* Record the run of placement devs (the handle's snapshots, touches and pristine arrays). */
static void inc_record(Inc *h, const i64 *devs) {
    const Problem *p = &h->p;
    const i64 n = p->n, T = p->T, P = p->P, D = p->D, S = p->S, H = p->H;
    Work *w = &h->w;
    for (i64 j = 0; j < h->rec.n; j++) h->rec.pool[h->rec.npool++] = h->rec.snaps[j];
    h->rec.n = 0;
    h->rec.stride = n / 16 > 1 ? n / 16 : 1; /* a first guess: thinned as the run goes on */
    h->rec.next = 0;
    memcpy(h->base, devs, sizeof(i64) * n);
    for (i64 i = 0; i < n; i++) h->spos[i] = -1;
    w->itd = h->itd;
    for (i64 i = 0; i < n; i++) w->itd[i] = INT64_MAX;
    memset(h->busy, 0, sizeof(double) * (2 * D + D * D + S));
    memset(h->link_bytes, 0, sizeof(i64) * D * D);
    Out o = {h->start, h->finish, h->lstart, h->busy, h->host, h->link_time, h->seg_time, h->peak, h->link_bytes,
             h->xf_tensor, h->xf_src, h->xf_dst, h->xf_start, h->xf_end, h->xf_land};
    Run run;
    run_init(p, w, &run, h->base, h->spos);
    run_loop(p, w, &run, &o, 1, &h->rec);
    h->step = run_outputs(p, w, &run, &o, &h->nx, &h->finished);
    h->events = run.iter;
    /* each op's first touch: the earliest delivery of one of its producers (0 for a source: the start) */
    for (i64 c = 0; c < n; c++) {
        i64 tmin = p->in_ptr[c] == p->in_ptr[c + 1] ? 0 : INT64_MAX;
        for (i64 q = p->in_ptr[c]; q < p->in_ptr[c + 1]; q++) {
            i64 pp = p->tensor_src[p->pair_tensor[p->in_pair[q]]];
            if (w->itd[pp] < tmin) tmin = w->itd[pp];
        }
        h->touch[c] = tmin;
    }
    w->itd = NULL;
    for (i64 d = 0; d < 2 * D + H; d++) h->count[d] = 0;
    for (i64 i = 0; i < n; i++) h->count[devs[i]] += 1;
    memcpy(h->pfinish, h->finish, sizeof(double) * n);
    memcpy(h->plend, w->lend, sizeof(double) * n);
    memcpy(h->ppsum, w->psum, sizeof(double) * n);
    memcpy(h->ppair, w->pair_buf, sizeof(i32) * P);
    for (i64 i = 0; i < n; i++) h->premote[i] = w->op[i].remote;
    for (i64 x = 0; x < h->nx; x++) h->pbytes[x] = w->buf[T + x].bytes;
    h->valid = INT64_MAX;
}

/* The recorded run's per-placement outputs (as ap_inc_run's, one row). */
static void inc_result(const Inc *h, const ApRows *rows, i64 b) {
    const i64 D = h->p.D, S = h->p.S;
    rows->step_time[b] = h->step;
    memcpy(rows->busy_time + b * D, h->busy, sizeof(double) * D);
    memcpy(rows->host_time + b * D, h->host, sizeof(double) * D);
    memcpy(rows->peak + b * D, h->peak, sizeof(i64) * D);
    memcpy(rows->link_time + b * D * D, h->link_time, sizeof(double) * D * D);
    memcpy(rows->link_bytes + b * D * D, h->link_bytes, sizeof(i64) * D * D);
    memcpy(rows->seg_time + b * S, h->seg_time, sizeof(double) * S);
    rows->n_transfers[b] = h->nx;
    rows->n_finished[b] = h->finished;
}

/* Record the run of placement devs in place of the handle's (its work space and snapshot blocks reused);
 * its outputs as ap_inc_run's. */
void ap_inc_reset(void *handle, const i64 *devs, const ApRows *rows) {
    Inc *h = handle;
    inc_record(h, devs);
    inc_result(h, rows, 0);
}

/* Record the run of placement devs[0] (no schedule, no communication op) with up to cap snapshots; its
 * results go to the outputs as ap_simulate's would. Returns the handle (ap_inc_run, ap_inc_free), or NULL
 * if memory could not be allocated or the graph is too large. The graph's and cluster's arrays and optime
 * must outlive the handle. */
void *ap_inc_new(i64 cap, const i64 *devs, const double *optime, const ApGraph *g, const ApCluster *c,
                 const ApTrace *tr, const ApRows *rows) {
    if (too_large(g) || cap < 2) return NULL;
    const i64 n = g->n_ops, P = g->n_pairs, D = c->n_devices, S = c->n_segments, H = c->n_launchers;
    Inc *h = calloc(1, sizeof(Inc));
    if (!h) return NULL;
    h->p = problem_of(g, c, optime);
    size_t sz = sizeof(i64) * (size_t)(n * 5 + 2 * D + H + 4 * P + D + D * D) +
                sizeof(double) * (size_t)(n * 6 + 3 * P + 2 * D + D * D + S) + sizeof(i32) * (size_t)(n + P);
    char *b = malloc(sz);
    h->rec.snaps = malloc(sizeof(Snap) * (size_t)cap);
    h->rec.pool = malloc(sizeof(Snap) * (size_t)cap);
    if (!b || !h->rec.snaps || !h->rec.pool || work_alloc(&h->w, &h->p) != 0) {
        free(b);
        free(h->rec.snaps);
        free(h->rec.pool);
        free(h);
        return NULL;
    }
    h->block = b;
    i64 *ip = (i64 *)b;
    h->base = ip; ip += n;
    h->spos = ip; ip += n;
    h->touch = ip; ip += n;
    h->diff = ip; ip += n;
    h->itd = ip; ip += n;
    h->count = ip; ip += 2 * D + H;
    h->xf_tensor = ip; ip += P;
    h->xf_src = ip; ip += P;
    h->xf_dst = ip; ip += P;
    h->pbytes = ip; ip += P;
    h->peak = ip; ip += D;
    h->link_bytes = ip; ip += D * D;
    double *dp = (double *)ip;
    h->start = dp; dp += n;
    h->finish = dp; dp += n;
    h->lstart = dp; dp += n;
    h->pfinish = dp; dp += n;
    h->plend = dp; dp += n;
    h->ppsum = dp; dp += n;
    h->xf_start = dp; dp += P;
    h->xf_end = dp; dp += P;
    h->xf_land = dp; dp += P;
    h->busy = dp; dp += D;
    h->host = dp; dp += D;
    h->link_time = dp; dp += D * D;
    h->seg_time = dp; dp += S;
    i32 *qp = (i32 *)dp;
    h->premote = qp; qp += n;
    h->ppair = qp;
    h->rec.cap = cap;
    inc_record(h, devs);
    /* the recorded run's results, as ap_simulate gives them */
    memcpy(tr->start, h->start, sizeof(double) * n);
    memcpy(tr->finish, h->finish, sizeof(double) * n);
    memcpy(tr->lstart, h->lstart, sizeof(double) * n);
    memcpy(tr->xf_tensor, h->xf_tensor, sizeof(i64) * h->nx);
    memcpy(tr->xf_src, h->xf_src, sizeof(i64) * h->nx);
    memcpy(tr->xf_dst, h->xf_dst, sizeof(i64) * h->nx);
    memcpy(tr->xf_start, h->xf_start, sizeof(double) * h->nx);
    memcpy(tr->xf_end, h->xf_end, sizeof(double) * h->nx);
    memcpy(tr->xf_land, h->xf_land, sizeof(double) * h->nx);
    inc_result(h, rows, 0);
    return h;
}

/* The moves of row dev off the recorded placement (into h->diff); returns their number, and in *tmin the
 * first event count at which one of their devices is read. */
static i64 moves(const Inc *h, const i64 *dev, i64 *tmin) {
    i64 nd = 0, t = INT64_MAX;
    for (i64 i = 0; i < h->p.n; i++)
        if (dev[i] != h->base[i]) {
            h->diff[nd++] = i;
            if (h->touch[i] < t) t = h->touch[i];
        }
    *tmin = t;
    return nd;
}

/* The latest snapshot before event count tmin; -1 (a run from the start) where there is none or it would
 * spare less than a quarter of the recorded run's events (restoring it would cost more than it saves). */
static i64 snapshot_before(const Inc *h, i64 tmin) {
    i64 k = h->rec.n - 1;
    while (k >= 0 && h->rec.snaps[k].iter >= tmin) k--;
    return k >= 0 && 4 * h->rec.snaps[k].iter >= h->events ? k : -1;
}

/* Simulate B placements (rows of devs[B, n]) against the recorded one, exactly as ap_simulate would (no
 * schedule); the per-placement outputs as ap_simulate's (zeroed by the caller). Rows run latest snapshot
 * first, so that the write-once arrays are copied back at most once per call. Returns 0, -1 if memory could
 * not be allocated. */
int ap_inc_run(void *handle, i64 B, const i64 *devs, const ApRows *rows) {
    Inc *h = handle;
    const Problem *p = &h->p;
    Work *w = &h->w;
    const i64 n = p->n;
    i64 *order = malloc(sizeof(i64) * (size_t)(2 * B + 1)), *snap = order + B;
    if (!order) return -1;
    for (i64 b = 0; b < B; b++) {
        i64 tmin;
        snap[b] = moves(h, devs + b * n, &tmin) ? snapshot_before(h, tmin) : INT64_MAX;
        order[b] = b;
    }
    for (i64 a = 1; a < B; a++) { /* stable insertion sort, latest snapshot first (B is small) */
        i64 b = order[a], j = a;
        while (j > 0 && snap[order[j - 1]] < snap[b]) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = b;
    }
    for (i64 a = 0; a < B; a++) {
        i64 b = order[a], tmin;
        const i64 *dev = devs + b * n;
        ApTrace tr = {h->start, h->finish, h->lstart, h->xf_tensor, h->xf_src, h->xf_dst, h->xf_start, h->xf_end,
                      h->xf_land};
        Out o = row_out(p, &tr, rows, b);
        i64 nd = moves(h, dev, &tmin);
        if (nd == 0) { /* the recorded placement */
            inc_result(h, rows, b);
            continue;
        }
        i64 k = snap[b];
        Run run;
        if (k < 0) { /* touched at the start: a run from the start */
            run_init(p, w, &run, dev, h->spos);
            run_loop(p, w, &run, &o, 1, NULL);
            h->valid = -1;
        } else {
            const Snap *sn = h->rec.snaps + k;
            if (sn->iter > h->valid) restore_pristine(h);
            restore(h, sn, dev, nd, &run, &o);
            run_loop(p, w, &run, &o, 0, NULL);
            if (sn->iter < h->valid) h->valid = sn->iter;
        }
        rows->step_time[b] = run_outputs(p, w, &run, &o, rows->n_transfers + b, rows->n_finished + b);
        for (i64 j = 0; j < nd; j++) w->op[h->diff[j]].dev = (i32)h->base[h->diff[j]];
    }
    free(order);
    return 0;
}

/* The argument structs' fields with their types, in order (autoplace/sim/_args.py's C_LISTING): _cbackend
 * refuses a build whose list differs (or that has none), so a stale build is never called with the wrong
 * arguments. */
const char *ap_struct_fields(void) {
    return "graph:i64 n_ops,i64 n_tensors,i64 n_pairs,i64* order,i64* tensor_src,i64* tensor_bytes,"
           "i64* tensor_alloc,i64* tensor_out,i32* op_tensor_ptr,i32* tensor_pair_ptr,i32* pair_op,"
           "i64* pair_tensor,i32* in_ptr,i32* in_pair,i64* out_alloc_total,i64* unconsumed_alloc,"
           "i64* param_bytes,i32* alias_pair,i32* op_pair_ptr,i32* op_group,i64* group_launch;"
           "cluster:i64 n_devices,i64 n_segments,i64 n_launchers,double* bandwidth,double* latency,"
           "double* overhead,i64* route_ptr,i64* route_seg,double* seg_bw,i64* send_cap,i64* recv_cap,"
           "i64* concurrency,i64* launcher,double* launch_cost,i64* qdepth;trace:double* start,"
           "double* finish,double* lstart,i64* xf_tensor,i64* xf_src,i64* xf_dst,double* xf_start,"
           "double* xf_end,double* xf_land;rows:double* step_time,double* busy_time,double* host_time,"
           "i64* peak,double* link_time,i64* link_bytes,double* seg_time,i64* n_transfers,i64* n_finished";
}

/* Simulate B placements (rows of devs[B, n]), each under its schedule (rows of spos[B, n]: each op's place in
 * its device's order, -1 on a device left in ready order); optime[n, D]. Returns 0, -1 if memory could not
 * be allocated, -2 if the graph has 2^31 - 1 ops, or tensors and pairs, or more. */
int ap_simulate(i64 B, const i64 *devs, const i64 *spos, const double *optime, const ApGraph *g,
                const ApCluster *c, const ApTrace *tr, const ApRows *rows) {
    if (too_large(g)) return -2; /* indices are int32 */
    const i64 n = g->n_ops;
    Problem p = problem_of(g, c, optime);
    Work w;
    if (work_alloc(&w, &p) != 0) return -1;
    for (i64 b = 0; b < B; b++) {
        Out o = row_out(&p, tr, rows, b);
        rows->step_time[b] = run_one(&p, &w, devs + b * n, spos + b * n, &o, rows->n_transfers + b,
                                     rows->n_finished + b);
    }
    free(w.block);
    return 0;
}
