"""``Profile`` (what calibration measured: JSON metadata plus pandas tables), its atomic save and its checked load.

A profile is written into a temporary sibling directory and renamed into place, so a reader never sees half of
one. ``load_profile`` checks the schema version, the required keys and columns and each table's sha256, and
raises a one-line ``ProfileError`` naming the file; a profile measured on other hardware loads with one warning
(``ProfileHardwareWarning``). Reading needs no torch; only the hardware check reads this machine's identity.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from spectune import checks
from spectune import profile_schema as schema_check
from spectune.errors import ProfileError
from spectune.profile.latency_model import LatencyModel
from spectune.profile.tables import MODELS_SEP, OPTIONAL_TABLES, TABLES

SCHEMA = "spectune.profile/1"
META_FILE = "profile.json"
REQUIRED_META = ("schema", "created", "hardware", "software", "models", "settings", "stages", "tables")


class ProfileHardwareWarning(UserWarning):
    """The profile was measured on different hardware than this machine."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@dataclass
class Profile:
    """A loaded (or freshly measured) profile: ``meta`` (the JSON) and ``tables`` (pandas DataFrames)."""

    meta: dict[str, Any]
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    path: Path | None = None

    # ---------------------------------------------------------------- plain accessors

    def table(self, name: str) -> pd.DataFrame:
        """Table ``name`` with every column of its schema (optional ones a profile lacks are empty)."""
        if name not in TABLES:
            raise KeyError(f"unknown profile table '{name}' (known: {', '.join(TABLES)})")
        df = self.tables.get(name, pd.DataFrame(columns=TABLES[name]))
        missing = [c for c in TABLES[name] if c not in df.columns]
        return df.assign(**{c: np.nan for c in missing}) if missing else df

    latency = property(lambda self: self.table("latency"))
    cost = property(lambda self: self.table("cost"))
    traces = property(lambda self: self.table("traces"))
    acceptance = property(lambda self: self.table("acceptance"))
    sv_traces = property(lambda self: self.table("sv_traces"))
    sv_bins_table = property(lambda self: self.table("sv_bins"))
    info_gain = property(lambda self: self.table("info_gain"))
    trajectories = property(lambda self: self.table("trajectories"))
    path_drafts = property(lambda self: self.table("path_drafts"))

    @property
    def models(self) -> list[str]:
        """Model names in calibration order (smallest first)."""
        return [m["name"] for m in self.meta.get("models", [])]

    @property
    def hardware(self) -> dict[str, Any]:
        return self.meta.get("hardware", {})

    @property
    def settings(self) -> dict[str, Any]:
        return self.meta.get("settings", {})

    @property
    def latency_forward(self) -> str:
        """Which forward the latency table timed: ``runtime`` (the runtime's own: the eager runner's 4-D mask and
        position ids, or the compiled step) or ``mask-less`` (eager profiles calibrated before 2026-11-25, which
        timed transformers' forward without a mask: on Zen 5 in bf16 its k = 1 forward took 9-42 % longer)."""
        st = self.settings
        return st.get("latency_forward", "runtime" if st.get("runtime") == "compiled" else "mask-less")

    @property
    def latency_caveat(self) -> str | None:
        """What ``profile show`` and ``recommend`` say of a mask-less latency table (None for the runtime's)."""
        if self.latency_forward != "mask-less":
            return None
        return ("timed through transformers' mask-less forward, not the runtime's (calibrated before 2026-11-25): "
                "k = 1 forwards may be priced slow; recalibrate")

    @property
    def combination(self) -> str:
        """The user's combination (canonical text) the acceptance stage measured over all models."""
        return self.settings.get("combine", "target")

    @property
    def workloads(self) -> list[str]:
        return list(dict.fromkeys(self.traces["workload"])) if not self.traces.empty else []

    # ---------------------------------------------------------------- latency and cost

    @cached_property
    def latency_model(self) -> LatencyModel:
        """Interpolating latency model over the latency table: ``profile.latency_model(model, b, k, ctx)``; an eager
        table is read non-decreasing in k (``LatencyModel``'s ``monotone_k``), a compiled one as measured."""
        return LatencyModel(self.latency, monotone_k=self.settings.get("runtime") != "compiled")

    def L(self, model: str, batch: int = 1, k: int = 1, ctx: float | None = None) -> float:
        """Seconds for one forward of ``model`` over ``k`` new tokens at batch size ``batch`` (warm cache)."""
        return self.latency_model(model, batch, k, ctx)

    def prompt_tokens(self, workload: str | None = None) -> float | None:
        """Mean tokens of the calibration prompts of ``workload`` (None: all of them) as decoded (chat template
        applied); None for a profile calibrated before they were recorded."""
        got = self.meta.get("prompt_tokens") or {}
        sizes = [int(n) for w, ns in got.items() if workload in (None, w) for n in ns]
        return sum(sizes) / len(sizes) if sizes else None

    def c(self, proposer: str, verifier: str, batch: int = 1, ctx: float | None = None) -> float:
        """Cost coefficient c(b) = L_proposer(b, 1) / L_verifier(b, 1) (interpolated between measured cells)."""
        return self.L(proposer, batch, 1, ctx) / self.L(verifier, batch, 1, ctx)

    # ---------------------------------------------------------------- acceptance

    def select_traces(self, proposer: str, combination: str | None = None, models: Any = None,
                      workload: str | None = None) -> pd.DataFrame:
        """The trace rows of ``proposer``'s drafts against r over ``models`` (names, or their ``MODELS_SEP``
        label; default: every model) with ``combination`` (default: the profile's), one ``workload`` or all
        (None / ``"all"``); a ``KeyError`` naming the selection when the profile holds none."""
        t = self.traces
        comb = self.combination if combination is None else combination
        if models is None:
            label = MODELS_SEP.join(self.models)
        elif isinstance(models, str):
            label = models
        else:
            label = MODELS_SEP.join(models)
        sel = t[(t["proposer"] == proposer) & (t["combination"] == comb) & (t["models"] == label)]
        if workload not in (None, "all"):
            sel = sel[sel["workload"] == workload]
        if sel.empty:
            raise KeyError(f"no acceptance traces for proposer '{proposer}', models '{label}', combination "
                           f"'{comb}', workload '{workload or 'all'}'")
        return sel


    def alpha(self, proposer: str, combination: str | None = None, models: Any = None,
              workload: str | None = None, pos: int | None = None, soft: bool = False) -> float:
        """Mean alpha (exact per-position acceptance rate) of ``proposer``'s drafts against r.

        ``models``: the models r is over (default: all, with the profile's combination); for a pair
        ``[i, j]`` with ``combination="target"`` r is model j. ``workload``: None / ``"all"`` pools every one.
        """
        sel = self.select_traces(proposer, combination, models, workload)
        if pos is not None:
            sel = sel[sel["pos"] == pos]
        return float(sel["alpha_soft" if soft else "alpha"].mean())

    def alpha_by_position(self, proposer: str, combination: str | None = None, models: Any = None,
                          workload: str | None = None, soft: bool = False) -> pd.Series:
        sel = self.select_traces(proposer, combination, models, workload)
        return sel.groupby("pos")["alpha_soft" if soft else "alpha"].mean()

    def draft_betas(self, proposer: str, combination: str | None = None, models: Any = None,
                    workload: str | None = None, soft: bool = False) -> np.ndarray:
        """beta of every draft as a [n_drafts, gamma_max] array (rows: drafts, columns: draft positions)."""
        sel = self.select_traces(proposer, combination, models, workload)
        col = "beta_soft" if soft else "beta"
        wide = sel.pivot_table(index=["workload", "draft_id"], columns="pos", values=col, aggfunc="first")
        return wide.sort_index(axis=1).to_numpy(float)

    def expected_accepted(self, proposer: str, gamma: int, combination: str | None = None, models: Any = None,
                          workload: str | None = None, soft: bool = False) -> float:
        """E[accepted proposals | gamma] = mean over drafts of sum_{i<=gamma} prod_{j<=i} beta_j (no i.i.d. alpha)."""
        b = self.draft_betas(proposer, combination, models, workload, soft)
        if gamma > b.shape[1]:
            raise ValueError(f"gamma {gamma} exceeds the calibrated gamma_max {b.shape[1]}")
        if gamma <= 0:
            return 0.0
        return float(np.cumprod(b[:, :gamma], axis=1).sum(axis=1).mean())

    # ---------------------------------------------------------------- SV

    def sv_bins(self, draft: str, companion: str, target: str, workload: str = "all") -> pd.DataFrame:
        """The SV bin table (s edges, a edges, mean beta, count) of one (draft, companion, target) triple."""
        t = self.sv_bins_table
        sel = t[(t["draft"] == draft) & (t["companion"] == companion) & (t["target"] == target)]
        sel = sel[sel["workload"] == workload] if workload in set(sel["workload"]) else sel[sel["workload"] == "all"]
        return sel.reset_index(drop=True)

    def information_gain(self, draft: str, companion: str, target: str, workload: str = "all") -> dict[str, Any]:
        t = self.info_gain
        sel = t[(t["draft"] == draft) & (t["companion"] == companion) & (t["target"] == target)]
        sel = sel[sel["workload"] == workload] if workload in set(sel["workload"]) else sel[sel["workload"] == "all"]
        if sel.empty:
            raise KeyError(f"no SV statistics for ({draft}, {companion}, {target})")
        return sel.iloc[0].to_dict()

    # ---------------------------------------------------------------- persistence

    def save(self, path: str | os.PathLike, force: bool = False) -> Path:
        """Write the profile directory: into a temporary sibling, then one atomic exchange with the previous
        profile there (``spectune.outputs.replace_dir``). ``path`` may hold a spectune profile or nothing; a
        directory of other files, or a file, is an ``OutputError`` unless ``force``."""
        from spectune.outputs import check_profile_target, remove, replace_dir

        final = check_profile_target(path, force)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
        try:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes 0700; a profile is ordinary shared data
            index = {}
            for name in TABLES:
                df = self.table(name)
                f = tmp / f"{name}.csv"
                df.to_csv(f, index=False)
                index[name] = {"file": f.name, "rows": int(len(df)), "sha256": _sha256(f)}
            meta = dict(self.meta)
            meta["schema"] = SCHEMA
            meta["tables"] = index
            with open(tmp / META_FILE, "w") as fh:
                json.dump(_jsonable(meta), fh, indent=2)
                fh.write("\n")
            replace_dir(tmp, final)
        except BaseException:
            remove(tmp)
            raise
        self.meta, self.path = meta, final
        return final


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return None if np.isnan(obj) else float(obj)
    if isinstance(obj, float) and obj != obj:
        return None
    return obj


