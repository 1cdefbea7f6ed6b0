"""Profile: round trip, schema validation, corrupt files as one-line errors, hardware mismatch, accessors."""
import json
import warnings

import numpy as np
import pandas as pd
import pytest

from spectune.calibration.hardware import fingerprint
from spectune.errors import ProfileError
from spectune.profile import (SCHEMA, TABLES, Profile, ProfileHardwareWarning, acceptance_summary, cost_table,
                              load_profile)


def synthetic_profile() -> Profile:
    lat = []
    for m, base in (("d", 1.0), ("t", 10.0)):
        for b in (1, 2):
            for k in (1, 2):
                t = (base + b * k) / 1000
                lat.append(dict(model=m, batch=b, ctx=16, k=k, median_s=t, mean_s=t, std_s=0.0, min_s=t, max_s=t,
                                repeats=3, feasible=True, note=""))
    # two drafts of proposer d with known betas: [1, .5, .5] and [0, 1, 1]
    tr = []
    for did, betas in ((0, [1.0, 0.5, 0.5]), (1, [0.0, 1.0, 1.0])):
        for pos, b in enumerate(betas):
            tr.append(dict(workload="code", prompt=0, state=did, draft_id=did, proposer="d", models="d,t",
                           combination="target", pos=pos, token=5, beta=b, alpha=0.7, beta_soft=b, alpha_soft=0.7))
    traces = pd.DataFrame(tr)
    lat = pd.DataFrame(lat)
    meta = dict(schema=SCHEMA, created="2026-01-01T00:00:00+00:00", hardware=fingerprint("cpu"), software={},
                models=[dict(name="d", parameters=1, dtype="torch.float32", hash="0" * 32),
                        dict(name="t", parameters=2, dtype="torch.float32", hash="1" * 32)],
                settings=dict(combine="target", acceptance=dict(gamma_max=3)), stages={}, tables={})
    return Profile(meta=meta, tables=dict(latency=lat, cost=cost_table(lat), traces=traces,
                                          acceptance=acceptance_summary(traces)))


def test_round_trip_and_accessors(tmp_path):
    p = synthetic_profile()
    path = p.save(tmp_path / "prof")
    assert sorted(f.name for f in path.iterdir()) == sorted([f"{n}.csv" for n in TABLES] + ["profile.json"])
    assert not [f for f in tmp_path.iterdir() if f.name.startswith(".")]  # no temporary leftovers
    q = load_profile(path)
    assert q.meta["schema"] == SCHEMA and q.models == ["d", "t"]
    assert q.hardware["identity"] == p.hardware["identity"] and q.hardware["identity"]["cpu"]["isa"]  # exact
    assert q.meta["models"][0]["dtype"] == "torch.float32"
    for name in ("latency", "cost", "traces", "acceptance"):
        pd.testing.assert_frame_equal(q.table(name).reset_index(drop=True), p.table(name).reset_index(drop=True),
                                      check_dtype=False)
    assert pd.read_csv(path / "traces.csv").shape == p.traces.shape  # plain CSV for pandas
    assert q.c("d", "t", 2) == pytest.approx(3 / 12)
    assert q.L("t", 2, 2, 16) == pytest.approx(14 / 1000)
    assert q.alpha("d") == pytest.approx(0.7)
    # E[accepted | gamma]: mean over drafts of sum_i prod_{j<=i} beta_j
    assert q.expected_accepted("d", 3) == pytest.approx(((1 + 0.5 + 0.25) + 0) / 2)
    assert q.expected_accepted("d", 1) == pytest.approx(0.5)
    np.testing.assert_allclose(q.draft_betas("d"), [[1, 0.5, 0.5], [0, 1, 1]])
    with pytest.raises(KeyError):
        q.alpha("t", models="d,t", workload="math")
    # saving over an existing profile replaces it atomically
    p.save(tmp_path / "prof")
    load_profile(tmp_path / "prof" / "profile.json")


