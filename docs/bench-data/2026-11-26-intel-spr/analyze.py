"""Tables for docs/benchmarks.md Part E from the campaign's outputs."""
import sys
from pathlib import Path

import pandas as pd

C = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent
adv = pd.read_csv(C / "engine-advice.csv")
print(adv.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
rows = pd.read_csv(C / "advice-engine-rows.csv")
med = rows.groupby(["workload", "batch_size", "label"])["decode_goodput"].agg(["median", "min", "max"])
med["spread"] = (med["max"] - med["min"]) / med["median"]
for (w, b), g in med.groupby(level=[0, 1]):
    g = g.droplevel([0, 1]).sort_values("median", ascending=False)
    alone = g.loc["target alone", "median"]
    print(f"\n{w} b={b}: target alone {alone:.1f} tok/s")
    print((g.assign(vs_alone=g["median"] / alone)).round(3).to_string())
