"""Calibration-style forward (no mask, no position_ids) vs runtime-style (4-D mask, position_ids), interleaved."""

import time
import statistics
import random
import torch
import os
from spectune.models.loading import load_model
from spectune.decoding.hf_compat import forward, cache_of
from transformers import DynamicCache

torch.manual_seed(0)
lm = load_model("smollm2-135m")
m = lm.model
dt = next(m.parameters()).dtype
print("dtype", dt, "threads", torch.get_num_threads(), "load", os.getloadavg())


def prefill(b, ctx):
    ids = torch.randint(0, m.config.vocab_size, (1, ctx))
    c = cache_of(forward(m, DynamicCache(config=m.config), input_ids=ids, use_cache=True))
    if b > 1:
        c.batch_repeat_interleave(b)
    return c


res = {}
with torch.inference_mode():
    for b in (1, 4):
        ctx = 256
        c = prefill(b, ctx)
        for k in (1, 2, 4, 8):
            ids = torch.randint(0, m.config.vocab_size, (b, k))
            cp = torch.arange(ctx, ctx + k)
            pos = cp[None].expand(b, k)
            ok = torch.cat([torch.ones(k, ctx, dtype=torch.bool), torch.tril(torch.ones(k, k, dtype=torch.bool))], -1)
            mask = torch.zeros(b, 1, k, ctx + k, dtype=dt).masked_fill_(~ok[None, None], torch.finfo(dt).min)

            def un():
                forward(m, c, input_ids=ids, cache_position=cp, use_cache=True)

            def ma():
                forward(m, c, input_ids=ids, position_ids=pos, attention_mask=mask, cache_position=cp, use_cache=True)

            ts = {"un": [], "ma": []}
            for r in range(12):
                for name, fn in random.sample([("un", un), ("ma", ma)], 2):
                    t0 = time.perf_counter()
                    fn()
                    t = time.perf_counter() - t0
                    c.crop(-k)
                    if r >= 2:
                        ts[name].append(t)
            mu, mm = statistics.median(ts["un"]), statistics.median(ts["ma"])
            print(
                f"b={b} ctx={ctx} k={k}: unmasked {mu * 1e3:.1f} ms  masked {mm * 1e3:.1f} ms  "
                f"masked/unmasked {mm / mu:.2f}",
                flush=True,
            )
