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
    """With an end-of-sequence token, every method stops at the same first accepted EOS as standard: the output is
    the EOS-free run up to and including the first EOS. The EOS is a token that run certainly produces (one from
    its middle), so the check never depends on the model emitting <eos> by chance."""
    models = [tiny_models["s"], tiny_models["m"]]
    ids = encode(models[0].tokenizer, "w1")
    free = build_decoder(models, method="standard", combine="we:0.5,0.5", ignore_eos=True).generate(ids, 40, 0)[0]
    eos = free[len(free) // 2]
    want = free[: free.index(eos) + 1]
    assert len(want) < len(free)  # it stops early
    for method in ["standard", "sd", "naive-cos", "cos"]:
        dec = build_decoder(models, method=method, combine="we:0.5,0.5", gamma=[3, 2], ignore_eos=True)
        dec.eos = eos
        out, stats = dec.generate(ids, 40, 0)
        assert out == want and stats.output_tokens == len(want), method
