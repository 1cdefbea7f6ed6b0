"""gate_exp.py's rows: per start, the statistics a campaign could take of its first 3 drives, and how far they move
between rounds, each artifact alone and over the target alone of the same round.

  plain3   the fastest of the first 3 drives (what calibrate --engine and the grid take)
  median3  their median
  gated3   the fastest of the first 3 drives whose canaries (before, after) ran within SLOW of the start's fastest
           canary so far (more drives taken while they did not; at most all of them)
  norm3    the fastest of the first 3 drives, each scaled by the start's fastest canary over its own (mean of
           before and after)
  all_max  the fastest of all the start's drives

Usage: python gate_an.py ROWS_CSV [SLOW]   (default SLOW 0.15)
"""
import sys

import numpy as np
import pandas as pd


def per_start(g, slow_limit):
    g = g.sort_values("i")
    best, acc, tried = 0.0, [], 0
    for _, x in g.iterrows():
        best = max(best, x.c0, x.c1)
        tried += 1
        if 1 - min(x.c0, x.c1) / best <= slow_limit:
            acc.append(x.g)
        if len(acc) == 3:
            break
    cbest = max(g.c0.max(), g.c1.max())
    norm = g.g * cbest / ((g.c0 + g.c1) / 2)
    return {"plain3": g.g.iloc[:3].max(), "median3": g.g.iloc[:3].median(),
            "gated3": max(acc) if acc else g.g.iloc[:tried].max(), "tried": tried, "accepted": len(acc),
            "norm3": norm.iloc[:3].max(), "all_max": g.g.max(), "canary_best": cbest}


def main(path, slow_limit):
    d = pd.read_csv(path, names=["round", "label", "i", "t", "g", "c0", "c1"])
    res = pd.DataFrame([{"round": r, "label": lab, **per_start(g, slow_limit)}
                        for (r, lab), g in d.groupby(["round", "label"], sort=False)])
    print(res.round(2).to_string(index=False))
    for stat in ("plain3", "median3", "gated3", "norm3", "all_max"):
        p = res.pivot(index="round", columns="label", values=stat)
        ratios = p.div(p["target alone"], axis=0).drop(columns="target alone")
        print(f"{stat:8s} round-to-round (max/min per artifact): "
              + ", ".join(f"{c} {p[c].max() / p[c].min():.3f}" for c in p.columns)
              + " | vs alone by round: " + "; ".join(f"{c} " + "/".join(f"{v:.3f}" for v in ratios[c])
                                                    for c in ratios))
    print(f"all drives: corr(drive, canary) {np.corrcoef(d.g, (d.c0 + d.c1) / 2)[0, 1]:+.2f}")


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 0.15)
