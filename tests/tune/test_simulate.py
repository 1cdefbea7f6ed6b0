"""The simulator runs the runtime's own state machine: on a seeded toy, the two backends make the same decisions.

The runtime decodes with tiny table-driven models (sampling at T = 1, so blocks are accepted, rejected and
recovered at random). A recorder notes every block the runtime opened (per proposer, in order), what the accept
rule decided for each of its proposals, the proposer's confidence, a lookup's length and sv's predictions. Those
records become the simulator's traces, taken in order (0/1 betas), and the simulator must then replay the run
exactly: the same event sequence (every feed with its length, draft, lookup, verification, sample, sv length,
round) and the same stats. A bug in either backend's cache lengths, rollback, block bookkeeping or driver breaks it.
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
from fakes import TableLM

import spectune.decoding.loop as loop
from spectune.decoding import DecodePlan, Decoder, SamplingParams, parse_combination
from spectune.decoding.policy import parse_policy
from spectune.decoding.proposers import MODEL, NgramProposer, parse_proposer
from spectune.decoding.sv_policy import SVPolicy
from spectune.tune.simulate import Traces, simulate, simulate_requests

V = 8


class Recorder(loop.RuntimeBackend):
    """The runtime backend, noting each block's decisions in the order blocks are opened."""

    log: list[list[dict]] = []

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.blocks: list[dict] = []  # in the order they were opened
        self.open: dict[tuple[int, int], dict] = {}  # (row, block id) -> its record
        self.where: dict[int, tuple[dict, int]] = {}  # id(proposal) -> (its block's record, position in it)
        Recorder.log.append(self.blocks)

    def _new(self, model: int) -> dict:
        self.blocks.append(dict(model=model, ok={}, conf={}, pred={}, length=0, props=[]))
        return self.blocks[-1]

    def _note(self, rec: dict, prop, pos: int) -> None:
        rec["props"].append(prop)  # keeps the proposal alive, so its id stays unique
        rec["conf"][pos], rec["length"] = prop.conf, pos + 1
        self.where[id(prop)] = (rec, pos)

    def propose(self, s, i, block, pos):
        prop = super().propose(s, i, block, pos)
        if pos == 0:
            self.open[(s.row, block)] = self._new(i)
        self._note(self.open[(s.row, block)], prop, pos)
        return prop

    def lookup(self, s, k, block):
        props = super().lookup(s, k, block)
        rec = self._new(len(self.runners))  # a miss is a block too: the simulator draws a lookup for it
        for pos, prop in enumerate(props):
            self._note(rec, prop, pos)
        return props

    def judge(self, s, props):
        a, rec = super().judge(s, props)
        for t, p in enumerate(props[: a + 1]):
            block, pos = self.where[id(p)]
            block["ok"][pos] = t < a
        return a, rec

    def sv_predict(self, s):
        preds = super().sv_predict(s)
        for p, x in zip(s.pending, preds):
            block, pos = self.where[id(p)]
            block["pred"][pos] = x
        return preds


def traces_of(blocks: list[dict], proposer: int, width: int) -> Traces | None:
    """The recorded blocks of one proposer as 0/1 traces, one row per block in the order they were opened."""
    rows = [b for b in blocks if b["model"] == proposer]
    if not rows:
        return None
    beta, conf, pred = np.zeros((len(rows), width)), np.ones((len(rows), width)), np.full((len(rows), width), .5)
    for r, b in enumerate(rows):
        for pos, ok in b["ok"].items():
            beta[r, pos] = float(ok)
        for pos, c in b["conf"].items():
            conf[r, pos] = c
        for pos, x in b["pred"].items():
            pred[r, pos] = x
    return Traces(beta, conf, np.array([b["length"] for b in rows]), pred)


def sv_policy() -> SVPolicy:
    table = [[0.2, 0.5], [0.6, 0.9]]
    return SVPolicy(np.array([0.0, 0.5, 1.0]), np.array([0.0, 0.5, 1.0]), np.array(table), 0.5,
                    latency=lambda b, k: 1.0 + 0.3 * k, fixed_seconds=lambda b: 0.5)


