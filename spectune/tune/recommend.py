"""``recommend``: find (or measure) the profile of these models on this hardware, search, validate, report.

Profile lookup (``find_profile``): ``--profile PATH`` if given; otherwise every profile directory under the
user directory (``<spectune cache>/profiles``, where ``spectune calibrate`` writes by default) and the bundled
``profiles/`` directory of the source tree, in that order. A profile matches when its models are the requested
ones in the same order (names, or the same resolved directories), it measured acceptance for the requested
combination at the requested temperature, and ``spectune.machine.profile_mismatch`` finds it measured on this
machine (CPU microarchitecture and ISA, or GPU) in the dtypes this run would use (``--dtype``); for a pair with
``combine=target`` a ``target`` profile of more models that holds the pair in this order also matches (exact
matches first). None matching:
calibrate first (``calibrate_missing``; the CLI says so), or raise ``ProfileError`` (``--no-calibrate``).
"""
from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from spectune.config import DecodeConfig, write_json_atomic
from spectune.errors import ConfigError, ProfileError
from spectune.machine import profile_dtypes
from spectune.tune.cost import CostModel
from spectune.tune.search import (ScheduleEntry, Tuner, mask_url, open_study, pareto_trials,
                                  schedule, sqlite_url, top_trials, validate)
from spectune.tune.space import SearchSpace

def _roots() -> list[Path]:
    from spectune.profile import BUNDLED_DIR, user_profiles_dir

    return [user_profiles_dir(), Path(BUNDLED_DIR)]


def _same_model(a: str, b: str) -> bool:
    if a == b:
        return True
    pa, pb = Path(a).expanduser(), Path(b).expanduser()
    return pa.exists() and pb.exists() and pa.resolve() == pb.resolve()


def profile_matches(meta: dict[str, Any], models: Sequence[str], combine: str, temperature: float) -> str | None:
    """None when the profile (its ``profile.json``) fits the request, else why not (one short phrase).

    It fits when it measured these models in this order with this combination and temperature -- or, for a
    pair with ``combine=target``, when a ``target`` profile holds both models in this order: its pair traces
    are then exactly the pair's (recorded along the same target's trajectories). Whether it describes this
    machine is ``spectune.profile.machine_mismatch``'s question, asked apart."""
    names = [m.get("name") for m in meta.get("models", [])]
    st = meta.get("settings", {})
    exact = len(names) == len(models) and all(_same_model(str(a), str(b)) for a, b in zip(names, models))
    if not exact and not (combine == "target" and st.get("combine", "target") == "target" and len(models) == 2
                          and _pair_of(names, models) is not None):
        return f"models {','.join(map(str, names))}"
    if exact and st.get("combine", "target") != combine:
        return f"combination {st.get('combine')}"
    if float(st.get("acceptance", {}).get("temperature", 0.0)) != float(temperature):
        return f"temperature {st.get('acceptance', {}).get('temperature')}"
    return None


def _pair_of(names: Sequence[Any], models: Sequence[str]) -> tuple[str, str] | None:
    """The profile's names of the pair ``models`` when both are among ``names`` in this order, else None."""
    idx = [next((i for i, n in enumerate(names) if _same_model(str(n), str(m))), None) for m in models]
    if None in idx or idx[0] >= idx[1]:
        return None
    return str(names[idx[0]]), str(names[idx[1]])


def profile_names(prof: Any, models: Sequence[str]) -> tuple[str, ...]:
    """The profile's name of each requested model (names, or the same resolved directories), in request order."""
    try:
        return tuple(next(str(n) for n in prof.models if _same_model(str(m), str(n))) for m in models)
    except StopIteration:
        raise AssertionError(f"the profile does not hold every model of {list(models)}") from None


def candidate_dirs(extra: Sequence[Path] = ()) -> list[Path]:
    out = []
    for root in [*extra, *_roots()]:
        if root.is_dir():
            out += sorted(p for p in root.iterdir() if (p / "profile.json").is_file())
    return out


def run_dtypes(models: Sequence[str], dtype: str = "auto", device: str | None = None) -> list[str]:
    """The dtype each model would run in here (``--dtype``, resolved as loading resolves it)."""
    from spectune.models.loading import resolve_model_dtype

    return [resolve_model_dtype(m, dtype, device or "cpu")[0] for m in models]


