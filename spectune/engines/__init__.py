"""Serving engines in the loop: each engine one module behind :class:`Engine` (start from an exported artifact or
attach by URL; drive over the OpenAI HTTP API at a concurrency; read its ``/metrics`` counters).

``open_engine(name, launch=..., url=...)`` starts ``name`` from ``launch`` or attaches to ``url``;
``open_together`` keeps several starts alive at once and drives them in turn (``EngineSettings.together``). spectune
never imports an engine's Python package: engines run in their own environments, found as executables.
"""
from __future__ import annotations

from contextlib import ExitStack, contextmanager
from typing import Any, Callable, Iterator, Sequence, TypeVar

from spectune.engines.base import Completion, Counters, Drive, Engine, EngineSettings, Launch
from spectune.engines.llamacpp_server import LlamaCppEngine
from spectune.engines.process import QUIET_TIMEOUT_S, wait_quiet
from spectune.engines.vllm_server import VllmEngine
from spectune.errors import ConfigError

ENGINES: dict[str, type[Engine]] = {"vllm": VllmEngine, "llamacpp": LlamaCppEngine}
_SAID: set[str] = set()  # start notes already said in this process (open_engine)
T = TypeVar("T")


def engine_class(name: str) -> type[Engine]:
    """The engine module's class for ``name`` (one-line error for an engine spectune cannot run)."""
    try:
        return ENGINES[name]
    except KeyError:
        raise ConfigError(f"spectune cannot run engine '{name}' in the loop: use one of {', '.join(ENGINES)}") \
            from None


def open_engine(settings: EngineSettings, model: str | None = None, speculative: object = None,
                slots: int = 8, say: Callable[[str], None] = lambda s: None) -> Engine:
    """Attach to ``settings.url`` when given, else start the engine serving ``model`` with ``speculative``, ready
    for ``slots`` requests at once (the largest batch to be driven). ``say``: the engine's ``start_notes``, once a
    process."""
    cls = engine_class(settings.name)
    if settings.url:
        return cls.attach(settings.url)
    if model is None:
        raise ConfigError(f"starting {settings.name} needs a model to serve")
    for note in [n for n in cls.start_notes(settings.args, model) if n not in _SAID]:
        _SAID.add(note)
        say(note)
    return cls.start(settings.launch(model, speculative, slots))


class Together:
    """Engine starts alive at once (``open_together``), each driven in its turn: ``in_turn(r)`` yields (index,
    engine) from start ``r`` on, rotating, and before each turn waits until every start is quiet (``wait_quiet``),
    so no drive shares the host with another start's spin-down. On a host whose speed swings within seconds, the
    starts' ratios then move together: on the Emerald Rapids guest the fastest of 6 rounds of vLLM starts driven in
    turn gave a configuration's ratio to the target alone an sd(log) of 0.06-0.07, the fastest of 9 drives of
    separate starts 0.12-0.14 (docs/benchmarks.md, "Engine starts alive at once and driven in turn"). Where they
    never go quiet (an engine with a load of its own) the turn is driven anyway, and ``say`` tells so."""

    def __init__(self, engines: Sequence[Engine], say: Callable[[str], None] = lambda s: None):
        self.engines, self.say = list(engines), say

    def in_turn(self, first: int = 0) -> Iterator[tuple[int, Engine]]:
        n = len(self.engines)
        for j in range(n):
            i = (first + j) % n
            busy = wait_quiet([e.server for e in self.engines if e.server is not None]) if n > 1 else None
            if busy is not None:
                self.say(f"  {self.engines[i].name}: the starts alive at once still used {busy:.2f} cores after "
                         f"{QUIET_TIMEOUT_S:.0f} s of waiting for them to go quiet; driving this turn anyway (it may "
                         "run slow)")
            yield i, self.engines[i]


@contextmanager
def open_together(settings: EngineSettings, model: str | None, starts: Sequence[tuple[Any, int]],
                  say: Callable[[str], None] = lambda s: None) -> Iterator[Together]:
    """``open_engine`` for each of ``starts`` ((speculative settings, slots) each), all alive at once; every one
    stopped on leaving, or when a later one fails to start. ``say``: progress (a turn driven on a busy host) and,
    once a process, the engine's ``start_notes``."""
    with ExitStack() as stack:
        yield Together([stack.enter_context(open_engine(settings, model, spec, slots, say))
                        for spec, slots in starts], say)


def carried_sets(starts: Sequence[T], together: int, is_base: Callable[[T], bool]) -> list[list[T]]:
    """``starts`` in sets of ``together`` alive at once, in order. Where they take more than one set and one of them
    is the base every ratio is taken to (``is_base``: the target alone), it joins every set, so each set's ratios to
    it are measured in turn; its rows in a later set are that set's level (``set_of``)."""
    base = [x for x in starts if is_base(x)]
    if together < 2 or not base or len(starts) <= together:
        return [list(starts[at:at + together]) for at in range(0, len(starts), together)]
    rest = [x for x in starts if x is not base[0]]
    return [[base[0], *rest[at:at + together - 1]] for at in range(0, len(rest), together - 1)]


def set_of(row: dict[str, Any]) -> int:
    """The set of starts (``carried_sets``) a measured row ran in; 0 for rows written before sets ("" or NaN)."""
    s = row.get("set", "")
    return 0 if s in ("", None) or s != s else int(s)


__all__ = ["Completion", "Counters", "Drive", "ENGINES", "Engine", "EngineSettings", "Launch", "LlamaCppEngine",
           "Together", "VllmEngine", "carried_sets", "engine_class", "open_engine", "open_together", "set_of"]
