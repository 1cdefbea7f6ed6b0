"""Closed forms against hand-computed values; profile-driven predictions against the closed forms and the
Monte Carlo simulation of the loop."""
import math
from dataclasses import replace

import numpy as np
import pytest

from spectune.config import DecodeConfig
from spectune.tune import closed_forms as C
from spectune.tune.cost import CostModel
from spectune.tune.simulate import simulate, simulate_requests
from oracles import cos2, round_naive, round_sd
from tune_synth import make_profile


def test_sd_with_bonus_hand_computed():
    # (1 - 0.8^5) / (1 - 0.8) / (1 + 4 * 0.1) = 3.3616 / 1.4
    assert C.speedup_sd(0.8, 4, 0.1) == pytest.approx(3.3616 / 1.4, rel=1e-12)
    assert C.speedup_sd(0.8, 4, 0.1) == pytest.approx(2.4011, abs=1e-4)
    assert C.tokens_per_round_sd(1.0, 4) == 5.0  # alpha -> 1 limit: every draft + the bonus
    assert C.tokens_per_round_sd(0.0, 4) == 1.0


def test_thm31_hand_computed():
    # (1 - 0.5^2)(1 + 0.5) / ((1 - 0.5)(1 + 0.5 * 2)) = 0.75 * 1.5 / 1.0
    assert C.speedup_thm31(0.5, 2, 0.5) == pytest.approx(1.125)
    assert C.speedup_thm31(1.0, 3, 0.2) == pytest.approx(3 * 1.2 / 1.6)  # limit alpha -> 1
    assert C.speedup_thm31(0.0, 5, 0.3) == pytest.approx(1.3 / 2.5)  # all rejected: slower than standard


def test_thm36_hand_computed_and_cor37():
    # gamma_q = gamma_p = 1: (1 + c) / (1 + c - alpha c)
    assert C.speedup_thm36(0.5, 1, 1, 1.0) == pytest.approx(2 / 1.5)
    # Cor. 3.7: >= 1 for every alpha and c at gamma_q = gamma_p = 1
    a, c = np.meshgrid(np.linspace(0, 1, 41), np.logspace(-3, 2, 41))
    s = C.speedup_thm36(a, 1, 1, c)
    assert np.all(s >= 1 - 1e-12)
    assert C.speedup_thm36(0.0, 1, 1, 0.7) == pytest.approx(1.0)
    # alpha = 0.8, gamma_q = 4, gamma_p = 1, c = 0.1: (1-0.8^4)(1.1) / (0.2 (1 + 0.4 - 0.08))
    assert C.speedup_thm36(0.8, 4, 1, 0.1) == pytest.approx(0.5904 * 1.1 / (0.2 * 1.32))


def test_survival_uses_the_drafts_not_iid_alpha():
    # half the drafts accept everything, half nothing: alpha = 0.5 per position, but E[accepted | 4] = 2
    b = np.array([[1, 1, 1, 1], [0, 0, 0, 0]], float)
    S = C.survival_from_betas(b, 4)
    assert list(S) == [1, 0.5, 0.5, 0.5, 0.5]
    assert C.block_accepted(S, 4) == pytest.approx(2.0)
    assert C.expected_accepted_iid(0.5, 4) == pytest.approx(0.9375)
    # prod of betas along one draft
    S = C.survival_from_betas(np.array([[0.5, 0.4, 1.0]]), 3)
    assert S == pytest.approx([1, 0.5, 0.2, 0.2])
    with pytest.raises(ValueError):
        C.survival_from_betas(b, 5)


def _const(c):  # proposer costs c, verifier 1, independent of k
    return [lambda k: c, lambda k: 1.0]


