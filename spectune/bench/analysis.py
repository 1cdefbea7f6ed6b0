"""From per-repeat measurements to the bench table: medians and spread, speedups measured side by side, and
the decoder's efficiency against the paper's closed forms.

* speedups: per repeat, a run's goodput over the goodput of ``standard`` (collaborative decoding over the
  same models and combination) and of the target alone, both measured in the same repeat at the same batch
  size and temperature; the table reports the median over repeats.
* ``thm_speedup``: the paper's closed form for the run's method -- SD with its bonus token (Leviathan et al.),
  Thm 3.1 (Naive-CoS), Thm 3.6 (CoS, alternate proposals) -- evaluated at alpha and c *measured in that same
  run*: alpha = accepted / verified proposals of the first model, c = its mean 1-token forward time over the
  target's mean 1-token forward time (standard run, same repeat). Constant call costs, as the theorems assume.
* ``efficiency`` = measured speedup / ``thm_speedup``. Thm 3.6 counts CoS conservatively (it is exact only for
  gamma_q = gamma_p = 1 and equal model costs), so a CoS row can exceed 1.
* ``renewal_speedup`` runs the method's own loop in the simulator (``spectune.tune.simulate``, the renewal-reward
  estimate the cost model uses) at the run's alpha, with the forward times the loop really paid in that run per
  feed length k (verification over gamma + 1 tokens costs more than one token on a compute-bound device; the
  theorems ignore that), and ``loop_efficiency`` = measured / ``renewal_speedup`` isolates what the decoder
  itself adds (sampling, caches, Python) and non-i.i.d. acceptance.
* HF assisted generation at a fixed K gets the same columns: SD's closed form, and the renewal price of HF's
  own step (``spectune.bench.hf_price``: its assistant re-encodes a token after every rejection), so its
  ``loop_efficiency`` is what HF's Python loop (an ``assistant.generate()`` call per step) costs beyond its
  forwards. ``draft_lengths``: steps by the draft length HF really ran, from forward hooks (``hf_trace.py``).
Closed forms exist for two models (sd, naive-cos, cos); other rows get NaN.
"""
from __future__ import annotations

import json
import math
import statistics
from typing import Any

import numpy as np
import pandas as pd

from spectune.bench.grid import is_adaptive_key
from spectune.bench.hf_price import round_hf_assisted
from spectune.decoding.combine import parse_combination
from spectune.tune import closed_forms as C
from spectune.tune.simulate import Traces, simulate

NAN = float("nan")


def theorem_speedup(method: str, uses: tuple[int, ...], gamma: tuple[int, ...], alpha: float, c: float) -> float:
    """The paper's speedup over standard decoding of r for two models (model 0 = proposer q, model 1 = p)."""
    if len(gamma) != 2 or not math.isfinite(alpha) or not math.isfinite(c):
        return NAN
    g = gamma[0]
    c_r = sum(c if i == 0 else 1.0 for i in uses)  # one standard token, in target-forward units
    if method == "sd":  # every model in r scores the drafts (the proposer re-scores: r is a black box)
        return float(C.tokens_per_round_sd(alpha, g)) * c_r / (g * c + c_r)
    if method == "naive-cos":  # the proposer reuses the q it drafted with
        return float(C.tokens_per_block(alpha, g)) * c_r / (g * c + c_r - (c if 0 in uses else 0.0))
    if method == "cos":
        if tuple(uses) == (0, 1):
            return float(C.speedup_thm36(alpha, g, gamma[1], c))
        if tuple(uses) == (1,) and gamma[1] == 1:  # r = p: p's bonus is its own sample, i.e. SD
            return theorem_speedup("sd", uses, gamma, alpha, c)
    return NAN


def _latency(calls_by_k: dict[str, list[float]]):
    """L(k): mean seconds per forward at feed length k in a run (linear between measured k, flat outside)."""
    ks = sorted(int(k) for k in calls_by_k)
    if not ks:
        return None
    ys = [calls_by_k[str(k)][1] / calls_by_k[str(k)][0] for k in ks]
    return lambda k: float(np.interp(k, ks, ys))


def renewal_speedup(method: str, uses: tuple[int, ...], gamma: tuple[int, ...], alphas: list[float],
                    lat: list[Any], t_standard: float) -> float:
    """Speedup over standard of the method's own loop (the simulator of ``spectune.tune``) with i.i.d. acceptance
    ``alphas`` (per proposer) and the run's own forward times ``lat[i](k)``; ``t_standard``: seconds per standard
    token. ``method`` "hf-assisted": HF's assisted-generation step (``spectune.bench.hf_price``)."""
    if len(gamma) != 2 or any(f is None for f in lat) or not all(math.isfinite(a) for a in alphas):
        return NAN
    if method == "hf-assisted":
        tokens, seconds = round_hf_assisted(C.survival_iid(alphas[0], gamma[0] + 1), gamma[0], lat)
        return t_standard / (seconds / tokens)
    if method not in ("sd", "naive-cos", "cos"):
        return NAN
    traces = [Traces(np.full((1, max(gamma) + 1), a)) for a in alphas]
    res = simulate(method, gamma, uses, traces, latency=lambda m, b, k: lat[m](k), max_new_tokens=2048)
    return t_standard / (res.seconds / res.tokens)


