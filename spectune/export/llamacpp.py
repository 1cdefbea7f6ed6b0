"""llama.cpp ``llama-server``: ``-m`` target and ``-md`` draft (GGUF files), draft length bounds and sampling.
Builds since ~b9596 spell the draft flags ``--spec-draft-n-max`` / ``--spec-draft-n-min`` /
``--spec-draft-p-min``; older builds (version ``b4000``) take ``--draft-max`` / ``--draft-min`` /
``--draft-p-min``. A p-min of 0 keeps every draft at the full length, as spectune's decoder drafts.
No per-batch-size schedule; ``-np`` = the config's batch size (parallel slots)."""
from __future__ import annotations

from spectune.export._plan import ServePlan
from spectune.export._render import Rendered, sh_join

FLAGS = {"b9596": ("--spec-draft-n-max", "--spec-draft-n-min", "--spec-draft-p-min"),
         "b4000": ("--draft-max", "--draft-min", "--draft-p-min")}


def render(plan: ServePlan, draft: str | None, target: str, version: str, batch_size: int = 1) -> Rendered:
    n_max, n_min, p_min = FLAGS[version]
    argv = ["llama-server", "-m", target]
    notes = []
    if draft is not None:
        argv += ["-md", draft, n_max, str(plan.gamma), n_min, "1", p_min, "0.0"]
        if len({k for _, k in plan.schedule} | {plan.gamma}) > 1:
            notes.append(f"llama.cpp has no per-batch-size schedule: K = {plan.gamma} at every batch size")
    else:
        notes.append("no speculation: serve the target alone")
    argv += ["--temp", f"{plan.temperature:g}", "--top-k", str(plan.top_k), "--top-p", f"{plan.top_p:g}"]
    if batch_size > 1:
        argv += ["-np", str(batch_size)]
    return Rendered("sh", argv, {"shell": sh_join(argv)}, notes)
