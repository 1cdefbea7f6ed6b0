"""One model's KV cache for a batch of sequences that advance by different amounts (ragged rows).

Design. The cache has one *physical* slot axis shared by all rows. A forward appends ``K`` slots to every row,
where ``K`` is the longest feed in the batch; a row that feeds ``k < K`` tokens (or none) gets ``K - k``
padding slots that are marked invalid. Each row keeps a validity mask over the slots; its *logical* sequence
is its valid slots in physical order. Queries attend through an explicit 4-D additive mask to the valid slots
of their own row plus the causal part of the new feed, and get explicit ``position_ids`` (the logical index),
so RoPE sees the same positions as an unpadded run. Rollback of a row just invalidates its slots past the kept
length (no data moves); when garbage dominates, ``compact`` packs every row's valid slots to the left.

Invariant per row: the row's valid slots hold exactly the first ``n[row]`` tokens of
its sequence; feeding ``seq[n:m]`` returns logits for positions ``n+1 .. m``.
"""
from __future__ import annotations

import time
from typing import Any

import torch
from transformers import DynamicCache

from spectune.decoding.hf_compat import cache_of, forward
from spectune.decoding.runtime import Counted

PAD_ID = 0  # token id fed in padding slots (never attended to)


def feed_mask(valid: torch.Tensor, lens: list[int], k: int, dtype: torch.dtype) -> torch.Tensor:
    """The additive attention mask of one feed: [rows, 1, k, P + k], 0 where attending is allowed, dtype-min
    elsewhere. ``valid``: [rows, P] which cache slots hold a live token of the row; ``lens``: real (non-padding)
    tokens each row feeds, the rest of its ``k`` new slots are padding. Calibration times its forwards through the
    same mask (``calibration/latency.py``), so L(b, k) is the forward the runtime pays, not transformers' mask-less
    path (on Zen 5 in bf16 the mask-less k = 1 forward took 9 % longer at batch 1 and 42 % at batch 4)."""
    rows, p = valid.shape
    ar = torch.arange(k)
    new_ok = (ar[None, :] <= ar[:, None])[None].expand(rows, k, k).clone()  # causal within the feed
    real = ar[None, :] < torch.tensor(lens)[:, None]  # [rows, k] real (non-padding) new slots
    new_ok &= real[:, None, :] & real[:, :, None]  # real queries see real new keys only
    # a padding query attends only to itself (keeps softmax finite; its output is discarded)
    new_ok |= torch.eye(k, dtype=torch.bool)[None] & ~real[:, :, None]
    old_ok = valid[:, None, :].expand(rows, k, p) & real[:, :, None]
    ok = torch.cat([old_ok, new_ok], dim=-1)  # [rows, k, P + k]
    mask = torch.zeros(ok.shape, dtype=dtype)
    mask.masked_fill_(~ok, torch.finfo(dtype).min)
    return mask[:, None]


