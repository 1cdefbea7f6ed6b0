"""``LatencyModel``: L(model, b, k, ctx) in seconds from a profile's latency table.

Multilinear interpolation of the measured medians (log2 b, k, ctx) inside the grid (a k not timed at some batch
size is first filled in linearly from the timed k around it) and a non-negative linear regression
(scikit-learn) on the features [1, b, b*k, b*ctx, b*k*ctx, k] outside it, every coefficient the constant's
included non-negative, so a prediction never falls as b, k or ctx grow and never grows faster than linearly
(a free intercept let a table timed at one batch size and one context, whose features are collinear, fit -1e12 s
of intercept against +1e12 s a row: 3e12 s at b = 2); ``errors`` reports the regression's relative error on the
grid. A table timed at one context only (an engine profile: ``calibrate --engine``) is read
as the same at every context. Pure numpy / pandas / scikit-learn: reading a profile needs no torch.

``monotone_k`` (eager tables): the medians along k at each (batch, ctx) are first replaced by their isotonic
(non-decreasing) least-squares fit, ``isotonic``: an eager forward over more new tokens never costs less, while a
calibration's per-k cells carry a few percent of noise, which at batch 1 is as large as the real step between
k = 1 and k = 3 and made short verifications look dearer than long ones (the Zen 4 profile of 2026-11-25 read
L(1) 44.5 > L(3) 42.2 ms where the runtime paid 41.0 < 45.2; priced from it, the confidence policy, which verifies
short blocks, came out level with fixed gamma = 2 and was measured 10 % ahead: docs/benchmarks.md, Part 0d). Past
the largest timed k (inside the grid's batch sizes and contexts) such a table is never read below its value at
that k. The compiled runtime's tables stay as measured: its padded buckets make k = 1 really dearer than k = 2-4
on a CPU.

Rows at k = 0 are a model's *turn* cost: the fixed seconds an engine pays once in a step before that model's
forwards, whatever their number (vLLM's draft: its proposer's set-up, measured as the part of a draft step that
does not grow with K). ``L(model, b, 0)`` reads them (linear in log2 b, held past the ends), 0 for a model without
them (spectune's runtime has no such cost apart from its forwards); they are not part of the k grid or its fit.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd


def _features(b, k, ctx) -> np.ndarray:
    b, k, ctx = (np.asarray(x, dtype=float) for x in (b, k, ctx))
    return np.stack([np.ones_like(b), b, b * k, b * ctx / 1000.0, b * k * ctx / 1000.0, k], axis=-1)


def isotonic(y: np.ndarray) -> np.ndarray:
    """The non-decreasing sequence closest to ``y`` in least squares (scikit-learn's pool adjacent violators: each
    run of values that decreases is replaced by its mean)."""
    from sklearn.isotonic import isotonic_regression

    y = np.asarray(y, dtype=float)
    return isotonic_regression(y) if y.size else y


class LatencyModel:
    """L(model, b, k, ctx) in seconds from a latency table (see the module docstring)."""

    def __init__(self, lat: pd.DataFrame, monotone_k: bool = False):
        from sklearn.linear_model import LinearRegression

        self.monotone_k = monotone_k
        self.grids: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
        self.regs: dict[str, Any] = {}
        self.errors: dict[str, dict[str, float]] = {}
        ok = lat[lat["feasible"].astype(bool)]
        turn = ok[ok["k"] == 0]
        self.turns = {name: (np.log2(g["batch"].to_numpy(float)), g["median_s"].to_numpy(float))
                      for name, g in turn.sort_values("batch").groupby("model", sort=False)}
        ok = ok[ok["k"] > 0]
        for name, g in ok.groupby("model", sort=False):
            bs, ks, cs = (np.array(sorted(g[c].unique()), dtype=float) for c in ("batch", "k", "ctx"))
            cube = np.full((len(bs), len(ks), len(cs)), np.nan)
            for r in g.itertuples():
                cube[np.searchsorted(bs, r.batch), np.searchsorted(ks, r.k), np.searchsorted(cs, r.ctx)] = r.median_s
            for i in range(len(bs)):  # per batch and context: an eager table's timed k made non-decreasing, then
                for c in range(len(cs)):  # untimed k linear between the timed k around them
                    col = cube[i, :, c]
                    ok = ~np.isnan(col)
                    if monotone_k:
                        col[ok] = isotonic(col[ok])
                    if 2 <= ok.sum() < len(ks):
                        inside = ~ok & (ks > ks[ok][0]) & (ks < ks[ok][-1])
                        col[inside] = np.interp(ks[inside], ks[ok], col[ok])
            self.grids[name] = (bs, ks, cs, cube)
            y = g["median_s"].to_numpy(float)
            X = _features(g["batch"], g["k"], g["ctx"])
            reg = LinearRegression(positive=True, fit_intercept=False)
            reg.fit(X, y, sample_weight=1.0 / np.maximum(y, 1e-9) ** 2)
            self.regs[name] = reg
            rel = np.abs(reg.predict(X) - y) / np.maximum(y, 1e-12)
            self.errors[name] = {"points": int(len(y)), "median_rel_error": float(np.median(rel)),
                                 "max_rel_error": float(np.max(rel)), "mean_rel_error": float(np.mean(rel))}

    @property
    def models(self) -> list[str]:
        return list(self.grids)

    def _interp(self, name: str, b: float, k: float, ctx: float) -> float | None:
        bs, ks, cs, cube = self.grids[name]

        def bracket(axis: np.ndarray, x: float, log: bool = False, flat: bool = False):
            if flat and len(axis) == 1:  # a table timed at one context says nothing of others: held there
                return [(0, 1.0)]
            if x < axis[0] - 1e-9 or x > axis[-1] + 1e-9:
                return None
            if len(axis) == 1:
                return [(0, 1.0)]
            i = int(np.clip(np.searchsorted(axis, x, side="right") - 1, 0, len(axis) - 2))
            lo, hi, xx = axis[i], axis[i + 1], x
            if log:
                lo, hi, xx = math.log2(lo), math.log2(hi), math.log2(x)
            w = (xx - lo) / (hi - lo)
            return [(i, 1.0 - w), (i + 1, w)]

        parts = [bracket(bs, b, log=True), bracket(ks, k), bracket(cs, ctx, flat=True)]
        if any(p is None for p in parts):
            return None
        total = 0.0
        for i, wi in parts[0]:
            for j, wj in parts[1]:
                for c, wc in parts[2]:
                    w = wi * wj * wc
                    if w == 0:
                        continue
                    v = cube[i, j, c]
                    if math.isnan(v):
                        return None
                    total += w * v
        return total

    def __call__(self, name: str, b: float, k: float, ctx: float | None = None) -> float:
        """Latency in seconds of one forward of ``name`` over ``k`` new tokens for ``b`` sequences at ``ctx``."""
        if name not in self.grids:
            raise KeyError(f"no feasible latency measurements for model '{name}'")
        if k == 0:
            xs, ys = self.turns.get(name, (None, None))
            return 0.0 if xs is None else float(np.interp(math.log2(max(float(b), 1.0)), xs, ys))
        if ctx is None:
            cs = self.grids[name][2]
            ctx = float(cs[len(cs) // 2])
        v = self._interp(name, float(b), float(k), float(ctx))
        if v is not None:
            return float(v)
        reg = float(self.regs[name].predict(_features([b], [k], [ctx]))[0])
        ks = self.grids[name][1]
        if self.monotone_k and k > ks[-1]:  # the regression is not tied to the grid's last column: floor it there
            edge = self._interp(name, float(b), float(ks[-1]), float(ctx))
            if edge is not None:
                return max(reg, edge)
        return reg
