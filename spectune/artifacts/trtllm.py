"""TensorRT-LLM (LLM API, PyTorch backend): ``speculative_config`` for a separate draft model, in the spelling
and schedule form of the chosen version (``_schema.py``).

* main (2026-03 on): ``decoding_type: Draft_Target``; ``draft_len_schedule`` keys are batch-size *upper bounds*
  ({4: 4, 8: 2} = batch 1-4: K 4, 5-8: K 2, above 8: off) and the smallest key's K must equal ``max_draft_len``.
* main-2025.10: ``decoding_type: DraftTarget``; keys are *lower bounds* ({1: 4, 5: 2, 9: 0} = batch 1-4: K 4,
  5-8: K 2, from 9: off; the last K holds for every larger batch) and must include 1 with K = ``max_draft_len``.

A schedule that speculates with one K up to N and is off above is written as ``max_concurrency: N`` (the same
in both versions; it cannot be combined with ``draft_len_schedule``). Every K is capped at the batch-1 K.

Prompt lookup: ``decoding_type: NGram`` with ``max_draft_len`` = K, ``max_matching_ngram_size`` = N_MAX (it
tries every n down to 1), ``is_public_pool: false`` (the pool of the request's own tokens, as spectune looks up
in the sequence's own context) and ``is_use_oldest: false`` (the newest continuation, as spectune's most recent
occurrence); ``disable_overlap_scheduler: true`` as for the draft model.
"""
from __future__ import annotations

from typing import Any

from spectune.artifacts._plan import ServePlan
from spectune.artifacts._render import Rendered, ranges, sampling_params


def render(plan: ServePlan, draft: str | None, target: str, schema: Any, batch_size: int = 1) -> Rendered:
    if plan.ngram is not None:
        return _ngram(plan, target, schema)
    rs = ranges(plan.schedule)
    if draft is None or (rs and all(k == 0 for _, _, k in rs)):
        why = "no speculation" if draft is None else "the schedule never speculates"
        return Rendered("yaml", {}, {"shell": f"trtllm-serve {target}", "python": "from tensorrt_llm import LLM, "
                                     f"SamplingParams\nllm = LLM(model={target!r})\nparams = {sampling_params(plan)}"},
                        [f"{why}: serve the target alone"])
    spec: dict = {"decoding_type": schema.values["decoding_type"][0], "max_draft_len": plan.gamma,
                  "speculative_model": draft}
    notes = _schedule(spec, rs, plan, schema.schedule) if rs else []
    doc = {"speculative_config": spec, "disable_overlap_scheduler": True}
    args = ", ".join(f"{k}={v!r}" for k, v in spec.items() if k != "decoding_type")
    return Rendered("yaml", doc, {
        "shell": f"trtllm-serve {target} --extra_llm_api_options spectune-trtllm.yaml   # the YAML above",
        "python": "from tensorrt_llm import LLM, SamplingParams\n"
                  "from tensorrt_llm.llmapi import DraftTargetDecodingConfig\n"
                  f"llm = LLM(model={target!r}, speculative_config=DraftTargetDecodingConfig({args}), "
                  f"disable_overlap_scheduler=True)\nparams = {sampling_params(plan)}",
    }, notes)


def _ngram(plan: ServePlan, target: str, schema: Any) -> Rendered:
    """NGramDecodingConfig (see the module docstring)."""
    n_max = plan.ngram[1]  # type: ignore[index]
    spec = {"decoding_type": "NGram", "max_draft_len": plan.gamma, "max_matching_ngram_size": n_max,
            "is_keep_all": True, "is_use_oldest": False, "is_public_pool": False}
    args = ", ".join(f"{k}={v!r}" for k, v in spec.items() if k != "decoding_type")
    return Rendered("yaml", {"speculative_config": spec, "disable_overlap_scheduler": True}, {
        "shell": f"trtllm-serve {target} --extra_llm_api_options spectune-trtllm.yaml   # the YAML above",
        "python": "from tensorrt_llm import LLM, SamplingParams\n"
                  "from tensorrt_llm.llmapi import NGramDecodingConfig\n"
                  f"llm = LLM(model={target!r}, speculative_config=NGramDecodingConfig({args}), "
                  f"disable_overlap_scheduler=True)\nparams = {sampling_params(plan)}"})


def _schedule(spec: dict, rs: list[list[int]], plan: ServePlan, form: str) -> list[str]:
    """Write the schedule into ``spec`` (``max_concurrency`` or ``draft_len_schedule`` in ``form``); notes."""
    if rs[0][2] == 0:
        return ["the schedule turns speculation off at batch size 1; TensorRT-LLM needs the smallest batch sizes to "
                f"speculate: fixed K = {plan.gamma} instead (the predictions below price the schedule, not this "
                "fixed K)"]
    first = rs[0][2]
    spec["max_draft_len"] = first
    n_on = next((i for i, r in enumerate(rs) if r[2] == 0), len(rs))
    if all(r[2] == first for r in rs[:n_on]) and all(r[2] == 0 for r in rs[n_on:]):
        if n_on < len(rs):  # one K, then off: max_concurrency
            spec["max_concurrency"] = rs[n_on - 1][1]
        return []
    notes = []
    if any(k > first for _, _, k in rs):
        notes.append(f"TensorRT-LLM caps every scheduled K at the smallest batch size's K ({first})")
    if form == "lower-bounds":
        spec["draft_len_schedule"] = {lo: min(k, first) for lo, _, k in rs}
        if rs[-1][2] > 0:
            notes.append(f"batch sizes above {rs[-1][1]} (the largest calibrated) keep K = {min(rs[-1][2], first)}")
        return notes
    while rs[-1][2] == 0:  # above its largest key TensorRT-LLM does not speculate anyway
        rs = rs[:-1]
    spec["draft_len_schedule"] = {hi: min(k, first) for _, hi, k in rs}
    if plan.schedule[-1][1] > 0:
        notes.append(f"above batch size {rs[-1][1]} (the largest calibrated) TensorRT-LLM turns speculation off")
    return notes
