"""The one place for a transformers rename that every spectune forward depends on: the KV cache's name.

transformers 5.24 renamed a causal LM's cache argument and output field from ``past_key_values`` to ``cache``
(the old names still work, with a FutureWarning, until 5.40); earlier releases, and models that write their own
``forward`` (``tests/fakes.py``), know only ``past_key_values``. spectune passes the cache under the name the
model's ``forward`` declares and reads it back from either field, so it runs unchanged on both sides of the
rename. Torch-free at import: it inspects signatures and attributes; ``forward`` also runs the model under
``attention.eager_attention`` (no cuDNN attention on CUDA: see that module).
"""
from __future__ import annotations

import functools
import inspect
from typing import Any

NEW, OLD = "cache", "past_key_values"


def cache_arg(model: Any) -> str:
    """The keyword ``model``'s forward takes its KV cache by: ``cache`` where the forward declares it (transformers
    >= 5.24), else ``past_key_values``."""
    return _cache_arg(type(model))


@functools.lru_cache(maxsize=None)
def _cache_arg(cls: type) -> str:
    try:
        params = inspect.signature(cls.forward).parameters
    except (TypeError, ValueError, AttributeError):
        return OLD
    return NEW if NEW in params else OLD


def forward(model: Any, cache: Any, **kw: Any) -> Any:
    """``model(**kw)`` with ``cache`` passed under the name its forward takes, under ``eager_attention``."""
    from spectune.decoding.attention import eager_attention, model_device

    with eager_attention(model_device(model)):
        return model(**kw, **{cache_arg(model): cache})


def cache_of(out: Any) -> Any:
    """The cache a forward returned: ``out.cache`` (transformers >= 5.24) or ``out.past_key_values``."""
    c = getattr(out, NEW, None)
    return c if c is not None else getattr(out, OLD)


def cache_in(kwargs: dict[str, Any]) -> Any:
    """The cache in a forward's keyword arguments (a forward pre-hook's view), under either name; None if absent."""
    c = kwargs.get(NEW)
    return c if c is not None else kwargs.get(OLD)
