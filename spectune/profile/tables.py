"""The tables of a profile: their columns (one list per CSV file) and the tables derived from measured ones.

Pure pandas: calibration writes these tables (``spectune.calibration``), everything else reads them. Column
meanings are documented in ``docs/profile-format.md``.

* ``cost_table``: c(b) = L_proposer(b, 1) / L_verifier(b, 1) for every ordered pair, the cost coefficient of
  Collaborative Decoding via Speculation, Thm 3.1 (time of one proposer call over one target call).
* ``acceptance_summary``: mean alpha / beta of the traces per (workload, proposer, models, combination, pos).
"""
from __future__ import annotations

import math

import pandas as pd

LATENCY_COLUMNS = ["model", "batch", "ctx", "k", "median_s", "mean_s", "std_s", "min_s", "max_s", "repeats",
                   "feasible", "note"]
COST_COLUMNS = ["proposer", "verifier", "batch", "ctx", "c"]
TRACE_COLUMNS = ["workload", "prompt", "state", "draft_id", "proposer", "models", "combination", "pos", "token",
                 "beta", "alpha", "beta_soft", "alpha_soft", "q"]
SV_COLUMNS = ["workload", "prompt", "state", "draft_id", "draft", "companion", "target", "pos", "token", "beta",
              "beta_soft", "s", "a"]
MODELS_SEP = ","  # joins the model names of a combination set in the traces' ``models`` column
BIN_COLUMNS = ["workload", "draft", "companion", "target", "s_bin", "s_lo", "s_hi", "a_bin", "a_lo", "a_hi",
               "mean_beta", "count"]
GAIN_COLUMNS = ["workload", "draft", "companion", "target", "n", "n_s_bins", "n_a_bins", "mean_beta", "h_beta",
                "h_beta_s", "h_beta_a", "h_beta_sa", "info_gain", "info_gain_frac", "info_gain_frac_corrected"]
ACCEPTANCE_COLUMNS = ["workload", "proposer", "models", "combination", "pos", "alpha", "beta", "alpha_soft",
                      "beta_soft", "n"]
PATH_COLUMNS = ["workload", "prompt", "pos", "token"]  # r's trajectory per calibration prompt (pos < 0: the prompt)
# every model's greedy token and its probability q at each answer position of r's trajectory, fed the path before it
PATH_DRAFT_COLUMNS = ["workload", "prompt", "model", "pos", "token", "q"]
OPTIONAL_TABLES = ("trajectories", "path_drafts")  # absent from older profiles: they load empty
TABLES: dict[str, list[str]] = {
    "latency": LATENCY_COLUMNS,
    "cost": COST_COLUMNS,
    "traces": TRACE_COLUMNS,
    "acceptance": ACCEPTANCE_COLUMNS,
    "sv_traces": SV_COLUMNS,
    "sv_bins": BIN_COLUMNS,
    "info_gain": GAIN_COLUMNS,
    "trajectories": PATH_COLUMNS,
    "path_drafts": PATH_DRAFT_COLUMNS,
}


def cost_table(lat: pd.DataFrame) -> pd.DataFrame:
    """c(b, ctx) = L_proposer(b, k=1, ctx) / L_verifier(b, k=1, ctx) for every ordered pair of models."""
    one = lat[(lat["k"] == 1) & lat["feasible"].astype(bool)]
    piv = one.pivot_table(index=["batch", "ctx"], columns="model", values="median_s")
    names = list(dict.fromkeys(lat["model"]))
    rows = []
    for p in names:
        for v in names:
            if p == v or p not in piv or v not in piv:
                continue
            for (b, c), val in (piv[p] / piv[v]).items():
                if not math.isnan(val):
                    rows.append(dict(proposer=p, verifier=v, batch=int(b), ctx=int(c), c=float(val)))
    return pd.DataFrame(rows, columns=COST_COLUMNS)


def acceptance_summary(traces: pd.DataFrame) -> pd.DataFrame:
    """Mean alpha / beta per (workload, proposer, models, combination, pos), plus ``all`` workloads pooled."""
    if traces is None or traces.empty:
        return pd.DataFrame(columns=ACCEPTANCE_COLUMNS)
    keys = ["proposer", "models", "combination", "pos"]
    parts = [traces.groupby(["workload"] + keys, sort=False)]
    if traces["workload"].nunique() > 1:
        parts.append(traces.assign(workload="all").groupby(["workload"] + keys, sort=False))
    out = []
    for g in parts:
        agg = g.agg(alpha=("alpha", "mean"), beta=("beta", "mean"), alpha_soft=("alpha_soft", "mean"),
                    beta_soft=("beta_soft", "mean"), n=("beta", "size")).reset_index()
        out.append(agg)
    return pd.concat(out, ignore_index=True)[ACCEPTANCE_COLUMNS]
