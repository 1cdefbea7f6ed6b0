"""Combinations: parsing/validation, n-model weights, cd refusal for n != 2, and the user-callable interface."""
import pytest
import torch

from spectune.api import build_decoder, encode
from spectune.decoding.combine import Combination, parse_combination
from spectune.errors import ConfigError


def test_parse_and_canonical_forms():
    assert parse_combination("target", 3).uses == (2,)
    we = parse_combination("we:0.2,0.3,0.5", 3)
    assert we.spec == "we:0.2,0.3,0.5" and we.uses == (0, 1, 2)
    assert parse_combination("we", 4).spec == "we:0.25,0.25,0.25,0.25"  # default: uniform
    assert parse_combination("CD:0.1", 2).spec == "cd:0.1"


@pytest.mark.parametrize(
    "spec,n,msg",
    [("we:0.5,0.5", 3, "needs 3 weights"), ("cd:0.5", 3, "exactly 2 models"), ("cd:a", 2, "invalid mu"),
     ("target:1", 2, "no argument"), ("foo", 2, "unknown combination"), ("we:1.2,-0.2", 2, ">= 0")],
)
def test_invalid_combinations(spec, n, msg):
    with pytest.raises(ConfigError, match=msg):
        parse_combination(spec, n)


def test_probability_level_weighted_ensemble_and_logit_level_cd():
    l0, l1 = torch.tensor([1.0, 0.0, -1.0]), torch.tensor([0.0, 2.0, 0.0])
    we = parse_combination("we:0.25,0.75", 2).probs([l0, l1], 1.0, 0, 1.0)
    assert torch.allclose(we, 0.25 * torch.softmax(l0, -1) + 0.75 * torch.softmax(l1, -1))
    cd = parse_combination("cd:0.5", 2).probs([l0, l1], 2.0, 0, 1.0)  # warp after combining
    assert torch.allclose(cd, torch.softmax((l1 - 0.5 * l0) / 2.0, -1))


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_user_callable_combination_matches_builtin(tiny_models, temperature):
    models = [tiny_models["s"], tiny_models["l"]]
    mine = Combination.custom(lambda ps: 0.3 * ps[0] + 0.7 * ps[1], n_models=2, level="prob")
    ids = encode(models[0].tokenizer, "w4 w2")
    a = build_decoder(models, method="cos", combine=mine, gamma=[3, 2], temperature=temperature, ignore_eos=True)
    b = build_decoder(models, method="cos", combine="we:0.3,0.7", gamma=[3, 2], temperature=temperature,
                      ignore_eos=True)
    assert a.generate(ids, 16, seed=3)[0] == b.generate(ids, 16, seed=3)[0]


def test_custom_combination_validation():
    with pytest.raises(ConfigError):
        Combination.custom(lambda xs: xs[0], n_models=2, level="bogus")
    with pytest.raises(ConfigError):
        Combination.custom(lambda xs: xs[0], n_models=2, uses=[5])
