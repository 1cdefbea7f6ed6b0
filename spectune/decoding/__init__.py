"""The exact runtime decoder: sampling math, combinations, KV caches, the decode state machine and its stats.

Names load on first use, so the torch-free parts (``registry``, ``machine``, ``methods``, ``combine`` parsing,
``proposers``, ``policy``, ``stats``) import without torch (the cost model runs them in its simulator).
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {"Combination": "combine", "parse_combination": "combine", "DecodePlan": "loop", "Decoder": "loop",
            "SamplingParams": "loop", "DecodeStats": "stats", "METHODS": "registry", "Method": "registry"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"spectune.decoding.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'spectune.decoding' has no attribute '{name}'")
