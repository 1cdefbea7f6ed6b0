"""DecodeConfig: what to run (models, method, combination, gamma, sampling), validated and JSON round-trippable."""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from spectune import checks
from spectune.decoding.combine import parse_combination
from spectune.decoding.policy import parse_policy
from spectune.decoding.proposers import parse_proposer, proposer_kind
from spectune.decoding.registry import METHOD_NAMES as METHODS
from spectune.decoding.registry import METHODS as REGISTRY
from spectune.decoding.registry import methods_for
from spectune.errors import ConfigError
from spectune.machine import DTYPES

CONFIG_SCHEMA = "spectune.decode_config/1"


def parse_gamma(text: str | int | tuple | list | None, n_models: int) -> tuple[int, ...]:
    """Per-model proposal lengths in model order. Missing entries: 5 for the first model, 1 for the others."""
    if text is None or text == "":
        vals: list[int] = []
    elif isinstance(text, (tuple, list)):
        vals = list(text)
    elif isinstance(text, str):
        try:
            vals = [int(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise ConfigError(f"invalid gamma '{text}': expected comma-separated integers") from None
    else:
        vals = [text]
    if len(vals) > n_models:
        raise ConfigError(f"gamma has {len(vals)} values but there are {n_models} models")
    defaults = [5] + [1] * (n_models - 1)
    vals = vals + defaults[len(vals):]
    return tuple(checks.integer(v, "gamma (every proposal length)", lo=1, hi=checks.MAX_COUNT) for v in vals)


def check_device(device: str) -> str:
    """``device`` if models can run on it here, else a one-line ``ConfigError`` (never a torch traceback).

    cpu and cuda[:N] are supported where present; mps and xpu where torch reports them available. Devices that
    torch knows but that cannot run a model here (meta, lazy, hpu, ...) are errors."""
    import torch

    if not isinstance(device, str) or not device.strip():
        raise ConfigError(f"device must be text such as cpu or cuda:0, got {checks.show(device)}")
    try:
        d = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ConfigError(f"unknown device '{device}': use cpu, cuda or cuda:N") from None
    if d.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device '{device}' needs CUDA, which this machine (torch {torch.__version__}) does "
                              "not have: use --device cpu")
        if d.index is not None and d.index >= torch.cuda.device_count():
            raise ConfigError(f"device '{device}' does not exist: this machine has {torch.cuda.device_count()} GPU(s)")
        return device
    backend = {"mps": getattr(torch.backends, "mps", None), "xpu": getattr(torch, "xpu", None)}.get(d.type)
    usable = d.type == "cpu" and not d.index or backend is not None and backend.is_available()
    if not usable:
        raise ConfigError(f"device '{device}' cannot run models on this machine: use cpu" +
                          (" or cuda" if torch.cuda.is_available() else ""))
    return device


def validate_settings(
    n_models: int, method: str, combine: Any, gamma: Any, temperature: float, top_k: int, top_p: float,
    max_new_tokens: int, proposer: Any = "model", policy: Any = "fixed",
) -> tuple[tuple[int, ...], str]:
    """Check every decoding setting for ``n_models`` models; returns (gamma, canonical combination text).

    Raises ``ConfigError`` with a one-line message naming the first problem.
    """
    if method not in METHODS:
        raise ConfigError(f"unknown method '{method}': use one of {', '.join(METHODS)}")
    lookup_only = check_proposer_policy(method, proposer, policy) == "ngram"
    need = 1 if lookup_only else REGISTRY[method].min_models
    if n_models < need:
        what = "a draft, a companion and a target (3+ models)" if method == "sv" else f"at least {need} models"
        raise ConfigError(f"method '{method}' needs {what}, got {n_models}")
    comb = parse_combination(combine, n_models)
    g = parse_gamma(gamma, n_models)
    checks.real(temperature, "temperature", lo=0)
    checks.integer(top_k, "top-k (0 disables)", lo=0)
    checks.real(top_p, "top-p", lo=0, hi=1, lo_open=True)
    checks.integer(max_new_tokens, "max-new-tokens", lo=1)
    return g, comb.spec


def check_proposer_policy(method: str, proposer: Any, policy: Any) -> str:
    """Canonical proposer kind ('model', 'ngram', 'ngram+model') after checking that ``method`` can run with the
    proposer and the draft-length policy (registries: decoding/proposers.py, decoding/policy.py); ``ConfigError``
    otherwise."""
    kind = proposer_kind(proposer)
    if method not in methods_for(kind):
        raise ConfigError(f"proposer '{proposer}' runs with method {' or '.join(methods_for(kind))}, "
                          f"not '{method}'")
    if parse_policy(policy).spec != "fixed" and (kind == "ngram" or not REGISTRY[method].policies):
        with_policies = [n for n, m in REGISTRY.items() if m.policies]
        raise ConfigError(f"policy '{policy}' sets a draft model's length: it needs a drafting proposer and method "
                          f"{', '.join(with_policies[:-1])} or {with_policies[-1]} (got {kind}, {method})")
    return kind


@dataclass
class DecodeConfig:
    """One decoding configuration. Models are listed smallest first; the first is the default proposer."""

    models: tuple[str, ...] = ()
    method: str = "cos"
    combine: str = "target"
    gamma: tuple[int, ...] = ()
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    max_new_tokens: int = 64
    batch_size: int = 1
    dtype: str = "auto"  # what the advice was measured in ('bfloat16', ...); auto = not tied to one
    proposer: str = "model"  # model (model 0 drafts) | ngram:N_MIN,N_MAX (prompt lookup, k = gamma_0) |
    #                          ngram+model:N_MIN,N_MAX,K (lookup of up to K, model 0 drafts gamma_0 on a miss)
    policy: str = "fixed"  # model 0's draft length: fixed | heuristic | confidence:T
    extra: dict[str, Any] = field(default_factory=dict)  # method-specific settings (kept verbatim)

    def __post_init__(self) -> None:
        """Every field is checked here, once: types, finiteness, ranges (``ConfigError`` naming the field)."""
        if isinstance(self.models, (str, bytes)) or not isinstance(self.models, (list, tuple)):
            raise ConfigError(f"models must be a list of model names, got {checks.show(self.models)}")
        self.models = tuple(checks.text(m, "every model name") for m in self.models)
        if not isinstance(self.extra, dict):
            raise ConfigError(f"extra must be a JSON object, got {checks.show(self.extra)}")
        if self.method not in METHODS:
            raise ConfigError(f"unknown method {checks.show(self.method)}: use one of {', '.join(METHODS)}")
        checks.seed(self.seed)
        checks.integer(self.batch_size, "batch size", lo=1)
        gamma = None if isinstance(self.gamma, (list, tuple)) and not self.gamma else self.gamma
        given = None if isinstance(self.combine, str) else self.combine  # a Combination object (custom): kept
        if self.models:
            self.gamma, self.combine = validate_settings(
                len(self.models), self.method, self.combine, gamma, self.temperature, self.top_k, self.top_p,
                self.max_new_tokens, self.proposer, self.policy)
            if given is not None:
                from spectune.decoding.combine import parse_combination

                self._combination = parse_combination(given, len(self.models))
        else:  # a partial config (e.g. a base that a caller completes): no model-dependent checks
            validate_settings(1, "standard", "target", None, self.temperature, self.top_k, self.top_p,
                              self.max_new_tokens)
            self.gamma = () if gamma is None else parse_gamma(gamma, len(gamma) if isinstance(gamma, (list, tuple))
                                                              else 1)

        prop, pol = parse_proposer(self.proposer), parse_policy(self.policy)
        self.proposer, self.policy = prop.spec, pol.spec
        self._proposer, self._policy = (self.proposer, prop), (self.policy, pol)  # .proposing, .draft_policy

        if self.dtype not in DTYPES:
            raise ConfigError(f"unknown dtype {checks.show(self.dtype)}: use {', '.join(DTYPES)}")

    @property
    def combination(self) -> Any:
        """The parsed ``Combination`` of ``combine`` for these models (parsed once; a custom one as given)."""
        if getattr(self, "_combination", None) is None:
            from spectune.decoding.combine import parse_combination

            self._combination = parse_combination(self.combine, len(self.models))
        return self._combination

    @property
    def proposing(self) -> Any:
        """The parsed proposer of ``proposer`` (a ``decoding.proposers.Proposer``: ``MODEL`` where model 0 drafts,
        an ``NgramProposer`` for a lookup)."""
        return self._parsed("_proposer", self.proposer, parse_proposer)

    @property
    def draft_policy(self) -> Any:
        """The parsed draft-length policy of ``policy`` (a ``DraftPolicy``)."""
        return self._parsed("_policy", self.policy, parse_policy)

    def _parsed(self, slot: str, text: str, parse: Any) -> Any:
        """``parse(text)``, kept in ``slot`` beside the text it parsed: the checks parsed it once; a field changed
        since is parsed again, never answered with a stale object."""
        cached = getattr(self, slot, None)
        if cached is None or cached[0] != text:
            cached = (text, parse(text))
            setattr(self, slot, cached)
        return cached[1]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["models"], d["gamma"] = list(self.models), list(self.gamma)
        for key, default in (("proposer", "model"), ("policy", "fixed")):  # written only when used: files that
            if d[key] == default:  # do not use them stay readable by older spectune and byte-identical
                del d[key]
        return {"schema": CONFIG_SCHEMA, **d}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "DecodeConfig":
        if not isinstance(d, dict):
            raise ConfigError(f"a config must be a JSON object, got {checks.show(d)}")
        d = dict(d)
        schema = d.pop("schema", CONFIG_SCHEMA)
        if schema != CONFIG_SCHEMA:
            raise ConfigError(f"unknown config schema '{schema}' (expected {CONFIG_SCHEMA})")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"unknown config keys: {', '.join(unknown)}")
        return cls(**d)

    def save(self, path: str | os.PathLike) -> Path:
        return write_json_atomic(path, self.to_dict())

    @classmethod
    def load(cls, path: str | os.PathLike) -> "DecodeConfig":
        d = read_json_object(path, "config")
        try:
            return cls.from_dict(d)
        except ConfigError as e:
            raise ConfigError(f"config file '{Path(path).expanduser()}': {e}") from None


def read_json_object(path: str | os.PathLike, what: str) -> dict[str, Any]:
    """The JSON object in file ``path``; a one-line ``ConfigError`` naming the ``what`` file otherwise."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError(f"{what} file '{p}' does not exist")
    try:
        d = json.loads(p.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{what} file '{p}' is not valid JSON: {e}") from None
    if not isinstance(d, dict):
        raise ConfigError(f"{what} file '{p}' must hold a JSON object")
    return d


def write_json_atomic(path: str | os.PathLike, obj: Any) -> Path:
    """Write JSON to a temp file beside ``path`` and rename it into place (never a half-written file)."""
    return write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to a temp file beside ``path`` and rename it into place (never a half-written file)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return p
