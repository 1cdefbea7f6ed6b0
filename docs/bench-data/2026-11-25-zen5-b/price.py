"""The cost model's prices of sd / the lookup / ngram+model on one workload of a profile, and the simulated
per-proposer block counts (13:00, the bundled Zen 5 profile, state-drawn lookups: tpr 1.25 / 1.49 for the lookup /
ngram+model where the runtime made 1.47 / 1.82, diag.py). Usage: python price.py PROFILE [WORKLOAD]"""
import sys

from spectune.config import DecodeConfig
from spectune.profile import load_profile
from spectune.tune.cost import CostModel

prof = load_profile(sys.argv[1])
wl = sys.argv[2] if len(sys.argv) > 2 else "mix"
cm = CostModel(prof, workload=None if wl == "mix" else wl)
PAIR, TGT = ("draft-s", "smollm2-135m"), ("smollm2-135m",)
for models, g, prop, pol in [(TGT, (1,), "model", "fixed"), (PAIR, (2, 1), "model", "fixed"),
                             (PAIR, (3, 1), "model", "fixed"), (PAIR, (4, 1), "model", "confidence:0.4"),
                             (TGT, (8,), "ngram:1,3", "fixed"), (PAIR, (3, 1), "ngram+model:1,3,8", "fixed"),
                             (PAIR, (4, 1), "ngram+model:1,3,8", "confidence:0.4"),
                             (PAIR, (3, 1), "ngram+model:2,4,8", "fixed")]:
    c = DecodeConfig(models=models, method="standard" if prop == "model" and len(models) == 1 else "sd",
                     gamma=g, proposer=prop, policy=pol, max_new_tokens=32)
    p = cm.predict(c)
    print(f"{c.method:8s} {','.join(models):22s} g={c.gamma} {prop:18s} {pol:15s} "
          f"x_target={p.speedup_vs_target:.3f} tpr={p.tokens_per_round:.2f}")
    r = cm.simulate(c, rows=1, max_new_tokens=2000)
    for m in r.stats.models:
        if m.proposed_by_pos:
            print(f"    {m.name}: blocks {m.proposed_by_pos[0]}, accepted {m.accepted}")
