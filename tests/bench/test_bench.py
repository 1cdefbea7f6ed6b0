"""spectune bench: the grid, the closed forms behind decoder efficiency, measuring and resuming on tiny models,
advice validation (regret, MAPE, Spearman)."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from spectune.bench import BenchSpec, bench, validate_advice
from spectune.bench.advice import spearman
from spectune.bench.analysis import renewal_speedup, theorem_speedup
from spectune.errors import ConfigError
from spectune.tune import closed_forms as C


@pytest.fixture
def prompts_file(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text("\n".join(json.dumps({"prompt": f"w{i} w{i + 1} w3"}) for i in range(4)))
    return str(p)


def test_grid_runs_baselines_first_and_hf_only_at_batch_one():
    spec = BenchSpec(models=("a", "b"), combine="we:0.5,0.5", methods=("standard", "sd", "cos"), gammas=(1, 3),
                     gamma_rest=(1, 2), batch_sizes=(1, 4))
    runs = spec.runs()
    b1 = [r for r in runs if r.config.batch_size == 1]
    assert spec.is_target(b1[0]) and spec.is_standard(b1[1])  # target alone, then standard we
    assert sum(r.config.method == "sd" for r in b1 if r.kind == "spectune") == 2  # gamma 1, 3 (gamma_p unused)
    assert sum(r.config.method == "cos" for r in b1 if r.kind == "spectune") == 4  # gamma_q x gamma_p
    assert {r.kind for r in runs if r.config.batch_size == 4} == {"spectune"}
    hf = [r for r in b1 if r.kind == "hf-assisted"]
    assert [r.hf_defaults for r in hf] == [True, False, False] and len({r.key for r in runs}) == len(runs)
    # r = target: standard is the target alone (one run serves both references)
    t = BenchSpec(models=("a", "b"), methods=("sd",), gammas=(2,), hf=False).runs()
    assert len(t) == 2 and BenchSpec(models=("a", "b")).is_standard(t[0])
    with pytest.raises(ConfigError, match=">= 1"):
        BenchSpec(models=("a", "b"), gammas=(0,))
    with pytest.raises(ConfigError, match="sv needs"):
        BenchSpec(models=("a", "b"), methods=("sv",))


def test_whole_search_space_enumerated():
    spec = BenchSpec(models=("a", "b"), gammas=(1, 2, 3), hf=False).with_search_space()
    cfgs = [r.config for r in spec.runs() if r.kind == "spectune"]
    methods = pd.Series([c.method for c in cfgs]).value_counts().to_dict()
    # target alone + sd x3 + naive-cos x3 + cos x 3x3 (standard of the space is the target alone)
    assert methods == {"standard": 1, "sd": 3, "naive-cos": 3, "cos": 9}


def test_theorem_speedups_hand_computed():
    # SD with its bonus token, r = target: (1 - a^(g+1)) / ((1 - a)(1 + g c)) = 2.401 at a=0.8, g=4, c=0.1
    assert theorem_speedup("sd", (1,), (4, 1), 0.8, 0.1) == pytest.approx((1 - 0.8 ** 5) / 0.2 / 1.4)
    assert theorem_speedup("sd", (1,), (4, 1), 0.8, 0.1) == pytest.approx(2.401, abs=1e-3)
    # Naive-CoS over WE is Thm 3.1; CoS over WE is Thm 3.6; CoS with r = target and gamma_p = 1 is SD
    assert theorem_speedup("naive-cos", (0, 1), (3, 1), 0.6, 0.2) == pytest.approx(C.speedup_thm31(0.6, 3, 0.2))
    assert theorem_speedup("cos", (0, 1), (3, 2), 0.6, 0.2) == pytest.approx(C.speedup_thm36(0.6, 3, 2, 0.2))
    assert theorem_speedup("cos", (1,), (3, 1), 0.7, 0.1) == pytest.approx(
        theorem_speedup("sd", (1,), (3, 1), 0.7, 0.1))
    # SD over a WE target (the proposer re-scores): tokens * (1 + c) / (g c + 1 + c)
    assert theorem_speedup("sd", (0, 1), (2, 1), 0.5, 0.1) == pytest.approx(1.75 * 1.1 / 1.3)
    assert np.isnan(theorem_speedup("cos", (0, 1, 2), (1, 1, 1), 0.5, 0.1))


def test_renewal_with_constant_latency_equals_the_theorems():
    """With every call costing the same whatever its length, the simulated loop meets the closed forms (for
    CoS where the paper's accounting is exact: gamma_q = gamma_p = 1 and equal model costs) within its estimate's
    error (2048 tokens of i.i.d. acceptance: ~0.2 %)."""
    for method, uses, g, c in [("sd", (1,), (3, 1), 0.1), ("naive-cos", (0, 1), (3, 1), 0.1),
                               ("cos", (0, 1), (1, 1), 1.0)]:
        lat = [lambda k, c=c: c, lambda k: 1.0]
        t_std = sum((c, 1.0)[i] for i in uses)
        want = theorem_speedup(method, uses, g, 0.7, c)
        assert renewal_speedup(method, uses, g, [0.7, 0.7], lat, t_std) == pytest.approx(want, rel=0.01), method
        assert renewal_speedup(method, uses, g, [0.5, 0.7], lat, t_std) < 0.97 * want  # and it reads alpha


def test_spearman():
    assert spearman(pd.Series([1, 2, 3, 4]), pd.Series([10, 20, 30, 40])) == pytest.approx(1.0)
    assert spearman(pd.Series([1, 2, 3, 4]), pd.Series([4, 3, 2, 1])) == pytest.approx(-1.0)
    assert np.isnan(spearman(pd.Series([1, 2]), pd.Series([1, 2])))


def _sd_closed_form(alpha: float, gamma: int, c: float) -> float:
    """Leviathan et al.: expected tokens per SD round over its cost in target forwards, written out by hand."""
    tokens = gamma + 1 if alpha == 1 else (1 - alpha ** (gamma + 1)) / (1 - alpha)
    return tokens / (gamma * c + 1)


def _mean_forward(calls_by_k: str, model: str, k: int = 1) -> float:
    calls, seconds = json.loads(calls_by_k)[model][str(k)]
    return seconds / calls


def test_bench_measures_resumes_and_summarises(tiny_dirs, prompts_file, tmp_path):
    models = (str(tiny_dirs["s"]), str(tiny_dirs["l"]))
    spec = BenchSpec(models=models, methods=("standard", "sd", "cos"), gammas=(2,), batch_sizes=(1, 2),
                     max_new_tokens=4)
    said: list[str] = []
    res = bench(spec, workload=prompts_file, prompts=2, repeats=1, out=tmp_path / "b", say=said.append)
    n_runs = len(spec.runs())
    assert len(res.rows) == n_runs and (tmp_path / "b" / "rows.csv").is_file()
    assert (res.rows.groupby("key")["tokens"].first() == res.rows.groupby("key")["tokens"].first().max()).all()
    # the summary's columns from the raw rows, computed here by hand: the sd run at batch 1 against the
    # standard run (r = target: the target alone) measured in the same repeat
    rows = res.rows[res.rows["batch_size"] == 1]
    sd_row = rows[(rows["method"] == "sd") & (rows["kind"] == "spectune")].iloc[0]
    std_row = rows[rows["is_standard"].astype(bool)].iloc[0]
    assert std_row["method"] == "standard" and std_row["repeat"] == sd_row["repeat"]
    s = res.summary.set_index("key")
    sd = s.loc[sd_row["key"]]
    measured = sd_row["goodput"] / std_row["goodput"]
    c = _mean_forward(sd_row["calls_by_k"], models[0]) / _mean_forward(std_row["calls_by_k"], models[-1])
    thm = _sd_closed_form(float(sd_row["alpha"]), 2, c)
    assert 0 <= sd_row["alpha"] <= 1 and c > 0
    assert sd["goodput"] == pytest.approx(sd_row["goodput"]) and sd["speedup_vs_standard"] == pytest.approx(measured)
    assert sd["c"] == pytest.approx(c) and sd["thm_speedup"] == pytest.approx(thm)
    assert sd["efficiency"] == pytest.approx(measured / thm)
    assert s.loc[std_row["key"], "speedup_vs_target"] == pytest.approx(1.0)  # standard here is the target alone
    # resume: the first repeat is not measured again, only the second
    said.clear()
    res2 = bench(spec, workload=prompts_file, prompts=2, repeats=2, out=tmp_path / "b", resume=True, say=said.append)
    assert len(res2.rows) == 2 * n_runs and sum(m.startswith("[") for m in said) == n_runs
    assert set(res2.summary["repeats"]) == {2}
    assert (res2.rows[res2.rows["repeat"] == res.rows["repeat"].iloc[0]]["goodput"].to_numpy()
            == res.rows["goodput"].to_numpy()).all()  # the first repeat's rows, kept as measured


def test_validate_advice_on_tiny_models(tiny_dirs, prompts_file, tmp_path, monkeypatch):
    """Regret, MAPE (of goodput and of speedup), Spearman and the HF numbers, recomputed here from the bench
    summary and the profile: which runs count, which one was recommended, decode (not whole-run) goodput."""
    from scipy.stats import spearmanr

    from spectune.config import DecodeConfig
    from spectune.profile import load_profile
    from spectune.tune.cost import CostModel

    monkeypatch.setenv("SPECTUNE_CACHE", str(tmp_path / "cache"))
    models = (str(tiny_dirs["s"]), str(tiny_dirs["l"]))
    spec = BenchSpec(models=models, methods=("standard", "sd"), gammas=(1, 2), batch_sizes=(1,), max_new_tokens=4)
    # no lookups traced: the advice is draft-model SD, which HF can execute (the HF half of this test)
    cal = dict(batch_sizes=(1, 2), max_k=3, contexts=(16,), repeats=1, quiet_attempts=1, prompts_per_workload=2,
               states_per_prompt=2,
               lookups=())
    adv = validate_advice(spec, workload=prompts_file, trials=30, repeats=1, out=tmp_path / "adv",
                          calibrate_kwargs=cal)
    assert adv.profile_path == tmp_path / "adv" / "profile" and (adv.profile_path / "profile.json").is_file()
    assert all(f.is_file() for f in adv.files)
    runs = adv.bench.summary[(adv.bench.summary["kind"] == "spectune") & (adv.bench.summary["batch_size"] == 1)]
    runs = runs.set_index("key")
    assert adv.recommended[1] in runs.index and len(runs) >= 3
    row = adv.per_batch.iloc[0]
    assert row["configs"] == len(runs)
    assert row["regret"] == pytest.approx(runs["decode_goodput"].max() / runs.loc[adv.recommended[1], "decode_goodput"])
    cm = CostModel(load_profile(adv.profile_path, check_hardware=False), prompts_file)
    pred = {k: cm.predict(DecodeConfig(models=tuple(r["models"].split(",")), method=r["method"],
                                       combine=r["combine"], gamma=tuple(int(x) for x in str(r["gamma"]).split(",")),
                                       batch_size=1, proposer=r["proposer"], policy=r["policy"])).goodput
            for k, r in runs.iterrows()}
    meas = runs["decode_goodput"]
    assert adv.mape == pytest.approx(sum(abs(pred[k] - meas[k]) / meas[k] for k in runs.index) / len(runs))
    std = next(r.key for r in spec.runs() if spec.is_standard(r) and r.config.batch_size == 1)
    speed = {k: (pred[k] / pred[std], meas[k] / meas[std]) for k in runs.index}
    assert adv.mape_speedup == pytest.approx(sum(abs(p - m) / m for p, m in speed.values()) / len(runs))
    keys = list(runs.index)
    assert adv.spearman == pytest.approx(spearmanr([pred[k] for k in keys], [meas[k] for k in keys]).statistic)
    # the recommendation executed by HF: its regret among every HF run, the MAPE over the fixed-K ones
    h = adv.hf_rows
    assert row["hf_recommended"] in set(h["label"]) and row["hf_regret"] == pytest.approx(adv.hf_regret)
    got = h.loc[h["label"] == row["hf_recommended"], "decode_goodput"].iloc[0]
    assert adv.hf_regret == pytest.approx(h["decode_goodput"].max() / got)
    fixed = h[~h["key"].str.contains("|gHF|", regex=False)]
    assert len(fixed) < len(h) and fixed["predicted_goodput"].notna().all()
    assert fixed["predicted_goodput_hf_step"].notna().all()
    err = (fixed["predicted_goodput"] - fixed["decode_goodput"]).abs() / fixed["decode_goodput"]
    assert adv.hf_mape == pytest.approx(err.mean())
    assert (tmp_path / "adv" / "hf_predicted_vs_measured.csv").is_file()


def test_bench_records_the_runtime_and_never_mixes_two(tiny_dirs, prompts_file, tmp_path, monkeypatch):
    """--runtime compiled: every spectune row says so (its runs were warmed up untimed first); resuming those
    rows with the eager runtime is refused; a rows.csv written before the column existed resumes as eager."""
    import torch

    monkeypatch.setattr(torch, "compile", lambda fn, **kw: fn)  # the compiled path, without CPU compile time
    models = (str(tiny_dirs["s"]), str(tiny_dirs["l"]))
    spec = BenchSpec(models=models, methods=("standard", "sd"), gammas=(2,), batch_sizes=(1, 2), max_new_tokens=4,
                     hf=False)
    said: list[str] = []
    res = bench(spec, workload=prompts_file, prompts=2, repeats=1, out=tmp_path / "b", runtime="compiled",
                say=said.append)
    assert set(res.rows["runtime"]) == {"compiled"} and any("warming up every run" in m for m in said)
    with pytest.raises(ConfigError, match="compiled runtime, this run with eager"):
        bench(spec, workload=prompts_file, prompts=2, repeats=2, out=tmp_path / "b", resume=True, runtime="eager")
    rows = pd.read_csv(tmp_path / "b" / "rows.csv").drop(columns="runtime")  # as an older spectune wrote it
    rows.to_csv(tmp_path / "b" / "rows.csv", index=False)
    res2 = bench(spec, workload=prompts_file, prompts=2, repeats=2, out=tmp_path / "b", resume=True, runtime="eager")
    assert len(res2.rows) == 2 * len(spec.runs()) and set(res2.rows["runtime"]) == {"eager"}


def test_cli_bench_bad_input_is_one_line():
    from click.testing import CliRunner

    from spectune.cli import cli

    for args, msg in [(["--gammas", "0,2"], "gammas must be in [1, "),
                      (["--models", "only-one"], "at least 2 models"),
                      (["--workload", "nope"], "workload")]:
        r = CliRunner().invoke(cli, ["bench", *args])
        assert r.exit_code == 2 and msg in r.output and "Traceback" not in r.output, r.output


def test_validate_advice_calibrates_and_recommends_on_its_device(tiny_dirs, tmp_path, monkeypatch):
    """--device cuda:1 (faked: no GPU here) reaches the calibration of a missing profile and recommend (with the
    run's runtime); the spies stop each stage once it has been asked."""
    import importlib

    import spectune.tune.recommend

    class Asked(Exception):
        pass

    asked = {}

    def spy(name):
        def f(*a, **k):
            asked[name] = k
            raise Asked(name)
        return f

    monkeypatch.setattr("spectune.config.check_device", lambda d: d)
    package = importlib.import_module("spectune.calibration")  # the package (spectune.calibrate: its API function)
    monkeypatch.setattr(package, "calibrate", spy("calibrate"))
    monkeypatch.setattr(spectune.tune.recommend, "recommend", spy("recommend"))
    spec = BenchSpec(models=(str(tiny_dirs["s"]), str(tiny_dirs["l"])), methods=("standard",), batch_sizes=(1,))
    with pytest.raises(Asked, match="calibrate"):
        validate_advice(spec, out=tmp_path / "a", device="cuda:1", runtime="eager")
    assert asked["calibrate"]["device"] == "cuda:1" and asked["calibrate"]["runtime"] == "eager"
    with pytest.raises(Asked, match="recommend"):
        validate_advice(spec, out=tmp_path / "b", profile=tmp_path / "p", device="cuda:1", runtime="eager")
    assert asked["recommend"]["device"] == "cuda:1" and asked["recommend"]["runtime"] == "eager"