@pytest.mark.parametrize("alpha,gamma,c", [(0.8, 4, 0.1), (0.5, 2, 0.3), (0.95, 7, 0.05), (0.0, 3, 0.2)])
def test_renewals_reduce_to_the_closed_forms(alpha, gamma, c):
    S = C.survival_iid(alpha, 10)
    t, s = round_sd(S, gamma, _const(c), uses=(1,))  # r = target alone: classic SD
    assert t / s == pytest.approx(C.speedup_sd(alpha, gamma, c))  # vs the target alone (cost 1 per token)
    t, s = round_naive(S, gamma, _const(c), uses=(0, 1))  # r over both: vs standard (cost 1 + c per token)
    assert t / s * (1 + c) == pytest.approx(C.speedup_thm31(alpha, gamma, c))
    # the alternate proposal renewal meets Thm 3.6 where the paper's accounting is exact (gamma = 1, equal costs)
    t, s = cos2(S, S, 1, 1, _const(1.0), uses=(0, 1))
    assert t / s * 2 == pytest.approx(C.speedup_thm36(alpha, 1, 1, 1.0))
    assert t / s * 2 == pytest.approx(2 / (2 - alpha))


@pytest.mark.parametrize("method,gamma,uses", [
    ("sd", (4, 1), (1,)), ("sd", (3, 1), (0, 1)), ("naive-cos", (4, 1), (0, 1)), ("cos", (4, 2), (0, 1)),
    ("cos", (3, 3), (1,)), ("cos", (2, 1), (0, 1)),
])
def test_renewal_matches_the_simulated_loop(method, gamma, uses):
    rng = np.random.default_rng(0)
    bq = np.clip(rng.normal(0.7, 0.25, size=(64, 8)), 0, 1)  # position-dependent, correlated-ish betas
    bp = np.ones((4, 8)) if uses == (1,) else np.clip(rng.normal(0.6, 0.3, size=(64, 8)), 0, 1)
    lat = [0.1, 1.0]
    L = [(lambda k, m=m: lat[m] * (1 + 0.05 * (k - 1))) for m in range(2)]
    Sq, Sp = C.survival_from_betas(bq, 8), C.survival_from_betas(bp, 8)
    if method == "sd":
        t, s = round_sd(Sq, gamma[0], L, uses)
    elif method == "naive-cos":
        t, s = round_naive(Sq, gamma[0], L, uses)
    else:
        t, s = cos2(Sq, Sp, gamma[0], gamma[1], L, uses)
    sims = [simulate(method, gamma, uses, [bq, bp], lambda m, b, k: L[m](k), rows=1, max_new_tokens=4000, seed=sd)
            for sd in range(3)]
    g = sum(r.tokens for r in sims) / sum(r.seconds for r in sims)
    assert g == pytest.approx(t / s, rel=0.03)


def test_predict_standard_and_sd_by_hand():
    p = make_profile(models=("a", "c"), combine="target", base={"a": 0.01, "c": 0.1}, alpha=0.8)
    cm = CostModel(p)
    std = cm.predict(DecodeConfig(models=("a", "c"), method="standard", combine="target"))
    assert std.latency_per_token == pytest.approx(0.1)  # target alone
    # batch 2 of 64-token requests: the first token of each comes from its prompt's forward (63 decoding forwards)
    std2 = cm.predict(DecodeConfig(models=("a", "c"), method="standard", combine="target", batch_size=2))
    assert std2.goodput == pytest.approx(2 / 0.1 * 64 / 63) and std2.speedup_vs_standard == pytest.approx(1.0)
    sd = cm.predict(DecodeConfig(models=("a", "c"), method="sd", combine="target", gamma=(4, 1)))
    assert sd.c == pytest.approx(0.1)
    assert sd.alpha == pytest.approx(0.8)
    assert sd.expected_accepted == pytest.approx(0.8 + 0.64 + 0.512 + 0.4096)
    # constant latencies: the closed form is the oracle of the simulated loop (1024 tokens: a ~0.3 % estimate)
    assert sd.speedup_vs_target == pytest.approx(C.speedup_sd(0.8, 4, 0.1), rel=0.01)
    assert sd.source == "simulation" and std.source == "analytic"
    assert sd.speedup_vs_standard == pytest.approx(sd.speedup_vs_target)


