"""Acceptance traces are exact: every beta / alpha / s / a is recomputed from full (cache-free) forwards."""
import pandas as pd
import pytest
import torch

from spectune.calibrate.acceptance import AcceptanceSettings, combination_sets, trace_prompt

PROMPT = [3, 7, 11, 5]


def full_probs(model, ids):
    """Distribution of the next token after ``ids`` from one forward over the whole sequence (no cache)."""
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([ids])).logits[0, -1].float()
    return torch.softmax(logits, -1)


def test_greedy_traces_match_full_forwards(tiny_models):
    names = ["s", "m", "l"]
    mods = [tiny_models[n].model for n in names]
    st = AcceptanceSettings(gamma_max=3, states_per_prompt=4, temperature=0.0)
    tr, sv = trace_prompt(mods, names, "target", PROMPT, st, "w", 0, eos_token_id=None)
    tr, sv = pd.DataFrame(tr), pd.DataFrame(sv)
    assert set(tr["state"]) == {0, 1, 2, 3}
    assert len(sv) == 6 * 4 * 3  # 6 ordered triples x 4 states x 3 positions
    # greedy with r = the last model: the trajectory is that model's greedy path
    path = list(PROMPT)
    for _ in range(4 * (st.gamma_max + 1)):
        path.append(int(full_probs(mods[2], path).argmax()))
    t = len(PROMPT)
    checked = 0
    for state in range(4):
        prefix = path[:t]
        for p, pname in enumerate(names):
            rows = tr[(tr.state == state) & (tr.proposer == pname)]
            draft = rows[rows.models == "s,m,l"].sort_values("pos")["token"].tolist()
            for j, x in enumerate(draft):
                q = full_probs(mods[p], prefix + draft[:j])
                assert x == int(q.argmax())  # greedy draft from the proposer's own distribution
                for _, row in rows[rows.pos == j].iterrows():
                    members = [names.index(m) for m in row.models.split(",")]
                    r = full_probs(mods[members[-1]], prefix + draft[:j])  # target: r is the last member
                    assert row.beta_soft == pytest.approx(float(torch.clamp(r[x] / q[x], max=1)), abs=1e-4)
                    assert row.alpha_soft == pytest.approx(float(torch.minimum(q, r).sum()), abs=1e-4)
                    assert row.beta == float(x == int(r.argmax()))
                    assert row.alpha == float(int(q.argmax()) == int(r.argmax()))
                    checked += 1
                for c, tg in [(i, k) for i in range(3) for k in range(3) if len({p, i, k}) == 3]:
                    srow = sv[(sv.state == state) & (sv.draft == pname) & (sv.companion == names[c])
                              & (sv.target == names[tg]) & (sv.pos == j)].iloc[0]
                    qc = full_probs(mods[c], prefix + draft[:j])
                    pt = full_probs(mods[tg], prefix + draft[:j])
                    assert srow.s == pytest.approx(float(torch.minimum(q, qc).sum()), abs=1e-4)
                    assert srow.a == pytest.approx(float(torch.clamp(qc[x] / q[x], max=1)), abs=1e-4)
                    assert srow.beta == float(x == int(pt.argmax()))
        # the next state: proposer 0's accepted prefix plus one token of r
        own = tr[(tr.state == state) & (tr.proposer == "s") & (tr.models == "s,m,l")].sort_values("pos")
        lead = 0
        for b in own["beta"]:
            if b != 1.0:
                break
            lead += 1
        t += lead + 1
    assert checked > 50


def test_sampled_weighted_ensemble_bound_and_reproducible(tiny_models):
    names = ["s", "l"]
    mods = [tiny_models[n].model for n in names]
    st = AcceptanceSettings(gamma_max=4, states_per_prompt=3, temperature=1.0, seed=5)
    tr1, _ = trace_prompt(mods, names, "we:0.5,0.5", PROMPT, st, "w", 2, eos_token_id=None)
    tr2, _ = trace_prompt(mods, names, "we:0.5,0.5", PROMPT, st, "w", 2, eos_token_id=None)
    assert tr1 == tr2
    df = pd.DataFrame(tr1)
    we = df[df.combination == "we:0.5,0.5"]
    assert (we.beta == we.beta_soft).all() and (we.alpha == we.alpha_soft).all()
    # Collaborative decoding via speculation, Thm 3.2: with r = 0.5 q + 0.5 p, alpha >= 0.5 (either proposer)
    assert (we.alpha >= 0.5 - 1e-6).all() and (we.beta >= 0.5 - 1e-6).all()
    # pair rows (r = target = l): the target proposing against itself always accepts
    tgt = df[(df.combination == "target") & (df.proposer == "l")]
    assert len(tgt) and (tgt.beta == 1.0).all()


def test_combination_sets_dedupe():
    assert [(c.members, c.comb.spec) for c in combination_sets(2, "target")] == [((0, 1), "target")]
    sets = [(c.members, c.comb.spec) for c in combination_sets(3, "we:0.2,0.3,0.5")]
    assert sets == [((0, 1, 2), "we:0.2,0.3,0.5"), ((0, 1), "target"), ((0, 2), "target"), ((1, 2), "target")]
