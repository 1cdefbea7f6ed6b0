"""HF runs what spectune exports for prompt lookup and the draft-length policies, counted with forward hooks
(``spectune.bench.hf_trace``) rather than trusted from the settings:

* ``ngram:N_MIN,N_MAX`` -> HF prompt lookup proposes at most K tokens per step, exactly the tokens HF's own rule
  (the first occurrence of the longest suffix n-gram, n from N_MAX down) gives -- not always spectune's (the most
  recent occurrence), which is what the export's note says -- and the output is the target's;
* ``heuristic`` -> the draft length moves +2 / -1 from K step by step, and starts from K again at every call;
* ``confidence:T`` -> a step stops right after the first drafted token the assistant was less than T sure of;
* the bench's HF rows for ngram / policy runs execute the same artifacts.

EOS is switched off on the tiny models, so budgets at the end of a sequence are the only other limit."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from spectune.bench.hf_trace import HFTrace
from spectune.config import DecodeConfig
from spectune.decoding.ngram import find_continuation
from spectune.artifacts import export
from spectune.artifacts.hf import ASSISTANT, TARGET, settings_of

N = 24
PROMPT = [5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6, 10, 11, 5, 6]  # [5, 6] first continues 7 8 9, last 10 11


@pytest.fixture(autouse=True)
def _empty_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECTUNE_CACHE", str(tmp_path / "cache"))


def _fresh(path):
    """A private copy of a tiny model with EOS disabled (the session fixtures are shared: never mutate them)."""
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(str(path)).eval()
    m.generation_config.eos_token_id = None
    return m


def _artifact(cfg: DecodeConfig, tmp_path) -> dict:
    """What ``--out`` writes for HF, read back as the printed snippet reads it."""
    out = tmp_path / "spectune-hf.json"
    out.write_text(export(cfg, "hf").text())
    return json.loads(out.read_text())


def _run(target, art: dict, assistant=None, prompt=PROMPT, record: bool = False):
    """Generate with the artifact as the snippet applies it; (steps, trace, output ids)."""
    from transformers import GenerationConfig

    ids = torch.tensor([prompt])
    kw = {"assistant_model": assistant} if assistant is not None else {}
    lookup = "prompt_lookup_num_tokens" in art[TARGET]
    with torch.inference_mode(), HFTrace(target, assistant, lookup=lookup, record=record) as trace:
        out = target.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                              generation_config=GenerationConfig(**art[TARGET]), **kw)
        steps = trace.end_sequence(int(out.shape[1]), len(prompt))
    assert out.shape[1] == len(prompt) + N
    return steps, trace, out[0].tolist()


def _drafted_tokens(trace, prompt_len: int) -> list[list[int]]:
    """The tokens each step's target forward verified beyond the last accepted one (record=True)."""
    out = []
    for f in (f for f in trace.forwards if f.role == "target"):
        out.append(f.ids[prompt_len:] if f.cache == 0 else f.ids[1:])
    return out


def _hf_lookup(ctx: list[int], n_max: int, k: int, max_length: int) -> list[int]:
    """HF 5.23's PromptLookupCandidateGenerator without logits processors: n from n_max down to 1, the first
    (leftmost) occurrence with a continuation, up to k tokens, never past the context."""
    L = len(ctx)
    if max_length == L + 1:
        return []
    for n in range(min(n_max, L - 1), 0, -1):
        for i in range(0, L - n + 1):
            if ctx[i:i + n] == ctx[L - n:] and i + n < min(i + n + k, L, max_length):
                return ctx[i + n:min(i + n + k, L, max_length)]
    return []


