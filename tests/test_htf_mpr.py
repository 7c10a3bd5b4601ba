"""HTF-MPR: initial mapping families on hand-made DAGs, the Kendall tau distance by hand, both crossovers,
the fitness predictor, and the genetic search end to end (determinism, resume, command line)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from autoplace.cli import main
from autoplace.cluster import get_cluster
from autoplace.cost import feasible_devices
from autoplace.errors import AutoplaceError
from autoplace.graph import Graph, Op
from autoplace.grouping import runnable_grouping
from autoplace.placers.learned.htf_mpr import (
    HTFMPRConfig,
    colouring,
    htf_mpr_search,
    initial_mappings,
    node_paths,
    point_crossover,
    stochastic_crossover,
    work_budget,
)
from autoplace.placers.learned.predictor import (
    MODELS,
    FitnessPredictor,
    compare_models,
    cross_validate,
    kendall_tau_distance,
    one_hot,
)
from autoplace.search import SearchBudget
from autoplace.sim import simulate
from autoplace.zoo import build_graph


def diamond() -> Graph:
    """x -> h1 -> h2 -> h3 -> out (heavy), x -> s -> out (light), x -> t (a leaf)."""
    ops = [Op("x", "input", output_bytes=(1024,))]
    prev = "x"
    for i in (1, 2, 3):
        ops.append(Op(f"h{i}", "mm", (prev,), output_bytes=(1024,), flops=1e9))
        prev = f"h{i}"
    ops.append(Op("s", "relu", ("x",), output_bytes=(1024,), flops=1e3))
    ops.append(Op("t", "relu", ("x",), output_bytes=(1024,), flops=1e3))
    ops.append(Op("out", "add", ("h3", "s"), output_bytes=(1024,), flops=1e3))
    return Graph(ops, name="diamond")


def nodes_of(graph, cluster):
    return runnable_grouping(graph, ("colocation",), feasible_devices(graph, cluster))


# ------------------------------------------------------------------------------------------ initial mappings
def test_the_longest_path_comes_first_and_the_paths_cover_every_node_once():
    g, c = diamond(), get_cluster("gtx1050tix2")
    nodes = nodes_of(g, c)
    paths = node_paths(g, nodes)
    names = [[g.ops[int(np.flatnonzero(nodes.group == v)[0])].name for v in p] for p in paths]
    assert names[0] == ["x", "h1", "h2", "h3", "out"]
    assert sorted(v for p in paths for v in p.tolist()) == list(range(nodes.n_groups))


def test_every_initial_family_is_what_it_says():
    g, c = diamond(), get_cluster("gtx1050tix2")                   # cpu:0, gpu:0, gpu:1
    nodes = nodes_of(g, c)
    init = initial_mappings(g, c, nodes, seed=0, random_homogeneous=10)
    fam: dict[str, list[np.ndarray]] = {}
    for f, m in init:
        fam.setdefault(f, []).append(m)
    assert (fam["default-gpu"][0] == 1).all() and (fam["default-cpu"][0] == 0).all()
    assert [int(m[0]) for m in fam["homogeneous"]] == [2]       # all-cpu and all-gpu:0 came first
    paths = node_paths(g, nodes)
    assert len(fam["longest-path"]) == math.factorial(3)           # one per device permutation
    for m in fam["longest-path"] + fam["random-homogeneous"]:
        assert all(len(set(m[p].tolist())) == 1 for p in paths)    # a path on one device
    longest = {tuple(m[paths[0]].tolist()) for m in fam["longest-path"]}
    assert len(longest) == 3                                       # the longest path on every device
    src, dst, _ = g.edges()
    a, b = nodes.group[src], nodes.group[dst]
    for m in fam["colour"]:
        assert not np.any((m[a] == m[b]) & (a != b))               # no monochrome edge
    keys = [m.tobytes() for _, m in init]
    assert len(keys) == len(set(keys))                             # no duplicates


def test_a_node_only_the_cpu_runs_stays_on_the_cpu_in_every_initial_mapping():
    from autoplace.grouping import grouped_graph

    ops = [Op("x", "input", output_bytes=(1024,)), Op("a", "mm", ("x",), output_bytes=(1024,), flops=1e6),
           Op("io", "decode", ("a",), output_bytes=(1024,), flops=1e3, device_types=("cpu",)),
           Op("b", "mm", ("io",), output_bytes=(1024,), flops=1e6)]
    g, c = Graph(ops, name="cpu-op"), get_cluster("gtx1050tix2")
    nodes = nodes_of(g, c)
    can_run = grouped_graph(g, nodes, c).feasible
    assert not can_run.all()                                        # the test needs a node some device cannot run
    for _, m in initial_mappings(g, c, nodes, seed=0, random_homogeneous=5):
        assert can_run[np.arange(nodes.n_groups), m].all()


def test_colouring_an_odd_cycle_with_two_colours_leaves_one_conflict():
    ops = [Op("x", "input", output_bytes=(8,)), Op("a", "relu", ("x",), output_bytes=(8,)),
           Op("b", "add", ("x", "a"), output_bytes=(8,))]            # undirected: a triangle
    g, c = Graph(ops, name="triangle"), get_cluster("k80x2")
    nodes = nodes_of(g, c)
    colour = colouring(g, nodes, 2)
    src, dst, _ = g.edges()
    a, b = nodes.group[src], nodes.group[dst]
    assert int(np.sum(colour[a] == colour[b])) == 1
    assert len(set(colouring(g, nodes, 3).tolist())) == 3          # with three colours: none


# ------------------------------------------------------------------------------------------------ predictor
def test_kendall_tau_distance_by_hand():
    assert kendall_tau_distance([1, 2, 3, 4], [10, 20, 30, 40]) == 0.0
    assert kendall_tau_distance([1, 2, 3, 4], [4, 3, 2, 1]) == 1.0
    # one swapped pair of six: (2, 3)
    assert kendall_tau_distance([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(1 / 6)
    # the pair (1, 2) ties in the prediction only: ½; the other five agree
    assert kendall_tau_distance([1, 2, 3, 4], [5, 5, 6, 7]) == pytest.approx(0.5 / 6)
    assert kendall_tau_distance([1, 2, 3, 4], [7, 7, 7, 7]) == pytest.approx(0.5)   # a constant: chance
    assert kendall_tau_distance([1, 1, 2], [3, 3, 4]) == 0.0                        # ties on both sides agree
    with pytest.raises(AutoplaceError):
        kendall_tau_distance([1, 2], [1, 2, 3])


def test_the_predictor_ranks_a_learnable_fitness_and_follows_sklearn_conventions():
    rng = np.random.default_rng(0)
    X = rng.integers(0, 3, (300, 8))
    y = 1.0 / (1.0 + (X == 0).sum(1) + 0.5 * (X[:, 0] != X[:, 1]))      # the CPU (0) is slow; a cut costs
    p = FitnessPredictor(n_devices=3).fit(X[:200], y[:200])
    assert kendall_tau_distance(y[200:], p.predict(X[200:])) < 0.2
    assert p.score(X[200:], y[200:]) > 0.8 and p.get_params()["model"] == "gbr"
    assert one_hot(X[:2], 3).shape == (2, 24) and one_hot(X[:2], 3).sum() == 16
    folds = cross_validate(p, X, y, k=5)
    assert folds.shape == (5,) and (folds < 0.3).all()
    table = compare_models(X[:120], y[:120], n_devices=3, runs=2)
    assert set(table) == set(MODELS) and all(0 <= m <= 1 and s >= 0 and f == 0 for m, s, f in table.values())
    with pytest.raises(AutoplaceError, match="before fit"):
        FitnessPredictor().predict(X)
    with pytest.raises(AutoplaceError, match="unknown fitness model"):
        FitnessPredictor("xgboost")
    with pytest.raises(AutoplaceError, match="unknown fitness model"):
        FitnessPredictor().set_params(model="xgboost").fit(X, y)
    from sklearn.model_selection import GridSearchCV, cross_val_score  # scikit-learn's own tools take it

    assert (cross_val_score(FitnessPredictor(n_devices=3), X[:150], y[:150], cv=3) > 0.7).all()
    grid = GridSearchCV(FitnessPredictor(n_devices=3), {"model": ["gbr", "omp"]}, cv=3).fit(X[:150], y[:150])
    assert grid.best_params_ == {"model": "gbr"}


def test_a_model_whose_fit_fails_in_one_run_is_reported_beside_the_runs_that_fitted(monkeypatch):
    import autoplace.placers.learned.predictor as pred

    real, calls = pred.cross_validate, []

    def flaky(predictor, X, y, *, k, seed):
        calls.append(seed)
        if predictor.model == "ridge" and len(calls) % 2:
            raise ValueError("cannot convert float NaN to integer")           # as LARS's path does
        return real(predictor, X, y, k=k, seed=seed)

    monkeypatch.setattr(pred, "cross_validate", flaky)
    rng = np.random.default_rng(1)
    X = rng.integers(0, 3, (60, 5))
    y = 1.0 / (1.0 + (X == 0).sum(1))
    table = pred.compare_models(X, y, n_devices=3, models=("ridge",), runs=4)
    mean, std, failed = table["ridge"]
    assert failed == 2 and 0 <= mean < 0.5 and std >= 0


# ------------------------------------------------------------------------------------------------- breeding
@pytest.mark.parametrize("n_points, expected", [(1, 2), (2, 6), (3, 14)])
def test_point_crossover_gives_every_mixture_of_segments_but_the_parents(n_points, expected):
    rng = np.random.default_rng(n_points)
    a, b = np.zeros(12, dtype=np.int64), np.ones(12, dtype=np.int64)
    kids = point_crossover(a, b, n_points, rng)
    assert len(kids) == expected == 2 ** (n_points + 1) - 2
    assert len({k.tobytes() for k in kids}) == expected
    for k in kids:
        assert not (k == a).all() and not (k == b).all()
        assert int(np.sum(k[1:] != k[:-1])) <= n_points              # at most one switch per cut


def test_stochastic_crossover_takes_more_from_the_fitter_parent():
    rng = np.random.default_rng(0)
    a, b = np.zeros(2000, dtype=np.int64), np.ones(2000, dtype=np.int64)
    kid = stochastic_crossover(a, b, 9.0, 1.0, rng)
    assert set(kid.tolist()) <= {0, 1} and 0.85 < float((kid == 0).mean()) < 0.95


# ------------------------------------------------------------------------------------------------ the search
def test_a_tiny_htf_mpr_search_beats_its_initial_mappings_and_is_reproducible():
    g, c = build_graph("mnist-softmax"), get_cluster("gtx1050tix2")
    cfg = HTFMPRConfig(random_homogeneous=5)
    r = htf_mpr_search(g, c, budget=SearchBudget(samples=200), seed=0, config=cfg)
    p = r.placement
    initial = r.extra["initial"]
    first = r.curve.points[0].best_step_s                          # the best initial mapping
    assert r.samples >= 200 and p.meta["best_step_s"] < first and 10 <= initial <= 25   # the GA improved on them
    assert p.meta["screened"] > r.samples - initial                 # the predictor screened out children
    assert simulate(g, c, p).step_time == pytest.approx(p.meta["best_step_s"])
    again = htf_mpr_search(g, c, budget=SearchBudget(samples=200), seed=0, config=cfg)
    assert (again.placement.to_array(g, c) == p.to_array(g, c)).all()
    assert [q.best_step_s for q in again.curve.points] == [q.best_step_s for q in r.curve.points]


def test_an_interrupted_htf_mpr_search_resumes_to_the_uninterrupted_result(tmp_path):
    g, c = build_graph("toy-mlp", layers=2), get_cluster("k80x2")
    cfg = HTFMPRConfig(random_homogeneous=3, top_x=4, pairs=3)
    whole = htf_mpr_search(g, c, budget=SearchBudget(samples=60), seed=1, config=cfg)
    htf_mpr_search(g, c, budget=SearchBudget(samples=60), seed=1, config=cfg, checkpoint=tmp_path,
                   stop_after_updates=3)
    resumed = htf_mpr_search(g, c, budget=SearchBudget(samples=60), seed=1, config=cfg, resume=tmp_path)
    assert (resumed.placement.to_array(g, c) == whole.placement.to_array(g, c)).all()
    assert [q.best_step_s for q in resumed.curve.points] == [q.best_step_s for q in whole.curve.points]
    assert (resumed.samples, resumed.updates, resumed.extra["screened"], resumed.extra["families"]) == \
        (whole.samples, whole.updates, whole.extra["screened"], whole.extra["families"])
    assert (resumed.extra["mappings"] == whole.extra["mappings"]).all()
    with pytest.raises(AutoplaceError, match="different: config"):
        htf_mpr_search(g, c, budget=SearchBudget(samples=60), seed=1, config=HTFMPRConfig(top_x=5), resume=tmp_path)


def test_the_work_budget_counts_growing_refits(monkeypatch):
    import autoplace.search.work as work

    g, c = build_graph("mnist-softmax"), get_cluster("gtx1050tix2")
    small, large = work_budget(g, c, 5.0), work_budget(g, c, 50.0)
    assert small.samples < large.samples < 10 * small.samples        # refits grow with the evaluated set
    monkeypatch.setattr(work, "HTF_FIT_SECONDS_PER_FEATURE", 0.0)
    free = work_budget(g, c, 50.0)
    assert free.samples > 3 * large.samples


def test_a_graph_with_fewer_mappings_than_the_budget_converges():
    ops = [Op("x", "input", output_bytes=(8,)), Op("a", "relu", ("x",), output_bytes=(8,), flops=1e3)]
    g, c = Graph(ops, name="two"), get_cluster("gtx1050tix2")
    r = htf_mpr_search(g, c, budget=SearchBudget(samples=1000), seed=0)
    assert r.stop_reason == "converged" and r.samples <= 9


def test_a_population_where_one_mapping_ran_still_breeds():
    from autoplace.placers.learned.htf_mpr import HTFMPRSearch

    g, c = build_graph("mnist-softmax"), get_cluster("gtx1050tix2")
    search = HTFMPRSearch(g, c, HTFMPRConfig(random_homogeneous=5), seed=0)
    search.update()
    search.steps[1:] = np.inf                                        # as if only one mapping had run
    search._fit()
    search.update()
    assert len(search.X) > 25


def test_htf_mpr_from_the_command_line(tmp_path, capsys):
    out = tmp_path / "m.json"
    assert main(["place", "mnist-softmax", "-c", "gtx1050tix2", "-m", "htf-mpr", "--samples", "60",
                 "--set", "top_x=5", "-o", str(out)]) == 0
    saved = json.loads(out.read_text())
    assert saved["method"] == "htf-mpr" and saved["family"] in {"ga", "default-gpu", "default-cpu", "homogeneous",
                                                                 "longest-path", "random-homogeneous", "colour"}
    capsys.readouterr()
    assert main(["place", "mnist-softmax", "-c", "gtx1050tix2", "-m", "htf-mpr", "--set", "model=xgb",
                 "-o", str(tmp_path / "x.json")]) == 2
    assert "model" in capsys.readouterr().err and not (tmp_path / "x.json").exists()


def test_a_generation_runs_the_children_the_predictor_ranks_highest(monkeypatch):
    from autoplace.placers.learned.htf_mpr import HTFMPRSearch

    g, c = build_graph("mnist-softmax"), get_cluster("gtx1050tix2")
    search = HTFMPRSearch(g, c, HTFMPRConfig(random_homogeneous=5, top_x=4), seed=0)
    search.update()                                                  # the initial mappings
    seen = []

    class Stub:                                                      # a distinct score per mapping
        def predict(self, kids):
            seen.append(kids.copy())
            return kids @ (3.0 ** np.arange(kids.shape[1]))

    search.predictor = Stub()
    monkeypatch.setattr(search, "_fit", lambda: None)
    before = len(search.X)
    search.update()
    kids = seen[0]
    best = kids[np.argsort(-Stub().predict(kids))[:4]]
    assert search.screened == len(kids) > 4 and len(search.X) == before + 4
    assert {r.tobytes() for r in search.X[before:]} == {r.tobytes() for r in best}


def test_groups_coarsen_the_nodes_as_the_rl_placer_does_and_the_placement_expands_to_every_op():
    from autoplace.placers.learned.htf_mpr import htf_mpr_nodes
    from autoplace.placers.learned.rl import RLConfig, rl_grouping

    g, c = build_graph("rnnlm-2", steps=6, hidden=256), get_cluster("k80x2")
    fine = htf_mpr_nodes(g, c, HTFMPRConfig())
    cfg = HTFMPRConfig(groups=24, group_rules="colocation,gradient,structure,structure-first")
    coarse = htf_mpr_nodes(g, c, cfg)
    assert coarse.n_groups <= 24 < fine.n_groups
    rl = rl_grouping(g, c, RLConfig(groups=24, decide="group"))
    assert (coarse.group == rl.group).all()
    r = htf_mpr_search(g, c, budget=SearchBudget(samples=60), seed=0, config=cfg)
    assert r.extra["mappings"].shape[1] == coarse.n_groups
    p = r.placement.to_array(g, c)
    assert len(p) == g.n_ops and all(len(set(p[coarse.members(k)].tolist())) == 1 for k in range(coarse.n_groups))
    assert simulate(g, c, r.placement).step_time == pytest.approx(r.placement.meta["best_step_s"])


def test_the_random_model_runs_children_without_a_predictor_and_predicts_nothing(monkeypatch):
    from autoplace.placers.learned.htf_mpr import HTFMPRSearch

    g, c = build_graph("mnist-softmax"), get_cluster("gtx1050tix2")
    search = HTFMPRSearch(g, c, HTFMPRConfig(random_homogeneous=5, top_x=4, model="random"), seed=0)
    monkeypatch.setattr(FitnessPredictor, "fit", lambda *a, **k: pytest.fail("fitted a predictor"))
    search.update()
    before = len(search.X)
    search.update()
    assert search.predictor is None and len(search.X) == before + 4 and search.screened > 4
    with pytest.raises(AutoplaceError, match="model"):
        HTFMPRConfig(model="none")


def test_roulette_selection_draws_parents_in_proportion_to_fitness():
    from autoplace.placers.learned.htf_mpr import roulette_pair

    rng = np.random.default_rng(0)
    draws = np.array([roulette_pair(np.array([6.0, 3.0, 1.0, 0.0]), rng) for _ in range(4000)])
    share = np.bincount(draws[:, 0], minlength=4) / len(draws)          # the first parent: the wheel itself
    assert abs(share[0] - 0.6) < 0.03 and abs(share[1] - 0.3) < 0.03 and (draws != 3).all()
    assert (draws[:, 0] != draws[:, 1]).all()                      # two parents that ran: distinct
    assert roulette_pair(np.array([2.0, 0.0, 0.0]), rng) == (0, 0)  # one that ran: bred with itself
    none = np.array([roulette_pair(np.zeros(4), rng) for _ in range(2000)])
    assert (np.bincount(none.ravel(), minlength=4) > 800).all()     # none ran: uniform


def test_mutation_draws_the_configured_number_of_nodes_per_child():
    from autoplace.placers.learned.htf_mpr import mutate

    rng = np.random.default_rng(0)
    kids = np.zeros((4000, 50), dtype=np.int64)
    out = mutate(kids, 2.0, 4, rng)
    assert abs((out != kids).sum(1).mean() - 2.0 * 3 / 4) < 0.1 and set(np.unique(out).tolist()) == {0, 1, 2, 3}
    state = rng.bit_generator.state
    assert mutate(kids, 0.0, 4, rng) is kids and rng.bit_generator.state == state      # no draw at rate 0


def test_the_predictor_is_refitted_on_every_mapping_run_so_far_after_each_generation(monkeypatch):
    from autoplace.placers.learned.htf_mpr import HTFMPRSearch

    sizes = []
    real = FitnessPredictor.fit
    monkeypatch.setattr(FitnessPredictor, "fit", lambda self, X, y: (sizes.append(len(X)), real(self, X, y))[1])
    g, c = build_graph("mnist-softmax"), get_cluster("gtx1050tix2")
    search = HTFMPRSearch(g, c, HTFMPRConfig(random_homogeneous=5, top_x=4), seed=0)
    seen = []
    for _ in range(4):
        search.update()
        seen.append(len(search.X))
    assert sizes == seen and seen[1:] == [seen[0] + 4, seen[0] + 8, seen[0] + 12]


def test_children_bred_onto_a_device_that_cannot_run_a_node_are_repaired():
    ops = [Op("x", "input", output_bytes=(1024,)), Op("a", "mm", ("x",), output_bytes=(1024,), flops=1e6),
           Op("io", "decode", ("a",), output_bytes=(1024,), flops=1e3, device_types=("cpu",))]
    ops += [Op(f"b{i}", "mm", ("io" if i == 0 else f"b{i - 1}",), output_bytes=(1024,), flops=1e6) for i in range(6)]
    g, c = Graph(ops, name="cpu-op"), get_cluster("gtx1050tix2")
    from autoplace.grouping import grouped_graph
    from autoplace.placers.learned.htf_mpr import HTFMPRSearch

    search = HTFMPRSearch(g, c, HTFMPRConfig(random_homogeneous=5, top_x=4, mutation=4.0), seed=0)
    can_run = grouped_graph(g, search.nodes, c).feasible
    for _ in range(6):
        search.update()
    assert (search.families.count("ga") > 0 and
            all(can_run[np.arange(search.nodes.n_groups), m].all() for m in search.X))


def test_a_generation_with_new_children_ends_a_stall():
    from autoplace.placers.learned.htf_mpr import HTFMPRSearch

    search = HTFMPRSearch(build_graph("mnist-softmax"), get_cluster("gtx1050tix2"),
                          HTFMPRConfig(random_homogeneous=5), seed=0)
    search.update()
    search._stalled = 19
    search.update()
    assert search._stalled == 0 and not search.converged


def test_device_permutations_beyond_the_limit_are_distinct_draws_with_the_identity_first():
    from autoplace.placers.learned.htf_mpr import _permutations

    perms = _permutations(5, 24, np.random.default_rng(0))
    assert len(perms) == 24 == len(set(perms)) and perms[0] == (0, 1, 2, 3, 4)
    assert all(sorted(p) == list(range(5)) for p in perms)
    assert len(_permutations(3, 24, np.random.default_rng(0))) == 6


def test_a_setting_of_the_wrong_type_is_one_clear_error_for_every_learned_placer(tmp_path, capsys):
    from autoplace.placers.learned.gdp import GDPConfig
    from autoplace.placers.learned.rl import RLConfig

    for bad in ("top_x=2.5", "groups=abc", "max_permutations=true"):
        assert main(["place", "mnist-softmax", "-c", "gtx1050tix2", "-m", "htf-mpr", "--set", bad,
                     "-o", str(tmp_path / "x.json")]) == 2
        err = capsys.readouterr().err
        assert bad.split("=")[0] in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    with pytest.raises(AutoplaceError, match="learning_rate must be float"):
        RLConfig(learning_rate="fast")
    with pytest.raises(AutoplaceError, match="attention must be bool"):
        GDPConfig(attention=1)
    assert RLConfig(groups=np.int64(8), learning_rate=1, logit_clip=None).groups == 8   # NumPy ints, ints as floats
    assert GDPConfig(attention=np.True_).attention


def test_a_generation_that_breeds_nothing_new_does_not_refit(monkeypatch):
    from autoplace.placers.learned.htf_mpr import HTFMPRSearch

    fits = []
    real = FitnessPredictor.fit
    monkeypatch.setattr(FitnessPredictor, "fit", lambda self, X, y: (fits.append(len(X)), real(self, X, y))[1])
    search = HTFMPRSearch(build_graph("mnist-softmax"), get_cluster("gtx1050tix2"),
                          HTFMPRConfig(random_homogeneous=5, top_x=4), seed=0)
    search.update()
    search.update()
    assert len(fits) == 2
    monkeypatch.setattr(search, "_generation", lambda: np.zeros(0))          # as when every child ran before
    point = search.update()
    assert len(fits) == 2 and search.updates == 3 and point.samples == len(search.X)


@pytest.mark.slow
def test_the_predictor_beats_random_screening_where_fitness_is_learnable():
    """Thirty independent matrix products of unequal sizes on two GPUs: the step is the heavier GPU's load,
    nearly linear in the mapping, so a regressor learns it from a few dozen mappings and screens the
    children towards balance; random screening runs children whose balance is luck (a random mapping of 30
    unequal weights is rarely within a percent of the even split). With the same 240 evaluations, GBR
    screening ends faster than random screening on each of three seeds."""
    from autoplace.graph import Graph, Op

    rng = np.random.default_rng(0)
    ops = [Op(name="x", type="input", output_bytes=(1024,))]
    ops += [Op(name=f"op{i}", type="matmul", inputs=("x",), flops=float(rng.uniform(1, 10)) * 1e9,
               output_bytes=(1024,)) for i in range(30)]
    ops.append(Op(name="sum", type="add", inputs=tuple(f"op{i}" for i in range(30)), flops=1e3, output_bytes=(4,)))
    g, c = Graph(ops, name="independent"), get_cluster("k80x2")

    def best(model: str, seed: int) -> float:
        r = htf_mpr_search(g, c, budget=SearchBudget(samples=240), seed=seed, config=HTFMPRConfig(model=model))
        return r.placement.meta["best_step_s"]

    for seed in range(3):
        assert best("gbr", seed) < best("random", seed), seed


def test_paper_mode_fits_the_predictor_once_breeds_on_predictions_and_runs_one_screened_batch(monkeypatch):
    """The paper's loop (Fig. 3): the predictor is fitted once, on the initial mappings; children of every
    generation join the population with their predicted fitness and nothing runs until the last generation;
    then exactly the top_x children of highest prediction run, and the search ends."""
    from autoplace.placers.learned.htf_mpr import HTFMPRSearch

    sizes = []
    real = FitnessPredictor.fit
    monkeypatch.setattr(FitnessPredictor, "fit", lambda self, X, y: (sizes.append(len(X)), real(self, X, y))[1])
    g, c = build_graph("mnist-softmax"), get_cluster("gtx1050tix2")
    config = HTFMPRConfig(paper=True, random_homogeneous=5, top_x=4, screen_generations=6)
    assert not config.feedback and config.model == "gbr" and config.groups == 0
    assert config.mutation == 0.0                                    # §III-G breeds by crossover alone
    from autoplace.placers.learned import htf_mpr

    mutated, real_mutate = [], htf_mpr.mutate
    monkeypatch.setattr(htf_mpr, "mutate", lambda kids, rate, d, rng: (
        mutated.append(real_mutate(kids, rate, d, rng) is kids), real_mutate(kids, rate, d, rng))[1])
    search = HTFMPRSearch(g, c, config, seed=0)
    search.update()                                                  # the initial mappings
    initial = len(search.X)
    predicted = []
    real_predict = type(search.predictor).predict
    monkeypatch.setattr(type(search.predictor), "predict",
                        lambda self, kids: (predicted.append(kids.copy()), real_predict(self, kids))[1])
    runs, pools = [], []
    real_run, real_breed = search._run, search._breed
    monkeypatch.setattr(search, "_run", lambda m, f: (runs.append(m.copy()), real_run(m, f))[1])
    monkeypatch.setattr(search, "_breed", lambda X, fit, seen: (pools.append((len(X), fit.copy())),
                                                                real_breed(X, fit, seen))[1])
    assert not search.converged
    search.update()
    assert sizes == [initial]                                        # fitted once, on the initial mappings
    assert len(predicted) == 6 and len(runs) == 1                   # six generations screened, one batch run
    kids = np.concatenate(predicted)
    assert len({k.tobytes() for k in kids}) == len(kids) == search.screened    # each child predicted once
    scores = real_predict(search.predictor, kids)
    best = kids[np.argsort(-scores, kind="stable")[:4]]
    assert len(search.X) == initial + 4 and {r.tobytes() for r in runs[0]} == {r.tobytes() for r in best}
    assert search.converged                                          # the search ends after its batch
    assert mutated and all(mutated)                                  # every child left as the crossover made it
    # each generation breeds from the initial mappings and every child so far, children at their prediction
    sizes_bred = [n for n, _ in pools]
    assert sizes_bred == [initial + sum(len(k) for k in predicted[:i]) for i in range(6)]
    earlier = np.concatenate(predicted[:-1])
    assert np.allclose(pools[-1][1][initial:], np.maximum(real_predict(search.predictor, earlier), 0))


def test_paper_mode_on_the_command_line_and_its_fixed_settings(tmp_path, capsys):
    out = tmp_path / "p.json"
    assert main(["place", "mnist-softmax", "-c", "gtx1050tix2", "-m", "htf-mpr", "--set", "paper=true",
                 "--budget", "30", "-o", str(out)]) == 0
    saved = json.loads(out.read_text())
    assert saved["screened"] > 0 and saved["samples"] == saved["evaluations"]
    assert main(["place", "mnist-softmax", "-c", "gtx1050tix2", "-m", "htf-mpr", "--set", "paper=true",
                 "--set", "model=random", "-o", str(tmp_path / "q.json")]) == 2
    assert "paper=true fixes model" in capsys.readouterr().err
