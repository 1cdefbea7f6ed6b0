"""The engine interface: one running (started or attached) serving engine, driven as a user drives it.

Glossary
    launch      what starts an engine: the model, the speculative settings exactly as exported, the user's own
                engine arguments (passed through), the executable and where its log goes.
    counters    the engine's own cumulative numbers read from ``/metrics``: engine steps, generated tokens, drafts,
                draft tokens, accepted tokens and accepted tokens per draft position. A measurement is the
                difference of two reads, so an attached engine's earlier traffic never counts.
    drive       the prompts sent at a concurrency (the batch size being measured): each of ``concurrency`` clients
                sends its next request as soon as its previous one answered, as a serving load does.

An engine is one module (``vllm.py``, ...) with one ``Engine`` subclass: how to start it (``argv``), where its
health / completion / metrics endpoints are, and how its metric names map to ``Counters``.
"""
from __future__ import annotations

import shlex
import threading
import time
from collections import Counter as Tally
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Sequence

from spectune import checks
from spectune.engines import prometheus
from spectune.engines.http import Unreachable, get_json, get_text, post_json
from spectune.engines.process import Server, find_executable, free_port, port_free
from spectune.errors import ConfigError, EngineError
from spectune.masking import mask_url
from spectune.models import model_path


@dataclass(frozen=True)
class Launch:
    """How to start an engine: ``model`` served with ``speculative`` (the exported artifact, None = the target
    alone) and the user's ``args`` passed through verbatim."""

    model: str
    speculative: Any = None  # the engine's own speculative settings as exported (vLLM: speculative_config dict)
    args: tuple[str, ...] = ()  # the user's engine arguments (``--engine-args``, shell-split)
    executable: str | None = None  # the engine's executable; None: the engine's environment variable, then PATH
    host: str = "127.0.0.1"
    port: int | None = None  # None: a free port
    log_dir: Path = Path("spectune-engine-logs")
    ready_timeout_s: float = 900.0
    seed: int = 0
    slots: int = 8  # the most requests a measurement sends at once: an engine with fixed slots gets at least these
    together: int = 1  # starts alive at once (EngineSettings.together): they share the memory a start may take

    @staticmethod
    def split_args(text: str | Sequence[str] | None) -> tuple[str, ...]:
        if not text:
            return ()
        try:
            return tuple(shlex.split(text) if isinstance(text, str) else text)
        except ValueError as e:
            raise ConfigError(f"--engine-args {text!r}: {e} (quote as a shell would)") from None


def given(args: Sequence[str], *flags: str) -> bool:
    """Whether the user's engine ``args`` set any of ``flags`` (``--flag value`` or ``--flag=value``)."""
    return any(a == f or a.startswith(f + "=") for a in args for f in flags)


def flag_value(args: Sequence[str], *flags: str) -> str | None:
    """The value the last of ``flags`` in ``args`` sets (a later flag wins, as in the engines' parsers)."""
    out = None
    for i, a in enumerate(args):
        for f in flags:
            if a == f and i + 1 < len(args):
                out = args[i + 1]
            elif a.startswith(f + "="):
                out = a[len(f) + 1:]
    return out


@dataclass(frozen=True)
class Counters:
    """The engine's cumulative counters (see the glossary); ``-`` gives the difference of two reads."""

    steps: float = 0.0  # engine iterations (scheduler steps)
    generated: float = 0.0  # generated tokens
    drafts: float = 0.0  # draft proposals (one per request per speculative step)
    draft_tokens: float = 0.0
    accepted: float = 0.0
    accepted_per_pos: tuple[float, ...] = ()  # accepted tokens at draft position 1, 2, ...
    requests: float = 0.0  # requests whose first token came (the time-to-first-token histogram's count)
    first_token_s: float = 0.0  # their time to first token, summed (prefill and queueing)
    intervals: float = 0.0  # gaps between a request's successive outputs: one per request per engine step
    interval_s: float = 0.0  # their length, summed

    @property
    def step_s(self) -> float:
        """Mean engine step seen by a request (draft and verification included): the interval between its
        outputs (NaN without any)."""
        return self.interval_s / self.intervals if self.intervals else float("nan")

    @property
    def tokens_per_row_step(self) -> float:
        """Tokens each request feeds the target per step: its one token plus the step's draft tokens."""
        return 1.0 + self.draft_tokens / self.intervals if self.intervals else float("nan")

    def _combine(self, other: "Counters", sign: int) -> "Counters":
        vals = {f.name: getattr(self, f.name) + sign * getattr(other, f.name) for f in fields(self)
                if f.name != "accepted_per_pos"}
        n = max(len(self.accepted_per_pos), len(other.accepted_per_pos))
        a = self.accepted_per_pos + (0.0,) * (n - len(self.accepted_per_pos))
        b = other.accepted_per_pos + (0.0,) * (n - len(other.accepted_per_pos))
        return Counters(**vals, accepted_per_pos=tuple(x + sign * y for x, y in zip(a, b)))

    def __sub__(self, other: "Counters") -> "Counters":
        return self._combine(other, -1)

    def __add__(self, other: "Counters") -> "Counters":
        return self._combine(other, 1)

    @property
    def tokens_per_draft(self) -> float:
        """Draft tokens per draft: the K the engine ran (NaN without drafts)."""
        return self.draft_tokens / self.drafts if self.drafts else float("nan")

    def acceptance_per_pos(self) -> list[float]:
        """P(the draft token at position i is accepted), per drafts that reached position i (a lookup may
        propose fewer than K, so the denominator is the drafts, an upper bound on those that reached i)."""
        return [a / self.drafts for a in self.accepted_per_pos] if self.drafts else []


