"""Re-pricing over bootstrap resamples of the calibration prompts: paired seeded draws, a hand-priced resample,
how often each candidate stays near the best."""
import numpy as np
import pytest

from spectune.config import DecodeConfig
from spectune.tune.cost import CostModel
from spectune.tune.robustness import resampled_goodputs, robustness
from tune_synth import make_profile

L_A, L_C = 0.001, 0.01  # draft and target forward seconds, flat in k, batch and context


def _two_prompt_cm() -> CostModel:
    """Draft a against target c: on calibration prompt 0 every proposal is accepted, on prompt 1 none."""
    key = ("a", "a,c", "target")
    prof = make_profile(models=("a", "b", "c"), combine="target", base={"a": L_A, "b": 0.002, "c": L_C},
                        betas={key: np.vstack([np.ones((4, 8)), np.zeros((4, 8))])}, prompts={key: [0] * 4 + [1] * 4})
    return CostModel(prof, "code")


def _sd(gamma: int) -> DecodeConfig:
    return DecodeConfig(models=("a", "c"), method="sd", combine="target", gamma=(gamma, 1), batch_size=1)


def _seed_drawing(cm: CostModel, draws: list[str]) -> int:
    return next(s for s in range(200) if cm.resampled(s).draws == draws)


def test_a_resample_draws_prompts_with_replacement_for_every_proposer_alike():
    cm = _two_prompt_cm()
    assert cm.calibrated.prompts() == ["code/0", "code/1"]
    r = cm.resampled(3)
    assert len(r.draws) == 2 and r.draws == cm.resampled(3).draws  # as many prompts as calibrated; seeded
    for proposer in ("a", "c"):  # every proposer's drafts come from the same drawn prompts
        t = r.calibrated.traces(proposer, "a,c", "target")
        assert {g.split("#")[0] for g in t.group} <= set(r.draws)
    t = r.calibrated.traces("a", "a,c", "target")
    for j, g in enumerate(r.draws):  # each draw holds all the drafts of its prompt, labelled apart per draw
        rows = t.beta[t.group == f"{g}#{j}"]
        assert rows.shape == (4, 8) and (rows == (1.0 if g == "code/0" else 0.0)).all()
    # the original is untouched
    assert cm.draws is None and cm.calibrated.traces("a", "a,c", "target").beta.shape == (8, 8)


def test_a_resample_of_the_accepting_prompt_alone_is_priced_by_hand():
    cm = _two_prompt_cm()
    only0 = cm.resampled(_seed_drawing(cm, ["code/0", "code/0"]))
    only1 = cm.resampled(_seed_drawing(cm, ["code/1", "code/1"]))
    # gamma 4 on prompt 0: 4 draft forwards + 1 verification -> 4 accepted + the bonus token
    assert only0.predict(_sd(4)).goodput == pytest.approx(5 / (4 * L_A + L_C), rel=1e-3)
    # on prompt 1 every block is rejected at once: 1 token (the recovered one) per round
    assert only1.predict(_sd(4)).goodput == pytest.approx(1 / (4 * L_A + L_C), rel=1e-3)
    assert cm.predict(_sd(4)).goodput == pytest.approx(1 / (0.5 * (4 * L_A + L_C) / 5 + 0.5 * (4 * L_A + L_C)),
                                                       rel=0.02)  # both prompts: an equal share of tokens each


def test_near_best_counts_the_resamples_where_a_candidate_is_within_the_tolerance():
    """gamma 4 wins by 2x where only prompt 0 is drawn, gamma 1 by 27 % where only prompt 1 is; with one of
    each they are 2 % apart (both near the best at 5 %)."""
    cm = _two_prompt_cm()
    configs = [_sd(4), _sd(1)]
    rob = robustness(cm, configs, resamples=24, seed=7)
    kinds = [tuple(sorted(cm.resampled(7 + s).draws)) for s in range(24)]
    n00, n11 = kinds.count(("code/0", "code/0")), kinds.count(("code/1", "code/1"))
    assert 0 < n00 < 24 and 0 < n11 < 24
    assert rob[0].p_near_best == pytest.approx((24 - n11) / 24) and rob[1].p_near_best == pytest.approx((24 - n00) / 24)
    g = resampled_goodputs(cm, configs, resamples=24, seed=7)
    assert rob[0].goodput_p10 == pytest.approx(np.percentile(g[:, 0], 10)) and rob[0].goodput_p90 > rob[0].goodput_p10
    assert (rob[0].resamples, rob[0].prompts, rob[0].tolerance) == (24, 2, 1.05)
    one_prompt = CostModel(make_profile(models=("a", "b", "c"), combine="target"), "code")  # nothing to resample
    same = robustness(one_prompt, [_sd(4), _sd(1)], resamples=5)
    assert [x.goodput_p10 for x in same] == pytest.approx([x.goodput_p90 for x in same])
    assert sorted(x.p_near_best for x in same) == [0.0, 1.0] and robustness(cm, configs, resamples=0) == []


def test_a_mix_is_resampled_within_each_workload():
    """Pooled workloads (`mix`) keep their composition: each draws as many of its own prompts as it has."""
    import pandas as pd

    cm = _two_prompt_cm()
    t = cm.profile.traces
    math = t.assign(workload="math", draft_id=t["draft_id"] + 1000)
    cm.profile.tables["traces"] = pd.concat([t, math], ignore_index=True)
    pooled = CostModel(cm.profile, "mix")
    assert pooled.calibrated.prompts() == ["code/0", "code/1", "math/0", "math/1"]
    for s in range(10):
        draws = pooled.resampled(s).draws
        assert sorted(d.split("/")[0] for d in draws) == ["code", "code", "math", "math"]


class _Flaky:
    """A cost model whose second resample cannot price the first config (nan)."""

    def __init__(self, seed=None):
        self.seed = seed
        self.calibrated = type("C", (), {"prompts": lambda self: ["code/0"]})()

    def resampled(self, seed):
        return _Flaky(seed)

    def predict(self, c):
        return type("P", (), {"goodput": float("nan") if (self.seed == 1 and c == "x") else {"x": 10.0, "y": 9.0}[c]})


def test_a_resample_that_cannot_price_every_config_is_left_out():
    rob = robustness(_Flaky(), ["x", "y"], resamples=3)
    assert [r.resamples for r in rob] == [2, 2] and [r.p_near_best for r in rob] == [1.0, 0.0]
