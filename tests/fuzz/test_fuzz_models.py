"""Model loading and decoding at the edges: pickle weights, prompts past the positions, a failure midway."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from fuzz_helpers import assert_one_line_error
from spectune.cli import cli


def _generate(*args):
    return CliRunner().invoke(cli, ["generate", "--max-new-tokens", "4", "--ignore-eos", *args])


def test_pickle_weights_need_the_explicit_flag(pickle_model, tiny_dirs, monkeypatch):
    import torch

    loads = []
    real = torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **k: loads.append(a) or real(*a, **k))
    res = _generate("--models", f"{pickle_model},{tiny_dirs['l']}", "--prompt", "w1 w2")
    assert_one_line_error(res, "--allow-pickle-weights")
    assert "pytorch_model.bin" in res.stderr and not loads  # refused before any pickle was opened
    res = _generate("--models", f"{pickle_model},{tiny_dirs['l']}", "--prompt", "w1 w2", "--allow-pickle-weights")
    assert res.exit_code == 0, res.output


def test_a_directory_without_weights_is_one_line(tiny_dirs, tmp_path):
    import shutil

    d = tmp_path / "noweights"
    shutil.copytree(tiny_dirs["s"], d)
    (d / "model.safetensors").unlink()
    assert_one_line_error(_generate("--models", f"{d},{tiny_dirs['l']}", "--prompt", "w1"), "no weights")


@pytest.mark.parametrize("words,new", [(300, 4), (254, 4), (256, 1)])
def test_prompt_past_the_positions_is_an_error_before_decoding(tiny_dirs, monkeypatch, words, new):
    """The tiny models hold 256 positions: prompt + max-new-tokens beyond that fails before any forward."""
    from spectune.decoding import loop

    monkeypatch.setattr(loop.Decoder, "generate_batch", lambda *a, **k: pytest.fail("decoding started"))
    prompt = " ".join(f"w{i % 30}" for i in range(words))
    res = CliRunner().invoke(cli, ["generate", "--models", f"{tiny_dirs['s']},{tiny_dirs['l']}", "--prompt", prompt,
                                   "--max-new-tokens", str(new)])
    assert_one_line_error(res, "positions")


def test_a_failure_midway_keeps_the_generated_text(tiny_dirs, monkeypatch):
    """A forward that fails after some tokens (an out-of-memory, say): the text so far is printed, then one
    error line; it is the start of what the complete run generates."""
    from spectune.decoding.batch_cache import BatchedRunner

    args = ["generate", "--models", f"{tiny_dirs['s']},{tiny_dirs['l']}", "--prompt", "w1 w2", "--method", "standard",
            "--max-new-tokens", "12", "--ignore-eos"]
    full = CliRunner().invoke(cli, args)
    assert full.exit_code == 0, full.output
    real, calls = BatchedRunner.forward, []

    def failing(self, feeds):
        calls.append(1)
        if len(calls) > 10:
            raise RuntimeError("CUDA out of memory (simulated)")
        return real(self, feeds)

    monkeypatch.setattr(BatchedRunner, "forward", failing)
    res = CliRunner().invoke(cli, args)
    assert_one_line_error(res, "decoding failed", "out of memory")
    partial = res.stdout.strip()
    assert partial and full.stdout.startswith(partial) and len(partial) < len(full.stdout.strip())
