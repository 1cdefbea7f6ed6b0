"""``recommend``: the profile of these models on this hardware, searched, validated, reported.

Profile: ``--profile PATH`` if given (a warning when it does not describe this machine and dtype, an error when
it does not fit the request); otherwise the one finder, ``spectune.profile.find_profiles``, asked for these
models with this combination and temperature on this machine in the dtypes this run would use (``--dtype``);
its module docstring says the rule (models in order, names or the same resolved directories; for a pair with
``combine=target`` a ``target`` profile of more models holding the pair in this order, exact matches first).
None matching: ``calibrate_missing(models, combine=, temperature=, workload=, dtype=, runtime=[, device=])``
measures one when given -- the API layer passes calibration (``spectune.api.recommend``, which the CLI calls),
so this package never imports ``spectune.calibration`` -- else a ``ProfileError`` naming the nearest candidate.
"""
from __future__ import annotations

import math
import os
import statistics
import time
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from spectune import checks
from spectune.config import DecodeConfig, write_json_atomic
from spectune.decoding.combine import parse_combination
from spectune.decoding.proposers import proposer_kind
from spectune.errors import ConfigError, ProfileError
from spectune.machine import engine_mismatch, profile_dtypes
from spectune.masking import mask_text
from spectune.models.loading import resolve_model_dtype
from spectune.outputs import claim, name_slug, target_dir, written_by_spectune
from spectune.profile import (
    ProfileHardwareWarning,
    load_profile,
    machine_mismatch,
    pick_runtime,
    profile_matches,
    profile_names,
)
from spectune.tune.cost import CostModel
from spectune.tune.search import ScheduleEntry, Tuner, pareto_trials, schedule, top_trials
from spectune.tune.space import SearchSpace
from spectune.tune.study import mask_url, open_study, sqlite_url
from spectune.tune.validation import validate
from spectune.workloads import load_workload


def run_dtypes(models: Sequence[str], dtype: str = "auto", device: str | None = None) -> list[str]:
    """The dtype each model would run in here (``--dtype``, resolved as loading resolves it)."""
    return [resolve_model_dtype(m, dtype, device or "cpu")[0] for m in models]


PLOT_FILES = ("speedup_vs_gamma.png", "pareto.png")


def _claim_outputs(out: Any, storage: str | None, plot_dir: Any, force: bool) -> None:
    """Before any work: ``out`` and ``plot_dir`` can be written and hold nothing of the user's that would be
    overwritten (``spectune.outputs.claim``); with ``force`` a foreign ``study.db`` is deleted, not opened."""
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


@dataclass(frozen=True)
class EngineAdvice:
    """Advice for a serving engine: priced on its engine profile (``calibrate --engine``), searched over what it
    runs (the target alone, a draft model or a prompt lookup, a fixed K per batch size), validated in it.
    ``measure(configs, prompts, say)`` -> each config's decode goodput repeat by repeat (tok/s; repeat i of each in
    round i; the API layer passes it: exporting and serving are above this package)."""

    settings: Any  # spectune.engines.EngineSettings
    measure: Callable[..., list[list[float]]] | None = None
    prompts_said: str | None = None  # what ``measure`` runs, for the progress line (None: "N held-out prompts")

    @property
    def name(self) -> str:
        return self.settings.name




@dataclass
class Row:
    config: DecodeConfig
    prediction: dict[str, Any]
    trial: int | None = None
    measured: dict[str, Any] | None = None
    robustness: dict[str, Any] | None = None  # tune.robustness.Robustness over resampled calibration prompts


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
    by_proposer: dict[str, Row] = field(default_factory=dict)  # proposer kind -> its best speculative row at b
    engine: dict[str, Any] | None = None  # the serving engine advised for (its profile's engine block), else None


def _study_name(models: Sequence[str], combine: str, workload: str, temperature: float, pareto: bool,
                batch_size: int | None) -> str:
    m = "+".join(name_slug(Path(x).name or x) for x in models)
    return f"{m}--{combine}--{name_slug(str(workload))}--t{temperature:g}" + ("--pareto" if pareto else "") + (
        f"--b{batch_size}" if batch_size else "")


@dataclass(frozen=True)
class ProfileSource:
    """Where ``recommend`` takes its profile from and how the models run: the user's ``models`` (smallest first)
    under combination ``comb`` at ``temperature``; ``profile`` (given, else found, else ``calibrate_missing``
    calibrates one on ``workload``), timed in ``dtype`` on ``runtime`` and ``device``, or an ``engine``'s."""

    models: list[str]
    comb: str
    temperature: float
    dtype: str
    profile: Any = None
    calibrate_missing: Callable[..., Any] | None = None
    workload: str = "mix"
    runtime: str = "eager"
    device: str = "cpu"
    engine: str | None = None


