"""The cache keyword: a model gets its KV cache under the name its forward declares (``cache`` from transformers
5.24, ``past_key_values`` before and in models with their own forward), and every decode forward of spectune
goes through that rule, so no deprecated name is passed on either side of the rename."""
from __future__ import annotations

import warnings
from types import SimpleNamespace

import pytest
import torch
from conftest import make_llama
from fakes import TableLM
from transformers import DynamicCache

from spectune.decoding.batch_cache import BatchedRunner
from spectune.decoding.hf_compat import NEW, OLD, cache_arg, cache_in, cache_of, forward


class _NewName(torch.nn.Module):
    """A forward that knows only the new name (and records what it was given)."""

    def forward(self, input_ids, cache=None, **kw):
        self.got = dict(kw, cache=cache)
        return SimpleNamespace(cache=cache, logits=torch.zeros(1, input_ids.shape[1], 3))


def test_the_name_follows_the_forward_signature():
    assert cache_arg(TableLM(4, 0)) == OLD
    assert cache_arg(_NewName()) == NEW
    m = _NewName()
    out = forward(m, "kv", input_ids=torch.zeros(1, 2, dtype=torch.long))
    assert m.got == {"cache": "kv"} and cache_of(out) == "kv"


def test_reading_the_cache_back_under_either_name():
    assert cache_of(SimpleNamespace(past_key_values="old")) == "old"
    assert cache_of(SimpleNamespace(cache="new", past_key_values="old")) == "new"
    assert cache_in({OLD: "old"}) == "old" and cache_in({NEW: "new"}) == "new" and cache_in({}) is None


def test_a_transformers_model_is_fed_without_a_deprecation_warning():
    """transformers >= 5.24 warns (FutureWarning) when a forward is given past_key_values; the runner never does."""
    model = make_llama(16, 1, 1).eval()
    assert cache_arg(model) in (NEW, OLD)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        with torch.inference_mode():
            out = forward(model, DynamicCache(config=model.config), input_ids=torch.tensor([[3, 4, 5]]), use_cache=True)
            BatchedRunner(model, rows=1).forward({0: [3, 4, 5]})
    assert cache_of(out).get_seq_length() == 3


@pytest.mark.parametrize("kind", ["table", "llama"])
def test_runner_logits_equal_a_plain_forward(kind):
    """Through the runner (which names the cache by the rule) the logits equal one plain forward's."""
    model = TableLM(6, 1) if kind == "table" else make_llama(16, 1, 2).eval()
    with torch.inference_mode():
        got = BatchedRunner(model, rows=1).forward({0: [1, 2, 3]})[0]
        ref = forward(model, DynamicCache(config=model.config), input_ids=torch.tensor([[1, 2, 3]])).logits[0]
    torch.testing.assert_close(got, ref.float())
