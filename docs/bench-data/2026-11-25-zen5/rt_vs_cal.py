"""Same model, same context: the runtime's BatchedRunner.forward vs calibration's timed step, interleaved;
then forwards timed inside a real decode loop (target alone and sd) at about that context."""

import time
import statistics
import random
import sys
import torch
from spectune.models.loading import load_model
from spectune.decoding.batch_cache import BatchedRunner
from spectune.calibrate.latency import _runtime_feed, _prefill
from spectune.decoding.hf_compat import forward

torch.manual_seed(0)
names = sys.argv[1:] or ["smollm2-135m"]
for name in names:
    m = load_model(name).model
    ctx = 94
    gen = torch.Generator().manual_seed(0)
    cache = _prefill(m, 1, ctx, torch.device("cpu"), gen)
    run = BatchedRunner(m, 1)
    run.forward({0: torch.randint(0, 1000, (ctx,)).tolist()})
    res = {}
    with torch.inference_mode():
        for k in (1, 2, 4, 8):
            ids = torch.randint(0, 1000, (1, k))
            feed = _runtime_feed(m, 1, ctx, k, torch.device("cpu"))

            def cal():
                t0 = time.perf_counter()
                forward(m, cache, input_ids=ids, use_cache=True, **feed).logits.float()
                t = time.perf_counter() - t0
                cache.crop(-k)
                return t

            def rt():
                s0 = run.seconds
                run.forward({0: ids[0].tolist()})
                t = run.seconds - s0
                run.cache.crop(-k)
                run.valid = run.valid[:, :-k]
                run.n[0] -= k
                return t

            ts = {"cal": [], "rt": []}
            for r in range(25):
                for nm, fn in random.sample([("cal", cal), ("rt", rt)], 2):
                    t = fn()
                    if r >= 3:
                        ts[nm].append(t)
            a, b = statistics.median(ts["cal"]), statistics.median(ts["rt"])
            print(
                f"{name} k={k}: calibration {a * 1e3:.2f} ms  runtime {b * 1e3:.2f} ms  rt/cal {b / a:.3f}", flush=True
            )
