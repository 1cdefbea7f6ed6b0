"""recommend: profile lookup (the one finder, asked as recommend asks), calibrate-if-missing (the API layer),
validation on the runtime decoder, CLI, config that runs."""
import json

import optuna
import pytest
from click.testing import CliRunner

from spectune.calibration.hardware import fingerprint
from spectune.cli import cli
from spectune.config import DecodeConfig
from spectune.errors import ProfileError
from spectune.api import recommend as recommend_or_calibrate
from spectune.profile import find_profiles, profile_matches
from spectune.tune.recommend import recommend, run_dtypes
from tune_synth import make_profile

SMALL_CAL = dict(batch_sizes="1,2", contexts="16", max_k=4, repeats=1, quiet_attempts=1, prompts_per_workload=1,
                 states_per_prompt=3,
                 workload="code", progress=False)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECTUNE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def find_profile(models, combine, temperature=0.0, dtype="auto"):
    """The finder as recommend asks it: (best path or None, notes)."""
    found = find_profiles(models, combine=combine, temperature=temperature, dtypes=run_dtypes(models, dtype))
    return found.best, found.notes


def _synthetic_for(models, combine, temperature=0.0, **kw):
    p = make_profile(models=tuple(models), combine=combine, temperature=temperature, **kw)
    p.meta["hardware"] = fingerprint("cpu", use_nvml=False)
    return p


def test_lookup_matches_models_combination_temperature_and_hardware(cache, tiny_dirs):
    models = [str(tiny_dirs["s"]), str(tiny_dirs["l"])]
    _synthetic_for(models, "we:0.5,0.5").save(cache / "profiles" / "one")
    assert find_profile(models, "we:0.5,0.5")[0] == cache / "profiles" / "one"
    assert find_profile(models, "target")[0] is None
    assert find_profile(models, "we:0.5,0.5", temperature=0.8)[0] is None
    assert find_profile(models[::-1], "we:0.5,0.5")[0] is None
    other = _synthetic_for(models, "target")
    ident = other.meta["hardware"]["identity"]
    other.meta["hardware"]["identity"] = dict(ident, cpu=dict(ident["cpu"], family=-1))
    other.save(cache / "profiles" / "two")
    path, notes = find_profile(models, "target")
    assert path is None and any("two: " in n and "family -1" in n for n in notes)
    assert profile_matches(other.meta, models, "target", 0.0) is None  # models/combination/temperature fit
    assert find_profile(models, "we:0.5,0.5", dtype="bfloat16")[0] is None  # measured in float32


def test_pair_found_in_a_larger_target_profile(cache, tiny_dirs):
    """A target profile of (s, m, l) holds the pair traces of (s, l) and (m, l): it serves a pair request with
    combine=target (exact matches first), never a reversed pair, a combination or another temperature."""
    s_, m_, l_ = (str(tiny_dirs[k]) for k in ("s", "m", "l"))
    _synthetic_for([s_, m_, l_], "target").save(cache / "profiles" / "family")
    assert find_profile([s_, l_], "target")[0] == cache / "profiles" / "family"
    assert find_profile([m_, l_], "target")[0] == cache / "profiles" / "family"
    assert find_profile([l_, s_], "target")[0] is None
    assert find_profile([s_, l_], "we:0.5,0.5")[0] is None
    assert find_profile([s_, l_], "target", temperature=0.7)[0] is None
    _synthetic_for([s_, l_], "target").save(cache / "profiles" / "pair")
    assert find_profile([s_, l_], "target")[0] == cache / "profiles" / "pair"


def test_recommend_a_pair_from_a_larger_profile(cache, tiny_dirs, tmp_path):
    s_, m_, l_ = (str(tiny_dirs[k]) for k in ("s", "m", "l"))
    _synthetic_for([s_, m_, l_], "target").save(cache / "profiles" / "family")
    rec = recommend([s_, l_], n_trials=40, out=tmp_path / "o")
    assert rec.profile_source == "found" and set(rec.chosen.config.models) <= {s_, l_}
    assert all(set(r.config.models) <= {s_, l_} for r in rec.rows)


