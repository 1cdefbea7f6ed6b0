"""What a user would run instead: HF transformers' ``generate`` on the target alone, assisted generation
(``generate(assistant_model=draft)``) and prompt lookup (``prompt_lookup_num_tokens``), on the same loaded
weights, prompts and sampling settings.

Every HF row runs the artifact ``spectune export --engine hf`` writes for its configuration
(``spectune.artifacts.hf``): the target's ``GenerationConfig`` goes to ``generate`` (prompt lookup included) and the
assistant's settings (K, the schedule -- constant, or heuristic_transient for the heuristic policy -- and the
confidence stop) go to the assistant's ``generation_config``, where transformers reads them. The "HF defaults"
row clears those three settings so transformers applies its own (20 tokens, adaptive 0.4 confidence stop).
Rows: ``hf-target`` (plain generate), ``hf-assisted`` (a draft model, any draft-length policy), ``hf-lookup``
(prompt lookup, the HF baseline of spectune's ngram rows).

Both generate exactly ``max_new_tokens`` per prompt (``min_new_tokens`` holds EOS back), as spectune's bench
runs ignore EOS, so tokens/s compare like for like. Assisted generation handles one sequence at a time.
``HFTrace`` records what HF really ran: draft length per step, accepted drafts, forwards and their seconds.
"""
from __future__ import annotations

import contextlib
import time
from typing import Any, Iterator, Sequence

import torch

from spectune.artifacts import DEFAULT_VERSION, SCHEMAS, ServePlan, for_engine, plan_for
from spectune.artifacts.hf import ASSISTANT, TARGET, generation_configs
from spectune.bench.grid import Run
from spectune.bench.hf_trace import HFTrace
from spectune.decoding.attention import eager_attention
from spectune.decoding.proposers import proposer_kind

ASSISTANT_KEYS = ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")
HF_KINDS = ("hf-target", "hf-assisted", "hf-lookup")


def hf_plan(run: Run) -> ServePlan:
    """The serving plan an HF row runs: the export's plan of its configuration for transformers (target-only SD
    with K = gamma[0] and its draft-length policy, prompt lookup over the target, or the target alone)."""
    plan, _ = plan_for(run.config)
    return for_engine(plan, SCHEMAS["hf"][DEFAULT_VERSION["hf"]])[0]


def hf_adaptive_runs(spec: Any, t: float) -> list[Run]:
    """The HF baselines of a grid's ngram and policy rows at batch 1: HF prompt lookup with each proposer and K,
    and HF assisted generation of the first and last models with each draft-length policy and K (HF runs the
    target's lookup and a 2-model pair: the export's nearest plan where the row combines more models)."""
    pair = (spec.models[0], spec.models[-1])
    # HF has no lookup-then-draft proposer (prompt lookup takes precedence over an assistant): ngram+model rows
    # have no HF twin
    out = [Run("hf-lookup", spec.config("sd", spec.models[-1:], (g,), 1, t, "target", proposer=p))
           for p in spec.proposers if proposer_kind(p) == "ngram" for g in spec.gammas]
    return out + [Run("hf-assisted", spec.config("sd", pair, (g, 1), 1, t, "target", policy=pol))
                  for pol in spec.policies for g in spec.gammas]


def hf_artifact(run: Run) -> dict[str, dict[str, Any]]:
    """The export artifact this row executes (``spectune.artifacts.hf.generation_configs``); for the HF-defaults
    row the assistant's three settings are None, which transformers replaces by its defaults."""
    import transformers

    d = generation_configs(hf_plan(run), transformers.__version__)
    if run.hf_defaults:
        d[ASSISTANT] = dict.fromkeys(ASSISTANT_KEYS)
    return d


@contextlib.contextmanager
def assistant_settings(model: Any, settings: dict[str, Any]) -> Iterator[None]:
    """Set the assistant's generation-config entries for the duration (restored afterwards: the bench reuses the
    loaded model for other rows)."""
    gc = model.generation_config
    old = {k: getattr(gc, k, None) for k in settings}
    try:
        for k, v in settings.items():
            setattr(gc, k, v)
        yield
    finally:
        for k, v in old.items():
            setattr(gc, k, v)


def _pad_left(batch: Sequence[Sequence[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    n = max(len(p) for p in batch)
    ids = torch.full((len(batch), n), pad, dtype=torch.long)
    mask = torch.zeros((len(batch), n), dtype=torch.long)
    for i, p in enumerate(batch):
        ids[i, n - len(p):] = torch.tensor(p)
        mask[i, n - len(p):] = 1
    return ids, mask


@torch.inference_mode()
def run_hf(run: Run, target: Any, draft: Any, prompts: Sequence[Sequence[int]], seed: int) -> dict[str, Any]:
    """Measure one HF row over ``prompts`` (``batch_size`` at a time; assisted: one at a time): tokens, seconds,
    decode seconds, what HF ran (see ``HFTrace.row_stats``) and ``sequences``: the steps of every ``generate``."""
    from transformers import GenerationConfig
    from transformers.utils import logging as hf_logging

    cfg = run.config
    tok = target.tokenizer
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    art = hf_artifact(run)
    gen = GenerationConfig(**art[TARGET], min_new_tokens=cfg.max_new_tokens, pad_token_id=pad)
    assisted, lookup = ASSISTANT in art, "prompt_lookup_num_tokens" in art[TARGET]
    kw: dict[str, Any] = {"generation_config": gen}
    if assisted:
        kw["assistant_model"] = draft.model
    b = 1 if assisted or lookup else cfg.batch_size  # assisted generation and prompt lookup: one sequence at a time
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # generate() warns about min_new_tokens / assistant settings at every call
    settings = assistant_settings(draft.model, art[ASSISTANT]) if assisted else contextlib.nullcontext()
    trace = HFTrace(target.model, draft.model if assisted else None, (cfg.models[0], cfg.models[-1]), lookup=lookup)
    try:
        with settings, trace:
            m = _timed(target, prompts, b, pad, kw, seed, trace)
    finally:
        hf_logging.set_verbosity(level)
    return {**m, "decode_seconds": m["seconds"] - trace.prefill_excess(), **trace.row_stats(m["tokens"]),
            "sequences": trace.sequences}


def _timed(target: Any, prompts: Sequence[Sequence[int]], b: int, pad: int, kw: dict[str, Any], seed: int,
           trace: HFTrace) -> dict[str, float]:
    tokens, seconds = 0, 0.0
    for first in range(0, len(prompts), b):
        ids, mask = (t.to(target.model.device) for t in _pad_left(prompts[first : first + b], pad))
        torch.manual_seed(seed + first)
        t0 = time.perf_counter()
        with eager_attention(ids.device):  # the attention kernels spectune's eager runtime uses (attention.py)
            out = target.model.generate(input_ids=ids, attention_mask=mask, **kw)
        seconds += time.perf_counter() - t0
        tokens += int(out.shape[0] * (out.shape[1] - ids.shape[1]))
        trace.end_sequence(int(out.shape[1]), int(ids.shape[1]))
    return {"tokens": tokens, "seconds": seconds}