CASES = [  # method, combine, gamma, proposer, policy, rows
    ("standard", "we:0.5,0.5", (1, 1), None, "fixed", 2),
    ("sd", "target", (3, 1), None, "fixed", 1),
    ("sd", "we:0.5,0.5", (2, 1), None, "heuristic", 3),
    ("naive-cos", "cd:0.3", (3, 1), None, "confidence:0.3", 2),
    ("cos", "we:0.4,0.6", (2, 2), None, "fixed", 3),
    ("cos", "target", (2, 1, 2), None, "fixed", 2),
    ("sv", "target", (3, 1, 1), None, "fixed", 3),
    ("sd", "target", (3, 1), "ngram:1,2", "fixed", 2),
    ("sd", "target", (2, 1), "ngram+model:1,2,3", "heuristic", 2),  # the lookup, and the draft where it misses
    ("sd", "we:0.5,0.5", (3, 1), "ngram+model:2,2,4", "confidence:0.3", 1),
]


@pytest.mark.parametrize("method,combine,gamma,proposer,policy,rows", CASES)
def test_simulator_replays_the_runtime_step_by_step(monkeypatch, method, combine, gamma, proposer, policy, rows):
    models = [TableLM(V, seed=10 + i, scale=1.0) for i in range(len(gamma))]
    comb = parse_combination(combine, len(models))
    look = parse_proposer(proposer)
    sv = sv_policy() if method == "sv" else None
    monkeypatch.setattr(loop, "RuntimeBackend", Recorder)
    Recorder.log.clear()
    dec = Decoder(models, [str(i) for i in range(len(models))],
                  DecodePlan(method, comb, gamma, SamplingParams(1.0, 0, 1.0), look, parse_policy(policy), sv))
    dec.events = []
    prompts = [[3, 1, 3, 1, 3]] * rows if look.looks_up else [[3]] * rows  # the lookup's prompt repeats: hits, misses
    _, _, rt = dec.generate_batch(prompts, 14, seeds=list(range(rows)))
    blocks = Recorder.log[0]
    width = max([b["length"] for b in blocks] + [1]) + 1
    traces = [traces_of(blocks, i, width) for i in range(len(models))]
    events: list = []
    sim = simulate(method, gamma, comb.uses, traces, rows=rows, max_new_tokens=14, policy=policy,
                   lookup=traces_of(blocks, len(models), width) if look.looks_up else None, sv=sv, events=events,
                   shuffle=False, as_runtime=True, prompt_len=len(prompts[0]), lookup_k=look.k,
                   fallback=look.fallback)
    assert events == dec.events
    if look.fallback:  # both proposers proposed
        assert {e[0] for e in events} >= {"lookup", "draft"} and any(e[0] == "lookup" and e[2] == 0 for e in events)
    assert _counts(sim.stats) == _counts(rt)
    assert any(e[0] == "verify" and e[3] < e[2] for e in events) or method == "standard"  # rejections happened


def _counts(stats) -> dict:
    """Every count of a run's stats (no times, no model names)."""
    d = stats.to_dict()
    for k in ("wall_seconds", "tokens_per_second", "decode_tokens_per_second"):
        d.pop(k)
    d["models"] = [{k: v for k, v in m.items() if k not in ("name", "forward_seconds", "prefill_seconds")}
                   | {"calls_by_k": {k: n for k, (n, _) in m["calls_by_k"].items()}} for m in d["models"]]
    return d


