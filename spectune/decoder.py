"""The runtime decoder over loaded models, and how prompts reach it.

``build_decoder`` validates every setting and builds a ``spectune.decoding.loop.Decoder`` (``sv`` gets its
companion bins from a profile: given, or found by the one finder); ``encode`` / ``encode_prompt`` turn prompts
into token ids (a workload prompt in the tokenizer's chat template) and ``check_positions`` checks they fit the
models. Generation (``spectune.api``), calibration, tuning's validation runs and ``spectune bench`` all build
their decoders and encode their prompts here, so they decode alike. Layer: above ``config``, ``models`` and
``profile``; below ``calibrate`` and ``tune`` (see ``tests/test_import_graph.py``).
"""
from __future__ import annotations

import warnings
from typing import Any, Sequence

from spectune.config import DecodeConfig
from spectune.decoding.llamacpp_runner import GGUFModel
from spectune.decoding.loop import DecodePlan, Decoder, SamplingParams
from spectune.decoding.runtime import resolve_runtime
from spectune.decoding.sv_policy import SVPolicy
from spectune.errors import ConfigError, ProfileError
from spectune.models import LoadedModel
from spectune.models.gguf import gguf_for
from spectune.models.loading import max_positions
from spectune.workloads import load_workload


def build_decoder(models: Sequence[LoadedModel], config: DecodeConfig | None = None, *, ignore_eos: bool = False,
                  device: str = "cpu", profile: Any = None, sv_policy: SVPolicy | None = None, runtime: str = "auto",
                  **settings: Any) -> Decoder:
    """A ``Decoder`` for already-loaded, compatible models, running ``config`` (a ``DecodeConfig``; its models'
    names are ignored: these ``models`` run) with any of its decoding fields given by keyword over it
    (``method=``, ``combine=`` -- a spec or a ``Combination`` --, ``gamma=``, ``temperature=``, ``top_k=``, ``top_p=``,
    ``proposer=``, ``policy=``): every setting is checked once, by ``DecodeConfig``.

    ``sv`` needs companion bins and latencies: ``sv_policy``, or a ``profile`` (object or path), or else the
    calibrated profile of these models on this machine, in their dtype, found by ``find_profile``.
    ``runtime``: ``eager``, ``compiled``, ``llamacpp`` or ``auto`` (see ``spectune.decoding.runtime``); an sv
    profile is looked up for it.
    """
    runtime = resolve_runtime(runtime, device)
    cfg = decode_config(models, config, settings)
    comb = cfg.combination
    if cfg.method == "sv" and sv_policy is None:
        names = [m.name for m in models]
        dtypes = [m.dtype for m in models]
        prof = (as_profile(profile, device, dtypes, runtime) if profile is not None
                else find_profile(names, device, dtypes, runtime))
        sv_policy = SVPolicy.from_profile(prof, names[0], names[1], [names[i] for i in comb.uses], cfg.gamma[0])
    eos = None if ignore_eos else models[-1].tokenizer.eos_token_id
    plan = DecodePlan(cfg.method, comb, cfg.gamma, SamplingParams(cfg.temperature, cfg.top_k, cfg.top_p),
                      cfg.proposing, cfg.draft_policy, sv_policy)
    return Decoder(runner_models(models, runtime), [m.name for m in models], plan, eos, device=device, runtime=runtime)


SETTINGS = ("method", "combine", "gamma", "temperature", "top_k", "top_p", "seed", "max_new_tokens", "batch_size",
            "proposer", "policy")  # the DecodeConfig fields a caller may give by keyword (None: the default)


def decode_config(models: Sequence[Any], config: DecodeConfig | None, settings: dict[str, Any]) -> DecodeConfig:
    """The run's ``DecodeConfig`` for ``models`` (names, directories, loaded models or pairs): ``config`` (default:
    ``DecodeConfig``'s defaults) with ``settings`` (fields of ``SETTINGS``; a None value keeps the config's) over
    it, validated once here. A one-line ``ConfigError`` names an unknown setting or the first bad value."""
    from dataclasses import replace

    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        raise ConfigError(f"unknown decoding setting(s) {', '.join(unknown)}: use {', '.join(SETTINGS)}")
    given = {k: v for k, v in settings.items() if v is not None}
    names = tuple(m if isinstance(m, str) else str(getattr(m, "name", "") or f"model {i}")
                  for i, m in enumerate(models))
    if config is None:
        return DecodeConfig(models=names, **given)
    if not given and len(config.models) == len(names):
        return config  # already checked when it was made: the names only count the models here
    if config.combine == "custom" and "combine" not in given:
        given["combine"] = config.combination  # a custom Combination object is not a spec to re-parse
    return replace(config, models=names, **given)


