"""The wheel carries the bundled profiles, and spectune installed from it (not editable) finds them (issue 37).

The wheel is built from a copy of the source (``pyproject.toml``, ``README.md``, ``spectune/``) so the build
writes nothing into the repository, and installed with ``--no-deps`` into a fresh venv without system site
packages. Its dependencies (torch, transformers, Optuna, ...) are not installed again (that copies 1.7 GB and
takes over a minute): a ``.pth`` file in the venv names the site-packages directories of the interpreter running
the tests. A path line in a ``.pth`` file adds the directory only -- the ``.pth`` files inside it do not run -- so
the editable install's finder there stays inactive and ``spectune`` imports from the wheel alone; the test
checks that it does, from a working directory outside the repository.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

FIND = r"""
import json, sys
import spectune
from spectune.models.bundled import DEFAULT_FAMILY
from spectune.profile import BUNDLED_DIR, find_profiles
found = find_profiles(list(DEFAULT_FAMILY), combine="target", temperature=0.0, other_machines=True)
print(json.dumps({"spectune": spectune.__file__, "bundled": str(BUNDLED_DIR), "sys_path": sys.path,
                  "dirs": sorted(p.name for p in BUNDLED_DIR.iterdir() if (p / "profile.json").is_file()),
                  "found": [str(p) for p in found.paths]}))
"""


def _build_wheel(tmp: Path) -> Path:
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    shutil.copytree(REPO / "spectune", src / "spectune",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
    try:  # the build backend of this interpreter when it is new enough ([build-system]): no index, no download
        isolate = int(version("setuptools").split(".")[0]) < 77
    except PackageNotFoundError:
        isolate = True
    cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp / "dist"), str(src)]
    subprocess.run(cmd if isolate else [*cmd, "--no-build-isolation"], check=True, cwd=tmp)
    (wheel,) = (tmp / "dist").glob("spectune-*.whl")
    return wheel


def _venv(tmp: Path, wheel: Path) -> Path:
    venv = tmp / "venv"
    # no system site packages, and no pip of its own: this interpreter's pip installs into it (--python)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, cwd=tmp)
    py = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", "--no-index",
                    str(wheel)], check=True, cwd=tmp)
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    deps = [p for p in sys.path if p.endswith(("site-packages", "dist-packages")) and Path(p).is_dir()]
    (site / "zz_test_wheel_deps.pth").write_text("".join(f"{p}\n" for p in deps))
    return venv


@pytest.mark.slow
def test_wheel_ships_the_bundled_profiles_and_recommend_finds_them(tmp_path):
    wheel = _build_wheel(tmp_path)
    shipped = set(zipfile.ZipFile(wheel).namelist())
    bundled = REPO / "spectune" / "profiles"
    files = sorted(p.relative_to(REPO).as_posix() for p in bundled.rglob("*") if p.is_file())
    assert any(f.endswith("/profile.json") for f in files), f"no bundled profile in {bundled}"
    assert not [f for f in files if f not in shipped], "bundled profile files missing from the wheel"

    venv = _venv(tmp_path, wheel)
    work = tmp_path / "work"  # outside the repository: nothing can be found from it
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["SPECTUNE_CACHE"] = str(tmp_path / "cache")  # no user profiles: the bundled ones are the only candidates
    run = dict(cwd=work, env=env, capture_output=True, text=True)

    out = subprocess.run([str(venv / "bin" / "python"), "-c", FIND], check=True, **run)
    got = json.loads(out.stdout)
    installed = venv.resolve()
    assert Path(got["spectune"]).resolve().is_relative_to(installed), got["spectune"]  # the wheel's, not -e
    assert not any(Path(p).resolve() == REPO.resolve() for p in got["sys_path"] if p)
    assert Path(got["bundled"]).resolve().is_relative_to(installed)
    assert got["dirs"] == sorted(p.parent.name for p in bundled.glob("*/profile.json"))
    assert got["found"], "the finder found no bundled profile of the default family"
    assert all(Path(p).resolve().is_relative_to(installed) for p in got["found"])

    # recommend looks the profile up itself: it finds a bundled one where one describes this machine (else its
    # error names the nearest bundled candidate), then prices on a bundled profile named with --profile
    spectune = str(venv / "bin" / "spectune")
    fast = ["--no-calibrate", "--trials", "4", "--resamples", "0"]
    rec = subprocess.run([spectune, "recommend", *fast, "--out", "found"], **run)
    if rec.returncode == 0:
        schedule = json.loads((work / "found" / "schedule.json").read_text())
        assert Path(schedule["profile"]).resolve().is_relative_to(Path(got["bundled"]).resolve())
    else:
        assert "no profile for models" in rec.stderr and got["bundled"] in rec.stderr, rec.stderr[-2000:]

    rec = subprocess.run([spectune, "recommend", *fast, "--profile", got["found"][0], "--out", "given"], **run)
    assert rec.returncode == 0, rec.stderr[-2000:]
    assert "chosen (by" in rec.stdout and (work / "given" / "config.json").is_file()
    schedule = json.loads((work / "given" / "schedule.json").read_text())
    assert Path(schedule["profile"]) == Path(got["found"][0])
