"""Round-to-round spread of each configuration and of its ratio to the target alone, per drive length."""
import sys
import pandas as pd
for p in sys.argv[1:]:
    d = pd.read_csv(f"{p}/engine-rows.csv")
    t = d.pivot_table(index=["workload", "repeat"], columns="label", values="decode_goodput")
    print(f"== {p}: drive = {int(d.tokens.median())} tokens")
    for w, x in t.groupby(level=0):
        alone = x["target alone"]
        for lab in x.columns:
            v = x[lab]
            cv = v.std() / v.mean()
            r = (v / alone) if lab != "target alone" else None
            rs = "" if r is None else (f" ratio median {r.median():.3f} range {r.min():.3f}-{r.max():.3f}"
                                       f" sd {r.std():.3f}")
            print(f"{w:5s} {lab:16s} median {v.median():6.1f} range {v.min():6.1f}-{v.max():6.1f} cv {cv:.3f}{rs}")