def _profile(src: ProfileSource, say: Callable[[str], None], notes: list[str]) -> tuple[Any, Path, str]:
    """(the profile, its path, "given" / "found" / "calibrated"): see the module docstring; a note when its latency
    was timed mask-less (``Profile.latency_forward``). For an ``engine``, its engine profile only (never
    calibrated here: ``spectune calibrate --engine`` starts the engine once per setting)."""
    if src.engine is not None:
        return _engine_profile(src.models, src.comb, src.temperature, src.profile, src.engine, say, notes)
    prof, ppath, source = _lookup(src, say, notes)
    if prof.latency_caveat:
        notes.append(f"profile {ppath}: latency {prof.latency_caveat}")
    return prof, ppath, source


def _lookup(src: ProfileSource, say: Callable[[str], None], notes: list[str]) -> tuple[Any, Path, str]:
    from spectune.profile import find_profiles  # looked up at call time: tests spy on the one finder

    models, comb, temperature, runtime, device = src.models, src.comb, src.temperature, src.runtime, src.device
    dtypes = None if src.dtype is None else run_dtypes(models, src.dtype, device)
    if src.profile is not None:
        ppath = Path(src.profile).expanduser()
        prof = load_profile(ppath, check_hardware=False)
        miss = machine_mismatch(prof.meta, device, dtypes, runtime)
        if miss:
            say(f"warning: profile '{ppath}' does not describe this machine and dtype: {miss}")
            notes.append(f"profile '{ppath}' does not describe this machine and dtype: {miss}")
        why = profile_matches(prof.meta, models, comb, temperature)
        if why:
            raise ProfileError(f"profile '{ppath}' does not fit this request: it has {why}")
        return prof, ppath, "given"
    found = find_profiles(models, combine=comb, temperature=temperature, device=device, dtypes=dtypes, runtime=runtime)
    if found.best is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ProfileHardwareWarning)
            return load_profile(found.best), found.best, "found"
    if src.calibrate_missing is None:
        near = found.nearest
        raise ProfileError(f"no profile for models {','.join(models)} (combination {comb}, temperature "
                           f"{temperature:g}) measured on this machine{' (' + near + ')' if near else ''}; "
                           "run 'spectune calibrate' or drop --no-calibrate")
    say(f"no profile for {','.join(models)} ({comb}) on this hardware: calibrating first")
    prof = src.calibrate_missing(models, combine=comb, temperature=temperature, workload=src.workload,
                                 dtype=src.dtype, runtime=runtime, **({} if device == "cpu" else {"device": device}))
    return prof, Path(prof.path), "calibrated"


def _engine_profile(models: list[str], comb: str, temperature: float, profile: Any, engine: str,
                    say: Callable[[str], None], notes: list[str]) -> tuple[Any, Path, str]:
    """The engine profile of ``models`` for ``engine``: ``profile`` (which must be one) or the one found."""
    from spectune.profile import find_profiles

    if comb != "target":
        raise ConfigError(f"{engine} runs the target's own distribution: recommend --engine needs --combine target")
    if profile is not None:
        ppath = Path(profile).expanduser()
        prof = load_profile(ppath, check_hardware=False)
        why = engine_mismatch(prof.meta, engine) or profile_matches(prof.meta, models, comb, temperature)
        if why:
            raise ProfileError(f"profile '{ppath}' does not fit this request: {why}")
        miss = machine_mismatch(prof.meta, "cpu", None, None, engine)
        if miss:
            say(f"warning: profile '{ppath}' does not describe this machine: {miss}")
            notes.append(f"profile '{ppath}' does not describe this machine: {miss}")
        return prof, ppath, "given"
    found = find_profiles(models, combine=comb, temperature=temperature, device="cpu", engine=engine)
    if found.best is None:
        raise ProfileError(f"no {engine} profile for models {','.join(models)} on this machine: run 'spectune "
                           f"calibrate --engine {engine} --models {','.join(models)}'")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ProfileHardwareWarning)
        return load_profile(found.best), found.best, "found"


CONFIDENCE_THRESHOLDS = (0.2, 0.4, 0.6)  # confidence:T policies searched where the profile recorded confidence


