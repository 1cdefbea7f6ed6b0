"""How much can any draft-length policy gain over the best fixed gamma here? The cost model (model drafts walking
r's recorded path, path_drafts) prices sd draft-s -> smollm2-135m on mix at batch 1, 32-token requests, for every
fixed gamma, the heuristic, confidence thresholds -- and an *oracle* policy that knows where each draft leaves r's
path: its q is replaced by 1 where this and the next drafted token are on the path and 0 where not, so
``confidence:0.5`` stops after the last token that will be accepted (it still drafts one token where none will
be). Also how well the draft's own q separates accepted from rejected tokens on the path (ROC AUC).
Usage: python oracle.py PROFILE [WORKLOAD] [PROPOSER]"""
import sys

import numpy as np

from spectune.config import DecodeConfig
from spectune.profile import load_profile
from spectune.tune.cost import CostModel

prof = load_profile(sys.argv[1])
wl = sys.argv[2] if len(sys.argv) > 2 else "mix"
prop = sys.argv[3] if len(sys.argv) > 3 else "model"
PAIR = ("draft-s", "smollm2-135m")


def cost_model():
    return CostModel(prof, workload=None if wl == "mix" else wl, max_new_tokens=32)


def price(cm, g, pol):
    c = DecodeConfig(models=PAIR, method="sd", gamma=(g, 1), proposer=prop, policy=pol, max_new_tokens=32)
    p = cm.predict(c)
    return p.speedup_vs_target, p.tokens_per_round


cm = cost_model()
rows = [(f"fixed g={g}", *price(cm, g, "fixed")) for g in range(1, 9)]
rows += [(f"heuristic g0={g}", *price(cm, g, "heuristic")) for g in (2, 4)]
rows += [(f"confidence:{t} g<={g}", *price(cm, g, f"confidence:{t}")) for g in (4, 8) for t in (0.2, 0.4, 0.6, 0.8)]
# the draft's q against acceptance on the path: ROC AUC of q for "this drafted token is r's"
along, paths = cm.path_draft_table()["draft-s"], cm.path_table()
q = np.concatenate([along[k][1][paths[k][1]:] for k in along])
hit = np.concatenate([along[k][0][paths[k][1]:] == np.asarray(paths[k][0][paths[k][1]:]) for k in along])
order = np.argsort(q)
ranks = np.empty(len(q))
ranks[order] = np.arange(1, len(q) + 1)
auc = (ranks[hit].sum() - hit.sum() * (hit.sum() + 1) / 2) / (hit.sum() * (~hit).sum())
# the oracle: q = 1 where the next token on the path is the draft's, else 0
oracle = cost_model()
table = oracle.path_draft_table()
for k, (tok, qq) in table["draft-s"].items():
    on = (tok == np.asarray(paths[k][0])).astype(float)
    table["draft-s"][k] = (tok, on * np.append(on[1:], 0.0))  # stop after an off-path token or before one
rows += [(f"oracle g<={g}", *price(oracle, g, "confidence:0.5")) for g in (4, 8)]
best_fixed = max(r[1] for r in rows if r[0].startswith("fixed"))
print(f"{prof.path} workload {wl} proposer {prop}: P(draft token = r's) {hit.mean():.3f}, AUC of q {auc:.3f}")
for name, x, tpr in rows:
    print(f"{name:24s} x target alone {x:.3f}  x best fixed {x / best_fixed:.3f}  tokens/round {tpr:.2f}")