class BatchedRunner(Counted):
    """Forward passes of one causal LM over ``rows`` sequences with per-row lengths."""

    def __init__(self, model: Any, rows: int, device: torch.device | str = "cpu"):
        self.model = model
        self.device = torch.device(device)
        self.cache = DynamicCache(config=model.config)
        self.live = list(range(rows))  # sequence ids still in the batch; cache row b belongs to live[b]
        self.row_of = {seq: b for b, seq in enumerate(self.live)}
        self.valid = torch.zeros(rows, 0, dtype=torch.bool)  # [live rows, P] slot holds a live token of the row
        self.n = [0] * rows  # logical length per sequence id
        self._start_counts()
        self.dtype = next(model.parameters()).dtype

    @property
    def physical(self) -> int:
        return self.valid.shape[1]

    @property
    def rows(self) -> int:
        return len(self.live)

    def _mask(self, lens: list[int], k: int) -> torch.Tensor:
        return feed_mask(self.valid, lens, k, self.dtype).to(self.device)

    def forward(self, feeds: dict[int, list[int]]) -> dict[int, torch.Tensor]:
        """Feed ``feeds[row]`` to each listed row (others get padding). Returns float32 logits ``[len, V]`` per row."""
        assert feeds and all(len(v) > 0 for v in feeds.values()), "every feed needs at least one token"
        k = max(len(v) for v in feeds.values())
        lens = [len(feeds.get(seq, ())) for seq in self.live]
        ids = torch.full((self.rows, k), PAD_ID, dtype=torch.long)
        pos = torch.zeros(self.rows, k, dtype=torch.long)
        for b, seq in enumerate(self.live):
            if seq in feeds:
                ids[b, : lens[b]] = torch.tensor(feeds[seq])
                pos[b] = self.n[seq] + torch.arange(k)  # logical positions (padding continues the count, unused)
        mask = self._mask(lens, k)
        cache_pos = torch.arange(self.physical, self.physical + k, device=self.device)
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = forward(self.model, self.cache, input_ids=ids.to(self.device), position_ids=pos.to(self.device),
                          attention_mask=mask, cache_position=cache_pos, use_cache=True)
        logits = out.logits.float()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self._count(feeds, k, time.perf_counter() - t0, sum(lens))
        self.cache = cache_of(out)
        real = torch.arange(k)[None, :] < torch.tensor(lens)[:, None]
        self.valid = torch.cat([self.valid, real], dim=1)
        for r, toks in feeds.items():
            self.n[r] += len(toks)
        logits = logits.cpu()
        return {seq: logits[b, : lens[b]] for b, seq in enumerate(self.live) if seq in feeds}

    def rollback(self, seq: int, n: int) -> None:
        """Keep only the first ``n`` tokens of sequence ``seq`` (invalidate its later slots)."""
        assert 0 <= n
        if n >= self.n[seq]:
            return
        b = self.row_of[seq]
        idx = self.valid[b].nonzero().squeeze(-1)
        self.valid[b, idx[n:]] = False
        self.n[seq] = n

    def release(self, seqs: list[int]) -> None:
        """Finished sequences leave the batch: their cache rows are dropped, so they cost no further compute."""
        gone = set(seqs) & set(self.row_of)
        if not gone:
            return
        keep = [b for b, s in enumerate(self.live) if s not in gone]
        if keep and self.physical > 0:
            self.cache.batch_select_indices(torch.tensor(keep, device=self.device))
        elif not keep:
            self.cache = DynamicCache(config=self.model.config)
        self.valid = self.valid[keep]
        self.live = [self.live[b] for b in keep]
        self.row_of = {seq: b for b, seq in enumerate(self.live)}
        for seq in gone:
            self.n[seq] = 0

    def maybe_compact(self) -> None:
        """Pack valid slots to the left when more than half of the physical slots are garbage."""
        width = max((self.n[s] for s in self.live), default=0)
        if self.rows == 0 or self.physical <= 2 * width + 16:
            return
        # gather index [rows, width]: each row's valid slots in order, padded with slot 0 (marked invalid)
        gather = torch.zeros(self.rows, width, dtype=torch.long)
        valid = torch.zeros(self.rows, width, dtype=torch.bool)
        for b in range(self.rows):
            idx = self.valid[b].nonzero().squeeze(-1)
            gather[b, : len(idx)] = idx
            valid[b, : len(idx)] = True
        for layer in self.cache.layers:
            if getattr(layer, "keys", None) is None or layer.keys.numel() == 0:
                continue
            g = gather.to(layer.keys.device)[:, None, :, None]  # [rows, 1, width, 1]
            layer.keys = layer.keys.gather(2, g.expand(-1, layer.keys.shape[1], -1, layer.keys.shape[3]))
            layer.values = layer.values.gather(2, g.expand(-1, layer.values.shape[1], -1, layer.values.shape[3]))
        self.valid = valid
