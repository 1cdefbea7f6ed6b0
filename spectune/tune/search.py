"""Studies: objectives and constraints over the cost model, shared storage, validation runs, schedules.

* ``Tuner(profile, space, ...)``: the Optuna objective. One objective (maximise predicted goodput) or two
  (goodput up, per-token latency down: a Pareto front with NSGA-II). Constraints (Optuna ``constraints_func``,
  feasible when <= 0): the models fit the device memory the profile recorded and no model ran out of memory at
  that batch size during calibration; optionally latency per token <= ``max_latency``.
* Every trial stores its config (``config`` user attribute, spectune-native JSON) and its prediction, so a
  study in SQLite / PostgreSQL / MySQL is self-describing and opens in optuna-dashboard.
* ``open_study(storage, study_name)``: ``load_if_exists`` so several workers on several machines share one study
  (RDB storages hand out trial numbers atomically).
* ``validate(...)``: runs configurations on the bundled runtime decoder over held-out prompts and records the
  measured goodput on the study (study user attribute ``measured:<trial number>``; Optuna does not allow
  changing finished trials).
* ``schedule(...)``: the best (method, proposer, gamma) per calibrated batch size, "standard" where nothing beats it.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import optuna

from spectune.config import DecodeConfig
from spectune.errors import ConfigError, SpectuneError
from spectune.tune.cost import CostModel, Prediction
from spectune.tune.space import SearchSpace

DEFAULT_STORAGE_FILE = "spectune-study.db"


class StudyError(SpectuneError):
    """A storage URL that cannot be opened, or a study that does not fit this search."""


def mask_url(url: str | None) -> str:
    """The storage URL with every password replaced by ``***`` (safe to print or log): ``spectune.masking``."""
    from spectune.masking import mask_url as _mask

    return _mask(url)


def open_study(storage: str | None, study_name: str, directions: Sequence[str], sampler: Any = None) -> optuna.Study:
    """Create or load ``study_name`` in ``storage`` (a database URL; None: in memory). Errors show the masked URL."""
    storage_text = storage if isinstance(storage, str) else None
    url = storage = _driver_fallback(storage)
    shown = mask_url(url)
    try:
        for attempt in range(6):  # workers starting together race to create the schema / the study: retry
            try:
                if url and url.startswith("sqlite:"):  # wait for a concurrent writer instead of failing at once
                    storage = optuna.storages.RDBStorage(url, engine_kwargs={"connect_args": {"timeout": 60}})
                study = optuna.create_study(storage=storage, study_name=study_name, directions=list(directions),
                                            sampler=sampler, load_if_exists=True)
                break
            except Exception as e:  # noqa: BLE001
                if attempt == 5 or not _is_race(e):
                    raise
                time.sleep(0.2 + 0.3 * attempt)
                storage = url
    except ImportError as e:
        raise StudyError(f"cannot open storage {shown}: missing driver ({e.name or e}); "
                         "pip install 'spectune[postgres]' (psycopg2-binary) for PostgreSQL") from None
    except Exception as e:  # noqa: BLE001 - SQLAlchemy / Optuna errors, one line, never the password
        from spectune.masking import mask_text

        msg = mask_text(str(e).splitlines()[0] if str(e) else type(e).__name__, (url, storage_text))
        raise StudyError(f"cannot open study '{study_name}' in storage {shown}: {msg}") from None
    if [d.name.lower() for d in study.directions] != [d.lower() for d in directions]:
        raise StudyError(f"study '{study_name}' in {shown} was created with other objectives "
                         f"({', '.join(d.name.lower() for d in study.directions)}); use another --study-name")
    return study


def _driver_fallback(url: str | None) -> str | None:
    """``postgresql://`` means psycopg (v3) to SQLAlchemy 2.1; use psycopg2 when only that one is installed."""
    if not url or not url.startswith("postgresql://"):
        return url
    import importlib.util

    if importlib.util.find_spec("psycopg") is None and importlib.util.find_spec("psycopg2") is not None:
        return "postgresql+psycopg2://" + url[len("postgresql://"):]
    return url


