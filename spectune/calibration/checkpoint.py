"""Calibration checkpoints: what a run has measured so far, kept so that an interrupted run loses nothing.

Work happens in ``<out>.partial/`` beside the final directory: ``state.json`` (settings, model hashes, hardware,
seconds spent per stage) and the stages' chunks, each CSV written atomically (``write_csv_atomic``). A run
continues (``resume``) only with the same settings and weights (``open_checkpoint``); a garbled chunk or state
file is a one-line error naming it (``read_chunk``, ``malformed``). ``check_out`` guards the output directory and
its checkpoint before anything is measured. ``calibrate`` (run.py) and ``calibrate --engine`` (engine.py) keep
their rows here, the latter with the served files' digests as the models' hashes and its rows in one CSV
(``read_rows``).
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import pandas as pd

from spectune.config import write_json_atomic
from spectune.errors import ConfigError, OutputError, ProfileError
from spectune.outputs import check_profile_target, target_dir
from spectune.profile import TABLES
from spectune.profile_schema import check_table

STATE_FILE = "state.json"


def write_csv_atomic(df: pd.DataFrame, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        df.to_csv(tmp, index=False)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_rows(f: Path, columns: Sequence[str], check: Callable[[pd.DataFrame], pd.DataFrame] | None = None,
              keep_default_na: bool = True) -> pd.DataFrame:
    """One checkpoint CSV holding ``columns`` (``check``ed when it has rows); a garbled one is a one-line error
    naming it."""
    why = None
    try:
        df = (pd.read_csv(f, keep_default_na=keep_default_na) if f.stat().st_size > 0
              else pd.DataFrame(columns=list(columns)))
        lacking = [c for c in columns if c not in df.columns]
        if lacking:
            why = f"missing columns {', '.join(lacking)}"
        elif check is not None and not df.empty:
            df = check(df)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError) as e:
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
    except ProfileError as e:
        why = str(e).split(" is corrupt: ", 1)[-1]
    if why is not None:
        raise ConfigError(f"cannot resume: checkpoint '{f}' is corrupt ({why}); delete it to measure that part "
                          "again") from None
    return df


def read_chunk(f: Path, table: str) -> pd.DataFrame:
    """One checkpoint CSV, checked like the profile table it becomes; a garbled one is a one-line error."""
    return read_rows(f, TABLES[table], check=lambda df: check_table(table, df, f))


def read_chunks(files: Sequence[Path], columns: Sequence[str], table: str) -> pd.DataFrame:
    dfs = [read_chunk(f, table) for f in files]
    dfs = [d[list(columns)] for d in dfs if not d.empty]
    return pd.concat(dfs, ignore_index=True) if dfs else pd.DataFrame(columns=list(columns))


class Checkpoint:
    """The partial directory of a run (``<out>.partial``) and its ``state.json``: settings, model hashes,
    hardware and the seconds spent per stage, written after every change."""

    def __init__(self, part: Path):
        self.part = part
        self.fresh: dict[str, Any] = {}  # this run's settings, models and hardware
        self.state: dict[str, Any] = {}  # what state.json holds (the interrupted run's, when resumed)

    def open(self, fresh: dict[str, Any], resume: bool, free: Mapping[str, Sequence[str]] | None = None) -> None:
        """Start anew, or continue the interrupted run (``resume``, same settings and weights; ``free``: the
        fields of a setting a resume may change, ``open_checkpoint``)."""
        self.fresh = fresh
        self.state = open_checkpoint(self.part, fresh, resume, free)

    def stage_time(self, name: str, seconds: float, done: bool) -> None:
        st = self.state["stages"].setdefault(name, {"seconds": 0.0, "finished": False})
        st["seconds"] += seconds
        st["finished"] = done
        write_json_atomic(self.part / STATE_FILE, self.state)

    @contextlib.contextmanager
    def timing(self, name: str, seconds: Callable[[float], float] = lambda s: s, done: bool = False) -> Iterator[None]:
        """Adds ``seconds(the block's wall seconds)`` to stage ``name`` when the block ends, a block a fault ended
        too. If that write fails while a fault propagates, the fault stays the error shown and a warning says the
        seconds were not recorded (a full disk must not hide the engine error that ended a set)."""
        t0 = time.time()
        try:
            yield
        except BaseException:
            try:
                self.stage_time(name, seconds(time.time() - t0), done)
            except OSError as e:
                print(f"warning: the checkpoint could not record stage '{name}''s seconds ({e})", file=sys.stderr)
            raise
        self.stage_time(name, seconds(time.time() - t0), done)


def check_out(out_dir: Path, force: bool, resume: bool) -> None:
    """The profile may go to ``out_dir`` (see ``spectune.outputs``) and its checkpoint directory is spectune's."""
    check_profile_target(out_dir, force)
    part = out_dir.with_name(out_dir.name + ".partial")
    target_dir(part, "calibration checkpoint")
    if part.is_dir() and any(part.iterdir()) and not (part / STATE_FILE).is_file():
        raise OutputError(f"'{part}' exists and is not a spectune calibration checkpoint (no {STATE_FILE}): move it "
                          "away or choose another --out")
    if part.is_dir() and (part / STATE_FILE).is_file() and not resume:
        raise ConfigError(f"an unfinished calibration is in '{part}': pass --resume to continue it, or delete it")


def open_checkpoint(part: Path, fresh: dict[str, Any], resume: bool,
                    free: Mapping[str, Sequence[str]] | None = None) -> dict[str, Any]:
    """The checkpoint state of ``part``: continued (``resume``, same settings and weights) or started anew.
    ``free``: {setting: its fields a resume may change} (``calibrate --engine``'s passes), left out of the match."""
    state_path = part / STATE_FILE
    if not (resume and state_path.is_file()):
        part.mkdir(parents=True, exist_ok=True)
        write_json_atomic(state_path, fresh)
        return fresh
    bad = f"cannot resume: checkpoint '{state_path}' is corrupt"
    try:
        state = json.loads(state_path.read_text())
    except (OSError, ValueError):
        raise ConfigError(f"{bad} (not JSON); delete '{part}' to start over") from None
    why = malformed(state)
    if why:
        raise ConfigError(f"{bad} ({why}); delete '{part}' to start over")
    models = state["models"]
    settings = fresh["settings"]
    settings["dtype_choice"] = state["settings"].get("dtype_choice")  # a probe's timings vary; hashes decide
    free = free or {}

    def kept(k: str, v: Any) -> Any:  # a setting without the fields a resume may change
        return {f: x for f, x in v.items() if f not in free[k]} if k in free and isinstance(v, dict) else v

    diff = [k for k in settings if kept(k, json.loads(json.dumps(settings[k]))) != kept(k, state["settings"].get(k))]
    if diff:
        raise ConfigError(f"cannot resume '{part}': settings differ ({', '.join(diff)}); use the same options")
    if [(m["name"], m["hash"]) for m in models] != [(m["name"], m["hash"]) for m in fresh["models"]]:
        raise ConfigError(f"cannot resume '{part}': the models' weights or dtypes differ from the interrupted run "
                          f"({', '.join(' '.join(str(x) for x in (m['name'], m.get('dtype')) if x) for m in models)})")
    return state


def malformed(state: Any) -> str | None:
    """What is wrong with the shape of a checkpoint's state.json, or None."""
    shape = {"settings": dict, "models": list, "hardware": dict, "created": str, "stages": dict}
    wrong = [k for k, t in shape.items() if not isinstance(state, dict) or not isinstance(state.get(k), t)]
    if wrong:
        return f"{', '.join(wrong)} missing or of the wrong type"
    if not all(isinstance(m, dict) and isinstance(m.get("name"), str) and isinstance(m.get("hash"), str)
               for m in state["models"]):
        return "models malformed"
    for v in state["stages"].values():
        sec = v.get("seconds") if isinstance(v, dict) else None
        if (isinstance(sec, bool) or not isinstance(sec, (int, float)) or not math.isfinite(sec) or sec < 0
                or not isinstance(v.get("finished"), bool)):
            return "stages malformed"
    return None
