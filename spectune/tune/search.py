"""Studies: objectives and constraints over the cost model, shared storage, validation runs, schedules.

* ``Tuner(profile, space, ...)``: the Optuna objective. One objective (maximise predicted goodput) or two
  (goodput up, per-token latency down: a Pareto front with NSGA-II). Constraints (Optuna ``constraints_func``,
  feasible when <= 0): the models fit the device memory the profile recorded and no model ran out of memory at
  that batch size during calibration; optionally latency per token <= ``max_latency``.
* Every trial stores its config (``config`` user attribute, spectune-native JSON) and its prediction, so a
  study in SQLite / PostgreSQL / MySQL is self-describing and opens in optuna-dashboard.
* ``open_study(storage, study_name)``: ``load_if_exists`` so several workers on several machines share one study
  (RDB storages hand out trial numbers atomically). Trials reach the storage through Optuna's public API only
  (``Study.add_trials``, in batches: ``Tuner.optimize``); each carries the ``spectune_worker`` user attribute,
  a token naming the run that added it.
* ``validate(...)``: runs configurations on the bundled runtime decoder over held-out prompts and records the
  measured goodput on the study (study user attribute ``measured:<trial number>``; Optuna does not allow
  changing finished trials).
* ``schedule(...)``: the best (method, proposer, gamma) per calibrated batch size, "standard" where nothing beats it.
"""
from __future__ import annotations

import copy
import math
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Sequence

import optuna

from spectune.config import DecodeConfig
from spectune.errors import ConfigError, SpectuneError
from spectune.tune.cost import CostModel, Prediction
from spectune.tune.space import SearchSpace

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
                if url and url.startswith("sqlite:"):
                    storage = optuna.storages.RDBStorage(url, engine_kwargs=_sqlite_engine(url))
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


