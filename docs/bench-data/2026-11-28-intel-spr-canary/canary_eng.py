"""Engine canary: a 16-token b = 1 request before and after each drive of the target alone, started by spectune's
engine layer; does it track the drive's speed? With ``probes``, a 0.3 s bf16 matmul probe beside it (p1: one thread
pinned to CPU 0, vLLM's worker CPU; p2: two threads on both CPUs).

Usage: python canary_eng.py vllm|llamacpp BATCH DRIVES [probes]
"""
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

from spectune.decoder import encode_workload
from spectune.engines import EngineSettings, engine_class, open_engine
from spectune.models import load_tokenizer

EXE = {"vllm": "~/.cache/spectune-engines/vllm-0.32.0/bin/vllm",
       "llamacpp": "~/.cache/spectune-engines/llamacpp-11434/bin/llama-server"}
A = torch.randn(576, 576, dtype=torch.bfloat16)
X = torch.randn(8, 576, dtype=torch.bfloat16)


def probe(threads, cpus, sec=0.3):
    old = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    torch.set_num_threads(threads)
    t0, k = time.perf_counter(), 0
    while time.perf_counter() - t0 < sec:
        for _ in range(30):
            X @ A
        k += 1
    os.sched_setaffinity(0, old)
    return k / (time.perf_counter() - t0)


def main(name, b, n, probes):
    tok = load_tokenizer("smollm2-135m")
    prompts = encode_workload(tok, "mix", "heldout", n=8)
    s = EngineSettings(name, os.path.expanduser(EXE[name]), log_dir=Path("canary-logs"))
    both = (lambda: (probe(1, {0}), probe(2, {0, 1}))) if probes else (lambda: (1.0, 1.0))
    rows = []
    with open_engine(s, model=engine_class(name).model_file("smollm2-135m", s.executable), slots=8) as e:
        e.drive(prompts[:1], 1, 16)
        for i in range(n):
            p0 = both()
            c0 = 16 / e.complete(prompts[0], 16).seconds
            d = e.drive(prompts[:max(8, b)], b, 48)
            c1 = 16 / e.complete(prompts[0], 16).seconds
            p1 = both()
            g = d.tokens / d.wall_s
            rows.append((g, c0, c1, p0[0], p1[0], p0[1], p1[1]))
            print(f"{i:2d} {time.strftime('%H:%M:%S')} drive {g:6.1f} canary {c0:5.1f} {c1:5.1f} p1 {p0[0]:5.0f} "
                  f"{p1[0]:5.0f} p2 {p0[1]:5.0f} {p1[1]:5.0f}", flush=True)
    r = np.array(rows)
    d = r[:, 0]
    if probes:
        for nm, j in (("probe cpu0 1 thread", 3), ("probe 2 threads", 5)):
            c = (r[:, j] + r[:, j + 1]) / 2
            print(nm, f"corr {np.corrcoef(d, c)[0, 1]:+.2f}; normalised CV {(d / c).std() / (d / c).mean():.3f}")
    c = (r[:, 1] + r[:, 2]) / 2
    print(f"corr {np.corrcoef(d, c)[0, 1]:+.2f}; drive max/min {d.max() / d.min():.2f}, CV {d.std() / d.mean():.3f}; "
          f"normalised max/min {(d / c).max() / (d / c).min():.2f}, CV {(d / c).std() / (d / c).mean():.3f}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:] == ["probes"])
