"""Acceptance traces are exact: every beta / alpha / s / a is recomputed from full (cache-free) forwards."""
import pandas as pd
import pytest
import torch

from spectune.calibration.acceptance import (AcceptanceSettings, PromptUnit, batches, combination_sets, group_sizes,
                                            trace_batch, trace_prompt)

PROMPT = [3, 7, 11, 5]


def full_probs(model, ids):
    """Distribution of the next token after ``ids`` from one forward over the whole sequence (no cache)."""
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([ids])).logits[0, -1].float()
    return torch.softmax(logits, -1)


def test_greedy_traces_match_full_forwards(tiny_models):
    names = ["s", "m", "l"]
    mods = [tiny_models[n].model for n in names]
    st = AcceptanceSettings(gamma_max=3, states_per_prompt=4, temperature=0.0, state_stride=1)  # one step a state
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
                    assert row.q == pytest.approx(float(q[x]), abs=1e-4)  # what a confidence policy reads
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
    we = df[(df.combination == "we:0.5,0.5") & df.proposer.isin(names)]
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


def _key(rows):
    return [(r["workload"], r["prompt"], r["state"], r["proposer"] if "proposer" in r else r["draft"],
             r.get("models", r.get("companion")), r.get("combination", r.get("target")), r["pos"], r["token"])
            for r in rows]


def _close(rows_a, rows_b):
    assert _key(rows_a) == _key(rows_b)
    for a, b in zip(rows_a, rows_b):
        for col in ("beta", "alpha", "beta_soft", "alpha_soft", "s", "a"):
            if col in a:
                assert a[col] == pytest.approx(b[col], abs=1e-4), col


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_batch_of_prompts_traces_as_each_prompt_alone(tiny_models, temperature):
    """Ragged prompts traced side by side give each prompt's own rows (same random stream, same arithmetic),
    including a prompt whose trajectory ends at end-of-sequence while the others go on."""
    names = ["s", "m", "l"]
    mods = [tiny_models[n].model for n in names]
    st = AcceptanceSettings(gamma_max=3, states_per_prompt=3, temperature=temperature, seed=1, state_stride=1)
    units = [PromptUnit("a", 0, (3, 7, 11, 5)), PromptUnit("a", 1, (9, 2)), PromptUnit("b", 0, (4, 4, 8, 1, 6, 2, 30))]
    # greedy: end-of-sequence = the first token prompt a/1 commits (the target proposing against itself is r's token)
    alone, _ = trace_prompt(mods, names, "target", units[1].ids, st, "a", 1)
    eos = next(r["token"] for r in alone if r["state"] == 0 and r["proposer"] == "l" and r["pos"] == 0)
    tr, sv = trace_batch(mods, names, "target", units, st, eos_token_id=eos)
    want_tr, want_sv = [], []
    for u in units:
        t1, s1 = trace_prompt(mods, names, "target", u.ids, st, u.workload, u.index, eos_token_id=eos)
        want_tr += t1
        want_sv += s1
    order = lambda rows: sorted(rows, key=lambda r: (r["workload"], r["prompt"], r["state"]))  # noqa: E731
    _close(order(tr), order(want_tr))
    _close(order(sv), order(want_sv))
    if temperature == 0:
        assert {r["state"] for r in tr if (r["workload"], r["prompt"]) == ("a", 1)} == {0}  # ended at eos
    assert {r["state"] for r in tr if r["workload"] == "b"} == {0, 1, 2}


def test_prompt_batches_are_even():
    units = [PromptUnit("w", i, (1,)) for i in range(20)]
    assert [len(g) for g in batches(units, 16)] == [10, 10]
    assert [len(g) for g in batches(units[:12], 16)] == [12]
    assert [len(g) for g in batches(units[:3], 1)] == [1, 1, 1]
    assert [u.index for g in batches(units, 7) for u in g] == list(range(20))
    assert group_sizes(20, 7) == [7, 7, 6] and group_sizes(0, 16) == [] and batches([], 16) == []


def test_lookups_are_traced_along_r_and_verified_exactly(tiny_models):
    """Lookup rows: at each state the lookup proposes what the decoder's would from prompt + committed (r's greedy
    path here), every proposed token's beta is 1[x == argmax r] (q is a point mass), q = 1; positions it did not
    reach are token -1 with probabilities 0; r = each model alone and the user's combination."""
    from spectune.decoding.ngram import find_continuation

    names = ["s", "l"]
    mods = [tiny_models[n].model for n in names]
    prompt = [3, 7, 11, 5, 3, 7, 11, 5, 3]  # repeats: suffixes hit
    st = AcceptanceSettings(gamma_max=4, states_per_prompt=4, temperature=0.0, lookups=("ngram:1,2", "ngram:3,4"),
                            state_stride=1)
    tr = pd.DataFrame(trace_prompt(mods, names, "we:0.5,0.5", prompt, st, "w", 0, eos_token_id=None)[0])
    path = list(prompt)  # r = we over both at T=0: argmax of 0.5 p_s + 0.5 p_l
    for _ in range(4 * (st.gamma_max + 1)):
        path.append(int((full_probs(mods[0], path) + full_probs(mods[1], path)).argmax()))
    t, hits = len(prompt), 0
    for state in range(4):
        for spec, (n_min, n_max) in (("ngram:1,2", (1, 2)), ("ngram:3,4", (3, 4))):
            want = find_continuation(path[:t], n_min, n_max, st.gamma_max)
            for label, comb in (("s,l", "we:0.5,0.5"), ("l", "target"), ("s", "target")):
                rows = tr[(tr.state == state) & (tr.proposer == spec) & (tr.models == label)].sort_values("pos")
                assert (rows.combination == comb).all() and list(rows.pos) == list(range(st.gamma_max))
                toks = rows.token.tolist()
                assert toks == want + [-1] * (st.gamma_max - len(want))
                for j, x in enumerate(want):
                    ctx = path[:t] + want[:j]
                    r = (full_probs(mods[0], ctx) + full_probs(mods[1], ctx)) / 2 if label == "s,l" else \
                        full_probs(mods[names.index(label)], ctx)
                    row = rows.iloc[j]
                    assert row.beta == row.alpha == float(x == int(r.argmax())) and row.q == 1.0
                    assert row.beta_soft == pytest.approx(float(r[x]), abs=1e-4)
                    hits += 1
                assert (rows.iloc[len(want):][["beta", "alpha", "beta_soft", "q"]] == 0).all().all()
        own = tr[(tr.state == state) & (tr.proposer == "s") & (tr.models == "s,l")].sort_values("pos")["beta"]
        lead = next((j for j, b in enumerate(own) if b != 1.0), len(own))
        t += lead + 1
    assert hits > 4 and (tr.token == -1).any()
    model_rows = tr[tr.proposer.isin(names)]
    assert model_rows.q.between(0, 1).all() and model_rows.q.notna().all()


