"""spectune: calibrate, tune and run speculative / collaborative LLM decoding, exactly.

Every public name loads on first use (PEP 562 ``__getattr__``): ``import spectune`` -- and so ``import
spectune.profile`` or ``spectune.tune`` -- imports neither torch nor transformers until a name that needs them
(``generate``, ``load_models``, ...) is used.
"""
import importlib as _importlib

from spectune.errors import ConfigError, ModelLoadError, ProfileError, SpectuneError

__version__ = "0.1.0"

_LAZY = {
    "BatchResult": "spectune.api", "GenerateResult": "spectune.api", "generate": "spectune.api",
    "generate_batch": "spectune.api", "recommend": "spectune.api", "build_decoder": "spectune.decoder",
    "DecodeConfig": "spectune.config", "Combination": "spectune.decoding.combine",
    "DecodeStats": "spectune.decoding.stats", "LoadedModel": "spectune.models", "load_model": "spectune.models",
    "load_models": "spectune.models", "calibrate": "spectune.calibration", "load_profile": "spectune.profile",
    "Profile": "spectune.profile", "export": "spectune.artifacts",
}
__all__ = [
    "BatchResult", "Combination", "ConfigError", "DecodeConfig", "DecodeStats", "GenerateResult", "LoadedModel",
    "ModelLoadError", "Profile", "ProfileError", "SpectuneError", "build_decoder", "calibrate", "export",
    "generate", "generate_batch", "load_model", "load_models", "load_profile", "recommend",
]


def __getattr__(name: str):
    """A public name, imported from its module on first use."""
    if name in _LAZY:
        return getattr(_importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'spectune' has no attribute '{name}'")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
