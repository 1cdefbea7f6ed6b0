"""llama.cpp ``llama-server``: ``-m`` target and ``-md`` draft (GGUF files), draft length bounds and sampling.
The flag spellings come from the version's schema (``_schema.py``): current builds take ``--spec-type
draft-simple`` and ``--spec-draft-n-max`` / ``--spec-draft-n-min`` / ``--spec-draft-p-min`` (the old
``--draft-max`` / ``--draft-min`` now fail with "the argument has been removed"); b4000-era builds take
``--draft-max`` / ``--draft-min`` / ``--draft-p-min`` and have no ``--spec-type``. A p-min of 0 keeps every
draft at the full length, as spectune's decoder drafts; the ``confidence:T`` policy writes p-min T. Prompt lookup
(current builds): ``--spec-type ngram-simple`` with ``--spec-ngram-simple-size-n`` N_MAX (one lookup length) and
``--spec-ngram-simple-size-m`` K, no draft model; ``ngram+model`` adds the draft model behind it: ``--spec-type
ngram-simple,draft-simple`` (llama.cpp tries its implementations in priority order, n-gram ones before the draft
model, and the first that drafts anything proposes). No per-batch-size schedule; ``-np`` = the config's batch size
(parallel slots), and with speculation at more than one slot ``--kv-unified`` (builds that have it): without it each
slot keeps a KV stream of its own and a step whose rows feed different token counts (some drafted, some not) is split
into one forward per run of equal rows (src/llama-batch.cpp ``split_equal``); with it the step is one flattened
forward. Measured (b11434, Emerald Rapids guest, 2 cores, mix, b = 8): ngram-simple K = 2 61.7 -> 92.2 tok/s,
draft-simple K = 2 52.9 -> 69.8 tok/s, the target alone unchanged."""
from __future__ import annotations

from typing import Any

from spectune.artifacts._plan import ServePlan
from spectune.artifacts._render import Rendered, sh_join


def render(plan: ServePlan, draft: str | None, target: str, schema: Any, batch_size: int = 1) -> Rendered:
    names = schema.names
    argv = ["llama-server", "-m", target]
    notes = []
    if plan.ngram is not None and draft is None:
        argv += [names["spec_type"], "ngram-simple", names["ngram_n"], str(plan.ngram[1]), names["ngram_m"],
                 str(plan.gamma)]
    elif draft is not None:
        if plan.ngram is not None:  # ngram+model: the draftless type takes precedence where it drafts
            argv += [names["spec_type"], "ngram-simple,draft-simple", names["ngram_n"], str(plan.ngram[1]),
                     names["ngram_m"], str(plan.ngram_k)]
        elif "spec_type" in names:
            argv += [names["spec_type"], "draft-simple"]
        p_min = plan.policy.partition(":")[2] if plan.policy.startswith("confidence:") else "0.0"
        argv += ["-md", draft, names["draft_max"], str(plan.gamma), names["draft_min"], "1", names["p_min"], p_min]
        if len({k for _, k in plan.schedule} | {plan.gamma}) > 1:
            notes.append(f"llama.cpp has no per-batch-size schedule: K = {plan.gamma} at every batch size")
    else:
        notes.append("no speculation: serve the target alone")
    argv += ["--temp", f"{plan.temperature:g}", "--top-k", str(plan.top_k), "--top-p", f"{plan.top_p:g}"]
    if batch_size > 1:
        argv += ["-np", str(batch_size)]
        if "kv_unified" in names and (plan.ngram is not None or draft is not None):
            argv.append(names["kv_unified"])  # one flattened forward a step (the module docstring)
            notes.append("--kv-unified: one KV buffer for all slots, so a step where some slots draft and others "
                         "do not is one forward, not one per run of equal slots (measured at 8 slots: 1.24-1.49x the "
                         "tok/s of the same speculation without it)")
    return Rendered("sh", argv, {"shell": sh_join(argv)}, notes)
