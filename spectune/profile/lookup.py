"""Which profile applies to a request: the one finder every profile lookup uses.

``find_profiles(models, ...)`` reads only the metadata of the candidate profiles -- the ``search`` paths first
(each a profile directory or a directory of profiles), then the user's ``<spectune cache>/profiles`` (where
``spectune calibrate`` writes), then the bundled ones (``BUNDLED_DIR``: package data ``spectune/profiles/``, found
through ``importlib.resources`` wherever spectune is installed) -- and ranks those that fit the request:

1. models: exactly these models in this order (names, or the same resolved directories); or, for a pair with
   combination ``target``, a ``target`` profile of more models holding both in this order (its pair traces
   were recorded along the same target's trajectories); or, with ``partial``, any profile holding every model
   (it prices the nearest target-only plan, not necessarily the request);
2. the combination and the acceptance temperature, where the request gives them (a partial fit need not);
3. the machine: ``machine_mismatch`` -- ``spectune.machine.profile_mismatch``, the one matching rule -- on this
   machine in the run's ``dtypes`` (of the requested models only) and ``runtime``; with ``other_machines`` a
   profile of another machine ranks after those of this one instead of being skipped.

Best first: profiles that fit the request before partial ones, this machine before others, exact model lists
before larger profiles, then search order. Every skipped candidate leaves a note naming it and why.
Callers: generate / ``sv`` (``spectune.decoder``), recommend, export's prediction.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any, Sequence

from spectune.decoding.runtime import resolve_runtime
from spectune.errors import ProfileError
from spectune.machine import engine_mismatch
from spectune.models.bundled import cache_root
from spectune.profile.core import META_FILE, machine_mismatch, read_meta

# the bundled, measured profiles: package data spectune/profiles/ (installed from a wheel or an sdist, or editable);
# a real directory, as profiles are read with pathlib (spectune is never imported from a zip)
BUNDLED_DIR = Path(str(files("spectune") / "profiles"))
EXACT, PAIR, PARTIAL = 0, 1, 2  # how a profile's models fit the request (lower is better)


def user_profiles_dir() -> Path:
    """Where ``spectune calibrate`` writes profiles by default: ``<spectune cache>/profiles``."""
    return cache_root() / "profiles"


def same_model(a: Any, b: Any) -> bool:
    """Whether two model specs name the same model: equal text, or paths resolving to one directory."""
    a, b = str(a), str(b)
    if a == b:
        return True
    pa, pb = Path(a).expanduser(), Path(b).expanduser()
    return pa.exists() and pb.exists() and pa.resolve() == pb.resolve()


def profile_names(prof: Any, models: Sequence[str]) -> tuple[str, ...]:
    """The profile's name of each requested model (names, or the same resolved directories), in request order;
    a ``ProfileError`` naming the first model the profile does not hold."""
    names = [str(n) for n in prof.models]
    out = []
    for m in models:
        hit = next((n for n in names if same_model(m, n)), None)
        if hit is None:
            where = f"profile '{prof.path}'" if getattr(prof, "path", None) else "the profile"
            raise ProfileError(f"{where} does not hold model '{m}' (it has {','.join(names)})")
        out.append(hit)
    return tuple(out)


def _pair_of(names: Sequence[Any], models: Sequence[str]) -> bool:
    """Whether both models of the pair ``models`` are among ``names``, in this order."""
    idx = [next((i for i, n in enumerate(names) if same_model(n, m)), None) for m in models]
    return None not in idx and idx[0] < idx[1]


def model_fit(meta: dict[str, Any], models: Sequence[str], combine: str | None = None,
              temperature: float | None = None, partial: bool = False) -> tuple[int | None, str | None]:
    """(``EXACT`` / ``PAIR`` / ``PARTIAL`` or None, why it does not fit the request or None) for one profile's
    ``profile.json`` (see the module docstring; the machine is asked apart)."""
    names = [m.get("name") for m in meta.get("models", [])]
    st = meta.get("settings", {})
    prof_comb = st.get("combine", "target")
    exact = len(names) == len(models) and all(same_model(a, b) for a, b in zip(names, models))
    pair = not exact and combine == "target" and prof_comb == "target" and len(models) == 2 and _pair_of(
        names, models)
    holds = all(any(same_model(n, m) for n in names) for m in models)
    why = None
    if not (exact or pair):
        why = f"models {','.join(map(str, names))}"
    elif exact and combine is not None and prof_comb != combine:
        why = f"combination {st.get('combine')}"
    elif temperature is not None and float(st.get("acceptance", {}).get("temperature", 0.0)) != float(temperature):
        why = f"temperature {st.get('acceptance', {}).get('temperature')}"
    if why is None:
        return (EXACT if exact else PAIR), None
    return (PARTIAL if partial and holds else None), why


def profile_matches(meta: dict[str, Any], models: Sequence[str], combine: str, temperature: float) -> str | None:
    """None when the profile fits the request (models, combination, temperature; see ``model_fit``), else why
    not (one short phrase). Whether it describes this machine is ``machine_mismatch``'s question."""
    return model_fit(meta, models, combine, temperature)[1]


