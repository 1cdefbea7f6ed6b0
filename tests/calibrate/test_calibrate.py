"""End to end on tiny models: resume after an interruption mid-stage, settings checks, the CLI commands."""
import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from spectune.calibration import acceptance, calibrate, latency
from spectune.cli import cli
from spectune.errors import ConfigError
from spectune.profile import load_profile

sys.path.insert(0, str(Path(__file__).parents[1] / "tune"))
from tune_synth import latency_rows  # noqa: E402


@pytest.fixture
def small(tiny_dirs, tmp_path):
    wl = tmp_path / "prompts.txt"
    wl.write_text("w1 w2 w3\nw4 w5\nw6 w7 w8\nw9 w1\n")
    models = [str(tiny_dirs[k]) for k in ("s", "m", "l")]
    kw = dict(workload=str(wl), batch_sizes=(1, 2), contexts=(4, 8), max_k=2, repeats=1, quiet_attempts=1,
              prompts_per_workload=3, states_per_prompt=2, prompt_batch=1, progress=False)
    return models, kw, tmp_path / "prof"


class Boom(Exception):
    pass


def _counting(monkeypatch, module, name, fail_on=None):
    real = getattr(module, name)
    calls = []

    def wrapper(*a, **kw):
        calls.append(a[1:3] if name == "measure_chunk" else tuple(u.index for u in a[3]))
        if fail_on is not None and len(calls) == fail_on:
            raise Boom("interrupted")
        return real(*a, **kw)

    monkeypatch.setattr(module, name, wrapper)
    return calls


def test_resume_after_interruption_in_acceptance_stage(small, monkeypatch):
    models, kw, out = small
    calls = _counting(monkeypatch, acceptance, "trace_batch", fail_on=2)
    with pytest.raises(Boom):
        calibrate(models, out=out, **kw)
    assert calls == [(0,), (1,)]  # interrupted while tracing prompt 1's batch
    part = out.with_name(out.name + ".partial")
    state = json.loads((part / "state.json").read_text())
    assert state["stages"]["latency"]["finished"] and not state["stages"]["acceptance"]["finished"]
    assert len(list((part / "acceptance").glob("*.traces.csv"))) == 1 and not out.exists()
    with pytest.raises(ConfigError, match="--resume"):
        calibrate(models, out=out, **kw)
    with pytest.raises(ConfigError, match="settings differ"):
        calibrate(models, out=out, resume=True, **{**kw, "max_k": 3})
    monkeypatch.undo()
    lat_calls = _counting(monkeypatch, latency, "measure_chunk")
    calls2 = _counting(monkeypatch, acceptance, "trace_batch")
    prof = calibrate(models, out=out, resume=True, **kw)
    assert lat_calls == []  # the finished stage is not measured again
    assert calls2 == [(1,), (2,)]  # prompt 0's batch was finished before the interruption
    assert sorted(prof.traces["prompt"].unique()) == [0, 1, 2] and not part.exists()
    loaded = load_profile(out)
    assert len(loaded.traces) == len(prof.traces) and loaded.meta["stages"]["acceptance"]["finished"]
    # every calibration prompt's length as decoded, the interrupted batch's too
    sizes = [n for ns in loaded.meta["prompt_tokens"].values() for n in ns]
    assert len(sizes) == 3 and min(sizes) > 0 and loaded.prompt_tokens() == sum(sizes) / 3
    # r's paths and every model's greedy token along them, the resumed batches' and the checkpointed one's
    answers = loaded.trajectories[loaded.trajectories["pos"] >= 0].groupby("prompt").size()
    along = loaded.path_drafts.groupby(["prompt", "model"]).size().unstack()
    assert list(answers.index) == [0, 1, 2] and sorted(along.columns) == sorted(loaded.models)
    assert all((along[m] == answers).all() for m in along.columns)


def test_resume_after_interruption_in_latency_stage(small, monkeypatch):
    models, kw, out = small
    _counting(monkeypatch, latency, "measure_chunk", fail_on=3)
    with pytest.raises(Boom):
        calibrate(models, out=out, **kw)
    part = out.with_name(out.name + ".partial")
    assert len(list((part / "latency").glob("*.csv"))) == 2
    monkeypatch.undo()
    calls = _counting(monkeypatch, latency, "measure_chunk")
    prof = calibrate(models, out=out, resume=True, **kw)
    assert [tuple(c) for c in calls] == [(2, 4), (2, 8)]  # only the two unfinished (batch, ctx) cells
    lat = prof.latency
    assert len(lat) == 3 * 2 * 2 * 2 and lat["feasible"].all()
    assert set(prof.cost["batch"]) == {1, 2}


def test_bad_settings_fail_before_loading(small):
    models, kw, out = small
    with pytest.raises(ConfigError, match="batch sizes"):
        calibrate(models, out=out, **{**kw, "batch_sizes": "1,x"})
    with pytest.raises(ConfigError, match="at least 2 models"):
        calibrate(models[:1], out=out, **kw)
    with pytest.raises(ConfigError, match="weights"):
        calibrate(models, out=out, **{**kw, "combine": "we:0.5,0.5"})