@pytest.mark.parametrize("stride", [5, 9])
def test_states_spread_along_the_answer_by_the_stride(tiny_models, stride):
    """Between recorded states the trajectory advances by unrecorded exact SD steps until it has grown by at
    least ``state_stride`` tokens, so the states cover the answer, not its start. Greedy: every step commits the
    draft's prefix that matches r's argmax path plus one token of it; the positions are recomputed here from full
    forwards, and the target's own drafts at each state are r's path from there."""
    names = ["s", "l"]
    mods = [tiny_models[n].model for n in names]
    gm = 3
    st = AcceptanceSettings(gamma_max=gm, states_per_prompt=4, temperature=0.0, state_stride=stride, lookups=())
    tr = pd.DataFrame(trace_prompt(mods, names, "target", PROMPT, st, "w", 0, eos_token_id=None)[0])
    path = list(PROMPT)
    for _ in range(4 * (stride + gm + 1)):
        path.append(int(full_probs(mods[1], path).argmax()))

    def sd_step(t):  # tokens one greedy SD step (draft s, r = l) commits at position t
        draft: list[int] = []
        for _ in range(gm):
            draft.append(int(full_probs(mods[0], path[:t] + draft).argmax()))
        acc = next((j for j in range(gm) if draft[j] != path[t + j]), gm)
        return acc + 1

    t = len(PROMPT)
    for state in range(4):
        own = tr[(tr.state == state) & (tr.proposer == "l") & (tr.models == "s,l")].sort_values("pos")["token"]
        assert own.tolist() == path[t:t + gm], state
        start = t
        while t - start < stride:
            t += sd_step(t)
        assert stride <= t - start <= stride + gm


def test_the_trajectory_recorded_is_rs_greedy_path(tiny_models):
    """``path_rows``: each prompt's ids at pos < 0, then every token the advancing steps committed -- under greedy
    calibration r's own greedy answer (recomputed here from full forwards), what the simulator's lookups walk; and
    ``draft_rows``: every model's greedy token and q along it, what the simulator's model drafts walk."""
    names = ["s", "l"]
    mods = [tiny_models[n].model for n in names]
    st = AcceptanceSettings(gamma_max=3, states_per_prompt=3, temperature=0.0, state_stride=4, lookups=())
    units = [PromptUnit("w", 0, tuple(PROMPT)), PromptUnit("w", 1, (5, 9, 2))]
    rows: list[dict] = []
    drafts: list[dict] = []
    trace_batch(mods, names, "target", units, st, eos_token_id=None, path_rows=rows, draft_rows=drafts)
    df, along = pd.DataFrame(rows), pd.DataFrame(drafts)
    for u in units:
        got = df[df.prompt == u.index].sort_values("pos")
        assert got.pos.min() == -len(u.ids) and got[got.pos < 0].token.tolist() == list(u.ids)
        answer = got[got.pos >= 0].token.tolist()
        assert len(answer) >= st.states_per_prompt * st.state_stride
        path = list(u.ids)
        for _ in answer:
            path.append(int(full_probs(mods[1], path).argmax()))
        assert answer == path[len(u.ids):]
        # path_drafts: each model's greedy token and its q at every answer position, fed the path before it
        for name, model in zip(names, mods):
            mine = along[(along.prompt == u.index) & (along.model == name)].sort_values("pos")
            assert mine.pos.tolist() == list(range(len(answer)))
            for j, row in enumerate(mine.itertuples()):
                q = full_probs(model, path[:len(u.ids) + j])
                assert row.token == int(q.argmax()) and row.q == pytest.approx(float(q.max()), abs=1e-4)
        assert along[(along.prompt == u.index) & (along.model == "l")].sort_values("pos").token.tolist() == answer


def test_path_drafts_are_recorded_under_greedy_calibration_only(tiny_models):
    """A sample path is not what every method decodes: sampling calibrations record the path, no drafts along it."""
    names = ["s", "l"]
    mods = [tiny_models[n].model for n in names]
    units = [PromptUnit("w", 0, tuple(PROMPT))]
    for temperature, recorded in ((0.8, False), (0.0, True)):
        st = AcceptanceSettings(gamma_max=2, states_per_prompt=1, temperature=temperature, state_stride=2, lookups=())
        paths: list[dict] = []
        drafts: list[dict] = []
        trace_batch(mods, names, "target", units, st, eos_token_id=None, path_rows=paths, draft_rows=drafts)
        assert paths and bool(drafts) == recorded
