"""``calibrate --engine`` and ``recommend --engine`` against the stand-in vLLM (``fake_vllm_server.py``), whose step
time is known: 2 ms + 0.5 ms per token a row feeds the target (+ with a draft model 3 ms a step and 1 ms per
draft-model token)."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from spectune.calibration.engine import EngineGrid, calibrate_engine
from spectune.config import DecodeConfig
from spectune.engines import EngineSettings
from spectune.errors import ConfigError, EngineError
from spectune.profile import find_profiles, load_profile
from spectune.profile.lookup import BUNDLED_DIR

PAIR = ["draft-s", "smollm2-135m"]
ZEN4 = BUNDLED_DIR / "draft-s+draft-m+smollm2-135m--cpu-amd-zen4-x2-bf16"
# priced on the stand-in's own steps, which its counters give exactly (its client sees them through sleeps)
GRID = EngineGrid(batch_sizes=(1, 2), lookup_ks=(2, 4), draft_ks=(1, 2), max_new_tokens=8, repeats=1, workload="code",
                  passes=1, steps="engine")


def _settings(exe, tmp_path):
    return EngineSettings("vllm", exe, log_dir=tmp_path / "logs", ready_timeout_s=60)


@pytest.fixture
def engine_profile(fake_vllm, tmp_path):
    return calibrate_engine(PAIR, _settings(fake_vllm, tmp_path), GRID, acceptance=ZEN4, out=str(tmp_path / "ep"))


@pytest.mark.slow
def test_the_fit_recovers_the_engines_step(engine_profile, tmp_path):
    lat = engine_profile.latency
    for b in (1, 2):
        for k in (1, 3, 5):
            assert engine_profile.L("smollm2-135m", b, k) == pytest.approx(0.002 + 0.0005 * k, rel=1e-6)
        assert engine_profile.L("draft-s", b, 1) == pytest.approx(0.001, rel=1e-6)  # a draft forward
        assert engine_profile.L("draft-s", b, 0) == pytest.approx(0.003, rel=1e-6)  # the draft's turn: once a step
        assert engine_profile.L("smollm2-135m", b, 0) == 0.0  # the target's step overhead is in its L(b, 1)
    assert set(lat["ctx"]) and lat["feasible"].all()
    e = engine_profile.meta["engine"]
    assert (e["name"], e["version"]) == ("vllm", "0.32.0") and e["parallel"]["tensor_parallel_size"] == 1
    assert e["lookup_match"] == "earliest"  # vLLM's lookup copies after the earliest match: its lookups price so
    from spectune.tune import CostModel

    assert CostModel(engine_profile, "code").calibrated.lookup_match == "earliest"
    assert e["ragged"] is False and not CostModel(engine_profile, "code").ragged  # vLLM: priced at the longest feed
    flat = copy.deepcopy(engine_profile)
    flat.meta["engine"]["ragged"] = True
    look = DecodeConfig(models=tuple(PAIR[1:]), method="sd", gamma=(2,), proposer="ngram:1,3", batch_size=2,
                        max_new_tokens=16)
    assert CostModel(flat, "code").predict(look).goodput > CostModel(engine_profile, "code").predict(look).goodput
    assert CostModel(load_profile(ZEN4, check_hardware=False), "code").calibrated.lookup_match == "recent"
    assert engine_profile.meta["settings"]["acceptance_from"] == str(ZEN4)
    assert len(engine_profile.traces) and set(engine_profile.traces["models"]) <= {"draft-s,smollm2-135m",
                                                                                 "smollm2-135m", "draft-s"}
    assert len(list((tmp_path / "logs").iterdir())) == len(GRID.lookup_ks) + len(GRID.draft_ks) + 1  # one start each
    assert not (tmp_path / "ep.partial").exists()
    from spectune.calibration.engine import ROW_COLUMNS, client_steps

    rows = pd.DataFrame(e["measured"], columns=ROW_COLUMNS)  # the client waited out every step the engine counted
    assert (client_steps(rows)["step_s"] >= rows["step_s"] * 0.999).all()


@pytest.mark.slow
def test_engine_profiles_and_runtime_profiles_never_stand_in_for_each_other(engine_profile, tmp_path):
    got = find_profiles(PAIR, combine="target", temperature=0.0, search=[tmp_path / "ep"], engine="vllm",
                        other_machines=True)
    assert got.best == tmp_path / "ep" and all(ZEN4 != p for p in got.paths)
    rt = find_profiles(PAIR, combine="target", temperature=0.0, search=[tmp_path / "ep"], other_machines=True)
    assert tmp_path / "ep" not in rt.paths
    assert any("measured through vllm 0.32.0" in why for d, why in rt.skipped if d == tmp_path / "ep")
    assert load_profile(tmp_path / "ep").meta["engine"]["name"] == "vllm"  # no warning for its own machine


@pytest.mark.slow
def test_a_garbled_checkpoint_is_one_line_naming_the_file(tmp_path):
    from spectune.calibration.checkpoint import STATE_FILE
    from spectune.calibration.engine import ROWS_FILE, _open_rows
    from spectune.errors import ConfigError

    def fresh(digest="d1"):
        return {"settings": {"engine": "vllm", "grid": {"repeats": 3}}, "created": "2026-11-27", "stages": {},
                "models": [{"name": m, "hash": digest} for m in PAIR], "hardware": {"cpu": "x"}}

    part = tmp_path / "ep.partial"
    assert _open_rows(part, fresh(), resume=False)[1] == [] and (part / STATE_FILE).is_file()
    (part / ROWS_FILE).write_text("stage,batch\ntarget,1\n")
    with pytest.raises(ConfigError, match=f"{ROWS_FILE}' is corrupt \\(missing columns draft"):
        _open_rows(part, fresh(), resume=True)
    (part / ROWS_FILE).write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ConfigError, match=f"{ROWS_FILE}' is corrupt"):
        _open_rows(part, fresh(), resume=True)
    (part / ROWS_FILE).unlink()
    with pytest.raises(ConfigError, match="weights or dtypes differ .*\\(draft-s, smollm2-135m\\)"):
        _open_rows(part, fresh("d2"), resume=True)  # the served files changed since the interrupted run
    bigger = fresh()
    bigger["settings"]["grid"]["repeats"] = 5
    with pytest.raises(ConfigError, match="settings differ \\(grid\\)"):
        _open_rows(part, bigger, resume=True)
    (part / STATE_FILE).write_text("{not json")
    with pytest.raises(ConfigError, match="state.json' is corrupt \\(not JSON\\)"):
        _open_rows(part, fresh(), resume=True)


def test_a_fault_keeps_the_rows_and_resume_continues(fake_vllm, tmp_path, monkeypatch):
    # the warm-up, the target stage's drive at b = 1 (8 prompts) and one of the 8 at b = 2
    monkeypatch.setenv("FAKE_VLLM_DIE_AFTER", "10")
    with pytest.raises(EngineError, match="rows measured before are kept") as e:
        calibrate_engine(PAIR, _settings(fake_vllm, tmp_path), GRID, acceptance=ZEN4, out=str(tmp_path / "ep"))
    assert len(e.value.rows) == 1 and (tmp_path / "ep.partial" / "engine-rows.csv").is_file()
    monkeypatch.delenv("FAKE_VLLM_DIE_AFTER")
    with pytest.raises(Exception, match="--resume"):  # never restarted from scratch silently
        calibrate_engine(PAIR, _settings(fake_vllm, tmp_path), GRID, acceptance=ZEN4, out=str(tmp_path / "ep"))
    prof = calibrate_engine(PAIR, _settings(fake_vllm, tmp_path), GRID, acceptance=ZEN4, out=str(tmp_path / "ep"),
                            resume=True)
    rows = prof.meta["engine"]["measured"]
    assert len(rows) == 2 * (1 + len(GRID.lookup_ks) + len(GRID.draft_ks)) and rows[0]["stage"] == "target"


def test_a_checkpoint_that_cannot_record_the_seconds_does_not_hide_the_engine_fault(fake_vllm, tmp_path, monkeypatch,
                                                                                      capsys):
    from spectune.calibration.checkpoint import Checkpoint

    def full_disk(*a, **kw):
        raise OSError(28, "No space left on device")

    monkeypatch.setenv("FAKE_VLLM_DIE_AFTER", "10")
    monkeypatch.setattr(Checkpoint, "stage_time", full_disk)
    with pytest.raises(EngineError, match="rows measured before are kept"):  # before: the OSError of the write
        calibrate_engine(PAIR, _settings(fake_vllm, tmp_path), GRID, acceptance=ZEN4, out=str(tmp_path / "ep"))
    assert "could not record stage 'engine-latency''s seconds (" in capsys.readouterr().err


def test_a_resume_may_change_the_passes(fake_vllm, tmp_path, monkeypatch):
    """A two-pass calibration stopped in its first pass and resumed with one pass (``--engine-passes 1``) finishes
    that pass and starts no other (before: "settings differ (grid)"); the profile records the passes measured."""
    from dataclasses import replace

    from spectune.calibration.checkpoint import STATE_FILE

    monkeypatch.setenv("FAKE_VLLM_DIE_AFTER", "10")
    with pytest.raises(EngineError, match="rows measured before are kept"):
        calibrate_engine(PAIR, _settings(fake_vllm, tmp_path), replace(GRID, passes=2), acceptance=ZEN4,
                         out=str(tmp_path / "ep"))
    monkeypatch.delenv("FAKE_VLLM_DIE_AFTER")
    state = json.loads((tmp_path / "ep.partial" / STATE_FILE).read_text())
    first = state["stages"]["engine-latency"]["seconds"]  # the stopped run's, its last set's too
    prof = calibrate_engine(PAIR, _settings(fake_vllm, tmp_path), GRID, acceptance=ZEN4, out=str(tmp_path / "ep"),
                            resume=True)
    rows = prof.meta["engine"]["measured"]
    assert len(rows) == 2 * (1 + len(GRID.lookup_ks) + len(GRID.draft_ks)) and {r["repeat"] for r in rows} == {0}
    assert prof.meta["engine"]["grid"]["passes"] == 1
    m = prof.meta  # the seconds of both runs (before: the resumed run's only)
    assert first > 0 and m["total_seconds"] >= round(first + m["wall_seconds_this_run"], 1) - 0.2


@pytest.mark.slow
def test_recommend_for_the_engine_searches_what_it_runs_and_validates_in_it(engine_profile, fake_vllm, tmp_path):
    from spectune.cli import cli

    res = CliRunner().invoke(cli, ["recommend", "--engine", "vllm", "--models", ",".join(PAIR), "--profile",
                                   str(tmp_path / "ep"), "--trials", "40", "--validate", "2", "--resamples", "0",
                                   "--workload", "code", "--max-new-tokens", "8", "--out", str(tmp_path / "rec"),
                                   "--engine-bin", fake_vllm, "--engine-log-dir", str(tmp_path / "rlogs")])
    assert res.exit_code == 0, res.output
    import optuna

    study = optuna.load_study(study_name=None, storage=f"sqlite:///{tmp_path / 'rec' / 'study.db'}")
    cfgs = [t.user_attrs["config"] for t in study.trials if "config" in t.user_attrs]
    assert cfgs and {c["method"] for c in cfgs} <= {"standard", "sd"}
    assert {c.get("policy", "fixed") for c in cfgs} == {"fixed"}
    assert {c.get("proposer", "model").split(":")[0] for c in cfgs} == {"model", "ngram"}
    chosen = json.loads((tmp_path / "rec" / "config.json").read_text())
    assert chosen["method"] in ("standard", "sd") and "chosen (by measured)" in res.output
    assert "for vllm 0.32.0: priced on its engine profile" in res.output and "--engine vllm --check" in res.output
    assert len(list((tmp_path / "rlogs").iterdir())) >= 2  # the target alone and at least one pick, each served


@pytest.mark.slow
def test_bench_engine_measures_the_grid_in_the_engine_beside_the_runtime(fake_vllm, tmp_path):
    from spectune.cli import cli

    res = CliRunner().invoke(cli, ["bench", "--engine", "vllm", "--models", ",".join(PAIR), "--gammas", "1,2",
                                   "--proposer", "ngram:1,3", "--workload", "code", "--prompts", "1",
                                   "--max-new-tokens", "6", "--repeats", "2", "--out", str(tmp_path / "b"),
                                   "--engine-bin", fake_vllm, "--engine-log-dir", str(tmp_path / "logs")])
    assert res.exit_code == 0, res.output
    import pandas as pd

    rows = pd.read_csv(tmp_path / "b" / "engine-rows.csv")
    labels = {"target alone", "draft-s K=1", "draft-s K=2", "ngram:1,3 K=1", "ngram:1,3 K=2"}
    assert set(rows["label"]) == labels and set(rows["backend"]) == {"vllm", "spectune"}
    assert len(rows) == 2 * 2 * len(labels)  # each config: both backends, both repeats
    order = rows[rows["label"] == "draft-s K=2"]["backend"].tolist()
    assert order == ["vllm", "spectune", "vllm", "spectune"]  # interleaved, repeat by repeat
    assert len(list((tmp_path / "logs").iterdir())) == len(labels)  # one engine start per artifact
    summary = pd.read_csv(tmp_path / "b" / "engine-summary.csv")
    assert {"vllm", "spectune", "vllm vs its target alone", "acceptance max |diff|"} <= set(summary.columns)


@pytest.mark.slow
@pytest.mark.parametrize("quick", [False, True])
def test_a_quick_starting_engine_gives_each_repeat_a_round_of_starts(fake_vllm, tmp_path, monkeypatch, quick):
    """llama-server starts in seconds, so each repeat starts every configuration again in turn (a host that slows
    over the run slows all of them alike); vLLM, two minutes a start, runs its repeats in one start."""
    from spectune.bench.engine_runs import bench_engine, label
    from spectune.decoder import encode_workload
    from spectune.engines.vllm_server import VllmEngine
    from spectune.models import load_tokenizer

    monkeypatch.setattr(VllmEngine, "quick_start", quick)
    configs = [DecodeConfig(models=tuple(PAIR[1:]), method="standard", batch_size=1, max_new_tokens=6),
               DecodeConfig(models=tuple(PAIR[1:]), method="sd", gamma=(2,), proposer="ngram:1,3", batch_size=1,
                            max_new_tokens=6)]
    prompts = {"code": encode_workload(load_tokenizer(PAIR[1]), "code", n=1)}
    rows = bench_engine(configs, _settings(fake_vllm, tmp_path), prompts, repeats=2, n_prompts=1)
    order = [(r["label"], r["repeat"]) for r in rows]
    a, b = label(configs[0]), label(configs[1])
    assert order == ([(a, 0), (b, 0), (a, 1), (b, 1)] if quick else [(a, 0), (a, 1), (b, 0), (b, 1)])
    assert len(list((tmp_path / "logs").iterdir())) == (4 if quick else 2)


def _alive_at_each_drive(monkeypatch):
    """([(the start driven, how many starts are alive)] at each drive, recorded as they happen; the starts)."""
    import spectune.engines as engines
    from spectune.engines.vllm_server import VllmEngine

    started, seen, real_open, real_drive = [], [], engines.open_engine, VllmEngine.drive

    def opened(*a, **kw):
        started.append(real_open(*a, **kw))
        return started[-1]

    def drive(self, prompts, concurrency, *a, **kw):
        seen.append((started.index(self), sum(e.server.alive() for e in started)))
        return real_drive(self, prompts, concurrency, *a, **kw)

    monkeypatch.setattr(engines, "open_engine", opened)
    monkeypatch.setattr(VllmEngine, "drive", drive)
    return seen, started


@pytest.mark.slow
def test_starts_alive_at_once_are_driven_in_turn(fake_vllm, tmp_path, monkeypatch):
    """--engine-together 2: two starts alive at once, each repeat driving them in turn from the next one; the third
    configuration takes a second set of starts, with a target alone of its own (its ratio measured in turn)."""
    from dataclasses import replace

    from spectune.bench.engine_runs import bench_engine, label
    from spectune.decoder import encode_workload
    from spectune.models import load_tokenizer

    seen, started = _alive_at_each_drive(monkeypatch)
    one = dict(models=tuple(PAIR[1:]), batch_size=1, max_new_tokens=6)
    configs = [DecodeConfig(method="standard", **one)] + [
        DecodeConfig(method="sd", gamma=(k,), proposer="ngram:1,3", **one) for k in (2, 3)]
    prompts = {"code": encode_workload(load_tokenizer(PAIR[1]), "code", n=1)}
    rows = bench_engine(configs, replace(_settings(fake_vllm, tmp_path), together=2), prompts, repeats=2, n_prompts=1)
    a, b, c = (label(x) for x in configs)
    assert [(r["label"], r["repeat"], r["set"]) for r in rows] == [
        (a, 0, 0), (b, 0, 0), (b, 1, 0), (a, 1, 0), (a, 0, 1), (c, 0, 1), (c, 1, 1), (a, 1, 1)]
    # warm-ups, then the drives: both starts of a set alive through its drives, the second set after the first
    assert seen == [(0, 2), (1, 2), (0, 2), (1, 2), (1, 2), (0, 2), (2, 2), (3, 2), (2, 2), (3, 2), (3, 2), (2, 2)]
    from spectune.engines.vllm_server import kv_share

    memory = [e.server.argv[e.server.argv.index("--kv-cache-memory-bytes") + 1] for e in started]
    assert memory == [str(kv_share(2))] * 4 and len(list((tmp_path / "logs").iterdir())) == 4  # a share of 2


@pytest.mark.slow
def test_the_target_alone_is_measured_in_the_set_of_its_cell(fake_vllm, tmp_path, monkeypatch):
    """Starts of b = 1 in one set, of b = 8 in another (as llama.cpp's artifacts are): the target alone measures b = 1
    in the first set only and b = 8 in the second only, so no row is levelled by a drive of another set."""
    from dataclasses import replace

    import spectune.bench.engine_runs as er
    from spectune.decoder import encode_workload
    from spectune.models import load_tokenizer

    real = er.by_artifact

    def per_batch_size(configs, engine):  # one artifact a batch size but the target alone's, as llama.cpp exports
        target, groups = real(configs, engine)
        alone = [(a, g) for a, g in groups if g[0].method == "standard"]
        return target, alone + [(a, [c]) for a, g in groups if g[0].method != "standard" for c in g]

    monkeypatch.setattr(er, "by_artifact", per_batch_size)
    configs = [er.engine_config(PAIR, b, 4, k, "ngram:1,3") for b in (1, 8) for k in (0, 2, 3)]
    prompts = {"code": encode_workload(load_tokenizer(PAIR[1]), "code", n=1)}
    rows = er.bench_engine(configs, replace(_settings(fake_vllm, tmp_path), together=3), prompts, repeats=1,
                           n_prompts=1)
    where = sorted((r["label"], r["batch_size"], r["set"]) for r in rows)
    assert where == [("ngram:1,3 K=2", 1, 0), ("ngram:1,3 K=2", 8, 1), ("ngram:1,3 K=3", 1, 0),
                     ("ngram:1,3 K=3", 8, 1), ("target alone", 1, 0), ("target alone", 8, 1)]
    assert [g for _, g in er.levelled(rows)] == [r["decode_goodput"] for r in rows]  # nothing scaled


def _row(label, rep, g, s=0, w="mix", b=1, backend="vllm"):
    return {"backend": backend, "label": label, "workload": w, "batch_size": b, "repeat": rep, "decode_goodput": g,
            "set": s, "acceptance_per_pos": "[]"}


def test_a_later_sets_rows_are_levelled_by_its_own_target_alone():
    """Set 2 ran while the host was half as fast: its lookup's ratio to its own target alone (1.5x) is kept and its
    goodput put on set 1's level; set 2's target alone is only a level; a row without a set is set 1's."""
    from spectune.bench.engine_runs import engine_summary, repeat_runs
    from spectune.tune.recommend import vs_alone

    rows = [_row("target alone", 0, 100.0), _row("draft K=2", 0, 120.0), _row("target alone", 1, 90.0),
            _row("draft K=2", 1, 99.0), _row("target alone", 0, 50.0, s=1), _row("ngram K=3", 0, 75.0, s=1),
            _row("target alone", 1, 40.0, s=1), _row("ngram K=3", 1, 60.0, s=1),
            {**_row("target alone", 0, 30.0, b=8), "set": ""}, _row("ngram K=3", 0, 45.0, s=1, b=8)]
    runs = repeat_runs(rows)
    assert runs[("mix", "target alone", 1)] == [100.0, 90.0] and runs[("mix", "draft K=2", 1)] == [120.0, 99.0]
    assert runs[("mix", "ngram K=3", 1)] == pytest.approx([150.0, 135.0])
    assert vs_alone(runs[("mix", "ngram K=3", 1)], runs[("mix", "target alone", 1)]) == pytest.approx(1.5)
    assert runs[("mix", "ngram K=3", 8)] == [45.0]  # no target alone in its own set at b = 8: as measured
    summary = engine_summary(rows).set_index(["label", "batch_size"])
    assert summary.loc[("ngram K=3", 1), "vllm vs its target alone"] == pytest.approx(1.5)


def test_the_target_alone_joins_every_set_of_starts():
    from spectune.bench.engine_runs import start_sets

    one = dict(models=tuple(PAIR[1:]), batch_size=1, max_new_tokens=6)
    alone = ("A", [DecodeConfig(method="standard", **one)])
    others = [(k, [DecodeConfig(method="sd", gamma=(k,), proposer="ngram:1,3", **one)]) for k in (1, 2, 3, 4, 5)]
    keys = lambda sets: [[a for a, _ in s] for s in sets]  # noqa: E731
    assert keys(start_sets([alone, *others], 3)) == [["A", 1, 2], ["A", 3, 4], ["A", 5]]
    assert keys(start_sets([alone, *others[:2]], 3)) == [["A", 1, 2]]  # one set: as they come
    assert keys(start_sets([alone, *others[:2]], 1)) == [["A"], [1], [2]]  # one start at a time
    assert keys(start_sets(others[:3], 2)) == [[1, 2], [3]]  # no target alone to carry


def _group(name, k, *batch_sizes):
    """A start for ``start_sets``: (its name, its configs: the lookup at K = ``k``, 0 the target alone, at each batch
    size)."""
    from spectune.bench.engine_runs import engine_config

    return name, [engine_config(PAIR, b, 6, k, "ngram:1,3") for b in batch_sizes]


def _names(sets):
    return [[name for name, _ in s] for s in sets]


def test_sets_of_starts_keep_each_batch_sizes_starts_together():
    """llama.cpp exports one artifact a batch size (``--kv-unified`` at 8 slots), its target alone one for all: a set
    holds one batch size's starts, with the target alone, so a cell's rows lie in one set where they fit."""
    from spectune.bench.engine_runs import start_sets

    group, keys = _group, _names
    alone = group("A", 0, 1, 8)
    b1, b8 = [group(f"{k}@1", k, 1) for k in (1, 2, 3)], [group(f"{k}@8", k, 8) for k in (1, 2, 3)]
    assert keys(start_sets([alone, *b1, *b8], 4)) == [["A", "1@1", "2@1", "3@1"], ["A", "1@8", "2@8", "3@8"]]
    assert keys(start_sets([alone, *b1, *b8], 3)) == [["A", "1@1", "2@1"], ["A", "3@1"], ["A", "1@8", "2@8"],
                                                      ["A", "3@8"]]
    assert keys(start_sets([alone, *b1, b8[0]], 8)) == [["A", "1@1", "2@1", "3@1"], ["A", "1@8"]]
    assert keys(start_sets([group("A1", 0, 1), *b1[:1], *b8[:1]], 8)) == [["A1", "1@1"], ["1@8"]]  # serves b = 1
    assert keys(start_sets([alone, b1[0], b8[0]], 1)) == [["A"], ["1@1"], ["1@8"]]  # one at a time: A once
    assert keys(start_sets([group("A4", 0, 4), b1[0], b8[0]], 8)) == [["1@1"], ["1@8"], ["A4"]]  # never dropped


def test_starts_serving_every_batch_size_share_sets_with_a_pick_at_one():
    """vLLM exports one artifact for every batch size, so the grid's starts serve b = 1 and 8 alike; a pick measured
    at one batch size only shares their sets (kept apart by its batch sizes, the mix campaign on the Zen 3 guest
    took a third set and a third target-alone start for vLLM's b = 1 pick)."""
    from spectune.bench.engine_runs import start_sets

    group, keys = _group, _names
    alone, grid = group("A", 0, 1, 8), [group(f"g{k}", k, 1, 8) for k in range(1, 7)]
    picks = [group("p@1", 7, 1), group("p@8", 8, 8)]
    assert keys(start_sets([alone, *grid, *picks], 5)) == [["A", "g1", "g2", "g3", "g4"],
                                                           ["A", "g5", "g6", "p@1", "p@8"]]
    llama = [group("q@1", 1, 1), group("q@8", 1, 8), group("r@1", 2, 1)]  # one artifact a batch size: kept apart
    assert keys(start_sets([alone, *llama], 5)) == [["A", "q@1", "r@1"], ["A", "q@8"]]


@pytest.mark.slow
def test_calibration_stages_alive_at_once_interleave(fake_vllm, tmp_path, monkeypatch):
    from dataclasses import replace

    seen, _ = _alive_at_each_drive(monkeypatch)
    grid = replace(GRID, batch_sizes=(1,), lookup_ks=(2,), draft_ks=(1,), repeats=2)
    prof = calibrate_engine(PAIR, replace(_settings(fake_vllm, tmp_path), together=3), grid, acceptance=ZEN4,
                            out=str(tmp_path / "ep3"))
    rows = [(r["stage"], r["repeat"]) for r in prof.meta["engine"]["measured"]]
    assert rows == [("target", 0), ("lookup-k2", 0), ("draft-s-k1", 0), ("lookup-k2", 1), ("draft-s-k1", 1),
                    ("target", 1)]
    assert all(alive == 3 for _, alive in seen) and len(seen) == 3 + 6  # warm-ups, then the measurements


@pytest.mark.slow
def test_calibration_sets_of_stages_each_carry_the_target_alone(fake_vllm, tmp_path, monkeypatch):
    """--engine-together 2 over three stages: two sets of starts, the target alone in each; the second set's
    target is its level, kept in the rows (set 1) and out of the fit."""
    from dataclasses import replace

    seen, _ = _alive_at_each_drive(monkeypatch)
    grid = replace(GRID, batch_sizes=(1,), lookup_ks=(2,), draft_ks=(1,), repeats=2, stat="paired")
    prof = calibrate_engine(PAIR, replace(_settings(fake_vllm, tmp_path), together=2), grid, acceptance=ZEN4,
                            out=str(tmp_path / "ep2"))
    rows = [(r["stage"], r["repeat"], r["set"]) for r in prof.meta["engine"]["measured"]]
    assert rows == [("target", 0, 0), ("lookup-k2", 0, 0), ("lookup-k2", 1, 0), ("target", 1, 0),
                    ("target", 0, 1), ("draft-s-k1", 0, 1), ("draft-s-k1", 1, 1), ("target", 1, 1)]
    assert all(alive == 2 for _, alive in seen) and len(seen) == 2 * (2 + 4)  # per set: warm-ups, measurements
    assert prof.L("smollm2-135m", 1, 3) == pytest.approx(0.002 + 0.0005 * 3, rel=1e-6)  # the fake engine's step


def test_bench_engine_refuses_a_policy_the_engine_cannot_run(tmp_path):
    from spectune.cli import cli

    res = CliRunner().invoke(cli, ["bench", "--engine", "vllm", "--gammas", "2", "--policy", "confidence:0.5",
                                   "--engine-bin", str(tmp_path / "no-vllm"), "--out", str(tmp_path / "b")])
    assert res.exit_code != 0 and "--policy 'confidence:0.5' is not one" in res.output
    assert "Traceback" not in res.output and not (tmp_path / "b").exists()


def test_advice_validate_without_engine_advice_is_one_line(tmp_path):
    from spectune.cli import cli

    for flag in ("--advice-validate", "--advice-confirm"):
        for extra in ([], ["--engine", "vllm"]):
            res = CliRunner().invoke(cli, ["bench", flag, "2", *extra, "--out", str(tmp_path / "b")])
            assert res.exit_code != 0 and f"{flag} needs --engine and --validate-advice" in res.output
            assert "Traceback" not in res.output and not (tmp_path / "b").exists()


@pytest.mark.slow
def test_bench_engine_validates_engine_priced_advice(engine_profile, fake_vllm, tmp_path):
    from spectune.cli import cli

    res = CliRunner().invoke(cli, ["bench", "--engine", "vllm", "--engine-only", "--validate-advice", "--profile",
                                   str(tmp_path / "ep"), "--trials", "20", "--models", ",".join(PAIR),
                                   "--gammas", "1,2", "--proposer", "ngram:1,3", "--workload", "code,edit",
                                   "--batch-sizes", "1,2", "--prompts", "1", "--max-new-tokens", "6", "--repeats", "1",
                                   "--advice-confirm", "2", "--out", str(tmp_path / "b"), "--engine-bin", fake_vllm,
                                   "--engine-log-dir", str(tmp_path / "logs")])
    assert res.exit_code == 0, res.output
    import pandas as pd

    table = pd.read_csv(tmp_path / "b" / "engine-advice.csv")
    assert sorted(zip(table["workload"], table["batch_size"])) == [("code", 1), ("code", 2), ("edit", 1),
                                                                    ("edit", 2)]
    assert (table["regret"] >= 1.0).all() and table["mape"].notna().all() and "engine advice: regret" in res.output
    assert (table["confirm_regret"] >= 1.0).all() and "on fresh rounds regret" in res.output
    fresh = pd.read_csv(tmp_path / "b" / "engine-confirm.csv")
    assert set(fresh["repeat"]) == {0, 1} and set(fresh["workload"]) == {"code", "edit"}
    rows = pd.read_csv(tmp_path / "b" / "engine-rows.csv")
    assert set(rows["backend"]) == {"vllm"} and set(rows["workload"]) == {"code", "edit"}


@pytest.mark.slow
def test_validated_engine_advice_picks_the_measured_best_on_calibration_prompts(engine_profile, monkeypatch,
                                                                              tmp_path):
    """bench's --advice-validate N: recommend --engine --validate N measures its N best and the target alone in
    the engine on the workload's calibration prompts (the grid judges the pick on the held-out ones), every
    cell's in one pass (each config only on the workloads that asked for it), and picks the fastest measured;
    without it nothing is measured."""
    from spectune.bench import engine_advice
    from spectune.bench.engine_runs import EngineBenchSpec, label
    from spectune.decoder import encode_workload
    from spectune.models import load_tokenizer

    calls = []

    def speed(configs, c):  # the target alone slowest, then in the order measured
        return 1.0 if label(c) == "target alone" else 10.0 + configs.index(c)

    def bench_engine(configs, engine, prompts, only, write, **kw):
        calls.append((configs, prompts, only))
        rows = [{"backend": "vllm", "workload": w, "label": label(c), "batch_size": c.batch_size, "repeat": 0,
                 "decode_goodput": speed(configs, c)} for c in configs for w in prompts if only(c, w)]
        write(rows)  # checkpointed as measured
        return rows

    monkeypatch.setattr(engine_advice, "bench_engine", bench_engine)
    spec = EngineBenchSpec(tuple(PAIR), batch_sizes=(1,), max_new_tokens=8, workload="code,edit", prompts=3)
    vllm, ep = EngineSettings("vllm", "unused"), str(tmp_path / "ep")
    predicted = engine_advice.engine_picks(spec, vllm, ep, trials=30)
    assert not calls
    lines, out = [], tmp_path / "adv"
    out.mkdir()
    picks = engine_advice.engine_picks(spec, vllm, ep, trials=30, validate=2, out=out, say=lines.append)
    (configs, prompts, only), = calls
    kept = pd.read_csv(out / "engine-validation.csv")
    assert len(kept) == 6 and sorted(set(kept["workload"])) == ["code", "edit"]
    assert any("target alone in vllm on 3 calibration prompts" in x for x in lines), lines
    tok = load_tokenizer(PAIR[-1])
    assert prompts == {w: encode_workload(tok, w, "calibration", n=3) for w in ("code", "edit")}
    for w in ("code", "edit"):
        asked = [c for c in configs if only(c, w)]
        assert len(asked) == 3 and "target alone" in {label(c) for c in asked}
        assert label(picks[(w, 1)]) == label(max(asked, key=lambda c: speed(configs, c)))
        assert label(picks[(w, 1)]) == kept[kept["workload"] == w].sort_values("decode_goodput")["label"].iloc[-1]
    calls.clear()  # replayed from the kept rows (benchmarks/reprice.py --validate): the same picks, nothing measured
    again = engine_advice.engine_picks(spec, vllm, ep, trials=30, validate=2, replay=kept.to_dict("records"))
    assert not calls and {k: label(c) for k, c in again.items()} == {k: label(c) for k, c in picks.items()}
    with pytest.raises(ConfigError, match="lack what recommend asks for now: edit b=1"):
        engine_advice.engine_picks(spec, vllm, ep, trials=30, validate=2,
                                   replay=kept[kept["workload"] == "code"].to_dict("records"))
    assert any(label(picks[k]) != label(predicted[k]) for k in picks)


@pytest.mark.slow
def test_export_for_vllm_prices_on_the_engine_profile(engine_profile, tmp_path):
    from dataclasses import replace

    from spectune.config import DecodeConfig
    from spectune.artifacts import export

    cfg = DecodeConfig(models=tuple(PAIR), method="sd", gamma=(2, 1), extra={"profile": str(tmp_path / "ep")})
    exp = export(cfg, "vllm")
    assert exp.profile.meta["engine"]["name"] == "vllm" and exp.predicted["profile"] == str(tmp_path / "ep")
    assert "config" in exp.predicted
    longer = export(replace(cfg, gamma=(3, 1)), "vllm")  # the draft ran at K = 1, 2 only: K = 3 is not priced
    assert longer.predicted is None and any("exceeds the calibrated gamma_max 2" in n for n in longer.notes)
    other = export(cfg, "sglang")  # no SGLang profile: a runtime profile prices it, never vLLM's
    assert other.profile is None or not other.profile.meta.get("engine")


@pytest.mark.slow
def test_passes_start_every_stage_again_in_turn(fake_vllm, tmp_path):
    from dataclasses import replace

    grid = replace(GRID, batch_sizes=(1,), lookup_ks=(2,), draft_ks=(1,), passes=2)
    prof = calibrate_engine(PAIR, _settings(fake_vllm, tmp_path), grid, acceptance=ZEN4, out=str(tmp_path / "ep2"))
    stages = [r["stage"] for r in prof.meta["engine"]["measured"]]
    assert stages == ["target", "lookup-k2", "draft-s-k1"] * 2
    assert [r["repeat"] for r in prof.meta["engine"]["measured"]] == [0, 0, 0, 1, 1, 1]
    assert len(list((tmp_path / "logs").iterdir())) == 6


@pytest.mark.slow
def test_a_ragged_engine_calibrates_its_lookups_on_the_workloads_prompts(fake_vllm, tmp_path, monkeypatch):
    """An engine that flattens its rows (llama.cpp) is priced at its rows' mean feed, so its lookups run on the
    workload's calibration prompts, as the target alone does (the same context); a padded one (vLLM) on the
    self-repeating prompt, where every row feeds K + 1 (a longer context)."""
    from dataclasses import replace

    from spectune.engines.vllm_server import VllmEngine

    grid = replace(GRID, batch_sizes=(1,), lookup_ks=(2,), draft_ks=(1,))
    padded = calibrate_engine(PAIR, _settings(fake_vllm, tmp_path), grid, acceptance=ZEN4, out=str(tmp_path / "p"))
    monkeypatch.setattr(VllmEngine, "ragged", lambda self: True)
    flat = calibrate_engine(PAIR, _settings(fake_vllm, tmp_path), grid, acceptance=ZEN4, out=str(tmp_path / "f"))

    def ctx(prof):
        return {r["stage"]: r["ctx"] for r in prof.meta["engine"]["measured"]}

    assert ctx(flat)["lookup-k2"] == ctx(flat)["target"] == ctx(padded)["target"] != ctx(padded)["lookup-k2"]
    assert flat.meta["engine"]["ragged"] and not padded.meta["engine"]["ragged"]


def _rows(runs, workload="code"):
    return [{"backend": "vllm", "workload": workload, "label": lab, "batch_size": 1, "repeat": i, "decode_goodput": g}
            for lab, gs in runs.items() for i, g in enumerate(gs)]


RUNS = {"target alone": [10.0, 10.0, 10.0], "draft-s K=1": [8.0, 9.0, 14.0]}  # one repeat on the quiet host


def test_advice_regret_is_of_the_fastest_repeats_with_the_medians_beside():
    """Regret and MAPE of the fastest repeats, regret of the medians and side by side beside; the speedups' MAPE of
    the ratio to the target alone repeat by repeat (8 / 10, 9 / 10, 14 / 10: 0.9x, where the fastest repeats would
    say 1.4x)."""
    from spectune.bench.engine_advice import advice_table, summary_line
    from spectune.bench.engine_runs import engine_grid
    from spectune.profile import load_profile
    from spectune.tune import CostModel

    configs = engine_grid(PAIR, (1,), (), (1,), 8)
    pick = next(c for c in configs if c.method == "sd")
    table = advice_table(_rows(RUNS), {("code", 1): pick}, configs, ZEN4, "vllm")
    row = table.iloc[0]
    assert row["pick"] == "draft-s K=1" and row["best"] == "draft-s K=1" and row["regret"] == 1.0
    assert row["pick_measured"] == 14.0 and row["regret_median"] == pytest.approx(10.0 / 9.0)
    cm = CostModel(load_profile(ZEN4, check_hardware=False), "code", max_new_tokens=pick.max_new_tokens)
    alone = next(c for c in configs if c.method == "standard")
    speedup = cm.predict(pick).goodput / cm.predict(alone).goodput
    assert row["mape_speedup"] == pytest.approx(abs(speedup - 0.9) / 0.9)
    assert row["regret_side"] == pytest.approx(1.0 / 0.9)  # the target alone is the best side by side, the pick 0.9x
    assert "1/1 within 1.05; of medians 1.111, 0/1; side by side 1.111, 0/1" in summary_line(table)


def test_fresh_rounds_judge_the_pick_against_the_grids_fastest_without_its_lucky_repeat(monkeypatch, tmp_path):
    """--advice-confirm R: the pick, the grid's 3 fastest and the target alone measured again in R rounds on the
    grid's prompts, each only on its cell's workload; the regret of those rounds is the best median ratio to the
    pick round by round. The grid's best won on one lucky repeat (14 against 10-ish): on fresh rounds it runs as
    the pick does (regret 1.0 where the grid said 1.4); in the other cell the lookup really is faster (1.2)."""
    from spectune.bench import engine_advice
    from spectune.bench.engine_runs import engine_grid, label

    configs = engine_grid(PAIR, (1, 2, 3, 4), ("ngram:1,3",), (1,), 8)
    grid = {"target alone": [10.0] * 3, "draft-s K=1": [10.0, 10.2, 10.1], "draft-s K=2": [8.0, 9.0, 14.0],
            "draft-s K=3": [9.0] * 3, "draft-s K=4": [5.0] * 3, "ngram:1,3 K=2": [9.5] * 3, "ngram:1,3 K=4": [2.0] * 3}
    rows = _rows(grid, "code") + _rows({**grid, "ngram:1,3 K=4": [13.0] * 3}, "edit")
    by_label = {label(c): c for c in configs}
    picks = {("code", 1): by_label["draft-s K=1"], ("edit", 1): by_label["draft-s K=1"]}
    table = engine_advice.advice_table(rows, picks, configs, ZEN4, "vllm")
    assert list(table["regret"]) == [pytest.approx(14.0 / 10.2), pytest.approx(14.0 / 10.2)]
    fresh = {"code": {"draft-s K=2": [10.0, 9.0, 10.5]}, "edit": {"ngram:1,3 K=4": [12.0, 13.0, 11.0]}}
    calls = []

    def bench_engine(cfgs, engine, prompts, repeats, n_prompts, only, say, write):
        calls.append((sorted((label(c), w) for c in cfgs for w in prompts if only(c, w)), prompts, repeats))
        out = [{"backend": "vllm", "workload": w, "label": label(c), "batch_size": 1, "repeat": i,
                "decode_goodput": fresh[w].get(label(c), [10.0, 10.0, 10.0])[i]}
               for c in cfgs for w in prompts if only(c, w) for i in range(repeats)]
        write(out)
        return out

    monkeypatch.setattr(engine_advice, "bench_engine", bench_engine)
    prompts = {"code": [[1, 2]], "edit": [[3, 4]]}
    got = engine_advice.confirm(table, rows, configs, EngineSettings("vllm", "unused"), prompts, 3, out=tmp_path)
    (asked, given, repeats), = calls
    assert given is prompts and repeats == 3
    assert asked == sorted([(lab, "code") for lab in ("draft-s K=1", "draft-s K=2", "target alone")]
                           + [(lab, "edit") for lab in ("draft-s K=1", "draft-s K=2", "ngram:1,3 K=4",
                                                        "target alone")])  # the 3 fastest (draft-s K=3 is 4th)
    code, edit = got.iloc[0], got.iloc[1]
    assert code["confirm_regret"] == 1.0 and code["confirm_best"] in {"draft-s K=1", "target alone"}
    assert edit["confirm_best"] == "ngram:1,3 K=4" and edit["confirm_regret"] == pytest.approx(1.2)
    assert edit["confirm_rounds"] == "3/3" and code["regret"] == table.iloc[0]["regret"]
    # the grid's fastest repeats against the fresh rounds': K=2's lucky 14 is 1/3 above its 10.5
    assert code["confirm_repeat_error"] == pytest.approx((0.2 / 10 + 3.5 / 10.5 + 0) / 3)
    assert edit["confirm_repeat_error"] == pytest.approx((0.2 / 10 + 4 / 10 + 0 + 0) / 4)
    assert len(pd.read_csv(tmp_path / "engine-confirm.csv")) == 21
    line = engine_advice.summary_line(got)
    assert "0/2 within 1.05" in line and "on fresh rounds regret 1.200 at worst (1/2 within 1.05)" in line


def test_validation_in_the_engine_keeps_each_repeat_in_order(monkeypatch):
    from spectune.bench import engine_runs

    configs = engine_runs.engine_grid(PAIR, (1,), (), (1,), 8)
    monkeypatch.setattr(engine_runs, "bench_engine", lambda *a, **k: _rows(RUNS, "held-out"))
    assert engine_runs.measure_in_engine(configs, None, [[1, 2]]) == [[10.0, 10.0, 10.0], [8.0, 9.0, 14.0]]


@pytest.mark.slow
def test_reprice_refits_an_engine_campaign_offline(engine_profile, tmp_path, capsys):
    """benchmarks/reprice.py over an engine profile and the rows an advice run measured: the latency re-fitted
    from the profile's own rows, recommend --engine's picks and the advice table (nothing measured again)."""
    import importlib.util

    import pandas as pd

    from spectune.bench.engine_runs import ENGINE_ROW_COLUMNS, engine_grid, label

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "reprice.py"
    spec = importlib.util.spec_from_file_location("reprice", path)
    reprice = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reprice)
    rows = [{"backend": "vllm", "label": label(c), "method": c.method, "proposer": c.proposer,
             "k": c.gamma[0] if c.method != "standard" else 0, "batch_size": c.batch_size, "workload": "code",
             "repeat": 0, "tokens": 8, "seconds": 1.0, "decode_goodput": 10.0 + i, "acceptance_per_pos": "[]",
             "tokens_per_draft": ""}
            for i, c in enumerate(engine_grid(PAIR, GRID.draft_ks, ("ngram:1,3",), GRID.batch_sizes, 8))]
    (tmp_path / "adv").mkdir()
    pd.DataFrame(rows, columns=ENGINE_ROW_COLUMNS).to_csv(tmp_path / "adv" / "engine-rows.csv", index=False)
    reprice.main([str(tmp_path / "ep"), str(tmp_path / "adv"), "vllm", str(ZEN4)])
    out = capsys.readouterr().out
    assert "engine advice: regret" in out and out.count("recommend --engine vllm on code") == len(GRID.batch_sizes)
    assert "prediction error by batch size and kind" in out and "target alone" in out.split("kind")[-1]


