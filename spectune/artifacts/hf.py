"""Hugging Face transformers assisted generation (``generate(assistant_model=...)``): two ``GenerationConfig``s.

transformers reads the draft length from the *assistant's* generation config, not the target's
(``AssistedCandidateGenerator.__init__``, generation/candidate_generator.py in 5.23): the export is one JSON
object with two artifacts, ``target_generation_config`` (sampling, lengths: pass it to ``generate``) and
``assistant_generation_config`` (``num_assistant_tokens`` = K, a ``constant`` schedule and
``assistant_confidence_threshold`` 0.0: HF drafts exactly K tokens every step, as spectune's decoder does;
left unset they default to 20 tokens cut by an adaptive 0.4 confidence threshold). Apply the second to
``assistant_model.generation_config`` (or save it as the assistant's ``generation_config.json``).

Assisted generation runs one sequence at a time, so K is the schedule's K at batch size 1 (the config's
gamma without a schedule); K = 0 there means plain ``generate`` on the target.

Draft-length policies go to the assistant's config too: ``heuristic`` -> ``num_assistant_tokens_schedule:
"heuristic_transient"`` (+2 / -1 from K, reset at every ``generate`` call, as spectune's per-sequence policy),
``confidence:T`` -> ``assistant_confidence_threshold: T``. Prompt lookup needs no assistant: the target's config
carries ``prompt_lookup_num_tokens`` = K and ``max_matching_ngram_size`` = N_MAX (``PromptLookupCandidateGenerator``).
"""
from __future__ import annotations

from typing import Any

from spectune.artifacts._plan import ServePlan
from spectune.artifacts._render import Rendered, ranges

TARGET, ASSISTANT = "target_generation_config", "assistant_generation_config"


def hf_k(plan: ServePlan) -> int:
    """The draft length HF runs: the plan's K at batch size 1 (0 without a draft)."""
    if plan.ngram is not None:
        return plan.gamma
    if plan.draft is None:
        return 0
    return ranges(plan.schedule)[0][2] if plan.schedule else plan.gamma


def generation_configs(plan: ServePlan, version: str) -> dict[str, dict[str, Any]]:
    """{TARGET: kwargs of the target's GenerationConfig, ASSISTANT: of the assistant's} (no ASSISTANT at K = 0)."""
    target: dict[str, Any] = {"max_new_tokens": plan.max_new_tokens, "do_sample": plan.temperature > 0}
    if plan.temperature > 0:
        target.update(temperature=plan.temperature, top_k=plan.top_k, top_p=plan.top_p)  # top_k 0 disables, as here
    if plan.ngram is not None:  # prompt lookup: read from the config passed to generate(), no assistant
        target.update(prompt_lookup_num_tokens=plan.gamma, max_matching_ngram_size=plan.ngram[1])
    target["transformers_version"] = version
    out = {TARGET: target}
    k = hf_k(plan)
    if k > 0 and plan.draft is not None:
        schedule = "heuristic_transient" if plan.policy == "heuristic" else "constant"
        threshold = float(plan.policy.partition(":")[2]) if plan.policy.startswith("confidence:") else 0.0
        out[ASSISTANT] = {"num_assistant_tokens": k, "num_assistant_tokens_schedule": schedule,
                          "assistant_confidence_threshold": threshold, "transformers_version": version}
    return out


def settings_of(artifact: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """An artifact's generation settings without the transformers release it names: what two artifacts must share
    to run the same (an export names the release its keys were read at, a bench row the installed one)."""
    return {side: {k: v for k, v in c.items() if k != "transformers_version"} for side, c in artifact.items()}


def render(plan: ServePlan, draft: str | None, target: str, schema: Any, batch_size: int = 1) -> Rendered:
    d = generation_configs(plan, schema.version)
    notes = []
    k = hf_k(plan)
    if plan.ngram is not None:  # prompt lookup: generate() reads it from the target's config
        if plan.temperature > 0 and plan.top_p < 1:
            notes.append(f"with top_p {plan.top_p:g} HF's prompt lookup never proposes the highest token ids (about "
                         f"{1 - plan.top_p:.0%} of the vocabulary): it checks each candidate against its top-p warper "
                         "applied to uniform logits, which removes them")
    elif draft is None:
        notes.append("no speculation: plain generate() on the target")
    elif k == 0:
        notes.append("the schedule does not speculate at batch size 1 (assisted generation runs one sequence at a "
                     "time): plain generate() on the target")
    elif len({kk for _, kk in plan.schedule} | {k}) > 1:
        notes.append(f"transformers has no per-batch-size schedule (assisted generation runs batch 1): K = {k}, "
                     "the schedule's K at batch size 1")
    if plan.draft is not None and plan.policy == "heuristic" and k > 0:
        notes.append("num_assistant_tokens_schedule heuristic_transient: +2 after a fully accepted draft, else -1 (at "
                     "least 1), from K again in every generate() call, as spectune's per-sequence policy "
                     "('heuristic' would carry K over from one call to the next)")
    if batch_size > 1:
        notes.append(f"assisted generation runs one sequence at a time, not batches of {batch_size}")
    return Rendered("json", d, {"python": _snippet(target, draft if k > 0 else None)}, notes)


def _snippet(target: str, draft: str | None) -> str:
    lines = ["import json",
             "from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig",
             "cfg = json.load(open('spectune-hf.json'))   # the JSON above",
             f"tok = AutoTokenizer.from_pretrained({target!r})",
             f"target = AutoModelForCausalLM.from_pretrained({target!r})",
             f"gen = GenerationConfig(**cfg[{TARGET!r}])"]
    if draft is None:  # plain generate(), or prompt lookup (prompt_lookup_num_tokens in gen)
        return "\n".join(lines + ["out = target.generate(**tok(PROMPT, return_tensors='pt'), generation_config=gen)"])
    return "\n".join(lines + [
        f"draft = AutoModelForCausalLM.from_pretrained({draft!r})",
        f"draft.generation_config.update(**cfg[{ASSISTANT!r}])   # HF reads K and the stop rule here, not from gen",
        "out = target.generate(**tok(PROMPT, return_tensors='pt'), assistant_model=draft, generation_config=gen)"])
