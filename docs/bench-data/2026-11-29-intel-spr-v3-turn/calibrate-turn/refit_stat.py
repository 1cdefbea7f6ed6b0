"""Refit calibration-in-turn rows with each step statistic and save the engine profiles.
Usage: python refit_stat.py ROWS_CSV ENGINE_JSON ACC OUT_PREFIX REPEATS PASSES"""
import json
import sys

import pandas as pd

from spectune.calibration.engine import ROW_COLUMNS, STATS, EngineGrid, engine_profile, fit_latency, plain_steps
from spectune.calibration.hardware import fingerprint
from spectune.profile import load_profile

rows_csv, eng_json, acc, prefix, reps, passes = sys.argv[1:7]
rows = pd.read_csv(rows_csv, keep_default_na=False)[ROW_COLUMNS]
models = ["draft-s", "smollm2-135m"]
meta0 = json.loads(open(eng_json).read())
meta0 = {k: v for k, v in meta0.items() if k in ("name", "version", "parallel", "args", "lookup_match", "ragged")}
for stat in STATS:
    grid = EngineGrid(batch_sizes=(1, 8), lookup_ks=(2, 4, 8), draft_ks=(1, 4, 8), repeats=int(reps),
                      passes=int(passes), stat=stat).checked()
    lat = fit_latency(rows, models, grid)
    meta = dict(meta0, plain_step_s=plain_steps(rows, grid))
    prof = engine_profile(load_profile(acc, check_hardware=False), models, lat, meta, fingerprint("cpu"), grid, 0.0)
    prof.meta["engine"]["measured"] = rows.to_dict("records")
    prof.save(f"{prefix}-{stat}", force=True)
    t = lat[lat["k"].isin([0, 1, 2, 5])].pivot_table(index=["model", "batch"], columns="k", values="median_s")
    print(stat, "\n", t.mul(1e3).round(2).to_string())
