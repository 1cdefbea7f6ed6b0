"""``naive-cos`` and ``cos``: Collaborative decoding via Speculation (CoS paper, §3, Algorithms 1-2).

The default proposer, model 0, drafts a block (the draft-length policy says how many). Then, one forward at a time,
the model with the fewest cached distributions scores every pending token, and whatever every model in r has
scored is verified against r with each proposal's own q (Naive-CoS, Algorithm 1; no bonus token).

``cos`` adds the alternate proposal framework: after a fully verified block, the model that scored last samples
a bonus token from its own distribution and drafts gamma_k - 1 more; that block is verified by the models that
have not scored it yet (with n models, Algorithm 2). Any rejection hands the turn back to model 0.
"""
from __future__ import annotations

from spectune.decoding.state_machine import Machine, SequenceState, Step


def _step(m: Machine, s: SequenceState, bonus: bool) -> Step:
    if not s.pending:
        # 1. the default proposer drafts a fresh block: a new round
        m.new_round(s)
        yield from m.draft(s, 0, s.draft_len)
        return
    # 2. the model with the fewest cached distributions scores every pending token in one forward
    k = min(m.scorers, key=lambda i: (m.n(s, i), i))
    yield from m.feed(s, k, s.end)
    # 3. verify what every model in r has now scored; a rejection ends the turn (model 0 takes over)
    if not m.verify(s) or s.done:
        return
    # 4. cos: k's next-token distribution gives a bonus proposal, followed by gamma_k - 1 drafts
    if bonus and (yield from m.draft(s, k, m.gamma[k])) > 0:
        s.stats.bonus_tokens += 1
        m.verify(s)  # models in r that already scored these positions (e.g. r = target = k)


def step_naive(m: Machine, s: SequenceState) -> Step:
    return _step(m, s, bonus=False)


def step_cos(m: Machine, s: SequenceState) -> Step:
    return _step(m, s, bonus=True)
