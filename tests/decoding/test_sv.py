"""Speculative Verification: bin lookup, the greedy batch scheduler, exactness (greedy and distribution)."""
from dataclasses import replace

import numpy as np
import torch
from click.testing import CliRunner
from fakes import TableLM
from test_distribution import run_chi_square, T1

from spectune.api import build_decoder, encode
from spectune.cli import cli
from spectune.decoding.sv_policy import SVPolicy, expected_tokens, features


def policy(slope=0.3, table=((0.2, 0.5), (0.6, 0.9))):
    return SVPolicy(np.array([0.0, 0.5, 1.0]), np.array([0.0, 0.5, 1.0]), np.array(table, dtype=float), 0.5,
                    latency=lambda b, k: 1.0 + slope * k, fixed_seconds=lambda b: 0.5)


def test_features_and_bin_lookup():
    q = torch.tensor([[0.5, 0.5, 0.0], [0.9, 0.1, 0.0]])
    c = torch.tensor([[0.25, 0.75, 0.0], [0.1, 0.0, 0.9]])
    s, a = features(q, c, torch.tensor([0, 0]))
    assert torch.allclose(s, torch.tensor([0.75, 0.1])) and torch.allclose(a, torch.tensor([0.5, 0.1 / 0.9]))
    assert policy().predict([0.75, 0.1], [0.5, 0.1 / 0.9]).tolist() == [0.9, 0.2]


def test_empty_bins_borrow_row_then_global_mean():
    p = policy(table=((np.nan, 0.4), (np.nan, np.nan)))
    assert p.table.tolist() == [[0.4, 0.4], [0.5, 0.5]]


def test_expected_tokens():
    assert expected_tokens([0.5, 0.5], 2) == 1 + 0.5 + 0.25
    assert expected_tokens([0.5], 0) == 1


def test_scheduler_stops_when_goodput_stops_improving():
    # one sequence, constant p: E(k)/(1.5 + 0.3 (k + 1)) peaks where adding prod p no longer pays
    p = [0.9] * 8
    k = policy(slope=0.3).schedule([p])[0]
    goodput = [expected_tokens(p, j) / (0.5 + 1.0 + 0.3 * (j + 1)) for j in range(9)]
    assert k == int(np.argmax(goodput))
    assert policy(slope=0.0).schedule([p])[0] == 8  # free verification: verify everything
    assert policy(slope=100.0).schedule([p])[0] == 0  # prohibitive: verify nothing (still one token)


def test_batch_scheduler_prefers_likely_tokens():
    pol = policy(slope=0.4)
    assert pol.schedule([[0.1, 0.9, 0.9]] * 2) == [0, 0]  # unlikely drafts are not worth the longer forward
    assert pol.schedule([[0.95] * 3, [0.95] * 3]) == [3, 3]
    assert pol.schedule([[0.95] * 3, [0.1, 0.9, 0.9]]) == [3, 0]  # per token: only the likely row's drafts


def test_sv_greedy_equals_standard(tiny_models):
    models = [tiny_models["s"], tiny_models["m"], tiny_models["l"]]
    tok = models[0].tokenizer
    for combine in ["target", "we:0.2,0.3,0.5"]:
        ref = build_decoder(models, method="standard", combine=combine, ignore_eos=True)
        sv = build_decoder(models, method="sv", combine=combine, gamma=[4, 1, 1], ignore_eos=True,
                           sv_policy=policy(slope=0.2))
        prompts = [encode(tok, p) for p in ["w3 w7 w1", "w12", "w20 w21 w22 w5"]]
        want = [ref.generate(p, 14, 0)[0] for p in prompts]
        outs, _, stats = sv.generate_batch(prompts, 14, [0] * 3)
        assert outs == want
        assert sum(stats.verified_len_hist.values()) > 0 and stats.truncated_tokens > 0


def test_sv_samples_exactly_from_r(monkeypatch):
    """Truncation varies (slope chosen so k* spans 0..gamma) and the samples still follow r."""
    import spectune.decoding.loop as loop

    models = [TableLM(8, seed=21), TableLM(8, seed=22), TableLM(8, seed=23)]
    orig = loop.Decoder.__init__

    def init(self, models, names, plan, *a, **kw):  # the plan's sv policy: this one
        orig(self, models, names, replace(plan, sv_policy=policy(slope=0.35)), *a, **kw)

    monkeypatch.setattr(loop.Decoder, "__init__", init)
    p, stats = run_chi_square(models, "sv", "we:0.2,0.3,0.5", [3, 1, 1], T1)
    assert p > 1e-4, f"chi-square p = {p:.2e}"
    assert len(stats.verified_len_hist) >= 3 and stats.truncated_tokens > 0 and stats.recovered_tokens > 0


def test_sv_without_profile_names_the_calibrate_command(tiny_dirs, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECTUNE_CACHE", str(tmp_path))
    models = ",".join(str(tiny_dirs[k]) for k in ("s", "m", "l"))
    res = CliRunner().invoke(cli, ["generate", "--models", models, "--method", "sv", "--prompt", "w1"])
    assert res.exit_code == 2
    line = res.stderr.strip().splitlines()
    assert len(line) == 1 and "spectune calibrate --models" in line[0]
