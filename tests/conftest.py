"""Shared fixtures: tiny randomly initialised Llama models of different sizes sharing one tiny tokenizer.

Nothing downloads: the tokenizer is a word-level ``tokenizers`` object built here, the models are random.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))  # tests/fakes.py

WORDS = ["<eos>", "<unk>"] + [f"w{i}" for i in range(30)]


def make_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(WORDS)}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<eos>", unk_token="<unk>")


def make_llama(hidden: int, layers: int, seed: int, vocab: int = len(WORDS)):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=256, initializer_range=0.3,
        eos_token_id=0, bos_token_id=None, pad_token_id=None, tie_word_embeddings=False,
    )
    return LlamaForCausalLM(cfg).eval()


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory):
    """Three saved tiny models (small, medium, large) with one tokenizer, plus one with a different vocabulary."""
    root = tmp_path_factory.mktemp("tiny")
    tok = make_tokenizer()
    out = {}
    for name, (hidden, layers, seed) in {"s": (16, 1, 1), "m": (24, 2, 2), "l": (32, 2, 3)}.items():
        d = root / name
        make_llama(hidden, layers, seed).save_pretrained(d)
        tok.save_pretrained(d)
        out[name] = d
    other = root / "other"
    make_llama(16, 1, 4, vocab=len(WORDS) + 3).save_pretrained(other)
    from transformers import PreTrainedTokenizerFast
    from tokenizers import Tokenizer, models, pre_tokenizers

    tk = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(WORDS + ["x", "y", "z"])}, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<eos>", unk_token="<unk>").save_pretrained(other)
    out["other"] = other
    return out


@pytest.fixture(scope="session")
def tiny_models(tiny_dirs):
    from spectune.models import load_model

    return {k: load_model(str(v)) for k, v in tiny_dirs.items() if k != "other"}


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    """Tiny tensors gain nothing from intra-op threads; one thread per pytest-xdist worker avoids oversubscription."""
    torch.set_num_threads(1)