def _sqlite_engine(url: str) -> dict[str, Any]:
    """SQLAlchemy engine arguments for a SQLite study: wait up to 60 s for a concurrent writer instead of failing
    at once; for a study file also write-ahead logging with ``synchronous=NORMAL``, so each trial's commit
    appends to the log instead of syncing the database file (a power cut may lose the last trials, never
    corrupt the study; Optuna writes one transaction per trial). Connection settings only: Optuna's tables
    are written by Optuna."""
    import sqlite3

    from sqlalchemy.engine import make_url

    u = make_url(url)
    if _in_memory(url) or u.query:
        return {"connect_args": {"timeout": 60}}

    def connect() -> sqlite3.Connection:
        conn = sqlite3.connect(u.database, timeout=60, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    return {"creator": connect}


def _in_memory(url: str) -> bool:
    """A SQLite database that lives in its process's memory (no file another connection or process can open)."""
    from sqlalchemy.engine import make_url

    u = make_url(url)
    return u.get_backend_name() == "sqlite" and (not u.database or u.database == ":memory:"
                                                   or u.query.get("mode") == "memory")


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
    return trial.user_attrs.get("constraints", ())  # absent: feasible (see Tuner.__call__)


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
        if self.max_latency is not None or any(c > 0 for c in cons):  # a row per trial only where it says
            trial.set_user_attr("constraints", cons)  # something (the space offers only batch sizes that fit)
            if _HAS_SET_CONSTRAINT:
                for name, v in zip(self.CONSTRAINT_NAMES, cons):
                    trial.set_constraint(name, v)
        return (pred.goodput, pred.latency_per_token) if self.pareto else pred.goodput

    def optimize(self, study: optuna.Study, n_trials: int, timeout: float | None = None,
                 sync_every: int = 100, storage: str | None = None) -> list[int]:
        """Run ``n_trials`` trials into ``study``; returns the study's numbers of the trials this call added.

        The sampler runs on an in-memory mirror of the study (a storage round trip per suggestion would cost more
        than the whole prediction); every ``sync_every`` trials the new ones go to the shared storage
        (``push_trials``: Optuna's public ``Study.add_trials``) and the trials other workers wrote meanwhile are
        pulled into the mirror, so every worker samples from all of them. ``storage``: the study's URL; where it
        names a database other processes can open and a second CPU is free, the writes run behind the search
        in a second process (``WriteBehind``).
        """
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        local = optuna.create_study(directions=self.directions, sampler=self.sampler())
        token = uuid.uuid4().hex  # tags this call's trials in the shared study
        writer = WriteBehind(storage, study.study_name, self.directions) if WriteBehind.helps(storage) else None
        seen: set[int] = set()
        added: list[int] = []

        def pull() -> None:  # every trial not seen yet: another worker's goes into the mirror
            for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
                if t.number not in seen:
                    seen.add(t.number)
                    if t.user_attrs.get(WORKER_ATTR) != token:
                        local.add_trial(t)

        try:
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
                added += writer.push(batch, token) if writer else push_trials(study, batch, token)
                pull()
        finally:
            added += writer.close() if writer else []
        return sorted(added)


_HAS_SET_CONSTRAINT = hasattr(optuna.trial.Trial, "set_constraint")
WORKER_ATTR = "spectune_worker"  # user attribute: a token naming the call that added the trial


def _tagged(trial: optuna.trial.FrozenTrial, token: str) -> optuna.trial.FrozenTrial:
    """A copy of ``trial`` whose user attributes carry ``token`` (how a worker finds its trials' numbers), without
    TPE's per-trial scratch (``tpe:*`` system attributes: the local mirror's sampler state, a row each)."""
    out = copy.copy(trial)
    out.user_attrs = {**trial.user_attrs, WORKER_ATTR: token}
    out.system_attrs = {k: v for k, v in trial.system_attrs.items() if not k.startswith("tpe:")}
    return out


def push_trials(study: optuna.Study, trials: Sequence[optuna.trial.FrozenTrial], token: str | None = None
                ) -> list[int]:
    """Write finished trials into ``study``'s storage; returns their trial numbers there, in order.

    Through Optuna's public API only: ``Study.add_trials``, where an RDB storage (SQLite, PostgreSQL, MySQL)
    writes each trial in one transaction that numbers it under the study row lock and retries on deadlocks,
    so concurrent workers never lose or duplicate a trial. Each trial carries ``token`` (default: a fresh one)
    in its ``WORKER_ATTR`` user attribute; the numbers are those of the stored trials carrying it that were not
    there before.
    """
    if not trials:
        return []
    token = token or uuid.uuid4().hex
    mine = lambda: {t.number for t in study.get_trials(deepcopy=False) if t.user_attrs.get(WORKER_ATTR) == token}  # noqa: E731
    before = mine()
    study.add_trials([_tagged(t, token) for t in trials])
    return sorted(mine() - before)


class WriteBehind:
    """Writes batches of finished trials into an RDB study from a second process while the search goes on.

    Optuna spends ~7 ms of SQLAlchemy work on each trial it adds to an RDB study (one transaction: the trial,
    its params, values and attributes), about what the search itself spends on a trial; a second process does
    the same ``push_trials`` (the same transactions, the same numbering under the study row lock) on a second
    CPU. ``push`` hands a batch over and returns the numbers of batches already written; ``close`` waits for
    the rest. A write that fails raises ``StudyError`` (one line, password masked) at the next push or close.
    """

    def __init__(self, url: str, study_name: str, directions: Sequence[str]):
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: no forked locks or threads
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_write_loop, args=(url, study_name, list(directions), child), daemon=True)
        self._proc.start()
        child.close()
        self._waiting = 0

    @staticmethod
    def helps(url: str | None) -> bool:
        """A database another process can open (not in memory), and a second CPU to write it on."""
        import os

        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        return bool(url) and cpus >= 2 and not _in_memory(url)

    def push(self, trials: Sequence[optuna.trial.FrozenTrial], token: str) -> list[int]:
        self._conn.send((list(trials), token))
        self._waiting += 1
        return self._collect(block=False)

    def close(self) -> list[int]:
        try:
            return self._collect(block=True)
        finally:
            self._conn.send(None)
            self._proc.join(timeout=30)
            self._conn.close()

    def _collect(self, block: bool) -> list[int]:
        numbers: list[int] = []
        while self._waiting and (block or self._conn.poll()):
            try:
                ok, got = self._conn.recv()
            except EOFError:
                raise StudyError(f"the study writer process ended (exit code {self._proc.exitcode})") from None
            self._waiting -= 1
            if not ok:
                raise StudyError(got)
            numbers += got
        return numbers


def _write_loop(url: str, study_name: str, directions: list[str], conn: Any) -> None:
    """WriteBehind's process: open the study, then write each batch received until None."""
    try:
        study, error = open_study(url, study_name, directions), None
    except StudyError as e:
        study, error = None, str(e)
    while (item := conn.recv()) is not None:
        if study is None:
            conn.send((False, error))
            continue
        try:
            conn.send((True, push_trials(study, *item)))
        except Exception as e:  # noqa: BLE001 - one line for the parent, never the password
            from spectune.masking import mask_text

            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            conn.send((False, f"cannot write trials to study '{study_name}' in {mask_url(url)}: "
                              f"{mask_text(first, (url,))}"))


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
    for _, _, t in sorted(front, key=lambda p: -p[0]):
        key = _cfg_key(t.user_attrs["config"])
        if key not in seen:
            seen.add(key)
            out.append(t)
    return out


def _cfg_key(d: dict[str, Any]) -> tuple:
    """What makes two trials' configurations distinct (a config dict omits the default proposer and policy)."""
    return (tuple(d["models"]), d["method"], d["combine"], tuple(d["gamma"]), d["batch_size"],
            d.get("proposer", "model"), d.get("policy", "fixed"))


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
                "gamma": list(c.gamma), "proposer": c.proposer, "policy": c.policy, "speculate": c.method != "standard",
                "predicted_goodput": self.prediction.goodput,
                "predicted_latency_per_token": self.prediction.latency_per_token,
                "predicted_speedup_vs_standard": self.prediction.goodput / self.standard.goodput}


