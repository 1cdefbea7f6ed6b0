"""``spectune export --engine hf --check``: the exported artifact runs in HF's generate on held-out prompts and
its measured goodput is set beside spectune's prediction for that configuration (and the HF-priced one)."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from spectune.bench.hf_check import check_hf_export
from spectune.bench.hf_price import predict_hf_goodput, round_hf_assisted
from spectune.config import DecodeConfig
from spectune.artifacts import export
from spectune.tune import closed_forms as C
from spectune.tune.cost import CostModel

sys.path.insert(0, str(Path(__file__).parents[1] / "tune"))
from oracles import round_sd  # noqa: E402  (tests/tune: the renewal forms, test oracles)


@pytest.fixture
def prompts_file(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text("\n".join(json.dumps({"prompt": f"w{i} w{i + 1} w3"}) for i in range(4)))
    return str(p)


def test_hf_step_price_reencodes_after_rejection():
    """HF's assistant feeds 2 tokens at the start of every step; spectune's feeds 1 after a rejection. With
    every proposal accepted the two prices agree; with rejections HF's is dearer by L(2) - L(1) per such step."""
    lat = [lambda k: 1.0 + 0.5 * (k - 1), lambda k: 10.0 + k]
    full = C.survival_iid(1.0, 4)
    assert round_hf_assisted(full, 3, lat) == pytest.approx(round_sd(full, 3, lat, (1,)))
    half = C.survival_iid(0.5, 4)
    t_hf, t_sd = round_hf_assisted(half, 3, lat)[1], round_sd(half, 3, lat, (1,))[1]
    assert t_hf - t_sd == pytest.approx((1 - 0.5 ** 3) * 0.5)


def test_check_measures_the_artifact_beside_the_prediction(tiny_dirs, prompts_file, tmp_path, monkeypatch):
    from tune_synth import make_profile

    monkeypatch.setenv("SPECTUNE_CACHE", str(tmp_path / "cache"))
    models = (str(tiny_dirs["s"]), str(tiny_dirs["l"]))
    prof = make_profile(models=models, combine="target", temperature=0.0, alpha=0.5, slope_k=0.2)
    cfg = DecodeConfig(models=models, method="sd", gamma=(2, 1), max_new_tokens=6, batch_size=1)
    exp = export(cfg, "hf", profile=prof)
    import spectune.bench.hf_baseline as hf_run

    seen, real = [], hf_run.eager_attention
    monkeypatch.setattr(hf_run, "eager_attention", lambda d: seen.append(str(d)) or real(d))
    res = check_hf_export(exp, workload=prompts_file, prompts=2, repeats=1, out=tmp_path / "check")
    assert seen and set(seen) == {"cpu"}  # every HF generate() ran under spectune's choice of attention kernels
    assert res.k == 2 and res.measured > 0 and (tmp_path / "check" / "rows.csv").is_file()
    assert max(int(k) for k in json.loads(res.row["draft_lengths"])) == 2  # HF drafted the exported K
    assert res.predicted == pytest.approx(exp.predicted["plan"]["goodput"])  # what export printed
    assert res.predicted_hf < res.predicted  # L(2) > L(1) here: re-encoding after a rejection costs
    assert res.predicted_hf == pytest.approx(predict_hf_goodput(CostModel(prof), *models, 2))
    assert math.isfinite(res.error(res.predicted)) and "predicted by spectune's cost model" in res.report()
    d = res.to_dict()
    assert d["k"] == 2 and d["measured_decode_goodput"] == pytest.approx(res.measured) and d["profile"]
    assert set(res.summary["label"]) >= {"target alone", "HF generate (target alone)", "HF assisted gamma=2"}


def test_cli_check_is_one_line_for_other_engines(tmp_path):
    from click.testing import CliRunner

    from spectune.cli import cli

    cfg = tmp_path / "c.json"
    DecodeConfig(models=("org/d", "org/t"), method="sd", gamma=(2, 1)).save(cfg)
    r = CliRunner().invoke(cli, ["export", str(cfg), "--engine", "sglang", "--check"])
    assert r.exit_code == 2 and "--check runs the artifact in its engine: hf, vllm, llamacpp; not sglang" in r.output
    assert "Traceback" not in r.output


