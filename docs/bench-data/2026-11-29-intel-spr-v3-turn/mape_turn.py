"""v3's engine profile priced against the same configurations measured three ways: the v3 grid (separate starts,
fastest of 3 repeats), the in-turn fresh rounds (fastest of the first 3, and of all 6); then the signed error by
batch size and kind. Usage: python mape_turn.py EP_DIR V3_DIR TURN_DIR (EP_DIR: an engine profile, e.g. v3's
re-fitted by benchmarks/reprice.py's ``refit`` with acc20's acceptance)."""
import sys

import numpy as np
import pandas as pd

from spectune.bench.engine_advice import advice_table
from spectune.bench.engine_runs import label, measured_configs
from spectune.profile import load_profile
from spectune.tune.cost import CostModel

MODELS, MNT = ["draft-s", "smollm2-135m"], 48


def main(ep: str, v3: str, turn: str) -> None:
    tr = pd.concat([pd.read_csv(f"{turn}/{w}/engine-confirm.csv", keep_default_na=False)
                    for w in ("mix", "code", "edit")])
    grid = pd.read_csv(f"{v3}/engine-rows.csv", keep_default_na=False)
    keys = set(zip(tr.workload, tr.label, tr.batch_size))
    grid = grid[(grid.backend == "vllm") & np.array([k in keys for k in zip(grid.workload, grid.label,
                                                                            grid.batch_size)])]
    adv = pd.read_csv(f"{v3}/engine-advice.csv")
    configs = measured_configs(tr, MODELS, MNT)
    by = {(label(c), c.batch_size): c for c in configs}
    picks = {(w, b): by[(p, b)] for w, b, p in adv[["workload", "batch_size", "pick"]].itertuples(index=False)}
    ways = (("v3 grid, separate starts, fastest of 3", grid), ("in turn, fastest of rounds 1-3", tr[tr.repeat < 3]),
            ("in turn, fastest of 6", tr))
    for name, rows in ways:
        t = advice_table(rows.to_dict("records"), picks, configs, ep, "vllm")
        by_b = t.groupby("batch_size")["mape"].mean()
        print(f"{name:40s} MAPE {t['mape'].mean():.3f}  b=1 {by_b.get(1, np.nan):.3f}  b=8 {by_b.get(8, np.nan):.3f}"
              f"  speedup-MAPE {t['mape_speedup'].mean():.3f}  Spearman {t['spearman'].mean():.2f}"
              f"  configs {t['configs'].sum()}")
        cells = t[["workload", "batch_size", "mape"]].itertuples(index=False)
        print("   ", " ".join(f"{w}{b}:{m:.3f}" for w, b, m in cells))
    prof, out = load_profile(ep, check_hardware=False), []
    for name, rows in (("grid", grid), ("turn6", tr)):
        for (w, lab, b), m in rows.groupby(["workload", "label", "batch_size"])["decode_goodput"].max().items():
            p = float(CostModel(prof, w, max_new_tokens=MNT).predict(by[(lab, b)]).goodput)
            kind = "alone" if lab == "target alone" else "draft" if lab.startswith("draft") else "lookup"
            out.append((name, b, kind, (p - m) / m))
    e = pd.DataFrame(out, columns=["rows", "b", "kind", "err"])
    print(e.groupby(["rows", "b", "kind"])["err"].agg(["mean", lambda x: x.abs().mean(), "count"]).round(3))


if __name__ == "__main__":
    main(*sys.argv[1:4])
