"""The list schedulers' running model of the simulator (:class:`Schedule`), shared by the whitepaper's
greedy placer and HEFT (:mod:`autoplace.placers.list_scheduling`) and Baechi's m-TOPO, m-ETF and m-SCT
(:mod:`autoplace.placers.baechi`): copies that queue for links, segments and copy engines and go to a device
once; ops that start in their device's earliest idle gap once their inputs are there; TensorFlow's
co-location (:data:`GROUP_RULES`); memory reserved per device (:func:`fitting`); and the replay that
estimates a placement's step (:func:`_replay`)."""

from __future__ import annotations

import bisect
import dataclasses
import heapq

import numpy as np

from autoplace.cluster import Cluster
from autoplace.cost import device_times, feasible_devices, group_launch_matrix, launch_times, op_time_matrix
from autoplace.errors import InfeasibleError
from autoplace.graph import Graph
from autoplace.grouping import floating_ops, runnable_grouping
from autoplace.placement import Placement
from autoplace.sim import Simulator

__all__ = ["GROUP_RULES", "Schedule", "fitting", "predecessor_counts", "earliest_finish_in_order",
           "topological_repair", "MEMORY_TRIES"]

#: TensorFlow's co-location constraints as the papers' graphs carry them: the graph's own groups and
#: ``colocate_gradients_with_ops`` (each op's gradient ops with the op; :mod:`autoplace.grouping`)
GROUP_RULES = ("colocation", "gradient")


GAP_SCAN = 64  #: idle gaps a schedule looks through for an op before putting it after the device's last op


class _Copies:
    """The cluster's copy resources, close to how the simulator models them, for a running schedule.

    A transfer ``src -> dst`` is submitted (``overhead``, a delay here: the simulator charges it to a host
    thread, and hides a peer copy's behind its producer) and then holds its copy queue — the first free of
    the source's send engines, else of the destination's receive engines, else the pair's link — and every
    segment on its route for ``bytes / bandwidth``, landing ``latency`` later; each resource serves its
    transfers one after another (the simulator shares a segment among the transfers crossing it at once:
    this model serialises them, a conservative estimate). A tensor goes to a device once: later readers
    there use the copy. All free times live in one flat list: links, then segments, then engines."""

    def __init__(self, cluster: Cluster):
        D, S = cluster.n_devices, len(cluster.segments)
        self.D = D
        self.bandwidth = cluster.transfer_bandwidth.ravel().tolist()
        self.overhead = cluster.submit_overhead.ravel().tolist()
        self.latency = cluster.latency.ravel().tolist()
        ptr, seg = cluster.route_ptr, cluster.route_seg
        self.route = [[D * D + int(s) for s in seg[ptr[p]:ptr[p + 1]]] for p in range(D * D)]
        base = D * D + S
        self.send: list[list[int]] = []
        self.recv: list[list[int]] = []
        for caps, engines in ((cluster.send_engines, self.send), (cluster.recv_engines, self.recv)):
            for cap in caps.tolist():
                engines.append(list(range(base, base + cap)))
                base += cap
        self.free = [0.0] * base
        self.landed: dict[tuple[int, int], float] = {}   # (tensor, device) -> when its copy lands there

    def lone(self, src: int, dst: int, nbytes: float) -> float:
        """A lone transfer's time from issue to landing (:meth:`autoplace.cluster.Cluster.transfer_time`)."""
        p = src * self.D + dst
        return self.overhead[p] + nbytes / self.bandwidth[p] + self.latency[p]

    def plan(self, src: int, dst: int, ready: float, nbytes: float,
             over: dict[int, float]) -> tuple[float, float, list[int]]:
        """(landing, end, resources held) of a transfer issued at ``ready``, with ``over`` overriding the
        free times of resources already planned (a probe's own earlier inputs)."""
        p = src * self.D + dst
        free = self.free
        engines = self.send[src] or self.recv[dst]
        held = [*self.route[p]]
        if engines:
            held.append(min(engines, key=lambda r: over.get(r, free[r])))   # the engine that frees first
        else:
            held.append(p)
        start = ready + self.overhead[p]
        for r in held:
            start = max(start, over.get(r, free[r]))
        end = start + nbytes / self.bandwidth[p]
        return end + self.latency[p], end, held