@dataclass
class Completion:
    tokens: int  # completion tokens the engine reports
    seconds: float  # request latency seen by the client
    text: str = ""
    drafted: tuple[int, ...] | None = None  # draft tokens of each speculative step, where the engine reports them
    first_token_s: float | None = None  # its time to first token, where the response says (llama.cpp's timings)


@dataclass
class Drive:
    """One measurement: ``prompts`` at ``concurrency``, the client's wall time and the counters' difference."""

    concurrency: int
    completions: list[Completion]
    wall_s: float
    counters: Counters
    steps_by_draft: Tally | None = None  # speculative steps by draft length, where the engine's log says

    @property
    def tokens(self) -> int:
        return sum(c.tokens for c in self.completions)

    @property
    def goodput(self) -> float:
        """Generated tokens per second of wall time, over all clients (the prompts' prefill included)."""
        return self.tokens / self.wall_s if self.wall_s > 0 else float("nan")

    @property
    def decode_goodput(self) -> float:
        """Generated tokens per second of wall time less each client's share of the time to first token (the
        engine's own histogram): the prefill left out, as spectune's bench leaves it out of the runtime's
        ``decode_goodput`` (tokens / decode seconds) and the cost model prices."""
        c = self.counters
        decode_s = self.wall_s - c.first_token_s / self.concurrency
        return self.tokens / decode_s if decode_s > 0 and c.requests else float("nan")


