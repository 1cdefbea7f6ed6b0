"""``sd``: speculative decoding with r as a black-box target (Leviathan et al.).

The default proposer proposes a block: model 0 drafts (the draft-length policy says how many), or the lookup
proposer (n-gram prompt lookup) copies tokens from the context, or (``ngram+model``) the lookup where it matches
and model 0 where it misses. Every model in r then scores the block in one
forward each (model 0 re-scores it from the last committed token, as a separate target model would), the block is
verified, and after a fully accepted block (or a lookup miss) one more token is sampled from r: the bonus token.
"""
from __future__ import annotations

from spectune.decoding.state_machine import Machine, SequenceState, Step


def step(m: Machine, s: SequenceState) -> Step:
    m.new_round(s)
    # 1. propose
    if m.lookup_proposer:
        m.lookup(s)
    drafting = not m.lookup_proposer or (m.fallback and not s.pending)
    if drafting:
        yield from m.draft(s, 0, s.draft_len)
    # 2. the black-box target scores the block: one forward per model in r
    for i in m.uses:
        if i == 0 and drafting:
            m.rewind(s, 0, s.n_committed - 1)
        yield from m.feed(s, i, s.end)
    # 3. verify; 4. a bonus token from r when every proposal was accepted (a lookup miss: the one token from r)
    proposed = bool(s.pending)
    if m.verify(s) and not s.done:
        s.stats.bonus_tokens += proposed
        m.sample(s)
