"""Selecting a workload by name (the bundled sets and their mix) or by a path to a user's prompt file."""
from __future__ import annotations

import os
from functools import lru_cache
from importlib import resources
from itertools import chain, zip_longest
from pathlib import Path

from spectune.errors import ConfigError
from spectune.workloads.reader import parse_prompt_text, read_prompt_file
from spectune.workloads.workload import Workload

# the sets ``mix`` interleaves; ``edit`` (outputs that copy from the prompt: where prompt lookup pays) joined them
# with the profiles calibrated since (a profile records the sets it pooled as ``settings.workloads``)
BASE_WORKLOADS = ("code", "math", "chat", "summarize", "edit")
EXTRA_WORKLOADS: tuple[str, ...] = ()  # bundled sets outside ``mix``
MIX = "mix"
DEFAULT_WORKLOAD = MIX
_FILE_SUFFIXES = (".jsonl", ".json", ".ndjson", ".txt")


def workload_names() -> list[str]:
    """The bundled workload names, the default (``mix``) last."""
    return [*BASE_WORKLOADS, *EXTRA_WORKLOADS, MIX]


def load_workload(name_or_path: str | os.PathLike = DEFAULT_WORKLOAD) -> Workload:
    """A bundled workload by name, or a user's prompt file (``.jsonl``, or ``.txt`` one prompt per line).

    A string that is a bundled name always means the bundled set (write ``./code`` for a file named
    ``code``). Anything else is read as a file if it exists, contains a path separator or has a prompt-file
    suffix; otherwise it is an unknown name. Raises :class:`~spectune.errors.ConfigError`.
    """
    if isinstance(name_or_path, os.PathLike):
        return read_prompt_file(name_or_path)
    if not isinstance(name_or_path, str):
        raise ConfigError(f"workload must be a name or a path, got {type(name_or_path).__name__}")
    if name_or_path in workload_names():
        return _bundled(name_or_path)
    if _looks_like_path(name_or_path):
        return read_prompt_file(name_or_path)
    raise ConfigError(
        f"unknown workload {name_or_path!r}; choose one of {', '.join(workload_names())} "
        "or give the path of a .jsonl file of prompts"
    )


def _looks_like_path(text: str) -> bool:
    seps = {os.sep, "/"} | ({os.altsep} if os.altsep else set())
    return Path(text).exists() or any(s in text for s in seps) or text.lower().endswith(_FILE_SUFFIXES)


@lru_cache(maxsize=None)
def _bundled(name: str) -> Workload:
    if name == MIX:
        return _mix([_bundled(n) for n in BASE_WORKLOADS])
    data = resources.files("spectune.workloads").joinpath("data", f"{name}.jsonl")
    return parse_prompt_text(data.read_text(encoding="utf-8"), f"{name}.jsonl")


def _interleave(groups: list[tuple[str, ...]]) -> tuple[str, ...]:
    """Round-robin over ``groups`` (first of each, then second of each, ...), skipping exhausted ones."""
    sentinel = object()
    return tuple(p for p in chain.from_iterable(zip_longest(*groups, fillvalue=sentinel)) if p is not sentinel)


def _mix(parts: list[Workload]) -> Workload:
    """Interleave the sets split by split, so every calibration prompt stays calibration and likewise."""
    return Workload(
        name=MIX,
        calibration=_interleave([w.calibration for w in parts]),
        heldout=_interleave([w.heldout for w in parts]),
    )