def _is_race(e: BaseException) -> bool:
    text = f"{type(e).__name__} {e}".lower()
    return any(w in text for w in ("integrityerror", "unique", "duplicate", "already exists", "locked",
                                   "deadlock"))


def _constraints(trial: optuna.trial.FrozenTrial) -> Sequence[float]:
    return trial.user_attrs.get("constraints", [1.0])


def sqlite_url(path: str) -> str:
    """``sqlite:///`` URL of a study file (absolute path)."""
    from pathlib import Path

    p = Path(path).expanduser().resolve()
    p.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{p}"


@dataclass
class Tuner:
    """The objective over a cost model and a search space (see the module docstring)."""

    cost: CostModel
    space: SearchSpace
    pareto: bool = False
    max_latency: float | None = None  # seconds per token of one request
    seed: int = 0

    @property
    def directions(self) -> list[str]:
        return ["maximize", "minimize"] if self.pareto else ["maximize"]

    def sampler(self) -> optuna.samplers.BaseSampler:
        # memory feasibility is enforced by the space (batch sizes the full model set fits); the sampler only
        # needs constraints for a latency bound (and they cost it O(trials) per suggestion)
        kw: dict[str, Any] = ({} if _HAS_SET_CONSTRAINT else {"constraints_func": _constraints}) \
            if self.max_latency is not None else {}
        if self.pareto:
            return optuna.samplers.NSGAIISampler(seed=self.seed, **kw)
        return optuna.samplers.TPESampler(seed=self.seed, n_startup_trials=20, **kw)

    def evaluate(self, cfg: DecodeConfig) -> tuple[Prediction, list[float]]:
        pred = self.cost.predict(cfg)
        cons = [0.0 if self.cost.feasible(cfg.models, cfg.batch_size) else 1.0]
        if self.max_latency is not None:
            cons.append(pred.latency_per_token - self.max_latency)
        return pred, cons

    CONSTRAINT_NAMES = ("memory", "max_latency")

    def __call__(self, trial: optuna.Trial) -> Any:
        cfg = self.space(trial)
        pred, cons = self.evaluate(cfg)
        trial.set_user_attr("config", cfg.to_dict())
        trial.set_user_attr("prediction", _pred_attrs(pred))
        trial.set_user_attr("constraints", cons)
        if _HAS_SET_CONSTRAINT and self.max_latency is not None:
            for name, v in zip(self.CONSTRAINT_NAMES, cons):
                trial.set_constraint(name, v)
        return (pred.goodput, pred.latency_per_token) if self.pareto else pred.goodput

    def optimize(self, study: optuna.Study, n_trials: int, timeout: float | None = None,
                 sync_every: int = 100) -> list[int]:
        """Run ``n_trials`` trials into ``study``; returns the study's numbers of the trials this call added.

        The sampler runs on an in-memory mirror of the study (one storage round trip per trial would cost more
        than the whole prediction); every ``sync_every`` trials the new ones are written to the shared storage
        in one transaction (trial numbers are assigned there, under the study row lock) and trials other
        workers wrote meanwhile are pulled into the mirror, so every worker samples from all of them.
        """
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        local = optuna.create_study(directions=self.directions, sampler=self.sampler())
        mirrored: set[int] = set()
        added: list[int] = []

        def pull() -> None:
            for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
                if t.number not in mirrored:
                    mirrored.add(t.number)
                    local.add_trial(t)

        pull()
        t_end = None if timeout is None else time.monotonic() + timeout
        done = 0
        while done < n_trials and (t_end is None or time.monotonic() < t_end):
            batch = []
            for _ in range(min(sync_every, n_trials - done)):
                trial = local.ask()
                batch.append(local.tell(trial, self(trial)))
                done += 1
                if t_end is not None and time.monotonic() >= t_end:
                    break
            numbers = push_trials(study, batch)
            mirrored.update(numbers)
            added += numbers
            pull()
        return added


_HAS_SET_CONSTRAINT = hasattr(optuna.trial.Trial, "set_constraint")


