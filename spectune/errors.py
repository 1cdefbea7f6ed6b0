"""Errors the user can cause. The CLI prints ``str(err)`` on one line and exits non-zero; nothing else is caught."""


class SpectuneError(Exception):
    """Base class: a problem with the user's input or environment, reported as one line."""


class ConfigError(SpectuneError, ValueError):
    """An invalid setting (method, combination, gamma, sampling parameter)."""


class ModelLoadError(SpectuneError):
    """A model path or name that cannot be loaded, or models that cannot work together."""


class ProfileError(SpectuneError):
    """A profile that is missing, corrupt or of an unknown schema version."""


class OutputError(SpectuneError):
    """An output path that spectune must not or cannot write: a file where a directory belongs, a path under a
    file, no permission, or an existing file or directory spectune did not create (without ``--force``)."""


class DecodeError(SpectuneError):
    """Decoding failed partway. ``texts`` / ``token_ids`` hold what was generated until then, per prompt (the
    CLI prints them before the error line), so a late failure never loses the output."""

    def __init__(self, message: str, texts: list[str], token_ids: list[list[int]]):
        super().__init__(message)
        self.texts, self.token_ids = texts, token_ids


class EngineError(SpectuneError):
    """A serving engine that cannot be found, started or reached, or that died mid-run. ``rows`` holds what was
    measured before the fault (the CLI prints them before the error line), so a late fault never loses them."""

    def __init__(self, message: str, rows: list | None = None):
        super().__init__(message)
        self.rows = rows or []