class Schedule:
    """Running state shared by the list schedulers, modelling what the simulator will do with their
    placement: per device its busy intervals (an op may start in an idle gap that fits it, since the
    simulator runs whichever op is ready when a device frees), the copy resources (:class:`_Copies`), each
    placed op's finish time, and, for the memory-aware ``m-`` placers, each device's memory.

    **Groups.** Ops are placed in co-location groups (``rules``, default :data:`GROUP_RULES`); the first
    member placed fixes the group's device, and the extra time the rest of the group takes there beyond
    its best device is charged to that choice (:meth:`choice_cost`).

    **Sources follow their readers.** An op with no inputs (a parameter, optimizer state, the input
    batch) tells a scheduler nothing when it is reached first: placing it then, at time 0, pins its group
    (with the parameter's gradient and update ops) to whichever device is idle. So sources are *deferred*:
    a source goes where its group is fixed, or with the first op placed that reads it."""

    def __init__(self, graph: Graph, cluster: Cluster, *, memory: bool, rules: tuple[str, ...] = GROUP_RULES,
                 capacity: np.ndarray | None = None):
        self.g, self.c = graph, cluster
        self.times = op_time_matrix(graph, cluster)
        self.ok = feasible_devices(graph, cluster) & np.isfinite(self.times)
        n, D = graph.n_ops, cluster.n_devices
        self.n, self.D = n, D
        # what each op takes of its device (a GPU's launch is its host thread's: launch_times), and the
        # host threads that launch the asynchronous devices' ops, one launch after another
        self.t = device_times(graph, cluster, self.times).tolist()
        launch = np.where(cluster.launcher[None, :] >= 0, launch_times(graph, cluster, self.times), 0.0)
        # an op of a launch group launches nothing of its own: the group's launches are paid once per
        # device, by the first of its ops there (group_launch)
        self.group_launch = group_launch_matrix(graph, cluster) * cluster.op_overhead[None, :]
        grouped = graph.op_group >= 0
        launch[grouped] = np.where(self.group_launch[graph.op_group[grouped]] > 0, 0.0, launch[grouped])
        self.launch = launch.tolist()
        self.op_group = graph.op_group.tolist()
        self.group_launched: set[tuple[int, int]] = set()
        self.launcher = cluster.launcher.tolist()
        self.launcher_free = [0.0] * len(cluster.launcher_names)
        self.launched = [0.0] * n
        self.dev = np.full(n, -1, dtype=np.int64)
        self.finish = [0.0] * n
        self.copies = _Copies(cluster)
        # per device and concurrency slot: sorted busy intervals
        self.lane_start: list[list[list[float]]] = [[[] for _ in range(int(c))] for c in cluster.concurrency]
        self.lane_end: list[list[list[float]]] = [[[] for _ in range(int(c))] for c in cluster.concurrency]
        self.memory = memory
        # Memory as the ops are placed in (roughly) execution order: parameters stay resident; an output is
        # live from its op until its last reader is placed, and so is a copy received by another device.
        self.used = np.zeros(D, dtype=np.int64)
        self.cap = cluster.memory_bytes if capacity is None else capacity
        self.readers_left = np.diff(graph.tensor_pair_ptr).astype(np.int64)
        self.copies_of: dict[int, list[int]] = {}        # tensor -> devices holding a received copy
        grouping = runnable_grouping(graph, rules, self.ok)
        G = grouping.n_groups
        self.group_of = grouping.group
        order = np.argsort(grouping.group, kind="stable")
        self.group_members = np.split(order, np.cumsum(np.bincount(grouping.group, minlength=G))[:-1])
        self.group_dev = np.full(G, -1, dtype=np.int64)
        self.group_params = np.bincount(grouping.group, weights=graph.param_bytes, minlength=G).astype(np.int64)
        self.group_largest = np.zeros(G, dtype=np.int64)        # a group's largest output, held beside its parameters
        np.maximum.at(self.group_largest, grouping.group, graph.out_alloc_total)
        self.group_ok = np.ones((G, D), dtype=bool)
        np.logical_and.at(self.group_ok, grouping.group, self.ok)
        rest = np.zeros((G, D))
        np.add.at(rest, grouping.group, np.where(self.ok, self.times, 0.0))
        rest = np.where(self.group_ok, rest, np.inf)
        self.group_excess = (rest - rest.min(axis=1, initial=np.inf, where=self.group_ok)[:, None]).tolist()
        self.group_best = np.argmin(rest, axis=1)
        self.group_work = rest
        self.work_on = np.zeros(D)                       # work of the groups fixed on each device
        # each group's data exchanged with other groups: tensors coming in (with their readers in the
        # group) and going out (one row per reading group)
        g_src, g_dst = grouping.group[graph.tensor_src[graph.pair_tensor]], grouping.group[graph.pair_op]
        cross = np.flatnonzero(g_src != g_dst)
        self.group_in: list[dict[int, tuple[int, int, list[int]]]] = [{} for _ in range(G)]
        self.group_out: list[dict[tuple[int, int], int]] = [{} for _ in range(G)]
        for q in cross.tolist():
            t = int(graph.pair_tensor[q])
            a, b, nb = int(g_src[q]), int(g_dst[q]), int(graph.tensor_bytes[t])
            self.group_in[b].setdefault(t, (a, nb, []))[2].append(int(graph.pair_op[q]))
            self.group_out[a][t, b] = nb
        self.lookahead = _reader_penalty(graph, cluster, self.times).tolist()
        # inputs of each op: (tensor, producer, bytes), one per distinct tensor
        self.inputs: list[list[tuple[int, int, int]]] = [[] for _ in range(n)]
        tensors, producers = graph.pair_tensor, graph.tensor_src
        for c, t in zip(graph.pair_op.tolist(), tensors.tolist()):
            self.inputs[c].append((t, int(producers[t]), int(graph.tensor_bytes[t])))
        self.floating = floating_ops(graph)
        self.rank = graph.rank

    # ------------------------------------------------------------------ floating ops
    def deferred(self, i: int) -> bool:
        """Is op ``i`` floating and still waiting for its group or a reader to be placed?"""
        return bool(self.floating[i] and self.dev[i] < 0)

    def _followers(self, i: int, d: int) -> list[tuple[int, int]]:
        """The deferred ops that placing op ``i`` on ``d`` places too (its unplaced floating ancestors), in
        topological order, each with its device: ``d``, unless its group is fixed elsewhere or cannot run
        there (then the group's best device)."""
        todo = [s for _, s, _ in self.inputs[i] if self.dev[s] < 0]
        if not todo:
            return []
        seen = set(todo)
        k = 0
        while k < len(todo):
            for _, p, _ in self.inputs[todo[k]]:
                if self.dev[p] < 0 and p not in seen:
                    seen.add(p)
                    todo.append(p)
            k += 1
        out = []
        for s in sorted(todo, key=lambda s: self.rank[s]):
            gs = self.group_of[s]
            ds = (int(self.group_dev[gs]) if self.group_dev[gs] >= 0 else
                  d if self.group_ok[gs, d] else int(self.group_best[gs]))
            out.append((s, ds))
        return out

    # ------------------------------------------------------------------ candidates
    def candidates(self, i: int) -> np.ndarray:
        """Devices op ``i`` may go to: its group's device if fixed, else feasible ones (with room)."""
        gi = self.group_of[i]
        if self.group_dev[gi] >= 0:
            return np.array([self.group_dev[gi]])
        ok = self.group_ok[gi]
        if self.memory:
            ok = ok & (self.used + self.need(i) <= self.cap)
        return np.flatnonzero(ok)

    def allowed(self, i: int, d: int) -> bool:
        """May op ``i`` still go to device ``d`` (:meth:`candidates` for one device)?"""
        gi = self.group_of[i]
        if self.group_dev[gi] >= 0:
            return bool(self.group_dev[gi] == d)
        if not self.group_ok[gi, d]:
            return False
        return not self.memory or bool(self.used[d] + self.need(i)[d] <= self.cap[d])

    def need(self, i: int) -> np.ndarray:
        """Bytes placing op ``i`` adds to each device: its outputs, copies of its inputs, the deferred ops
        it places, and for every group it fixes (Baechi's reservation) the group's parameters and room for
        the group's largest output."""
        g = self.g
        outs: dict[int, int] = {}                 # each group's outputs counted so far
        for s in [i, *(s for s, _ in self._followers(i, 0))]:
            outs[self.group_of[s]] = outs.get(self.group_of[s], 0) + int(g.out_alloc_total[s])
        extra = sum(outs.values())
        held = sum(int(self.group_params[k]) + max(0, int(self.group_largest[k]) - outs[k])
                   for k in outs if self.group_dev[k] < 0)
        need = np.full(self.D, extra + held, dtype=np.int64)
        for t, s, b in self.inputs[i]:
            ds = self.dev[s]
            if ds < 0:
                continue
            for d in range(self.D):
                if d != ds and (t, d) not in self.copies.landed:
                    need[d] += b
        return need

    def choice_cost(self, i: int, d: int) -> float:
        """What choosing device ``d`` for op ``i`` adds beyond its finish there: for every group it fixes
        (its own, and those of the deferred sources it places), the extra time the group's work takes on
        ``d`` beyond its best device."""
        gi = self.group_of[i]
        fixed = {gi: d} if self.group_dev[gi] < 0 else {}
        look = self.lookahead[i][d]
        for s, ds in self._followers(i, d):
            gs = self.group_of[s]
            if self.group_dev[gs] < 0:
                fixed.setdefault(gs, ds)
        return look + sum(self.group_excess[k][dk] + self._group_comm(k, dk, i) for k, dk in fixed.items())

    def _group_comm(self, k: int, d: int, i: int) -> float:
        """The transfers fixing group ``k`` on ``d`` commits it to with groups already fixed elsewhere: each
        tensor it will receive from them or send to them (once per device), at a lone transfer's time.
        Tensors op ``i`` reads are left out: its ready time counts them."""
        gdev, copies = self.group_dev, self.copies
        cost = 0.0
        for t, (a, nb, readers) in self.group_in[k].items():
            da = gdev[a]
            if da >= 0 and da != d and i not in readers and (t, d) not in copies.landed:
                cost += copies.lone(int(da), d, nb)
        sent = set()
        for (t, b), nb in self.group_out[k].items():
            db = gdev[b]
            if db >= 0 and db != d and (t, db) not in sent:
                sent.add((t, db))
                cost += copies.lone(d, int(db), nb)
        return cost

    # ------------------------------------------------------------------ timing
    def ready_time(self, i: int, d: int) -> tuple[float, list, float]:
        """When all of op ``i``'s inputs can be on device ``d``, the transfers that needs (a deferred input
        is taken to run on its device in its first idle gap), and when it could be launched (its local
        inputs launched, its remote ones landed)."""
        t = lt = 0.0
        over: dict[int, float] = {}
        plans = []
        remote = []
        landed, finish, dev = self.copies.landed, self.finish, self.dev
        follow = dict(self._followers(i, d))
        for tensor, s, b in self.inputs[i]:
            ds = dev[s]
            if ds < 0:
                ds = follow[s]
                done = self.slot(ds, 0.0, self.t[s][ds])[0] + self.t[s][ds]
            else:
                done = finish[s]
            if ds == d:
                arrive = done
                lt = max(lt, self.launched[s] if dev[s] >= 0 else done)
            elif (tensor, d) in landed:
                arrive = lt_in = landed[tensor, d]
                lt = max(lt, lt_in)
            else:
                remote.append((done, tensor, int(ds), b))
                continue
            if arrive > t:
                t = arrive
        for ready, tensor, ds, b in sorted(remote):   # issued in the order their producers finish
            land, end, held = self.copies.plan(ds, d, ready, b, over)
            for r in held:
                over[r] = end
            plans.append((tensor, ds, land, end, held, b))
            if land > t:
                t = land
            lt = max(lt, land)
        return t, plans, lt

    def slot(self, d: int, ready: float, dur: float) -> tuple[float, int, int]:
        """(start, lane, position): the earliest idle gap of device ``d`` from ``ready`` that fits ``dur``
        among the next :data:`GAP_SCAN` gaps, else after the device's last op."""
        best = (np.inf, 0, 0)
        for k, (starts, ends) in enumerate(zip(self.lane_start[d], self.lane_end[d])):
            n = len(ends)
            if not n or ready >= ends[-1]:
                start, pos = max(ready, ends[-1] if n else 0.0), n
            else:
                pos = bisect.bisect_right(ends, ready)
                start = ready if pos == 0 else max(ready, ends[pos - 1])
                stop = min(n, pos + GAP_SCAN)
                while pos < stop and start + dur > starts[pos]:
                    start = ends[pos] if ends[pos] > ready else ready
                    pos += 1
                if pos == stop and pos < n:
                    start, pos = ends[-1], n
            if start < best[0]:
                best = (start, k, pos)
        return best

    def evaluate(self, i: int, d: int) -> tuple[float, float, tuple]:
        """(finish, start, plan) of op ``i`` on device ``d`` given everything placed so far."""
        ready, plans, launch_ready = self.ready_time(i, d)
        dur = self.t[i][d]
        h = self.launcher[d]
        launched = None
        if h >= 0:  # its host thread launches it after the ops it launched before
            g = self.op_group[i]
            group = self.group_launch[g, d] if g >= 0 and (g, d) not in self.group_launched else 0.0
            launched = max(self.launcher_free[h], launch_ready) + self.launch[i][d] + group
            ready = max(ready, launched)
        start, lane, pos = self.slot(d, ready, dur)
        return start + dur, start, (d, lane, pos, plans, launched)

    # ------------------------------------------------------------------ commit
    def _occupy(self, i: int, d: int, start: float, lane: int, pos: int) -> None:
        """Op ``i`` runs on ``d`` from ``start``: its device, interval, parameters and outputs."""
        g = self.g
        self.dev[i] = d
        self.finish[i] = start + self.t[i][d]
        self.lane_start[d][lane].insert(pos, start)
        self.lane_end[d][lane].insert(pos, self.finish[i])
        self.used[d] += g.out_alloc_total[i] - g.unconsumed_alloc[i]  # outputs nobody reads die at once
        gi = self.group_of[i]
        if self.group_dev[gi] < 0:
            self.group_dev[gi] = d
            self.used[d] += self.group_params[gi]
            self.work_on[d] += self.group_work[gi, d]
            for m in self.group_members[gi].tolist():             # its deferred members join it now
                if self.deferred(m):
                    self._place_floating(m, d)

    def _place_floating(self, s: int, d: int) -> None:
        for p, dp in [*self._followers(s, d), (s, d)]:    # ancestors first
            if self.dev[p] < 0:
                _, start, plan = self.evaluate(p, dp)
                self.assign(p, plan, start)

    def assign(self, i: int, plan: tuple, start: float) -> None:
        """Commit op ``i`` with the ``plan`` :meth:`evaluate` made for it (nothing placed in between)."""
        d, lane, pos, plans, launched = plan
        g, copies = self.g, self.copies
        if launched is not None:
            if self.op_group[i] >= 0:
                self.group_launched.add((self.op_group[i], d))
            self.launched[i] = launched
            self.launcher_free[self.launcher[d]] = max(self.launcher_free[self.launcher[d]], launched)
        for s, ds in self._followers(i, d):
            if self.dev[s] < 0:
                _, s_start, s_plan = self.evaluate(s, ds)
                self.assign(s, s_plan, s_start)
        for tensor, ds, land, end, held, b in plans:
            for r in held:
                copies.free[r] = end
            copies.landed[tensor, d] = land
            self.copies_of.setdefault(tensor, []).append(d)
            self.used[d] += b
        start, lane, pos = self.slot(d, start, self.t[i][d])    # its sources may have taken the gap
        self._occupy(i, d, start, lane, pos)
        for tensor, s, _ in self.inputs[i]:                         # inputs whose last reader this is
            self.readers_left[tensor] -= 1
            if self.readers_left[tensor] == 0:
                self.used[self.dev[s]] -= g.tensor_alloc[tensor]
                for dc in self.copies_of.pop(tensor, ()):
                    self.used[dc] -= g.tensor_bytes[tensor]

    def send_outputs(self, i: int, dev: np.ndarray) -> None:
        """Issue op ``i``'s transfers to every other device that reads them as it finishes, tensor by
        tensor and reader by reader, as the simulator does (readers' devices known: ``dev``)."""
        g, copies, d = self.g, self.copies, int(self.dev[i])
        for t in range(int(g.op_tensor_ptr[i]), int(g.op_tensor_ptr[i + 1])):
            for q in range(int(g.tensor_pair_ptr[t]), int(g.tensor_pair_ptr[t + 1])):
                dc = int(dev[g.pair_op[q]])
                if dc != d and (t, dc) not in copies.landed:
                    land, end, held = copies.plan(d, dc, self.finish[i], float(g.tensor_bytes[t]), {})
                    for r in held:
                        copies.free[r] = end
                    copies.landed[t, dc] = land
                    self.copies_of.setdefault(t, []).append(dc)

    def place_best(self, i: int, method: str) -> None:
        """Op ``i`` to the candidate device where it finishes earliest (plus :meth:`choice_cost`)."""
        best = None
        for d in self.candidates(i).tolist():
            f, start, plan = self.evaluate(i, d)
            key = f + self.choice_cost(i, d)
            if best is None or key < best[0]:
                best = (key, start, plan)
        if best is None:
            raise self.fail(i, method)
        self.assign(i, best[2], best[1])

    def place_leftover(self, method: str) -> None:
        """Floating ops nobody placed (no reader, no placed group member): each where it finishes earliest."""
        for i in self.g.topological_order[self.floating[self.g.topological_order]].tolist():
            if self.dev[i] < 0:
                self.place_best(i, method)

    @property
    def makespan(self) -> float:
        return max(self.finish, default=0.0)

    def fail(self, i: int, method: str) -> InfeasibleError:
        op = self.g.ops[i]
        why = "memory" if self.memory else "device constraints"
        return InfeasibleError(f"{method}: no device can take op {op.name!r} ({why}; cluster {self.c.name!r})")

    def placement(self, method: str, **meta) -> Placement:
        """The placement, with the scheduler's estimate of its step: its schedule model replayed in the order
        the runtime runs the ops (:func:`_replay`; ``estimated_step_time_s``), and the schedule as built, in
        the scheduler's own order (``decision_order_estimate_s``)."""
        return Placement.from_array(self.g, self.c, self.dev, method,
                                    estimated_step_time_s=_replay(self.g, self.c, self.dev),
                                    decision_order_estimate_s=self.makespan, **meta)