def test_every_measured_configuration_is_rebuilt_the_picks_outside_the_grid_included():
    """A pick the grid does not hold (llama.cpp's lookup + draft chain under p-min, run c2's code b = 1 pick) is
    rebuilt from its row, so confirm.py measures it again and reprice.py prices it (before: reprice's grid_configs
    lacked it, the row unpriced; confirm.py's regret nan)."""
    from spectune.bench.engine_runs import engine_grid, label, measured_configs

    grid = engine_grid(PAIR, (1, 3), ("ngram:1,3",), (1, 8), 48, policies=("fixed", "confidence:0.6"))
    chain = DecodeConfig(models=tuple(PAIR), method="sd", gamma=(3, 1), proposer="ngram+model:1,3,8",
                         policy="confidence:0.6", batch_size=1, max_new_tokens=48)
    rows = pd.DataFrame([{"label": label(c), "method": c.method, "proposer": c.proposer, "batch_size": c.batch_size,
                          "k": c.gamma[0] if c.method != "standard" else 0} for c in grid + [chain]])
    got = measured_configs(rows, PAIR, 48)
    assert [(label(c), c.batch_size) for c in got] == [(label(c), c.batch_size) for c in grid + [chain]]
    assert got[-1].to_dict() == chain.to_dict()
    rows.loc[0, "label"] = "draft-s K=9"
    with pytest.raises(ConfigError, match="cannot rebuild the measured configuration 'draft-s K=9'"):
        measured_configs(rows, PAIR, 48)


