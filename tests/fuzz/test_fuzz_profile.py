"""Damaged profiles, re-signed as a user fixing a file by hand would (checksums and row counts updated), are
rejected when loaded: one line naming the file and the field, through ``spectune profile show``.

The kinds below say what each column holds, independently of ``spectune/profile_schema.py``; hypothesis picks
the row and the bad value of each class.
"""
from __future__ import annotations

import json
import math
import shutil
import tempfile
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from fuzz_helpers import (CLI, VALUES, assert_one_line_error, assert_untouched, damage_cell, damage_meta, resign,
                          snapshot)
from spectune.cli import cli
from spectune.errors import ProfileError
from spectune.profile import load_profile

NAMES = ("workload", "draft", "companion", "target")
KINDS: dict[str, dict[str, tuple[str, ...]]] = {
    # kind -> columns, per table
    "latency": {"seconds": ("median_s", "mean_s", "min_s", "max_s"), "nonneg": ("std_s",),
                "size": ("batch", "ctx"), "count": ("repeats", "k"),  # k = 0: a model's turn (engine profiles)
                "name": ("model",), "bool": ("feasible",)},
    "cost": {"positive": ("c",), "size": ("batch", "ctx"), "name": ("proposer", "verifier")},
    "traces": {"prob": ("beta", "alpha", "beta_soft", "alpha_soft"), "optional-prob": ("q",), "token": ("token",),
               "count": ("prompt", "state", "draft_id", "pos"),
               "name": ("workload", "proposer", "models", "combination")},
    "acceptance": {"prob": ("alpha", "beta", "alpha_soft", "beta_soft"), "count": ("pos", "n"),
                   "name": ("workload", "proposer", "models", "combination")},
    "sv_traces": {"prob": ("beta", "beta_soft", "s", "a"), "count": ("prompt", "state", "draft_id", "pos", "token"),
                  "name": NAMES},
    "sv_bins": {"prob": ("s_lo", "s_hi", "a_lo", "a_hi", "mean_beta"), "count": ("s_bin", "a_bin", "count"),
                "name": NAMES},
    "info_gain": {"prob": ("mean_beta", "h_beta", "h_beta_s", "h_beta_a", "h_beta_sa", "info_gain",
                           "info_gain_frac", "info_gain_frac_corrected"),
                  "count": ("n", "n_s_bins", "n_a_bins"), "name": NAMES},
}
NUMERIC_BAD = ("text", "inf", "cell:empty")
BAD: dict[str, tuple[str, ...]] = {  # the classes each kind of column must reject
    "seconds": NUMERIC_BAD + ("negative", "zero"), "positive": NUMERIC_BAD + ("negative", "zero"),
    "nonneg": NUMERIC_BAD + ("negative",), "prob": NUMERIC_BAD + ("negative", "cell:above-one"),
    "count": NUMERIC_BAD + ("negative-int", "fraction"), "size": NUMERIC_BAD + ("zero-int", "fraction"),
    "optional-prob": ("text", "inf", "negative", "cell:above-one"),  # may be empty: older profiles lack it
    "token": NUMERIC_BAD + ("cell:below-minus-one", "fraction"),  # -1: a position a lookup did not reach
    "name": ("cell:empty",), "bool": ("text", "cell:number"),
}
CELL = {"cell:empty": st.sampled_from(["", " "]), "cell:above-one": st.floats(1.01, 1e6).map(repr),
        "cell:number": st.sampled_from(["2", "-1", "0.5"]),
        "cell:below-minus-one": st.integers(-10 ** 12, -2).map(str)}
CASES = [(t, c, cls) for t, kinds in KINDS.items() for kind, cols in kinds.items() for c in cols
         for cls in BAD[kind]]


@pytest.fixture(scope="session")
def full_profile(tmp_path_factory) -> Path:
    """A valid profile of three models with every table filled (SV rows included)."""
    from tune_synth import make_profile

    from spectune.calibration.hardware import fingerprint

    prof = make_profile(models=("a", "b", "c"), combine="target", temperature=0.0, batch_sizes=(1, 2),
                        sv_beta=0.5)
    prof.meta["hardware"] = fingerprint("cpu")
    path = prof.save(tmp_path_factory.mktemp("full") / "prof")
    assert all(len(pd.read_csv(path / f"{t}.csv")) for t in KINDS)
    return path


def _show(path: Path):
    return CliRunner().invoke(cli, ["profile", "show", str(path)])


def test_the_undamaged_profiles_load(full_profile, valid_profile):
    for p in (full_profile, valid_profile):
        load_profile(p)
        assert _show(p).exit_code == 0


@pytest.mark.parametrize("table,column,cls", CASES, ids=[f"{t}.{c}|{k}" for t, c, k in CASES])
def test_damaged_cell_is_rejected(full_profile, table, column, cls):
    n = len(pd.read_csv(full_profile / f"{table}.csv"))

    @CLI
    @given(text=VALUES[cls] if cls in VALUES else CELL[cls], row=st.integers(0, n - 1))
    def run(text, row):
        tmp = Path(tempfile.mkdtemp(prefix="damaged-"))
        try:
            bad = damage_cell(full_profile, tmp / "prof", table, column, row, text)
            before = snapshot(tmp)
            line = assert_one_line_error(_show(bad), f"{table}.csv")
            assert f"'{column}'" in line or "rows" in line, line
            assert_untouched(tmp, before)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    run()