def test_a_wrong_backend_is_caught(monkeypatch):
    """The replay is sensitive: a simulator runner that ignores one rollback holds a wrong cache length, and the
    sd proposer's re-scoring feed then differs from the runtime's."""
    from spectune.tune.simulate import SimRunner

    calls = defaultdict(int)
    orig = SimRunner.rollback

    def sloppy(self, row, n):  # ignores the first rollback of each model: its cache length is then wrong
        calls[self.model] += 1
        if calls[self.model] > 1:
            orig(self, row, n)

    monkeypatch.setattr(SimRunner, "rollback", sloppy)
    with pytest.raises(AssertionError):
        test_simulator_replays_the_runtime_step_by_step(monkeypatch, *CASES[1])


def test_prompts_get_equal_tokens_not_equal_rounds():
    """Drafts labelled by calibration prompt are drawn prompt by prompt, so the run's seconds per token is the mean
    of each prompt's own (a workload gives every prompt the same new tokens). Prompt "a" accepts every proposal of
    its 4-token drafts (5 tokens a round), prompt "b" none (1 token a round), every round costs 1 s: per prompt 1/5
    and 1 s a token, together 0.6 s. Pooled draws (equal rounds of each) would give 2 / 6 = 0.33 s."""
    beta = np.array([[1.0] * 4] * 8 + [[0.0] * 4] * 8)
    group = np.array(["a"] * 8 + ["b"] * 8)
    cost = lambda m, b, k: 1.0 if m == 1 else 0.0  # noqa: E731 (only the verifier's forwards cost)
    grouped = simulate("sd", [4, 1], [1], [Traces(beta, group=group), None], cost, max_new_tokens=1000)
    pooled = simulate("sd", [4, 1], [1], [Traces(beta), None], cost, max_new_tokens=1000)
    assert grouped.seconds / grouped.tokens == pytest.approx(0.6, rel=0.02)
    assert pooled.seconds / pooled.tokens == pytest.approx(1 / 3, rel=0.02)


def test_a_static_batch_waits_for_its_slowest_request():
    """simulate_requests keeps every row on one prompt and runs the batch until its slowest row is done. Row 0 is
    on prompt "a" (5 tokens a round), row 1 on "b" (1 token a round); a verifier forward costs the live batch size:
    100 tokens each take "a" 20 rounds at 2 s (both live) and "b" 80 more at 1 s (alone): 120 s, 1.2 s per token of
    a request, where the steady state of one row, alternating prompts, pays (1/5 + 1) / 2 per token."""
    beta = np.array([[1.0] * 4] * 8 + [[0.0] * 4] * 8)
    group = np.array(["a"] * 8 + ["b"] * 8)
    cost = lambda m, b, k: float(b) if m == 1 else 0.0  # noqa: E731 (only the verifier's forwards cost)
    res = simulate_requests(2, 100, 1, method="sd", gamma=[4, 1], uses=[1], traces=[Traces(beta, group=group), None],
                            latency=cost)
    assert res.tokens == 200 and res.rows == 2
    assert res.latency_per_token == pytest.approx(1.2, rel=0.03)
    two = simulate_requests(2, 100, 2, method="sd", gamma=[4, 1], uses=[1], traces=[Traces(beta, group=group), None],
                            latency=cost)
    assert two.tokens == 400 and two.seconds == pytest.approx(2 * res.seconds, rel=0.03)


def test_ngram_model_is_priced_as_hand_computed():
    """ngram+model on hand-made traces. Lookup A proposes 2 tokens, both accepted: a round of 3 tokens (bonus
    included) for one target forward (1.0 s). Lookup B misses: the draft (0.1 s a forward) drafts 2 tokens in 2
    forwards, the first accepted, then the target: 2 tokens (one recovered) for 1.2 s. States are drawn in
    proportion to 1 / the tokens their round yields (A: 1 + 2; B: 1 + the draft's mean accepted length 1), so
    P(A) = (1/3) / (1/3 + 1/2) = 0.4: 2.4 tokens per round and 2.4 / (0.4 * 1.0 + 0.6 * 1.2) = 2.142857 tokens/s."""
    look = Traces(np.array([[1.0, 1.0], [0.0, 0.0]]), length=np.array([2, 0]))
    draft = Traces(np.array([[1.0, 0.0]]))
    res = simulate("sd", (2, 1), [1], [draft, None], latency=lambda m, b, k: 0.1 if m == 0 else 1.0,
                   max_new_tokens=30_000, lookup=look, lookup_k=2, fallback=True)
    assert res.tokens / res.rounds == pytest.approx(2.4, rel=0.01)
    assert res.goodput == pytest.approx(2.4 / 1.12, rel=0.01)
    assert res.stats.models[0].accepted > 0 and res.stats.models[-1].accepted > 0