def summarize(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per run key (see the module docstring for every derived column)."""
    out = []
    for key, g in rows.groupby("key", sort=False):
        first = g.iloc[0]
        models = tuple(first["models"].split(","))
        same = (rows["batch_size"] == first["batch_size"]) & (rows["temperature"] == first["temperature"])
        std = rows[same & rows["is_standard"].astype(bool)].set_index("repeat")
        tgt = rows[same & rows["is_target"].astype(bool)].set_index("repeat")
        gi = g.set_index("repeat")
        sp_std, sp_tgt = _ratios(gi, std), _ratios(gi, tgt)
        d: dict[str, Any] = dict(
            key=key, label=first["label"], kind=first["kind"], method=first["method"], models=first["models"],
            combine=first["combine"], gamma=first["gamma"], proposer=first.get("proposer", "model"),
            policy=first.get("policy", "fixed"), batch_size=int(first["batch_size"]),
            temperature=float(first["temperature"]), repeats=len(g),
            goodput=statistics.median(g["goodput"]), goodput_min=g["goodput"].min(), goodput_max=g["goodput"].max(),
            decode_goodput=g["decode_goodput"].median(),
            spread=(g["goodput"].max() - g["goodput"].min()) / statistics.median(g["goodput"]),
            speedup_vs_standard=statistics.median(sp_std) if sp_std else NAN,
            speedup_vs_target=statistics.median(sp_tgt) if sp_tgt else NAN,
            mean_accepted_length=(g["mean_accepted_length"].median() if first["method"] != "standard" else NAN),
            calls_per_token=g["calls_per_token"].median(),
            alpha=g["alpha"].median(), c=NAN, thm_speedup=NAN, efficiency=NAN,
            renewal_speedup=NAN, loop_efficiency=NAN, draft_lengths=_draft_lengths(g))
        if _priced(first, models) and not is_adaptive_key(key):
            d.update(_efficiencies(first, gi, std, models))
        out.append(d)
    return pd.DataFrame(out)


def _ratios(gi: pd.DataFrame, ref: pd.DataFrame) -> list[float]:
    """Per repeat: this run's goodput over the reference run's in the same repeat."""
    return [gi.loc[r, "goodput"] / ref.loc[r, "goodput"] for r in gi.index if r in ref.index]


def _draft_lengths(g: pd.DataFrame) -> str:
    """HF rows: steps by draft length over every repeat (JSON), what HF really drafted; "" for other rows."""
    total: dict[str, int] = {}
    for cell in g.get("draft_lengths", pd.Series(dtype=object)):
        if isinstance(cell, str) and cell not in ("", "{}"):
            for k, v in json.loads(cell).items():
                total[k] = total.get(k, 0) + int(v)
    return json.dumps(dict(sorted(total.items(), key=lambda kv: int(kv[0])))) if total else ""


def _priced(first: Any, models: tuple[str, ...]) -> bool:
    """Rows the closed forms and the renewal price cover: two-model sd / naive-cos / cos runs of the runtime and
    HF assisted generation at a fixed K (not the HF-defaults row, whose K changes every step)."""
    if len(models) != 2:
        return False
    if first["kind"] == "hf-assisted":
        return "|gHF|" not in first["key"]
    return first["kind"] == "spectune" and first["method"] in ("sd", "naive-cos", "cos")


def _efficiencies(first: Any, gi: pd.DataFrame, std: pd.DataFrame, models: tuple[str, ...]) -> dict[str, float]:
    """c, the closed form, efficiency, the renewal price at the run's forward times and loop efficiency, each
    the median over the repeats that have a standard run beside them."""
    hf = first["kind"] == "hf-assisted"
    method = "hf-assisted" if hf else first["method"]
    uses = (1,) if hf else parse_combination(first["combine"], 2).uses
    gamma = tuple(int(x) for x in str(first["gamma"]).split(","))
    thms, eff, ren, leff, cs = [], [], [], [], []
    for r in gi.index:
        if r not in std.index:
            continue
        calls = json.loads(gi.loc[r, "calls_by_k"])
        std_calls = json.loads(std.loc[r, "calls_by_k"])
        lat = [_latency(calls.get(m, {})) for m in models]
        std_lat = [_latency(std_calls.get(m, {})) for m in models]
        if std_lat[-1] is None or lat[0] is None:
            continue
        c = lat[0](1) / std_lat[-1](1)  # proposer's 1-token forward over the target's, same repeat
        alpha = float(gi.loc[r, "alpha"])
        alpha_p = float(gi.loc[r, "alpha_p"]) if math.isfinite(gi.loc[r, "alpha_p"]) else 1.0
        thm = theorem_speedup("sd" if hf else method, uses, gamma, alpha, c)
        t_std = sum(std_lat[i](1) for i in uses if std_lat[i] is not None)
        rs = renewal_speedup(method, uses, gamma, [alpha, alpha_p], lat, t_std)
        meas = gi.loc[r, "goodput"] / std.loc[r, "goodput"]
        cs.append(c)
        thms.append(thm)
        eff.append(meas / thm)
        ren.append(rs)
        leff.append(meas / rs)
    med = lambda xs: statistics.median(xs) if xs and all(map(math.isfinite, xs)) else NAN  # noqa: E731
    return dict(c=med(cs), thm_speedup=med(thms), efficiency=med(eff), renewal_speedup=med(ren),
                loop_efficiency=med(leff))
