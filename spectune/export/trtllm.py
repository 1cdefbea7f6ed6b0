"""TensorRT-LLM (LLM API, PyTorch backend): ``speculative_config`` with ``decoding_type: DraftTarget``.

``draft_len_schedule`` keys are batch-size upper bounds ({4: 4, 8: 2} = batch 1-4: K 4, 5-8: K 2, above 8: off)
and the smallest key's K must equal ``max_draft_len``; it cannot be combined with ``max_concurrency``, so a
schedule that only switches speculation off above N is written as ``max_concurrency: N``.
"""
from __future__ import annotations

from spectune.export._plan import ServePlan
from spectune.export._render import Rendered, ranges, sampling_params


def render(plan: ServePlan, draft: str | None, target: str, version: str) -> Rendered:
    rs = ranges(plan.schedule)
    if draft is None or (rs and all(k == 0 for _, _, k in rs)):
        why = "no speculation" if draft is None else "the schedule never speculates"
        return Rendered("yaml", {}, {"shell": f"trtllm-serve {target}", "python": "from tensorrt_llm import LLM, "
                                     f"SamplingParams\nllm = LLM(model={target!r})\nparams = {sampling_params(plan)}"},
                        [f"{why}: serve the target alone"])
    spec: dict = {"decoding_type": "DraftTarget", "max_draft_len": plan.gamma, "speculative_model": draft}
    notes = []
    if rs and rs[0][2] == 0:
        notes.append("the schedule turns speculation off at batch size 1; TensorRT-LLM needs the smallest "
                     f"batch sizes to speculate: fixed K = {plan.gamma} instead (the predictions below price "
                     "the schedule, not this fixed K)")
    elif rs:
        first = rs[0][2]
        spec["max_draft_len"] = first
        n_on = next((i for i, r in enumerate(rs) if r[2] == 0), len(rs))
        if all(r[2] == first for r in rs[:n_on]) and all(r[2] == 0 for r in rs[n_on:]):
            if n_on < len(rs):  # one K, then off: max_concurrency
                spec["max_concurrency"] = rs[n_on - 1][1]
        else:
            while rs[-1][2] == 0:  # above its largest key TensorRT-LLM does not speculate anyway
                rs = rs[:-1]
            spec["draft_len_schedule"] = {hi: min(k, first) for _, hi, k in rs}
            if any(k > first for _, _, k in rs):
                notes.append(f"TensorRT-LLM caps every scheduled K at the smallest batch size's K ({first})")
            if plan.schedule[-1][1] > 0:
                notes.append(f"above batch size {rs[-1][1]} (the largest calibrated) TensorRT-LLM turns "
                             "speculation off")
    doc = {"speculative_config": spec, "disable_overlap_scheduler": True}
    args = ", ".join(f"{k}={v!r}" for k, v in spec.items() if k != "decoding_type")
    return Rendered("yaml", doc, {
        "shell": f"trtllm-serve {target} --extra_llm_api_options spectune-trtllm.yaml   # the YAML above",
        "python": "from tensorrt_llm import LLM, SamplingParams\nfrom tensorrt_llm.llmapi import DraftTargetDecodingConfig\n"
                  f"llm = LLM(model={target!r}, speculative_config=DraftTargetDecodingConfig({args}), "
                  f"disable_overlap_scheduler=True)\nparams = {sampling_params(plan)}",
    }, notes)