def test_an_engines_target_alone_is_priced_at_its_plain_start():
    """An engine profile whose speculative starts serve the target otherwise (llama.cpp's --kv-unified: its
    ``target-spec`` stage) holds their step as L(b, 1) and the plain start's in ``plain_step_s``: the target alone
    is priced at the plain step (between measured batch sizes at the interpolated ratio), speculation at its own,
    and its speedup is against the target alone as it is served."""
    p = make_profile(models=("a", "c"), combine="target", base={"a": 0.01, "c": 0.1}, batch_sizes=(1, 2, 4))
    p.meta["engine"] = {"name": "llamacpp", "plain_step_s": {"1": 0.1, "4": 0.08}}  # b = 4: 0.8x the spec step
    cm, plain = CostModel(p), CostModel(make_profile(models=("a", "c"), combine="target", base={"a": 0.01, "c": 0.1}))
    alone = DecodeConfig(models=("c",), method="standard", combine="target")
    assert cm.predict(alone).latency_per_token == pytest.approx(0.1)
    at = {b: cm.predict(replace(alone, batch_size=b, max_new_tokens=64)).latency_per_token * 64 / 63 for b in (2, 4)}
    assert at[4] == pytest.approx(0.08) and at[2] == pytest.approx(0.1 * (1 - 0.2 / 3))
    sd = DecodeConfig(models=("a", "c"), method="sd", combine="target", gamma=(4, 1), batch_size=4)
    assert cm.predict(sd).goodput == pytest.approx(plain.predict(sd).goodput)  # speculation: its own step
    assert cm.predict(sd).speedup_vs_target == pytest.approx(0.8 * plain.predict(sd).speedup_vs_target)


def test_the_target_alone_of_a_weighted_ensemble_is_its_largest_model_in_any_order():
    """The search puts the proposer first, so a `we` config may end with the small model; "x the target alone" is
    still over the large one (recommend printed 0.05x in its table and 0.86x on its summary line for one config)."""
    cm = CostModel(make_profile(models=("a", "c"), combine="we:0.4,0.6", base={"a": 0.01, "c": 0.1}))
    for models, comb in ((("a", "c"), "we:0.4,0.6"), (("c", "a"), "we:0.6,0.4")):
        std = cm.predict(DecodeConfig(models=models, method="standard", combine=comb, batch_size=2))
        assert std.speedup_vs_target == pytest.approx(0.1 / 0.11)
        assert cm.target_seconds(models, comb, 2, 64) == pytest.approx(0.1 * 63 / 64)


def test_predict_uses_measured_latency_of_the_feed_length():
    flat = CostModel(make_profile(models=("a", "c"), combine="target", base={"a": 0.01, "c": 0.1}))
    steep = CostModel(make_profile(models=("a", "c"), combine="target", base={"a": 0.01, "c": 0.1}, slope_k=0.2))
    cfg = DecodeConfig(models=("a", "c"), method="sd", combine="target", gamma=(6, 1))
    # verifying 7 tokens costs 2.2x one token when L grows with k: the prediction must see it
    assert steep.predict(cfg).goodput < 0.7 * flat.predict(cfg).goodput


def test_predict_three_model_cos_by_simulation(synth_profile):
    cm = CostModel(synth_profile)
    cfg = DecodeConfig(models=("a", "b", "c"), method="cos", combine="we:0.2,0.3,0.5", gamma=(3, 1, 1))
    p = cm.predict(cfg)
    assert p.source == "simulation"
    assert p.speedup_vs_standard > 1.0  # alpha 0.8 with a cheap proposer
    full = cm.simulate(cfg, max_new_tokens=2000)
    assert full.goodput == pytest.approx(p.goodput, rel=0.05)


