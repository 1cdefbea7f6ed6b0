"""What a user would run instead: HF transformers' ``generate`` on the target alone and assisted generation
(``generate(assistant_model=draft)``), on the same loaded weights, prompts and sampling settings.

Both generate exactly ``max_new_tokens`` per prompt (``min_new_tokens`` holds EOS back), as spectune's bench
runs ignore EOS, so tokens/s compare like for like. Assisted generation handles one sequence at a time.
"""
from __future__ import annotations

import time
from typing import Any, Sequence

import torch

from spectune.bench.grid import Run


def _sampling(cfg: Any) -> dict[str, Any]:
    if cfg.temperature == 0:
        return {"do_sample": False}
    return {"do_sample": True, "temperature": cfg.temperature, "top_k": cfg.top_k, "top_p": cfg.top_p}


def _pad_left(batch: Sequence[Sequence[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    n = max(len(p) for p in batch)
    ids = torch.full((len(batch), n), pad, dtype=torch.long)
    mask = torch.zeros((len(batch), n), dtype=torch.long)
    for i, p in enumerate(batch):
        ids[i, n - len(p):] = torch.tensor(p)
        mask[i, n - len(p):] = 1
    return ids, mask


@torch.inference_mode()
def run_hf(run: Run, target: Any, draft: Any, prompts: Sequence[Sequence[int]], seed: int) -> dict[str, float]:
    """Measure one HF baseline over ``prompts`` (``batch_size`` at a time): tokens, seconds."""
    cfg = run.config
    tok = target.tokenizer
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    kw: dict[str, Any] = dict(max_new_tokens=cfg.max_new_tokens, min_new_tokens=cfg.max_new_tokens,
                              pad_token_id=pad, **_sampling(cfg))
    b = cfg.batch_size
    if run.kind == "hf-assisted":
        b = 1
        kw["assistant_model"] = draft.model
        if not run.hf_defaults:  # spectune's gamma: a constant draft length, no confidence-based early stop
            kw.update(num_assistant_tokens=cfg.gamma[0], num_assistant_tokens_schedule="constant",
                      assistant_confidence_threshold=0.0)
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # generate() warns about min_new_tokens / assistant settings at every call
    try:
        return _timed(target, prompts, b, pad, kw, seed)
    finally:
        hf_logging.set_verbosity(level)


def _timed(target: Any, prompts: Sequence[Sequence[int]], b: int, pad: int, kw: dict[str, Any], seed: int
           ) -> dict[str, float]:
    tokens, seconds = 0, 0.0
    for first in range(0, len(prompts), b):
        ids, mask = _pad_left(prompts[first : first + b], pad)
        torch.manual_seed(seed + first)
        t0 = time.perf_counter()
        out = target.model.generate(input_ids=ids, attention_mask=mask, **kw)
        seconds += time.perf_counter() - t0
        tokens += int(out.shape[0] * (out.shape[1] - ids.shape[1]))
    return {"tokens": tokens, "seconds": seconds}