def _space(cm: CostModel, ppath: Path, names: tuple[str, ...], comb: str, batch_size: int | None, methods: Any,
           temperature: float, max_new_tokens: int, seed: int, engine: str | None = None
           ) -> tuple[SearchSpace, dict[str, str]]:
    """(the search space over the methods, lookup proposers and draft-length policies the cost model prices
    here, why each other method is left out); for an ``engine`` only what it runs (its module's ``methods`` and
    ``policies``: vLLM a fixed K per batch size; llama.cpp also the lookup before the draft and p-min)."""
    feasible_b = [b for b in cm.batch_sizes if cm.feasible(names, b)]
    if batch_size is not None:
        if batch_size not in cm.batch_sizes:
            raise ConfigError(f"batch size {batch_size} was not calibrated (calibrated: "
                              f"{', '.join(map(str, cm.batch_sizes))})")
        feasible_b = [b for b in feasible_b if b == batch_size]
    if not feasible_b:
        raise ConfigError("no calibrated batch size fits these models in memory")
    extra = ("sv",) if len(names) >= 3 and cm.supports("sv") else ()
    policies = ("fixed", "heuristic") + tuple(f"confidence:{x:g}" for x in CONFIDENCE_THRESHOLDS
                                              if cm.supports("sd", policy="confidence:0.5"))
    if engine:
        from spectune.engines import engine_class

        runs = engine_class(engine)
        extra = ()
        policies = tuple(p for p in policies if p == "fixed" or (p.startswith("confidence:") and runs.p_min))
        methods = [m for m in (methods or runs.methods) if m in runs.methods]
    space = SearchSpace(names, comb, tuple(feasible_b), cm.gamma_max, temperature=temperature,
                        max_new_tokens=max_new_tokens, seed=seed, extra_methods=extra, policies=policies,
                        lookups=cm.calibrated.lookup_proposers())
    space = replace(space, lookups=tuple(_priced(cm, space.probes("sd-ngram")))) if space.lookups else space
    if methods:
        space = replace(space, methods=tuple(methods))
    ok, excluded = _supported_methods(cm, space)
    if "sv" not in extra:  # cm.supports("sv") needs 3+ models and the SV statistics
        excluded["sv"] = ("needs a draft, a companion and a target (3+ models)" if len(names) < 3 else
                          "the profile has no SV statistics for these models")
    if not ok:
        raise ProfileError(f"profile '{ppath}' cannot price any method: {'; '.join(excluded.values())}")
    return (replace(space, methods=tuple(ok)) if excluded else space), excluded


def _priced(cm: CostModel, configs: list[Any]) -> list[str]:
    """The lookup proposers of ``configs`` the cost model can price (the profile traced them against this r)."""
    out = []
    for cfg in configs:
        try:
            cm.predict(cfg)
            out.append(cfg.proposer)
        except (KeyError, ValueError):
            pass
    return out


def _supported_methods(cm: CostModel, space: SearchSpace) -> tuple[list[str], dict[str, str]]:
    """Methods the cost model can price for this profile (a probe config each), and why others cannot."""
    ok, bad = [], {}
    for m in space.method_choices:
        for cfg in space.probes(m):
            try:
                cm.predict(cfg)
                ok.append(m)
                break
            except (KeyError, ValueError) as e:
                bad[m] = str(e).strip("'\"")
    return ok, {m: why for m, why in bad.items() if m not in ok}


def _best_rows(study: Any, pareto: bool, n: int, max_latency: float | None) -> tuple[list[Any], list[Row]]:
    """(the best feasible trials -- the Pareto front, or the top ``n`` by predicted goodput --, their rows)."""
    best_trials = pareto_trials(study) if pareto else top_trials(study, n)
    if max_latency is not None:  # trials an earlier run of the same study added under another bound
        best_trials = [t for t in best_trials if t.user_attrs["prediction"]["latency_per_token"] <= max_latency]
    if not best_trials:
        raise ConfigError("no configuration satisfies the constraints"
                          + (f" (max latency {max_latency:g} s/token)" if max_latency is not None else ""))
    rows = [Row(DecodeConfig.from_dict(t.user_attrs["config"]), t.user_attrs["prediction"], t.number,
                study.user_attrs.get(f"measured:{t.number}")) for t in best_trials]
    return best_trials, rows


def _validate_rows(study: Any, todo: list[Any], rows: list[Row], baseline: Row, src: ProfileSource,
                   prompts: list[str], prof: Any, say: Callable[[str], None]) -> None:
    """Measure ``todo`` and the standard ``baseline`` on the runtime decoder; the numbers go on their rows (a
    measured trial not among ``rows`` is added to them)."""
    rows += [Row(DecodeConfig.from_dict(t.user_attrs["config"]), t.user_attrs["prediction"], t.number)
             for t in todo if t.number not in {r.trial for r in rows}]
    say(f"validating {len(todo)} configuration(s) and the standard baseline on {len(prompts)} held-out prompts")
    meas, base_m = validate(study, todo, baseline.config, src.models, prompts, profile=prof, dtype=src.dtype,
                            runtime=src.runtime, device=src.device,
                            progress=lambda c: say(f"  measuring {c.method} gamma={list(c.gamma)} b={c.batch_size}"))
    by_trial = {m.trial: m for m in meas}
    for r in rows:
        if r.trial in by_trial:
            m = by_trial[r.trial]
            r.measured = {"goodput": m.goodput, "latency_per_token": m.latency_per_token,
                          "mean_accepted_length": m.mean_accepted_length}
    baseline.measured = {"goodput": base_m.goodput, "latency_per_token": base_m.latency_per_token,
                         "mean_accepted_length": 0.0}


