"""Ties in the engine's validation (docs/benchmarks.md, "Ties in the engine's validation"): every campaign's
``recommend --engine --validate`` rows replayed under two rules, judged on the campaign's held-out grid (and its
fresh rounds, where it ran them).

* ``measured best``: the validated best by median round ratio to the target alone, if above 1 (spectune's rule);
* ``ties to the target alone``: the same, but the target alone unless the best leads by more than the
  validation's resolution, exp(1.25 sd / sqrt(n) * max(1, E[max of N normals])) - 1 (sd: the cell's candidates' round
  log-ratios about their means, pooled; n rounds; N candidates): the "measured near-tie" note's bound.

Regret of a rule's pick: the grid's fastest repeat over the pick's (``fastest``); the best median round ratio over
the pick's, rounds side by side (``side by side``); the same on the fresh rounds (``fresh``). Only cells whose
pick under both rules ran in the grid count. Usage (from docs/bench-data): python DIR/tie-rule.py
"""
import glob
import math
import os
import statistics

import pandas as pd

KEY = ["repeat", "set"]


def emax(n):
    nd, h = statistics.NormalDist(), 0.01
    return h * sum(x * n * nd.pdf(x) * nd.cdf(x) ** (n - 1) for x in (-8 + i * h for i in range(1601)))


def by_round(d):
    key = [k for k in KEY if k in d]
    return d.pivot_table(index=key, columns="label", values="decode_goodput")


def side(d, label):
    """The best median round ratio (to each label, round by round) over ``label``'s."""
    p = by_round(d)
    return float(p.div(p[label], axis=0).median().max()) if label in p else math.nan


def picks(v):
    """{rule: pick} for one cell's validation rows, and the resolution."""
    p = by_round(v)
    r = p.drop(columns="target alone").div(p["target alone"], axis=0)
    logs = [c.dropna().map(math.log) for _, c in r.items()]
    n, dof = min(len(c) for c in logs), sum(len(c) - 1 for c in logs)
    sd = math.sqrt(sum(((c - c.mean()) ** 2).sum() for c in logs) / dof)
    known = math.expm1(1.25 * sd / math.sqrt(n) * max(1.0, emax(len(logs))))
    med = r.median()
    best = med.idxmax()
    return {"measured best": best if med[best] > 1 else "target alone",
            "ties to the target alone": best if med[best] > 1 + known else "target alone"}, med[best], known


def main():
    out = []
    for vf in sorted(glob.glob("*/engine-validation.csv") + glob.glob("*/*/engine-validation.csv")):
        d = os.path.dirname(vf)
        if not os.path.exists(f"{d}/engine-rows.csv"):
            continue
        val, grid = pd.read_csv(vf), pd.read_csv(f"{d}/engine-rows.csv")
        fresh = pd.read_csv(f"{d}/engine-confirm.csv") if os.path.exists(f"{d}/engine-confirm.csv") else None
        for (w, b), v in val.groupby(["workload", "batch_size"]):
            rules, lead, known = picks(v)
            g = grid[(grid.workload == w) & (grid.batch_size == b)]
            fastest = g.groupby("label").decode_goodput.max()
            if not set(rules.values()) <= set(fastest.index):
                continue
            f = None if fresh is None else fresh[(fresh.workload == w) & (fresh.batch_size == b)]
            for rule, pick in rules.items():
                ok = f is not None and pick in set(f.label)
                out.append({"run": d, "engine": val.backend.iloc[0], "cell": f"{w} b={b}", "rule": rule,
                            "pick": pick, "lead": lead, "resolves": known,
                            "fastest": fastest.max() / fastest[pick], "side by side": side(g, pick),
                            "fresh": side(f, pick) if ok else math.nan})
    df = pd.DataFrame(out)
    print(f"{df.run.nunique()} runs, {len(df) // 2} cells\n")
    for col in ("fastest", "side by side", "fresh"):
        t = df.groupby(["engine", "rule"])[col].agg(mean="mean", cells="count", within_1_05=lambda s: (s <= 1.05).sum())
        print(f"regret, {col}:\n{t.round(3).to_string()}\n")
    changed = df.pivot_table(index=["run", "cell"], columns="rule", values="side by side")
    changed = changed[changed.nunique(axis=1) > 1]
    print("cells the rules pick apart (side-by-side regret):\n" + changed.round(3).to_string())


if __name__ == "__main__":
    pd.set_option("display.width", 200)
    main()
