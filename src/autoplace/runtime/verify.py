"""Whether a placement over several devices is worth running: measured against the whole step on one device,
on the user's batch, before compile keeps it (:func:`verified`; the verdict is cached with the placement:
:func:`known_verdict`)."""

from __future__ import annotations

import warnings

from autoplace.capture.inputs import as_tuple, split_inputs
from autoplace.cluster import Cluster
from autoplace.graph import Graph
from autoplace.placement import Placement
from autoplace.runtime.backends import runtime_for
from autoplace.runtime.cache import cached_verdict, store_verdict
from autoplace.runtime.dist.control import hosts_of
from autoplace.runtime.placed import PlacedStep
from autoplace.runtime.verdict import Verdict, race, this_machine
from autoplace.sim import Simulator, simulate

__all__ = ["one_device", "local", "on_one_device", "baseline_device", "machine_key", "known_verdict", "verified"]


def one_device(placement: Placement, cluster: Cluster) -> int | None:
    """The index of the one device every op of ``placement`` is on, or None."""
    used = {d for d, n in placement.counts().items() if n}
    return cluster.device_names.index(used.pop()) if len(used) == 1 else None


def local(cluster: Cluster) -> bool:
    """Whether every device of ``cluster`` is on this host (one host, no rendezvous to reach others)."""

    return len(hosts_of(cluster)) == 1 and not cluster.meta.get("rendezvous")


def on_one_device(graph: Graph, cluster: Cluster, device: int) -> Placement:
    return Placement.from_array(graph, cluster, [device] * graph.n_ops, f"one device ({cluster.devices[device].name})")


def baseline_device(cluster: Cluster) -> int:
    """The device a user runs the whole step on without autoplace: the first GPU, else the first CPU."""
    return next(iter(cluster.devices_of_kind("gpu") or cluster.devices_of_kind("cpu") or [0]))


def machine_key(cluster: Cluster, runtime: str, placement: Placement) -> str:
    """What a measured verdict holds for: this machine and the runtime the placement runs on (replicas run on
    the distributed runtime)."""

    replicas = int((placement.meta.get("strategy") or {}).get("replicas", 1))
    return f"{this_machine()}, runtime {'distributed' if replicas > 1 else runtime_for(cluster, runtime)}"


def known_verdict(cache_args, cluster: Cluster, runtime: str, placement: Placement):
    """The verdict cached with the placement, measured on this machine and runtime against the device
    one-device steps run on here; else None."""

    if not cache_args:
        return None
    v = cached_verdict(*cache_args, machine=machine_key(cluster, runtime, placement))
    return v if v is not None and v.device == cluster.devices[baseline_device(cluster)].name else None


def verified(step: PlacedStep, eager_step, fresh, cluster: Cluster, method: str, inputs, targets, optimizer,
              cache_args, runtime: str, verdict, stage) -> PlacedStep:
    """``step`` (a placement over several devices) if it is measured faster than the whole step on one
    device, else the one-device step (:mod:`autoplace.runtime.verdict`); the verdict (``verdict``: the
    cached one, else measured now) is set on the step returned and cached with the placement
    (``cache_args``: the cache's key and folder, or None); ``fresh()``: the state to start from again
    after the measured steps. Where the whole step does not fit on one device (simulated), nothing is
    measured: the placement is kept."""
    import torch


    graph = step.graph
    device = baseline_device(cluster)
    if verdict is None:
        one = on_one_device(graph, cluster, device)
        sim = Simulator(graph, cluster)
        ran_one = sim.run(one)
        if not ran_one.ok:                              # one device is no option: nothing to race
            stage(f"keeping the placement: the whole step does not fit on {cluster.devices[device].name}")
            return step
        simulated, simulated_one = simulate(step.run_graph, cluster, step.placement).step_time, ran_one.step_time
        probe = eager_step(device, one)
        args, tgt = split_inputs(inputs), as_tuple(targets)
        cuda = [d for d in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
        called = getattr(optimizer, "_opt_called", None)
        failed: dict[str, Exception] = {}

        def guarded(name: str, fn):
            def run():
                try:
                    return fn()
                except Exception as e:
                    failed[name] = e
                    raise
            return run

        try:
            with torch.random.fork_rng(devices=cuda):   # the measured steps leave the user's RNG as it was
                times = race({"placed": guarded("placed", lambda: step(inputs, targets)),
                              "one device": guarded("one device", lambda: probe._eager.step(
                                  args, tgt, optimizer.param_groups))},
                             progress=stage)
        except Exception as e:                          # noqa: BLE001 - which contender failed decides
            if "placed" in failed:                      # the placement does not run: one device, said so
                step.close()
                warnings.warn(f"the {method} placement failed when measured against one device, so the step "
                              f"runs on {cluster.devices[device].name}: {e}", stacklevel=5)
                return eager_step(device, one)
            if "one device" not in failed:
                raise
            stage(f"keeping the placement: the whole step failed on {cluster.devices[device].name} ({e})"[:200])
            step.reset(fresh())                         # one device failed (out of memory, say): keep the split
            return step
        finally:
            probe.close()
            if called is None:                          # nor tell a scheduler that the optimizer stepped
                vars(optimizer).pop("_opt_called", None)
            else:
                optimizer._opt_called = called
        verdict = Verdict.decide(method, cluster.devices[device].name, times, simulated, simulated_one,
                                 machine_key(cluster, runtime, step.placement))
        if cache_args:
            store_verdict(verdict, *cache_args)
        if verdict.kept == "placement":
            step.reset(fresh())                         # the measured steps trained it: start again
    if verdict.kept == "placement":
        step.verdict = verdict
        return step
    step.close()
    out = eager_step(device, on_one_device(graph, cluster, device))
    out.verdict = verdict
    return out
