"""Measured mean forward time per (model, k) in a run's rows vs the profile's L at the priced context."""

import json
import sys
from collections import defaultdict
import pandas as pd
from spectune.profile import load_profile
from spectune.tune.cost import CostModel

run, wl, mnt = sys.argv[1], sys.argv[2], int(sys.argv[3])
prof = load_profile(f"{run}/profile") if len(sys.argv) < 5 else load_profile(sys.argv[4])
cm = CostModel(prof, wl, max_new_tokens=mnt)
rows = pd.read_csv(f"{run}/rows.csv")
rows = rows[(rows.kind == "spectune") & (rows.batch_size == 1)]
acc = defaultdict(lambda: [0, 0.0])
for _, r in rows.iterrows():
    for m, d in json.loads(r.calls_by_k).items():
        for k, (n, s) in d.items():
            if int(k) < 50:
                acc[(m, int(k))][0] += n
                acc[(m, int(k))][1] += s
print("ctx", cm.ctx)
for (m, k), (n, s) in sorted(acc.items()):
    L = cm.L(m, 1, k)
    print(
        f"{m:14s} k={k}: n={n:6d} measured {1e3 * s / n:6.2f} ms  profile {1e3 * L:6.2f} ms  meas/prof {s / n / L:.3f}"
    )
