"""Does a probe timed before and after an engine drive track the drive's speed on this host? llama-server serving the
target alone at b = 1; probes: a one-thread bf16 matmul loop, a 128 MB memcpy loop, a 16-token request to the engine.

Usage: python canary_exp.py DRIVES   (prints canary-llamacpp-b1.txt)
"""
import json
import os
import subprocess
import sys
import time
import urllib.request

import numpy as np
import torch

PORT = 8791
PROMPTS = ["def fibonacci(n):", "SELECT name, age FROM users WHERE", "The quick brown fox", "import numpy as np\n"]
A = torch.randn(384, 384, dtype=torch.bfloat16)
BIG = np.ones(32 * 2**20, dtype=np.float32)
DST = np.empty_like(BIG)


def post(prompt, n=48):
    req = urllib.request.Request(f"http://127.0.0.1:{PORT}/completion", json.dumps(
        {"prompt": prompt, "n_predict": n, "temperature": 0, "ignore_eos": True, "cache_prompt": False}).encode(),
        {"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req).read())


def loop(fn, sec=0.3):
    t0, n = time.perf_counter(), 0
    while time.perf_counter() - t0 < sec:
        fn()
        n += 1
    return n / (time.perf_counter() - t0)


def probes():
    return (loop(lambda: A @ A), loop(lambda: np.copyto(DST, BIG)),
            post("Hello", 16)["timings"]["predicted_per_second"])


def main(drives):
    torch.set_num_threads(1)
    srv = subprocess.Popen([os.path.expanduser("~/.cache/spectune-engines/llamacpp-11434/bin/llama-server"),
                            "-m", os.path.expanduser("~/.cache/spectune/models/smollm2-135m/spectune-bf16.gguf"),
                            "--port", str(PORT), "-t", "2", "-np", "8", "-c", "16384", "--no-webui"],
                           stdout=open("srv.log", "w"), stderr=subprocess.STDOUT)
    for _ in range(120):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health").read()
            break
        except Exception:
            time.sleep(1)
    post("warm up", 8)
    rows = []
    for i in range(drives):
        before = probes()
        t0, toks = time.perf_counter(), 0
        for p in PROMPTS:
            toks += post(p)["timings"]["predicted_n"]
        drive = toks / (time.perf_counter() - t0)
        after = probes()
        rows.append((drive, *before, *after))
        print(f"{i:2d} drive {drive:6.1f} | mm {before[0]:6.0f} {after[0]:6.0f} | mem {before[1]:5.1f} {after[1]:5.1f} "
              f"| eng {before[2]:6.1f} {after[2]:6.1f}", flush=True)
    srv.terminate()
    srv.wait()
    r = np.array(rows)
    d = r[:, 0]
    for name, j in (("matmul", 1), ("memcpy", 2), ("engine16", 3)):
        both = (r[:, j] + r[:, j + 3]) / 2
        norm = d / both * both.mean()
        print(f"{name}: corr {np.corrcoef(d, both)[0, 1]:+.2f}; drive spread (max/min) {d.max() / d.min():.2f} -> "
              f"normalised {norm.max() / norm.min():.2f}; CV {d.std() / d.mean():.3f} -> "
              f"{norm.std() / norm.mean():.3f}")


if __name__ == "__main__":
    main(int(sys.argv[1]))
