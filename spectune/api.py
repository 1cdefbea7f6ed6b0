"""Python API: ``spectune.generate`` mirrors ``spectune generate``; ``spectune.recommend`` mirrors ``spectune
recommend`` (calibrating first when no profile matches: the one place that knows both calibration and tuning).

The top of the package's layers (``tests/test_import_graph.py``): decoders are built by ``spectune.decoder``,
profiles measured by ``spectune.calibration`` and searched by ``spectune.tune``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from spectune import checks
from spectune.bench.engine_runs import measure_in_engine
from spectune.config import DecodeConfig
from spectune.decoder import build_decoder, check_positions, decode_config, encode, encode_prompt
from spectune.decoding.stats import DecodeStats
from spectune.errors import ConfigError, DecodeError
from spectune.models import load_models, load_tokenizer
from spectune.models.loading import dtype_line
from spectune.profile import pick_runtime


@dataclass
class GenerateResult:
    token_ids: list[int]  # generated ids only (prompt excluded)
    text: str
    stats: DecodeStats

    def to_dict(self) -> dict[str, Any]:
        return {"token_ids": self.token_ids, "text": self.text, "stats": self.stats.to_dict()}


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


def generate_batch(models: Sequence[Any], prompts: Sequence[str | Sequence[int]], config: DecodeConfig | None = None,
                   *, ignore_eos: bool = False, device: str = "cpu", profile: Any = None, dtype: str = "auto",
                   runtime: str = "auto", **settings: Any) -> BatchResult:
    """Decode many prompts, ``batch_size`` at a time (default 8) in one decode loop (ragged: per-sequence
    acceptance).

    Prompt ``i`` uses seed ``seed + i``, so its output does not depend on the batch it ran in.
    Settings as in ``generate`` (``config`` and keywords over it); the result says which dtype each model ran in
    and why, and which runtime ran.
    """
    if config is None:
        settings.setdefault("batch_size", 8)
    # cheap checks first: a typo in a setting is reported before any model loads
    cfg = decode_config(models, config, settings)
    checks.integer(cfg.batch_size, "batch size", lo=1, hi=checks.MAX_BATCH)
    if profile is not None and cfg.method != "sv":
        raise ConfigError(f"a profile is only used by method sv, not {cfg.method}: drop --profile or use --method sv")
    if not prompts:
        raise ConfigError("no prompts given")
    runtime = pick_runtime(runtime, device, models, min(cfg.batch_size, len(prompts)))
    loaded = load_models(models, device=device, dtype=dtype)
    dec = build_decoder(loaded, cfg, ignore_eos=ignore_eos, device=device, profile=profile, runtime=runtime)
    tok = loaded[-1].tokenizer
    ids = [encode(tok, p) for p in prompts]
    check_positions(loaded, ids, cfg.max_new_tokens)
    results, total, compile_s = _decode_all(dec, tok, ids, cfg.max_new_tokens, cfg.batch_size, cfg.seed)
    return BatchResult(results, total, {m.name: m.dtype for m in loaded}, dtype_line(loaded), runtime, compile_s)


def _decode_all(dec: Any, tok: Any, ids: list[list[int]], max_new_tokens: int, batch_size: int, seed: int
                ) -> tuple[list[GenerateResult], DecodeStats, float]:
    """(a result per prompt, the merged stats, seconds spent compiling) of ``dec`` over ``ids`` in batches; a
    failure mid-way is a ``DecodeError`` that keeps every token generated before it."""
    results: list[GenerateResult] = []
    total: DecodeStats | None = None
    compile_s = 0.0
    batches = dec.batches(ids, max_new_tokens, batch_size, seed)
    while True:
        try:
            outs, per_seq, st = next(batches)
        except StopIteration:
            break
        except Exception as e:  # noqa: BLE001 - keep what was generated (a late OOM must not lose it)
            done = [r.token_ids for r in results] + dec.partial_outputs()
            raise DecodeError(f"decoding failed after {sum(map(len, done))} generated tokens "
                              f"({type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''})",
                              [tok.decode(o, skip_special_tokens=True) for o in done], done) from e
        results += [GenerateResult(o, tok.decode(o, skip_special_tokens=True), s) for o, s in zip(outs, per_seq)]
        total = st if total is None else (total.merge(st) or total)
        compile_s += sum(getattr(r, "compile_seconds", 0.0) for r in dec.runners)
    assert total is not None
    return results, total, compile_s


def generate(models: Sequence[Any], prompt: str | Sequence[int], config: DecodeConfig | None = None, *,
             ignore_eos: bool = False, device: str = "cpu", profile: Any = None, dtype: str = "auto",
             runtime: str = "auto", **settings: Any) -> GenerateResult:
    """Decode ``prompt`` with ``config`` (a ``DecodeConfig``, e.g. ``DecodeConfig.load`` of a recommendation; its
    model names are ignored: ``models`` run) and any of its decoding fields given by keyword over it (None: the
    config's value). Without a config, ``DecodeConfig``'s defaults: method ``cos``, combination ``target``.

    ``models`` items: bundled names, local directories, ``LoadedModel`` or ``(model, tokenizer)`` pairs (smallest
    first; the first is the default proposer).
    Settings (``DecodeConfig`` fields, declared there once): ``method``; ``combine``: ``"target"``, ``"we:W1,W2"``,
    ``"cd:MU"`` or a ``Combination`` (see ``Combination.custom``); ``gamma``: per-model proposal lengths (``"5,1"``,
    ``[5, 1]``; default 5 for the first model, 1 for others); ``temperature``, ``top_k``, ``top_p``, ``seed``,
    ``max_new_tokens``; ``proposer``: ``model`` (the first model drafts) or ``ngram:N_MIN,N_MAX`` (prompt lookup of
    up to gamma_0 tokens, method ``sd``; ``models`` may then be the target alone); ``policy``: model 0's draft
    length, ``fixed``, ``heuristic`` (HF's +2 / -1 schedule) or ``confidence:T`` (stop below draft prob T).
    ``dtype``: ``auto`` (each model's config dtype where this device computes it natively -- CUDA with bf16, a
    CPU with avx512_bf16 / amx_bf16 --, else float32), float32, bfloat16 or float16.
    ``runtime``: ``auto`` (compiled on CUDA; on a CPU what measured faster here: ``profile.pick_runtime``), ``eager``,
    ``compiled`` (a static KV cache and ``torch.compile``d forwards, CUDA graphs on CUDA) or ``llamacpp``
    (llama.cpp's kernels over a GGUF of the same weights; ``spectune.decoding.runtime``).
    Output tokens are an exact sample of the combined distribution r (greedy: its argmax at each step).
    """
    res = generate_batch(models, [prompt], config, ignore_eos=ignore_eos, device=device, profile=profile, dtype=dtype,
                         runtime=runtime, **{**settings, "batch_size": 1})
    return GenerateResult(res.results[0].token_ids, res.results[0].text, res.stats)


def recommend(models: Sequence[str], *, calibrate_missing: bool = True,
              calibrate_kwargs: dict[str, Any] | None = None, engine: Any = None, **kwargs: Any):
    """``spectune recommend``: ``spectune.tune.recommend.recommend`` (every keyword argument but these three is
    its own), calibrating first when no profile of these models matches this machine, unless
    ``calibrate_missing`` is False (then a ``ProfileError``). ``calibrate_kwargs`` go to ``spectune.calibrate``
    (``workload`` and ``dtype`` default to recommend's). ``engine`` (``spectune.engines.EngineSettings``):
    advise for that serving engine, priced on its engine profile and validated in it (never calibrated here)."""
    from spectune.tune.recommend import EngineAdvice
    from spectune.tune.recommend import recommend as search

    if engine is not None:
        return search(models, calibrate_missing=None, engine=EngineAdvice(engine, _engine_measure(engine)), **kwargs)

    def calibrate_now(models: list[str], **settings: Any):
        from spectune.calibration import calibrate

        combine, temperature = settings.pop("combine"), settings.pop("temperature")
        return calibrate(models, combine=combine, temperature=temperature, **{**settings, **(calibrate_kwargs or {})})

    return search(models, calibrate_missing=calibrate_now if calibrate_missing else None, **kwargs)


def _engine_measure(engine: Any):
    """``EngineAdvice.measure`` for ``engine``: each config exported, served and measured on the prompts (the
    runtime's encoding), its decode goodput repeat by repeat (``measure_in_engine``)."""

    def measure(configs: Sequence[Any], prompts: Sequence[str], say: Any) -> list[list[float]]:
        tok = load_tokenizer(configs[0].models[-1])
        return measure_in_engine(configs, engine, [encode_prompt(tok, p) for p in prompts], say=say)

    return measure