def _read_table(name: str, entry: Any, d: Path, mf: Path) -> pd.DataFrame:
    """Table ``name`` of profile directory ``d``: its file inside ``d``, checksum, row count and columns checked."""
    cols = TABLES[name]
    f = schema_check.table_file(entry, name, d, mf)
    if not f.is_file():
        raise ProfileError(f"profile table '{f}' is missing")
    if _sha256(f) != entry["sha256"].lower():
        raise ProfileError(f"profile table '{f}' is corrupt: its sha256 does not match {META_FILE}")
    try:
        df = pd.read_csv(f)
    except pd.errors.EmptyDataError:
        df = pd.DataFrame(columns=cols)
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as e:
        raise ProfileError(f"profile table '{f}' is corrupt: {str(e).splitlines()[0]}") from None
    optional = {c for c, rule in schema_check.COLUMNS[name].items() if rule.optional}
    lacking = [c for c in cols if c not in df.columns and c not in optional]
    if lacking:
        raise ProfileError(f"profile table '{f}' is corrupt: missing columns {', '.join(lacking)}")
    if len(df) != entry["rows"]:
        raise ProfileError(f"profile table '{f}' is corrupt: {len(df)} rows, {META_FILE} says {entry['rows']}")
    return schema_check.check_table(name, df, f)


