"""The bundled default model family (placeholder registry; filled in by the default-family work)."""
from __future__ import annotations

from pathlib import Path


def names() -> list[str]:
    """Names accepted wherever a model is expected."""
    return []


def resolve(name: str) -> Path:
    """Return a local directory holding the bundled model ``name``, preparing it on first use."""
    raise KeyError(name)