def test_cli_check_json(tiny_dirs, prompts_file, tmp_path, monkeypatch):
    """``spectune export --engine hf --check --json``: the artifact written, the check measured, no profile."""
    from click.testing import CliRunner

    from spectune.cli import cli

    monkeypatch.setenv("SPECTUNE_CACHE", str(tmp_path / "cache"))
    cfg = tmp_path / "c.json"
    DecodeConfig(models=(str(tiny_dirs["s"]), str(tiny_dirs["l"])), method="sd", gamma=(3, 1),
                 max_new_tokens=5).save(cfg)
    out = tmp_path / "spectune-hf.json"
    r = CliRunner().invoke(cli, ["export", str(cfg), "--engine", "hf", "--out", str(out), "--check", "--json",
                                 "--workload", prompts_file, "--prompts", "1", "--repeats", "1"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["check"]["k"] == 3 and d["check"]["measured_decode_goodput"] > 0 and d["check"]["profile"] is None
    assert json.loads(out.read_text())["assistant_generation_config"]["num_assistant_tokens"] == 3


def test_bench_table_lists_hf_draft_lengths():
    import pandas as pd

    from spectune.bench.table import hf_draft_lines

    summary = pd.DataFrame([dict(kind="hf-assisted", batch_size=1, temperature=0.0, label="HF assisted gamma=3",
                                 draft_lengths='{"1": 1, "3": 9}'),
                            dict(kind="spectune", batch_size=1, temperature=0.0, label="sd gamma=3,1",
                                 draft_lengths="")])
    assert hf_draft_lines(summary) == ['b=1 T=0 HF assisted gamma=3: steps by draft length {"1": 1, "3": 9}']


def test_check_runs_prompt_lookup_and_a_policy(tiny_dirs, prompts_file, tmp_path, monkeypatch):
    """--check runs HF prompt lookup (no assistant, one model is enough) and HF's heuristic schedule; where the
    profile cannot price them (no lookup traces here) the check says so in one line and reports the measurement
    only; the heuristic is priced by simulation beside the measurement."""
    from tune_synth import make_profile

    monkeypatch.setenv("SPECTUNE_CACHE", str(tmp_path / "cache"))
    small, large = str(tiny_dirs["s"]), str(tiny_dirs["l"])
    prof = make_profile(models=(small, large), combine="target", temperature=0.0, alpha=0.5, slope_k=0.2)
    ng = DecodeConfig(models=(large,), method="sd", gamma=(3,), proposer="ngram:1,2", max_new_tokens=6)
    res = check_hf_export(export(ng, "hf", profile=prof), workload=prompts_file, prompts=2, repeats=1)
    assert res.row["kind"] == "hf-lookup" and res.measured > 0 and res.how == "prompt lookup ngram:1,2, K = 3"
    assert max(int(k) for k in json.loads(res.row["draft_lengths"])) <= 3
    assert not math.isfinite(res.predicted) and "cannot price" in res.unpriced
    assert sum("predicted: unavailable" in line for line in res.report().splitlines()) == 1
    heur = DecodeConfig(models=(small, large), method="sd", gamma=(2, 1), policy="heuristic", max_new_tokens=6)
    res = check_hf_export(export(heur, "hf", profile=prof), workload=prompts_file, prompts=2, repeats=1)
    assert res.row["label"] == "HF assisted heuristic gamma=2" and not res.unpriced
    assert res.to_dict()["runs"] == "heuristic from K = 2" and res.to_dict()["predicted_goodput"] > 0


def test_check_of_a_schedule_off_at_batch_one_runs_plain_generate(tiny_dirs, prompts_file, tmp_path, monkeypatch):
    """A schedule that does not speculate at batch 1 exports plain generate(): the check measures that row."""
    monkeypatch.setenv("SPECTUNE_CACHE", str(tmp_path / "cache"))
    small, large = str(tiny_dirs["s"]), str(tiny_dirs["l"])
    off = {"schema": "spectune.schedule/1", "entries": [
        {"batch_size": 1, "method": "standard", "models": [small, large], "gamma": [2, 1]}]}
    cfg = DecodeConfig(models=(small, large), method="sd", gamma=(2, 1), max_new_tokens=5)
    res = check_hf_export(export(cfg, "hf", schedule=off), workload=prompts_file, prompts=1, repeats=1)
    assert res.k == 0 and res.row["kind"] == "hf-target" and res.measured > 0
    assert "plain generate()" in res.report().splitlines()[0]