def test_a_models_turn_is_charged_once_a_step_before_its_forwards():
    """An engine's draft pays a fixed cost each step besides its forwards (``turn``): sd with gamma 3 and every
    proposal accepted runs rounds of 3 draft forwards (0.1 s) and one target forward (1.0 s); a turn cost of 0.5 s
    for the draft (none for the target) adds 0.5 s a round, not a forward's worth per draft token, and is counted
    at feed length 0 apart from the forwards."""
    draft = Traces(np.ones((1, 3)))
    kw = dict(latency=lambda m, b, k: 0.1 if m == 0 else 1.0, max_new_tokens=4000)
    free = simulate("sd", (3, 1), [1], [draft, None], **kw)
    paid = simulate("sd", (3, 1), [1], [draft, None], turn=lambda m, b: 0.5 if m == 0 else 0.0, **kw)
    assert free.tokens / free.rounds == pytest.approx(4.0) and paid.tokens == free.tokens
    assert paid.seconds - free.seconds == pytest.approx(0.5 * paid.rounds, rel=1e-9)
    assert paid.calls_by_k[(0, 0)] == paid.rounds and paid.forwards == free.forwards
    assert paid.goodput == pytest.approx(4.0 / 1.8, rel=1e-3)


def test_an_engine_step_is_priced_at_its_rows_mean_feed_the_runtime_at_the_longest():
    """A forward feeding 4 tokens to one row and 1 to the other: the runtime pads both rows to 4 (L(2, 4)); a
    ragged engine (one flattened forward) pays the mean of each row's own price, (L(2, 4) + L(2, 1)) / 2. In a
    run, a lookup accepted in full on one row's prompt and missing on the other's costs the ragged engine less
    for the same tokens. The verifier's L(b, k) = k seconds (k = 0: 0, no turn cost)."""
    from spectune.tune.simulate import SimRunner

    cost = lambda m, b, k: float(k)  # noqa: E731
    for ragged, want in ((False, 4.0), (True, 2.5)):
        r = SimRunner(0, 2, cost, ragged=ragged)
        r.forward({0: [1, 2, 3, 4], 1: [5]})
        r.forward({0: [1, 2], 1: [5, 6]})  # equal rows: the same either way
        assert r.seconds == pytest.approx(want + 2.0) and r.tokens == 9
    look = Traces(np.array([[1.0] * 3] * 4 + [[0.0] * 3] * 4), length=np.array([3] * 4 + [0] * 4),
                  group=np.array(["a"] * 4 + ["b"] * 4))
    kw = dict(method="sd", gamma=[3], uses=[0], traces=[None], latency=cost, lookup=look, lookup_k=3, rows=2,
              max_new_tokens=40, requests=(0, 1))
    padded, flat = simulate(**kw), simulate(ragged=True, **kw)
    assert padded.tokens == flat.tokens and padded.rounds == flat.rounds and flat.seconds < padded.seconds - 10


