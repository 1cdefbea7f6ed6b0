"""The schema of a profile's content, checked once when it is loaded (``spectune.profile.load_profile``).

A profile can be edited by hand and re-signed (its sha256 updated), so a matching checksum proves nothing about
the values. Here every JSON block has its type, every table entry names a file inside the profile directory
with a checksum and a row count, and every CSV column has a kind and a range:

* latencies (``median_s``, ``mean_s``, ``min_s``, ``max_s``) are finite and > 0 in feasible rows (an infeasible
  row may leave them empty), ``std_s`` >= 0; cost coefficients ``c`` are finite and > 0;
* acceptance quantities (alpha, beta, their soft versions, s, a, bin edges, mean beta) and entropies in bits
  are probabilities in [0, 1] (``PROB_TOL`` of float round-off allowed);
* counts, positions, token ids and batch / context sizes are integers (>= 0, or >= 1 for sizes; a trace's token
  is -1 where a lookup proposed nothing at that position);
* optional columns (a trace's ``q``, added after the first profiles) may be missing or empty (NaN);
* names are non-empty text, ``feasible`` is true/false.

A violation is one ``ProfileError`` line naming the file, the column, the CSV line and the value.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from spectune import checks
from spectune.errors import ProfileError

PROB_TOL = 1e-3  # soft acceptance sums float32 probabilities: 1.00004 is measured, not damage


@dataclass(frozen=True)
class Col:
    kind: str  # "text" (non-empty), "int", "real", "bool", "any" (free text, may be empty)
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    empty_if_infeasible: bool = False  # latency rows with feasible = False may leave it empty
    optional: bool = False  # older profiles lack the column: it loads as empty (NaN)


TEXT, ANY, BOOL = Col("text"), Col("any"), Col("bool")
COUNT, SIZE = Col("int", 0), Col("int", 1)
PROB = Col("real", -PROB_TOL, 1 + PROB_TOL)
SECONDS = Col("real", 0, lo_open=True, empty_if_infeasible=True)
_NAMES = {"workload": TEXT, "draft": TEXT, "companion": TEXT, "target": TEXT}
_IDS = {"prompt": COUNT, "state": COUNT, "draft_id": COUNT}

COLUMNS: dict[str, dict[str, Col]] = {
    "latency": {"feasible": BOOL, "model": TEXT, "batch": SIZE, "ctx": SIZE, "k": COUNT, "median_s": SECONDS,
                "mean_s": SECONDS, "std_s": Col("real", 0, empty_if_infeasible=True), "min_s": SECONDS,
                "max_s": SECONDS, "repeats": COUNT, "note": ANY},
    "cost": {"proposer": TEXT, "verifier": TEXT, "batch": SIZE, "ctx": SIZE, "c": Col("real", 0, lo_open=True)},
    "traces": {"workload": TEXT, **_IDS, "proposer": TEXT, "models": TEXT, "combination": TEXT, "pos": COUNT,
               "token": Col("int", -1), "beta": PROB, "alpha": PROB, "beta_soft": PROB, "alpha_soft": PROB,
               "q": Col("real", -PROB_TOL, 1 + PROB_TOL, optional=True)},
    "acceptance": {"workload": TEXT, "proposer": TEXT, "models": TEXT, "combination": TEXT, "pos": COUNT,
                   "alpha": PROB, "beta": PROB, "alpha_soft": PROB, "beta_soft": PROB, "n": COUNT},
    "sv_traces": {**_NAMES, **_IDS, "pos": COUNT, "token": COUNT, "beta": PROB, "beta_soft": PROB, "s": PROB,
                  "a": PROB},
    "sv_bins": {**_NAMES, "s_bin": COUNT, "s_lo": PROB, "s_hi": PROB, "a_bin": COUNT, "a_lo": PROB, "a_hi": PROB,
                "mean_beta": PROB, "count": COUNT},
    "info_gain": {**_NAMES, "n": COUNT, "n_s_bins": COUNT, "n_a_bins": COUNT, "mean_beta": PROB, "h_beta": PROB,
                  "h_beta_s": PROB, "h_beta_a": PROB, "h_beta_sa": PROB, "info_gain": PROB, "info_gain_frac": PROB,
                  "info_gain_frac_corrected": PROB},
    "trajectories": {"workload": TEXT, "prompt": COUNT, "pos": Col("int"), "token": COUNT},
    "path_drafts": {"workload": TEXT, "prompt": COUNT, "model": TEXT, "pos": COUNT, "token": COUNT, "q": PROB},
}
REQUIRED_ROWS = ("latency", "traces")  # a profile without them cannot price anything
_TRUE, _FALSE = {"true", "1", "1.0"}, {"false", "0", "0.0"}


def _bad(where: Path | str, col: str, row: int, why: str, raw: Any) -> ProfileError:
    return ProfileError(f"profile table '{where}' is corrupt: column '{col}' on line {row + 2} {why}, "
                        f"got {checks.show(raw)}")


def _first(mask: pd.Series) -> int | None:
    hits = np.flatnonzero(mask.to_numpy(bool))
    return int(hits[0]) if hits.size else None


def _numbers(s: pd.Series, col: str, rule: Col, may_be_empty: pd.Series, where: Path | str) -> pd.Series:
    v = pd.to_numeric(s, errors="coerce").astype(float)
    arr, raw = v.to_numpy(float), s.to_numpy(object)
    i = _first(pd.Series(np.isnan(arr) & pd.notna(raw)))
    if i is not None:
        raise _bad(where, col, i, "must be a number", raw[i])
    i = _first(pd.Series(np.isnan(arr) & ~may_be_empty.to_numpy(bool)))
    if i is not None:
        raise _bad(where, col, i, "must not be empty", raw[i])
    ok = ~np.isnan(arr)
    i = _first(pd.Series(ok & ~np.isfinite(arr)))
    if i is not None:
        raise _bad(where, col, i, "must be finite", raw[i])
    if rule.kind == "int":
        i = _first(pd.Series(ok & (arr != np.round(arr))))
        if i is not None:
            raise _bad(where, col, i, "must be an integer", raw[i])
    with np.errstate(invalid="ignore"):
        below = np.zeros_like(ok) if rule.lo is None else (arr <= rule.lo) if rule.lo_open else (arr < rule.lo)
        above = np.zeros_like(ok) if rule.hi is None else (arr > rule.hi)
    i = _first(pd.Series(ok & (below | above)))
    if i is not None:
        lo, hi = ("" if rule.lo is None else f"{'>' if rule.lo_open else '>='} {rule.lo:g}",
                  "" if rule.hi is None else f"<= {rule.hi:g}")
        raise _bad(where, col, i, "must be " + " and ".join(x for x in (lo, hi) if x), raw[i])
    if rule.kind == "int" and ok.all():
        return v.astype("int64")
    return v


def check_table(name: str, df: pd.DataFrame, where: Path | str) -> pd.DataFrame:
    """``df`` with every column of table ``name`` checked against ``COLUMNS`` and typed; else ``ProfileError``."""
    out = df.copy()
    feasible = pd.Series(True, index=out.index)
    for col, rule in COLUMNS[name].items():
        if rule.optional and col not in out.columns:
            out[col] = np.nan
            continue
        s = out[col]
        if rule.kind == "any":
            out[col] = s.astype(object).where(s.notna(), "").astype(str)
        elif rule.kind == "text":
            bad = s.isna() | (s.astype(str).str.strip() == "")
            i = _first(bad)
            if i is not None:
                raise _bad(where, col, i, "must be a non-empty name", s.iloc[i])
            out[col] = s.astype(str)
        elif rule.kind == "bool":
            low = s.astype(str).str.strip().str.lower()
            i = _first(~low.isin(_TRUE | _FALSE))
            if i is not None:
                raise _bad(where, col, i, "must be true or false", s.iloc[i])
            out[col] = feasible = low.isin(_TRUE)
        else:
            empty_ok = ~feasible if rule.empty_if_infeasible else pd.Series(rule.optional, index=out.index)
            out[col] = _numbers(s, col, rule, empty_ok, where)
    if name in REQUIRED_ROWS and out.empty:
        raise ProfileError(f"profile table '{where}' is corrupt: it has no rows")
    return out


def _obj(meta: dict, key: str, typ: type, what: str, where: Path) -> Any:
    v = meta.get(key)
    if not isinstance(v, typ) or isinstance(v, bool):
        raise ProfileError(f"profile '{where}' is corrupt: '{key}' must be {what}, got {checks.show(v)}")
    return v


def _models(models: list, where: Path) -> None:
    if not models:
        raise ProfileError(f"profile '{where}' is corrupt: 'models' is empty")
    for m in models:
        if not isinstance(m, dict) or not isinstance(m.get("name"), str) or not m["name"].strip():
            raise ProfileError(f"profile '{where}' is corrupt: every entry of 'models' needs a 'name', got "
                               f"{checks.show(m)}")
        if "parameters" in m:
            checks.integer(m["parameters"], f"profile '{where}': parameters of model '{m['name']}'", lo=0,
                           err=ProfileError)
    names = [m["name"] for m in models]
    if len(set(names)) != len(names):
        raise ProfileError(f"profile '{where}' is corrupt: model names repeat ({', '.join(names)})")


def _settings(st: dict, where: Path) -> None:
    what = f"profile '{where}': settings"
    if "combine" in st:
        checks.text(st["combine"], f"{what}.combine", err=ProfileError)
    for key in ("acceptance", "latency"):
        if key in st and not isinstance(st[key], dict):
            raise ProfileError(f"{what}.{key} must be an object, got {checks.show(st[key])}")
    acc, lat = st.get("acceptance", {}), st.get("latency", {})
    if "gamma_max" in acc:
        checks.integer(acc["gamma_max"], f"{what}.acceptance.gamma_max", lo=1, err=ProfileError)
    if "temperature" in acc:
        checks.real(acc["temperature"], f"{what}.acceptance.temperature", lo=0, err=ProfileError)
    if "batch_sizes" in lat:
        if not isinstance(lat["batch_sizes"], list) or not lat["batch_sizes"]:
            raise ProfileError(f"{what}.latency.batch_sizes must be a list, got {checks.show(lat['batch_sizes'])}")
        for b in lat["batch_sizes"]:
            checks.integer(b, f"{what}.latency.batch_sizes", lo=1, err=ProfileError)


def check_meta(meta: dict[str, Any], where: Path) -> None:
    """The JSON blocks of ``profile.json`` (``where``) have their types; else ``ProfileError`` naming the key."""
    _obj(meta, "created", str, "text", where)
    for key in ("hardware", "software", "settings", "stages", "tables"):
        _obj(meta, key, dict, "an object", where)
    _models(_obj(meta, "models", list, "a list", where), where)
    _settings(meta["settings"], where)
    for key, typ, what in (("latency_fit", dict, "an object"), ("alpha_mean", list, "a list"),
                           ("prompt_tokens", dict, "an object")):
        if key in meta:
            _obj(meta, key, typ, what, where)
    for w, sizes in (meta.get("prompt_tokens") or {}).items():
        if not isinstance(sizes, list) or not all(isinstance(n, int) and not isinstance(n, bool) and n > 0
                                                  for n in sizes):
            raise ProfileError(f"profile '{where}': prompt_tokens.{w} must be a list of positive integers")
    if "total_seconds" in meta:
        checks.real(meta["total_seconds"], f"profile '{where}': total_seconds", lo=0, err=ProfileError)


def table_file(entry: Any, name: str, d: Path, where: Path) -> Path:
    """The file of table ``name`` from its ``tables`` entry: relative, inside ``d``, with a sha256 and a row count."""
    if not isinstance(entry, dict) or not isinstance(entry.get("file"), str) or not entry["file"].strip():
        raise ProfileError(f"profile '{where}' is corrupt: no entry for table '{name}'")
    rel = Path(entry["file"])
    root = d.resolve()
    f = (d / rel).resolve()
    if rel.is_absolute() or ".." in rel.parts or not f.is_relative_to(root) or f == root:
        raise ProfileError(f"profile '{where}' is corrupt: table '{name}' file '{entry['file']}' is not inside the "
                           f"profile directory")
    sha = entry.get("sha256")
    if not isinstance(sha, str) or len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha.lower()):
        raise ProfileError(f"profile '{where}' is corrupt: table '{name}' has no sha256 checksum")
    checks.integer(entry.get("rows"), f"profile '{where}': rows of table '{name}'", lo=0, err=ProfileError)
    return d / rel


def check_models_measured(meta: dict[str, Any], latency: pd.DataFrame, where: Path) -> None:
    """Every model of ``meta`` has a feasible latency row, and the latency table names no other model."""
    names = [m["name"] for m in meta["models"]]
    have = set(latency.loc[latency["feasible"], "model"])
    missing = [n for n in names if n not in have]
    extra = sorted(set(latency["model"]) - set(names))
    if missing or extra:
        why = (f"no feasible latency rows for {', '.join(missing)}" if missing
               else f"latency rows for models it does not list ({', '.join(extra)})")
        raise ProfileError(f"profile '{where}' is corrupt: {why}")