def find_profile(models: Sequence[str], combine: str, temperature: float = 0.0,
                 search: Sequence[Path] = (), dtype: str = "auto") -> tuple[Path | None, list[str]]:
    """(matching profile directory or None, one line per profile that did not match and why)."""
    from spectune.profile import machine_mismatch, read_meta

    dtypes = None if dtype is None else run_dtypes(models, dtype)
    notes, supersets = [], []
    for d in candidate_dirs(search):
        meta = read_meta(d)
        if meta is None:
            notes.append(f"{d}: unreadable or not a valid profile")
            continue
        why = profile_matches(meta, models, combine, temperature)
        held = [m for m in meta.get("models", []) if any(_same_model(str(m.get("name")), x) for x in models)]
        # a superset profile ran more models than asked: compare the dtypes of the requested ones only
        why = why or machine_mismatch({**meta, "models": held}, None, dtypes)
        if why is None and len(meta.get("models", [])) == len(models):
            return d, notes
        if why is None:
            supersets.append(d)
        else:
            notes.append(f"{d}: {why}")
    return (supersets[0] if supersets else None), notes


PLOT_FILES = ("speedup_vs_gamma.png", "pareto.png")


def _claim_outputs(out: Any, storage: str | None, plot_dir: Any, force: bool) -> None:
    """Before any work: ``out`` and ``plot_dir`` can be written and hold nothing of the user's that would be
    overwritten (``spectune.outputs.claim``); with ``force`` a foreign ``study.db`` is deleted, not opened."""
    from spectune.outputs import claim, target_dir, written_by_spectune

    if out is not None:
        d = target_dir(out, "--out")
        claim(d / "config.json", force, "config")
        claim(d / "schedule.json", force, "schedule")
        if storage is None:
            db = claim(d / "study.db", force, "study database")
            if force and db.is_file() and not written_by_spectune(db):
                db.unlink()
    if plot_dir is not None:
        d = target_dir(plot_dir, "--plot")
        for name in PLOT_FILES:
            claim(d / name, force, "plot")


@dataclass
class Row:
    config: DecodeConfig
    prediction: dict[str, Any]
    trial: int | None = None
    measured: dict[str, Any] | None = None


@dataclass
class Recommendation:
    profile_path: Path
    profile_source: str  # "given", "found", "calibrated"
    study_name: str
    storage: str  # masked
    trials_added: int
    search_seconds: float
    rows: list[Row]  # top configurations (or the Pareto front), best first
    chosen: Row
    chosen_by: str  # "measured" or "predicted"
    baseline: Row  # standard collaborative decoding at the chosen batch size
    target_alone: dict[str, Any]  # predicted numbers of the last model alone
    schedule: list[ScheduleEntry]
    config_path: Path | None = None
    schedule_path: Path | None = None
    plots: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    excluded_methods: dict[str, str] = field(default_factory=dict)


def _study_name(models: Sequence[str], combine: str, workload: str, temperature: float, pareto: bool,
                batch_size: int | None) -> str:
    from spectune.calibrate.run import _slug

    m = "+".join(_slug(Path(x).name or x) for x in models)
    return f"{m}--{combine}--{_slug(str(workload))}--t{temperature:g}" + ("--pareto" if pareto else "") + (
        f"--b{batch_size}" if batch_size else "")


def _supported_methods(cm: CostModel, space: SearchSpace) -> tuple[list[str], dict[str, str]]:
    """Methods the cost model can price for this profile (one probe config each), and why others cannot."""
    ok, bad = [], {}
    for m in space.method_choices:
        for proposer in space.proposers:
            cfg = space.config(m, proposer, None, space.batch_sizes[0])
            try:
                cm.predict(cfg)
                ok.append(m)
                break
            except (KeyError, ValueError) as e:
                bad[m] = str(e).strip("'\"")
    return ok, {m: why for m, why in bad.items() if m not in ok}


