"""Hugging Face transformers: a ``GenerationConfig`` for assisted generation (``generate(assistant_model=...)``):
constant ``num_assistant_tokens`` = gamma, no confidence-based early stop (spectune drafts exactly gamma), and
the sampling settings. Assisted generation runs one sequence at a time and has no per-batch-size schedule."""
from __future__ import annotations

from spectune.export._plan import ServePlan
from spectune.export._render import Rendered


def render(plan: ServePlan, draft: str | None, target: str, version: str) -> Rendered:
    d: dict = {"max_new_tokens": plan.max_new_tokens, "do_sample": plan.temperature > 0}
    if plan.temperature > 0:
        d["temperature"] = plan.temperature
        d["top_k"] = plan.top_k  # 0 disables, as in spectune
        d["top_p"] = plan.top_p
    notes = []
    if draft is not None:
        d.update(num_assistant_tokens=plan.gamma, num_assistant_tokens_schedule="constant",
                 assistant_confidence_threshold=0.0)
        if len({k for _, k in plan.schedule} | {plan.gamma}) > 1:
            notes.append(f"transformers has no per-batch-size schedule (assisted generation runs batch 1): "
                         f"K = {plan.gamma}")
    else:
        notes.append("no speculation: plain generate() on the target")
    d["transformers_version"] = version
    load = ("import json\nfrom transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig\n"
            f"tok = AutoTokenizer.from_pretrained({target!r})\n"
            f"target = AutoModelForCausalLM.from_pretrained({target!r})\n")
    call = "gen = GenerationConfig(**json.load(open('spectune-hf.json')))   # the JSON above\n"
    if draft is not None:
        load += f"draft = AutoModelForCausalLM.from_pretrained({draft!r})\n"
        call += "out = target.generate(**tok(PROMPT, return_tensors='pt'), assistant_model=draft, generation_config=gen)"
    else:
        call += "out = target.generate(**tok(PROMPT, return_tensors='pt'), generation_config=gen)"
    return Rendered("json", d, {"python": load + call}, notes)
