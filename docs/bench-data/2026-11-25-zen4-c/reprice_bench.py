"""Price every batch-1 row of a bench run from one profile, with the profile's latency table read three ways:
as measured (raw), through its isotonic fit along k (what LatencyModel(monotone_k=True) does), and through a
least-squares line along k; print MAPE of the speedups over the target alone, Spearman, and the regret of the
predicted best against the measurement. Usage: python reprice_bench.py PROFILE BENCH_DIR [MAX_NEW_TOKENS]"""
import sys

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from spectune.config import DecodeConfig
from spectune.profile import LatencyModel, load_profile
from spectune.profile.latency_model import isotonic
from spectune.tune import CostModel


def line(k, y):
    slope, icpt = np.polyfit(k, y, 1)
    return np.maximum(slope * np.asarray(k) + icpt, 1e-6)


def read_as(lat, how):
    lat = lat.copy()
    for _, g in lat[lat["feasible"].astype(bool)].groupby(["model", "batch", "ctx"]):
        g = g.sort_values("k")
        if how != "raw" and len(g) >= 3:
            y = g["median_s"].to_numpy()
            lat.loc[g.index, "median_s"] = isotonic(y) if how == "isotonic" else line(g["k"].to_numpy(), y)
    return lat


def config(r, ntok):
    gamma = tuple(int(x) for x in str(r.gamma).split(","))
    return DecodeConfig(models=tuple(r.models.split(",")), method=r.method, combine=r.combine, gamma=gamma,
                        proposer=r.proposer, policy=r.policy, max_new_tokens=ntok)


def main():
    path, bench = sys.argv[1], sys.argv[2]
    ntok = int(sys.argv[3]) if len(sys.argv) > 3 else 32
    meas = pd.read_csv(f"{bench}/summary.csv")
    meas = meas[(meas["batch_size"] == 1) & (meas["kind"] == "spectune")]
    m = meas["speedup_vs_target"].to_numpy()
    for how in ("raw", "isotonic", "linear"):
        prof = load_profile(path, check_hardware=False)
        prof.__dict__["latency_model"] = LatencyModel(read_as(prof.latency, how))  # the cached property, replaced
        cm = CostModel(prof, workload=None, max_new_tokens=ntok)
        p = np.array([cm.predict(config(r, ntok)).speedup_vs_target for r in meas.itertuples()])
        best = int(np.argmax(p))
        print(f"{how:9s} MAPE of speedups {np.mean(np.abs(p - m) / m) * 100:4.1f} %, Spearman "
              f"{spearmanr(p, m).statistic:.3f}, predicted best {meas['label'].iloc[best]} (measured {m[best]:.3f} x "
              f"the target alone; the measured best {m.max():.3f}: regret {m.max() / m[best]:.3f})")
        for r, pp in zip(meas.itertuples(), p):
            print(f"    {r.label:50s} measured {r.speedup_vs_target:.3f} predicted {pp:.3f}")


if __name__ == "__main__":
    main()
