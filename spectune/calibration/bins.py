"""Companion-conditioned bins for speculative verification (SV) and the information gain of s and a.

Definitions (all entropies in bits):
  * Acceptance of a drafted token is a Bernoulli event with probability beta in [0, 1] (greedy calibration:
    beta is already 0 or 1). With h(p) = -p log2 p - (1-p) log2 (1-p) the binary entropy:
        H(beta)         = h(mean beta)                              uncertainty of acceptance, no observation
        H(beta | X)     = sum_bins P(bin) * h(mean beta in bin)     X discretised into bins
    so H(beta | X) <= H(beta) (concavity of h) and the information gain IG(X) = H(beta) - H(beta | X) >= 0.
    This is the entropy of the acceptance *event*; it treats a token with beta = 0.5 like a coin flip. (The SV
    paper's Table 2 reports entropies above one bit, i.e. of a discretised beta; spectune uses the Bernoulli
    event because that is what a verification schedule has to predict.)
  * X in {s, a, (s, a)}: s = sum_x min(q_draft, q_companion), a = min(1, q_companion(x) / q_draft(x)).
  * Adaptive binning: quantile edges, so every bin holds about the same number of observations; ``n_s`` in
    10..30 and ``n_a`` in 10..20 requested bins (edges that coincide, e.g. many a = 1.0, merge, so fewer bins
    may result). The joint condition uses the product of the s and a bins.
  * Plug-in estimates are biased upward for the gain when bins hold few observations. ``info_gain_frac_corrected``
    subtracts the Miller-Madow bias of a binary outcome, (B - 1) / (2 N ln 2) bits for B non-empty bins and N
    observations, before dividing by H(beta).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from spectune.profile import BIN_COLUMNS, GAIN_COLUMNS

S_BINS = (10, 30)
A_BINS = (10, 20)


def binary_entropy(p) -> np.ndarray:
    """h(p) in bits, elementwise; h(0) = h(1) = 0."""
    p = np.clip(np.asarray(p, dtype=float), 0.0, 1.0)
    out = np.zeros_like(p)
    m = (p > 0) & (p < 1)
    pm = p[m]
    out[m] = -(pm * np.log2(pm) + (1 - pm) * np.log2(1 - pm))
    return out


def quantile_edges(x, n_bins: int) -> np.ndarray:
    """Edges [lo, ..., hi] of up to ``n_bins`` equal-count bins of ``x`` (coinciding quantiles merge)."""
    x = np.asarray(x, dtype=float)
    if x.size == 0:
        return np.array([0.0, 1.0])
    edges = np.unique(np.quantile(x, np.linspace(0.0, 1.0, n_bins + 1)))
    if edges.size == 1:
        edges = np.array([edges[0], edges[0]])
    return edges


def assign(x, edges: np.ndarray) -> np.ndarray:
    """Bin index of every value: bin i is [edges[i], edges[i+1]), the last bin closed; outside -> clamped."""
    inner = edges[1:-1]
    return np.searchsorted(inner, np.asarray(x, dtype=float), side="right")


def conditional_entropy(beta, labels) -> float:
    """H(beta | labels) = sum_bins P(bin) h(mean beta in bin), in bits."""
    beta = np.asarray(beta, dtype=float)
    labels = np.asarray(labels)
    if beta.size == 0:
        return 0.0
    _, inv, counts = np.unique(labels, return_inverse=True, return_counts=True)
    sums = np.bincount(inv.ravel(), weights=beta)
    return float(np.sum(counts / beta.size * binary_entropy(sums / counts)))


def _check(n: int, rng: tuple[int, int], what: str) -> None:
    if not rng[0] <= n <= rng[1]:
        raise ValueError(f"{what} bins must be in {rng[0]}..{rng[1]}, got {n}")


def information_gain(beta, s, a, n_s: int = 20, n_a: int = 10) -> dict:
    """Entropies of acceptance and the gain from observing s, a and both (see the module docstring)."""
    _check(n_s, S_BINS, "s")
    _check(n_a, A_BINS, "a")
    beta = np.asarray(beta, dtype=float)
    n = int(beta.size)
    se, ae = quantile_edges(s, n_s), quantile_edges(a, n_a)
    bs, ba = assign(s, se), assign(a, ae)
    joint = bs * (len(ae) - 1) + ba
    h = float(binary_entropy(beta.mean())) if n else 0.0
    h_s, h_a, h_sa = conditional_entropy(beta, bs), conditional_entropy(beta, ba), conditional_entropy(beta, joint)
    ig = h - h_sa
    nonempty = int(np.unique(joint).size)
    bias = (nonempty - 1) / (2 * n * math.log(2)) if n else 0.0
    return dict(n=n, n_s_bins=len(se) - 1, n_a_bins=len(ae) - 1, mean_beta=float(beta.mean()) if n else float("nan"),
                h_beta=h, h_beta_s=h_s, h_beta_a=h_a, h_beta_sa=h_sa, info_gain=ig,
                info_gain_frac=ig / h if h > 0 else 0.0,
                info_gain_frac_corrected=max(0.0, ig - bias) / h if h > 0 else 0.0,
                s_edges=se, a_edges=ae)


def bin_table(beta, s, a, s_edges: np.ndarray, a_edges: np.ndarray) -> pd.DataFrame:
    """Mean beta and count for every non-empty (s bin, a bin)."""
    bs, ba = assign(s, s_edges), assign(a, a_edges)
    df = pd.DataFrame({"s_bin": bs, "a_bin": ba, "beta": np.asarray(beta, dtype=float)})
    g = df.groupby(["s_bin", "a_bin"])["beta"].agg(["mean", "count"]).reset_index()
    g["s_lo"], g["s_hi"] = s_edges[g["s_bin"]], s_edges[g["s_bin"] + 1]
    g["a_lo"], g["a_hi"] = a_edges[g["a_bin"]], a_edges[g["a_bin"] + 1]
    return g.rename(columns={"mean": "mean_beta"})[["s_bin", "s_lo", "s_hi", "a_bin", "a_lo", "a_hi", "mean_beta",
                                                    "count"]]


def sv_tables(sv: pd.DataFrame, n_s: int = 20, n_a: int = 10) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(bin table, gain table) for every (draft, companion, target), per workload and pooled as ``all``."""
    bins, gains = [], []
    if sv is None or sv.empty:
        return pd.DataFrame(columns=BIN_COLUMNS), pd.DataFrame(columns=GAIN_COLUMNS)
    groups = [("all", sv)] + ([(w, g) for w, g in sv.groupby("workload", sort=False)]
                               if sv["workload"].nunique() > 1 else [])
    for wl, part in groups:
        for (d, c, t), g in part.groupby(["draft", "companion", "target"], sort=False):
            res = information_gain(g["beta"], g["s"], g["a"], n_s, n_a)
            key = dict(workload=wl, draft=d, companion=c, target=t)
            gains.append({**key, **{k: res[k] for k in GAIN_COLUMNS if k in res}})
            bt = bin_table(g["beta"], g["s"], g["a"], res["s_edges"], res["a_edges"])
            bt = pd.concat([pd.DataFrame([key] * len(bt)), bt.reset_index(drop=True)], axis=1)
            bins.append(bt)
    return pd.concat(bins, ignore_index=True)[BIN_COLUMNS], pd.DataFrame(gains, columns=GAIN_COLUMNS)