def test_prompt_lookup_export_drafts_what_hf_rule_says(tiny_dirs, tmp_path):
    k = 4
    cfg = DecodeConfig(models=(str(tiny_dirs["l"]),), method="sd", gamma=(k,), proposer="ngram:1,3", max_new_tokens=N)
    art = _artifact(cfg, tmp_path)
    assert ASSISTANT not in art and art[TARGET]["prompt_lookup_num_tokens"] == k
    target = _fresh(tiny_dirs["l"])
    steps, trace, out = _run(target, art, record=True)
    drafts = _drafted_tokens(trace, len(PROMPT))
    assert [len(d) for d in drafts] == [s.drafted for s in steps]  # the trace reads the feed lengths right
    assert all(s.drafted <= k for s in steps) and any(s.drafted == k for s in steps)
    assert all(0 <= s.accepted <= s.drafted for s in steps)
    for s, d in zip(steps, drafts):  # every proposal is HF's rule applied to the context of that step
        assert d == _hf_lookup(out[:s.cur_len], 3, k, len(PROMPT) + N)
    # the first step shows the documented difference: HF copies after the first [5, 6], spectune the last
    assert drafts[0] == [7, 8, 9, 5] and find_continuation(PROMPT, 1, 3, k) == [10, 11, 5, 6]
    plain = target.generate(input_ids=torch.tensor([PROMPT]), max_new_tokens=N, do_sample=False)
    assert out == plain[0].tolist()  # greedy: lookup changes the speed, never the output


def test_prompt_lookup_top_p_never_proposes_high_token_ids(tiny_dirs, tmp_path):
    """The export's note: with top_p < 1 HF checks candidates against its top-p warper on uniform logits, which
    forbids the highest token ids -- here 16..31 of 32 at top_p 0.5 -- so they are never looked up."""
    cfg = DecodeConfig(models=(str(tiny_dirs["l"]),), method="sd", gamma=(4,), proposer="ngram:1,2",
                       temperature=1.0, top_p=0.5, max_new_tokens=N)
    e = export(cfg, "hf")
    assert any("highest token ids (about 50%" in n for n in e.notes)
    high = [20, 21, 22, 23, 24, 20, 21, 22, 23, 24, 20, 21]  # only high ids: nothing may be proposed
    torch.manual_seed(0)
    steps, trace, _ = _run(_fresh(tiny_dirs["l"]), e.rendered.artifact, prompt=high, record=True)
    assert all(t < 16 for d in _drafted_tokens(trace, len(high)) for t in d)
    assert steps[0].drafted == 0  # the first lookup would copy 22 23 24 ...: forbidden
    torch.manual_seed(0)
    steps, _, _ = _run(_fresh(tiny_dirs["l"]), export(replace(cfg, top_p=1.0), "hf").rendered.artifact, prompt=high)
    assert steps[0].drafted == 4  # without top-p the same lookup proposes them


def _heuristic_lengths(steps, k0: int, end: int) -> list[int]:
    """HF's num_assistant_tokens_schedule heuristic from k0: min(K, tokens left - 1) drafted, then +2 after a fully
    accepted draft, else -1 (at least 1)."""
    k, out = k0, []
    for s in steps:
        out.append(min(k, end - s.cur_len - 1))
        k = k + 2 if s.accepted == s.drafted else max(1, k - 1)
    return out


@pytest.mark.parametrize("draft", ["l", "s"])
def test_heuristic_export_moves_k_plus_two_minus_one(tiny_dirs, tmp_path, draft):
    """A copy of the target as assistant accepts everything (K grows 2, 4, 6, ...); the small one is rejected
    (K falls to 1). Every call starts from K again (heuristic_transient), as spectune's per-sequence policy."""
    cfg = DecodeConfig(models=(str(tiny_dirs[draft]), str(tiny_dirs["l"])), method="sd", gamma=(2, 1),
                       policy="heuristic", max_new_tokens=N)
    art = _artifact(cfg, tmp_path)
    target, assistant = _fresh(tiny_dirs["l"]), _fresh(tiny_dirs[draft])
    assistant.generation_config.update(**art[ASSISTANT])  # the snippet's line
    end = len(PROMPT) + N
    for _ in range(2):  # the second call starts from K = 2 again
        steps, _, _ = _run(target, art, assistant)
        assert [s.drafted for s in steps] == _heuristic_lengths(steps, 2, end)
        assert steps[0].drafted == 2
    lengths = [s.drafted for s in steps]
    if draft == "l":
        assert lengths[:3] == [2, 4, 6]
    else:
        assert 1 in lengths and all(s.accepted <= s.drafted for s in steps)