@pytest.mark.parametrize("n_min,n_max,k", [(1, 2, 4), (2, 3, 6)])
def test_a_lookup_walks_rs_greedy_path_exactly(n_min, n_max, k):
    """Under greedy decoding the simulator walks r's own path (``Paths``, what calibration records per prompt):
    its lookups propose and accept exactly what the runtime's did, so the whole run replays event by event."""
    from spectune.tune.simulate import Paths

    model = TableLM(V, seed=31, scale=1.0)
    look = NgramProposer(n_min, n_max)
    dec = Decoder([model], ["0"], DecodePlan("sd", parse_combination("target", 1), (k,), SamplingParams(0.0, 0, 1.0),
                                             look))
    dec.events = []
    prompt = [3, 1, 3, 1, 3, 5, 3, 1]
    out, rt = dec.generate(prompt, 40, seed=0)
    never = Traces(np.zeros((1, k)), length=np.zeros(1, dtype=int), group=np.array(["w/0"]))  # drawn: a miss
    events: list = []
    sim = simulate("sd", (k,), [0], [None], max_new_tokens=40, lookup=never, events=events, shuffle=False,
                   as_runtime=True, prompt_len=len(prompt), paths=Paths({"w/0": (prompt + out, len(prompt))},
                                                                        look.propose))
    assert events == dec.events
    assert _counts(sim.stats) == _counts(rt)
    hits = [e for e in events if e[0] == "lookup" and e[2] > 0]
    assert hits and any(e[0] == "verify" and e[3] < e[2] for e in events)  # lookups hit, and some were rejected


def test_past_the_recorded_answer_lookups_are_drawn_from_the_states():
    """A row walks its prompt's path up to the recorded answer's end; past it the lookup's states are drawn
    (here: traces that always miss), never a replay of the answer's start."""
    from spectune.tune.simulate import Paths

    look = NgramProposer(1, 2)
    prompt, answer = [3, 1, 3, 1], [3, 1, 3, 1, 3, 1]  # the lookup hits at every position of the answer
    miss = Traces(np.zeros((1, 4)), length=np.zeros(1, dtype=int), group=np.array(["w/0"]))
    events: list = []
    simulate("sd", (4,), [0], [None], max_new_tokens=30, lookup=miss, events=events, shuffle=False,
             as_runtime=True, prompt_len=len(prompt), paths=Paths({"w/0": (prompt + answer, len(prompt))},
                                                                  look.propose))
    sizes = [e[2] for e in events if e[0] == "lookup"]
    assert sizes[0] > 0 and sizes[-1] == 0 and sum(1 for n in sizes if n > 0) <= len(answer)
    assert Paths({"code/3": ([1], 0)}, look.propose).path("code/3#5") == ([1], 0)  # a resample's label