def test_a_pick_the_grid_holds_is_measured_once():
    """Rows are keyed by label and batch size, so a pick with the label of a grid configuration (recommend's
    target alone, which differs from the grid's in fields no row shows) or of another cell's pick is not started
    again: on the Zen 3 campaign the target alone was driven twice a round at b = 8, the later drive its level."""
    from dataclasses import replace

    from spectune.bench.engine_runs import EngineBenchSpec, engine_grid, label

    grid = engine_grid(PAIR, (1, 3), ("ngram:1,3",), (1, 8), 48)
    alone = replace(next(c for c in grid if c.method == "standard" and c.batch_size == 8), gamma=(3,))
    lookup = next(c for c in grid if c.proposer == "ngram:1,3" and c.batch_size == 8)
    chain = DecodeConfig(models=tuple(PAIR), method="sd", gamma=(3, 1), proposer="ngram+model:1,3,8",
                         policy="confidence:0.6", batch_size=1, max_new_tokens=48)
    spec = EngineBenchSpec(tuple(PAIR), ks=(1, 3), lookups=("ngram:1,3",), batch_sizes=(1, 8), max_new_tokens=48,
                           picks=(alone, replace(lookup, seed=3), chain, chain))
    got = spec.configs()
    assert [(label(c), c.batch_size) for c in got] == [(label(c), c.batch_size) for c in grid + [chain]]
    assert got[:len(grid)] == grid


