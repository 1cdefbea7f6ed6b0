"""Speculative Verification (SV): companion-guided, goodput-optimal verification length.

Spec: speculative-verification paper §4-5. A draft proposes gamma tokens; a companion model scores them in one
forward. For every drafted token x with draft distribution q and companion distribution c we observe

    s = sum_v min(q(v), c(v))          (draft-companion similarity)
    a = min(1, c(x) / q(x))            (the token's acceptance probability were c the target)

and look up the calibrated bin (s, a) -> mean beta, the predicted probability p that the target accepts x.
Verifying the first k drafts then yields, in expectation, E(k) = 1 + sum_{i<=k} prod_{j<=i} p_j tokens (the
1 is the recovered or bonus token every verification produces), at a cost T_fixed + L(b, k + 1), where L is the
verifier's measured latency for k + 1 new tokens at batch size b. SV verifies the k* that maximises that
goodput; drafts past k* are discarded unverified. Exactness holds because k* depends only on the draft and
the companion, never on the target's randomness.

Batches (the paper's greedy scheduler): start with k_b = 0 for every sequence; repeatedly add the drafted token
(of any sequence, always the next one in that sequence) with the largest gain prod_{j<=k_b+1} p_{b,j}, while
the predicted batch goodput sum_b E_b(k_b) / (T_fixed + L(B, n / B)) improves, where n = sum_b (k_b + 1) is the
number of verified positions: as in the paper, verification cost is a function of the tokens verified, here
read off the calibrated L(b, k) at the batch's mean length. (spectune's ragged runtime pads each forward to its
longest row, so for skewed schedules this under-states the cost; the realised goodput is what the stats and
benchmarks report.)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from typing import TYPE_CHECKING

import numpy as np

from spectune.errors import ProfileError

if TYPE_CHECKING:  # the features take tensors; importing this module needs no torch (the cost model reads it)
    import torch


def features(q: torch.Tensor, c: torch.Tensor, token: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(s, a) of drafted tokens. q, c: [..., V] draft / companion distributions; token: [...]."""
    s = q.minimum(c).sum(dim=-1)
    qx = q.gather(-1, token.unsqueeze(-1)).squeeze(-1)
    cx = c.gather(-1, token.unsqueeze(-1)).squeeze(-1)
    return s, (cx / qx).clamp(max=1.0)


def expected_tokens(p: Sequence[float], k: int) -> float:
    """E(k) = 1 + sum_{i<=k} prod_{j<=i} p_j: tokens produced when the first k drafts are verified."""
    return 1.0 + float(np.cumprod(np.asarray(p[:k], dtype=float)).sum()) if k > 0 else 1.0


@dataclass
class SVPolicy:
    """Bins -> predicted acceptance, and the verification-length decision."""

    s_edges: np.ndarray  # [n_s + 1] increasing
    a_edges: np.ndarray  # [n_a + 1] increasing
    table: np.ndarray  # [n_s, n_a] mean beta per bin; NaN where the calibration saw no token
    fallback: float  # mean beta over all calibrated tokens
    latency: Callable[[int, float], float]  # L(batch, k): seconds of the verification forward, k tokens per row
    fixed_seconds: Callable[[int], float]  # T_fixed(batch): drafting + companion time of one step

    def __post_init__(self) -> None:
        # an empty bin borrows the mean of its s row, else the global mean
        t = self.table.copy()
        for i in range(t.shape[0]):
            seen = np.isfinite(t[i])
            if seen.any():
                t[i, ~seen] = t[i, seen].mean()
        self.table = np.where(np.isfinite(t), t, self.fallback)

    def predict(self, s: Sequence[float], a: Sequence[float]) -> np.ndarray:
        """Predicted acceptance probability of each drafted token from its (s, a) bin."""
        i = np.clip(np.searchsorted(self.s_edges, np.asarray(s, dtype=float), side="right") - 1, 0,
                    len(self.s_edges) - 2)
        j = np.clip(np.searchsorted(self.a_edges, np.asarray(a, dtype=float), side="right") - 1, 0,
                    len(self.a_edges) - 2)
        return self.table[i, j]

    def schedule(self, preds: Sequence[Sequence[float]]) -> list[int]:
        """Greedy batch scheduler: how many drafts of each sequence to verify (0 <= k_b <= len(preds[b]))."""
        b = len(preds)
        k = [0] * b
        prefix = [1.0] * b  # prod_{j <= k_b} p_{b,j}
        total = float(b)  # sum_b E_b(k_b) with every k_b = 0
        best = total / (self.fixed_seconds(b) + self.latency(b, 1))
        while True:
            cands = [(prefix[i] * preds[i][k[i]], i) for i in range(b) if k[i] < len(preds[i])]
            if not cands:
                return k
            gain, i = max(cands)
            verified = sum(k) + b + 1  # positions verified after adding this token: sum_b (k_b + 1)
            goodput = (total + gain) / (self.fixed_seconds(b) + self.latency(b, verified / b))
            if goodput <= best:
                return k
            best, total = goodput, total + gain
            prefix[i] *= preds[i][k[i]]
            k[i] += 1

    @classmethod
    def from_profile(cls, profile, draft: str, companion: str, verifiers: Sequence[str], gamma: int) -> "SVPolicy":
        """Bins of (draft, companion, last verifier) and latencies from a calibrated ``Profile``."""
        target = verifiers[-1]
        try:
            t = profile.sv_bins(draft, companion, target)
        except (KeyError, AttributeError):
            t = None
        if t is None or len(t) == 0:
            raise ProfileError(
                f"sv needs companion bins for ({draft}, {companion}, {target}) and the profile has none: run "
                f"spectune calibrate --models {draft},{companion},{target}"
            )
        s_edges = np.unique(np.concatenate([t["s_lo"].to_numpy(float), t["s_hi"].to_numpy(float)]))
        a_edges = np.unique(np.concatenate([t["a_lo"].to_numpy(float), t["a_hi"].to_numpy(float)]))
        table = np.full((len(s_edges) - 1, len(a_edges) - 1), np.nan)
        for row in t.itertuples():
            table[np.searchsorted(s_edges, row.s_lo), np.searchsorted(a_edges, row.a_lo)] = row.mean_beta
        fallback = float(np.average(t["mean_beta"], weights=t["count"]))
        lat = profile.latency_model  # build the interpolator once
        memo: dict[tuple[str, int, int], float] = {}

        def L(model: str, b: int, k: float) -> float:
            key = (model, b, round(k, 2))
            if key not in memo:
                memo[key] = float(lat(model, b, key[2]))
            return memo[key]

        return cls(
            s_edges, a_edges, table, fallback,
            latency=lambda b, k: sum(L(v, b, k) for v in verifiers),
            fixed_seconds=lambda b: gamma * L(draft, b, 1) + L(companion, b, gamma + 1),
        )
