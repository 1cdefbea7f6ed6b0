"""The verifier's forward time per fed length k: the runtime's own timings (every bench row's calls_by_k, decode
forwards with k <= 12, pooled over the runs given) against a profile's latency table at batch 1, context CTX,
as the cost model reads it. Usage: python perk.py PROFILE CTX BENCH_DIR [BENCH_DIR ...]"""
import collections
import json
import sys

import pandas as pd

from spectune.profile import load_profile

prof = load_profile(sys.argv[1])
ctx = float(sys.argv[2])
acc = collections.defaultdict(lambda: [0, 0.0])
for d in sys.argv[3:]:
    rows = pd.read_csv(f"{d}/rows.csv")
    for row in rows[rows["batch_size"] == 1].itertuples():
        for m, by_k in json.loads(row.calls_by_k).items():
            for k, (n, t) in by_k.items():
                if int(k) <= 12:
                    acc[(m, int(k))][0] += n
                    acc[(m, int(k))][1] += t
for (m, k), (n, t) in sorted(acc.items()):
    if m != "smollm2-135m" or n < 20:
        continue
    print(f"{m} k={k:2d} calls {n:6d}  runtime {t / n * 1000:6.2f} ms  profile {prof.L(m, 1, k, ctx) * 1000:6.2f} ms")