def test_weights_follow_the_model_order(synth_profile):
    cm = CostModel(synth_profile)
    assert cm.calibrated.acceptance_key(("c", "a", "b"), "we:0.5,0.2,0.3") == ("a,b,c", "we:0.2,0.3,0.5")
    with pytest.raises(KeyError):
        cm.calibrated.acceptance_key(("c", "a"), "target")  # r = a would be another combination
    assert cm.calibrated.acceptance_key(("b", "c"), "target") == ("b,c", "target")


def test_memory_feasibility():
    p = make_profile(infeasible={("c", 4)}, params=10, memory=1 << 30)
    cm = CostModel(p)
    assert cm.feasible(("a", "b", "c"), 2) and not cm.feasible(("a", "b", "c"), 4)
    assert cm.feasible(("a", "b"), 4)
    small = CostModel(make_profile(params=10**9, memory=1 << 30))  # 3 x 4 GB of fp32 weights > 1 GiB
    assert not small.feasible(("a", "b", "c"), 1)
    assert math.isclose(small.memory(("a",)), 4e9)


@pytest.mark.parametrize("beta,k", [(1.0, 4), (0.0, 0)])
def test_sv_prediction_follows_the_decoders_policy(beta, k):
    base = {"a": 0.01, "b": 0.02, "c": 0.1}
    p = make_profile(models=("a", "b", "c"), combine="target", base=base, alpha=beta, sv_beta=beta)
    cm = CostModel(p)
    assert cm.supports("sv") and not CostModel(make_profile()).supports("sv")
    pr = cm.predict(DecodeConfig(models=("a", "b", "c"), method="sv", combine="target", gamma=(4, 1, 1)))
    # every draft accepted and predicted so: verify all 4 (+1 bonus); none: verify 0, one token from r
    assert pr.extra["sv_mean_verified"] == k
    assert pr.tokens_per_round == pytest.approx(k + 1)
    assert pr.seconds_per_round == pytest.approx(4 * 0.01 + 0.02 + 0.1)  # flat latencies: L(k) = L(1)


def _pair(betas, conf=None, lookups=None):
    """A target-only pair (a drafts for c): flat latencies 0.1 and 1, every draft of a has these ``betas``."""
    key = ("a", "a,c", "target")
    return CostModel(make_profile(models=("a", "c"), combine="target", base={"a": 0.1, "c": 1.0},
                                  betas={key: betas}, conf={key: conf} if conf is not None else None,
                                  lookups=lookups, temperature=0.0))


def test_heuristic_policy_priced_by_simulation_hand_computed():
    """Every draft: 2 accepted, then rejected. HF's heuristic from gamma 2 cycles 2 -> 4 -> 3 -> 2 ...: blocks of 2
    are fully accepted (+2), of 4 and 3 are not (-1); every round yields 3 tokens, the cycle costs 9 draft
    forwards (0.1 each) and 3 target forwards (1 each): 9 / 3.9 tokens/s. Fixed 2: 3 / 1.2; fixed 3: 3 / 1.3."""
    cm = _pair(np.tile([1, 1, 0, 0, 0, 0, 0, 0], (6, 1)))
    cfg = DecodeConfig(models=("a", "c"), method="sd", combine="target", gamma=(2, 1))
    heur = cm.predict(replace(cfg, policy="heuristic"))
    assert heur.goodput == pytest.approx(9 / 3.9, rel=2e-3) and heur.tokens_per_round == pytest.approx(3)
    assert cm.predict(cfg).goodput == pytest.approx(3 / 1.2, rel=1e-9)
    assert cm.predict(replace(cfg, gamma=(3, 1))).goodput == pytest.approx(3 / 1.3, rel=1e-9)


