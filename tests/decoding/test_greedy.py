"""Greedy decoding is the limit case: every method must be token-identical to ``standard``."""
import itertools

import pytest

from spectune.api import build_decoder, encode

PROMPTS = ["w3 w7 w1", "w12 w4", "w20 w21 w22 w5 w9 w0 w2"]
COMBOS = ["target", "we:0.4,0.6", "cd:0.3"]


@pytest.mark.parametrize("combine", COMBOS)
def test_every_method_equals_standard_under_greedy(tiny_models, combine):
    models = [tiny_models["s"], tiny_models["l"]]
    tok = models[-1].tokenizer
    base = build_decoder(models, method="standard", combine=combine, ignore_eos=True)
    refs = [base.generate(encode(tok, p), 16, seed=0)[0] for p in PROMPTS]
    for method, gq, gp in itertools.product(["sd", "naive-cos", "cos"], [1, 2, 5], [1, 2]):
        dec = build_decoder(models, method=method, combine=combine, gamma=[gq, gp], ignore_eos=True)
        for p, ref in zip(PROMPTS, refs):
            out, stats = dec.generate(encode(tok, p), 16, seed=0)
            assert out == ref, f"{method} {combine} gamma=({gq},{gp}) prompt={p!r}"
            assert stats.output_tokens == 16


def test_cos_takes_alternate_path_under_greedy(tiny_models):
    models = [tiny_models["m"], tiny_models["l"]]
    dec = build_decoder(models, method="cos", combine="we:0.5,0.5", gamma=[2, 2], ignore_eos=True)
    _, stats = dec.generate(encode(models[0].tokenizer, PROMPTS[0]), 40, seed=0)
    assert stats.bonus_tokens > 0 and stats.models[1].proposed > 0


def test_eos_is_verified_and_stops(tiny_models):
    """With EOS enabled, every method stops at the same first accepted EOS as standard."""
    models = [tiny_models["s"], tiny_models["m"]]
    tok = models[0].tokenizer
    ref = build_decoder(models, method="standard", combine="we:0.5,0.5").generate(encode(tok, "w1"), 200, 0)[0]
    for method in ["sd", "naive-cos", "cos"]:
        out = build_decoder(models, method=method, combine="we:0.5,0.5", gamma=[3, 2]).generate(
            encode(tok, "w1"), 200, 0
        )[0]
        assert out == ref
    if 0 in ref:
        assert ref.index(0) == len(ref) - 1