def test_paths_apply_to_the_calibrated_r_at_temperature_zero_only():
    """CalibratedTraces.paths: the user's combination in any model order, or target over the same last model; the
    config and the calibration greedy; a profile without trajectories has none. The models' greedy tokens along
    the paths are indexed by the config's model order and aligned with the path (the prompt's indices: -1)."""
    from types import SimpleNamespace

    import pandas as pd

    from spectune.tune.traces import CalibratedTraces

    traj = pd.DataFrame(dict(workload="w", prompt=0, pos=[-2, -1, 0, 1], token=[5, 6, 7, 8]))
    along = pd.DataFrame(dict(workload="w", prompt=0, model="a", pos=[0, 1], token=[7, 2], q=[0.9, 0.4]))

    def paths(models, label, comb, temperature=0.0, cal_t=0.0, table=traj, combination="we:0.5,0.5",
              look=NgramProposer(1, 2), drafts=along, lookup_match="recent"):
        prof = SimpleNamespace(models=["a", "b"], combination=combination, trajectories=table, path_drafts=drafts,
                               settings={"acceptance": {"temperature": cal_t}},
                               meta={"engine": {"lookup_match": lookup_match}})
        return CalibratedTraces(prof).paths(look, models, label, comb, temperature)

    got = paths(("b", "a"), "a,b", "we:0.5,0.5")  # the proposer moved first: the same r
    assert got is not None and got.path("w/0") == ([5, 6, 7, 8], 2)
    assert paths(("a", "b"), "a,b", "we:0.3,0.7") is None  # another r
    assert paths(("a", "b"), "a,b", "we:0.5,0.5", temperature=0.8) is None
    assert paths(("a", "b"), "a,b", "we:0.5,0.5", cal_t=0.8) is None
    assert paths(("a", "b"), "a,b", "we:0.5,0.5", table=traj.iloc[:0]) is None  # an older profile
    assert paths(("a", "b"), "a,b", "target", combination="target") is not None
    assert paths(("b",), "b", "target", combination="target") is not None  # r = the last model alone
    assert paths(("a",), "a", "target", combination="target") is None
    got = paths(("b", "a"), "a,b", "we:0.5,0.5", look=MODEL)  # no lookup: the models' drafts walk the path
    assert got.propose is None and list(got.drafts) == [1]  # model "a" is model 1 of this order
    tok, q = got.drafted("w/0#3", 1)
    assert tok.tolist() == [-1, -1, 7, 2] and q[2:].tolist() == [0.9, 0.4] and got.drafted("w/0", 0) is None
    assert paths(("a", "b"), "a,b", "we:0.5,0.5", look=MODEL, drafts=along.iloc[:0]) is None  # nothing to walk
    # the lookup walks the path as the profile's engine copies: vLLM after the earliest occurrence
    ctx = [9, 2, 5, 7, 2, 6, 1, 2]
    assert paths(("b", "a"), "a,b", "we:0.5,0.5").propose(ctx, 2) == [6, 1]
    assert paths(("b", "a"), "a,b", "we:0.5,0.5", lookup_match="earliest").propose(ctx, 2) == [5, 7]
    assert paths(("a", "b"), "a,b", "we:0.5,0.5", drafts=along.iloc[:1]).drafts == {}  # not the whole answer


GREEDY_CASES = [  # method, combine, gamma, proposer, policy
    ("sd", "target", (3, 1), None, "fixed"),
    ("sd", "we:0.5,0.5", (2, 1), None, "heuristic"),
    ("naive-cos", "cd:0.3", (3, 1), None, "fixed"),
    ("cos", "we:0.4,0.6", (2, 2), None, "fixed"),
    ("cos", "target", (2, 1, 2), None, "heuristic"),
    ("sd", "target", (2, 1), "ngram+model:1,2,3", "heuristic"),
    ("sd", "we:0.5,0.5", (3, 1), "ngram+model:2,2,4", "fixed"),
    ("sd", "target", (4, 1), None, "confidence:0.5"),
    ("naive-cos", "we:0.5,0.5", (3, 1), None, "confidence:0.4"),
]


def _path_drafts(models, prompt: list[int], answer: list[int]) -> dict[int, dict]:
    """What calibration records along the path (``path_draft_rows``), as ``Paths.drafts`` aligns it."""
    from spectune.calibration.acceptance import AcceptanceSettings, PromptUnit, path_draft_rows

    rows = path_draft_rows(models, [str(i) for i in range(len(models))], [PromptUnit("w", 0, tuple(prompt))],
                           [prompt + answer], AcceptanceSettings(temperature=0.0))
    pad = [-1] * len(prompt)
    return {i: {"w/0": (np.array(pad + [r["token"] for r in rows if r["model"] == str(i)]),
                        np.array([np.nan] * len(prompt) + [r["q"] for r in rows if r["model"] == str(i)]))}
            for i in range(len(models))}


