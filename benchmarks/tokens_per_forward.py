"""Tokens per target forward, priced by the cost model from each profile given and made by the runtime on the same
15 ``mix`` calibration prompts x 64 tokens (greedy, eager) (benchmarks.md: "Tokens per target forward").

Usage: python benchmarks/tokens_per_forward.py PROFILE [PROFILE ...] [--no-runtime]
"""
from __future__ import annotations

import sys

from spectune.config import DecodeConfig
from spectune.profile import load_profile
from spectune.tune import CostModel

PAIR, TARGET = ("draft-s", "smollm2-135m"), ("smollm2-135m",)
CONFIGS = [(PAIR, (2, 1), "model", "fixed"), (PAIR, (3, 1), "model", "fixed"), (PAIR, (4, 1), "model", "fixed"),
           (PAIR, (4, 1), "model", "confidence:0.4"), (PAIR, (4, 1), "model", "heuristic"),
           (TARGET, (8,), "ngram:1,3", "fixed"), (PAIR, (3, 1), "ngram+model:1,3,8", "fixed"),
           (PAIR, (4, 1), "ngram+model:1,3,8", "confidence:0.4"), (PAIR, (2, 1), "ngram+model:2,4,8", "fixed")]
NTOK = 64


def configs() -> list[DecodeConfig]:
    return [DecodeConfig(models=m, method="sd", gamma=g, proposer=p, policy=pol, max_new_tokens=NTOK)
            for m, g, p, pol in CONFIGS]


def name(c: DecodeConfig) -> str:
    return f"{','.join(c.models):22s} g={c.gamma} {c.proposer:18s} {c.policy:15s}"


def priced(path: str) -> list[float]:
    """Tokens per target forward of each config, as the profile at ``path`` prices them."""
    cm = CostModel(load_profile(path, check_hardware=False), workload=None, max_new_tokens=NTOK)
    return [cm.predict(c).tokens_per_round for c in configs()]


def made(n_prompts: int = 15) -> list[float]:
    """Tokens per target forward of each config, made by the runtime (the prompt's forward aside)."""
    from spectune import api
    from spectune.models import load_models
    from spectune.workloads import load_workload

    models = load_models(list(PAIR))
    prompts = list(load_workload("mix").calibration[:n_prompts])
    out = []
    for c in configs():
        res = api.generate_batch(models if len(c.models) == 2 else models[1:], prompts, c, batch_size=1,
                                 ignore_eos=True, runtime="eager")
        target = next(m for m in res.stats.models if m.name == "smollm2-135m")
        out.append(res.stats.output_tokens / (target.forward_calls - len(prompts)))
    return out


def main(argv: list[str]) -> None:
    paths = [a for a in argv if not a.startswith("--")]
    for path in paths:
        label = path.rstrip("/").rsplit("/", 1)[-1][:28]
        for c, t in zip(configs(), priced(path)):
            print(f"priced {label:28s} {name(c)} tpr={t:.3f}", flush=True)
    if "--no-runtime" not in argv:
        for c, t in zip(configs(), made()):
            print(f"runtime {'':28s} {name(c)} tpr={t:.3f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
