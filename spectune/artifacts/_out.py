"""``--out FILE``: where the artifact goes, checked before anything is exported, with one-line errors -- a
directory, a path through a file, or an existing file (replaced only with ``--force``: never silently)."""
from __future__ import annotations

import os
from pathlib import Path

from spectune.config import write_text_atomic
from spectune.errors import ConfigError


def check_out(path: str | os.PathLike, force: bool = False) -> Path:
    """The path to write, or a ``ConfigError`` saying why not."""
    p = Path(path).expanduser()
    if p.is_dir():
        raise ConfigError(f"--out {path} is a directory: give a file name (e.g. {p / 'spectune-export.json'})")
    for parent in p.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(f"--out {path}: {parent} is a file, not a directory")
            break
    if p.exists() and not force:
        raise ConfigError(f"--out {path} exists: pass --force to replace it")
    return p


def write_out(path: str | os.PathLike, text: str, force: bool = False) -> Path:
    """Write ``text`` atomically after ``check_out``; an OS refusal (permissions, a full disk) is one line too."""
    p = check_out(path, force)
    try:
        return write_text_atomic(p, text)
    except OSError as e:
        raise ConfigError(f"--out {path}: cannot write it ({e.strerror or e})") from None
