"""examples/distill_drafts.py: the loss, the windowing and a tiny end-to-end distillation on CPU."""
import argparse
import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import distill_drafts as dd  # noqa: E402


def test_forward_kl_matches_torch_and_is_zero_on_equal_inputs():
    g = torch.Generator().manual_seed(0)
    t, s = torch.randn(2, 3, 11, generator=g), torch.randn(2, 3, 11, generator=g)
    logp = torch.log_softmax(t, -1)
    kl, aq = dd.forward_kl(logp, s)
    want = torch.nn.functional.kl_div(torch.log_softmax(s, -1), logp, log_target=True, reduction="none").sum(-1)
    assert kl.shape == (2, 3) and torch.allclose(kl, want, atol=1e-6)
    assert torch.equal(aq, s.argmax(-1))
    assert torch.allclose(dd.forward_kl(logp, t)[0], torch.zeros(2, 3), atol=1e-6)


def test_windows_and_lr_schedule():  # lr_at is shared with the CPU recipe (train_drafts)
    w = dd.windows(torch.arange(10, dtype=torch.int32), 4)
    assert w.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]  # the ragged tail is dropped
    a = argparse.Namespace(lr=1.0, warmup=10)
    assert dd.td.lr_at(a, 0.0, 0) == pytest.approx(0.1)  # warmup
    assert dd.td.lr_at(a, 0.0, 50) == pytest.approx(1.0)
    assert dd.td.lr_at(a, 1.0, 50) == pytest.approx(0.1)  # cosine ends at 10 %


def test_distil_trains_a_student_for_exactly_steps(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    teacher = LlamaForCausalLM(LlamaConfig(vocab_size=49152, hidden_size=128, num_hidden_layers=1,
                                           num_attention_heads=2, num_key_value_heads=1, intermediate_size=64,
                                           tie_word_embeddings=True)).eval()
    data = torch.randint(0, 49152, (40, 16), dtype=torch.int32)  # 8 validation windows of each kind, 12 to train
    args = argparse.Namespace(device="cpu", batch=2, seq_len=16, lr=1e-3, warmup=2, gen_weight=0.5, seed=0, bf16=False,
                              steps=3, log_every=1)
    dd.distil(args, teacher, data[:20], data[20:], ["draft-s"], tmp_path, budget=0.0)
    meta = json.loads((tmp_path / "draft-s" / "training.json").read_text())
    assert meta["steps"] == 3 and meta["tokens_seen"] == 3 * 2 * 16  # --steps overrides the (zero) time budget
    assert meta["val_forward_kl"] > 0 and 0 <= meta["val_greedy_agreement"] <= 1
    student = LlamaForCausalLM.from_pretrained(str(tmp_path / "draft-s"))
    assert student.config.hidden_size == 96 and student.dtype == torch.float16


def test_runtime_compare_measures_both_runtimes(tiny_dirs, tmp_path, monkeypatch, capsys):
    """examples/runtime_compare.py end to end on tiny models (torch.compile stubbed: the path, not CPU compile
    time): every (runtime, b, k) cell is timed, every method decodes with both runtimes, the JSON is written."""
    import runtime_compare as rc

    monkeypatch.setattr(torch, "compile", lambda fn, **kw: fn)
    loads = []
    real_load = rc.load_models
    monkeypatch.setattr(rc, "load_models", lambda names, **kw: loads.extend(names) or real_load(names, **kw))
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("w1 w2 w3\nw4 w5\nw6 w7 w8\nw9 w1\n")
    s, m = str(tiny_dirs["s"]), str(tiny_dirs["m"])
    res = rc.main(["--models", m, "--batch-sizes", "1,2", "--ks", "1,3", "--ctx", "6", "--repeats", "2",
                   "--pair", f"{s},{m}", "--gen-batch-sizes", "2", "--new-tokens", "4", "--workload", str(prompts),
                   "--json-out", str(tmp_path / "r.json")])
    lat = {(r["runtime"], r["batch"], r["k"]): r for r in res["latency"]}
    assert set(lat) == {(rt, b, k) for rt in ("eager", "compiled") for b in (1, 2) for k in (1, 3)}
    assert all(r["samples"] == 2 and r["L_ms"] > 0 and r["wall_ms"] >= r["L_ms"] for r in lat.values())
    gen = {(r["runtime"], r["method"]) for r in res["generate"]}
    assert gen == {(rt, m) for rt in ("eager", "compiled")
                   for m in ("standard", "sd", "ngram:1,3", "we standard", "we cos")}
    assert sorted(loads) == sorted([m, s])  # each model loaded once: the decoders reuse the timed models
    # float32: every method gives the target alone's greedy tokens, and compiled gives eager's
    assert all(r["diff_vs_ref"] is None and r["diff_vs_base"] is None for r in res["generate"]), res["generate"]
    assert json.loads((tmp_path / "r.json").read_text())["machine"]["kind"] == "cpu"
    out = capsys.readouterr().out
    assert "L(b, k) in ms" in out and "decoder tok/s" in out