@pytest.mark.parametrize("method,combine,gamma,proposer,policy", GREEDY_CASES)
def test_model_drafts_walk_rs_greedy_path_exactly(method, combine, gamma, proposer, policy):
    """Under greedy decoding a model's blocks walk r's path (``Paths.drafts``: every model's greedy token and q
    along it, as calibration records them): from traces that would reject everything, the simulator replays a
    runtime run event by event -- every draft, lookup and accepted length. A confidence policy reads the q the
    model had on the path also where its draft has left it (the runtime's q there is the off-path context's), so
    only how many rejected tokens were drafted may differ; every accepted length, round and committed token count
    is the runtime's."""
    from spectune.tune.simulate import Paths

    models = [TableLM(V, seed=20 + i, scale=2.0) for i in range(len(gamma))]
    comb, look = parse_combination(combine, len(models)), parse_proposer(proposer)
    dec = Decoder(models, [str(i) for i in range(len(models))],
                  DecodePlan(method, comb, gamma, SamplingParams(0.0, 0, 1.0), look, parse_policy(policy)))
    dec.events = []
    prompt = [3, 1, 3, 1, 3]
    out, rt = dec.generate(prompt, 30, seed=0)
    never = Traces(np.zeros((1, 8)), np.ones((1, 8)), group=np.array(["w/0"]))  # drawn: every proposal rejected
    miss = Traces(np.zeros((1, 8)), length=np.zeros(1, dtype=int), group=np.array(["w/0"]))
    paths = Paths({"w/0": (prompt + out, len(prompt))}, look.propose if look.looks_up else None,
                  _path_drafts(models, prompt, out))
    events: list = []
    sim = simulate(method, gamma, comb.uses, [never] * len(models), max_new_tokens=30, policy=policy,
                   lookup=miss if look.looks_up else None, events=events, shuffle=False, as_runtime=True,
                   prompt_len=len(prompt), lookup_k=look.k, fallback=look.fallback,
                   paths=paths)
    accepted = lambda evs: [e[3] for e in evs if e[0] == "verify"]  # noqa: E731
    assert accepted(events) == accepted(dec.events) and any(a > 0 for a in accepted(events))
    assert sim.stats.output_tokens == rt.output_tokens and sim.rounds == sum(1 for e in dec.events if e[0] == "round")
    if not policy.startswith("confidence"):
        assert events == dec.events
        assert _counts(sim.stats) == _counts(rt)
    assert any(e[0] == "verify" and e[3] < e[2] for e in events)  # drafts left the path, and were rejected


def test_one_row_visits_each_prompt_for_a_requests_length_on_its_path():
    """With ``visit`` (a request's length) one row decodes each prompt's recorded answer from its start, every
    prompt in turn, for whole passes, and each visit starts its draft-length policy afresh, as each request does.
    Here answers of 12 tokens whose every token the draft proposes (on the path: all accepted) and traces that
    reject everything: visits of 10 tokens never leave the paths (5 tokens a round with gamma 4), where one visit
    per prompt (100 tokens each) runs past the answers into the draws (1 token a round)."""
    from spectune.tune.simulate import Paths

    prompts = {f"w/{i}": ([1, 2] + list(range(3 + i, 15 + i)), 2) for i in range(3)}  # answers of 12 tokens
    drafts = {0: {k: (np.array([-1, -1] + t[2:]), np.array([np.nan] * 2 + [0.9] * 12))
                  for k, (t, _) in prompts.items()}}
    never = Traces(np.zeros((3, 8)), np.ones((3, 8)), group=np.array(sorted(prompts)))
    cost = lambda m, b, k: 1.0 if m == 1 else 0.0  # noqa: E731 (only the verifier's forwards cost)
    paths = Paths(prompts, None, drafts)
    on = simulate("sd", (4, 1), [1], [never, None], cost, max_new_tokens=290, paths=paths, visit=10)
    off = simulate("sd", (4, 1), [1], [never, None], cost, max_new_tokens=290, paths=paths)
    assert on.tokens / on.rounds == pytest.approx(5.0) and off.tokens / off.rounds < 2.0
    events: list = []
    simulate("sd", (2, 1), [1], [never, None], cost, max_new_tokens=290, paths=paths, visit=10, policy="heuristic",
             events=events)
    first = [e[3] for e in events if e[0] == "draft"]
    assert first[:3] == [2, 4, 6] and first.count(2) == 30  # +2 after a fully accepted block; 2 at each of the
    # 30 visits (290 tokens rounded to whole passes: 10 of 3 prompts x 10 tokens)
