"""Errors the user can cause. The CLI prints ``str(err)`` on one line and exits non-zero; nothing else is caught."""


class SpectuneError(Exception):
    """Base class: a problem with the user's input or environment, reported as one line."""


class ConfigError(SpectuneError, ValueError):
    """An invalid setting (method, combination, gamma, sampling parameter)."""


class ModelLoadError(SpectuneError):
    """A model path or name that cannot be loaded, or models that cannot work together."""


class ProfileError(SpectuneError):
    """A profile that is missing, corrupt or of an unknown schema version."""
