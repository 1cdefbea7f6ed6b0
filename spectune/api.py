"""Python API: ``spectune.generate`` mirrors ``spectune generate``."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from spectune.config import validate_settings
from spectune.decoding.combine import Combination, parse_combination
from spectune.decoding.loop import Decoder, SamplingParams
from spectune.decoding.policy import parse_policy
from spectune.decoding.proposers import parse_proposer
from spectune.decoding.stats import DecodeStats
from spectune.decoding.sv import SVPolicy
from spectune.errors import ConfigError, DecodeError, ProfileError
from spectune.models import LoadedModel, load_models
from spectune.models.loading import dtype_line


@dataclass
class GenerateResult:
    token_ids: list[int]  # generated ids only (prompt excluded)
    text: str
    stats: DecodeStats

    def to_dict(self) -> dict[str, Any]:
        return {"token_ids": self.token_ids, "text": self.text, "stats": self.stats.to_dict()}


def build_decoder(
    models: Sequence[LoadedModel],
    *,
    method: str = "cos",
    combine: str | Combination = "target",
    gamma: Any = None,
    temperature: float = 0.0,
    top_k: int = 0,
    top_p: float = 1.0,
    ignore_eos: bool = False,
    device: str = "cpu",
    profile: Any = None,
    sv_policy: SVPolicy | None = None,
    proposer: str | None = None,
    policy: str | None = None,
    runtime: str = "auto",
) -> Decoder:
    """A ``Decoder`` for already-loaded, compatible models (validates every setting first).

    ``sv`` needs companion bins and latencies: ``sv_policy``, or a ``profile`` (object or path), or else the
    calibrated profile of these models on this machine, in their dtype, found by ``find_profile``.
    ``proposer``: model (None) or ``ngram:N_MIN,N_MAX`` (method sd); ``policy``: fixed (None), heuristic or
    ``confidence:T`` (see ``spectune.decoding.policy``). ``runtime``: ``eager``, ``compiled`` or ``auto`` (see
    ``spectune.decoding.runtime``); an sv profile is looked up for it.
    """
    from spectune.decoding.runtime import resolve_runtime

    runtime = resolve_runtime(runtime, device)
    n = len(models)
    gamma_t, _ = validate_settings(n, method, combine, gamma, temperature, top_k, top_p, 1, proposer, policy)
    comb = parse_combination(combine, n)
    if method == "sv" and sv_policy is None:
        names = [m.name for m in models]
        dtypes = [m.dtype for m in models]
        prof = (_as_profile(profile, device, dtypes, runtime) if profile is not None
                else find_profile(names, device, dtypes, runtime))
        sv_policy = SVPolicy.from_profile(prof, names[0], names[1], [names[i] for i in comb.uses], gamma_t[0])
    eos = None if ignore_eos else models[-1].tokenizer.eos_token_id
    return Decoder(
        [m.model for m in models], [m.name for m in models], method, comb, gamma_t,
        SamplingParams(temperature, top_k, top_p), eos, device=device, sv_policy=sv_policy,
        proposer=parse_proposer(proposer), policy=parse_policy(policy), runtime=runtime,
    )


def _as_profile(profile: Any, device: str = "cpu", dtypes: Sequence[str] | None = None, runtime: str | None = None):
    """``profile`` (a Profile or its directory), loaded; one warning when it was measured on another machine,
    in other dtypes or with another runtime than this run's."""
    import warnings

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
    (None: any; see ``spectune.profile.find_profile``), loaded."""
    from spectune.profile import find_profile as _find

    path, why = _find(list(model_names), device, dtypes, runtime)
    if path is None:
        raise ProfileError(f"no profile of {','.join(model_names)} measured on this machine"
                           f"{' (' + why + ')' if why else ''}: run spectune calibrate --models "
                           f"{','.join(model_names)}")
    return _as_profile(path, device, dtypes, runtime)


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


@dataclass
class BatchResult:
    results: list[GenerateResult]  # one per prompt, in order; each .stats holds that sequence's acceptance
    stats: DecodeStats  # the whole run: forward calls/times of every model, tokens/s over all prompts
    dtypes: dict[str, str] = field(default_factory=dict)  # model name -> the dtype it ran in
    dtype_note: str = ""  # one line: each model's dtype and why (``--dtype auto``'s rule)
    runtime: str = "eager"  # the runtime that ran the forwards
    compile_seconds: float = 0.0  # compiled runtime: compiling and capturing its steps (not in stats' forward times)

    def to_dict(self) -> dict[str, Any]:
        return {
            "runtime": self.runtime,
            "compile_seconds": round(self.compile_seconds, 3),
            "results": [r.to_dict() for r in self.results],
            "stats": self.stats.to_dict(),
            "accepted_length_per_sequence": [round(r.stats.mean_accepted_length, 4) for r in self.results],
        }


def generate_batch(
    models: Sequence[Any],
    prompts: Sequence[str | Sequence[int]],
    *,
    batch_size: int = 8,
    method: str = "cos",
    combine: str | Combination = "target",
    gamma: Any = None,
    temperature: float = 0.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int = 0,
    max_new_tokens: int = 64,
    ignore_eos: bool = False,
    device: str = "cpu",
    profile: Any = None,
    dtype: str = "auto",
    proposer: str | None = None,
    policy: str | None = None,
    runtime: str = "auto",
) -> BatchResult:
    """Decode many prompts, ``batch_size`` at a time in one decode loop (ragged: per-sequence acceptance).

    Prompt ``i`` uses seed ``seed + i``, so its output does not depend on the batch it ran in.
    Arguments as in ``generate``; the result says which dtype each model ran in and why, and which runtime ran.
    """
    from spectune import checks
    from spectune.decoding.runtime import resolve_runtime

    checks.integer(batch_size, "batch size", lo=1, hi=checks.MAX_BATCH)
    checks.seed(seed)
    if profile is not None and method != "sv":
        raise ConfigError(f"a profile is only used by method sv, not {method}: drop --profile or use --method sv")
    if not prompts:
        raise ConfigError("no prompts given")
    # cheap checks first: a typo in a setting is reported before any model loads
    validate_settings(len(models), method, combine, gamma, temperature, top_k, top_p, max_new_tokens, proposer,
                      policy)
    runtime = resolve_runtime(runtime, device)
    loaded = load_models(models, device=device, dtype=dtype)
    dec = build_decoder(
        loaded, method=method, combine=combine, gamma=gamma, temperature=temperature, top_k=top_k, top_p=top_p,
        ignore_eos=ignore_eos, device=device, profile=profile, proposer=proposer, policy=policy, runtime=runtime,
    )
    tok = loaded[-1].tokenizer
    ids = [encode(tok, p) for p in prompts]
    check_positions(loaded, ids, max_new_tokens)
    results: list[GenerateResult] = []
    total: DecodeStats | None = None
    compile_s = 0.0
    for first in range(0, len(ids), batch_size):
        chunk = ids[first : first + batch_size]
        try:
            outs, per_seq, st = dec.generate_batch(chunk, max_new_tokens,
                                                   [seed + first + i for i in range(len(chunk))])
        except Exception as e:  # noqa: BLE001 - keep what was generated (a late OOM must not lose it)
            done = [r.token_ids for r in results] + dec.partial_outputs()
            raise DecodeError(f"decoding failed after {sum(map(len, done))} generated tokens "
                              f"({type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''})",
                              [tok.decode(o, skip_special_tokens=True) for o in done], done) from e
        results += [GenerateResult(o, tok.decode(o, skip_special_tokens=True), s) for o, s in zip(outs, per_seq)]
        total = st if total is None else (total.merge(st) or total)
        compile_s += sum(getattr(r, "compile_seconds", 0.0) for r in dec.runners)
    assert total is not None
    return BatchResult(results, total, {m.name: m.dtype for m in loaded}, dtype_line(loaded), runtime, compile_s)


def check_positions(models: Sequence[LoadedModel], ids: Sequence[Sequence[int]], max_new_tokens: int) -> None:
    """Every prompt plus ``max_new_tokens`` fits the positions of the smallest model (checked before decoding:
    a model cannot attend past its positions, so the run would fail or degrade midway)."""
    from spectune.models.loading import max_positions

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


def generate(
    models: Sequence[Any],
    prompt: str | Sequence[int],
    *,
    method: str = "cos",
    combine: str | Combination = "target",
    gamma: Any = None,
    temperature: float = 0.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int = 0,
    max_new_tokens: int = 64,
    ignore_eos: bool = False,
    device: str = "cpu",
    profile: Any = None,
    dtype: str = "auto",
    proposer: str | None = None,
    policy: str | None = None,
    runtime: str = "auto",
) -> GenerateResult:
    """Decode ``prompt`` with ``method`` over ``models`` (smallest first; the first is the default proposer).

    ``models`` items: bundled names, local directories, ``LoadedModel`` or ``(model, tokenizer)`` pairs.
    ``combine``: ``"target"``, ``"we:W1,W2"``, ``"cd:MU"`` or a ``Combination`` (see ``Combination.custom``).
    ``gamma``: per-model proposal lengths (``"5,1"``, ``[5, 1]``); default 5 for the first model, 1 for others.
    ``dtype``: ``auto`` (each model's config dtype where this device computes it natively -- CUDA with bf16, a
    CPU with avx512_bf16 / amx_bf16 --, else float32), float32, bfloat16 or float16.
    ``proposer``: ``model`` (default: the first model drafts) or ``ngram:N_MIN,N_MAX`` (prompt lookup of up to
    gamma_0 tokens, method ``sd``; ``models`` may then be the target alone). ``policy``: model 0's draft length,
    ``fixed`` (default), ``heuristic`` (HF's +2 / -1 schedule) or ``confidence:T`` (stop below draft prob T).
    ``runtime``: ``auto`` (compiled on CUDA, eager on a CPU), ``eager`` or ``compiled`` (a static KV cache and
    ``torch.compile``d forwards, CUDA graphs on CUDA; ``spectune.decoding.runtime``).
    Output tokens are an exact sample of the combined distribution r (greedy: its argmax at each step).
    """
    res = generate_batch(
        models, [prompt], batch_size=1, method=method, combine=combine, gamma=gamma, temperature=temperature,
        top_k=top_k, top_p=top_p, seed=seed, max_new_tokens=max_new_tokens, ignore_eos=ignore_eos, device=device,
        profile=profile, dtype=dtype, proposer=proposer, policy=policy, runtime=runtime,
    )
    return GenerateResult(res.results[0].token_ids, res.results[0].text, res.stats)
