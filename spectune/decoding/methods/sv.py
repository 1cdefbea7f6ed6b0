"""``sv``: Speculative Verification (SV paper, §4-5; the math is in ``spectune/decoding/sv_policy.py``).

Model 0 drafts gamma_0 tokens and model 1, the companion, scores them in one forward. From the companion's view
of each draft, calibrated bins predict its acceptance, and the goodput-optimal verification length k* (a batch:
the greedy scheduler, over every row at once) decides how many drafts the models in r verify; the rest are
discarded unverified. k* depends only on the draft and the companion, so the output is still exactly r.
"""
from __future__ import annotations

from spectune.decoding.state_machine import SV_REQUEST, Machine, SequenceState, Step
from spectune.decoding.sv_policy import expected_tokens


def step(m: Machine, s: SequenceState) -> Step:
    m.new_round(s)
    # 1. the draft proposes gamma_0 tokens; 2. the companion scores them in one forward
    yield from m.draft(s, 0, m.gamma[0])
    yield from m.feed(s, 1, s.end)
    # 3. predicted acceptance per draft -> verification length k (the batch scheduler answers)
    preds = m.B.sv_predict(s) if s.pending else []
    k = yield (SV_REQUEST, preds, None)
    m.log("sv", s.row, k)
    s.stats.verified_len_hist[k] += 1
    s.stats.predicted_accepted += expected_tokens(preds, k) - 1
    # 4. drafts past k are discarded before verification (this depends only on draft and companion)
    j0 = s.n_committed
    if k < len(s.pending):
        s.stats.truncated_tokens += len(s.pending) - k
        m.truncate(s, j0 + k)
    # 5. the models in r score the k drafts (+ the next position) in one forward each; verify; bonus from r
    for i in m.uses:
        yield from m.feed(s, i, s.end)
    ok = m.verify(s)
    s.stats.realised_accepted += s.n_committed - j0 - (0 if ok else 1)
    if ok and not s.done:
        s.stats.bonus_tokens += k > 0
        m.sample(s)
