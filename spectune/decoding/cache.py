"""One model with its KV cache: incremental forwards, rollback on rejection, per-model timing.

Invariant: the cache holds exactly the first ``n`` tokens of the sequence. A forward over tokens
``seq[n:m]`` returns the model's logits for positions ``n+1 .. m`` (the distribution of the token at
position j is produced by feeding token j-1) and leaves ``n == m``. ``rollback(j)`` drops every cached
token at index >= j, so a rejected token never survives a step in any cache.
"""
from __future__ import annotations

import time
from typing import Any, Sequence

import torch
from transformers import DynamicCache


class ModelRunner:
    """Forward passes of one causal LM over a growing sequence (batch size 1)."""

    def __init__(self, model: Any, device: torch.device | str = "cpu"):
        self.model = model
        self.device = torch.device(device)
        self.cache = DynamicCache(config=model.config)
        self.n = 0  # tokens held in the cache
        self.calls = 0
        self.seconds = 0.0
        self.tokens = 0  # tokens fed through forward passes

    def reset(self) -> None:
        """Forget every cached token (the cache object is reused)."""
        self.rollback(0)

    @torch.inference_mode()
    def forward(self, ids: Sequence[int]) -> torch.Tensor:
        """Feed ``ids`` (appended after the cached tokens). Returns float32 logits ``[len(ids), V]``."""
        assert len(ids) > 0, "forward needs at least one token"
        x = torch.tensor([list(ids)], dtype=torch.long, device=self.device)  # [1, k]
        pos = torch.arange(self.n, self.n + len(ids), device=self.device)  # [k]
        t0 = time.perf_counter()
        out = self.model(input_ids=x, past_key_values=self.cache, cache_position=pos, use_cache=True)
        logits = out.logits[0].float()  # [k, V]
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.seconds += time.perf_counter() - t0
        self.calls += 1
        self.tokens += len(ids)
        self.cache = out.past_key_values
        self.n += len(ids)
        return logits.cpu()

    def rollback(self, n: int) -> None:
        """Keep only the first ``n`` cached tokens (transformers 5.x: ``crop`` takes minus the count to drop)."""
        assert 0 <= n, n
        if n < self.n:
            self.cache.crop(n - self.n)
            self.n = n