def push_trials(study: optuna.Study, trials: Sequence[optuna.trial.FrozenTrial]) -> list[int]:
    """Write finished trials into ``study``'s storage; returns their trial numbers there.

    RDB storages (SQLite, PostgreSQL, MySQL): the whole batch in one transaction with the study row locked, as
    Optuna locks it to number a new trial, so concurrent workers never get the same number (``_rdb_bulk_insert``,
    SQLAlchemy Core over Optuna's own tables; if Optuna's schema ever differs, Optuna's per-trial path is used).
    Other storages: ``Study.add_trials``.
    """
    if not trials:
        return []
    backend = getattr(study._storage, "_backend", study._storage)
    if isinstance(backend, optuna.storages.RDBStorage):
        try:
            return _rdb_bulk_insert(backend, study._study_id, trials)
        except (ImportError, AttributeError, TypeError) as e:  # pragma: no cover - another Optuna schema
            import warnings

            warnings.warn(f"bulk trial insert unavailable ({e}); using Optuna's per-trial path", stacklevel=2)
    before = {t.number for t in study.get_trials(deepcopy=False)}
    study.add_trials(trials)
    return sorted({t.number for t in study.get_trials(deepcopy=False)} - before)


def _rdb_bulk_insert(backend: Any, study_id: int, trials: Sequence[optuna.trial.FrozenTrial]) -> list[int]:
    import json as _json

    import sqlalchemy as sa
    from optuna.distributions import distribution_to_json
    from optuna.storages._rdb import models as M

    T, P, V = M.TrialModel.__table__, M.TrialParamModel.__table__, M.TrialValueModel.__table__
    UA, SA = M.TrialUserAttributeModel.__table__, M.TrialSystemAttributeModel.__table__

    def col(dt: Any, attr: str) -> Any:  # the stored form of a datetime, as Optuna's model would store it
        tm = M.TrialModel()
        setattr(tm, attr, dt)
        return getattr(tm, f"_{attr}_utc", getattr(tm, attr))

    numbers: list[int] = []
    with backend.engine.begin() as conn:
        # lock the study row with a no-op write: a row lock on PostgreSQL / MySQL (conflicts with Optuna's own
        # SELECT ... FOR UPDATE when it numbers a trial), the database write lock on SQLite (where FOR UPDATE
        # is ignored and a read would not stop a concurrent writer from taking the same numbers)
        S = M.StudyModel.__table__
        conn.execute(S.update().where(S.c.study_id == study_id).values(study_name=S.c.study_name))
        n0 = conn.execute(sa.select(sa.func.count()).select_from(T).where(T.c.study_id == study_id)).scalar_one()
        params, values, uattrs, sattrs = [], [], [], []
        for i, t in enumerate(trials):
            number = int(n0) + i
            tid = conn.execute(T.insert().values(
                number=number, study_id=study_id, state=t.state,
                datetime_start=col(t.datetime_start, "datetime_start"),
                datetime_complete=col(t.datetime_complete, "datetime_complete"))).inserted_primary_key[0]
            numbers.append(number)
            for name, v in t.params.items():
                d = t.distributions[name]
                params.append(dict(trial_id=tid, param_name=name, param_value=d.to_internal_repr(v),
                                   distribution_json=distribution_to_json(d)))
            for k, v in enumerate(t.values or []):
                stored, vt = M.TrialValueModel.value_to_stored_repr(v)
                values.append(dict(trial_id=tid, objective=k, value=stored, value_type=vt))
            uattrs += [dict(trial_id=tid, key=k, value_json=_json.dumps(v)) for k, v in t.user_attrs.items()]
            sattrs += [dict(trial_id=tid, key=k, value_json=_json.dumps(v)) for k, v in t.system_attrs.items()]
        for table, rows in ((P, params), (V, values), (UA, uattrs), (SA, sattrs)):
            if rows:
                conn.execute(table.insert(), rows)
    return numbers


