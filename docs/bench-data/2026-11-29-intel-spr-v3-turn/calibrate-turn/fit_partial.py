"""An engine profile from a calibrate --engine run's rows so far (OUT.partial/engine-rows.csv): fitted and saved.
Usage: python fit_partial.py PARTIAL_DIR ACCEPTANCE OUT_DIR"""
import json
import sys
from pathlib import Path

import pandas as pd

from spectune.calibration.engine import ROW_COLUMNS, EngineGrid, engine_profile, fit_latency, plain_steps
from spectune.calibration.hardware import fingerprint
from spectune.profile import load_profile

part, acc, out = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
state = json.loads((part / "state.json").read_text())
g = state["settings"]["grid"]
grid = EngineGrid(**{k: tuple(v) if isinstance(v, list) else v for k, v in g.items()}).checked()
rows = pd.read_csv(part / "engine-rows.csv", keep_default_na=False)[ROW_COLUMNS]
rows["draft"] = rows["draft"].fillna("")
print(len(rows), "rows;", rows.groupby("stage")["repeat"].max().to_dict())
models = ["draft-s", "smollm2-135m"]
lat = fit_latency(rows, models, grid)
meta = json.loads((part / "engine.json").read_text())
meta["plain_step_s"] = plain_steps(rows, grid)
prof = engine_profile(load_profile(acc, check_hardware=False), models, lat, meta, fingerprint("cpu"), grid, 0.0)
prof.meta["engine"]["measured"] = rows.to_dict("records")
prof.save(out, force=True)
print(lat[lat["k"].isin([0, 1, 2, 5])].pivot_table(index=["model", "batch"], columns="k", values="median_s")
      .mul(1e3).round(2).to_string())
