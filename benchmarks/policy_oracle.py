"""How much could any draft-length policy gain over the best fixed gamma, as priced? (benchmarks.md: "How much could
any draft-length policy gain")

The cost model (model drafts walking r's recorded path) prices sd draft-s -> smollm2-135m on a workload at batch 1,
32-token requests, for every fixed gamma, the heuristic, confidence thresholds -- and an *oracle* policy that knows
where each draft leaves r's path: its q is 1 where this and the next drafted token are on the path and 0 where
not, so ``confidence:0.5`` stops after the last token that will be accepted (it still drafts one token where none
will be). Also how well the draft's own q separates accepted from rejected tokens on the path (ROC AUC).

Usage: python benchmarks/policy_oracle.py PROFILE [WORKLOAD] [PROPOSER]
"""
from __future__ import annotations

import sys

import numpy as np

from spectune.config import DecodeConfig
from spectune.profile import load_profile
from spectune.tune import CostModel

PAIR = ("draft-s", "smollm2-135m")


def price(cm: CostModel, g: int, policy: str, proposer: str) -> tuple[float, float]:
    """(x the target alone, tokens a round) of sd at gamma ``g`` under ``policy``."""
    c = DecodeConfig(models=PAIR, method="sd", gamma=(g, 1), proposer=proposer, policy=policy, max_new_tokens=32)
    p = cm.predict(c)
    return p.speedup_vs_target, p.tokens_per_round


def q_auc(cm: CostModel) -> tuple[float, float]:
    """(P(drafted token = r's), ROC AUC of the draft's q for it) over r's recorded paths."""
    along, paths = cm.calibrated.path_draft_table()["draft-s"], cm.calibrated.path_table()
    q = np.concatenate([along[k][1][paths[k][1]:] for k in along])
    hit = np.concatenate([along[k][0][paths[k][1]:] == np.asarray(paths[k][0][paths[k][1]:]) for k in along])
    ranks = np.empty(len(q))
    ranks[np.argsort(q)] = np.arange(1, len(q) + 1)
    return float(hit.mean()), float((ranks[hit].sum() - hit.sum() * (hit.sum() + 1) / 2) / (hit.sum() * (~hit).sum()))


def oracle_model(prof, workload: str | None) -> CostModel:
    """A cost model whose draft-s q is the oracle's (its path-draft table rewritten in place before any price)."""
    cm = CostModel(prof, workload=workload, max_new_tokens=32)
    table, paths = cm.calibrated.path_draft_table(), cm.calibrated.path_table()
    for k, (tok, _) in table["draft-s"].items():
        on = (tok == np.asarray(paths[k][0])).astype(float)
        table["draft-s"][k] = (tok, on * np.append(on[1:], 0.0))  # stop after an off-path token or before one
    return cm


def rows(prof, workload: str | None, proposer: str) -> list[tuple[str, float, float]]:
    """(policy, x target alone, tokens a round) for every policy priced."""
    cm = CostModel(prof, workload=workload, max_new_tokens=32)
    out = [(f"fixed g={g}", *price(cm, g, "fixed", proposer)) for g in range(1, 9)]
    out += [(f"heuristic g0={g}", *price(cm, g, "heuristic", proposer)) for g in (2, 4)]
    out += [(f"confidence:{t} g<={g}", *price(cm, g, f"confidence:{t}", proposer))
            for g in (4, 8) for t in (0.2, 0.4, 0.6, 0.8)]
    oracle = oracle_model(prof, workload)
    return out + [(f"oracle g<={g}", *price(oracle, g, "confidence:0.5", proposer)) for g in (4, 8)]


def main(argv: list[str]) -> None:
    prof = load_profile(argv[0], check_hardware=False)
    wl = argv[1] if len(argv) > 1 else "mix"
    proposer = argv[2] if len(argv) > 2 else "model"
    workload = None if wl == "mix" else wl
    hit, auc = q_auc(CostModel(prof, workload=workload, max_new_tokens=32))
    table = rows(prof, workload, proposer)
    best = max(x for name, x, _ in table if name.startswith("fixed"))
    print(f"{prof.path} workload {wl} proposer {proposer}: P(draft token = r's) {hit:.3f}, AUC of q {auc:.3f}")
    for name, x, tpr in table:
        print(f"{name:24s} x target alone {x:.3f}  x best fixed {x / best:.3f}  tokens/round {tpr:.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
