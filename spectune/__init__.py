"""spectune: calibrate, tune and run speculative / collaborative LLM decoding, exactly."""
import sys as _sys
import types as _types

from spectune.api import BatchResult, GenerateResult, build_decoder, generate, generate_batch
from spectune.config import DecodeConfig
from spectune.decoding.combine import Combination
from spectune.decoding.stats import DecodeStats
from spectune.errors import ConfigError, ModelLoadError, ProfileError, SpectuneError
from spectune.models import LoadedModel, load_model, load_models

__all__ = [
    "BatchResult", "generate_batch", "Combination", "ConfigError", "DecodeConfig", "DecodeStats", "GenerateResult", "LoadedModel", "ModelLoadError",
    "ProfileError", "SpectuneError", "build_decoder", "generate", "load_model", "load_models",
    "calibrate", "load_profile", "Profile", "recommend", "export",
]
__version__ = "0.1.0"

_LAZY = {"calibrate": "spectune.calibrate", "load_profile": "spectune.profile", "Profile": "spectune.profile",
         "recommend": "spectune.tune.recommend", "export": "spectune.export"}


def __getattr__(name: str):  # heavier pieces load on first use, so `import spectune` stays light
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'spectune' has no attribute '{name}'")


class _Spectune(_types.ModuleType):
    """``spectune.calibrate`` and ``spectune.export`` are functions of the API *and* subpackages. Importing a
    subpackage binds it as an attribute of its parent, which would shadow the function after first use; this
    keeps those names meaning the functions (the subpackages stay importable by their dotted paths)."""

    def __setattr__(self, name: str, value: object) -> None:
        if name in _LAZY and isinstance(value, _types.ModuleType):
            return
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Spectune