def recommend(
    models: Sequence[str],
    *,
    combine: str = "target",
    workload: str = "mix",
    batch_size: int | None = None,
    pareto: bool = False,
    max_latency: float | None = None,
    n_trials: int = 500,
    storage: str | None = None,
    study_name: str | None = None,
    validate_n: int = 0,
    validate_prompts: int | None = None,
    max_new_tokens: int = 64,
    temperature: float = 0.0,
    methods: Sequence[str] | None = None,
    profile: str | os.PathLike | None = None,
    calibrate_missing: bool = True,
    calibrate_kwargs: dict[str, Any] | None = None,
    out: str | os.PathLike | None = "spectune-recommend",
    plot_dir: str | os.PathLike | None = None,
    top: int = 5,
    seed: int = 0,
    dtype: str = "auto",
    force: bool = False,
    say: Callable[[str], None] = lambda s: None,
) -> Recommendation:
    """Search the fastest configuration of ``models`` for ``workload`` on this machine (see the module docs)."""
    from spectune.decoding.combine import parse_combination
    from spectune.profile import ProfileHardwareWarning, load_profile, machine_mismatch
    from spectune.workloads import load_workload

    models = [str(m) for m in models]
    if len(models) < 2:
        raise ConfigError(f"recommend needs at least 2 models (smallest first), got {len(models)}")
    comb = parse_combination(combine, len(models)).spec
    from spectune import checks

    checks.integer(n_trials, "trials", lo=1, hi=checks.MAX_TRIALS)
    if max_latency is not None:
        checks.real(max_latency, "max latency (seconds per token)", lo=0, lo_open=True)
    checks.integer(validate_n, "--validate", lo=0, hi=checks.MAX_COUNT)
    if validate_prompts is not None:
        checks.integer(validate_prompts, "validation prompts", lo=1, hi=checks.MAX_COUNT)
    if batch_size is not None:
        checks.integer(batch_size, "batch size", lo=1)
    checks.real(temperature, "temperature", lo=0)
    checks.integer(max_new_tokens, "max-new-tokens", lo=1)
    checks.seed(seed)
    if storage is not None:
        checks.text(storage, "--storage (a database URL)")
    if study_name is not None:
        checks.text(study_name, "--study-name")
    _claim_outputs(out, storage, plot_dir, force)
    wl = load_workload(workload)  # a typo fails before anything runs
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    notes: list[str] = []

    # ---- study: opened first, so a wrong storage URL fails before a profile is looked up or measured
    from spectune.masking import mask_text

    out_dir = Path(out).expanduser() if out else None
    if storage is None:
        if out_dir is None:
            raise ConfigError("give --storage or an output directory for the study database")
        storage = sqlite_url(str(out_dir / "study.db"))
    name = mask_text(study_name or _study_name(models, comb, wl.name, temperature, pareto, batch_size))
    study = open_study(storage, name, ["maximize", "minimize"] if pareto else ["maximize"])

    # ---- profile
    if profile is not None:
        ppath, source = Path(profile).expanduser(), "given"
        prof = load_profile(ppath, check_hardware=False)
        miss = machine_mismatch(prof.meta, None, None if dtype is None else run_dtypes(models, dtype))
        if miss:
            say(f"warning: profile '{ppath}' does not describe this machine and dtype: {miss}")
            notes.append(f"profile '{ppath}' does not describe this machine and dtype: {miss}")
        why = profile_matches(prof.meta, models, comb, temperature)
        if why:
            raise ProfileError(f"profile '{ppath}' does not fit this request: it has {why}")
    else:
        ppath, skipped = find_profile(models, comb, temperature, dtype=dtype)
        if ppath is not None:
            source = "found"
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ProfileHardwareWarning)
                prof = load_profile(ppath)
        elif not calibrate_missing:
            near = next((n for n in skipped if not n.split(": ", 1)[-1].startswith("models ")), None)
            raise ProfileError(f"no profile for models {','.join(models)} (combination {comb}, temperature "
                               f"{temperature:g}) measured on this machine{' (' + near + ')' if near else ''}; "
                               "run 'spectune calibrate' or drop --no-calibrate")
        else:
            from spectune.calibrate import calibrate

            say(f"no profile for {','.join(models)} ({comb}) on this hardware: calibrating first")
            kw = dict(calibrate_kwargs or {})
            kw.setdefault("workload", workload)
            kw.setdefault("dtype", dtype)
            prof = calibrate(models, combine=comb, temperature=temperature, **kw)
            ppath, source = Path(prof.path), "calibrated"

    cm = CostModel(prof, workload=wl.name)
    names = profile_names(prof, models)  # the profile's names of the requested models (as calibrated)
    feasible_b = [b for b in cm.batch_sizes if cm.feasible(names, b)]
    if batch_size is not None:
        if batch_size not in cm.batch_sizes:
            raise ConfigError(f"batch size {batch_size} was not calibrated (calibrated: "
                              f"{', '.join(map(str, cm.batch_sizes))})")
        feasible_b = [b for b in feasible_b if b == batch_size]
    if not feasible_b:
        raise ConfigError("no calibrated batch size fits these models in memory")
    say(f"profile: {ppath} ({source})")
    from spectune.config import METHODS

    extra = tuple(m for m in ("sv",) if m in METHODS and len(names) >= 3 and cm.supports(m))
    space = SearchSpace(names, comb, tuple(feasible_b), cm.gamma_max, methods=tuple(methods) if methods else None,
                        temperature=temperature, max_new_tokens=max_new_tokens, seed=seed, extra_methods=extra)
    ok, excluded = _supported_methods(cm, space)
    if "sv" in METHODS and "sv" not in extra:
        excluded["sv"] = ("needs a draft, a companion and a target (3+ models)" if len(names) < 3 else
                          "the profile has no SV statistics for these models" if prof.sv_bins_table.empty else
                          "the cost model does not price SV's adaptive verification yet")
    if not ok:
        raise ProfileError(f"profile '{ppath}' cannot price any method: {'; '.join(excluded.values())}")
    if excluded:
        space = SearchSpace(names, comb, tuple(feasible_b), cm.gamma_max, methods=tuple(ok),
                            temperature=temperature, max_new_tokens=max_new_tokens, seed=seed, extra_methods=extra)
    tuner = Tuner(cm, space, pareto=pareto, max_latency=max_latency, seed=seed)

    say(f"study '{name}' in {mask_url(storage)}")
    t0 = time.perf_counter()
    added = tuner.optimize(study, n_trials)
    secs = time.perf_counter() - t0
    say(f"{len(added)} trials in {secs:.1f} s ({len(added) / max(secs, 1e-9):.0f} trials/s)")

    best_trials = pareto_trials(study) if pareto else top_trials(study, max(top, validate_n))
    if max_latency is not None:
        best_trials = [t for t in best_trials if t.user_attrs["prediction"]["latency_per_token"] <= max_latency]
    if not best_trials:
        raise ConfigError("no configuration satisfies the constraints"
                          + (f" (max latency {max_latency:g} s/token)" if max_latency is not None else ""))
    rows = [Row(DecodeConfig.from_dict(t.user_attrs["config"]), t.user_attrs["prediction"], t.number,
                study.user_attrs.get(f"measured:{t.number}")) for t in best_trials]

    # ---- validation on the runtime decoder
    baseline_cfg = space.config("standard", names[0], None, rows[0].config.batch_size)
    base_pred = cm.predict(baseline_cfg).to_dict()
    baseline = Row(baseline_cfg, base_pred)
    if validate_n > 0:
        n_p = validate_prompts or max(4, 2 * rows[0].config.batch_size)
        prompts = list(wl.heldout[:n_p])
        todo = best_trials[:validate_n]
        say(f"validating {len(todo)} configuration(s) and the standard baseline on {len(prompts)} held-out prompts")
        meas, base_m = validate(study, todo, baseline_cfg, list(models), prompts, profile=prof, dtype=dtype,
                                progress=lambda c: say(f"  measuring {c.method} gamma={list(c.gamma)} "
                                                       f"b={c.batch_size}"))
        by_trial = {m.trial: m for m in meas}
        for r in rows:
            if r.trial in by_trial:
                m = by_trial[r.trial]
                r.measured = {"goodput": m.goodput, "latency_per_token": m.latency_per_token,
                              "mean_accepted_length": m.mean_accepted_length}
        baseline.measured = {"goodput": base_m.goodput, "latency_per_token": base_m.latency_per_token,
                             "mean_accepted_length": 0.0}
    measured_rows = [r for r in rows if r.measured]
    if measured_rows:
        chosen = max(measured_rows, key=lambda r: r.measured["goodput"])
        if baseline.measured and baseline.measured["goodput"] > chosen.measured["goodput"] and not pareto:
            chosen = baseline
            notes.append("measured: standard decoding beat every validated configuration")
        chosen_by = "measured"
    else:
        chosen, chosen_by = rows[0], "predicted"
    if chosen is not baseline and chosen.config.batch_size != baseline.config.batch_size:
        baseline = Row(space.config("standard", names[0], None, chosen.config.batch_size),
                       cm.predict(space.config("standard", names[0], None, chosen.config.batch_size)).to_dict())
    b = chosen.config.batch_size
    tgt = {"goodput": b / cm.L(names[-1], b, 1), "latency_per_token": cm.L(names[-1], b, 1)}

    sched = schedule(tuner, study)
    rec = Recommendation(ppath, source, name, mask_url(storage), len(added), secs, rows, chosen, chosen_by, baseline,
                         tgt, sched, notes=notes, excluded_methods=excluded)
    # ---- outputs: the chosen config (models as the user named them) and the schedule
    user_names = dict(zip(names, models))
    if out_dir is not None:
        dts = profile_dtypes(prof.meta)
        cfg = DecodeConfig.from_dict({**chosen.config.to_dict(), "dtype": dts.pop() if len(dts) == 1 else "auto",
                                      "models": [user_names.get(m, m) for m in chosen.config.models]})
        if cfg.method == "sv":  # sv reads its bins from the profile: say which one
            cfg.extra = {**cfg.extra, "profile": str(ppath)}
        rec.config_path = cfg.save(out_dir / "config.json")
        rec.schedule_path = write_json_atomic(out_dir / "schedule.json", {
            "schema": "spectune.schedule/1", "profile": str(ppath), "workload": wl.name, "combine": comb,
            "entries": [{**e.to_dict(), "models": [user_names.get(m, m) for m in e.config.models]} for e in sched]})
    if plot_dir is not None:
        from spectune.tune.plots import plot_recommendation

        rec.plots = plot_recommendation(rec, tuner, study, Path(plot_dir).expanduser(), force=force)
    return rec