@dataclass
class Lookup:
    """What ``find_profiles`` found: ``paths`` best first, and every candidate it skipped with why."""

    paths: list[Path] = field(default_factory=list)
    skipped: list[tuple[Path, str]] = field(default_factory=list)

    @property
    def best(self) -> Path | None:
        return self.paths[0] if self.paths else None

    @property
    def notes(self) -> list[str]:
        """One line per skipped candidate: ``<dir>: <why>``."""
        return [f"{d}: {why}" for d, why in self.skipped]

    @property
    def nearest(self) -> str | None:
        """The first skipped candidate that held these models (skipped for the machine, dtype, combination or
        temperature), as a note: what a 'no profile' error names."""
        return next((f"{d}: {why}" for d, why in self.skipped if not why.startswith("models ")), None)


def candidate_dirs(search: Sequence[str | Path] = ()) -> list[Path]:
    """Profile directories to consider, in order: each ``search`` path (a profile, or a directory of them), the
    user's profiles, the bundled ones."""
    out: list[Path] = []
    for root in [*(Path(s).expanduser() for s in search if s), user_profiles_dir(), BUNDLED_DIR]:
        if (root / META_FILE).is_file():
            out.append(root)
        elif root.is_dir():
            out += sorted(p for p in root.iterdir() if (p / META_FILE).is_file())
    return list(dict.fromkeys(out))


def find_profiles(models: Sequence[str], *, combine: str | None = None, temperature: float | None = None,
                  partial: bool = False, device: str | None = None, dtypes: Any = None, runtime: str | None = None,
                  other_machines: bool = False, search: Sequence[str | Path] = (), engine: str | None = None) -> Lookup:
    """The profiles that fit ``models`` (and ``combine`` / ``temperature`` where given) on this machine as a run
    on ``device`` (None: the profile's own kind) in ``dtypes`` and ``runtime`` sees it; ranked as the module
    docstring says. Reads metadata only; ``machine_mismatch`` decides the machine. ``engine``: profiles of that
    serving engine's latency only (None: spectune's runtime only), on any machine never the other kind."""
    models = [str(m) for m in models]
    ranked, found = [], Lookup()
    for i, d in enumerate(candidate_dirs(search)):
        meta = read_meta(d)
        if meta is None:
            found.skipped.append((d, "unreadable or not a valid profile"))
            continue
        fit, why = model_fit(meta, models, combine, temperature, partial)
        if fit is None:
            found.skipped.append((d, why or "does not fit"))
            continue
        # a larger profile ran more models than asked: compare the dtypes of the requested ones only
        held = [m for m in meta.get("models", []) if any(same_model(m.get("name"), x) for x in models)]
        why_engine = engine_mismatch(meta, engine)
        if why_engine is not None:  # whose latency (an engine's or the runtime's): never another machine's stand-in
            found.skipped.append((d, why_engine))
            continue
        miss = machine_mismatch({**meta, "models": held}, device, dtypes, runtime, engine)
        if miss is not None and not other_machines:
            found.skipped.append((d, miss))
            continue
        ranked.append((int(fit == PARTIAL), int(miss is not None), fit, i, d))
    found.paths = [d for *_, d in sorted(ranked)]
    return found


def pick_runtime(requested: str | None, device: str, models: Sequence[Any], batch: int = 1) -> str:
    """The runtime a run of ``models`` at batch size ``batch`` uses: ``requested``; for ``auto`` on a CPU, the
    runtime whose profile of these models on this machine prices the target's one-token forward at that batch size
    fastest, among ``eager`` and (with llama-cpp-python installed) ``llamacpp`` -- what was measured faster here --,
    else ``eager``; ``auto`` on CUDA: ``compiled`` (``resolve_runtime``). On the Emerald Rapids guest of
    docs/benchmarks.md Part G llama.cpp's forward was 2.9x the eager one's speed at b = 1 and level at b = 8, where
    torch's bf16 matmuls run on AMX."""
    runtime = resolve_runtime(requested, device)
    names = [m for m in models if isinstance(m, str)]
    if str(requested or "auto").strip().lower() != "auto" or runtime != "eager" or len(names) != len(models) \
            or importlib.util.find_spec("llama_cpp") is None:
        return runtime
    best = (float("inf"), runtime)
    for rt in ("eager", "llamacpp"):
        found = find_profiles(names[-1:], device=device, runtime=rt, partial=True)
        if found.best is not None:
            from spectune.profile.core import load_profile

            prof = load_profile(found.best, check_hardware=False, only=("latency",))  # no traces read
            best = min(best, (prof.L(profile_names(prof, names[-1:])[0], max(int(batch), 1), 1), rt))
    return best[1]
