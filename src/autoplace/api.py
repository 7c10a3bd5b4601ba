"""The Python API's entry point that ties the layers together: :func:`compile` captures a PyTorch model's
training step, places it with any placer and returns a :class:`~autoplace.runtime.placed.PlacedStep` that
trains on this machine's devices (``autoplace.compile``).

The top layer: it reads models and clusters (:mod:`autoplace.resolve`), places (:mod:`autoplace.placers`)
and runs (:mod:`autoplace.runtime`); nothing below imports it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from rich.console import Console
from rich.progress import Progress

from autoplace.cache import cached_graph
from autoplace.capture import CaptureError, capture_training_step
from autoplace.capture.cache import capture_key
from autoplace.capture.inputs import resolve_model, split_inputs
from autoplace.cluster import Cluster
from autoplace.errors import AutoplaceError, InfeasibleError
from autoplace.formats import load_graph, load_placement
from autoplace.granularity import GRANULARITIES, with_granularity
from autoplace.graph import Graph
from autoplace.placement import Placement
from autoplace.placers import available_placers, get_placer, place
from autoplace.placers.fast import best_fast
from autoplace.progress import PlainLines, progress_to
from autoplace.replicas import set_micro_batched, strategy_graph
from autoplace.resolve import resolve_cluster
from autoplace.runtime.backends import RUNTIMES, make_pool
from autoplace.runtime.cache import cached_placement
from autoplace.runtime.detect import detected_cluster
from autoplace.runtime.dist.pool import DistributedPool
from autoplace.runtime.eager import EagerRunner
from autoplace.runtime.placed import PlacedStep, hyper_inputs, initial_values
from autoplace.runtime.pool import DEFAULT_TIMEOUT_S, Runtime
from autoplace.runtime.profile import calibrate, with_costs_of
from autoplace.runtime.program import ExecutionError, torch_device
from autoplace.runtime.verdict import this_machine
from autoplace.runtime.verify import baseline_device, known_verdict, local, on_one_device, one_device, verified
from autoplace.search.work import nominal_budget
from autoplace.sim import Simulator
from autoplace.validation import (
    MAX_BUDGET_S,
    as_scalar,
    check_budget,
    check_flag,
    check_name,
    check_number,
    seed_int,
    shown_value,
)

__all__ = ["compile", "AUTO_MICRO_BATCHES"]


def _cluster_of(cluster: str | Cluster) -> Cluster:
    if isinstance(cluster, Cluster):
        return cluster

    return resolve_cluster(str(cluster))


def _placement_of(placement: str | os.PathLike | Placement, graph: Graph, cluster: Cluster) -> Placement:

    p = placement if isinstance(placement, Placement) else load_placement(placement)
    p.to_array(strategy_graph(graph, p), cluster)   # one clear error for a placement of another graph or cluster
    return p


@contextlib.contextmanager
def _shown(enabled: bool) -> Iterator[Callable[[str], None]]:
    """What compile is doing, on standard error (the search's own reports included): a transient line on
    a terminal, plain log lines (:class:`~autoplace.progress.PlainLines`) elsewhere; yields the function
    that sets the stage. Nothing when not ``enabled``."""

    if not enabled:
        yield lambda text: None
        return
    if not sys.stderr.isatty():
        lines = PlainLines()
        with progress_to(lines):
            yield lines.stage
        return

    with Progress(transient=True, console=Console(stderr=True)) as bar:
        task = bar.add_task("compile", total=None)
        current = {"stage": "compile"}

        def stage(text: str) -> None:
            current["stage"] = text
            bar.update(task, description=text, total=None)
            bar.refresh()                           # each stage shown as it starts, however short

        def search(message: str, fraction: float | None) -> None:
            bar.update(task, description=f"{current['stage']}: {message}",
                       **({} if fraction is None else {"total": 1.0, "completed": fraction}))

        with progress_to(search):
            yield stage


def _check_arguments(optimizer, placement, timeout, budget, *, cluster, method, seed, granularity, name, cache,
                     keep_whole, runtime, micro_batches, profiled, flags: dict[str, Any]) -> dict[str, Any]:
    """``compile``'s arguments that can be checked before any work: one clear error for each. NumPy and torch
    scalars stand for the numbers they hold (arrays are refused); returns the numbers as Python ones."""

    if placement is not None and not isinstance(placement, (str, os.PathLike, Placement)):
        raise AutoplaceError(f"placement must be a Placement or a placement file, got {type(placement).__name__}")
    if profiled is not None and not isinstance(profiled, (str, os.PathLike, Graph)):
        raise AutoplaceError(f"profiled must be a Graph or a graph file, got {shown_value(profiled)}")
    if not isinstance(cluster, (str, os.PathLike, Cluster)):
        raise AutoplaceError(f"cluster must be a preset name, a cluster file or a Cluster, got "
                             f"{shown_value(cluster)}")
    check_name(method, "method", AutoplaceError)
    if not isinstance(granularity, str) or granularity not in GRANULARITIES:
        raise AutoplaceError(f"granularity must be one of {', '.join(map(repr, GRANULARITIES))}, got "
                             f"{shown_value(granularity)}")
    if name is not None:
        check_name(name, "name", AutoplaceError)
    if not isinstance(runtime, str) or runtime not in RUNTIMES:
        raise AutoplaceError(f"unknown runtime {shown_value(runtime)} (choose from {', '.join(RUNTIMES)})")
    if not isinstance(cache, (bool, str, os.PathLike)):
        raise AutoplaceError(f"cache must be True, False or a folder, got {type(cache).__name__}")
    if isinstance(keep_whole, str) or not isinstance(keep_whole, (tuple, list)) or not all(
            isinstance(k, str) for k in keep_whole):
        raise AutoplaceError(f"keep_whole must be a list of module class names, got {shown_value(keep_whole)}")
    flags = {what: check_flag(value, what) for what, value in flags.items()}
    micro = micro_batches if isinstance(micro_batches, str) else as_scalar(micro_batches, "micro_batches")
    if micro != "auto" and (isinstance(micro, bool) or not isinstance(micro, int) or not 1 <= micro <= 2**20):
        raise AutoplaceError(f"micro_batches must be a whole number >= 1 or 'auto', got {shown_value(micro)}")
    timeout = as_scalar(timeout, "timeout")
    check_number(timeout, "timeout", AutoplaceError, lo=0, hi=MAX_BUDGET_S, lo_open=True)
    groups = getattr(optimizer, "param_groups", None)
    if not isinstance(groups, list):
        raise AutoplaceError(f"optimizer must be a torch.optim optimizer, got {type(optimizer).__name__}")
    for i, g in enumerate(groups):
        for k, v in g.items():
            vals = v if isinstance(v, tuple) else (v,)
            if any(isinstance(x, float) and not math.isfinite(x) for x in vals):
                raise AutoplaceError(f"optimizer.param_groups[{i}][{k!r}] is {v!r}: not a finite number")
    return {"seed": seed_int(seed), "budget": check_budget(budget), "timeout": float(timeout),
            "micro_batches": micro, **flags}


def compile(model, example_inputs: Any, loss_fn: Callable, optimizer, *, targets: Any = None,
            cluster: str | Cluster = "localhost", method: str = "auto",
            placement: str | os.PathLike | Placement | None = None, seed: int = 0, budget: float | None = None,
            granularity: str = "op", name: str | None = None, timeout: float = DEFAULT_TIMEOUT_S,
            cache: bool | str | os.PathLike = True, progress: bool | None = None,
            keep_whole: tuple[str, ...] | list[str] = (), runtime: str = "auto",
            micro_batches: int | str = 1, verify: bool | None = None, calibrate: bool | None = None,
            profiled: Graph | str | os.PathLike | None = None, eager_rng: bool = False) -> PlacedStep:
    """Capture, place and set up one training step of ``model`` (see the module docstring); returns the
    :class:`~autoplace.runtime.placed.PlacedStep`, called as ``step(inputs, targets)`` like a training step.

    Arguments:

    - ``model``: an ``nn.Module`` or a ``torch.export`` ``ExportedProgram``.
    - ``example_inputs``, ``targets``: a batch (a tensor, a tuple of positional arguments, a dict of keyword
      arguments, or ``(args, kwargs)``); a later batch of other shapes (the last, smaller batch of an epoch)
      is captured and placed once, the first time it comes.
    - ``loss_fn``: ``loss_fn(outputs, *targets)`` returns a scalar.
    - ``optimizer``: a ``torch.optim`` optimizer over the model's parameters (its class and hyper-parameters
      are captured, the learning rate as an input read at every call, so learning-rate schedulers work; its
      state, if it has stepped, is the starting state).
    - ``cluster``: a preset name, a cluster file or a :class:`~autoplace.cluster.Cluster` (default
      ``localhost``: this machine's devices).
    - ``method``, ``seed``, ``budget``: a placer's name (``autoplace.placers.place``) and its seed and budget.
      ``auto`` weighs the strategies over the batch dimension of :data:`RUNNABLE_STRATEGIES` too (a
      ``method`` may name one): a placement of ``R`` replicas (``step.replicas``) runs on the distributed
      runtime, each replica on its ``1 / R`` of every batch, gradients all-reduced as DDP does, so it trains
      as eager accumulation over ``R`` micro-batches (each replica's BatchNorm statistics its own; replica
      0's are read).
    - ``placement``: instead of a method, a :class:`~autoplace.placement.Placement` or a saved placement file
      of this captured graph (``step.save``'s, or ``autoplace place``'s output for ``autoplace capture``'s
      graph).
    - ``granularity``, ``keep_whole``: ``granularity="module"`` keeps every module with parameters whole on
      one device (:func:`~autoplace.granularity.with_granularity`): ``step.device_map()`` is then an
      Accelerate device map; ``keep_whole`` names module classes kept on one device whole (Accelerate's
      ``no_split_module_classes``).
    - ``name``: the captured graph's name (default: the model's class).
    - ``timeout``: seconds before a step on the workers counts as failing.
    - ``cache``: placements searched are kept on disk by the captured graph's content, the cluster, the
      method, seed and budget (:mod:`autoplace.runtime.cache`), so compiling the same model again skips the
      search; ``False`` turns that off, a path names the folder.
    - ``progress``: show what it is doing on standard error — a line that updates itself on a terminal,
      plain log lines elsewhere (default: on; ``False``: nothing).
    - ``runtime``: what runs the placed step — ``"shm"`` (worker processes on this machine, tensors through
      shared memory), ``"distributed"`` (``torch.distributed`` ranks: NCCL between GPUs, gloo otherwise; the
      ranks of a cluster that spans hosts are started with ``autoplace ranks``) or ``"auto"``
      (:func:`~autoplace.runtime.runtime_for`). A placement on one device of this machine runs in this
      process as plain PyTorch (``step.runtime == "eager"``: :class:`~autoplace.runtime.eager.EagerRunner`),
      at eager's speed and bit for bit as eager trains.
    - ``micro_batches``: ``M``: each step is gradient accumulation over ``M`` equal micro-batches of the
      batch and one update (:func:`~autoplace.capture.capture_training_step`), so eager accumulation is what
      it equals; on a micro-batched step ``auto`` also weighs pipelines (GPipe, 1F1B: the ``pipeline``
      placer). ``"auto"`` captures the step with each of :data:`AUTO_MICRO_BATCHES` that divides the batch,
      ranks the counts by their fast placements' simulated steps (fitting first) and searches with
      ``method`` on the best only (:func:`_choose_micro_batches`; ``auto`` by default with its default budget
      divided by the count); ``step.micro_batches`` says which, ``step.micro_batch_choice`` (and
      ``step.report()``) what each count simulated.
    - ``verify``: measure a placement over several devices against the whole step on one device, on the
      batch given, before keeping it (:mod:`autoplace.runtime.verdict`): it is kept only where it is measured
      faster, else the step runs on one device; ``step.verdict`` and ``step.report()`` say which and why,
      and the verdict is cached with the placement. Default: for ``method="auto"`` (a placement a user
      named, or a placer named, is run as given).
    - ``calibrate``: before placing, measure this machine's devices and links and the captured ops' costs
      on them (what ``autoplace cluster detect`` and ``autoplace profile`` do:
      :func:`~autoplace.runtime.profile.calibrate`), each kept in the cache, so a machine is measured once
      and a model profiled once. Default: for ``method="auto"`` on a cluster whose figures are estimates and
      whose devices are all on this machine, with the cache on (``cache=False`` would measure at every
      compile), unless the environment sets ``AUTOPLACE_CALIBRATE=0``. With ``micro_batches="auto"`` the
      cluster is measured, not the ops (each count is a graph of its own).
    - ``profiled``: the measured op costs of this step from a graph ``autoplace profile`` wrote (a file or a
      :class:`~autoplace.graph.Graph`), instead; ``cluster`` then takes the measured cluster (``autoplace
      cluster detect``'s file, or a :class:`~autoplace.cluster.Cluster`).
    - ``eager_rng``: over several devices, the random ops (dropout) draw from this process's CPU generator
      in eager's order (made here before each step and handed to their devices), so a model with dropout
      trains as eager PyTorch on the CPU does under the same ``torch.manual_seed`` (random ops whose draws
      read values of the step are an error); by default each worker draws from its own. A step on one
      device is eager and draws as eager does either way.

    ``step.setup_seconds`` says where the set-up time went (capture, place, workers). Every argument is
    checked before any work, one clear :class:`~autoplace.errors.AutoplaceError` each; a number may be a
    NumPy or torch scalar (``np.int64(2)``, ``torch.tensor(2)``), never an array."""
    return _Compile(model, example_inputs, loss_fn, optimizer, targets, cluster=cluster, method=method,
                    placement=placement, seed=seed, budget=budget, granularity=granularity, name=name,
                    timeout=timeout, cache=cache, progress=progress, keep_whole=keep_whole, runtime=runtime,
                    micro_batches=micro_batches, verify=verify, calibrate=calibrate, profiled=profiled,
                    eager_rng=eager_rng).run()


_BUDGET = object()   #: :meth:`_Compile.search`'s default: the budget compile was given


class _Compile:
    """One :func:`compile`: its arguments, checked before any work, and its work as methods — capture the
    step, search a placement, set the step up — with :meth:`recompile` for the step to call on a batch of
    other shapes."""

    def __init__(self, model, example_inputs, loss_fn, optimizer, targets, *, cluster, method, placement, seed,
                 budget, granularity, name, timeout, cache, progress, keep_whole, runtime, micro_batches, verify,
                 calibrate, profiled, eager_rng):

        checked = _check_arguments(optimizer, placement, timeout, budget, cluster=cluster, method=method, seed=seed,
                                   granularity=granularity, name=name, cache=cache, keep_whole=keep_whole,
                                   runtime=runtime, micro_batches=micro_batches, profiled=profiled,
                                   flags={"progress": progress, "verify": verify, "calibrate": calibrate,
                                          "eager_rng": eager_rng})
        seed, budget, timeout, micro_batches = (checked[k] for k in ("seed", "budget", "timeout", "micro_batches"))
        progress, verify, calibrate, eager_rng = (checked[k] for k in ("progress", "verify", "calibrate",
                                                                       "eager_rng"))
        if method in available_placers() and get_placer(method).strategy and method not in RUNNABLE_STRATEGIES:
            raise AutoplaceError(f"method {method!r} is a strategy the simulator judges alone (autoplace place/"
                                 f"simulate/compare); compile runs placements and {', '.join(RUNNABLE_STRATEGIES)}")
        model, example_inputs = resolve_model(model, example_inputs)
        meta = next((n for n, p in [*model.named_parameters(), *model.named_buffers()] if p.is_meta), None)
        if meta is not None:
            raise AutoplaceError(f"parameter {meta!r} is on the meta device: a placed step trains real weights "
                                 "(materialise the model first)")
        cl = _cluster_of(cluster)
        if calibrate is None:
            calibrate = (placement is None and profiled is None and method == "auto" and bool(cl.estimated)
                         and cache is not False and _runnable_here(cl)
                         and os.environ.get("AUTOPLACE_CALIBRATE", "1") != "0")
        hint = cl.calibration_hint() if placement is None and profiled is None and not calibrate else None
        if hint:                                    # once per place in the caller's code (warnings' default)
            warnings.warn(hint.removeprefix("note: ") + "; compile(cluster='cluster.json') takes the measured file",
                          stacklevel=3)
        if micro_batches == "auto" and placement is not None:
            raise AutoplaceError("micro_batches='auto' chooses the placement too: give a method, not a placement")
        if micro_batches == "auto" and profiled is not None:
            raise AutoplaceError("profiled= holds one step's costs: give a fixed micro_batches with it, not 'auto'")
        self.model, self.inputs, self.loss_fn, self.optimizer, self.targets = (model, example_inputs, loss_fn,
                                                                               optimizer, targets)
        self.cl, self.method, self.placement, self.seed, self.budget = cl, method, placement, seed, budget
        self.granularity, self.keep_whole, self.name, self.timeout = granularity, keep_whole, name, timeout
        self.cache, self.folder = cache, None if cache is True else cache
        self.progress, self.runtime, self.profiled, self.eager_rng = progress, runtime, profiled, eager_rng
        self.micro_batches = micro_batches
        self.micro = micro_batches if micro_batches != "auto" else AUTO_MICRO_BATCHES[0]
        self.verify = placement is None and method == "auto" if verify is None else verify
        self.calibrate = calibrate
        # replicas synchronise over torch.distributed, one rank per device: the shared-memory runtime runs
        # placements and pipelines, and no two replicas share a device
        strategies = RUNNABLE_STRATEGIES if runtime != Runtime.SHM else ("pipelined",)
        self.options = {"strategies": strategies, "distinct": True} if method == "auto" else \
            {"distinct": True} if method == "hybrid" else {}
        self.keyed = method if not self.options else f"{method} {json.dumps(self.options, sort_keys=True)}"  # cache key
        self.seconds: dict[str, float] = {}
        self.records: list = []

    def capture(self, inputs, targets, title, m=None) -> Graph:
        """The step on ``inputs`` and ``targets`` over ``m`` micro-batches (default: the step's), captured or
        from the cache, at the step's granularity."""

        m = self.micro if m is None else m
        trace = lambda: capture_training_step(self.model, inputs, self.loss_fn, self.optimizer,  # noqa: E731
                                              targets=targets, name=title, micro_batches=m)
        key = capture_key(self.model, inputs, self.loss_fn, self.optimizer, targets) if self.cache is not False \
            else None
        graph = trace() if key is None else cached_graph(f"compile-{title or type(self.model).__name__}",
                                                         {**key, "name": title, "micro_batches": m},
                                                         trace, self.folder)
        # the strategies over the batch dimension re-capture the step with more micro-batches
        return set_micro_batched(with_granularity(graph, self.granularity, self.keep_whole),
                                 lambda more: self.capture(inputs, targets, title, more))

    def search(self, graph: Graph, work: Any = _BUDGET) -> tuple[Placement, bool]:
        """A placement of ``graph`` by the method (with ``work``, default the budget), or the cached one; and
        whether it was cached."""

        work = self.budget if work is _BUDGET else work
        run = lambda: place(graph, self.cl, self.method, seed=self.seed, budget=work, **self.options)  # noqa: E731
        if self.cache is False:
            return run(), False
        return cached_placement(graph, self.cl, self.keyed, self.seed, work, run, self.folder)

    def recompile(self, inputs, targets) -> tuple[Graph, Placement]:
        """Another batch shape (called by the step): its step captured (over the most micro-batches up to the
        step's that divide it), on the same devices op for op where its ops are the same."""

        for m in [d for d in range(self.micro, 0, -1) if self.micro % d == 0]:
            try:
                other = self.capture(inputs, targets, self.graph.name, m)
                break
            except CaptureError:
                if m == 1:
                    raise
        same = _same_devices(other, self.chosen, self.cl)
        if same is not None:
            return other, same
        if self.placement is not None:
            raise AutoplaceError(f"a batch of other shapes captures another graph of {self.graph.name!r} than the "
                                 "placement given covers: compile with a method to place it")
        try:
            return other, self.search(other)[0]
        except AutoplaceError:
            if not (isinstance(self.method, str) and self.method in RUNNABLE_STRATEGIES):
                raise
            # a strategy the batch does not split into (a smaller last batch): a placement of its step
            return other, place(other, self.cl, "auto", seed=self.seed, budget=self.budget, strategies=False)

    def run(self) -> PlacedStep:
        pool = make_pool(self.cl, runtime=self.runtime, timeout=self.timeout)
        pool.launch()                               # the workers boot while the step is captured and placed
        with _shown(True if self.progress is None else self.progress) as stage:
            try:
                pool = self._place(pool, stage)
                step = self._set_up(pool, stage)
            except BaseException:
                pool.close()
                raise
        step.setup_seconds, step.placement_cached, step.micro_batches = self.seconds, self.hit, self.micro
        step.micro_batch_choice = self.records
        return step

    def _place(self, pool, stage):
        """Capture the step and place it (sets ``graph``, ``chosen``, ``hit``); returns the pool to run it on."""
        seconds = self.seconds
        if self.micro_batches == "auto":
            if self.calibrate:                      # the counts are ranked on this machine's measured devices

                stage(f"calibrating: measuring {self.cl.name} (once per machine)")
                self.cl = detected_cluster(self.cl, folder=self.folder, machine=this_machine())
            self.micro, self.graph, self.chosen, self.hit, self.records = _choose_micro_batches(
                self.capture, self.search, self.inputs, self.targets, self.name, self.cl, self.method, self.seed,
                self.budget, stage, seconds)
        else:
            t = time.perf_counter()
            stage(f"capturing {self.name or type(self.model).__name__}")
            graph = self.capture(self.inputs, self.targets, self.name)
            seconds["capture"] = time.perf_counter() - t
            if self.profiled is not None or self.calibrate:
                t = time.perf_counter()
                estimated = self.cl
                graph, self.cl = _measured(graph, self.cl, self.profiled, pool, self.folder, stage)
                if self.profiled is None:           # the strategies' re-captures measured as the step was
                    set_micro_batched(graph, lambda m: _measured(self.capture(self.inputs, self.targets, self.name, m),
                                                                 estimated, None, pool, self.folder, stage)[0])
                seconds["calibrate"] = time.perf_counter() - t
            t = time.perf_counter()
            stage(f"placing {graph.n_ops} ops with {self.method}" if self.placement is None
                  else "checking the placement")
            if self.placement is None:
                self.chosen, self.hit = self.search(graph)
            else:
                self.chosen, self.hit = _placement_of(self.placement, graph, self.cl), False
            self.graph = graph
            seconds["place"] = time.perf_counter() - t
        return _pool_for(self.chosen, pool, self.cl, self.runtime, self.timeout)

    def _set_up(self, pool, stage) -> PlacedStep:
        """The placed step: in this process where it runs on one local device, else on the pool's workers
        (verified against one device where asked)."""

        graph, cl, chosen, model, optimizer = self.graph, self.cl, self.chosen, self.model, self.optimizer
        common = dict(keys=tuple(split_inputs(self.inputs)[1]),
                      state_keys=[k for k in model.state_dict() if k in graph or k in graph.meta.get("tied", {})],
                      optimizer=optimizer, hyper_inputs=hyper_inputs(graph, model, optimizer))

        def fresh() -> dict:                        # the model's and optimizer's state (a placed run shares
            return initial_values(graph, model, optimizer)   # the tensors it was set up with)

        def eager_step(device: int, placed: Placement) -> PlacedStep:
            runner = EagerRunner(model, self.loss_fn, optimizer, cl.devices[device].name, micro_batches=self.micro)
            return PlacedStep(graph, cl, placed, fresh(), eager=runner, **common)

        t = time.perf_counter()
        one = one_device(chosen, cl)
        verify = self.verify and one is None and local(cl)
        cache_args = (graph, cl, self.keyed, self.seed, self.budget, self.folder) if self.cache is not False else None
        known = known_verdict(cache_args, cl, self.runtime, chosen) if verify else None
        if known is not None and known.kept == "one device":     # measured before: no workers needed
            one = baseline_device(cl)
            chosen, verify = on_one_device(graph, cl, one), False
        if one is not None and self.runtime == Runtime.AUTO and local(cl):
            stage(f"setting up {cl.devices[one].name} in this process")
            pool.close(now=True)
            step = eager_step(one, chosen)
        else:
            stage(f"setting up {cl.n_devices} workers")
            step = PlacedStep(graph, cl, chosen, fresh(), timeout=self.timeout, recompile=self.recompile, pool=pool,
                              eager_rng=self.eager_rng, **common)
            if verify:
                step = verified(step, eager_step, fresh, cl, self.method, self.inputs, self.targets, optimizer,
                                 cache_args, self.runtime, known, stage)
        step.verdict = step.verdict or known
        self.seconds["workers"] = time.perf_counter() - t
        return step

#: the strategies compile runs (:mod:`autoplace.placers.replicated`): towers are judged by the simulator only
RUNNABLE_STRATEGIES = ("data-parallel", "hybrid", "pipelined")


def _same_devices(graph: Graph, chosen: Placement, cluster: Cluster) -> Placement | None:
    """``chosen`` for ``graph`` (the step of another batch shape) where it runs the same ops — for a strategy,
    where the replicated step rebuilt from ``graph`` has the same ops — else None."""
    if chosen.meta.get("strategy") is None:
        if {op.name for op in graph.ops} == set(chosen.assignment):
            return dataclasses.replace(chosen, graph=graph.name, cluster=cluster.name)
        return None
    try:
        run = strategy_graph(graph, chosen)
    except AutoplaceError:          # the batch does not split into the replicas' micro-batches
        return None
    return chosen if {op.name for op in run.ops} == set(chosen.assignment) else None


def _pool_for(placement: Placement, pool, cluster: Cluster, runtime: str, timeout: float):
    """The worker pool that runs ``placement``: ``pool``, or where the placement runs replicas (gradients
    all-reduced over torch.distributed) and ``pool`` shares memory instead, the distributed runtime's."""

    strategy = placement.meta.get("strategy") or {}
    if int(strategy.get("replicas", 1)) < 2 or isinstance(pool, DistributedPool):
        return pool
    if runtime == Runtime.SHM:
        raise AutoplaceError(f"placement {placement.method!r} runs {strategy['replicas']} replicas, whose gradients "
                             "are all-reduced over torch.distributed: use runtime='distributed' or 'auto'")
    pool.close(now=True)
    pool = DistributedPool(cluster, timeout=timeout)
    pool.launch()
    return pool


def _runnable_here(cluster: Cluster) -> bool:
    """Whether every device of ``cluster`` is one this process can run on (its CPU, its CUDA devices)."""
    import torch


    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    try:
        devices = [torch_device(d.name) for d in cluster.devices]
    except ExecutionError:
        return False
    return local(cluster) and all(d == "cpu" or int(d.split(":")[1]) < gpus for d in devices)


def _measured(graph: Graph, cluster: Cluster, profiled, pool, folder, stage) -> tuple[Graph, Cluster]:
    """``graph`` with measured op costs — ``profiled``'s, else measured now (:func:`calibrate`) with the
    cluster measured too — and the cluster to place on."""

    if profiled is not None:

        return with_costs_of(graph, profiled if isinstance(profiled, Graph) else load_graph(profiled)), cluster
    stage(f"calibrating: measuring {cluster.name} and {graph.n_ops} ops (once per machine and model)")
    return calibrate(graph, cluster, pool=pool, folder=folder, machine=this_machine(),
                     progress=lambda what: stage(f"calibrating: {what}"))


#: the micro-batch counts ``compile(micro_batches="auto")`` tries (those that divide the batch)
AUTO_MICRO_BATCHES = (1, 2, 4, 8)


def _choose_micro_batches(capture, search, inputs, targets, name, cluster, method, seed, budget, stage,
                          seconds) -> tuple:
    """``(M, graph, placement, cache hit, per-count records)`` for the count of :data:`AUTO_MICRO_BATCHES`
    whose step simulates fastest (one that fits first). Each count is captured once and ranked cheaply —
    by the fast placers (and, over several micro-batches, the ``pipeline`` placer) where ``method`` is
    ``auto``, else by ``method`` itself — and ``auto``'s search runs on the best count only: with
    ``budget``, or by default with its default budget divided by the count (a step of M micro-batches
    repeats its ops M times, and its ranking has already placed it: the search refines that placement, and
    the whole choice costs about one search of the step captured whole). Counts that do not divide the
    batch, or for which nothing fits, are skipped (the first failure is raised when every count fails).
    Each record says what the count's ranking found and how long it took."""


    records: list[dict] = []
    ranked, failed, searched = [], None, {}
    seconds["capture"] = seconds["place"] = 0.0
    for m in AUTO_MICRO_BATCHES:
        t = time.perf_counter()
        stage(f"capturing {name or 'the model'} with {m} micro-batch{'es' if m > 1 else ''}")
        try:
            graph = capture(inputs, targets, name, m)
        except CaptureError as e:
            if m == 1:
                raise
            records.append({"micro_batches": m, "skipped": str(e).split(": ")[-1][:120]})
            continue                                    # m does not divide the batch
        captured = time.perf_counter() - t
        seconds["capture"] += captured
        t = time.perf_counter()
        stage(f"ranking {m} micro-batch{'es' if m > 1 else ''} ({graph.n_ops} ops)")
        try:
            if method == "auto":
                cands = [best_fast(graph, cluster, seed=seed)[0]]
                if m > 1 and cluster.n_devices > 1:
                    try:
                        cands.append(place(graph, cluster, "pipeline", seed=seed))
                    except InfeasibleError:
                        pass
            else:
                searched[m] = search(graph)             # the method itself: its placement is the result
                cands = [searched[m][0]]
        except InfeasibleError as e:                    # no placement fits: more micro-batches may
            failed = failed or e
            records.append({"micro_batches": m, "ops": graph.n_ops, "capture_s": round(captured, 3),
                            "skipped": str(e)[:120]})
            continue
        sim = Simulator(graph, cluster)
        results = [(sim.run(p), p) for p in cands]
        r, best = min(results, key=lambda rp: (not rp[0].ok, rp[0].step_time))
        rank_s = time.perf_counter() - t
        seconds["place"] += rank_s
        records.append({"micro_batches": m, "ops": graph.n_ops, "ranked_by": best.method,
                        "simulated_s": r.step_time, "fits": r.ok, "capture_s": round(captured, 3),
                        "rank_s": round(rank_s, 3)})
        ranked.append(((not r.ok, r.step_time), m, graph))
    if not ranked:
        raise failed
    _, m, graph = min(ranked, key=lambda x: x[0])
    if m in searched:
        chosen, hit = searched[m]
    else:

        work = budget if budget is not None else nominal_budget(None, method) / m
        t = time.perf_counter()
        stage(f"placing {graph.n_ops} ops ({m} micro-batches) with {method} (budget {work:g} s)")
        chosen, hit = search(graph, work)
        seconds["place"] += time.perf_counter() - t
        next(rec for rec in records if rec["micro_batches"] == m)["search_budget_s"] = work
    for rec in records:
        rec["chosen"] = rec["micro_batches"] == m
    return m, graph, chosen, hit, records