NAN, INF = float("nan"), float("inf")
META: list[tuple[tuple, list]] = [
    (("created",), [5, None, [], {}]),
    (("hardware",), [[], "cpu", 3, None]),
    (("software",), [[], "x", None]),
    (("settings",), [[], "x", None]),
    (("stages",), [[], 3]),
    (("tables",), [[], "latency.csv", None]),
    (("models",), [{}, "a,b", 3, None, []]),
    (("models", 0), ["a", 3, None, {}]),
    (("models", 0, "name"), [3, None, "", ["a"], "b"]),
    (("models", 0, "parameters"), ["many", -1, 1.5, NAN]),
    (("settings", "combine"), [3, None, ""]),
    (("settings", "acceptance"), [[], "x"]),
    (("settings", "acceptance", "gamma_max"), [0, -1, 1.5, "8", NAN, None]),
    (("settings", "acceptance", "temperature"), [-1, "hot", NAN, INF, None]),
    (("settings", "latency", "batch_sizes"), [[], "1,2", [0], [1.5], ["1"], None]),
    (("total_seconds",), [-1, "x", NAN]),
    (("tables", "latency"), ["latency.csv", None, 3]),
    (("tables", "latency", "file"), ["/etc/passwd", "../outside.csv", "", 3, None, "sub/../../x.csv", ".",
                                     "cost.csv"]),
    (("tables", "latency", "sha256"), [None, "", "abc", 3, "z" * 64, "0" * 64]),
    (("tables", "latency", "rows"), [None, -1, "3", 1.5, 10**9]),
]
META_CASES = [(keys, v) for keys, vals in META for v in vals]


@pytest.mark.parametrize("keys,new", META_CASES, ids=[f"{'.'.join(map(str, k))}={v!r}" for k, v in META_CASES])
def test_damaged_metadata_is_rejected(valid_profile, tmp_path, keys, new):
    bad = damage_meta(valid_profile, tmp_path / "prof", keys, new)
    res = _show(bad)
    line = assert_one_line_error(res, "profile")
    field = str(keys[0]).rstrip("s")  # 'models' -> an error naming a model ("model names repeat", "model 'a'")
    assert field in line or "latency" in line or "rows" in line or "schema" in line or "table" in line, line


@pytest.mark.parametrize("keys", [("models",), ("tables", "latency"), ("tables", "latency", "sha256"),
                                  ("tables", "latency", "rows"), ("tables", "latency", "file"), ("schema",)])
def test_missing_metadata_is_rejected(valid_profile, tmp_path, keys):
    assert_one_line_error(_show(damage_meta(valid_profile, tmp_path / "prof", keys, None, delete=True)), "profile")


@pytest.mark.parametrize("how", ["absolute", "dotdot", "symlink"])
def test_table_outside_the_profile_directory_is_never_read(valid_profile, tmp_path, how):
    """A table whose file (or a symlink) points outside the profile directory is rejected, even re-signed."""
    d = tmp_path / "prof"
    shutil.copytree(valid_profile, d)
    outside = tmp_path / "elsewhere.csv"
    shutil.copy(d / "latency.csv", outside)
    meta = json.loads((d / "profile.json").read_text())
    if how == "symlink":
        (d / "latency.csv").unlink()
        (d / "latency.csv").symlink_to(outside)
    else:
        meta["tables"]["latency"]["file"] = str(outside) if how == "absolute" else "../elsewhere.csv"
    (d / "profile.json").write_text(json.dumps(meta))
    resign(d)
    with pytest.raises(ProfileError, match="not inside the profile directory"):
        load_profile(d)
    assert_one_line_error(_show(d), "not inside")


def test_nonsense_values_never_reach_a_recommendation(valid_profile, tmp_path):
    """The issue's cases: re-signed negative latency, acceptance of 7 and NaN are errors, not advice."""
    for i, (table, col, text) in enumerate([("latency", "median_s", "-0.002"), ("traces", "alpha", "7"),
                                            ("traces", "beta", "nan"), ("latency", "median_s", "0")]):
        bad = damage_cell(valid_profile, tmp_path / f"p{i}", table, col, 0, text)
        res = CliRunner().invoke(cli, ["recommend", "--models", "a,b", "--profile", str(bad), "--trials", "3",
                                       "--out", str(tmp_path / f"rec{i}"), "--no-calibrate"])
        assert_one_line_error(res, f"{table}.csv")
        assert not (tmp_path / f"rec{i}" / "config.json").exists()


@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(p=st.floats(allow_nan=True, allow_infinity=True))
def test_probability_columns_accept_exactly_the_unit_interval(p):
    """The schema's rule for a probability, against the definition (round-off of 1e-3 allowed)."""
    from spectune.profile_schema import check_table

    df = pd.DataFrame([dict(workload="w", proposer="a", models="a,b", combination="target", pos=0, alpha=p,
                            beta=0.5, alpha_soft=0.5, beta_soft=0.5, n=1)])
    ok = math.isfinite(p) and -1e-3 <= p <= 1 + 1e-3
    try:
        check_table("acceptance", df, "acceptance.csv")
        assert ok, p
    except ProfileError as e:
        assert not ok and "'alpha'" in str(e) and "\n" not in str(e)