def _one_line(e):
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_unknown_schema_and_corrupt_files(tmp_path):
    path = synthetic_profile().save(tmp_path / "prof")
    meta_file = path / "profile.json"
    meta = json.loads(meta_file.read_text())

    meta_file.write_text(json.dumps({**meta, "schema": "spectune.profile/99"}))
    with pytest.raises(ProfileError) as e:
        load_profile(path)
    assert "unknown schema version" in _one_line(e) and str(meta_file) in str(e.value)

    meta_file.write_text(json.dumps(meta)[:50])
    with pytest.raises(ProfileError) as e:
        load_profile(path)
    assert "corrupt" in _one_line(e) and "profile.json" in str(e.value)

    meta_file.write_text(json.dumps({k: v for k, v in meta.items() if k != "models"}))
    with pytest.raises(ProfileError, match="missing keys models"):
        load_profile(path)

    meta_file.write_text(json.dumps(meta))
    lat = path / "latency.csv"
    lat.write_text(lat.read_text()[:-40])  # truncated table
    with pytest.raises(ProfileError) as e:
        load_profile(path)
    assert "latency.csv" in _one_line(e) and "corrupt" in str(e.value)

    sha = meta["tables"]["latency"].pop("sha256")
    meta_file.write_text(json.dumps(meta))
    with pytest.raises(ProfileError, match="table 'latency' has no sha256 checksum"):
        load_profile(path)

    from spectune.profile.core import _sha256

    meta["tables"]["latency"]["sha256"] = sha
    pd.read_csv(lat).drop(columns=["median_s"]).to_csv(lat, index=False)
    meta["tables"]["latency"]["sha256"] = _sha256(lat)  # re-signed by hand
    meta_file.write_text(json.dumps(meta))
    with pytest.raises(ProfileError, match="missing columns median_s"):
        load_profile(path)

    with pytest.raises(ProfileError, match="does not exist"):
        load_profile(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ProfileError, match="no profile.json"):
        load_profile(tmp_path / "empty")


def test_hardware_mismatch_warns_once(tmp_path):
    p = synthetic_profile()
    path = p.save(tmp_path / "same")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_profile(path)  # measured here: no warning
    ident = p.meta["hardware"]["identity"]
    p.meta["hardware"] = dict(p.meta["hardware"], identity=dict(ident, cpu=dict(ident["cpu"], family=9000)))
    path = p.save(tmp_path / "other")
    with pytest.warns(ProfileHardwareWarning) as rec:
        prof = load_profile(path)
    assert len(rec) == 1 and "family 9000" in str(rec[0].message) and "\n" not in str(rec[0].message)
    assert prof.models == ["d", "t"]
    del p.meta["hardware"]["identity"]  # a profile from before identities: loads, and says so
    with pytest.warns(ProfileHardwareWarning, match="identity unknown"):
        assert load_profile(p.save(tmp_path / "old")).models == ["d", "t"]


