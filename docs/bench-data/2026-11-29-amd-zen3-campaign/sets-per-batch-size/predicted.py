import sys
sys.path.insert(0, "benchmarks")
from pathlib import Path
import pandas as pd
from reprice import refit
from spectune.bench.engine_runs import label, measured_configs
from spectune.tune import CostModel
prof, models, grid, tmp = refit(Path(sys.argv[1]), None)
m = pd.read_csv(Path(sys.argv[2]) / "engine-rows.csv", keep_default_na=False)
configs = {(label(c), c.batch_size): c for c in measured_configs(m, models, grid.max_new_tokens)}
fast = m.groupby(["workload", "batch_size", "label"])["decode_goodput"].agg(["max", "median"])
cms = {}
out = []
for (w, b, lab), r in fast.iterrows():
    c = configs[(lab, int(b))]
    cm = cms.setdefault(w, CostModel(prof, w, max_new_tokens=c.max_new_tokens))
    p = cm.predict(c).goodput
    out.append(dict(w=w, b=b, label=lab, pred=p, fastest=r["max"], median=r["median"], err=(p - r["max"]) / r["max"]))
d = pd.DataFrame(out)
pd.set_option("display.width", 200)
print(d[d.b == int(sys.argv[3])].sort_values(["w", "err"]).round(3).to_string(index=False))
