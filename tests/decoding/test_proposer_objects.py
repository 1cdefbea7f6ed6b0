"""The proposer registry: every proposer is an object that says what it does (no None stands for model 0)."""
from __future__ import annotations

import pytest

from spectune.config import DecodeConfig
from spectune.decoding.proposers import MODEL, ModelProposer, NgramProposer, parse_proposer, proposer_kind
from spectune.errors import ConfigError


@pytest.mark.parametrize("text, kind, looks_up, drafts, k", [
    ("model", "model", False, True, None),
    (None, "model", False, True, None),
    ("ngram:1,3", "ngram", True, False, None),
    ("ngram+model:2,4,5", "ngram+model", True, True, 5),
])
def test_each_proposer_says_what_it_does(text, kind, looks_up, drafts, k):
    p = parse_proposer(text)
    assert (p.kind, p.looks_up, p.drafts, p.k) == (kind, looks_up, drafts, k)
    assert parse_proposer(p.spec) == p and parse_proposer(p) is p and proposer_kind(text) == kind


def test_the_model_proposer_is_one_object_and_takes_no_parameters():
    assert parse_proposer("model") is MODEL and isinstance(MODEL, ModelProposer) and MODEL.spec == "model"
    for bad in ("model:1", "draft", 3):
        with pytest.raises(ConfigError):
            parse_proposer(bad)


def test_a_config_turns_its_proposer_back_into_text_when_written():
    cfg = DecodeConfig(models=("a", "b"), method="sd", gamma=(4, 1), proposer="ngram+model:1,3")
    assert isinstance(cfg.proposing, NgramProposer) and cfg.proposer == "ngram+model:1,3,8"
    assert cfg.to_dict()["proposer"] == "ngram+model:1,3,8"
