"""Load causal LMs (local directory, bundled name, hub id, or already-loaded objects) and check they can collaborate.

Collaboration needs one shared token space: every model must use the same tokenizer vocabulary and the same
output width (the logits of model i at a position are compared element-wise with those of model j).
"""
from __future__ import annotations

import json
import os
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from spectune.errors import ModelLoadError
from spectune.models import bundled


@dataclass
class LoadedModel:
    """A causal LM ready for decoding: the module, its tokenizer and a display name."""

    name: str
    model: Any  # transformers PreTrainedModel (eval mode)
    tokenizer: Any  # transformers PreTrainedTokenizerBase
    dtype_reason: str = "loaded by the caller"  # why it runs in its dtype (``--dtype auto`` says which rule)

    @property
    def dtype(self) -> str:
        """The dtype its weights compute in, e.g. 'bfloat16'."""
        return str(next(self.model.parameters()).dtype).replace("torch.", "")

    @property
    def vocab_size(self) -> int:
        """Width of the logits this model returns."""
        return int(self.model.get_output_embeddings().weight.shape[0])

    @property
    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())


PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
_ALLOW_PICKLE: ContextVar[bool] = ContextVar("spectune_allow_pickle_weights", default=False)


@contextmanager
def allow_pickle_weights(allow: bool = True):
    """Within this block ``load_model`` also loads pickle weight files (``pytorch_model.bin``): CLI
    ``--allow-pickle-weights``. Pickle files can run code when loaded; only use it for weights you trust."""
    token = _ALLOW_PICKLE.set(bool(allow))
    try:
        yield
    finally:
        _ALLOW_PICKLE.reset(token)


def _check_weight_files(path: Path, spec: str, allow_pickle: bool) -> None:
    """A local model directory holds safetensors weights, or pickle ones that the user allowed explicitly."""
    names = [p.name for p in path.iterdir()]
    if any(n.endswith(".safetensors") for n in names) or allow_pickle:
        return
    pickled = sorted(n for n in names if n.endswith(PICKLE_SUFFIXES))
    if pickled:
        raise ModelLoadError(f"model '{spec}' has only pickle weights ({pickled[0]}), which can run code when loaded: "
                             "convert them to safetensors, or pass --allow-pickle-weights if you trust them")
    raise ModelLoadError(f"model '{spec}' has no weights (no *.safetensors file)")


def _looks_like_hub_id(spec: str) -> bool:
    return spec.count("/") == 1 and not spec.startswith((".", "/", "~")) and not os.path.exists(spec)


def declared_dtype(spec: Any) -> str | None:
    """The dtype a model's own config declares ('bfloat16', ...), without loading it; None where unknown."""
    if isinstance(spec, LoadedModel) or isinstance(spec, tuple):
        model = spec.model if isinstance(spec, LoadedModel) else spec[0]
        return str(next(model.parameters()).dtype).replace("torch.", "")

    spec = str(spec)
    if spec == bundled.TARGET:
        return bundled.TARGET_DTYPE
    cfg = (bundled.draft_source_dir(spec) if spec in bundled.names() else Path(spec).expanduser()) / "config.json"
    try:
        data = json.loads(cfg.read_text())
    except (OSError, ValueError):
        return None
    dt = data.get("dtype") or data.get("torch_dtype") if isinstance(data, dict) else None
    return str(dt).replace("torch.", "") if dt else None


def resolve_model_dtype(spec: Any, dtype: str | None, device: str) -> tuple[str, str]:
    """``(dtype, why)`` a model runs in: ``--dtype auto`` applies ``spectune.machine.resolve_dtype``."""
    from spectune.machine import here, resolve_dtype

    return resolve_dtype(dtype, declared_dtype(spec), here(device))


def model_path(spec: str, allow_pickle: bool = False) -> Path | str:
    """Where model ``spec`` lives: a bundled name's cache directory (built on first use), a local directory
    holding a transformers model (safetensors weights unless ``allow_pickle``), or a hub id passed through."""
    if spec in bundled.names():
        return bundled.resolve(spec)
    p = Path(spec).expanduser()
    if p.exists():
        if not p.is_dir() or not (p / "config.json").exists():
            raise ModelLoadError(f"model path '{spec}' holds no transformers model (no config.json)")
        _check_weight_files(p, spec, allow_pickle)
        return p
    if not _looks_like_hub_id(spec):
        raise ModelLoadError(f"model '{spec}' not found: not a directory, not a bundled name "
                             f"({', '.join(bundled.names())})")
    return spec  # hub id: transformers resolves it (fails offline with a clear message)