def _validate_in_engine(engine: EngineAdvice, todo: list[Any], rows: list[Row], baseline: Row,
                        user_names: dict[str, str], prompts: list[str], say: Callable[[str], None]) -> None:
    """Measure ``todo`` and the target alone in the engine (``engine.measure``), served as the user named the
    models; the numbers go on their rows."""
    if engine.measure is None:
        raise ConfigError(f"validating in {engine.name} needs the engine runner (spectune.api.recommend)")
    rows += [Row(DecodeConfig.from_dict(t.user_attrs["config"]), t.user_attrs["prediction"], t.number)
             for t in todo if t.number not in {r.trial for r in rows}]
    chosen = [r for r in rows if r.trial in {t.number for t in todo}] + [baseline]
    as_user = [replace(r.config, models=tuple(user_names.get(m, m) for m in r.config.models)) for r in chosen]
    say(f"validating {len(todo)} configuration(s) and the target alone in {engine.name} on "
        f"{engine.prompts_said or f'{len(prompts)} held-out prompts'}")
    for r, reps in zip(chosen, engine.measure(as_user, prompts, say)):
        g = max(reps)
        r.measured = {"goodput": g, "goodput_median": statistics.median(reps), "repeats": list(reps),
                      "engine": engine.name, "mean_accepted_length": float("nan"),
                      "latency_per_token": r.config.batch_size / g if g > 0 else float("nan")}


def _choose(rows: list[Row], baseline: Row, pareto: bool, notes: list[str]) -> tuple[Row, str]:
    """(the chosen row, "measured" or "predicted"): the fastest measured one (standard when it beat them all),
    else the best predicted; standard where nothing is predicted faster (a tie goes to not speculating: a lookup
    that never proposes prices as standard, but an engine running it pays for the speculative path: llama.cpp ran
    `ngram:1,3` at K = 2, which drafted nothing, 0.85-0.94x its target alone at b = 8). Measured in an engine, the
    pick is the best by ``vs_alone``, and only if it beat the target alone there."""
    measured_rows = [r for r in rows if r.measured]
    if not measured_rows:
        if not pareto and baseline.prediction["goodput"] >= rows[0].prediction["goodput"]:
            notes.append("predicted: nothing speculative is faster than standard decoding")
            return baseline, "predicted"
        return rows[0], "predicted"
    chosen = max(measured_rows, key=lambda r: r.measured["goodput"])
    base = baseline.measured
    if base and not pareto and "repeats" in base:  # an engine's
        _host_moved(baseline, notes)
        for r in measured_rows:
            r.measured["vs_target_alone"] = vs_alone(r.measured["repeats"], base["repeats"])
        chosen = max(measured_rows, key=lambda r: _or(r.measured["vs_target_alone"], -math.inf))
        _validation_resolution(measured_rows, base["repeats"], chosen, notes)
        if not chosen.measured["vs_target_alone"] > 1.0:  # nan: nothing to compare with
            notes.append("measured: no validated configuration beat the target alone, repeat by repeat beside it "
                         f"(the best {chosen.measured['vs_target_alone']:.2f}x it in the median repeat)")
            return baseline, "measured"
    elif base and not pareto and base["goodput"] > chosen.measured["goodput"]:
        notes.append("measured: standard decoding beat every validated configuration")
        return baseline, "measured"
    return chosen, "measured"


def _engine_resolution(prof: Any, rows: list[Row], chosen: Row, baseline: Row, notes: list[str]) -> None:
    """A note where the engine profile cannot tell the predicted pick from the best priced configuration of another
    kind: its lead is inside what the calibration's rounds pin a ratio to the target alone to, about
    1.25 sd / sqrt(rounds) (``calibration.engine.ratio_spread``; vLLM on the Emerald Rapids guest: +-13 % over 6
    rounds)."""
    e = prof.meta.get("engine") or {}
    sd, grid = (e.get("ratio_sd") or {}).get(str(chosen.config.batch_size)), e.get("grid") or {}
    rounds = int(grid.get("repeats", 0)) * int(grid.get("passes", 1))
    rivals = [r for r in rows + [baseline] if _family(r.config) != _family(chosen.config)]
    if not sd or rounds < 2 or not rivals:
        return
    rival = max(rivals, key=lambda r: r.prediction["goodput"])
    lead = chosen.prediction["goodput"] / rival.prediction["goodput"] - 1
    known = math.expm1(1.25 * sd / math.sqrt(rounds))
    if lead < known:
        c = rival.config
        who = Path(c.models[0]).name if c.proposer == "model" else c.proposer
        what = "the target alone" if c.method == "standard" else f"{who} K = {c.gamma[0]}"
        notes.append(f"engine near-tie: the pick is priced {lead:.0%} ahead of {what}, and the engine profile's "
                     f"stages moved sd(log) {sd:.2f} round to round beside the target alone, so its {rounds} rounds "
                     f"price a ratio to about +-{known:.0%}; --validate 3 measures them side by side")