@pytest.mark.slow
def test_confirm_measures_a_finished_campaigns_cells_again(fake_vllm, tmp_path, capsys, monkeypatch):
    """benchmarks/confirm.py over a campaign's rows and advice table: the pick, the grid's 2 fastest and the target
    alone of each cell run again in the engine (found as a user's, by SPECTUNE_VLLM), 2 rounds on the held-out
    prompts; the table gets the fresh rounds' regret, in a new folder (the campaign's files untouched)."""
    import importlib.util

    from spectune.bench.engine_runs import ENGINE_ROW_COLUMNS, engine_grid, label

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "confirm.py"
    spec = importlib.util.spec_from_file_location("confirm", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    configs = engine_grid(PAIR, (1, 2), ("ngram:1,3",), (1,), 6)
    rows = [{"backend": "vllm", "label": label(c), "method": c.method, "proposer": c.proposer,
             "k": c.gamma[0] if c.method != "standard" else 0, "batch_size": 1, "workload": "code", "repeat": 0,
             "tokens": 6, "seconds": 1.0, "decode_goodput": 10.0 + i, "acceptance_per_pos": "[]",
             "tokens_per_draft": ""} for i, c in enumerate(configs)]
    adv = tmp_path / "adv"
    adv.mkdir()
    pd.DataFrame(rows, columns=ENGINE_ROW_COLUMNS).to_csv(adv / "engine-rows.csv", index=False)
    pd.DataFrame([{"workload": "code", "batch_size": 1, "pick": "draft-s K=1", "best": "ngram:1,3 K=2",
                   "regret": 1.4, "regret_median": 1.4, "regret_side": 1.4, "mape": 0.1, "mape_speedup": 0.1,
                   "spearman": 1.0, "confirm_best": "x", "confirm_regret": 9.0, "confirm_rounds": "1/1"}]
                 ).to_csv(adv / "engine-advice.csv", index=False)  # engines.sh's own fresh rounds (--advice-confirm)
    before = (adv / "engine-advice.csv").read_bytes()
    monkeypatch.setenv("SPECTUNE_VLLM", fake_vllm)
    mod.main([str(adv), "vllm", str(tmp_path / "out"), "--rounds", "2", "--top", "2", "--prompts", "1",
              "--max-new-tokens", "6"])
    out = capsys.readouterr().out
    fresh = pd.read_csv(tmp_path / "out" / "engine-confirm.csv")
    assert sorted(set(fresh["label"])) == ["draft-s K=1", "ngram:1,3 K=1", "ngram:1,3 K=2", "target alone"]
    assert set(fresh["repeat"]) == {0, 1} and (fresh["decode_goodput"] > 0).all()
    table = pd.read_csv(tmp_path / "out" / "engine-advice.csv")
    assert table["confirm_regret"].iloc[0] >= 1.0 and "on fresh rounds regret" in out
    assert table["confirm_regret"].iloc[0] != 9.0 and not [c for c in table if c.endswith(".1")]  # replaced, once
    assert (adv / "engine-advice.csv").read_bytes() == before


@pytest.mark.slow
def test_vllm_spread_runs_its_designs_and_keeps_every_drive(fake_vllm, tmp_path, capsys, monkeypatch):
    """benchmarks/vllm_spread.py on the stand-in vLLM: the warm-up design starts once per arm in the order given
    (C without prefix caching), the waves design alternates 8 and 32 requests at b = 8; each drive one row."""
    import importlib.util
    import os

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "vllm_spread.py"
    spec = importlib.util.spec_from_file_location("vllm_spread", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setenv("SPECTUNE_VLLM", fake_vllm)
    mod.main([str(tmp_path / "w"), "warmup", "--rounds", "1", "--order", "A,C"])
    rows = pd.read_csv(tmp_path / "w" / "rows.csv")
    assert list(rows["arm"]) == ["A"] * 4 + ["C"] * 4 and set(rows["b"]) == {1, 8}
    assert (rows["decode_goodput"] > 0).all()
    logs = sorted((tmp_path / "w" / "logs").glob("*.log"))
    assert ["--no-enable-prefix-caching" in f.read_text() for f in logs] == [False, True]
    mod.main([str(tmp_path / "v"), "waves", "--rounds", "2"])
    rows = pd.read_csv(tmp_path / "v" / "rows.csv")
    assert list(rows["requests"]) == [8, 32, 32, 8] and "4 waves" in capsys.readouterr().out
    assert set(mod.cpu_seconds({"client": os.getpid()})) == {"client"}


@pytest.mark.slow
def test_error_budget_takes_a_campaigns_mape_apart(engine_profile, tmp_path, capsys):
    """benchmarks/error_budget.py over a campaign whose grid ran every configuration exactly as priced, but 10 %
    slower: as priced, each prediction is 1/0.9 - 1 = 11.1 % off; leveled on the grid's target alone, none is;
    on the validation's (also 10 % slow there), none is. The drafts' tokens a round are set beside the engine's."""
    import importlib.util

    import pandas as pd

    from spectune.bench.engine_runs import ENGINE_ROW_COLUMNS, engine_grid, label
    from spectune.tune import CostModel

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "error_budget.py"
    spec = importlib.util.spec_from_file_location("error_budget", path)
    budget = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(budget)
    prof = budget.refit(tmp_path / "ep", str(ZEN4))[0]
    cm = CostModel(prof, "code", max_new_tokens=8)  # as the script prices
    grid = engine_grid(PAIR, GRID.draft_ks, ("ngram:1,3",), GRID.batch_sizes, 8)
    rows = [{"backend": "vllm", "label": label(c), "method": c.method, "proposer": c.proposer,
             "k": c.gamma[0] if c.method != "standard" else 0, "batch_size": c.batch_size, "workload": "code",
             "repeat": 0, "tokens": 8, "seconds": 1.0, "decode_goodput": 0.9 * cm.predict(c).goodput,
             "acceptance_per_pos": "[]" if c.method == "standard" else "[0.5]" if c.gamma[0] == 1 else "[0.5, 0.25]",
             "tokens_per_draft": ""}
            for c in grid]
    (tmp_path / "adv").mkdir()
    pd.DataFrame(rows, columns=ENGINE_ROW_COLUMNS).to_csv(tmp_path / "adv" / "engine-rows.csv", index=False)
    alone = [r for r in rows if r["label"] == "target alone"]
    pd.DataFrame(alone, columns=ENGINE_ROW_COLUMNS).to_csv(tmp_path / "adv" / "engine-validation.csv", index=False)
    budget.main([str(tmp_path / "ep"), str(tmp_path / "adv"), "vllm", str(ZEN4), "--heldout-acceptance", str(ZEN4),
                 "--stage-acceptance", str(ZEN4)])
    out = capsys.readouterr().out.splitlines()
    table = {line.rsplit(maxsplit=3)[0].strip(): [float(x) for x in line.rsplit(maxsplit=3)[1:]]
             for line in out[2:7]}
    assert table["as priced"] == pytest.approx([1 / 0.9 - 1] * 3, abs=1e-3)
    assert table["acceptance: held-out"] == table["as priced"]  # the same acceptance
    assert table["level: grid"] == pytest.approx([0.0] * 3, abs=1e-6)
    assert table["level: validation"] == pytest.approx([0.0] * 3, abs=1e-6)
    assert table["both: grid level, held-out acceptance"] == pytest.approx([0.0] * 3, abs=1e-6)
    by_pos = out.index("acceptance by position at b = 1: the engine's counters, the cost model's prediction of them "
                       "(its rounds that proposed; on the calibration prompts, and with --heldout-acceptance on the "
                       "grid's):")
    drafts = [line.split() for line in out[9:by_pos] if line.split()[1:2] == ["draft-s"]]
    assert [(d[2], float(d[3])) for d in drafts] == [("K=1", 1.5), ("K=2", 1.75)]  # 1 + the accepted a draft
    at = out.index("the calibration's own stages (the fastest of each), priced on the acceptance of their prompts:")
    stages = [line.split() for line in out[at + 2:]]  # stage, b, measured, predicted, error %
    assert sorted((s[0], int(s[1])) for s in stages) == sorted(
        (name, b) for b in GRID.batch_sizes for name in ["target"] + [f"draft-s-k{k}" for k in GRID.draft_ks])
    assert all(float(s[3]) > 0 for s in stages)
    measured = pd.read_csv(tmp_path / "adv" / "engine-rows.csv", keep_default_na=False)
    configs = {(label(c), c.batch_size): c for c in grid}
    table = budget.by_position(measured, configs, budget.cost_models(prof, (prof, {"code": "code"})), True)
    table = table.set_index("config")
    assert list(table.index) == ["draft-s K=1", "draft-s K=2", "ngram:1,3 K=1", "ngram:1,3 K=2"]
    for name in ("draft-s", "ngram:1,3"):
        one, two = table.loc[f"{name} K=1"], table.loc[f"{name} K=2"]
        assert one["engine"] == "0.500" and two["engine"] == "0.500 0.250"
        pred = cm.acceptance_by_position(configs[(f"{name} K=2", 1)])  # the rounds of K = 2 that proposed
        assert [float(x) for x in two["priced"].split()] == pytest.approx(pred, abs=5e-4)
        assert two["max |diff| priced"] == pytest.approx(max(abs(0.5 - pred[0]), abs(0.25 - pred[1])), abs=5e-4)
        assert two["held-out"] == two["priced"]  # the same acceptance


def test_a_start_that_fails_in_a_later_round_keeps_the_rounds_before(fake_vllm, tmp_path, monkeypatch):
    """A quick-starting engine starts again each round: a start failing in round 2 raises with round 1's rows."""
    import spectune.bench.engine_runs as er
    import spectune.engines as engines
    from spectune.decoder import encode_workload
    from spectune.engines.vllm_server import VllmEngine
    from spectune.errors import EngineError
    from spectune.models import load_tokenizer

    monkeypatch.setattr(VllmEngine, "quick_start", True)
    starts, real = [], engines.open_engine

    def failing_later(*a, **kw):
        starts.append(a)
        if len(starts) == 2:
            raise EngineError("vllm failed to start (exit status 1)")
        return real(*a, **kw)

    monkeypatch.setattr(engines, "open_engine", failing_later)
    configs = [DecodeConfig(models=tuple(PAIR[1:]), method="standard", batch_size=1, max_new_tokens=6)]
    prompts = {"code": encode_workload(load_tokenizer(PAIR[1]), "code", n=1)}
    with pytest.raises(EngineError, match="failed to start") as e:
        er.bench_engine(configs, _settings(fake_vllm, tmp_path), prompts, repeats=2, n_prompts=1)
    assert [r["repeat"] for r in e.value.rows] == [0]
