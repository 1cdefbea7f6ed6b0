"""How far the cost model's default simulation (sim_tokens = 1024, rounded to whole passes over the calibration
prompts) is from a long one (8192) on the bundled Zen 5 profile: batch-1 goodput of sd / naive-cos / cos with the
draft, the lookups and ngram+model under each policy, mix, 64-token requests (16:50, after the visit change)."""
import itertools

import numpy as np

from spectune.config import DecodeConfig
from spectune.profile import load_profile
from spectune.tune.cost import CostModel

prof = load_profile("/work/main/profiles/draft-s+draft-m+smollm2-135m--cpu-amd-zen5-x2-bf16")
short, long = (CostModel(prof, workload=None, sim_tokens=n, max_new_tokens=64) for n in (1024, 8192))
PAIR = ("draft-s", "smollm2-135m")
configs = [DecodeConfig(models=PAIR, method=m, gamma=(g, g2), policy=pol, max_new_tokens=64)
           for m, g, g2, pol in itertools.product(("sd", "naive-cos", "cos"), range(1, 9), (1, 2),
                                                  ("fixed", "heuristic", "confidence:0.4"))
           if not (m != "cos" and g2 == 2)]
configs += [DecodeConfig(models=PAIR, method="sd", gamma=(g, 1), proposer=p, policy=pol, max_new_tokens=64)
            for g in range(1, 9) for p in ("ngram+model:1,3,8", "ngram+model:2,4,8")
            for pol in ("fixed", "heuristic", "confidence:0.4")]
configs += [DecodeConfig(models=PAIR[1:], method="sd", gamma=(g,), proposer=p, max_new_tokens=64)
            for g in range(1, 9) for p in ("ngram:1,2", "ngram:1,3", "ngram:2,4")]
err = np.array([abs(short.predict(c).goodput / long.predict(c).goodput - 1) for c in configs])
print(f"{len(configs)} configurations: |1024-token / 8192-token - 1| mean {err.mean():.2%}, "
      f"90th percentile {np.quantile(err, 0.9):.2%}, max {err.max():.2%}")
