"""Regret of each cell's pick under four ways of levelling later sets' rows (offline, from a campaign's CSVs)."""
import sys
import numpy as np
import pandas as pd
from spectune.bench import engine_runs as er
from spectune.engines import set_of
from spectune.tune.recommend import vs_alone

D = sys.argv[1]


def lev(mode):
    def levelled(rows):
        def key(r):
            return r["backend"], r["workload"], int(r["batch_size"])
        alone = {}
        for r in rows:
            if r["label"] == "target alone":
                alone.setdefault(key(r), {}).setdefault(set_of(r), {}).setdefault(int(r["repeat"]), []).append(
                    float(r["decode_goodput"]))
        out = []
        for r in rows:
            sets, s, g = alone.get(key(r), {}), set_of(r), float(r["decode_goodput"])
            first = min(sets, default=s)
            if s != first and r["label"] == "target alone":
                continue
            if s != first and s in sets and mode != "raw":
                a, b = sets[first], sets[s]
                if mode == "round":
                    rep = int(r["repeat"])
                    if rep in b and rep in a:
                        g *= a[rep][-1] / b[rep][-1]
                elif mode == "set-fastest":
                    g *= max(max(v) for v in a.values()) / max(max(v) for v in b.values())
                elif mode == "set-median":
                    g *= np.median([a[k][-1] / b[k][-1] for k in b if k in a])
            out.append((r, g))
        return out
    return levelled


adv = pd.read_csv(f"{D}/engine-advice.csv")
grid = pd.read_csv(f"{D}/engine-rows.csv").to_dict("records")
conf = pd.read_csv(f"{D}/engine-confirm.csv").to_dict("records")
for mode in ["round", "set-fastest", "set-median", "raw"]:
    er.levelled = lev(mode)
    reps, again = er.repeat_runs(grid), er.repeat_runs(conf)
    line = []
    for w, b, pick in adv[["workload", "batch_size", "pick"]].itertuples(index=False):
        cell = {k[1]: v for k, v in reps.items() if (k[0], k[2]) == (w, b)}
        best = max(cell, key=lambda lab: max(cell[lab]))
        med = max(vs_alone(v, cell[pick]) for v in cell.values())
        mine = again.get((w, pick, b))
        fr = max(vs_alone(v, mine) for k, v in again.items() if (k[0], k[2]) == (w, b))
        line.append(f"{w}{b}: {max(cell[best]) / max(cell[pick]):.3f}/{med:.3f}/{fr:.3f}")
    print(f"{mode:12s}", "  ".join(line))
