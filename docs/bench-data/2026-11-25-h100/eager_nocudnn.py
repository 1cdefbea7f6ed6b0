"""Eager L(b, k) on the H100 with cuDNN's SDPA backend off (.gpu/c7.py as run on 2026-11-25, tidied for ruff):
random weights, prefill 256 tokens per row, 9 forwards of k new tokens (each rolled back, so every forward's cache
is one slot longer, as in decoding), median of the last 7. L: the runner's own timing; wall: with the host work."""
import json
import statistics
import sys
import time

import torch

sys.path.insert(0, "examples")
from runtime_compare import random_models  # noqa: E402

from spectune.decoding.batch_cache import BatchedRunner  # noqa: E402

torch.backends.cuda.enable_cudnn_sdp(False)
res = []
for lm in random_models(["draft-s", "draft-m", "smollm2-135m"], "auto", "cuda"):
    for b in (1, 8, 32):
        run = BatchedRunner(lm.model, b, "cuda")
        run.forward({r: list(range(10, 266)) for r in range(b)})
        for k in (1, 2, 4, 8, 16):
            ts = []
            for _ in range(9):
                torch.cuda.synchronize()
                s0, t0 = run.seconds, time.perf_counter()
                run.forward({r: [5] * k for r in range(b)})
                ts.append((run.seconds - s0, time.perf_counter() - t0))
                for r in range(b):
                    run.rollback(r, 256)
            L, W = (1e3 * statistics.median(x[i] for x in ts[2:]) for i in (0, 1))
            res.append(dict(model=lm.name, b=b, k=k, L_ms=L, wall_ms=W))
            print(lm.name, b, k, f"{L:.2f} {W:.2f}", flush=True)
json.dump(res, open("/tmp/c7.json", "w"))
