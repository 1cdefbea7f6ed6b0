"""The decoder in bfloat16 (what ``--dtype auto`` runs on bf16-native hardware) stays exact.

Models compute in bf16; every sampling step works on float32 logits (``BatchedRunner.feed`` upcasts them), so
the sampled distribution is exactly r of the bf16 models and greedy decoding is still token-identical to
``standard``. The chi-square harness is ``test_distribution``'s: the exact probabilities are computed from the
same bf16 tables.
"""
import itertools

import pytest
import torch
from fakes import TableLM
from test_distribution import T1, V, run_chi_square
from test_greedy import PROMPTS

from spectune.api import build_decoder, encode
from spectune.models import load_model


def test_bf16_models_sample_exactly_from_r():
    models = [TableLM(V, seed=11 + i).to(torch.bfloat16) for i in range(2)]
    assert models[0](torch.tensor([[1]]), _cache()).logits.dtype == torch.bfloat16
    p, stats = run_chi_square(models, "cos", "we:0.3,0.7", [2, 1], T1, n=10_000)
    assert p > 1e-4, f"chi-square p = {p:.2e}"
    assert stats.recovered_tokens > 0 and stats.bonus_tokens > 0


def _cache():
    from transformers import DynamicCache

    return DynamicCache()


def test_sampling_math_sees_float32_logits(monkeypatch):
    """bf16 logits are upcast before any sampling math: every warp (r's and each q) sees float32 only."""
    import spectune.decoding.sampling as S

    seen = []
    orig = S.logits_to_probs
    monkeypatch.setattr(S, "logits_to_probs", lambda lg, *a, **k: seen.append(lg.dtype) or orig(lg, *a, **k))
    models = [TableLM(V, seed=1).to(torch.bfloat16), TableLM(V, seed=2).to(torch.bfloat16)]
    from spectune.decoding import DecodePlan, Decoder, SamplingParams, parse_combination

    dec = Decoder(models, ["0", "1"], DecodePlan("sd", parse_combination("target", 2), [2, 1],
                                                 SamplingParams(1.0, 0, 1.0)))
    dec.generate([3, 5], 6, 0)
    assert seen and set(seen) == {torch.float32}


@pytest.fixture(scope="module")
def bf16_models(tiny_dirs):
    return {k: load_model(str(tiny_dirs[k]), dtype="bfloat16") for k in ("s", "l")}


@pytest.mark.parametrize("combine", ["target", "we:0.4,0.6", "cd:0.3"])
def test_bf16_greedy_equals_standard(bf16_models, combine):
    models = [bf16_models["s"], bf16_models["l"]]
    assert {m.dtype for m in models} == {"bfloat16"}
    tok = models[-1].tokenizer
    base = build_decoder(models, method="standard", combine=combine, ignore_eos=True)
    refs = [base.generate(encode(tok, p), 12, seed=0)[0] for p in PROMPTS]
    for method, gq, gp in itertools.product(["sd", "naive-cos", "cos"], [1, 3], [1, 2]):
        dec = build_decoder(models, method=method, combine=combine, gamma=[gq, gp], ignore_eos=True)
        for p, ref in zip(PROMPTS, refs):
            assert dec.generate(encode(tok, p), 12, seed=0)[0] == ref, f"{method} {combine} ({gq},{gp}) {p!r}"