def test_no_profile_and_no_calibrate_is_an_error(cache, tiny_dirs, tmp_path):
    with pytest.raises(ProfileError, match="no profile"):
        recommend([str(tiny_dirs["s"]), str(tiny_dirs["l"])], out=tmp_path / "o")
    with pytest.raises(ProfileError, match="no profile"):
        recommend_or_calibrate([str(tiny_dirs["s"]), str(tiny_dirs["l"])], calibrate_missing=False,
                               out=tmp_path / "o")
    r = CliRunner().invoke(cli, ["recommend", "--models", f"{tiny_dirs['s']},{tiny_dirs['l']}", "--no-calibrate",
                                 "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and r.output.count("\n") == 1 and "no profile" in r.output


def test_calibrates_when_missing_then_finds_it_and_the_config_runs(cache, tiny_dirs, tmp_path):
    models = [str(tiny_dirs["s"]), str(tiny_dirs["l"])]
    said = []
    rec = recommend_or_calibrate(models, combine="target", n_trials=60, out=tmp_path / "o", calibrate_kwargs=SMALL_CAL,
                                 say=said.append, max_new_tokens=8)
    assert rec.profile_source == "calibrated" and any("calibrating first" in s for s in said)
    assert rec.profile_path.parent == cache / "profiles"
    cfg = DecodeConfig.load(rec.config_path)
    assert list(cfg.models)[-1] == models[-1] and cfg.combine == "target"
    sched = json.loads(rec.schedule_path.read_text())
    assert [e["batch_size"] for e in sched["entries"]] == [1, 2]
    # the written config executes
    r = CliRunner().invoke(cli, ["generate", "--config", str(rec.config_path), "--prompt", "w1 w2 w3", "--json"])
    assert r.exit_code == 0, r.output
    assert len(json.loads(r.output)["token_ids"]) <= 8
    # second time: found, no calibration; the same study grows
    rec2 = recommend_or_calibrate(models, combine="target", n_trials=20, out=tmp_path / "o", calibrate_kwargs=SMALL_CAL)
    assert rec2.profile_source == "found" and rec2.profile_path == rec.profile_path
    st = optuna.load_study(study_name=rec2.study_name, storage=f"sqlite:///{tmp_path / 'o' / 'study.db'}")
    assert len(st.trials) == 80


def test_validate_measures_on_the_runtime_decoder_and_cli_table(cache, tiny_dirs, tmp_path):
    models = [str(tiny_dirs["s"]), str(tiny_dirs["m"]), str(tiny_dirs["l"])]
    prof = _synthetic_for(models, "we:0.2,0.3,0.5", batch_sizes=(1, 2))
    prof.save(tmp_path / "prof")
    rec = recommend(models, combine="we:0.2,0.3,0.5", profile=tmp_path / "prof", n_trials=80, validate_n=2,
                    validate_prompts=2, max_new_tokens=4, out=tmp_path / "o", workload="code")
    measured = [r for r in rec.rows if r.measured]
    assert len(measured) == 2 and rec.baseline.measured["goodput"] > 0
    assert rec.chosen_by == "measured"
    assert rec.chosen in measured + [rec.baseline]
    best = max(measured + [rec.baseline], key=lambda r: r.measured["goodput"])
    assert rec.chosen is best
    st = optuna.load_study(study_name=rec.study_name, storage=f"sqlite:///{tmp_path / 'o' / 'study.db'}")
    assert {f"measured:{r.trial}" for r in measured} | {"measured:standard"} <= set(st.user_attrs)
    r = CliRunner().invoke(cli, ["recommend", "--models", ",".join(models), "--combine", "we:0.2,0.3,0.5",
                                 "--profile", str(tmp_path / "prof"), "--trials", "30", "--out", str(tmp_path / "c"),
                                 "--workload", "code", "--plot", str(tmp_path / "plots"), "--pareto",
                                 "--storage", f"sqlite:///{tmp_path / 'c.db'}", "--study-name", "cli"])
    assert r.exit_code == 0, r.output
    assert "top configurations" in r.output and "schedule" in r.output and "vs standard" in r.output
    assert (tmp_path / "plots" / "speedup_vs_gamma.png").stat().st_size > 0
    assert (tmp_path / "plots" / "pareto.png").stat().st_size > 0
    r = CliRunner().invoke(cli, ["recommend", "--models", ",".join(models), "--profile", str(tmp_path / "prof"),
                                 "--out", str(tmp_path / "d")])
    assert r.exit_code == 2 and "combination" in r.output and r.output.count("\n") == 1


def test_recommend_device_reaches_the_lookup_a_missing_calibration_and_the_validation(
        cache, tiny_dirs, tmp_path, monkeypatch):
    """--device cuda:1 (faked: this machine has no GPU) is the device whose profiles are looked up, on which a
    missing profile is calibrated and on which --validate loads its models; the CPU stays the default."""
    import spectune.decoder
    import spectune.machine
    import spectune.models
    import spectune.profile

    seen: dict[str, list] = {"find": [], "load": [], "decoder": [], "passes": []}
    real_find, real_load, real_build = (spectune.profile.find_profiles, spectune.models.load_models,
                                        spectune.decoder.build_decoder)

    def find(*a, **k):
        seen["find"].append(k.get("device"))
        return real_find(*a, **{**k, "device": "cpu"})

    def load(specs, **k):
        seen["load"].append(k.get("device"))
        return real_load(specs, **{**k, "device": "cpu"})

    def build(models, config=None, **k):
        seen["decoder"].append(k.get("device"))
        dec = real_build(models, config, **{**k, "device": "cpu"})
        gen = dec.generate_batch
        dec.generate_batch = lambda *a, **kw: seen["passes"].append(1) or gen(*a, **kw)
        return dec

    monkeypatch.setattr("spectune.config.check_device", lambda d: d)
    monkeypatch.setattr(spectune.machine, "_HERE", {})  # no fake GPU identity outlives the test
    monkeypatch.setattr(spectune.profile, "find_profiles", find)
    monkeypatch.setattr(spectune.models, "load_models", load)
    monkeypatch.setattr(spectune.decoder, "build_decoder", build)
    models = [str(tiny_dirs["s"]), str(tiny_dirs["l"])]
    _synthetic_for(models, "target", batch_sizes=(1,)).save(cache / "profiles" / "one")
    rec = recommend(models, n_trials=10, validate_n=1, validate_prompts=1, max_new_tokens=2, out=tmp_path / "o",
                    device="cuda:1", dtype="float32", runtime="eager", resamples=0)
    assert rec.profile_source == "found" and seen["find"] == ["cuda:1"] and seen["load"] == ["cuda:1"]
    n = len(seen["decoder"])  # the baseline and each validated config, every one decoded on the device
    assert n >= 2 and seen["decoder"] == ["cuda:1"] * n
    assert len(seen["passes"]) == 2 * n  # on a GPU one untimed pass first, then the timed one
    seen["decoder"].clear(), seen["passes"].clear()
    recommend(models, n_trials=10, validate_n=1, validate_prompts=1, max_new_tokens=2, out=tmp_path / "c",
              dtype="float32", runtime="eager", resamples=0)
    assert seen["decoder"][0] == "cpu" and len(seen["passes"]) == len(seen["decoder"])  # CPU, eager: timed pass only
    asked = []

    def calibrate_missing(models, **settings):
        asked.append(settings)
        raise ProfileError("calibration asked")

    with pytest.raises(ProfileError, match="calibration asked"):
        recommend(models, combine="we:0.5,0.5", n_trials=10, out=tmp_path / "p", device="cuda:1", dtype="float32",
                  runtime="eager", calibrate_missing=calibrate_missing)
    assert asked[0]["device"] == "cuda:1" and asked[0]["runtime"] == "eager"
    with pytest.raises(ProfileError, match="calibration asked"):  # on the CPU, calibrate's own default device
        recommend(models, combine="we:0.5,0.5", n_trials=10, out=tmp_path / "q", dtype="float32",
                  calibrate_missing=calibrate_missing)
    assert "device" not in asked[1]


def test_recommend_searches_lookups_and_policies_and_picks_the_lookup_where_it_pays(cache, tiny_dirs, tmp_path):
    """A profile where prompt lookup hits with 4 accepted tokens every time (an edit-like workload) and the draft is
    poor: recommend searches sd-ngram and the policies, picks the lookup, and its schedule and config say so; the
    report also names the best of each proposer kind."""
    import numpy as np

    s_, l_ = str(tiny_dirs["s"]), str(tiny_dirs["l"])
    hits = (np.ones((8, 8)), [4] * 8)
    p = _synthetic_for([s_, l_], "target", alpha=0.2, base={s_: 0.01, l_: 0.1},
                       lookups={("ngram:1,3", l_, "target"): hits, ("ngram:2,4", l_, "target"): (hits[0], [1] * 8)})
    p.save(cache / "profiles" / "edit")
    rec = recommend([s_, l_], n_trials=120, out=tmp_path / "o", batch_size=1)
    c = rec.chosen.config
    assert (c.method, c.models, c.proposer) == ("sd", (l_,), "ngram:1,3") and c.gamma[0] >= 4  # lookups of 4
    assert rec.chosen.prediction["speedup_vs_target"] == pytest.approx(5.0, rel=0.01)  # 5 tokens per forward
    # the summary line's target alone is the one every row's "vs target" divides by
    assert rec.chosen.prediction["goodput"] / rec.target_alone["goodput"] == pytest.approx(
        rec.chosen.prediction["speedup_vs_target"])
    study = optuna.load_study(study_name=rec.study_name, storage=f"sqlite:///{tmp_path / 'o' / 'study.db'}")
    searched = {(t.user_attrs["config"].get("proposer", "model"), t.user_attrs["config"].get("policy", "fixed"))
                for t in study.trials}
    assert {("model", "fixed"), ("model", "heuristic"), ("ngram:2,4", "fixed")} <= searched
    # the best of each proposer kind at the chosen batch size, which the report prints on one line
    from rich.console import Console

    from spectune.decoding.proposers import proposer_kind
    from spectune.tune.report import print_recommendation

    assert {"model", "ngram"} <= set(rec.by_proposer) and rec.by_proposer["ngram"].config.proposer == "ngram:1,3"
    for kind, row in rec.by_proposer.items():
        cfgs = [(t.values[0], DecodeConfig.from_dict(t.user_attrs["config"])) for t in study.trials if t.values]
        mine = [v for v, cf in cfgs if proposer_kind(cf.proposer) == kind and cf.method != "standard"]
        assert row.config.batch_size == 1 and row.prediction["goodput"] == pytest.approx(max(mine))
    con = Console(record=True, width=400)
    print_recommendation(rec, con)
    line = next(x for x in con.export_text().splitlines() if x.startswith("best by proposer at batch 1"))
    assert line.index("prompt lookup: sd ngram:1,3") < line.index("draft model: sd")  # the faster kind first
    sched = json.loads((tmp_path / "o" / "schedule.json").read_text())["entries"]
    assert sched[0]["proposer"] == "ngram:1,3" and sched[0]["policy"] == "fixed"
    assert DecodeConfig.load(tmp_path / "o" / "config.json").proposer == "ngram:1,3"
    # a profile whose draft is sure of nothing: confidence policies are searched only where q was recorded
    from spectune.tune.cost import CostModel
    from spectune.tune.recommend import _space

    cm = CostModel(p)
    space, _ = _space(cm, tmp_path, (s_, l_), "target", None, None, 0.0, 16, 0)
    assert space.lookups == ("ngram:1,3", "ngram:2,4") and "heuristic" in space.policies
    assert any(x.startswith("confidence") for x in space.policies)
    p.tables["traces"] = p.traces.drop(columns="q")
    space, _ = _space(CostModel(p), tmp_path, (s_, l_), "target", None, None, 0.0, 16, 0)
    assert not any(x.startswith("confidence") for x in space.policies)


def test_recommend_reprices_its_top_rows_over_resampled_prompts_and_says_when_the_pick_is_a_near_tie(
        cache, tiny_dirs, tmp_path):
    """Draft accepts everything on one calibration prompt and nothing on the other: which gamma wins depends on
    which prompts were drawn, and the report says how often the pick stays within 5 % of the best."""
    import numpy as np

    s_, l_ = str(tiny_dirs["s"]), str(tiny_dirs["l"])
    key = (s_, f"{s_},{l_}", "target")
    p = _synthetic_for([s_, l_], "target", base={s_: 0.001, l_: 0.01}, betas={key: np.vstack(
        [np.ones((4, 8)), np.zeros((4, 8))])}, prompts={key: [0] * 4 + [1] * 4}, batch_sizes=(1,))
    p.save(tmp_path / "prof")
    rec = recommend([s_, l_], profile=tmp_path / "prof", n_trials=60, out=tmp_path / "o", batch_size=1, resamples=12,
                    workload="code")
    from spectune.tune.cost import CostModel

    robs = [r.robustness for r in rec.rows]
    assert all(r and r["resamples"] == 12 and r["prompts"] == 2 for r in robs)
    # the heuristic policy follows whichever prompt it is on, and each request starts at its first length: the
    # row starting at the longest (8) is near the best wherever the accepting prompt was drawn; where only the
    # rejecting one was, the target alone (a contender of another kind) is 10 % faster
    rejecting_only = sum(CostModel(p, "code").resampled(s).draws == ["code/1"] * 2 for s in range(12))
    heuristic = {r.config.gamma[0]: r.robustness["p_near_best"] for r in rec.rows if r.config.policy == "heuristic"}
    assert heuristic[8] == pytest.approx(1 - rejecting_only / 12) and max(heuristic.values()) == heuristic[8]
    assert rec.chosen.robustness["p_near_best"] < 0.8 and any(n.startswith("near-tie") for n in rec.notes)
    assert not any("mask-less" in n for n in rec.notes)  # the synthetic profile timed the runtime's forward
    del p.meta["settings"]["latency_forward"]
    p.save(tmp_path / "old")
    old = recommend([s_, l_], profile=tmp_path / "old", n_trials=5, out=tmp_path / "old-o", batch_size=1, resamples=0,
                    workload="code")
    assert any("mask-less forward" in n and "recalibrate" in n for n in old.notes)
    r = CliRunner().invoke(cli, ["recommend", "--models", f"{s_},{l_}", "--profile", str(tmp_path / "prof"),
                                 "--trials", "30", "--out", str(tmp_path / "c"), "--workload", "code",
                                 "--batch-size", "1", "--resamples", "6"])
    assert r.exit_code == 0, r.output
    assert "P(near best)" in r.output and "resamples of the 2 calibration prompts" in r.output
    off = recommend([s_, l_], profile=tmp_path / "prof", n_trials=10, out=tmp_path / "d", batch_size=1, resamples=0,
                    workload="code")
    assert all(r.robustness is None for r in off.rows)
    r = CliRunner().invoke(cli, ["recommend", "--models", f"{s_},{l_}", "--profile", str(tmp_path / "prof"),
                                 "--out", str(tmp_path / "e"), "--resamples", "-1"])
    assert r.exit_code == 2 and "--resamples" in r.output and r.output.count("\n") == 1


def test_validation_measures_the_best_of_each_kind_first():
    """--validate 3 on a study whose top three are one lookup at three lengths measures the lookup's best, the
    draft model's best and then the next best of any kind, in order of predicted goodput; never standard."""
    from spectune.tune.recommend import _diverse

    study = optuna.create_study(direction="maximize")

    def add(value, g=None, **kw):
        cfg = (DecodeConfig(models=("c",), method="sd", gamma=(g,), **kw) if g
               else DecodeConfig(models=("a", "c"), method="sd", gamma=(4, 1), **kw))
        study.add_trial(optuna.trial.create_trial(value=value, user_attrs={
            "config": cfg.to_dict(), "prediction": {"latency_per_token": 1 / value}}))

    for v, g in ((90, 8), (89, 6), (88, 4)):
        add(v, proposer="ngram:1,3", g=g)
    add(87, policy="confidence:0.4")
    add(86, proposer="ngram:2,4", g=8)  # the same length as the best lookup: another kind all the same
    add(85, policy="heuristic")  # the same gamma as the confidence row
    study.add_trial(optuna.trial.create_trial(value=95, user_attrs={"config": DecodeConfig(
        models=("a", "c"), method="standard", gamma=(1, 1)).to_dict(), "prediction": {"latency_per_token": 0.01}}))
    got = [(t.values[0]) for t in _diverse(study, 3, None)]
    assert got == [90, 87, 86]  # ngram:1,3 k=8, the draft under confidence, ngram:2,4 (a lookup of its own kind)
    assert [t.values[0] for t in _diverse(study, 5, None)] == [90, 89, 87, 86, 85]
    assert [t.values[0] for t in _diverse(study, 3, max_latency=1 / 86.5)] == [90, 89, 87]


def test_the_best_of_each_proposer_kind_at_the_chosen_batch_size():
    """_by_proposer: per proposer kind the best speculative trial at the batch size asked, within max_latency; never
    standard (not a proposer), never a faster trial of another batch size."""
    from spectune.tune.recommend import _by_proposer

    study = optuna.create_study(direction="maximize")

    def add(value, b=1, method="sd", **kw):
        cfg = DecodeConfig(models=("a", "c"), method=method, gamma=(3, 1), batch_size=b, **kw)
        study.add_trial(optuna.trial.create_trial(value=value, user_attrs={
            "config": cfg.to_dict(), "prediction": {"goodput": value, "latency_per_token": b / value}}))

    add(200, method="standard")
    add(150, b=4)  # faster, at another batch size
    for value, kw in ((90, {}), (80, {"policy": "confidence:0.4"}), (95, {"proposer": "ngram+model:1,3,8"}),
                      (99, {"proposer": "ngram+model:2,4,8", "b": 2}), (70, {"proposer": "ngram:1,3"})):
        add(value, **kw)
    got = {k: r.prediction["goodput"] for k, r in _by_proposer(study, 1, None).items()}
    assert got == {"model": 90, "ngram+model": 95, "ngram": 70}
    assert {k: r.config.batch_size for k, r in _by_proposer(study, 4, None).items()} == {"model": 4}
    assert set(_by_proposer(study, 1, max_latency=1 / 92)) == {"ngram+model"}  # the others are too slow


def test_the_tables_show_each_rows_draft_length_policy():
    """A policy is printed in brackets, which rich would read as a style tag and drop (rows that differ only in
    policy looked identical): the table cells are escaped."""
    from rich.console import Console
    from rich.table import Table

    from spectune.tune.report import _method, _proposer

    cfg = DecodeConfig(models=("a", "b"), method="sd", gamma=(3, 1), policy="confidence:0.4")
    t = Table()
    t.add_column("method")
    t.add_column("proposer")
    t.add_row(_method(cfg), _proposer(cfg))
    import io

    hyb = DecodeConfig(models=("a", "b"), method="sd", gamma=(3, 1), proposer="ngram+model:1,3,8")
    t.add_row(_method(hyb), _proposer(hyb))  # the lookup, and which model drafts where it misses
    con = Console(width=100, record=True, file=io.StringIO())
    con.print(t)
    text = con.export_text()
    assert "sd [confidence:0.4]" in text and "ngram+model:1,3,8 (a)" in text


def test_a_predicted_tie_with_standard_goes_to_not_speculating():
    """A lookup that never proposes prices exactly as the target alone; the engine still pays for running it
    (llama.cpp, `ngram:1,3` K = 2 at b = 8: 0.85-0.94x), so a tie picks standard; a strict win keeps the pick."""
    from spectune.tune.recommend import Row, _choose

    look = Row(DecodeConfig(models=("c",), method="sd", gamma=(2,), proposer="ngram:1,3"), {"goodput": 142.0})
    alone = Row(DecodeConfig(models=("c",), method="standard", gamma=(1,)), {"goodput": 142.0})
    notes: list[str] = []
    assert _choose([look], alone, False, notes) == (alone, "predicted") and "nothing speculative" in notes[0]
    faster = Row(look.config, {"goodput": 150.0})
    assert _choose([faster], alone, False, []) == (faster, "predicted")
    assert _choose([look], alone, True, []) == (look, "predicted")  # a Pareto front keeps its own order


def test_a_measured_engine_pick_beats_the_target_alone_side_by_side():
    """Measured in an engine, the pick is the best by its median ratio to the target alone repeat by repeat (repeat
    i of each ran in round i), and replaces the target alone only above 1. Run z's mix b = 8 (llama.cpp): the
    lookup was faster by its fastest (117.3 vs 111.0) and its median repeat (104.4 vs 102.1), but 0.94 / 0.88 /
    1.15x the target alone side by side (held out: 0.88x). The runtime's validation has no repeats and keeps the
    fastest."""
    from spectune.tune.recommend import Row, _choose

    def row(method, gamma, proposer, reps):
        return Row(DecodeConfig(models=("c",), method=method, gamma=(gamma,), proposer=proposer), {"goodput": 121.4},
                   measured={"goodput": max(reps), "goodput_median": sorted(reps)[1], "repeats": reps})

    look = row("sd", 2, "ngram:1,3", [104.4, 85.0, 117.3])
    other = row("sd", 1, "ngram:1,2", [101.1, 94.5, 102.1])
    alone = row("standard", 1, "model", [111.0, 96.6, 102.1])
    notes: list[str] = []
    assert _choose([look, other], alone, False, notes) == (alone, "measured") and "0.98x" in notes[-1]
    assert not any("speed has moved" in n for n in notes)  # 111.0 measured against 121.4 priced: within 10 %
    assert notes[0].startswith("measured near-tie: the best validated ran 0.98x")  # +-4 % at sd(log) 0.10
    slower = Row(alone.config, {"goodput": 140.0}, measured=alone.measured)
    notes.clear()
    assert _choose([look, other], slower, False, notes)[0] is slower
    assert "111.0 tok/s (fastest repeat) where the profile prices 140.0 (-21%)" in notes[0]
    assert look.measured["vs_target_alone"] == pytest.approx(104.4 / 111.0)
    surer = row("sd", 2, "ngram:1,3", [114.0, 99.0, 117.3])  # 1.03 / 1.02 / 1.15x
    assert _choose([look, surer, other], alone, False, []) == (surer, "measured")
    runtime = [Row(look.config, look.prediction, measured={"goodput": 141.1}),
               Row(alone.config, alone.prediction, measured={"goodput": 133.9})]
    assert _choose(runtime[:1], runtime[1], False, []) == (runtime[0], "measured")
    assert _choose(runtime[1:], runtime[0], False, [])[1] == "measured"

def test_an_engine_validation_that_cannot_tell_its_best_from_the_target_alone_says_so():
    """The Zen 2 guest's validation in llama.cpp (docs/bench-data/2026-12-02-amd-zen2-llamacpp): at mix b = 8 the
    best of three lookups ran 1.01x the target alone side by side, its rounds' ratios at sd(log) 0.035 about their
    means: a median ratio of 3 rounds is known to about +-2.5 % (1.25 sd / sqrt(3); the best of three ties leads by
    0.85 of that by chance, the best of eight by 1.42), so 1.01x is a near-tie, said, the pick kept. At code b = 1
    the chain ran 1.65x: no note."""
    from spectune.tune.recommend import Row, _choose, _expected_max_normal

    def row(label, reps):
        proposer, k = label.split(" K=")
        return Row(DecodeConfig(models=("draft-s", "c"), method="sd", gamma=(int(k),), proposer=proposer),
                   {"goodput": 150.0}, measured={"goodput": max(reps), "repeats": reps})

    alone = Row(DecodeConfig(models=("c",), method="standard", gamma=(1,)), {"goodput": 180.0},
                measured={"goodput": 187.3, "repeats": [186.5, 158.5, 187.3]})
    looks = [row("ngram:1,2 K=1", [189.0, 163.4, 188.3]), row("ngram:1,3 K=2", [165.0, 151.6, 176.4]),
             row("ngram:2,4 K=3", [176.5, 157.7, 192.5])]
    notes: list[str] = []
    assert _choose(looks, alone, False, notes) == (looks[0], "measured")
    assert notes == ["measured near-tie: the best validated ran 1.01x the target alone (median of 3 rounds side by "
                     "side), inside what 3 candidate(s) at sd(log) 0.03 a round can tell (+-3%); more prompts "
                     "(--validate-prompts, --workload FILE) resolve it"]
    chain = [row("ngram:1,3 K=6", [112.5, 112.1, 116.7]), row("ngram:1,2 K=6", [109.6, 107.4, 111.3])]
    alone = Row(alone.config, {"goodput": 70.0}, measured={"goodput": 71.5, "repeats": [68.1, 67.4, 71.5]})
    notes.clear()
    assert _choose(chain, alone, False, notes) == (chain[0], "measured") and notes == []
    assert [round(_expected_max_normal(n), 3) for n in (1, 2, 3)] == [0.0, 0.564, 0.846]


def test_an_engine_pick_inside_the_profiles_round_to_round_spread_is_a_near_tie():
    """The engine profile's stages moved sd(log) 0.24 round to round beside the target alone (vLLM in turn on the
    Emerald Rapids guest, 6 rounds): a ratio is priced to about +-13 %, so a pick priced 8 % ahead of the best other
    kind is a near-tie; 20 % ahead is not, nor is any lead where the profile holds no spread (an older profile)."""
    from types import SimpleNamespace

    from spectune.tune.recommend import Row, _engine_resolution

    def row(method, gamma, proposer, goodput):
        return Row(DecodeConfig(models=("draft-s", "c"), method=method, gamma=(gamma,), proposer=proposer),
                   {"goodput": goodput})

    prof = SimpleNamespace(meta={"engine": {"ratio_sd": {"1": 0.24}, "grid": {"repeats": 6, "passes": 1}}})
    look, look2 = row("sd", 6, "ngram:1,3", 35.4), row("sd", 7, "ngram:1,3", 35.3)
    draft, alone = row("sd", 2, "model", 32.8), row("standard", 1, "model", 20.4)
    notes: list[str] = []
    _engine_resolution(prof, [look, look2, draft], look, alone, notes)
    assert notes == ["engine near-tie: the pick is priced 8% ahead of draft-s K = 2, and the engine profile's stages "
                     "moved sd(log) 0.24 round to round beside the target alone, so its 6 rounds price a ratio to "
                     "about +-13%; --validate 3 measures them side by side"]
    notes.clear()
    _engine_resolution(prof, [look, row("sd", 2, "model", 29.5)], look, alone, notes)
    assert notes == []  # 20 % ahead
    _engine_resolution(SimpleNamespace(meta={"engine": {"grid": {"repeats": 6}}}), [look, draft], look, alone, notes)
    assert notes == []