def test_find_profiles_takes_only_this_machine_and_dtype(tmp_path, monkeypatch):
    from spectune.profile import find_profiles, lookup, user_profiles_dir

    monkeypatch.setenv("SPECTUNE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(lookup, "BUNDLED_DIR", tmp_path / "bundled")
    none = find_profiles(["d", "t"])
    assert none.best is None and none.paths == [] and none.notes == [] and none.nearest is None
    p = synthetic_profile()
    bundled = p.save(tmp_path / "bundled" / "x")
    assert find_profiles(["d", "t"]).best == bundled
    other = synthetic_profile()
    ident = other.meta["hardware"]["identity"]
    other.meta["hardware"]["identity"] = dict(ident, cpu=dict(ident["cpu"], model=-1))
    other.save(user_profiles_dir() / "a-other-hw")
    mine = synthetic_profile().save(user_profiles_dir() / "b-mine")
    found = find_profiles(["d", "t"])
    assert found.paths == [mine, bundled]  # the user's before the bundled; another machine's skipped, with why
    assert found.notes == [f"{user_profiles_dir() / 'a-other-hw'}: {found.skipped[0][1]}"]
    assert "model -1" in found.notes[0]
    assert find_profiles(["d", "t"], dtypes=["float32", "float32"]).best == mine
    found = find_profiles(["d", "t"], dtypes="bfloat16")  # measured in float32: never this run's profile
    assert found.best is None and "a-other-hw: " in found.nearest and "model -1" in found.nearest
    assert any("b-mine: measured in float32" in n for n in found.notes)
    rev = find_profiles(["t", "d"])
    assert rev.best is None and rev.nearest is None and all(why == "models d,t" for _, why in rev.skipped)


def test_find_profiles_ranks_request_fit_machine_and_search_order(tmp_path, monkeypatch):
    """Profiles that price the request come before those that only hold its models (``partial``), this
    machine's before others' (``other_machines``), and ``search`` paths -- a profile, or a directory of them
    -- before the user's and the bundled ones."""
    from spectune.profile import find_profiles, lookup, user_profiles_dir

    monkeypatch.setenv("SPECTUNE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(lookup, "BUNDLED_DIR", tmp_path / "bundled")
    we = synthetic_profile()
    we.meta["settings"]["combine"] = "we:0.5,0.5"
    we_here = we.save(user_profiles_dir() / "a-we")
    away = synthetic_profile()
    ident = away.meta["hardware"]["identity"]
    away.meta["hardware"]["identity"] = dict(ident, cpu=dict(ident["cpu"], family=-1))
    target_away = away.save(user_profiles_dir() / "b-target-away")
    assert find_profiles(["d", "t"], combine="target").best is None  # the only target profile is another machine's
    assert find_profiles(["d", "t"], combine="target", other_machines=True).paths == [target_away]
    assert find_profiles(["d", "t"], combine="target", partial=True).paths == [we_here]
    both = find_profiles(["d", "t"], combine="target", partial=True, other_machines=True)
    assert both.paths == [target_away, we_here]  # fitting the request outranks the machine
    assert find_profiles(["d"], combine="target", partial=True).paths == [we_here]  # holds d: enough for a plan
    assert find_profiles(["d", "t"], combine="target", temperature=0.5, other_machines=True).best is None
    extra = synthetic_profile().save(tmp_path / "elsewhere" / "p")
    assert find_profiles(["d", "t"], search=[extra]).paths[0] == extra
    assert find_profiles(["d", "t"], search=[tmp_path / "elsewhere"]).paths[0] == extra


def test_bundled_profile_is_valid():
    from spectune.models.bundled import DEFAULT_FAMILY
    from spectune.profile import BUNDLED_DIR

    dirs = [d for d in BUNDLED_DIR.iterdir() if (d / "profile.json").is_file()]
    assert dirs, f"no bundled profile in {BUNDLED_DIR}"
    for d in dirs:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ProfileHardwareWarning)  # measured on the reference CPU
            p = load_profile(d)
        assert p.models == DEFAULT_FAMILY
        assert 0 < p.c("draft-s", "smollm2-135m", 1) < 1
        assert 0 <= p.alpha("draft-s") <= 1 and p.expected_accepted("draft-s", 4) >= 0
        assert not p.info_gain.empty and not p.sv_bins("draft-s", "draft-m", "smollm2-135m").empty


@pytest.mark.slow
def test_bundled_profile_matches_bundled_weights():
    """Re-calibrate when this fails: the draft weights changed after the profile was measured."""
    from spectune.calibration.run import model_hash
    from spectune.models import load_model
    from spectune.profile import BUNDLED_DIR

    for d in BUNDLED_DIR.iterdir():
        if not (d / "profile.json").is_file():
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ProfileHardwareWarning)
            p = load_profile(d)
        for m in p.meta["models"]:  # hashed in the dtype it was calibrated in (a GPU profile: bfloat16)
            dtype = str(m["dtype"]).removeprefix("torch.")
            assert model_hash(load_model(m["name"], dtype=dtype).model) == m["hash"], (d.name, m["name"])


