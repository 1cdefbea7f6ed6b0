"""Forward times inside real decodes (4 held-out code prompts x 64 tokens) vs the same forwards timed alone at the
mean physical context; gc on / off. Physical slots logged per forward."""

import gc
import time
import statistics
from collections import defaultdict
from spectune.models.loading import load_model
from spectune.decoder import build_decoder, encode_prompt
from spectune.workloads.registry import load_workload
from spectune.decoding import batch_cache as BC

draft, tgt = load_model("draft-s"), load_model("smollm2-135m")
prompts = [encode_prompt(tgt.tokenizer, p) for p in load_workload("code").heldout[:4]]
log = defaultdict(list)  # (model id, k) -> [(seconds, physical)]
orig = BC.BatchedRunner.forward


def fwd(self, feeds):
    k = max(len(v) for v in feeds.values())
    p = self.physical
    s0 = self.seconds
    out = orig(self, feeds)
    if all(self.n[r] > len(v) for r, v in feeds.items()):
        log[(self.model.config.num_hidden_layers, k)].append((self.seconds - s0, p))
    return out


BC.BatchedRunner.forward = fwd
configs = [("standard", [tgt], None, None), ("sd", [draft, tgt], [3, 1], None), ("sd", [tgt], [8], "ngram:1,3")]
for rep in range(2):
    for gc_on in (True, False):
        for method, ms, gamma, prop in configs:
            log.clear()
            gc.enable() if gc_on else gc.disable()
            dec = build_decoder(ms, method=method, gamma=gamma, proposer=prop, ignore_eos=True)
            t0 = time.perf_counter()
            for p in prompts:
                dec.generate(p, 64, 0)
            wall = time.perf_counter() - t0
            gc.enable()
            parts = []
            for (layers, k), v in sorted(log.items()):
                if len(v) < 10:
                    continue
                parts.append(
                    f"L{layers} k={k}: {1e3 * statistics.mean(t for t, _ in v):.2f} ms "
                    f"@ {statistics.mean(p for _, p in v):.0f} slots (n={len(v)})"
                )
            print(
                f"rep {rep} gc={'on ' if gc_on else 'off'} {method} {prop or gamma}: wall {wall:.2f} s | "
                + "; ".join(parts),
                flush=True,
            )
