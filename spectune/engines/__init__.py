"""Serving engines in the loop: each engine one module behind :class:`Engine` (start from an exported artifact or
attach by URL; drive over the OpenAI HTTP API at a concurrency; read its ``/metrics`` counters).

``open_engine(name, launch=..., url=...)`` starts ``name`` from ``launch`` or attaches to ``url``. spectune never
imports an engine's Python package: engines run in their own environments, found as executables.
"""
from __future__ import annotations

from spectune.engines.base import Completion, Counters, Drive, Engine, EngineSettings, Launch
from spectune.engines.llamacpp_server import LlamaCppEngine
from spectune.engines.vllm_server import VllmEngine
from spectune.errors import ConfigError

ENGINES: dict[str, type[Engine]] = {"vllm": VllmEngine, "llamacpp": LlamaCppEngine}


def engine_class(name: str) -> type[Engine]:
    """The engine module's class for ``name`` (one-line error for an engine spectune cannot run)."""
    try:
        return ENGINES[name]
    except KeyError:
        raise ConfigError(f"spectune cannot run engine '{name}' in the loop: use one of {', '.join(ENGINES)}") \
            from None


def open_engine(settings: EngineSettings, model: str | None = None, speculative: object = None,
                slots: int = 8) -> Engine:
    """Attach to ``settings.url`` when given, else start the engine serving ``model`` with ``speculative``, ready
    for ``slots`` requests at once (the largest batch to be driven)."""
    cls = engine_class(settings.name)
    if settings.url:
        return cls.attach(settings.url)
    if model is None:
        raise ConfigError(f"starting {settings.name} needs a model to serve")
    return cls.start(settings.launch(model, speculative, slots))


__all__ = ["Completion", "Counters", "Drive", "ENGINES", "Engine", "EngineSettings", "Launch", "LlamaCppEngine",
           "VllmEngine", "engine_class", "open_engine"]
