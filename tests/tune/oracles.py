"""Renewal-reward forms of sd, naive-cos and two-model cos: E[tokens] and E[seconds] of one round, derived by hand.

They are test oracles: the cost model prices every method by running its step function in the simulator, and
these independent derivations check it (and reduce to the paper's closed forms, Thm 3.1 / 3.6 and SD with bonus,
where those are exact). Latencies: ``L[i](k)`` = seconds of one forward of model i feeding k tokens per row.
"""
from __future__ import annotations

import numpy as np

from spectune.tune.closed_forms import block_accepted, block_tokens


def round_sd(S: np.ndarray, gamma: int, L: list, uses: tuple[int, ...]) -> tuple[float, float]:
    """(E[tokens], E[seconds]) of one SD round of proposer 0 (see ``spectune/decoding/methods/sd.py``).

    Proposer: gamma forwards; its first feeds 2 tokens after a full accept when it is not in r (the last draft
    and the bonus), else 1. Every model in r scores gamma + 1 positions in one forward (the proposer re-scores).
    Tokens: accepted + 1 (recovered or bonus).
    """
    full = float(S[gamma])
    first = L[0](1) if 0 in uses else (1 - full) * L[0](1) + full * L[0](2)
    t = first + (gamma - 1) * L[0](1) + sum(L[i](gamma + 1) for i in uses)
    return 1.0 + block_accepted(S, gamma), t


def round_naive(S: np.ndarray, gamma: int, L: list, uses: tuple[int, ...]) -> tuple[float, float]:
    """(E[tokens], E[seconds]) of one Naive-CoS round (``methods/cos.py`` without bonus): proposer 0 drafts gamma
    (gamma forwards of 1 token), every other model in r scores in one forward of gamma + 1 tokens after a
    rejection (the recovered token too) or gamma after a full accept. No bonus token."""
    full = float(S[gamma])
    t = gamma * L[0](1) + sum((1 - full) * L[i](gamma + 1) + full * L[i](gamma) for i in uses if i != 0)
    return block_tokens(S, gamma), t


def cos2(Sq: np.ndarray, Sp: np.ndarray, gq: int, gp: int, L: list, uses: tuple[int, ...] = (0, 1)
         ) -> tuple[float, float]:
    """(E[tokens], E[seconds]) of one renewal cycle of two-model CoS (``methods/cos.py`` with bonus; model 0 = q).

    r over both models (``uses`` = (0, 1)): a cycle starts with a fresh q block (gq forwards of q, one forward of
    p over gq + 1 tokens); every full accept hands the turn over: the scorer's bonus token starts its own block
    (p: gp - 1 more forwards of p, then q scores gp + 1 tokens; q after a p block: gq - 1 forwards, then p
    scores gq + 1 tokens); any rejection ends the cycle. r = p alone (``uses`` = (1,)): p's block is p's own
    sample (always accepted) and q does not score it; q's next draft catches up gp + 1 tokens.
    With gamma_q = gamma_p = 1, i.i.d. alpha and constant latencies this equals Thm 3.6; for longer blocks
    Thm 3.6 is the paper's simplification, and this renewal follows the loop (checked against the Monte Carlo
    simulation in the tests).
    """
    Aq, Ap = float(Sq[gq]), float(Sp[gp])
    Eq, Ep = block_tokens(Sq, gq), block_tokens(Sp, gp)
    if 0 not in uses:
        tokens = Eq + Aq * gp
        seconds = ((gq - 1) * L[0](1) + (1 - Aq) * L[0](1) + Aq * L[0](gp + 1) + L[1](gq + 1)
                   + Aq * (gp - 1) * L[1](1))
        return tokens, seconds
    x = Aq * Ap
    c_p = (gp - 1) * L[1](1) + L[0](gp + 1)
    c_q = (gq - 1) * L[0](1) + L[1](gq + 1)
    if x >= 1.0 - 1e-12:  # every proposal always accepted: the alternating steady state
        return Eq + Ep, c_p + c_q
    c_fresh = gq * L[0](1) + L[1](gq + 1)
    tokens = (Eq + Aq * Ep) / (1.0 - x)
    seconds = c_fresh + (Aq * c_p + x * c_q) / (1.0 - x)
    return tokens, seconds
