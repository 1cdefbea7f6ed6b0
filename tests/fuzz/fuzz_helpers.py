"""The fuzz suite's tools: bad values by class, user-file snapshots, the one-line-error check, damaged profiles.

Every bad value belongs to a *class* (wrong type, NaN, infinity, negative, zero, huge, fraction, empty, and for
paths: a directory, a file, a path under a file, an unwritable directory, a missing path). ``VALUES`` maps a
class to a hypothesis strategy of command-line text, so a test names the classes an option must reject and
hypothesis picks the members.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

# derandomized: the same examples on every CI run; a handful per class keeps the suite near a minute
CLI = settings(max_examples=2, deadline=None, derandomize=True, database=None,
               suppress_health_check=list(HealthCheck))
CHEAP = settings(max_examples=25, deadline=None, derandomize=True, database=None,
                 suppress_health_check=list(HealthCheck))

_WORDS = st.sampled_from(["abc", "ten", "1e", "--", "0x1g", "one,two", "½", "True", "None", "[]", "{}", "1 2"])
VALUES: dict[str, st.SearchStrategy[str]] = {
    "text": _WORDS,
    "nan": st.sampled_from(["nan", "NaN", "-nan", "+nan"]),
    "inf": st.sampled_from(["inf", "-inf", "Infinity", "1e999", "-1e999"]),
    "negative": st.one_of(st.integers(-10**30, -1).map(str),
                          st.floats(-1e300, -1e-6, allow_nan=False).map(repr)),
    "negative-int": st.integers(-10**30, -1).map(str),
    "zero": st.sampled_from(["0", "0.0", "-0"]),
    "zero-int": st.just("0"),
    "huge": st.integers(10**7, 10**40).map(str),
    "huge-seed": st.integers(2**32, 10**40).map(str),
    "fraction": st.floats(0.01, 1e6).filter(lambda x: not x.is_integer()).map(repr),
    "above-one": st.floats(1.0001, 1e300).map(repr),
    "empty": st.sampled_from(["", " ", ","]),
    "int-list-bad": st.sampled_from(["0", "-1", "1,-4", "a,b", "1.5", "2,,x", "0,0"]),
    "int-list-huge": st.integers(10**7, 10**30).map(str),
}


def value(cls: str) -> st.SearchStrategy[str]:
    return VALUES[cls]


# ------------------------------------------------------------------ the user's files

def user_area(root: Path) -> dict[str, Path]:
    """A user's files beside the run: a directory holding notes, a plain file, a path under that file, an
    unwritable directory (or None where this process can write anywhere) and a path that does not exist."""
    home = root / "user"
    (home / "mydir").mkdir(parents=True)
    (home / "mydir" / "notes.txt").write_text("my notes\n")
    (home / "myfile.txt").write_text("precious\n")
    locked = home / "locked"
    locked.mkdir()
    (locked / "keep.txt").write_text("keep\n")
    return {"dir": home / "mydir", "file": home / "myfile.txt", "under-file": home / "myfile.txt" / "x",
            "unwritable": lock(locked), "missing": home / "nope" / "missing"}


def lock(d: Path) -> Path | None:
    """Make ``d`` unwritable for this process (chmod, or the immutable attribute as root); None if impossible."""
    os.chmod(d, 0o555)
    if not os.access(d, os.W_OK):
        return d
    if shutil.which("chattr") and subprocess.run(["chattr", "+i", str(d)], capture_output=True).returncode == 0:
        if not os.access(d, os.W_OK):
            return d
        subprocess.run(["chattr", "-i", str(d)], capture_output=True)
    return None


def unlock(root: Path) -> None:
    """Undo ``lock`` under ``root`` so the temporary tree can be removed."""
    for d in root.rglob("locked"):
        if shutil.which("chattr"):
            subprocess.run(["chattr", "-i", str(d)], capture_output=True)
        os.chmod(d, 0o755)


def snapshot(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root`` (relative path -> digest)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def assert_untouched(root: Path, before: dict[str, str]) -> None:
    after = snapshot(root)
    changed = [k for k, v in before.items() if after.get(k) != v]
    assert not changed, f"user files deleted or changed: {changed}"


# ------------------------------------------------------------------ the error line

def assert_one_line_error(res, *needles: str) -> str:
    """Exit status 2, exactly one stderr line 'error: ...' naming one of ``needles``, no traceback."""
    out = res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), f"{res.exception!r}: {out}"
    assert res.exit_code == 2, f"exit {res.exit_code}, output: {out!r}"
    assert "Traceback" not in out and "internal error" not in out, out
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), f"stderr is not one error line: {lines}"
    if needles:
        low = lines[0].lower()
        assert any(n.lower() in low for n in needles), f"{lines[0]!r} names none of {needles}"
    return lines[0]


# ------------------------------------------------------------------ damaged profiles

def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def resign(d: Path) -> None:
    """Update every table's sha256 and row count in profile.json, as a user fixing a file by hand would."""
    import pandas as pd

    meta = json.loads((d / "profile.json").read_text())
    for entry in meta["tables"].values():
        f = d / entry["file"]
        if f.is_file():
            entry["sha256"] = sha256(f)
            try:
                entry["rows"] = len(pd.read_csv(f))
            except Exception:  # noqa: BLE001 - an unreadable table keeps its old row count
                pass
    (d / "profile.json").write_text(json.dumps(meta, indent=2))


def damage_cell(src: Path, dst: Path, table: str, column: str, row: int, text: str) -> Path:
    """A copy of profile ``src`` at ``dst`` whose ``table`` has ``text`` in (``row``, ``column``), re-signed."""
    import csv

    shutil.copytree(src, dst)
    f = dst / f"{table}.csv"
    with open(f, newline="") as fh:
        rows = list(csv.reader(fh))
    rows[row + 1][rows[0].index(column)] = text
    with open(f, "w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    resign(dst)
    return dst


def damage_meta(src: Path, dst: Path, keys: tuple, new: object, delete: bool = False) -> Path:
    """A copy of profile ``src`` at ``dst`` whose profile.json has ``new`` at the key path ``keys`` (or lacks it)."""
    shutil.copytree(src, dst)
    meta = json.loads((dst / "profile.json").read_text())
    obj = meta
    for k in keys[:-1]:
        obj = obj[k]
    if delete:
        del obj[keys[-1]]
    else:
        obj[keys[-1]] = new
    (dst / "profile.json").write_text(json.dumps(meta, indent=2))  # NaN and Infinity as Python's json writes them
    return dst