def load_tokenizer(spec: str, trust_remote_code: bool = False) -> Any:
    """The tokenizer of model ``spec`` (see :func:`model_path`) without loading its weights."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(model_path(str(spec), True)), trust_remote_code=trust_remote_code)
    except ModelLoadError:
        raise
    except Exception as e:  # noqa: BLE001 - a damaged or missing tokenizer
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelLoadError(f"cannot load the tokenizer of '{spec}': {first}") from None


def load_model(spec: Any, *, dtype: str = "auto", device: str = "cpu", trust_remote_code: bool = False,
               allow_pickle: bool | None = None) -> LoadedModel:
    """Load one model.

    ``spec`` is a bundled model name (see ``spectune models``), a local directory holding a transformers
    model and tokenizer, a hub id (only useful where a hub is reachable), a ``LoadedModel``, or a
    ``(model, tokenizer)`` pair of already-loaded transformers objects (those keep the dtype they have).
    ``dtype``: ``auto`` (the model's config dtype where the device computes it natively, else float32;
    ``spectune.machine.resolve_dtype``), float32, bfloat16 or float16.
    Weights load from safetensors files only, unless ``allow_pickle`` (default: inside ``allow_pickle_weights()``).
    """
    from spectune.config import check_device

    check_device(device)
    if isinstance(spec, LoadedModel):
        return spec
    if isinstance(spec, tuple) and len(spec) == 2:
        model, tok = spec
        name = getattr(getattr(model, "config", None), "_name_or_path", "") or type(model).__name__
        return LoadedModel(name=str(name), model=model.eval(), tokenizer=tok)
    if not isinstance(spec, (str, os.PathLike)):
        raise ModelLoadError(f"cannot load a model from {type(spec).__name__}: pass a name, a directory or "
                             "(model, tokenizer)")
    spec = str(spec)
    allow = _ALLOW_PICKLE.get() if allow_pickle is None else bool(allow_pickle)
    path = model_path(spec, allow)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one line per problem, no per-file progress bars

    resolved, why = resolve_model_dtype(spec, dtype, device)
    torch_dtype = getattr(torch, resolved)
    try:
        tok = AutoTokenizer.from_pretrained(str(path), trust_remote_code=trust_remote_code)
        model = AutoModelForCausalLM.from_pretrained(
            str(path), dtype=torch_dtype, trust_remote_code=trust_remote_code,
            use_safetensors=None if allow else True
        )
    except Exception as e:  # noqa: BLE001 - a damaged model directory: config, tokenizer or weights
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelLoadError(f"cannot load model '{spec}': {first}") from None

    try:
        model = model.to(device).eval()
    except RuntimeError as e:
        raise ModelLoadError(f"cannot move model '{spec}' to {device}: {str(e).strip().splitlines()[0]}") from None
    return LoadedModel(name=spec, model=model, tokenizer=tok, dtype_reason=why)


def dtype_line(models: Sequence[LoadedModel]) -> str:
    """One line naming each model's dtype and why, e.g. 'dtype: draft-s bfloat16, smollm2-135m bfloat16 (...)'."""
    whys = {m.dtype_reason for m in models}
    parts = ", ".join(f"{m.name} {m.dtype}" + ("" if len(whys) == 1 else f" ({m.dtype_reason})") for m in models)
    return f"dtype: {parts}" + (f" ({whys.pop()})" if len(whys) == 1 else "")


def max_positions(model: Any) -> int | None:
    """How many positions (prompt + generated tokens) ``model`` supports, from its config; None where unknown."""
    cfg = getattr(model, "config", None)
    for attr in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        v = getattr(cfg, attr, None)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def check_compatible(models: Sequence[LoadedModel]) -> None:
    """Raise ``ModelLoadError`` unless all models share one tokenizer vocabulary and logit width."""
    ref = models[0]
    ref_vocab = ref.tokenizer.get_vocab()
    for m in models[1:]:
        if m.tokenizer.get_vocab() != ref_vocab:
            raise ModelLoadError(f"tokenizers differ: '{m.name}' and '{ref.name}' do not share one vocabulary")
        if m.vocab_size != ref.vocab_size:
            raise ModelLoadError(
                f"vocabulary sizes differ: '{m.name}' has {m.vocab_size} logits, '{ref.name}' has {ref.vocab_size}"
            )


def load_models(specs: Sequence[Any], **kw: Any) -> list[LoadedModel]:
    """Load several models (smallest first by convention) and check they can collaborate."""
    if len(specs) < 1:
        raise ModelLoadError("no models given")
    models = [load_model(s, **kw) for s in specs]
    check_compatible(models)
    return models