def schedule(tuner: Tuner, study: optuna.Study, candidates: int = 64) -> list[ScheduleEntry]:
    """For every calibrated batch size, the best of: ``standard`` and the ``candidates`` best distinct
    (method, models, gamma, proposer, policy) of the study, each re-predicted at that batch size (memory
    constraint applied): the schedule may switch method, proposer or policy with the batch size."""
    from dataclasses import replace

    seen, shapes = set(), []
    for t in sorted(feasible_trials(study), key=lambda t: -t.values[0]):
        d = dict(t.user_attrs["config"])
        key = (tuple(d["models"]), d["method"], d["combine"], tuple(d["gamma"]), d.get("proposer"), d.get("policy"))
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
            ignore_eos: bool = True, profile: Any = None, runtime: str = "auto", device: str = "cpu",
            warm: bool = False) -> Measurement:
    """Decode ``prompts`` with ``config`` on the runtime decoder (``batch_size`` at a time, models and caches on
    ``device``); median of repeats. ``warm``: one untimed pass first (the compiled runtime's compile and capture,
    a GPU's first calls), so no timing holds them.

    Times the decoding phase: the forwards that prefill the prompts are left out, as the cost model prices
    decoding only (prefill costs every method the same, and depends on the prompt, not on the configuration)."""
    from spectune.decoder import build_decoder, encode_prompt

    models = [loaded[m] for m in config.models]
    dec = build_decoder(models, method=config.method, combine=config.combine, gamma=config.gamma,
                        temperature=config.temperature, top_k=config.top_k, top_p=config.top_p,
                        ignore_eos=ignore_eos, proposer=config.proposer, policy=config.policy, runtime=runtime,
                        device=device, **({"profile": profile} if config.method == "sv" else {}))
    tok = models[-1].tokenizer
    ids = [encode_prompt(tok, p) for p in prompts]  # as calibration encoded its prompts
    if warm:
        _decode_pass(dec, ids, config)
    runs = sorted(_decode_pass(dec, ids, config) for _ in range(max(1, repeats)))
    seconds, tokens, rows_time, mal = runs[len(runs) // 2]
    return Measurement(config, tokens / seconds if seconds else 0.0, rows_time / tokens if tokens else float("inf"),
                       tokens, seconds, mal)


def _decode_pass(dec: Any, ids: list[list[int]], config: DecodeConfig) -> tuple[float, int, float, float]:
    """(decode seconds, output tokens, seconds x rows, mean accepted length) of one pass over ``ids``."""
    tokens, seconds, rows_time, acc_n, acc_sum = 0, 0.0, 0.0, 0, 0.0
    for outs, _, st in dec.batches(ids, config.max_new_tokens, config.batch_size, config.seed):
        dt = st.decode_seconds
        tokens += sum(len(o) for o in outs)
        seconds += dt
        rows_time += dt * len(outs)
        acc_n += st.blocks
        acc_sum += st.mean_accepted_length * st.blocks
    return seconds, tokens, rows_time, acc_sum / acc_n if acc_n else 0.0


def validate(study: optuna.Study | None, trials: Sequence[optuna.trial.FrozenTrial], baseline: DecodeConfig,
             model_specs: Sequence[str], prompts: Sequence[str], repeats: int = 1,
             progress: Any = None, profile: Any = None, dtype: str = "auto", runtime: str = "auto",
             device: str = "cpu") -> tuple[list[Measurement], Measurement]:
    """Measure each trial's config and the ``standard`` baseline (models on ``device`` in ``dtype``, forwards on
    ``runtime``); record them on the study (if given). With the compiled runtime or on a GPU every config is
    decoded once untimed first: else the first measured (the baseline) holds the compile and first-call costs."""
    from spectune.decoding.runtime import resolve_runtime
    from spectune.models import load_models

    if not prompts:
        raise ConfigError("validation needs held-out prompts; the workload has none")
    warm = resolve_runtime(runtime, device) == "compiled" or not str(device).startswith("cpu")
    loaded = {m.name: m for m in load_models(list(model_specs), dtype=dtype, device=device)}
    names = dict(zip(model_specs, loaded))
    resolve = lambda cfg: DecodeConfig.from_dict({**cfg.to_dict(), "models": [names.get(m, m) for m in cfg.models]})  # noqa: E731
    base = measure(resolve(baseline), loaded, prompts, repeats, runtime=runtime, device=device, warm=warm)
    base.config = baseline
    out = []
    for t in trials:
        cfg = DecodeConfig.from_dict(t.user_attrs["config"])
        if progress:
            progress(cfg)
        m = measure(resolve(cfg), loaded, prompts, repeats, profile=profile, runtime=runtime, device=device,
                    warm=warm)
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
