"""A synthetic profile built in memory: known latencies and known acceptance, so predictions are hand-checkable."""
from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

from spectune.profile import LATENCY_COLUMNS, SV_COLUMNS, TRACE_COLUMNS, Profile, acceptance_summary, cost_table


def latency_rows(models, base, batch_sizes=(1, 2, 4), ks=range(1, 9), ctxs=(64,), slope_k=0.0, slope_b=0.0,
                 infeasible=(), slope_ctx=0.0):
    rows = []
    for m in models:
        for b in batch_sizes:
            for k in ks:
                for ctx in ctxs:
                    ok = (m, b) not in infeasible
                    v = base[m] * (1 + slope_k * (k - 1)) * (1 + slope_b * (b - 1)) * (1 + slope_ctx * (ctx - 64))
                    rows.append(dict(model=m, batch=b, ctx=ctx, k=k, median_s=v if ok else np.nan, mean_s=v,
                                     std_s=0.0, min_s=v, max_s=v, repeats=3, feasible=ok, note="" if ok else "oom"))
    return pd.DataFrame(rows, columns=LATENCY_COLUMNS)


def trace_rows(proposer, label, comb, betas, workload="code", conf=None, lengths=None, prompts=None):
    """betas: [n_drafts, gamma_max] array of per-token acceptance probabilities; conf: the proposer's probability
    of its own tokens (same shape; default 1); lengths: a lookup's proposed count per draft (token -1 past it);
    prompts: the calibration prompt of each draft (default: all prompt 0)."""
    rows = []
    betas = np.asarray(betas, float)
    conf = np.ones_like(betas) if conf is None else np.asarray(conf, float)
    for d, row in enumerate(betas):
        n = betas.shape[1] if lengths is None else lengths[d]
        for j, b in enumerate(row):
            b = b if j < n else 0.0
            rows.append(dict(workload=workload, prompt=0 if prompts is None else prompts[d], state=d, draft_id=d,
                             proposer=proposer, models=label,
                             combination=comb, pos=j, token=1 if j < n else -1, beta=b, alpha=b, beta_soft=b,
                             alpha_soft=b, q=conf[d, j] if j < n else 0.0))
    return rows


def make_profile(models=("a", "b", "c"), combine="we:0.2,0.3,0.5", base=None, alpha=0.8, gamma_max=8,
                 betas=None, batch_sizes=(1, 2, 4), slope_k=0.0, slope_b=0.0, infeasible=(), memory=1 << 40,
                 params=1000, temperature=0.7, sv_beta=None, conf=None, lookups=None, prompts=None, ctxs=(64,),
                 slope_ctx=0.0, prompt_tokens=None):
    """Every proposer has i.i.d. acceptance ``alpha`` against every r (or explicit ``betas[(proposer, label, comb)]``),
    except that a model proposing against r = itself accepts everything. ``conf[(proposer, label, comb)]``: the
    drafts' confidence; ``lookups[(spec, label, comb)] = (betas, lengths)``: a lookup proposer's traces;
    ``prompts[(proposer, label, comb)]``: each draft's calibration prompt. Latencies grow by ``slope_ctx`` per
    cached token past 64 over ``ctxs``; ``prompt_tokens``: the calibration prompts' lengths by workload."""
    base = base or {m: 0.01 * 2 ** i for i, m in enumerate(models)}
    lat = latency_rows(models, base, batch_sizes, range(1, gamma_max + 2), ctxs, slope_k=slope_k, slope_b=slope_b,
                       infeasible=infeasible, slope_ctx=slope_ctx)
    sets = [(models, combine)] + [((models[i], models[j]), "target")
                                  for i, j in itertools.combinations(range(len(models)), 2)
                                  if not ((models[i], models[j]) == tuple(models) and combine == "target")]
    rows = []
    for ms, comb in sets:
        label = ",".join(ms)
        for p in ms:
            if betas and (p, label, comb) in betas:
                bt = betas[(p, label, comb)]
            elif comb == "target" and p == ms[-1]:
                bt = np.ones((4, gamma_max))
            else:
                bt = np.full((4, gamma_max), alpha)
            rows += trace_rows(p, label, comb, bt, conf=(conf or {}).get((p, label, comb)),
                               prompts=(prompts or {}).get((p, label, comb)))
    for (spec, label, comb), (bt, lengths) in (lookups or {}).items():
        rows += trace_rows(spec, label, comb, bt, lengths=lengths)
    traces = pd.DataFrame(rows, columns=TRACE_COLUMNS)
    meta = dict(schema="spectune.profile/1", created="now", hardware=dict(kind="cpu", name="test cpu", count=2,
                memory_total_bytes=memory), software={},
                models=[dict(name=m, parameters=params, dtype="torch.float32", hash=m) for m in models],
                settings=dict(combine=combine, workloads=["code"], latency_forward="runtime",
                              latency=dict(batch_sizes=list(batch_sizes)),
                              acceptance=dict(gamma_max=gamma_max, temperature=temperature)),
                stages={}, tables={}, **({"prompt_tokens": prompt_tokens} if prompt_tokens else {}))
    tables = dict(latency=lat, cost=cost_table(lat), traces=traces, acceptance=acceptance_summary(traces))
    if sv_beta is not None and len(models) >= 3:  # SV rows for (models[0], models[1], models[-1]): beta = sv_beta
        from spectune.calibration.bins import A_BINS, S_BINS, sv_tables

        rng = np.random.default_rng(0)
        sv = [dict(workload="code", prompt=0, state=d, draft_id=d, draft=models[0], companion=models[1],
                   target=models[-1], pos=j, token=1, beta=sv_beta, beta_soft=sv_beta, s=rng.random(),
                   a=rng.random()) for d in range(4) for j in range(gamma_max)]
        tables["sv_traces"] = pd.DataFrame(sv, columns=SV_COLUMNS)
        tables["sv_bins"], tables["info_gain"] = sv_tables(tables["sv_traces"], S_BINS[0], A_BINS[0])
    return Profile(meta=meta, tables=tables)
