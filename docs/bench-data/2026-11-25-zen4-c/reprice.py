"""Re-price an advice validation's measured rows with the current cost model (e.g. after a change to how the
latency table is read) and say what `recommend` picks now from the same profile: the measured rows of
ADVICE_DIR/predicted_vs_measured.csv are kept, predictions and the pick are recomputed (same trials, seed and
request length as bench's --validate-advice). Usage: python reprice.py ADVICE_DIR WORKLOAD MAX_NEW_TOKENS"""
import sys
import tempfile

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from spectune.config import DecodeConfig
from spectune.profile import load_profile
from spectune.tune import CostModel
from spectune.tune.recommend import recommend


def config(r, b, ntok):
    gamma = tuple(int(x) for x in str(r.gamma).split(","))
    return DecodeConfig(models=tuple(r.models.split(",")), method=r.method, combine=r.combine, gamma=gamma,
                        proposer=r.proposer, policy=r.policy, batch_size=int(b), max_new_tokens=ntok)


def main():  # recommend's study writer runs in a spawned process, which imports this file again
    adv, wl, ntok = sys.argv[1], sys.argv[2], int(sys.argv[3])
    prof = load_profile(f"{adv}/profile", check_hardware=False)
    rows = pd.read_csv(f"{adv}/predicted_vs_measured.csv")
    for b, g in rows.groupby("batch_size"):
        cm = CostModel(prof, workload=None if wl == "mix" else wl, max_new_tokens=ntok)
        pred = np.array([cm.predict(config(r, b, ntok)).goodput for r in g.itertuples()])
        meas = g["decode_goodput"].to_numpy()
        sp_m, sp_p = meas / meas[0], pred / pred[0]  # row 0: the target alone
        with tempfile.TemporaryDirectory() as tmp:
            rec = recommend(["draft-s", "smollm2-135m"], workload=wl, batch_size=int(b), n_trials=300,
                            max_new_tokens=ntok, profile=f"{adv}/profile", out=tmp, seed=0, say=lambda *a, **k: None)
        print(f"{adv} b={b}: MAPE of speedups {np.mean(np.abs(sp_p - sp_m) / sp_m) * 100:.1f} % (was "
              f"{g['abs_pct_error_speedup'].mean() * 100:.1f} %), Spearman {spearmanr(pred, meas).statistic:.3f}; "
              f"pick now: {rec.chosen.config.to_dict()}")
        for r, p in zip(g.itertuples(), pred):
            print(f"    {r.label:48s} measured {r.decode_goodput:6.1f} predicted before {r.predicted_goodput:6.1f}"
                  f" now {p:6.1f}")


if __name__ == "__main__":
    main()