def test_plain_heuristic_would_carry_k_over(tiny_dirs, tmp_path):
    """Why the export writes heuristic_transient: HF's 'heuristic' keeps the grown K for the next call."""
    cfg = DecodeConfig(models=(str(tiny_dirs["l"]), str(tiny_dirs["l"])), method="sd", gamma=(2, 1),
                       policy="heuristic", max_new_tokens=N)
    art = _artifact(cfg, tmp_path)
    target, assistant = _fresh(tiny_dirs["l"]), _fresh(tiny_dirs["l"])
    assistant.generation_config.update(**{**art[ASSISTANT], "num_assistant_tokens_schedule": "heuristic"})
    _run(target, art, assistant)
    steps, _, _ = _run(target, art, assistant)
    assert steps[0].drafted > 2


def test_confidence_export_stops_after_the_first_unsure_token(tiny_dirs, tmp_path, monkeypatch):
    """Every drafted token but a step's last had assistant probability >= T; a step shorter than its budget ended
    on a token below T (HF keeps that token, as spectune). Without scikit-learn HF keeps T fixed (the note)."""
    import transformers.generation.candidate_generator as cg

    monkeypatch.setattr(cg, "is_sklearn_available", lambda: False)
    k, t = 5, 0.15
    cfg = DecodeConfig(models=(str(tiny_dirs["s"]), str(tiny_dirs["l"])), method="sd", gamma=(k, 1),
                       policy=f"confidence:{t}", max_new_tokens=N)
    art = _artifact(cfg, tmp_path)
    assert art[ASSISTANT]["assistant_confidence_threshold"] == t
    target, assistant = _fresh(tiny_dirs["l"]), _fresh(tiny_dirs["s"])
    assistant.generation_config.update(**art[ASSISTANT])
    steps, trace, _ = _run(target, art, assistant, record=True)
    drafts = _drafted_tokens(trace, len(PROMPT))
    probs = iter([f.probs for f in trace.forwards if f.role == "assistant"])
    early = 0
    for s, d in zip(steps, drafts):
        p = [float(next(probs)[x]) for x in d]  # one assistant forward per drafted token
        assert all(q >= t for q in p[:-1])
        if s.drafted < min(k, len(PROMPT) + N - s.cur_len - 1):
            assert p and p[-1] < t
            early += 1
    assert early >= 2 and any(s.drafted == k for s in steps)  # both rules were exercised


def test_bench_hf_rows_run_the_exported_artifacts(tiny_dirs):
    """spectune bench adds HF prompt lookup beside each ngram row and HF assisted generation with each policy
    beside the policy rows (batch 1), and each runs export's artifact for its configuration."""
    from spectune.bench.grid import BenchSpec
    from spectune.bench.hf_baseline import hf_artifact, run_hf
    from spectune.models import load_model

    small, large = str(tiny_dirs["s"]), str(tiny_dirs["l"])
    spec = BenchSpec(models=(small, large), methods=("sd",), gammas=(3,), proposers=("ngram:1,2",),
                     policies=("heuristic",), hf_defaults=False, max_new_tokens=N)
    runs = {r.key: r for r in spec.runs()}
    lookup = runs[f"hf-lookup|{large}|target|g3|b1|t0|p=ngram:1,2"]
    heur = runs[f"hf-assisted|{small},{large}|target|g3|b1|t0|policy=heuristic"]
    assert lookup.label == "HF prompt lookup ngram:1,2 gamma=3" and heur.label == "HF assisted heuristic gamma=3"
    for r in (lookup, heur):  # the same settings (the export names the release its keys were read at)
        exported = export(r.config, "hf").rendered.artifact
        assert settings_of(hf_artifact(r)) == settings_of(exported) and settings_of(exported)
    target, draft = load_model(large), load_model(small)
    m = run_hf(lookup, target, target, [PROMPT], seed=0)
    lengths = {int(x): n for x, n in json.loads(m["draft_lengths"]).items()}
    assert max(lengths) == 3 and sum(n for x, n in lengths.items() if x > 0) > 0
    m = run_hf(heur, target, draft, [PROMPT], seed=0)
    steps = m["sequences"][0]
    assert [x.drafted for x in steps] == _heuristic_lengths(steps, 3, len(PROMPT) + N)
    assert draft.model.generation_config.num_assistant_tokens_schedule != "heuristic_transient"  # restored
