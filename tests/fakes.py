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

    def forward(self, input_ids, past_key_values, attention_mask=None, position_ids=None, **_):
        bsz, k = input_ids.shape
        kv = input_ids.float().view(bsz, 1, k, 1)
        keys, _ = past_key_values.update(kv, kv, 0)
        slots = keys.view(bsz, -1).long()  # [B, P]: the token in every physical slot
        p = slots.shape[1]
        if attention_mask is None:  # plain causal cache: query t sees slots [0, p - k + t]
            ok = torch.arange(p)[None, None, :] <= (p - k + torch.arange(k))[None, :, None]
            ok = ok.expand(bsz, k, p)
        else:  # ragged batch: exactly the slots this query may attend to
            ok = attention_mask[:, 0] == 0  # [B, k, P]
        rank = ok.long().cumsum(-1)  # 1-based order of attended slots
        count = rank[..., -1:]  # [B, k, 1] history length
        tok = slots[:, None, :].expand(bsz, k, p)
        last = (tok * (ok & (rank == count))).sum(-1)  # the query's own token
        has_prev = count.squeeze(-1) > 1
        prev = torch.where(has_prev, (tok * (ok & (rank == count - 1))).sum(-1), torch.tensor(self.vocab))
        pos = count.squeeze(-1) - 1
        if position_ids is not None:  # the runner's logical positions must agree with the attended history
            real = count.squeeze(-1) > 1
            assert bool((position_ids[real] == pos[real]).all()), "position_ids disagree with the attended history"
        out = self.a[last] + self.b[prev] + self.c[pos]  # [B, k, V]
        return SimpleNamespace(logits=out, past_key_values=past_key_values)
