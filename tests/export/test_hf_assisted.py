"""HF assisted generation runs what spectune exports: with the exported artifacts applied as the snippet says,
the assistant drafts exactly K tokens every step -- never cut by HF's confidence stop, never HF's default 20 --
counted with forward hooks on both models (``spectune.bench.hf_trace``); and the bench's HF rows do the same.

EOS is switched off on these tiny models so that the only way a step may draft fewer than K is the budget at the
end of the sequence (HF drafts min(K, tokens left - 1)) -- or the confidence stop the export must disable."""
from __future__ import annotations

import json

import pytest
import torch

from spectune.bench.grid import Run
from spectune.bench.hf_baseline import run_hf
from spectune.bench.hf_trace import HFTrace
from spectune.config import DecodeConfig
from spectune.artifacts import export
from spectune.artifacts.hf import ASSISTANT, TARGET

PROMPT = [5, 9, 3, 7, 12, 4]
N = 16


@pytest.fixture(autouse=True)
def _empty_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECTUNE_CACHE", str(tmp_path / "cache"))


def _fresh(path):
    """A private copy of a tiny model with EOS disabled (the session fixtures are shared: never mutate them)."""
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(str(path)).eval()
    m.generation_config.eos_token_id = None
    return m


def _expected(step, prompt_len: int, k: int) -> int:
    """HF's draft length at a step: K, but never past the sequence's end (min(K, max_length - cur_len - 1))."""
    return min(k, prompt_len + N - step.cur_len - 1)


def _generate(target, draft, art: dict, prompt=PROMPT):
    from transformers import GenerationConfig

    ids = torch.tensor([prompt])
    with torch.inference_mode(), HFTrace(target, draft) as trace:
        out = target.generate(input_ids=ids, attention_mask=torch.ones_like(ids), assistant_model=draft,
                              generation_config=GenerationConfig(**art[TARGET]))
        steps = trace.end_sequence(int(out.shape[1]))
    assert out.shape[1] == len(prompt) + N
    return steps


@pytest.mark.parametrize("k,temperature", [(1, 0.0), (3, 0.0), (5, 0.0), (3, 0.9)])
def test_exported_artifacts_draft_exactly_k_every_step(tiny_dirs, tmp_path, k, temperature):
    cfg = DecodeConfig(models=(str(tiny_dirs["s"]), str(tiny_dirs["l"])), method="sd", gamma=(k, 1),
                       temperature=temperature, max_new_tokens=N)
    e = export(cfg, "hf")
    out = tmp_path / "spectune-hf.json"
    out.write_text(e.text())
    art = json.loads(out.read_text())  # what --out writes, read back as the snippet reads it
    target, draft = _fresh(tiny_dirs["l"]), _fresh(tiny_dirs["s"])
    draft.generation_config.update(**art[ASSISTANT])  # the snippet's line
    torch.manual_seed(0)
    steps = _generate(target, draft, art)
    assert [s.drafted for s in steps] == [_expected(s, len(PROMPT), k) for s in steps]
    assert sum(s.drafted == k for s in steps) >= 2  # not a degenerate run of budget-capped steps
    assert all(0 <= s.accepted <= s.drafted for s in steps)


def test_settings_on_the_target_config_are_ignored(tiny_dirs):
    """The mistake the two artifacts fix: the same settings on the target's config leave HF at its defaults
    (20 tokens cut by an adaptive confidence threshold), so the step lengths are not K."""
    cfg = DecodeConfig(models=(str(tiny_dirs["s"]), str(tiny_dirs["l"])), method="sd", gamma=(3, 1),
                       max_new_tokens=N)
    art = export(cfg, "hf").rendered.artifact
    wrong = {TARGET: {**art[TARGET], **{k: v for k, v in art[ASSISTANT].items() if k != "transformers_version"}}}
    target, draft = _fresh(tiny_dirs["l"]), _fresh(tiny_dirs["s"])
    steps = _generate(target, draft, wrong)
    assert [s.drafted for s in steps] != [_expected(s, len(PROMPT), 3) for s in steps]


def test_bench_hf_rows_draft_k_every_step(tiny_dirs):
    """The bench's "HF assisted gamma=k" rows run the exported artifact: K every step, settings restored."""
    from spectune.models import load_model

    target, draft = load_model(str(tiny_dirs["l"])), load_model(str(tiny_dirs["s"]))
    before = {k: getattr(draft.model.generation_config, k, None) for k in ("num_assistant_tokens",)}
    prompts = [PROMPT, [3, 4, 8, 9]]
    for k in (2, 4):
        c = DecodeConfig(models=(str(tiny_dirs["s"]), str(tiny_dirs["l"])), method="sd", gamma=(k, 1),
                         max_new_tokens=N, batch_size=1)
        m = run_hf(Run("hf-assisted", c), target, draft, prompts, seed=0)
        assert m["tokens"] == N * len(prompts) and len(m["sequences"]) == len(prompts)
        for prompt, steps in zip(prompts, m["sequences"]):
            assert [s.drafted for s in steps] == [_expected(s, len(prompt), k) for s in steps]
        lengths = json.loads(m["draft_lengths"])
        assert max(int(x) for x in lengths) == k and 0 <= m["alpha"] <= 1
        assert json.loads(m["calls_by_k"])[str(tiny_dirs["l"])][str(k + 1)][0] > 0  # verifications of K + 1
    assert {k: getattr(draft.model.generation_config, k, None) for k in before} == before