def test_batches_priced_as_static_batches_of_requests():
    """At b > 1 every configuration (a fixed gamma too) is priced from simulate_requests: static batches of the
    configuration's max_new_tokens-token requests, every row on one calibration prompt, each batch as long as its
    slowest row. Prompt 0 accepts every draft (5 tokens a round), prompt 1 none (1 token a round); a round costs
    4 drafts at 0.1 s and one verification at 1 s whatever the batch size. A batch of one request of each pays
    prompt 1's 40 rounds for 40 tokens: 1.4 s per token, where one row's steady state over both prompts pays
    (1.4 / 5 + 1.4) / 2 = 0.84 s; at batch 1 the one-row price stays."""
    key = ("a", "a,c", "target")
    cm = CostModel(make_profile(models=("a", "c"), combine="target", base={"a": 0.1, "c": 1.0},
                                betas={key: np.array([[1.0] * 8] * 6 + [[0.0] * 8] * 6)},
                                prompts={key: [0] * 6 + [1] * 6}, temperature=0.0))
    cfg = DecodeConfig(models=("a", "c"), method="sd", combine="target", gamma=(4, 1), batch_size=2,
                       max_new_tokens=40)
    for policy in ("fixed", "confidence:0.5"):
        c = replace(cfg, policy=policy)
        res = simulate_requests(2, 40, -(-cm.sim_tokens // 80), cm.sim_seed, **cm._setup(c),
                                latency=lambda m, b, k: cm.L(("a", "c")[m], b, k))
        assert cm.predict(c).goodput == pytest.approx(res.goodput, rel=1e-9)
        assert "sv_mean_verified" not in cm.predict(c).extra
    assert cm.predict(cfg).latency_per_token == pytest.approx(1.4, rel=0.03)
    steady = sum(n * cm.L(("a", "c")[m], 2, k) for (m, k), n in cm.sim_counts(cfg).calls.items())
    assert steady == pytest.approx(0.84, rel=0.03)
    b1 = replace(cfg, batch_size=1)
    assert cm.predict(b1).latency_per_token == pytest.approx(steady, rel=1e-9)


def test_an_engine_priced_on_its_clients_steps_pays_no_stragglers_twice():
    """An engine profile priced on the steps its client saw (calibrate --engine's default ``steps="client"``): each
    step already holds the time its batch waited for the rows that finished last, so batches are priced without
    them -- a flattening engine (llama.cpp) at one row's steady state, a padding one (vLLM) as a batch of long rows.
    The two prompts of the test above: 0.84 s a token either way, where the static batches of requests, which an
    engine's own steps are priced with, pay prompt 1's straggler, 1.4 s."""
    key = ("a", "a,c", "target")
    cfg = DecodeConfig(models=("a", "c"), method="sd", combine="target", gamma=(4, 1), batch_size=2,
                       max_new_tokens=40)
    got = {}
    for name, ragged, steps in (("llamacpp", True, "client"), ("vllm", False, "client"), ("vllm", False, "engine")):
        p = make_profile(models=("a", "c"), combine="target", base={"a": 0.1, "c": 1.0},
                         betas={key: np.array([[1.0] * 8] * 6 + [[0.0] * 8] * 6)},
                         prompts={key: [0] * 6 + [1] * 6}, temperature=0.0)
        p.meta["engine"] = {"name": name, "ragged": ragged, "grid": {"steps": steps}}
        got[(name, steps)] = CostModel(p).predict(cfg).latency_per_token
    assert got[("llamacpp", "client")] == pytest.approx(0.84, rel=0.03)
    assert got[("vllm", "client")] == pytest.approx(0.84, rel=0.03)
    assert got[("vllm", "engine")] == pytest.approx(1.4, rel=0.03)


def test_confidence_policy_priced_by_simulation_hand_computed():
    """Every draft accepted, but the draft is unsure (q = 0.2) of its third token: confidence:0.5 stops after it
    (the unsure token is still proposed), so blocks of 3 + the bonus token: 4 tokens per 3 * 0.1 + 1 seconds.
    Fixed gamma 5: 6 / 1.5. Without recorded confidence the policy cannot be priced (an old profile)."""
    conf = np.tile([0.9, 0.9, 0.2, 0.9, 0.9, 0.9, 0.9, 0.9], (6, 1))
    cm = _pair(np.ones((6, 8)), conf)
    cfg = DecodeConfig(models=("a", "c"), method="sd", combine="target", gamma=(5, 1))
    assert cm.predict(replace(cfg, policy="confidence:0.5")).goodput == pytest.approx(4 / 1.3, rel=1e-9)
    assert cm.predict(cfg).goodput == pytest.approx(6 / 1.5, rel=1e-9)
    assert cm.predict(replace(cfg, policy="confidence:0.1")).goodput == pytest.approx(6 / 1.5, rel=1e-9)
    old = _pair(np.ones((6, 8)))
    old.profile.tables["traces"] = old.profile.traces.drop(columns="q")
    assert "confidence" in old.unsupported("sd", policy="confidence:0.5") and old.supports("sd")


def test_ngram_lookup_priced_by_simulation_hand_computed():
    """Half the calibrated states (evenly spaced positions of r's trajectory) lie where the lookup hits with 4
    tokens the target accepts, half where it misses. Crossing N positions takes N/2 / 5 hit rounds (4 + the
    bonus each) and N/2 miss rounds (the one token from r), one target forward each (flat latency 1; the lookup
    costs nothing): N / 0.6 N = 5/3 tokens per forward, 5/3 x the target alone. k = 2 proposes only the first 2
    of a hit: N / (N/6 + N/2) = 1.5. (Drawing the states evenly per round instead would give 3 and 2: the
    inspection paradox, TraceBackend._weighted.)"""
    hits = np.tile([1.0] * 8, (8, 1))
    lengths = [4, 0] * 4
    cm = _pair(np.full((6, 8), 0.5), lookups={("ngram:1,3", "c", "target"): (hits, lengths)})
    cfg = DecodeConfig(models=("c",), method="sd", combine="target", gamma=(4,), proposer="ngram:1,3")
    p = cm.predict(cfg)
    # (systematic draws over the weights: ~600 rounds hold each state's share within 1 %)
    assert p.speedup_vs_target == pytest.approx(5 / 3, rel=1e-2) and p.c == 0.0 and p.alpha == pytest.approx(1.0)
    assert cm.predict(replace(cfg, gamma=(2,))).goodput == pytest.approx(1.5, rel=1e-2)
    assert cm.supports("sd", proposer="ngram:1,3") and not cm.supports("sd", proposer="ngram:2,4")


def test_forwards_priced_at_the_context_requests_decode_at():
    """Every forward is priced at the workload's mean calibration prompt plus half of a request's new tokens: the
    mean context a request decodes at. Latency 0.1 s at 64 cached tokens, +1/64 of it per token past 64 (0.4 s at
    256); prompts of 40 and 60 tokens and 64-token requests decode at 82: 0.1 * (1 + 18 / 64). A profile without
    prompt lengths is priced at its middle calibrated context (256)."""
    kw = dict(models=("a", "c"), combine="target", base={"a": 0.01, "c": 0.1}, ctxs=(64, 256), slope_ctx=1 / 64)
    prof = make_profile(prompt_tokens={"code": [40, 60], "chat": [100]}, **kw)
    assert prof.prompt_tokens("code") == 50 and prof.prompt_tokens() == pytest.approx(200 / 3)
    assert prof.prompt_tokens("math") is None and make_profile(**kw).prompt_tokens() is None
    cm = CostModel(prof, "code")
    assert cm.ctx == 82 and cm.L("c", 1, 1) == pytest.approx(0.1 * (1 + 18 / 64))
    assert CostModel(prof, "code", max_new_tokens=32).ctx == 66
    assert CostModel(prof, "code", ctx=256).L("c", 1, 1) == pytest.approx(0.4)  # an explicit context wins
    assert CostModel(make_profile(**kw), "code").L("c", 1, 1) == pytest.approx(0.4)
