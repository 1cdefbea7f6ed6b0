"""Closed forms named after the papers' results: floats or numpy arrays in, floats or arrays out; no models, no
profiles. ``speedup_thm31`` (Naive-CoS, CoS Theorem 3.1), ``speedup_thm36`` (the alternate proposal framework,
Theorem 3.6), ``speedup_sd`` (speculative decoding with its bonus token), ``tokens_per_block`` and friends, and the
trace-based survival curve ``survival_from_betas`` (P[first i proposals accepted] = mean over drafts of
prod_{j<i} beta_j, not alpha^i). They are the test oracles of the simulator, and bench's theorem columns; the cost
model itself prices by simulation (``spectune.tune.cost``).
"""
from __future__ import annotations

import numpy as np


def _geom(alpha, n):
    """sum_{i=0}^{n-1} alpha^i = (1 - alpha^n) / (1 - alpha), with the alpha -> 1 limit n."""
    a = np.asarray(alpha, dtype=float)
    n = np.asarray(n, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(np.isclose(a, 1.0), n, (1.0 - a ** n) / (1.0 - a))
    return out if out.ndim else float(out)


def tokens_per_round_sd(alpha, gamma):
    """E[tokens per SD round] = (1 - alpha^(gamma+1)) / (1 - alpha) (accepted drafts + recovered/bonus token)."""
    return _geom(alpha, np.asarray(gamma) + 1)


def tokens_per_block(alpha, gamma):
    """E[tokens per block without a bonus token] = (1 - alpha^gamma) / (1 - alpha) (Naive-CoS, Thm 3.1)."""
    return _geom(alpha, gamma)


def expected_accepted_iid(alpha, gamma):
    """E[accepted proposals | gamma] under i.i.d. acceptance: sum_{i=1}^{gamma} alpha^i."""
    a = np.asarray(alpha, dtype=float) if np.ndim(alpha) else float(alpha)
    return a * _geom(alpha, gamma)


def speedup_sd(alpha, gamma, c):
    """Speculative decoding with its bonus token over the target alone (Leviathan et al.):
    (1 - alpha^(gamma+1)) / ((1 - alpha)(1 + gamma c))."""
    return tokens_per_round_sd(alpha, gamma) / (1.0 + np.asarray(gamma) * np.asarray(c))


def speedup_thm31(alpha, gamma, c):
    """Naive-CoS over standard collaborative decoding (Thm 3.1):
    (1 - alpha^gamma)(1 + c) / ((1 - alpha)(1 + c gamma))."""
    return tokens_per_block(alpha, gamma) * (1.0 + np.asarray(c)) / (1.0 + np.asarray(c) * np.asarray(gamma))


def speedup_thm36(alpha, gamma_q, gamma_p, c):
    """Alternate proposal framework over standard collaborative decoding (Thm 3.6):
    (1 - alpha^gamma_q)(1 + c) / ((1 - alpha)(1 + c gamma_q - alpha^gamma_p c))."""
    a, c = np.asarray(alpha, dtype=float), np.asarray(c, dtype=float)
    den = 1.0 + c * np.asarray(gamma_q) - a ** np.asarray(gamma_p) * c
    out = tokens_per_block(a, gamma_q) * (1.0 + c) / den
    return out if np.ndim(out) else float(out)


def survival_from_betas(betas: np.ndarray, upto: int) -> np.ndarray:
    """S[i] = P[the first i proposals of a draft are accepted], i = 0..upto, from calibrated draft traces.

    ``betas``: [n_drafts, gamma_max] acceptance probability of each drafted token (greedy: 0/1). S[i] is the
    mean over drafts of prod_{j<i} beta_j, so position-dependence and within-draft correlation are kept.
    """
    b = np.asarray(betas, dtype=float)
    if b.ndim != 2 or b.shape[0] == 0:
        raise ValueError("betas must be a non-empty [n_drafts, gamma_max] array")
    if upto > b.shape[1]:
        raise ValueError(f"gamma {upto} exceeds the calibrated gamma_max {b.shape[1]}")
    s = np.ones(upto + 1)
    s[1:] = np.cumprod(b[:, :upto], axis=1).mean(axis=0)
    return s


def survival_iid(alpha: float, upto: int) -> np.ndarray:
    return float(alpha) ** np.arange(upto + 1)


def block_tokens(S: np.ndarray, gamma: int) -> float:
    """E[tokens of a block of ``gamma`` proposals, no bonus] = sum_{i<gamma} S[i] (accepted + recovered)."""
    return float(np.sum(S[:gamma]))


def block_accepted(S: np.ndarray, gamma: int) -> float:
    """E[accepted proposals | gamma] = sum_{i=1}^{gamma} S[i]."""
    return float(np.sum(S[1 : gamma + 1]))
