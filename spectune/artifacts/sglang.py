"""SGLang: ``python -m sglang.launch_server`` with ``--speculative-algorithm STANDALONE`` (a separate draft model,
top-k 1: one chain of num_steps drafts, num_steps + 1 tokens verified per step), or ``NGRAM`` for prompt lookup
(versions that have it: ``--speculative-num-draft-tokens`` K + 1, the tree's root being the last token, and
``--speculative-ngram-max-bfs-breadth 1``: one chain of K drafts). No per-batch-size schedule."""
from __future__ import annotations

from typing import Any

from spectune.artifacts._plan import ServePlan
from spectune.artifacts._render import Rendered, ranges, sh_join


def render(plan: ServePlan, draft: str | None, target: str, schema: Any, batch_size: int = 1) -> Rendered:
    argv = ["python", "-m", "sglang.launch_server", "--model-path", target]
    notes = []
    if plan.ngram is not None:
        argv += ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", str(plan.gamma + 1),
                 "--speculative-ngram-max-bfs-breadth", "1"]
    elif draft is not None:
        argv += ["--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", draft,
                 "--speculative-num-steps", str(plan.gamma), "--speculative-eagle-topk", "1",
                 "--speculative-num-draft-tokens", str(plan.gamma + 1)]
        if len({k for _, k in plan.schedule} | {plan.gamma}) > 1:
            notes.append("SGLang has no per-batch-size schedule: K = "
                         f"{plan.gamma} at every batch size (the schedule: " + ", ".join(
                             f"b {lo}-{hi}: K {k}" for lo, hi, k in ranges(plan.schedule)) + ")")
    else:
        notes.append("no speculation: serve the target alone")
    sampling = {"temperature": plan.temperature, "top_p": plan.top_p, "max_new_tokens": plan.max_new_tokens}
    if plan.top_k > 0:
        sampling["top_k"] = plan.top_k
    return Rendered("sh", argv, {
        "shell": sh_join(argv),
        "python": "# per request (native /generate API)\n"
                  "requests.post('http://localhost:30000/generate', "
                  f"json={{'text': PROMPT, 'sampling_params': {sampling!r}}})",
    }, notes, program=3)
