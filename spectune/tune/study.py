"""Study storage: one Optuna study shared by workers on several machines.

* ``open_study(storage, study_name)``: ``load_if_exists`` so several workers share one study (RDB storages hand out
  trial numbers atomically); SQLite files get a busy timeout; the URL is printed and put in errors with its password
  masked (``mask_url``).
* Trials reach the storage through Optuna's public API only: ``push_trials`` (``Study.add_trials``, one transaction a
  trial), each carrying the ``spectune_worker`` user attribute, a token naming the run that added it;
  ``WriteBehind`` does the same writes from a second process while the search goes on.
"""
from __future__ import annotations

import copy
import importlib.util
import multiprocessing
import os
import sqlite3
import time
import uuid
from pathlib import Path
from typing import Any, Sequence

import optuna

from spectune.errors import SpectuneError
from spectune.masking import mask_url as _mask


class StudyError(SpectuneError):
    """A storage URL that cannot be opened, or a study that does not fit this search."""


def mask_url(url: str | None) -> str:
    """The storage URL with every password replaced by ``***`` (safe to print or log): ``spectune.masking``."""
    return _mask(url)


def open_study(storage: str | None, study_name: str, directions: Sequence[str], sampler: Any = None) -> optuna.Study:
    """Create or load ``study_name`` in ``storage`` (a database URL; None: in memory). Errors show the masked URL.
    Optuna's own INFO lines are silenced first: spectune says which study it opened, and a command that then fails
    prints one error line only (the first recommend of a process printed "A new study created" before it)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
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

    if importlib.util.find_spec("psycopg") is None and importlib.util.find_spec("psycopg2") is not None:
        return "postgresql+psycopg2://" + url[len("postgresql://"):]
    return url


def _is_race(e: BaseException) -> bool:
    text = f"{type(e).__name__} {e}".lower()
    return any(w in text for w in ("integrityerror", "unique", "duplicate", "already exists", "locked",
                                   "deadlock"))



def sqlite_url(path: str) -> str:
    """``sqlite:///`` URL of a study file (absolute path)."""
    p = Path(path).expanduser().resolve()
    p.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{p}"


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
        ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: no forked locks or threads
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_write_loop, args=(url, study_name, list(directions), child), daemon=True)
        self._proc.start()
        child.close()
        self._waiting = 0

    @staticmethod
    def helps(url: str | None) -> bool:
        """A database another process can open (not in memory), and a second CPU to write it on."""
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