def _validation_resolution(rows: list[Row], alone: Sequence[float], best: Row, notes: list[str]) -> None:
    """A note where the engine's validation cannot tell its best from the target alone: the best's median ratio to
    it is within the validation's resolution, 1.25 sd / sqrt(rounds) of a median ratio (sd: the rows' round ratios'
    sd(log) about each row's mean, pooled), times the larger of 1 and the lead the best of N candidates that all tie
    with the target alone shows on average (E[max of N standard normals]: 0.85 for 3, 1.42 for 8). The pick stays
    the measured best: replayed over 13 runs' validations (docs/benchmarks.md, "Ties in the engine's validation"),
    sending such ties to the target alone moved the held-out grid's side-by-side regret 1.070 -> 1.068 (llama.cpp,
    48 cells) and 1.074 -> 1.114 (vLLM, 16): a tie either way."""
    logs = [[math.log(a / b) for a, b in zip(r.measured["repeats"], alone) if a > 0 and b > 0] for r in rows]
    logs = [x for x in logs if len(x) > 1]
    dof = sum(len(x) - 1 for x in logs)
    ratio = best.measured["vs_target_alone"]
    if not dof or not ratio > 0:  # nan: nothing to compare with; 0: nothing ran
        return
    sd = math.sqrt(sum((v - statistics.fmean(x)) ** 2 for x in logs for v in x) / dof)
    n = min(len(x) for x in logs)
    known = math.expm1(1.25 * sd / math.sqrt(n) * max(1.0, _expected_max_normal(len(rows))))
    if abs(math.log(ratio)) < math.log1p(known):
        notes.append(f"measured near-tie: the best validated ran {ratio:.2f}x the target alone (median of {n} "
                     f"rounds side by side), inside what {len(rows)} candidate(s) at sd(log) {sd:.2f} a round can "
                     f"tell (+-{known:.0%}); more prompts (--validate-prompts, --workload FILE) resolve it")


def _expected_max_normal(n: int) -> float:
    """E[max of n independent standard normals] (0 for 1; 0.846 for 3), by the trapezoid rule on [-8, 8]."""
    nd, h = statistics.NormalDist(), 0.01
    xs = [-8 + i * h for i in range(1601)]
    return h * sum(x * n * nd.pdf(x) * nd.cdf(x) ** (n - 1) for x in xs)


def _host_moved(alone: Row, notes: list[str]) -> None:
    """A note where the engine ran the target alone more than 10 % off its price: the host's speed moved since the
    profile was calibrated (llama.cpp on the Emerald Rapids guest: a calibration 5-40 % slower than the runs after
    it), which moves every prediction alike and none of the side-by-side ratios the pick is made on."""
    got, priced = alone.measured["goodput"], alone.prediction["goodput"]
    if priced > 0 and abs(got / priced - 1) > 0.10:
        notes.append(f"measured: the engine ran the target alone at {got:.1f} tok/s (fastest repeat) where the "
                     f"profile prices {priced:.1f} ({got / priced - 1:+.0%}): this host's speed has moved since "
                     "calibration, and every predicted tok/s with it (the pick compares side by side)")


def _or(x: float, default: float) -> float:
    return default if math.isnan(x) else x


def vs_alone(reps: Sequence[float], alone: Sequence[float]) -> float:
    """The median over repeats of a configuration's goodput over the target alone's in the same repeat: where the
    engine starts in seconds (llama.cpp) ``bench_engine`` measures repeat i of every configuration in round i, so the
    ratio is side by side and the host's drift between rounds cancels (vLLM, 2 minutes a start, runs a
    configuration's repeats in one start: there repeat i is the i-th after the warm-up).
    The fastest repeat of each, or the median of each, compared apart, moved with the host:
    llama.cpp b11434 at b = 8 on the Emerald Rapids guest (run z, mix), `ngram:1,3` K = 2 measured 104.4 / 85.0 /
    117.3 tok/s beside the target alone's 111.0 / 96.6 / 102.1, faster by its fastest and its median repeat and
    picked, but 0.94 / 0.88 / 1.15x it side by side; on held-out prompts it ran 0.88x. Replayed over runs x, y and
    z's validations it changed 7 of 14 picks; of the 4 the held-out grid measured, regret 1.283 -> 1.000 and
    1.194 -> 1.046 (mix b = 8: the target alone), 1.202 -> 1.074 and 1.140 -> 1.123 (b = 1: another lookup)."""
    ratios = [a / b for a, b in zip(reps, alone) if b > 0]
    return statistics.median(ratios) if ratios else float("nan")