def test_profile_names_maps_requests_and_names_a_missing_model(tmp_path):
    """The profile's name of each requested model (a directory matches its resolved path); a model it does not
    hold is a one-line ProfileError naming it (it was a bare AssertionError a user could reach)."""
    from spectune.profile import profile_names, same_model

    d = tmp_path / "models" / "t"
    d.mkdir(parents=True)
    prof = synthetic_profile()
    prof.meta["models"][1]["name"] = str(d)
    assert profile_names(prof, [str(tmp_path / "models" / ".." / "models" / "t"), "d"]) == (str(d), "d")
    assert same_model(d, str(d) + "/") and not same_model("d", "t")
    with pytest.raises(ProfileError, match="does not hold model 'x' \\(it has d,") as e:
        profile_names(prof, ["d", "x"])
    assert "\n" not in str(e.value)


def test_a_profile_says_which_forward_its_latency_timed(tmp_path):
    """New calibrations record that they timed the runtime's forward; an older eager profile reads as mask-less
    and says so in `profile show` (a compiled one always timed the runtime's step)."""
    from click.testing import CliRunner

    from spectune.cli import cli

    old = synthetic_profile()
    assert old.latency_forward == "mask-less"
    old.save(tmp_path / "old")
    out = CliRunner().invoke(cli, ["profile", "show", str(tmp_path / "old")]).output
    assert "latency: timed through transformers' mask-less forward" in out
    old.meta["settings"]["runtime"] = "compiled"
    assert old.latency_forward == "runtime"
    new = synthetic_profile()
    new.meta["settings"]["latency_forward"] = "runtime"
    new.save(tmp_path / "new")
    assert "mask-less" not in CliRunner().invoke(cli, ["profile", "show", str(tmp_path / "new")]).output


def test_isotonic_pools_each_decreasing_run_into_its_mean():
    from spectune.profile.latency_model import isotonic

    np.testing.assert_allclose(isotonic([1.0, 2.0, 3.0]), [1, 2, 3])  # already non-decreasing: unchanged
    np.testing.assert_allclose(isotonic([44.5, 42.9, 42.2, 45.6, 45.1, 45.9]),
                               [43.2, 43.2, 43.2, 45.35, 45.35, 45.9])
    np.testing.assert_allclose(isotonic([3.0, 1.0, 2.0, 0.0]), [1.5, 1.5, 1.5, 1.5])
    assert isotonic([]).size == 0


def test_an_eager_latency_table_is_read_non_decreasing_in_k_a_compiled_one_as_measured():
    """A calibration's per-k noise at batch 1 (k = 1 timed 44 ms, k = 2 and 3 below it) must not make a longer
    eager verification look cheaper than a shorter one: the eager table is read through its isotonic fit along k
    (at each batch and context, timed cells only; k = 4 stays as measured). The compiled runtime pads k to
    buckets, where k = 1 is really dearer than k = 2-4: its table is read as measured."""
    p = synthetic_profile()
    ms = {1: 44.0, 2: 42.0, 3: 43.0, 4: 46.0}
    lat = pd.DataFrame([dict(model="t", batch=1, ctx=16, k=k, median_s=v / 1000, mean_s=v / 1000, std_s=0.0,
                             min_s=v / 1000, max_s=v / 1000, repeats=3, feasible=True, note="") for k, v in ms.items()])
    p.tables["latency"] = lat
    assert [round(p.L("t", 1, k, 16) * 1000, 6) for k in (1, 2, 3, 4)] == [43.0, 43.0, 43.0, 46.0]
    compiled = synthetic_profile()
    compiled.tables["latency"] = lat
    compiled.meta["settings"]["runtime"] = "compiled"
    assert [round(compiled.L("t", 1, k, 16) * 1000, 6) for k in (1, 2, 3, 4)] == [44.0, 42.0, 43.0, 46.0]


