"""Output paths: spectune never deletes or overwrites what it did not write, and a profile write keeps the
previous profile readable at every instant."""
from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

from fuzz_helpers import assert_one_line_error, assert_untouched, snapshot, unlock, user_area
from spectune import outputs
from spectune.cli import cli
from spectune.errors import OutputError
from spectune.profile import load_profile


@pytest.fixture
def prof(valid_profile):
    return load_profile(valid_profile)


@pytest.fixture
def area(tmp_path):
    a = user_area(tmp_path)
    yield a
    unlock(tmp_path)


@pytest.mark.parametrize("kind", ["dir", "file", "under-file", "unwritable"])
def test_profile_save_refuses_user_paths(prof, area, tmp_path, kind):
    if area[kind] is None:
        pytest.skip("this process can write everywhere")
    before = snapshot(tmp_path / "user")
    with pytest.raises(OutputError) as e:
        prof.save(area[kind])
    assert "\n" not in str(e.value) and str(area[kind]) in str(e.value)
    assert_untouched(tmp_path / "user", before)


def test_force_replaces_a_user_directory_or_file(prof, area):
    for kind in ("dir", "file"):
        prof.save(area[kind], force=True)
        assert load_profile(area[kind]).models == ["a", "b"]


def test_profile_replaced_in_one_atomic_step(prof, tmp_path, monkeypatch):
    """Every rename of a save over an existing profile sees a loadable profile at --out before and after."""
    final = prof.save(tmp_path / "p")
    seen = []

    def loadable(when):
        seen.append(when)
        assert load_profile(final).models == ["a", "b"], when

    real_exchange, real_replace = outputs._exchange, os.replace

    def exchange(a, b):
        loadable("before exchange")
        ok = real_exchange(a, b)
        loadable("after exchange")
        return ok

    def replace(a, b):
        loadable(f"before replace {a}")
        real_replace(a, b)
        loadable(f"after replace {a}")

    monkeypatch.setattr(outputs, "_exchange", exchange)
    monkeypatch.setattr(outputs.os, "replace", replace)
    prof.save(final)
    assert seen[:2] == ["before exchange", "after exchange"] and len(seen) == 2  # one step on this system
    assert [p.name for p in tmp_path.iterdir()] == ["p"]  # the previous copy is gone afterwards


def test_kill_after_the_exchange_leaves_the_new_profile(prof, tmp_path, monkeypatch):
    final = prof.save(tmp_path / "p")
    prof.meta["created"] = "second"
    monkeypatch.setattr(outputs, "remove", lambda p: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        prof.save(final)
    assert load_profile(final).meta["created"] == "second"


def test_without_an_atomic_exchange_the_previous_profile_stays_recoverable(prof, tmp_path, monkeypatch):
    """Fallback (an OS without renameat2/renamex_np): a failure between the two renames restores the previous
    profile; a kill there leaves it in .NAME.previous, and loading --out says where."""
    final = prof.save(tmp_path / "p")
    monkeypatch.setattr(outputs, "_exchange", lambda a, b: False)
    real = os.replace
    calls = []

    def flaky(a, b):
        calls.append(a)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        real(a, b)

    monkeypatch.setattr(outputs.os, "replace", flaky)
    with pytest.raises(OSError):
        prof.save(final)
    assert load_profile(final).models == ["a", "b"]
    monkeypatch.setattr(outputs.os, "replace", real)
    real(final, outputs.previous_copy(final))  # what a kill between the two renames leaves
    res = CliRunner().invoke(cli, ["profile", "show", str(final)])
    assert_one_line_error(res, ".p.previous")


def test_figures_are_marked_and_foreign_pngs_kept(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, _ = plt.subplots()
    f = outputs.save_figure(fig, tmp_path / "a.png")
    assert outputs.written_by_spectune(f)
    fig, _ = plt.subplots()
    fig.savefig(tmp_path / "mine.png")
    plt.close(fig)
    assert not outputs.written_by_spectune(tmp_path / "mine.png")
    with pytest.raises(OutputError, match="not written by spectune"):
        outputs.save_figure(plt.subplots()[0], tmp_path / "mine.png")


def test_recommend_force_replaces_a_foreign_config(valid_profile, tmp_path):
    out = tmp_path / "rec"
    out.mkdir()
    (out / "config.json").write_text('{"mine": true}')
    (out / "notes.txt").write_text("kept")
    args = ["recommend", "--models", "a,b", "--profile", str(valid_profile), "--trials", "3", "--no-calibrate",
            "--out", str(out)]
    assert_one_line_error(CliRunner().invoke(cli, args), "config.json")
    assert (out / "config.json").read_text() == '{"mine": true}'
    res = CliRunner().invoke(cli, args + ["--force"])
    assert res.exit_code == 0, res.output
    assert '"schema": "spectune.decode_config/1"' in (out / "config.json").read_text()
    assert (out / "notes.txt").read_text() == "kept"
    res = CliRunner().invoke(cli, args)  # spectune's own files are replaced and its study continued
    assert res.exit_code == 0, res.output


def test_calibrate_force_over_a_user_directory(tiny_dirs, prompt_file, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    args = ["calibrate", "--models", f"{tiny_dirs['s']},{tiny_dirs['l']}", "--workload", str(prompt_file),
            "--batch-sizes", "1", "--max-k", "2", "--contexts", "8", "--repeats", "1", "--prompts-per-workload", "1",
            "--states-per-prompt", "1", "--out", str(out)]
    assert_one_line_error(CliRunner().invoke(cli, args), "not a spectune profile")
    assert (out / "notes.txt").read_text() == "mine" and not out.with_name("mine.partial").exists()
    res = CliRunner().invoke(cli, args + ["--force"])
    assert res.exit_code == 0, res.output
    assert not (out / "notes.txt").exists() and load_profile(out)
    partial = out.with_name("mine.partial")
    partial.mkdir()
    (partial / "x.txt").write_text("mine too")
    assert_one_line_error(CliRunner().invoke(cli, args + ["--resume"]), "not a spectune calibration checkpoint")
    assert (partial / "x.txt").read_text() == "mine too"
