"""``standard``: collaborative decoding without speculation. Every model in r runs one forward per output token,
and the token is an exact sample from r."""
from __future__ import annotations

from spectune.decoding.state_machine import Machine, SequenceState, Step


def step(m: Machine, s: SequenceState) -> Step:
    m.new_round(s)
    # 1. every model in r scores the newest position; 2. sample from r and commit
    for i in m.uses:
        yield from m.feed(s, i, s.end)
    m.sample(s)
