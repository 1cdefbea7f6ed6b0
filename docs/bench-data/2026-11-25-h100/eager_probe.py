"""Why did the eager runner's forward cost ~40 ms on the H100 whatever the model's size? (.gpu/c5.py and c6.py as
run on 2026-11-25, tidied for ruff; c5 ran it as torch defaults it, then profiled one draft-s forward.)

Four variants of the attention mask, each timed with a fresh runner (prefill 256 tokens, then 15 forwards of k new
tokens, each rolled back, so every forward's cache is one slot longer). NOCUDNN=1 turns cuDNN's SDPA backend off.
"""
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, "examples")
from runtime_compare import random_models  # noqa: E402

from spectune.decoding import batch_cache as BC  # noqa: E402
from spectune.decoding.batch_cache import BatchedRunner  # noqa: E402

DEV = "cuda"
if os.environ.get("NOCUDNN"):
    torch.backends.cuda.enable_cudnn_sdp(False)


def timed(run, k, n=15):
    ts = []
    for _ in range(n):
        p = run.n[0]
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        run.forward({r: [5] * k for r in range(run.rows)})
        ts.append(time.perf_counter() - t0)
        for r in range(run.rows):
            run.rollback(r, p)
    return 1e3 * statistics.median(ts[3:])


def variants(lm, b, k):
    out, orig = {}, BatchedRunner._mask
    masks = [("float4d", orig),
             ("bool4d", lambda self, lens, k: (BC.feed_mask(self.valid, lens, k, torch.float32) == 0).to(self.device)),
             ("none", lambda self, lens, k: None),
             ("float4d-on-dev", lambda self, lens, k: orig(self, lens, k).contiguous())]
    for name, mk in masks:
        BatchedRunner._mask = mk
        run = BatchedRunner(lm.model, b, DEV)
        run.forward({r: list(range(10, 266)) for r in range(b)})
        out[name] = timed(run, k)
    BatchedRunner._mask = orig
    return out


for lm in random_models(["draft-s", "smollm2-135m"], "auto", DEV):
    for b, k in [(1, 1), (1, 8), (8, 1)]:
        print(lm.name, f"b={b} k={k}", {n: round(v, 2) for n, v in variants(lm, b, k).items()}, flush=True)