def load_profile(path: str | os.PathLike, check_hardware: bool = True, only: Sequence[str] | None = None) -> Profile:
    """Read and validate a profile directory (or its ``profile.json``). Raises ``ProfileError`` on any problem.
    ``only``: read just these tables (the latency table always), for a question that needs no traces."""
    p = Path(path).expanduser()
    d = p.parent if p.name == META_FILE else p
    mf = d / META_FILE
    if not d.exists():
        from spectune.outputs import previous_copy

        prev = previous_copy(d)
        raise ProfileError(f"profile '{d}' does not exist" + (
            f" (an interrupted write left the previous one in '{prev}': rename it back)" if prev.is_dir() else ""))
    if not mf.is_file():
        raise ProfileError(f"profile '{d}' has no {META_FILE} (not a spectune profile)")
    try:
        meta = json.loads(mf.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        why = f"invalid JSON ({e.msg} at line {e.lineno})" if isinstance(e, json.JSONDecodeError) else "not UTF-8"
        raise ProfileError(f"profile '{mf}' is corrupt: {why}") from None
    except OSError as e:
        raise ProfileError(f"cannot read profile '{mf}': {e.strerror or e}") from None
    if not isinstance(meta, dict):
        raise ProfileError(f"profile '{mf}' is corrupt: expected a JSON object")
    schema = meta.get("schema")
    if schema != SCHEMA:
        raise ProfileError(f"profile '{mf}' has unknown schema version {checks.show(schema)} "
                           f"(this spectune reads {SCHEMA})")
    missing = [k for k in REQUIRED_META if k not in meta]
    if missing:
        raise ProfileError(f"profile '{mf}' is corrupt: missing keys {', '.join(missing)}")
    schema_check.check_meta(meta, mf)
    tables = {name: _read_table(name, meta["tables"].get(name), d, mf) for name in TABLES
              if (name not in OPTIONAL_TABLES or name in meta["tables"])
              and (only is None or name in only or name == "latency")}
    schema_check.check_models_measured(meta, tables["latency"], mf)
    prof = Profile(meta=meta, tables=tables, path=d)
    if check_hardware:
        from spectune.machine import engine_name

        why = machine_mismatch(meta, engine=engine_name(meta))
        if why:
            warnings.warn(f"profile '{d}' does not describe this machine: {why}", ProfileHardwareWarning,
                          stacklevel=2)
    return prof


def machine_mismatch(meta: dict[str, Any], device: str | None = None, dtypes: Any = None,
                     runtime: str | None = None, engine: str | None = None) -> str | None:
    """``spectune.machine.profile_mismatch`` against this machine as a run on ``device`` sees it (default: the
    profile's own kind where this machine has it, else the CPU), for spectune's runtime or ``engine``."""
    from spectune.machine import here, profile_mismatch

    if device is None:
        rec = (meta.get("hardware") or {}).get("identity") or meta.get("hardware") or {}
        import torch

        device = "cuda" if rec.get("kind") == "cuda" and torch.cuda.is_available() else "cpu"
    return profile_mismatch(meta, here(device), dtypes, runtime, engine)


def read_meta(d: Path) -> dict[str, Any] | None:
    """The ``profile.json`` of directory ``d`` when it is a well-formed profile of this schema, else None
    (profile lookups skip what ``load_profile`` would reject, instead of failing on it)."""
    try:
        meta = json.loads((d / META_FILE).read_text())
        if not isinstance(meta, dict) or meta.get("schema") != SCHEMA or any(k not in meta for k in REQUIRED_META):
            return None
        schema_check.check_meta(meta, d / META_FILE)
    except (OSError, ValueError, ProfileError):
        return None
    return meta