def test_the_isotonic_reading_fills_untimed_k_from_the_fit_and_floors_the_regression_past_the_last_k():
    """A batch timed at k = 1, 2, 4, 8 only, with an inversion at k = 2: the fit pools k = 1-2, k = 3 is filled
    between the fitted k = 2 and 4, and past k = 8 (inside the grid's batches and contexts) the regression, which
    is fitted on the raw medians and not tied to the last column, is never read below L(8)."""
    from spectune.profile import LATENCY_COLUMNS, LatencyModel

    ms = {1: 44.0, 2: 40.0, 4: 46.0, 8: 60.0}
    rows = [dict(model="t", batch=b, ctx=c, k=k, median_s=(v + 30 * (b - 1)) / 1000, mean_s=0.0, std_s=0.0,
                 min_s=0.0, max_s=0.0, repeats=3, feasible=True, note="")
            for b in (1, 2) for c in (16, 32) for k, v in ms.items()]
    lat = pd.DataFrame(rows, columns=LATENCY_COLUMNS)
    lm, raw = LatencyModel(lat, monotone_k=True), LatencyModel(lat)
    assert lm("t", 1, 1, 16) == lm("t", 1, 2, 16) == pytest.approx(0.042)
    assert lm("t", 1, 3, 16) == pytest.approx(0.044)  # halfway between the fitted 42 and the measured 46
    assert raw("t", 1, 3, 16) == pytest.approx(0.043)  # as measured: between 40 and 46
    for b, c in ((1, 16), (2, 32), (1.5, 24)):
        assert lm("t", b, 9, c) >= lm("t", b, 8, c)
    assert raw("t", 1, 9, 16) == pytest.approx(raw.regs["t"].predict(np.array([[1, 1, 9, 0.016, 0.144, 9]]))[0])


@pytest.mark.parametrize("eager_s,llama_s,installed,asked,batch,want", [
    (0.046, 0.011, True, "auto", 1, "llamacpp"), (0.010, 0.011, True, "auto", 1, "eager"),
    (0.046, None, True, "auto", 1, "eager"), (0.046, 0.011, False, "auto", 1, "eager"),
    (0.046, 0.011, True, "eager", 1, "eager"), (0.046, 0.011, True, "auto", 8, "eager")])
def test_auto_runs_the_runtime_measured_faster_here(monkeypatch, eager_s, llama_s, installed, asked, batch, want):
    """``--runtime auto`` on a CPU: the runtime whose profile of the target on this machine prices its one-token
    forward at the run's batch size fastest (llamacpp only where llama-cpp-python is installed; here llama.cpp's
    forward costs 8x more at b = 8); an explicit runtime stays."""
    import importlib.util
    from pathlib import Path

    from spectune.profile import core, lookup

    timed = {"eager": eager_s, "llamacpp": llama_s}

    class Timed:
        models = ["smollm2-135m"]

        def __init__(self, seconds):
            self.seconds = seconds

        def L(self, model, b, k):
            return self.seconds * (b if self.seconds == llama_s else 1)

    monkeypatch.setattr(lookup, "find_profiles", lambda names, runtime=None, **kw: lookup.Lookup(
        paths=[Path(runtime)] if timed[runtime] is not None else []))
    monkeypatch.setattr(core, "load_profile", lambda d, **kw: Timed(timed[str(d)]))
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: (object() if installed else None) if name == "llama_cpp" else real(name, *a))
    assert lookup.pick_runtime(asked, "cpu", ["draft-s", "smollm2-135m"], batch) == want
    assert lookup.pick_runtime("auto", "cpu", [object(), object()]) == "eager"  # loaded models: no lookup


def test_a_profile_read_for_its_latency_only_prices_as_the_whole():
    """``load_profile(only=...)``: the latency table (always) and the tables named, none of the traces; the same L."""
    from spectune.profile import BUNDLED_DIR

    d = next(p for p in sorted(BUNDLED_DIR.iterdir()) if (p / "profile.json").is_file())
    whole, lean = load_profile(d, check_hardware=False), load_profile(d, check_hardware=False, only=())
    assert set(lean.tables) == {"latency"} and len(whole.tables) > 1 and lean.traces.empty
    target = whole.models[-1]
    assert lean.L(target, 4, 3) == whole.L(target, 4, 3)
