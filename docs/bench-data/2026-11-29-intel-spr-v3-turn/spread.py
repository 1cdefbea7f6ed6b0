"""sd over rounds of log(config / target alone in the same round), per cell and config; medians by batch size."""
import sys
import numpy as np
import pandas as pd
for d in sys.argv[1:]:
    rows = pd.concat([pd.read_csv(f, keep_default_na=False) for f in d.split(",")])
    out = {}
    for (w, b), at in rows.groupby(["workload", "batch_size"]):
        g = at.pivot_table(index="repeat", columns="label", values="decode_goodput")
        for lab in g.columns:
            if lab != "target alone":
                out.setdefault(b, []).append(np.log(g[lab] / g["target alone"]).std(ddof=1))
    print(d[-40:], {b: (round(float(np.median(v)), 3), len(v)) for b, v in out.items()})
