"""Test doubles: a table-driven causal LM whose KV cache stores the tokens themselves.

``TableLM`` follows the transformers causal-LM calling convention (``input_ids``, ``past_key_values``,
``cache_position``) and writes the token ids into the real ``DynamicCache`` as its keys. Its logits at a
position depend on the last two tokens *read back from the cache* and on the position, so a cache that keeps a
rejected token or is rolled back to the wrong length changes the distribution, and the sampling tests see it.
A forward costs microseconds, which makes 20 000-sample distribution tests affordable on a CPU.
"""
from __future__ import annotations

from types import SimpleNamespace

import torch
from transformers import LlamaConfig


class TableLM(torch.nn.Module):
    def __init__(self, vocab: int, seed: int, scale: float = 2.0, max_pos: int = 64):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.config = LlamaConfig(vocab_size=vocab, hidden_size=8, num_hidden_layers=1, num_attention_heads=1)
        self.a = torch.nn.Parameter(torch.randn(vocab + 1, vocab, generator=g) * scale, requires_grad=False)
        self.b = torch.nn.Parameter(torch.randn(vocab + 1, vocab, generator=g) * scale, requires_grad=False)
        self.c = torch.nn.Parameter(torch.randn(max_pos, vocab, generator=g) * scale / 2, requires_grad=False)
        self.head = torch.nn.Linear(8, vocab, bias=False)
        self.vocab = vocab

    def get_output_embeddings(self):
        return self.head

    def forward(self, input_ids, past_key_values, cache_position=None, use_cache=True, **_):
        k = input_ids.shape[1]
        kv = input_ids.float().view(1, 1, k, 1)
        keys, _ = past_key_values.update(kv, kv, 0)
        hist = keys.view(-1).long()  # every token the cache now holds, in order
        n = hist.shape[0]
        pos = torch.arange(n - k, n)
        prev = torch.cat([torch.tensor([self.vocab]), hist])  # "start" id before the first token
        logits = self.a[hist[pos]] + self.b[prev[pos]] + self.c[pos]  # [k, V]
        return SimpleNamespace(logits=logits.unsqueeze(0), past_key_values=past_key_values)