def _write_outputs(rec: Recommendation, prof: Any, out_dir: Path, workload: str, comb: str,
                   user_names: dict[str, str]) -> None:
    """``config.json`` (the chosen config, models as the user named them) and ``schedule.json`` in ``out_dir``."""
    dts = profile_dtypes(prof.meta)
    cfg = DecodeConfig.from_dict({**rec.chosen.config.to_dict(), "dtype": dts.pop() if len(dts) == 1 else "auto",
                                  "models": [user_names.get(m, m) for m in rec.chosen.config.models]})
    if cfg.method == "sv":  # sv reads its bins from the profile: say which one
        cfg.extra = {**cfg.extra, "profile": str(rec.profile_path)}
    rec.config_path = cfg.save(out_dir / "config.json")
    rec.schedule_path = write_json_atomic(out_dir / "schedule.json", {
        "schema": "spectune.schedule/1", "profile": str(rec.profile_path), "workload": workload, "combine": comb,
        "entries": [{**e.to_dict(), "models": [user_names.get(m, m) for m in e.config.models]}
                    for e in rec.schedule]})


def _open(out_dir: Path | None, storage: str | None, name: str, pareto: bool) -> tuple[str, str, Any]:
    """(storage URL, masked study name, the study), opened before any profile is looked up or measured, so a wrong
    storage URL fails first; the default storage is ``study.db`` in ``out_dir``."""
    if storage is None:
        if out_dir is None:
            raise ConfigError("give --storage or an output directory for the study database")
        storage = sqlite_url(str(out_dir / "study.db"))
    name = mask_text(name)
    return storage, name, open_study(storage, name, ["maximize", "minimize"] if pareto else ["maximize"])


@dataclass(frozen=True)
class RecommendSettings:
    """What ``recommend`` searches and writes; every field checked by :meth:`checked` before anything runs.

    ``batch_size``: one batch size (None: every one the profile measured); ``pareto``: goodput and latency per
    token both; ``max_latency``: seconds per token a pick may not exceed; ``storage`` / ``study_name``: the Optuna
    study (default a SQLite file in ``out``); ``validate_n``: measure that many of the best (``validate_prompts``
    held-out prompts each); ``methods``: restrict the search; ``top``: rows kept; ``resamples``: bootstrap
    resamples of the calibration prompts for P(near best); ``out`` / ``plot_dir``: where the results and plots go
    (``force``: over files spectune did not write)."""

    combine: str = "target"
    workload: str = "mix"
    batch_size: int | None = None
    pareto: bool = False
    max_latency: float | None = None
    n_trials: int = 500
    storage: str | None = None
    study_name: str | None = None
    validate_n: int = 0
    validate_prompts: int | None = None
    max_new_tokens: int = 64
    temperature: float = 0.0
    methods: Sequence[str] | None = None
    top: int = 5
    seed: int = 0
    resamples: int = 20
    out: str | os.PathLike | None = "spectune-recommend"
    plot_dir: str | os.PathLike | None = None
    force: bool = False

    @classmethod
    def given(cls, settings: "RecommendSettings | None", fields: dict[str, Any]) -> "RecommendSettings":
        """``settings`` (default: the defaults) with ``fields`` over it, checked; an unknown field is one line."""
        try:
            return replace(settings or cls(), **fields).checked()
        except TypeError as e:
            raise ConfigError(f"recommend: {e}") from None

    def checked(self) -> "RecommendSettings":
        """Itself, every field checked before anything is opened, read or measured (one ``ConfigError`` line
        naming the first bad one)."""
        checks.integer(self.n_trials, "trials", lo=1, hi=checks.MAX_TRIALS)
        if self.max_latency is not None:
            checks.real(self.max_latency, "max latency (seconds per token)", lo=0, lo_open=True)
        checks.integer(self.validate_n, "--validate", lo=0, hi=checks.MAX_COUNT)
        checks.integer(self.resamples, "--resamples", lo=0, hi=checks.MAX_COUNT)
        if self.validate_prompts is not None:
            checks.integer(self.validate_prompts, "validation prompts", lo=1, hi=checks.MAX_COUNT)
        if self.batch_size is not None:
            checks.integer(self.batch_size, "batch size", lo=1)
        checks.real(self.temperature, "temperature", lo=0)
        checks.integer(self.max_new_tokens, "max-new-tokens", lo=1)
        checks.seed(self.seed)
        if self.storage is not None:
            checks.text(self.storage, "--storage (a database URL)")
        if self.study_name is not None:
            checks.text(self.study_name, "--study-name")
        return self


