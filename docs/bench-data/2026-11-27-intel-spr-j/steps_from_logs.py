"""Usage: python steps_from_logs.py LOG_DIR (llama-server logs of one bench --engine run, -lv 4).

Per log (one llama-server start): its requests' decode time over their decode steps, beside the drafting statistics
of those steps (the speculative implementation's own counters), from llama-server's `print_timing` and
`statistics` lines. Two starts whose steps draft alike should take alike per step on an unchanged host."""
import glob
import re
import sys

import numpy as np

STATS = re.compile(r"statistics\s+([\w-]+): #calls\(b,g,a\) =\s+(\d+)\s+(\d+)\s+(\d+), #gen drafts =\s+(\d+), "
                   r"#acc drafts =\s+(\d+), #gen tokens =\s+(\d+), #acc tokens =\s+(\d+)")
EVAL = re.compile(r"=\s+([\d.]+) ms /\s+(\d+) tokens")


def requests(lines):
    prev, out = {}, []
    for i, line in enumerate(lines):
        m = STATS.search(line)
        if not m:
            continue
        kind, v = m.group(1), [int(x) for x in m.groups()[1:]]
        d = [a - b for a, b in zip(v, prev[kind])] if kind in prev else v
        prev[kind] = v
        ev = [x for x in lines[max(0, i - 9):i] if " eval time" in x and "prompt" not in x]
        if ev:
            ms, n = EVAL.search(ev[-1]).groups()
            if int(n) >= 40:  # a measured request (not the 4-token warm-up)
                out.append((kind, float(ms), int(n), d[3], d[5], d[6]))
    return out


for f in sorted(glob.glob(sys.argv[1] + "/*.log")):
    text = open(f).read()
    reqs = requests(text.splitlines())
    if not reqs:
        continue
    batched = len(set(re.findall(r"print_timing: id\s+(\d+)", text))) > 1
    ms, n, drafts, draft_tokens, accepted = np.array([r[1:] for r in reqs], float).sum(0)
    steps = n - len(reqs) - accepted
    kinds = "+".join(sorted({r[0] for r in reqs}))
    print(f"{'b8' if batched else 'b1'} {kinds:26s} req {len(reqs):3d} draft/step {drafts / steps:.2f} "
          f"fed-1 {draft_tokens / steps:.2f} acc/step {accepted / steps:.2f} ms/step {ms / steps:.1f} "
          f"{f.rsplit('/', 1)[-1]}")
