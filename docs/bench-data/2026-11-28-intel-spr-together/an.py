"""Spread of interleaved drives (ilv_exp.py's rows.csv): each arm's tok/s, the drives a busy idle server overlapped
(another server's process tree used >= 0.3 CPU s during it), and the ratio to the target alone of the same round:
single drives, and the fastest of consecutive blocks of 3 and 6 rounds (sd of the log: about a relative error).

Usage: python an.py ROWS.csv
"""
import csv
import math
import statistics as st
import sys

LABELS = ["alone", "draft2", "ngram3"]


def main(path):
    by = {}
    for r in csv.reader(open(path)):
        cpu = [float(x) for x in r[5:8]]
        other = sum(c for lab, c in zip(LABELS, cpu) if lab != r[1])
        by.setdefault(r[1], {})[int(r[0])] = (float(r[3]), other)
    n = len(by["alone"])
    for lab in LABELS:
        vs = [v for v, _ in by[lab].values()]
        print(lab, "n", len(vs), "min/med/max", round(min(vs)), round(st.median(vs)), round(max(vs)),
              "cv", round(st.stdev(vs) / st.mean(vs), 3), "overlapped", sum(o >= 0.3 for _, o in by[lab].values()))
    alone = {k: v for k, (v, _) in by["alone"].items()}
    for lab in LABELS[1:]:
        mine = {k: v for k, (v, _) in by[lab].items()}
        rs = [math.log(mine[i] / alone[i]) for i in range(n)]
        print(lab, "per-round ratio median", round(math.exp(st.median(rs)), 3), "sd(log) single",
              round(st.stdev(rs), 3))
        for m in (3, 6):
            blocks = [range(i, i + m) for i in range(0, n - m + 1, m)]
            rr = [math.log(max(mine[i] for i in b) / max(alone[i] for i in b)) for b in blocks]
            print(f"  fastest-of-{m} blocks sd(log)", round(st.stdev(rr), 3), [round(math.exp(x), 2) for x in rr])


if __name__ == "__main__":
    main(sys.argv[1])