def recommend(models: Sequence[str], settings: RecommendSettings | None = None, *, profile: Any = None,
              calibrate_missing: Callable[..., Any] | None = None, engine: EngineAdvice | None = None,
              dtype: str = "auto", runtime: str = "auto", device: str = "cpu",
              say: Callable[[str], None] = lambda s: None, **fields: Any) -> Recommendation:
    """Search the fastest configuration of ``models`` for ``workload`` on this machine (see the module docs).
    ``settings`` (:class:`RecommendSettings`), any of its fields given by keyword over it, say what to search."""
    from spectune.config import check_device

    rs = RecommendSettings.given(settings, fields)
    device = check_device(device)  # where --validate measures and whose profiles fit (a CUDA one: the GPU's)
    models = [str(m) for m in models]
    runtime = pick_runtime(runtime, device, models, rs.batch_size or 1)
    if len(models) < 2:
        raise ConfigError(f"recommend needs at least 2 models (smallest first), got {len(models)}")
    comb = parse_combination(rs.combine, len(models)).spec
    _claim_outputs(rs.out, rs.storage, rs.plot_dir, rs.force)
    wl = load_workload(rs.workload)  # a typo fails before anything runs
    notes: list[str] = []
    out_dir = Path(rs.out).expanduser() if rs.out else None
    storage, name, study = _open(out_dir, rs.storage, rs.study_name or _study_name(
        models, comb, wl.name, rs.temperature, rs.pareto, rs.batch_size), rs.pareto)
    src = ProfileSource(models, comb, rs.temperature, dtype, profile, calibrate_missing, rs.workload, runtime, device,
                 engine.name if engine else None)
    prof, ppath, source = _profile(src, say, notes)
    cm = CostModel(prof, workload=wl.name, max_new_tokens=rs.max_new_tokens)
    names = profile_names(prof, models)  # the profile's names of the requested models (as calibrated)
    space, excluded = _space(cm, ppath, names, comb, rs.batch_size, rs.methods, rs.temperature, rs.max_new_tokens,
                             rs.seed, engine.name if engine else None)
    say(f"profile: {ppath} ({source})")  # once the batch sizes are checked: an error stays the only line
    tuner = Tuner(cm, space, pareto=rs.pareto, max_latency=rs.max_latency, seed=rs.seed)
    say(f"study '{name}' in {mask_url(storage)}")
    t0 = time.perf_counter()
    added = tuner.optimize(study, rs.n_trials, storage=storage)
    secs = time.perf_counter() - t0
    say(f"{len(added)} trials in {secs:.1f} s ({len(added) / max(secs, 1e-9):.0f} trials/s)")
    best_trials, rows = _best_rows(study, rs.pareto, max(rs.top, rs.validate_n), rs.max_latency)
    baseline = _standard(space, cm, names, rows[0].config.batch_size)
    if rs.validate_n > 0:
        prompts = list(wl.heldout[:rs.validate_prompts or max(4, 2 * rows[0].config.batch_size)])
        todo = best_trials[:rs.validate_n] if rs.pareto else _diverse(study, rs.validate_n, rs.max_latency)
        if engine is not None:
            _validate_in_engine(engine, todo, rows, baseline, dict(zip(names, models)), prompts, say)
        else:
            _validate_rows(study, todo, rows, baseline, src, prompts, prof, say)
    chosen, chosen_by = _choose(rows, baseline, rs.pareto, notes)
    if engine is not None and chosen_by == "predicted" and not rs.pareto:
        _engine_resolution(prof, rows, chosen, baseline, notes)
    if rs.resamples > 0 and not rs.pareto:
        others = _contenders(study, rows, rs.max_latency) + [baseline.config]  # not speculating is always one
        _robustness(cm, rows, others, chosen, chosen_by, rs.resamples, rs.seed, notes)
    rec = _recommendation(rs, cm, space, names, study, tuner, (ppath, source, name, mask_url(storage), added, secs),
                          rows, (chosen, chosen_by, baseline), (notes, excluded, prof if engine else None))
    if out_dir is not None:
        _write_outputs(rec, prof, out_dir, wl.name, comb, dict(zip(names, models)))
    if rs.plot_dir is not None:
        from spectune.tune.plots import plot_recommendation

        rec.plots = plot_recommendation(rec, tuner, study, Path(rs.plot_dir).expanduser(), force=rs.force)
    return rec


def _recommendation(rs: RecommendSettings, cm: CostModel, space: Any, names: list[str], study: Any, tuner: Any,
                    run: tuple, rows: list[Row], pick: tuple, extras: tuple) -> Recommendation:
    """The ``Recommendation``: ``run`` = (profile path, its source, study name, storage, trials added, seconds),
    ``pick`` = (chosen row, how it was chosen, the standard baseline), ``extras`` = (notes, excluded methods, the
    engine profile or None); the target alone at the pick's batch size."""
    ppath, source, name, storage, added, secs = run
    chosen, chosen_by, baseline = pick
    notes, excluded, engine_profile = extras
    if chosen is not baseline and chosen.config.batch_size != baseline.config.batch_size:
        baseline = _standard(space, cm, names, chosen.config.batch_size)
    b = chosen.config.batch_size
    tgt_s = cm.target_seconds(tuple(chosen.config.models), chosen.config.combine, b, chosen.config.max_new_tokens)
    tgt = {"goodput": b / tgt_s, "latency_per_token": tgt_s}  # as every prediction's speedup_vs_target
    engine = ({k: engine_profile.meta["engine"].get(k) for k in ("name", "version")} if engine_profile is not None
              else None)
    return Recommendation(ppath, source, name, storage, len(added), secs, rows, chosen, chosen_by, baseline, tgt,
                          schedule(tuner, study), notes=notes, excluded_methods=excluded,
                          by_proposer=_by_proposer(study, b, rs.max_latency), engine=engine)


