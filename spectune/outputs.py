"""Where spectune writes, and the rule that it never deletes or overwrites what it did not create.

* ``target_dir(path, what)``: an output directory must be a directory or not exist yet, must not lie under a
  file, and must be writable; otherwise one ``OutputError`` line naming it. Checked before any work starts.
* ``claim(path, force, what)``: a file spectune is about to write may already exist only when spectune wrote
  it (``written_by_spectune``: a JSON object whose ``schema`` starts with ``spectune.``, a PNG whose metadata
  says spectune, a CSV with a header spectune writes, an Optuna SQLite database) or with ``force``.
* ``replace_dir(new, final)``: puts a freshly written directory (a profile) at ``final`` with one atomic
  exchange (Linux ``renameat2(RENAME_EXCHANGE)``, macOS ``renamex_np(RENAME_SWAP)``): at every instant
  ``final`` is either the previous directory or the new one, never missing. Where the OS cannot exchange, the
  previous one is renamed to ``.<name>.previous`` first, and left there if a kill comes before the second rename.
* ``name_slug(text)``: a model, workload or study name as part of a directory or study name.
"""
from __future__ import annotations

import ctypes
import errno
import json
import os
import re
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any

from spectune.errors import OutputError

PNG_SOFTWARE = "spectune"  # the PNG tEXt "Software" value of every figure spectune saves
_SQLITE_MAGIC = b"SQLite format 3\x00"


def name_slug(text: str) -> str:
    """``text`` as a name part: runs of anything but letters, digits and dots become '-', lower case, <= 60."""
    return re.sub(r"[^a-zA-Z0-9.]+", "-", text).strip("-").lower()[:60]


def _nearest_existing(p: Path) -> Path:
    a = p
    while not os.path.lexists(a) and a != a.parent:
        a = a.parent
    return a


def target_dir(path: str | os.PathLike, what: str) -> Path:
    """``path`` as a directory spectune may create or write into; else ``OutputError`` naming why not."""
    p = Path(path).expanduser()
    if os.path.lexists(p) and not p.is_dir():
        raise OutputError(f"{what} '{p}' is a file, not a directory")
    anc = _nearest_existing(p)
    if not anc.is_dir():
        raise OutputError(f"{what} '{p}' cannot be created: '{anc}' is a file")
    if not os.access(anc, os.W_OK | os.X_OK):
        raise OutputError(f"{what} '{p}' is not writable (no write permission in '{anc}')")
    return p


def _json_schema(p: Path) -> str | None:
    try:
        d = json.loads(p.read_text())
    except (OSError, ValueError):
        return None
    return d.get("schema") if isinstance(d, dict) and isinstance(d.get("schema"), str) else None


def _png_by_spectune(p: Path) -> bool:
    try:
        head = p.read_bytes()[:4096]
    except OSError:
        return False
    return head.startswith(b"\x89PNG") and b"tEXtSoftware\x00" + PNG_SOFTWARE.encode() in head


def _optuna_db(p: Path) -> bool:
    try:
        with open(p, "rb") as f:
            if f.read(16) != _SQLITE_MAGIC:
                return False
        con = sqlite3.connect(f"file:{p}?mode=ro", uri=True)
        try:
            names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            con.close()
    except (OSError, sqlite3.Error):
        return False
    return "studies" in names and "trials" in names


def written_by_spectune(path: Path, csv_header: str | None = None) -> bool:
    """Whether file ``path`` is one spectune writes (see the module docstring); an empty file counts as one."""
    p = Path(path)
    if p.is_file() and p.stat().st_size == 0:
        return True
    suffix = p.suffix.lower()
    if suffix == ".json":
        return (_json_schema(p) or "").startswith("spectune.")
    if suffix == ".png":
        return _png_by_spectune(p)
    if suffix == ".db":
        return _optuna_db(p)
    if suffix == ".csv" and csv_header is not None:
        try:
            with open(p, encoding="utf-8") as f:
                return f.readline().startswith(csv_header)
        except (OSError, UnicodeDecodeError):
            return False
    return False


def claim(path: str | os.PathLike, force: bool, what: str, csv_header: str | None = None) -> Path:
    """``path`` may be (over)written: it does not exist, spectune wrote it, or ``force``; else ``OutputError``."""
    p = Path(path).expanduser()
    target_dir(p.parent, f"the directory of {what}")
    if not os.path.lexists(p):
        return p
    if p.is_dir():
        raise OutputError(f"{what} '{p}' is a directory")
    if not force and not written_by_spectune(p, csv_header):
        raise OutputError(f"{what} '{p}' exists and was not written by spectune: choose another path or pass "
                          "--force to replace it")
    return p


def is_profile_dir(p: Path) -> bool:
    return (_json_schema(p / "profile.json") or "").startswith("spectune.profile/")


def check_profile_target(path: str | os.PathLike, force: bool) -> Path:
    """``path`` may receive a profile: absent, an empty directory or a spectune profile; anything with ``force``."""
    p = Path(path).expanduser()
    if os.path.lexists(p) and not p.is_dir():
        if not force:
            raise OutputError(f"'{p}' is a file, not a profile directory: choose another --out, or pass --force to "
                              "replace it")
        target_dir(p.parent, "the directory of the profile")
        return p
    target_dir(p, "profile directory")
    if not force and p.is_dir() and not is_profile_dir(p):
        names = sorted(x.name for x in p.iterdir())
        if names:
            shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
            raise OutputError(f"'{p}' holds files that are not a spectune profile ({shown}): choose another --out, "
                              "or pass --force to replace it")
    return p


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap the paths ``a`` and ``b``; False where this OS or file system cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return False
    if sys.platform.startswith("linux") and hasattr(libc, "renameat2"):
        fn = libc.renameat2
        fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
        rc = fn(-100, os.fsencode(a), -100, os.fsencode(b), 2)  # AT_FDCWD, RENAME_EXCHANGE
    elif sys.platform == "darwin" and hasattr(libc, "renamex_np"):
        fn = libc.renamex_np
        fn.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint]
        rc = fn(os.fsencode(a), os.fsencode(b), 2)  # RENAME_SWAP
    else:
        return False
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
        return False
    raise OSError(err, os.strerror(err), str(b))


def remove(p: Path) -> None:
    """Delete file or directory ``p`` (spectune's own: a replaced profile, a temporary directory)."""
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        p.unlink(missing_ok=True)


def previous_copy(final: Path) -> Path:
    """Where the no-exchange fallback of ``replace_dir`` keeps the previous ``final`` between its two renames."""
    return final.with_name(f".{final.name}.previous")


def replace_dir(new: Path, final: Path) -> None:
    """Move directory ``new`` to ``final``, replacing what is there (see the module docstring)."""
    if not os.path.lexists(final):
        os.replace(new, final)
        return
    if _exchange(new, final):
        remove(new)  # it now holds the previous one
        return
    old = previous_copy(final)
    remove(old)
    os.replace(final, old)
    try:
        os.replace(new, final)
    except BaseException:
        os.replace(old, final)
        raise
    remove(old)


def save_figure(fig: Any, path: Path, force: bool = False, dpi: int = 100) -> Path:
    """Save a matplotlib figure as a PNG marked as spectune's, atomically, never over a foreign file."""
    import matplotlib.pyplot as plt

    claim(path, force, "plot")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".png", dir=path.parent)
    os.close(fd)
    try:
        fig.savefig(tmp, format="png", dpi=dpi, metadata={"Software": PNG_SOFTWARE})
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
        plt.close(fig)
    return path