def test_cli_calibrate_and_profile_show(small, tmp_path):
    models, kw, out = small
    run = CliRunner().invoke
    res = run(cli, ["calibrate", "--models", ",".join(models), "--workload", kw["workload"], "--batch-sizes", "1,2",
                    "--contexts", "4", "--max-k", "2", "--repeats", "1", "--quiet-attempts", "1",
                    "--prompts-per-workload", "1",
                    "--states-per-prompt", "2", "--combine", "we:0.2,0.3,0.5", "--out", str(out),
                    "--lookup", "ngram:1,2", "--lookup", "ngram:2,3"])
    assert res.exit_code == 0, res.output
    assert "profile written to" in res.output
    prof = load_profile(out)  # the lookups were traced, against r and each model alone, beside the models' drafts
    assert set(prof.traces.proposer) == {*prof.models, "ngram:1,2", "ngram:2,3"}
    assert prof.meta["settings"]["acceptance"]["lookups"] == ["ngram:1,2", "ngram:2,3"]
    assert prof.latency_forward == "runtime"  # recorded: calibration timed the runtime's forward
    assert set(prof.traces[prof.traces.proposer == "ngram:1,2"].models) == {",".join(prof.models), *prof.models}
    res = run(cli, ["profile", "show", str(out), "--plot", str(tmp_path / "plots")])
    assert res.exit_code == 0, res.output
    for needle in ("cost coefficient", "latency L(b, k)", "acceptance", "information gain", "we:0.2,0.3,0.5"):
        assert needle in res.output
    assert "mask-less" not in res.output
    pngs = sorted(p.name for p in (tmp_path / "plots").glob("*.png"))
    assert "alpha_by_position.png" in pngs and any(p.startswith("latency_") for p in pngs)
    assert any(p.startswith("sv_bins_") for p in pngs)
    res = run(cli, ["profile", "show", str(tmp_path / "nope")])
    assert res.exit_code == 2 and "does not exist" in res.output and len(res.output.strip().splitlines()) == 1


def test_default_prompt_budget_is_shared_by_the_workloads():
    """15 calibration prompts in all by default, at least 3 per workload: one workload gets 15, mix's five 3 each."""
    assert [acceptance.default_prompts_per_workload(n) for n in (1, 2, 5, 6)] == [15, 8, 3, 3]


def test_one_workload_traces_the_whole_default_budget(tiny_dirs, tmp_path):
    wl = tmp_path / "prompts.txt"  # 30 prompts: 20 calibration, 10 held out (every third)
    wl.write_text("".join(f"w{1 + i % 9} w{1 + i // 9}\n" for i in range(30)))  # 30 distinct prompts
    prof = calibrate([str(tiny_dirs["s"]), str(tiny_dirs["l"])], workload=str(wl), batch_sizes=(1,), contexts=(4,),
                     max_k=2, repeats=1, states_per_prompt=1, lookups=(), progress=False, out=tmp_path / "p")
    assert list(prof.settings["prompts"].values()) == [15]
    assert prof.settings["acceptance"]["prompts_per_workload"] == 15
    assert prof.traces["prompt"].nunique() == 15


def test_the_latency_estimate_leaves_compile_time_out():
    """A first chunk that compiled for 160 s and timed for 2 s: the other 9 chunks are estimated at 2 s each, not
    at 162 s (the compiled runtime compiles up front; extrapolating that read as hours on an H100)."""
    from spectune.calibration.run import _timing_left

    assert _timing_left(162.0, 160.0, 1.0, 10.0) == pytest.approx(18.0)
    assert _timing_left(10.0, 0.0, 2.0, 4.0) == pytest.approx(10.0)  # eager: nothing to leave out


def test_the_calibration_estimate_waits_for_two_batch_sizes_before_pricing_the_acceptance_stage():
    """With the first batch size timed alone, the acceptance stage (prompt groups of up to 16) is not extrapolated
    from it (that read ~4e11 s on a Zen 4): only the latency stage's rest is shown. With two batch sizes the total
    is shown, and it is the latency rest plus the acceptance stage's estimate."""
    import pandas as pd

    from spectune.calibration import acceptance
    from spectune.calibration.acceptance import AcceptanceSettings
    from spectune.calibration.run import _time_left
    from spectune.profile import LATENCY_COLUMNS, LatencyModel

    def timed(batches):
        return latency_rows(("d", "t"), {"d": 0.002, "t": 0.04}, batches, ctxs=(64, 256), slope_k=0.02, slope_b=0.1)

    acc = AcceptanceSettings()
    assert _time_left(pd.DataFrame(columns=LATENCY_COLUMNS), 1.0, 0.0, 0.0, 10.0, ["d", "t"], acc, 15) is None
    assert _time_left(pd.DataFrame(columns=LATENCY_COLUMNS), 4.0, 0.0, 2.0, 10.0, ["d", "t"], acc, 15) == "latency ~16s"
    assert _time_left(timed([1]), 4.0, 0.0, 2.0, 10.0, ["d", "t"], acc, 15) == "latency ~16s"
    two = timed([1, 2])
    expect = 16.0 + acceptance.estimate_seconds(LatencyModel(two), ["d", "t"], acc, [15])
    assert 16.0 < expect < 1e4
    assert _time_left(two, 4.0, 0.0, 2.0, 10.0, ["d", "t"], acc, 15) == f"total ~{expect:.0f}s"