class Engine:
    """One serving engine reached at ``url`` (started by :meth:`start`, or attached); see the module docstring."""

    name = "engine"
    program = "engine"  # the executable's name on PATH
    env_var = "SPECTUNE_ENGINE"  # where a user names the executable
    install = ""  # the one line that installs it
    health_path = "/health"
    metrics_path = "/metrics"
    lookup_match = "recent"  # which occurrence its prompt lookup copies after (decoding.ngram.MATCHES)
    shorter_at_end = False  # drafts fewer than K where fewer tokens are left to generate
    methods = ("standard", "sd", "sd-ngram")  # what it runs (recommend --engine searches these): alone, draft, lookup
    p_min = False  # whether it stops a draft on the draft model's confidence (spectune's confidence:T policy)
    # starts in seconds: a measurement's repeats each get their own round of starts (bench_engine), so the host's
    # drift over a run falls on every configuration alike, not on the last ones started
    quick_start = False

    def __init__(self, url: str, server: Server | None = None, launch: Launch | None = None):
        user, at, rest = url.rpartition("@")  # a userinfo token may hold "?": it ends at the last "@" (masking's rule)
        base, sep, query = rest.partition("?")  # a query (``?token=...``) stays after every path spectune adds
        self.url, self._query = (user + at + base).rstrip("/"), sep + query
        self.server = server
        self.launch = launch
        self._served: str | None = None

    def at(self, path: str) -> str:
        """The URL of one of the engine's endpoints (``/metrics``), the query of the URL it was given kept."""
        return self.url + path + self._query

    # --- per engine -------------------------------------------------------------------------------------------
    def argv(self, exe: str, launch: Launch, port: int) -> list[str]:
        raise NotImplementedError

    def environment(self, exe: str) -> dict[str, str]:
        return {}

    def counters_from(self, samples: prometheus.Samples) -> Counters:
        raise NotImplementedError

    def version(self) -> str:
        raise NotImplementedError

    def drafted_per_step(self, response: dict[str, Any]) -> tuple[int, ...] | None:
        """Draft tokens at each speculative step of one completion, where the engine's response says (None)."""
        return None

    def resolved(self) -> dict[str, Any] | None:
        """The speculation the engine says it runs ({}: none), from its own output; None where it does not say
        (attached: no start-up log)."""
        return None

    def parallel(self) -> dict[str, int]:
        """The parallel configuration the engine runs with (recorded beside its profiles)."""
        return {}

    def slots(self) -> int | None:
        """How many requests the engine decodes at once, where it has a fixed number (None: as many as come)."""
        return None

    def ragged(self) -> bool:
        """Whether a step whose rows feed different token counts costs what their mean feed costs (one flattened
        forward), recorded in its profiles for the cost model (``SimRunner._price``); False: what the longest
        feed costs, as spectune's padded runtime. vLLM 0.32.0 CPU (default): its b = 8 rows of 2026-11-26 fit the
        longest feed better (lookups' fastest repeats priced +14 % on average, +18 % at the mean)."""
        return False

    def first_token_s(self, response: dict[str, Any]) -> float | None:
        """A completion's time to first token where its response says (None: the counters hold it)."""
        return None

    def settle(self, counters: Counters, completions: Sequence[Completion]) -> Counters:
        """A drive's counters completed from its responses where ``/metrics`` lacks some (default: as read)."""
        return counters

    def drafts_logged(self) -> Tally | None:
        """Speculative steps by draft length since the previous call, from the engine's log (None: not logged)."""
        return None

    @classmethod
    def start_notes(cls, args: Sequence[str], model: str) -> list[str]:
        """Lines worth telling a user before ``model`` is served under their ``args`` on this machine (none here)."""
        return []

    @classmethod
    def model_file(cls, model: str, executable: str | None = None) -> str:
        """What the engine serves for ``model`` here: its directory (a bundled model's in spectune's cache)."""
        return str(model_path(model))

    # --- the engine's speculative settings (what ``export`` writes for it) ------------------------------------
    @staticmethod
    def speculation(k: int, draft: str | None = None, lookup: bool = False) -> Any:
        """The settings of a calibration stage: a prompt lookup proposing K, the ``draft`` model drafting K, or
        the target alone (K = 0)."""
        raise NotImplementedError

    @staticmethod
    def serving_as_speculation(args: Sequence[str]) -> Any:
        """The settings of a start that serves the target as every speculative start does but never drafts, where
        that differs from the target alone's plain start under the user's ``args`` (None: it does not). Calibration
        measures the target's step in such a start as the base of speculative steps (``calibration.engine``)."""
        return None

    @staticmethod
    def speculative_of(artifact: Any) -> Any:
        """The speculative settings a start takes, from ``export``'s artifact for this engine."""
        raise NotImplementedError

    @staticmethod
    def scheduled_k(speculative: Any, batch_size: int) -> int:
        """The draft length the engine's own rule runs at ``batch_size`` (0: no speculation)."""
        raise NotImplementedError

    @staticmethod
    def method_failures(speculative: Any, resolved: dict[str, Any] | None) -> list[str]:
        """Where what the engine says it runs (``resolved``) differs from the settings asked for."""
        return []

    @staticmethod
    def positions(speculative: Any) -> int:
        """Draft positions the engine counts acceptance at for these settings."""
        raise NotImplementedError

    # --- start / attach / stop --------------------------------------------------------------------------------
    @classmethod
    def start(cls, launch: Launch) -> "Engine":
        """Start the engine from ``launch`` and wait until it answers (one-line errors: see ``process.py``)."""
        if given(launch.args, "--host", "--port"):
            raise ConfigError("--engine-args cannot set --host or --port: spectune starts the engine on a free port "
                              "of 127.0.0.1 and talks to it there; to serve it elsewhere, start it yourself and "
                              "give --engine-url")
        exe = find_executable(cls.program, launch.executable, cls.env_var, cls.install)
        port = launch.port or free_port(launch.host)
        if not port_free(launch.host, port):
            raise EngineError(f"port {port} on {launch.host} is taken: stop what listens there or choose another "
                              "port")
        url = f"http://{launch.host}:{port}"
        eng = cls(url, launch=launch)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        log = Path(launch.log_dir) / f"{cls.name}-{stamp}-{port}.log"
        eng.server = Server(eng.argv(exe, launch, port), log, url + cls.health_path, eng.environment(exe), cls.name)
        eng.server.start(launch.ready_timeout_s)
        return eng

    @classmethod
    def attach(cls, url: str) -> "Engine":
        """An engine already serving at ``url`` (``user:token@`` in it is sent as a bearer token, never
        printed); one line when nothing answers there."""
        eng = cls(url)
        get_text(eng.at(cls.health_path), timeout=10)
        return eng

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def shown(self) -> str:
        """The URL as it may be printed (secrets masked)."""
        return mask_url(self.url + self._query)

    # --- HTTP ---------------------------------------------------------------------------------------------------
    def _call(self, doing: str, fn: Any, *args: Any, **kw: Any) -> Any:
        try:
            return fn(*args, **kw)
        except Unreachable:
            if self.server is not None:
                raise self.server.died(doing) from None
            raise

    def served_model(self) -> str:
        """The model name the engine serves (its first ``/v1/models`` entry)."""
        if self._served is None:
            data = self._call("listing its models", get_json, self.at("/v1/models"))
            try:
                self._served = str(data["data"][0]["id"])
            except (KeyError, IndexError, TypeError):
                raise EngineError(f"{self.name} at {self.shown()} lists no model in /v1/models") from None
        return self._served

    def counters(self) -> Counters:
        text = self._call("reading its metrics", get_text, self.at(self.metrics_path))
        try:
            return self.counters_from(prometheus.parse(text))
        except ValueError as e:
            raise EngineError(f"{self.name} at {self.shown()} served unreadable metrics: {e}") from None

    def complete(self, prompt_ids: list[int], max_tokens: int, temperature: float = 0.0, seed: int = 0) -> Completion:
        """One completion of the prompt (token ids, so every engine and the runtime see the same prompt); EOS
        is ignored so every request decodes ``max_tokens``."""
        payload = {"model": self.served_model(), "prompt": list(prompt_ids), "max_tokens": max_tokens,
                   "temperature": temperature, "seed": seed, "ignore_eos": True}
        t0 = time.perf_counter()
        data = self._call("during a request", post_json, self.at("/v1/completions"), payload)
        dt = time.perf_counter() - t0
        try:
            return Completion(int(data["usage"]["completion_tokens"]), dt, str(data["choices"][0]["text"]),
                              self.drafted_per_step(data), self.first_token_s(data))
        except (KeyError, IndexError, TypeError, ValueError):
            raise EngineError(f"{self.name} answered a completion without usage / choices: {str(data)[:160]}") \
                from None

    def drive(self, prompts: Sequence[list[int]], concurrency: int, max_tokens: int,
              temperature: float = 0.0, seed: int = 0) -> Drive:
        """Every prompt once, ``concurrency`` clients at a time; the counters read before and after."""
        slots = self.slots()
        if slots is not None and concurrency > slots:
            raise ConfigError(f"{self.name} decodes {slots} requests at once (its parallel slots): a batch of "
                              f"{concurrency} would queue and be measured as a smaller one; give it {concurrency} "
                              "slots in --engine-args")
        self.served_model()
        self.drafts_logged()  # only this drive's steps are counted
        before = self.counters()
        queue = list(enumerate(prompts))
        lock = threading.Lock()
        done: dict[int, Completion] = {}

        def stop_all() -> None:  # the other clients stop after the request they are in: a fault surfaces now
            with lock:
                queue.clear()

        def client() -> None:
            while True:
                with lock:
                    if not queue:
                        return
                    i, p = queue.pop(0)
                try:
                    done[i] = self.complete(p, max_tokens, temperature, seed + i)
                except BaseException:
                    stop_all()
                    raise

        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            try:
                for f in [pool.submit(client) for _ in range(concurrency)]:
                    f.result()
            except BaseException:  # Ctrl-C or SIGTERM while waiting: only the requests in flight finish
                stop_all()
                raise
        wall = time.perf_counter() - t0
        out = [done[i] for i in sorted(done)]
        return Drive(concurrency, out, wall, self.settle(self.counters() - before, out), self.drafts_logged())


@dataclass(frozen=True)
class EngineSettings:
    """How spectune reaches an engine, as the user said it (``--engine``, ``--engine-bin``, ``--engine-url``,
    ``--engine-args``): started from a model and the exported speculative settings, or attached by URL."""

    name: str
    executable: str | None = None
    url: str | None = None  # attach here instead of starting one
    args: tuple[str, ...] = ()
    log_dir: Path = Path("spectune-engine-logs")
    ready_timeout_s: float = 900.0
    seed: int = 0
    together: int = 1  # starts a measurement keeps alive at once and drives in turn (``open_together``)

    def __post_init__(self) -> None:
        checks.integer(self.together, "--engine-together (engine starts alive at once)", lo=1, hi=checks.MAX_TOGETHER)
        if self.url and self.together > 1:
            raise ConfigError("--engine-together needs spectune to start the engine: an attached engine "
                              "(--engine-url) is one start")

    def launch(self, model: str, speculative: Any = None, slots: int = 8) -> Launch:
        return Launch(model, speculative or None, self.args, self.executable, log_dir=self.log_dir,
                      ready_timeout_s=self.ready_timeout_s, seed=self.seed, slots=slots, together=self.together)