MEMORY_TRIES = 5  #: schedules a memory-aware placer builds, each with less room where the last ran out


def fitting(graph: Graph, cluster: Cluster, method: str, build) -> Placement:
    """A memory-aware placer's placement that fits when simulated. The schedule's memory count is an
    estimate (ops run in a different order, outputs and received copies live longer), so the placement
    is simulated; where a device runs out, the schedule is built again with that device's capacity
    scaled by ``capacity / peak`` (and 2 % more headroom), up to :data:`MEMORY_TRIES` times. Meta:
    ``memory_tries``. Raises :class:`InfeasibleError` naming the devices still out of memory."""

    sim = Simulator(graph, cluster)
    cap = cluster.memory_bytes.astype(np.float64)
    scale = np.ones(cluster.n_devices)
    for attempt in range(1, MEMORY_TRIES + 1):
        placement = build((cap * scale).astype(np.int64))
        r = sim.run(placement)
        if r.ok:
            return dataclasses.replace(placement, meta={**placement.meta, "memory_tries": attempt})
        over = r.peak_memory / np.maximum(cap, 1.0)
        scale = np.where(over > 1, scale / np.maximum(over, 1.0) * 0.98, scale)
    worst = int(np.argmax(r.peak_memory / cap))
    raise InfeasibleError(f"{method}: its schedules run out of memory on {', '.join(r.oom_devices)} after "
                          f"{MEMORY_TRIES} tries with less room (peak on {cluster.devices[worst].name!r}: "
                          f"{int(r.peak_memory[worst]):,} of {int(cap[worst]):,} bytes; cluster {cluster.name!r})")


