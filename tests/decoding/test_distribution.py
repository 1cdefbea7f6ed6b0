"""Every method samples exactly from r: empirical 3-token continuations vs exact sequence probabilities.

Models are ``TableLM`` (tests/fakes.py) over an 8-token vocabulary; the exact probability of a continuation is
prod_j r_j(x_j | prompt, x_<j), computed from fresh forwards (no decoder involved). With N = 20 000 samples we
run Pearson's chi-square test over the 8^3 = 512 continuations, pooling cells whose expected count is < 5 into
one cell (the usual validity condition of the chi-square approximation). Under exact sampling the p-value is
uniform, so a threshold of 1e-4 fails a correct sampler once in 10 000 runs (seeds are fixed, so the test is
deterministic); an off-by-one in the cache, a wrong q or a missing residual moves some cells by far more.
"""
from __future__ import annotations


import pytest
import torch
from fakes import TableLM
from scipy.stats import chisquare
from transformers import DynamicCache

from spectune.decoding import DecodePlan, Decoder, SamplingParams, parse_combination
from spectune.decoding.hf_compat import forward

V = 8
N = 20_000
PROMPT = [3, 5]
LENGTH = 3
BATCH = 1000  # the samples run as ragged batches: the test covers B > 1 (B = 1 is the same code path)


def exact_probs(models, comb, sp: SamplingParams, prompt=PROMPT) -> dict[tuple[int, ...], float]:
    """P(x1..x3) = prod_j r_j(x_j) from fresh (uncached) forwards of every model."""
    def r_at(prefix):
        logits = [fresh_logits(models[i], prefix) for i in comb.uses]
        return comb.probs(logits, sp.temperature, sp.top_k, sp.top_p)

    out = {}
    r1 = r_at(prompt)
    for x1 in range(V):
        r2 = r_at(prompt + [x1])
        for x2 in range(V):
            r3 = r_at(prompt + [x1, x2])
            for x3 in range(V):
                out[(x1, x2, x3)] = float(r1[x1] * r2[x2] * r3[x3])
    return out


def fresh_logits(model, prefix: list[int]) -> torch.Tensor:
    """The model's next-token logits after ``prefix`` from one plain forward with an empty cache. -> [V]"""
    with torch.inference_mode():
        out = forward(model, DynamicCache(config=model.config), input_ids=torch.tensor([prefix]))
    return out.logits[0, -1].float()


def run_chi_square(models, method, combine, gamma, sp, n=N, prompt=PROMPT, **decoder_kw):
    """(p-value, merged stats); ``decoder_kw`` go to the plan (proposer, policy, sv_policy) and the Decoder
    (runtime, device)."""
    comb = parse_combination(combine, len(models))
    plan_kw = {k: decoder_kw.pop(k) for k in ("proposer", "policy", "sv_policy") if k in decoder_kw}
    dec = Decoder(models, [str(i) for i in range(len(models))], DecodePlan(method, comb, gamma, sp, **plan_kw),
                  **decoder_kw)
    counts: dict[tuple[int, ...], int] = {}
    totals = None
    for first in range(0, n, BATCH):  # batches of independent sequences (one generator per row)
        seeds = list(range(first, min(n, first + BATCH)))
        outs, _, st = dec.generate_batch([prompt] * len(seeds), LENGTH, seeds)
        for out in outs:
            counts[tuple(out)] = counts.get(tuple(out), 0) + 1
        if totals is None:
            totals = st
        else:
            totals.merge(st)
    exact = exact_probs(models, comb, sp, prompt)
    assert abs(sum(exact.values()) - 1) < 1e-4
    assert set(counts) <= {k for k, v in exact.items() if v > 0}, "sampled a continuation of probability 0"
    big = [k for k, p in exact.items() if p * n >= 5]
    assert len(big) >= 20, "degenerate test: too few possible continuations"
    obs = [counts.get(k, 0) for k in big] + [n - sum(counts.get(k, 0) for k in big)]
    exp = [exact[k] * n for k in big] + [max(0.0, n - sum(exact[k] * n for k in big))]
    if exp[-1] < 1.0:  # (nearly) nothing left to pool: drop the cell, renormalise to the observed total
        obs, exp = obs[:-1], exp[:-1]
    exp = [e * sum(obs) / sum(exp) for e in exp]
    p = chisquare(obs, exp).pvalue
    return p, totals


T1 = SamplingParams(1.0, 0, 1.0)
WARPED = SamplingParams(2.0, 6, 0.95)  # mild enough that ~100 continuations stay possible
CASES = [
    ("sd", "target", [3, 1], T1),
    ("sd", "we:0.5,0.5", [2, 1], T1),
    ("naive-cos", "cd:0.5", [2, 1], T1),
    ("cos", "we:0.3,0.7", [1, 2], T1),
    ("cos", "cd:0.3", [2, 2], WARPED),
    ("cos", "target", [2, 1], WARPED),
    ("cos", "we:0.2,0.3,0.5", [1, 1, 1], T1),  # n-model CoS (Algorithm 2)
    ("sd", "we:0.3,0.3,0.4", [2, 1, 1], T1),
]


@pytest.mark.parametrize("method,combine,gamma,sp", CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in CASES])
def test_method_samples_exactly_from_r(method, combine, gamma, sp):
    models = [TableLM(V, seed=11 + i) for i in range(len(gamma))]
    p, stats = run_chi_square(models, method, combine, gamma, sp)
    assert p > 1e-4, f"chi-square p = {p:.2e}"
    assert stats.recovered_tokens > 0  # rejections happened, so the residual path was exercised
    if method == "cos":  # the alternate proposal path was taken: model 1 proposed tokens that were verified
        assert stats.bonus_tokens > 0 and all(m.proposed > 0 for m in stats.models[1:])


def test_chi_square_detects_a_wrong_sampler():
    """Control: the same test rejects a sampler that skips the residual (resamples from r instead)."""
    import spectune.decoding.sampling as S

    models = [TableLM(V, seed=11), TableLM(V, seed=12)]
    orig = S.residual
    try:
        S.residual = lambda r, q: r  # the classic bug: on rejection, sample r instead of norm(max(0, r - q))
        p, _ = run_chi_square(models, "sd", "we:0.5,0.5", [2, 1], T1, n=5000)
    finally:
        S.residual = orig
    assert p < 1e-4