def runner_models(models: Sequence[LoadedModel], runtime: str) -> list[Any]:
    """What each runtime's runners run: the loaded modules, or for ``llamacpp`` the GGUF of each model's weights
    in their own dtype (``spectune.models.gguf.gguf_for``: converted once and cached beside them), loaded once."""
    if runtime != "llamacpp":
        return [m.model for m in models]
    return [GGUFModel.load(gguf_for(str(getattr(m.model, "name_or_path", "") or m.name))) for m in models]


def as_profile(profile: Any, device: str = "cpu", dtypes: Sequence[str] | None = None,
               runtime: str | None = None):
    """``profile`` (a Profile or its directory), loaded; one warning when it was measured on another machine,
    in other dtypes or with another runtime than this run's."""
    from spectune.profile import Profile, ProfileHardwareWarning, load_profile, machine_mismatch

    prof = profile if isinstance(profile, Profile) else load_profile(profile, check_hardware=False)
    why = machine_mismatch(prof.meta, device, dtypes, runtime)
    if why:
        warnings.warn(f"profile '{prof.path}' does not describe this run: {why}", ProfileHardwareWarning,
                      stacklevel=3)
    return prof


def find_profile(model_names: Sequence[str], device: str = "cpu", dtypes: Sequence[str] | None = None,
                 runtime: str | None = None):
    """The calibrated profile of exactly these models measured on this machine in ``dtypes`` with ``runtime``
    (None: any; the one finder, ``spectune.profile.find_profiles``), loaded; a ``ProfileError`` naming the
    nearest candidate otherwise."""
    from spectune.profile import find_profiles

    found = find_profiles(list(model_names), device=device, dtypes=dtypes, runtime=runtime)
    if found.best is None:
        why = found.nearest
        raise ProfileError(f"no profile of {','.join(model_names)} measured on this machine"
                           f"{' (' + why + ')' if why else ''}: run spectune calibrate --models "
                           f"{','.join(model_names)}")
    return as_profile(found.best, device, dtypes, runtime)


def encode(tokenizer: Any, prompt: str | Sequence[int]) -> list[int]:
    """Prompt text (or ids) -> non-empty list of token ids."""
    ids = list(prompt) if not isinstance(prompt, str) else tokenizer(prompt, add_special_tokens=True)["input_ids"]
    if not ids:
        raise ConfigError("the prompt is empty: give at least one token of text")
    return [int(i) for i in ids]


def encode_prompt(tokenizer: Any, prompt: str, chat_template: bool = True) -> list[int]:
    """A workload prompt as calibration feeds it: wrapped as one user turn in the tokenizer's chat template
    when it has one and ``chat_template`` is set (instruct models answer raw text with end-of-turn at once),
    else raw. Calibration, validation and ``spectune bench`` encode through here, so they decode alike."""
    if chat_template and getattr(tokenizer, "chat_template", None):
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                               add_generation_prompt=True)
    return encode(tokenizer, prompt)


def encode_workload(tokenizer: Any, workload: str, split: str = "heldout", n: int | None = None) -> list[list[int]]:
    """The first ``n`` (all: None) prompts of ``workload``'s ``split`` as :func:`encode_prompt` feeds them; a
    one-line ``ConfigError`` when the split has none."""
    prompts = load_workload(workload).split(split)[:n]
    if not prompts:
        raise ConfigError(f"workload '{workload}' has no {'held-out' if split == 'heldout' else split} prompts")
    return [encode_prompt(tokenizer, p) for p in prompts]


def check_positions(models: Sequence[LoadedModel], ids: Sequence[Sequence[int]], max_new_tokens: int) -> None:
    """Every prompt plus ``max_new_tokens`` fits the positions of the smallest model (checked before decoding:
    a model cannot attend past its positions, so the run would fail or degrade midway)."""
    limits = [(n, m.name) for m in models if (n := max_positions(m.model)) is not None]
    if not limits:
        return
    limit, name = min(limits)
    for i, p in enumerate(ids):
        if len(p) + max_new_tokens > limit:
            which = f"prompt {i + 1} has" if len(ids) > 1 else "the prompt has"
            raise ConfigError(f"{which} {len(p)} tokens; with max-new-tokens {max_new_tokens} that needs "
                              f"{len(p) + max_new_tokens} positions, but model '{name}' has {limit}: shorten the "
                              "prompt or lower --max-new-tokens")