def _reader_penalty(graph: Graph, cluster: Cluster, times: np.ndarray) -> np.ndarray:
    """``[n_ops, D]``: how much later, at least, op ``i``'s slowest-served reader finishes if ``i`` runs on
    ``d`` — the one-step lookahead of PEFT's optimistic cost table (Arabnejad & Barbosa 2014). A reader
    ``j`` of ``i`` either runs on ``d`` or pays a lone transfer from ``d`` to run where it is fastest:
    ``max_j [min(t(j, d), min_{e != d} t(j, e) + transfer(d, e)) - min_e t(j, e)]``. On identical devices it
    is 0; it keeps a tiny op off a device (a CPU with a lower per-op overhead) its readers would leave."""
    D = cluster.n_devices
    src, dst, nbytes = graph.edges()
    t = np.where(np.isfinite(times), times, np.inf)
    out = np.zeros((graph.n_ops, D))
    if not len(src) or D == 1:
        return out
    best = t.min(axis=1)
    tj = t[dst]                                            # [E, D] each reader's time on each device
    lone = cluster.transfer_time(nbytes.astype(np.float64))   # [E, D, D] from d to e
    via = (tj[:, None, :] + lone).min(axis=2)              # [E, d]: run the reader elsewhere, pay the copy
    pen = np.minimum(tj, via) - best[dst][:, None]
    np.maximum.at(out, src, np.where(np.isfinite(pen), pen, 0.0))
    return out


