"""Per cell of a confirm run: each configuration's goodput over the pick's in the same round (median, range,
sd of its log over rounds), and the same over the target alone's."""
import sys
import numpy as np
import pandas as pd
adv = pd.read_csv(sys.argv[1] + "/engine-advice.csv")
rows = pd.read_csv(sys.argv[1] + "/engine-confirm.csv", keep_default_na=False)
for w, b, pick in adv[["workload", "batch_size", "pick"]].itertuples(index=False):
    at = rows[(rows.workload == w) & (rows.batch_size == b)]
    g = at.pivot_table(index="repeat", columns="label", values="decode_goodput")
    print(f"{w} b={b} pick {pick}  rounds {len(g)}")
    for lab in g.columns:
        r = g[lab] / g[pick]
        a = g[lab] / g["target alone"]
        print(f"  {lab:16s} med {g[lab].median():6.1f}  /pick med {r.median():.3f} [{r.min():.2f}-{r.max():.2f}] "
              f"sdlog {np.log(r).std(ddof=1):.3f}   /alone med {a.median():.3f} sdlog {np.log(a).std(ddof=1):.3f}"
              f"  fastest/fastest-pick {g[lab].max() / g[pick].max():.3f}")