def _pred_attrs(p: Prediction) -> dict[str, Any]:
    d = p.to_dict()
    out = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items() if k != "extra"}
    out.update({k: v for k, v in p.extra.items()})
    return out


def feasible_trials(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    ok = [t for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
          if "config" in t.user_attrs and all(c <= 0 for c in _constraints(t))]
    return ok


def top_trials(study: optuna.Study, n: int) -> list[optuna.trial.FrozenTrial]:
    """The n best feasible trials by predicted goodput, one per distinct configuration."""
    seen, out = set(), []
    for t in sorted(feasible_trials(study), key=lambda t: -t.values[0]):
        key = _cfg_key(t.user_attrs["config"])
        if key in seen:
            continue
        seen.add(key)
        out.append(t)
        if len(out) >= n:
            break
    return out


def pareto_trials(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """Feasible trials not dominated in (goodput up, latency down), sorted by goodput."""
    ts = feasible_trials(study)
    pts = [(t.user_attrs["prediction"]["goodput"], t.user_attrs["prediction"]["latency_per_token"], t) for t in ts]
    front = [p for p in pts if not any(q[0] >= p[0] and q[1] <= p[1] and (q[0] > p[0] or q[1] < p[1]) for q in pts)]
    seen, out = set(), []
    for g, l, t in sorted(front, key=lambda p: -p[0]):
        key = _cfg_key(t.user_attrs["config"])
        if key not in seen:
            seen.add(key)
            out.append(t)
    return out


def _cfg_key(d: dict[str, Any]) -> tuple:
    return (tuple(d["models"]), d["method"], d["combine"], tuple(d["gamma"]), d["batch_size"])


# ---------------------------------------------------------------------------------------------- schedule


@dataclass
class ScheduleEntry:
    batch_size: int
    config: DecodeConfig
    prediction: Prediction
    standard: Prediction

    def to_dict(self) -> dict[str, Any]:
        c = self.config
        return {"batch_size": self.batch_size, "method": c.method, "models": list(c.models), "combine": c.combine,
                "gamma": list(c.gamma), "speculate": c.method != "standard",
                "predicted_goodput": self.prediction.goodput,
                "predicted_latency_per_token": self.prediction.latency_per_token,
                "predicted_speedup_vs_standard": self.prediction.goodput / self.standard.goodput}


def schedule(tuner: Tuner, study: optuna.Study, candidates: int = 64) -> list[ScheduleEntry]:
    """For every calibrated batch size, the best of: ``standard`` and the ``candidates`` best distinct
    (method, models, gamma) of the study, each re-predicted at that batch size (memory constraint applied)."""
    from dataclasses import replace

    seen, shapes = set(), []
    for t in sorted(feasible_trials(study), key=lambda t: -t.values[0]):
        d = dict(t.user_attrs["config"])
        key = (tuple(d["models"]), d["method"], d["combine"], tuple(d["gamma"]))
        if key not in seen and d["method"] != "standard":
            seen.add(key)
            shapes.append(DecodeConfig.from_dict(d))
        if len(shapes) >= candidates:
            break
    out = []
    sp = tuner.space
    for b in sp.batch_sizes:
        std_cfg = sp.config("standard", sp.models[0], None, b)
        if not tuner.cost.feasible(std_cfg.models, b):
            continue
        std = tuner.cost.predict(std_cfg)
        best_cfg, best = std_cfg, std
        for cfg in shapes:
            c = replace(cfg, batch_size=b)
            if not tuner.cost.feasible(c.models, b):
                continue
            p, cons = tuner.evaluate(c)
            if all(x <= 0 for x in cons) and p.goodput > best.goodput:
                best_cfg, best = c, p
        out.append(ScheduleEntry(b, best_cfg, best, std))
    return out


# ---------------------------------------------------------------------------------------------- validation


@dataclass
class Measurement:
    config: DecodeConfig
    goodput: float  # output tokens / s of the decoding phase over the held-out prompts (prefill excluded)
    latency_per_token: float  # decoding seconds per output token of one request (batch time / tokens per row)
    tokens: int
    seconds: float
    mean_accepted_length: float
    trial: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def measure(config: DecodeConfig, loaded: dict[str, Any], prompts: Sequence[str], repeats: int = 1,
            ignore_eos: bool = True, profile: Any = None) -> Measurement:
    """Decode ``prompts`` with ``config`` on the runtime decoder (``batch_size`` at a time); median of repeats.

    Times the decoding phase: the forwards that prefill the prompts are left out, as the cost model prices
    decoding only (prefill costs every method the same, and depends on the prompt, not on the configuration)."""
    from spectune.api import build_decoder, encode_prompt

    models = [loaded[m] for m in config.models]
    dec = build_decoder(models, method=config.method, combine=config.combine, gamma=config.gamma,
                        temperature=config.temperature, top_k=config.top_k, top_p=config.top_p,
                        ignore_eos=ignore_eos, proposer=config.proposer, policy=config.policy,
                        **({"profile": profile} if config.method == "sv" else {}))
    tok = models[-1].tokenizer
    ids = [encode_prompt(tok, p) for p in prompts]  # as calibration encoded its prompts
    runs = []
    for _ in range(max(1, repeats)):
        tokens, seconds, rows_time, acc_n, acc_sum = 0, 0.0, 0.0, 0, 0.0
        for first in range(0, len(ids), config.batch_size):
            chunk = ids[first : first + config.batch_size]
            outs, per_seq, st = dec.generate_batch(chunk, config.max_new_tokens,
                                                   [config.seed + first + i for i in range(len(chunk))])
            dt = st.decode_seconds
            n = sum(len(o) for o in outs)
            tokens += n
            seconds += dt
            rows_time += dt * len(chunk)
            acc_n += st.blocks
            acc_sum += st.mean_accepted_length * st.blocks
        runs.append((seconds, tokens, rows_time, acc_sum / acc_n if acc_n else 0.0))
    runs.sort()
    seconds, tokens, rows_time, mal = runs[len(runs) // 2]
    return Measurement(config, tokens / seconds if seconds else 0.0, rows_time / tokens if tokens else float("inf"),
                       tokens, seconds, mal)


def validate(study: optuna.Study | None, trials: Sequence[optuna.trial.FrozenTrial], baseline: DecodeConfig,
             model_specs: Sequence[str], prompts: Sequence[str], repeats: int = 1,
             progress: Any = None, profile: Any = None, dtype: str = "auto"
             ) -> tuple[list[Measurement], Measurement]:
    """Measure each trial's config and the ``standard`` baseline (models in ``dtype``); record them on the
    study (if given)."""
    from spectune.models import load_models

    if not prompts:
        raise ConfigError("validation needs held-out prompts; the workload has none")
    loaded = {m.name: m for m in load_models(list(model_specs), dtype=dtype)}
    names = dict(zip(model_specs, loaded))
    resolve = lambda cfg: DecodeConfig.from_dict({**cfg.to_dict(), "models": [names.get(m, m) for m in cfg.models]})  # noqa: E731
    base = measure(resolve(baseline), loaded, prompts, repeats)
    base.config = baseline
    out = []
    for t in trials:
        cfg = DecodeConfig.from_dict(t.user_attrs["config"])
        if progress:
            progress(cfg)
        m = measure(resolve(cfg), loaded, prompts, repeats, profile=profile)
        m.config, m.trial = cfg, t.number
        out.append(m)
        if study is not None:
            study.set_user_attr(f"measured:{t.number}", {"goodput": m.goodput, "latency_per_token": m.latency_per_token,
                                                        "mean_accepted_length": m.mean_accepted_length,
                                                        "prompts": len(prompts)})
    if study is not None:
        study.set_user_attr("measured:standard", {"goodput": base.goodput, "latency_per_token": base.latency_per_token,
                                                  "config": baseline.to_dict(), "prompts": len(prompts)})
    return out, base


def measured_of(study: optuna.Study, number: int) -> dict[str, Any] | None:
    return study.user_attrs.get(f"measured:{number}")
