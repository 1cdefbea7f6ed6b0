"""suggest(trial) -> DecodeConfig: replayable, never changes the combination, method availability."""
import optuna
import pytest
import torch
from optuna.trial import FixedTrial

from spectune.decoding.combine import parse_combination
from spectune.errors import ConfigError
from spectune.tune.space import SearchSpace, suggest


def _r(cfg, dists):
    """r of a config given per-model distributions by name (prob-level combinations)."""
    comb = parse_combination(cfg.combine, len(cfg.models))
    return comb.probs([torch.log(dists[cfg.models[i]]) for i in comb.uses], 1.0, 0, 1.0)


def test_fixed_trial_replays_a_study_trial():
    space = SearchSpace(("a", "b", "c"), "we:0.2,0.3,0.5", (1, 2, 4), 8)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    seen = []
    study.optimize(lambda t: seen.append(space(t)) or 0.0, n_trials=30)
    for t, cfg in zip(study.trials, seen):
        assert suggest(FixedTrial(t.params), space) == cfg


def test_we_permutation_keeps_r():
    space = SearchSpace(("a", "b", "c"), "we:0.2,0.3,0.5", (1,), 8)
    g = torch.Generator().manual_seed(0)
    dists = {m: torch.softmax(torch.randn(7, generator=g), -1) for m in "abc"}
    ref = _r(space.config("standard", "a", None, 1), dists)
    for proposer in "abc":
        for method in ("sd", "naive-cos", "cos"):
            cfg = space(FixedTrial({"method": method, "proposer": proposer, "gamma_0": 2, "gamma_1": 1, "gamma_2": 3}))
            assert cfg.models[0] == proposer and sorted(cfg.models) == ["a", "b", "c"]
            assert torch.allclose(_r(cfg, dists), ref)


def test_target_keeps_the_target_and_offers_pairs_and_n_model_cos():
    space = SearchSpace(("a", "b", "c"), "target", (1, 2), 6)
    assert "cos-n" in space.method_choices and space.proposers == ("a", "b")
    pair = space(FixedTrial({"method": "cos", "batch_size": 2, "proposer": "b", "gamma_0": 4, "gamma_1": 2}))
    assert pair.models == ("b", "c") and pair.gamma == (4, 2) and pair.combine == "target" and pair.batch_size == 2
    alln = space(FixedTrial({"method": "cos-n", "batch_size": 1, "proposer": "b", "gamma_0": 3, "gamma_1": 1,
                             "gamma_2": 2}))
    assert alln.method == "cos" and alln.models == ("b", "a", "c") and alln.gamma == (3, 1, 2)
    sd = space(FixedTrial({"method": "sd", "batch_size": 1, "proposer": "a", "gamma_0": 6}))
    assert sd.models == ("a", "c") and sd.gamma == (6, 1)
    assert "cos-n" not in SearchSpace(("a", "c"), "target", (1,), 6).method_choices
    assert "cos-n" not in SearchSpace(("a", "b", "c"), "we:0.2,0.3,0.5", (1,), 6).method_choices


def test_cd_order_is_fixed_and_gamma_capped():
    space = SearchSpace(("a", "b"), "cd:0.5", (1,), 30)
    assert space.proposers == ("a",) and space.gamma_hi == 10
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    study.optimize(lambda t: float(space(t).gamma[0]), n_trials=40)
    for t in study.trials:
        cfg = suggest(FixedTrial(t.params), space)
        assert cfg.models == ("a", "b") and cfg.combine == "cd:0.5" and 1 <= cfg.gamma[0] <= 10
    assert SearchSpace(("a", "b"), "target", (1,), 4).gamma_hi == 4


def test_sv_only_when_available_and_bad_methods():
    assert "sv" not in SearchSpace(("a", "b", "c"), "target", (1,), 6).method_choices
    assert "sv" in SearchSpace(("a", "b", "c"), "target", (1,), 6, extra_methods=("sv",)).method_choices
    with pytest.raises(ConfigError):
        SearchSpace(("a", "b"), "target", (1,), 6, methods=("cos-n",))
    with pytest.raises(ConfigError):
        SearchSpace(("a",), "target", (1,), 6)


def test_lookup_proposers_and_policies_are_searched():
    space = SearchSpace(("a", "b", "c"), "target", (1,), 6, lookups=("ngram:1,2", "ngram:2,4"),
                        policies=("fixed", "heuristic", "confidence:0.4"))
    assert "sd-ngram" in space.method_choices
    look = space(FixedTrial({"method": "sd-ngram", "ngram": "ngram:2,4", "gamma_0": 5}))
    # r = target: the target alone verifies the lookups; k = gamma_0; no draft-length policy applies
    assert (look.models, look.method, look.proposer, look.gamma, look.policy) == (("c",), "sd", "ngram:2,4", (5,),
                                                                                  "fixed")
    pol = space(FixedTrial({"method": "naive-cos", "proposer": "b", "gamma_0": 3, "policy": "confidence:0.4"}))
    assert pol.policy == "confidence:0.4" and pol.proposer == "model" and pol.models == ("b", "c")
    # ngram+model: the pair (proposer, target); the lookup proposes up to gamma_max, the draft gamma_0 under a policy
    hyb = space(FixedTrial({"method": "sd-ngram+model", "ngram": "ngram:1,2", "proposer": "b", "gamma_0": 2,
                            "policy": "heuristic"}))
    assert (hyb.models, hyb.method, hyb.proposer, hyb.gamma, hyb.policy) == (("b", "c"), "sd", "ngram+model:1,2,6",
                                                                             (2, 1), "heuristic")
    assert space(FixedTrial({"method": "standard"})).policy == "fixed"
    # we: every model of r verifies the lookups; the enumeration holds every (lookup, k) and every policy
    we = SearchSpace(("a", "b"), "we:0.5,0.5", (1,), 3, lookups=("ngram:1,3",), policies=("fixed", "heuristic"))
    cfgs = we.enumerate()
    lookups = [c for c in cfgs if c.proposer.startswith("ngram:")]
    assert {c.gamma for c in lookups} == {(1, 1), (2, 1), (3, 1)} and {c.models for c in lookups} == {("a", "b")}
    both = [c for c in cfgs if c.proposer.startswith("ngram+model")]  # the lookup's K: the calibrated longest
    assert {(c.proposer, c.policy) for c in both} == {("ngram+model:1,3,3", p) for p in ("fixed", "heuristic")}
    assert {c.gamma for c in both} == {(1, 1), (2, 1), (3, 1)}
    assert {c.policy for c in cfgs if c.method == "cos"} == {"fixed", "heuristic"}
    assert "sd-ngram" not in SearchSpace(("a", "b"), "target", (1,), 6).method_choices
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=2))
    seen = []
    study.optimize(lambda t: seen.append(space(t)) or 0.0, n_trials=60)
    assert {c.proposer for c in seen} >= {"model", "ngram:1,2", "ngram:2,4", "ngram+model:2,4,6"}
    assert len({c.policy for c in seen}) == 3
    for t, cfg in zip(study.trials, seen):
        assert suggest(FixedTrial(t.params), space) == cfg
