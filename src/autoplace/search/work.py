"""Nominal work: how a search's ``budget`` (seconds) becomes a count of evaluations or samples.

Every search under the simulator counts work, not the wall clock, so that a search is reproducible for a
seed on a busy machine: ``budget`` seconds allow as many evaluations as a machine doing nominal work
would fit in them. A simulation costs ``n_ops / OPS_PER_SECOND``; a learned policy's forward and backward
passes cost the per-node, per-group and per-update constants below; each placer's formula (which of these
its samples pay) is here beside the others. How long a budget takes in seconds on this machine is
measured in ``benchmarks/placer_speed.py``. Scored by real runs, a budget is wall-clock seconds instead.
"""

from __future__ import annotations

from autoplace.validation import check_budget

__all__ = ["OPS_PER_SECOND", "DEFAULT_BUDGET_S", "nominal_budget", "simulation_seconds", "evaluations",
           "rl_samples", "hdp_samples", "gdp_samples", "htf_mpr_evaluations"]

#: nominal simulator speed in simulated ops per second (batched local search ran 10–18 M ops/s here before
#: the loop modelled launches and shared segments; it now runs 2.4–7.4 M on the 30k-op DAG, so a budget
#: takes 1.4–4 times its seconds of wall time: ``benchmarks/simulator.py``, docs/benchmarks.md)
OPS_PER_SECOND = 1e7

#: a placer's budget when none is given, in seconds of nominal work
DEFAULT_BUDGET_S = {"rl": 60.0, "hdp": 60.0, "gdp": 60.0, "htf-mpr": 30.0, "auto": 60.0, "local-search": 10.0}

# The policies' nominal costs, per sample unless said otherwise (forward and backward passes together).
RL_SECONDS_PER_GROUP = 2e-4         #: RL placer: per decoder step (a group)
RL_SECONDS_PER_SAMPLE = 1.5e-3      #: RL placer: fixed (its share of an update's encoder and Adam step)
HDP_SECONDS_PER_NODE = 2e-6         #: HDP's grouper, per node
HDP_SECONDS_PER_GROUP = 2e-4        #: HDP's placer, per decoder step (as the RL placer's)
GDP_SECONDS_PER_NODE = 2e-5         #: GDP: one forward pass of the policy per node (a backward: 2)
GDP_SAMPLE_SECONDS_PER_NODE = 1e-6  #: GDP: drawing a sample and its PPO ratios, per node
GDP_SECONDS_PER_UPDATE = 0.04       #: GDP: fixed cost of one graph's update
HTF_GENERATION_SECONDS = 0.05       #: HTF-MPR: fixed cost of a generation (breeding, the predictor's fit)
HTF_FIT_SECONDS_PER_FEATURE = 2e-6  #: HTF-MPR: the predictor's fit, per mapping evaluated and one-hot feature


def nominal_budget(budget: float | None, method: str) -> float:
    """``budget`` checked (a finite number of seconds >= 0), or ``method``'s default when it is None."""
    return DEFAULT_BUDGET_S[method] if check_budget(budget) is None else budget


def simulation_seconds(n_ops: int) -> float:
    """The nominal cost of simulating one placement of ``n_ops`` ops."""
    return n_ops / OPS_PER_SECOND


def evaluations(budget: float, n_ops: int, scenarios: int = 1) -> int:
    """The simulations ``budget`` seconds allow, each of ``scenarios`` runs of the graph (at least one)."""
    return max(1, int(budget * OPS_PER_SECOND / max(n_ops, 1) / scenarios))


def rl_samples(budget: float, n_ops: int, n_groups: int) -> int:
    """The RL placer's samples: each a simulation, a decoder step per group and a fixed share."""
    per_sample = simulation_seconds(n_ops) + n_groups * RL_SECONDS_PER_GROUP + RL_SECONDS_PER_SAMPLE
    return max(1, int(budget / per_sample))


def hdp_samples(budget: float, n_ops: int, n_nodes: int, n_groups: int) -> int:
    """HDP's samples: each a simulation, the grouper over its nodes, the placer over its groups."""
    per_sample = simulation_seconds(n_ops) + n_nodes * HDP_SECONDS_PER_NODE + n_groups * HDP_SECONDS_PER_GROUP
    return max(1, int(budget / per_sample))


def gdp_samples(budget: float, graphs: list[tuple[int, int]], samples_per_update: int, ppo_epochs: int) -> int:
    """GDP's samples over ``graphs`` (``(n_ops, n_nodes)`` each), in whole rounds of one update per graph.
    An update costs a fixed share, one forward pass over the nodes to sample and a forward and backward
    (3 forward passes' worth) per PPO epoch; each of its samples a simulation and a per-node share."""
    passes, per_round = 1 + 3 * ppo_epochs, 0.0
    for n_ops, n_nodes in graphs:
        per_round += (GDP_SECONDS_PER_UPDATE + n_nodes * GDP_SECONDS_PER_NODE * passes
                      + samples_per_update * (simulation_seconds(n_ops) + n_nodes * GDP_SAMPLE_SECONDS_PER_NODE))
    rounds = max(1, int(budget / per_round))
    return rounds * samples_per_update * len(graphs)


def htf_mpr_evaluations(budget: float, n_ops: int, features: int, initial: int, per_generation: int) -> int:
    """HTF-MPR's real evaluations: ``initial`` mappings, then generations of ``per_generation`` each, while
    their cost fits in ``budget``. Each evaluation costs a simulation; each generation a fixed share and the
    predictor's refit on every mapping evaluated so far (``features`` one-hot features each)."""
    evaluated = initial
    spent = (evaluated * n_ops / OPS_PER_SECOND + HTF_GENERATION_SECONDS
             + evaluated * features * HTF_FIT_SECONDS_PER_FEATURE)
    while True:
        nxt = (per_generation * n_ops / OPS_PER_SECOND + HTF_GENERATION_SECONDS
               + (evaluated + per_generation) * features * HTF_FIT_SECONDS_PER_FEATURE)
        if spent + nxt > budget:
            break
        spent += nxt
        evaluated += per_generation
    return evaluated
