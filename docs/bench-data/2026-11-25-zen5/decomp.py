"""Decompose the advice's pricing error per configuration: acceptance (forwards per token) vs forward latency vs
the loop's own time. Usage: python decomp.py RUN_DIR WORKLOAD"""

import json
import sys
import pandas as pd
from spectune.profile import load_profile
from spectune.tune.cost import CostModel
from spectune.config import DecodeConfig

run, wl = sys.argv[1], sys.argv[2]
prof = load_profile(sys.argv[4] if len(sys.argv) > 4 else f"{run}/profile")
rows = pd.read_csv(f"{run}/rows.csv")
mnt = int(sys.argv[3])
cm = CostModel(prof, sys.argv[5] if len(sys.argv) > 5 else wl, max_new_tokens=mnt)
print("ctx priced", getattr(cm, "ctx", None), "max_new_tokens", mnt)
out = []
for key, g in rows[rows.kind == "spectune"].groupby("key", sort=False):
    f = g.iloc[0]
    models = f.models.split(",")
    cfg = DecodeConfig(
        models=models,
        method=f.method,
        combine=f["combine"],
        gamma=[int(x) for x in str(f.gamma).split(",")],
        proposer=f.proposer,
        policy=f.policy,
        batch_size=int(f.batch_size),
        max_new_tokens=mnt,
    )
    pred = cm.predict(cfg)
    if f.method == "standard":
        pc = {(len(models) - 1, 1): 1.0}
    else:
        pc = {k: v for k, v in cm.sim_counts(cfg).calls.items()}
    # measured per repeat: decode forwards (k < 50) per token, their mean time, loop overhead
    per = []
    for _, r in g.iterrows():
        cb = json.loads(r.calls_by_k)
        n_fwd = {}
        t_fwd = 0.0
        t_pre = 0.0
        for mi, m in enumerate(models):
            for k, (n, s) in cb.get(m, {}).items():
                if int(k) < 50:
                    n_fwd[(mi, int(k))] = n / r.tokens
                    t_fwd += s
        per.append((r.decode_seconds / r.tokens, t_fwd / r.tokens, n_fwd))
    med = sorted(per, key=lambda x: x[0])[len(per) // 2]
    meas_tok, meas_fwd, n_fwd = med
    price_meas_counts = sum(n * cm.L(models[m], 1, k) for (m, k), n in n_fwd.items())
    price_pred_counts = sum(n * cm.L(models[m], 1, k) for (m, k), n in pc.items())
    tcalls_p = sum(n for (m, k), n in pc.items() if m == len(models) - 1)
    tcalls_m = sum(n for (m, k), n in n_fwd.items() if m == len(models) - 1)
    out.append(
        dict(
            run=f.label,
            pred_ms=1e3 * pred.latency_per_token,
            meas_ms=1e3 * meas_tok,
            meas_fwd_ms=1e3 * meas_fwd,
            loop_ms=1e3 * (meas_tok - meas_fwd),
            prof_at_meas_counts=1e3 * price_meas_counts,
            prof_at_pred_counts=1e3 * price_pred_counts,
            tgt_calls_pred=tcalls_p,
            tgt_calls_meas=tcalls_m,
            err_total=pred.latency_per_token / meas_tok - 1,
            err_counts=price_pred_counts / price_meas_counts - 1,
            err_latency=price_meas_counts / meas_fwd - 1,
            loop_share=(meas_tok - meas_fwd) / meas_tok,
        )
    )
pd.set_option("display.width", 250)
print(pd.DataFrame(out).round(3).to_string())