def predecessor_counts(graph: Graph) -> np.ndarray:
    """Number of distinct producer ops of each op (an op reading two outputs of one producer counts it once)."""
    src, dst, _ = graph.edges()
    pairs = np.unique(src * graph.n_ops + dst)
    return np.bincount(pairs % graph.n_ops, minlength=graph.n_ops).astype(np.int64)


def earliest_finish_in_order(graph: Graph, cluster: Cluster, order, method: str, memory: bool) -> Placement:
    s = Schedule(graph, cluster, memory=memory)
    for i in order.tolist():
        if not s.deferred(i):
            s.place_best(i, method)
    s.place_leftover(method)
    return s.placement(method)


def _replay(graph: Graph, cluster: Cluster, dev: np.ndarray) -> float:
    """The schedule model's step for the fixed placement ``dev`` with the ops taken in the order the
    runtime runs them: always the op whose inputs are ready earliest (ties by topological rank), each
    finished op's copies issued in the order the ops finish, as the simulator issues them."""
    s = Schedule(graph, cluster, memory=False)
    s.floating[:] = False
    s.group_dev[s.group_of] = dev
    indeg = predecessor_counts(graph)
    rank = graph.rank.tolist()
    heap = [(0.0, rank[i], i) for i in np.flatnonzero(indeg == 0).tolist()]
    heapq.heapify(heap)
    unsent: list[tuple[float, int, int]] = []           # finished ops whose copies are not issued yet
    while heap:
        r, rk, i = heapq.heappop(heap)
        while unsent and unsent[0][0] <= r:             # every op finished by now sends first
            _, _, p = heapq.heappop(unsent)
            s.send_outputs(p, dev)
        d = int(dev[i])
        ready = s.ready_time(i, d)[0]
        if ready > r * (1 + 1e-12) + 1e-15:            # its inputs land later: wait its turn
            heapq.heappush(heap, (ready, rk, i))
            continue
        _, start, plan = s.evaluate(i, d)
        s.assign(i, plan, start)
        heapq.heappush(unsent, (s.finish[i], rank[i], i))
        for c in graph.successors(i).tolist():
            indeg[c] -= 1
            if indeg[c] == 0:                           # a lower bound: its last producer's finish
                heapq.heappush(heap, (max(s.finish[q] for q in graph.predecessors(c).tolist()), rank[c], c))
    return s.makespan


def topological_repair(graph: Graph, priority_order: np.ndarray) -> np.ndarray:
    """A topological order that follows ``priority_order`` wherever dependencies allow."""
    prio = np.empty(graph.n_ops, dtype=np.int64)
    prio[priority_order] = np.arange(graph.n_ops)
    indeg = predecessor_counts(graph)
    heap = [(int(prio[i]), i) for i in range(graph.n_ops) if indeg[i] == 0]
    heapq.heapify(heap)
    out = []
    while heap:
        _, i = heapq.heappop(heap)
        out.append(i)
        for c in graph.successors(i):
            indeg[c] -= 1
            if indeg[c] == 0:
                heapq.heappush(heap, (int(prio[c]), int(c)))
    return np.array(out, dtype=np.int64)