def _family(c: DecodeConfig) -> tuple[str, str, str]:
    """What kind of configuration: (method, proposer, policy kind); gamma, thresholds and batch size aside."""
    return c.method, c.proposer, c.policy.split(":")[0]


def _ranked(study: Any, max_latency: float | None) -> list[Any]:
    """Every distinct feasible trial by predicted goodput, within ``max_latency`` (an earlier run of the same study
    may have added trials under another bound)."""
    return [t for t in top_trials(study, 10_000)
            if max_latency is None or t.user_attrs["prediction"]["latency_per_token"] <= max_latency]


def _contenders(study: Any, rows: list[Row], max_latency: float | None, cap: int = 12) -> list[DecodeConfig]:
    """Beside the top rows, the best trial of every other family (``_family``) up to ``cap`` configurations: the
    alternatives a pick must beat (a draft model against a lookup on `code`), which the top rows of one family
    can crowd out. Standard decoding is left to the caller, which always adds its baseline."""
    have = {_family(r.config) for r in rows} | {("standard", "model", "fixed")}  # standard: recommend's baseline
    best = _best_of_each(study, max_latency, _family, lambda c: _family(c) not in have)
    return [c for _, c in best.values()][: max(0, cap - len(rows))]


def _by_proposer(study: Any, batch_size: int, max_latency: float | None) -> dict[str, Row]:
    """The best speculative trial of each proposer kind (a draft model, a lookup, the lookup with a draft behind
    it) at ``batch_size``, by predicted goodput: which kind of proposer pays on this workload, the question a
    user of an engine asks first, whatever won overall."""
    best = _best_of_each(study, max_latency, lambda c: proposer_kind(c.proposer),
                         lambda c: c.method != "standard" and c.batch_size == batch_size)
    return {kind: Row(c, t.user_attrs["prediction"], t.number) for kind, (t, c) in best.items()}


def _best_of_each(study: Any, max_latency: float | None, kind: Callable[[DecodeConfig], Any],
                  keep: Callable[[DecodeConfig], bool]) -> dict[Any, tuple[Any, DecodeConfig]]:
    """kind -> (its best trial by predicted goodput, its config) among the trials ``keep`` accepts, best first."""
    best: dict[Any, tuple[Any, DecodeConfig]] = {}
    for t in _ranked(study, max_latency):
        c = DecodeConfig.from_dict(t.user_attrs["config"])
        if keep(c) and kind(c) not in best:
            best[kind(c)] = (t, c)
    return best


def _diverse(study: Any, n: int, max_latency: float | None) -> list[Any]:
    """The ``n`` trials ``--validate`` measures: the best of each family first, in order of predicted goodput,
    then the next best of any. Measuring three variants of one lookup would not decide a near-tie between a
    lookup and a draft model; measuring the best of each does."""
    seen: set[tuple[str, str, str]] = set()
    firsts, rest = [], []
    for t in _ranked(study, max_latency):
        c = DecodeConfig.from_dict(t.user_attrs["config"])
        if c.method == "standard":  # measured anyway, as the baseline
            continue
        fam = _family(c)
        (rest if fam in seen else firsts).append(t)
        seen.add(fam)
    return sorted((firsts + rest)[:n], key=lambda t: -t.values[0])


def _robustness(cm: CostModel, rows: list[Row], others: list[DecodeConfig], chosen: Row, chosen_by: str,
                resamples: int, seed: int, notes: list[str]) -> None:
    """Each top row re-priced over resampled calibration prompts beside the best of the other families
    (``tune/robustness.py``); a note when the predicted pick is often not within 5 % of the best of them: a
    near-tie that measuring decides."""
    from spectune.tune.robustness import robustness

    for r, x in zip(rows, robustness(cm, [r.config for r in rows] + others, resamples, seed=seed)):
        r.robustness = x.to_dict()
    got = chosen.robustness
    if chosen_by == "predicted" and got and got["p_near_best"] < 0.8:
        notes.append(f"near-tie: the pick is within {got['tolerance'] - 1:.0%} of the best of "
                     f"{len(rows) + len(others)} contenders in only "
                     f"{got['p_near_best']:.0%} of {got['resamples']} resamples of the {got['prompts']} calibration "
                     "prompts; --validate 3 measures the best of each kind on held-out prompts and picks the fastest")


def _standard(space: SearchSpace, cm: CostModel, names: Sequence[str], batch_size: int) -> Row:
    """Standard decoding over the user's combination at ``batch_size``, with its prediction."""
    cfg = space.config("standard", names[0], None, batch_size)
    return Row(cfg, cm.predict(cfg).to_dict())

