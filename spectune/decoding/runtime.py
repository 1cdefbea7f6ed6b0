"""Which runtime runs the models' forwards, and the one factory that builds a runner for it.

* ``eager``    -- :class:`~spectune.decoding.batch_cache.BatchedRunner`: transformers' eager forward over a
                  growing ``DynamicCache``. The reference: every exactness test runs on it.
* ``compiled`` -- :class:`~spectune.decoding.static_cache.StaticRunner`: a preallocated KV cache, feeds padded
                  to k buckets, the forward compiled with ``torch.compile`` (on CUDA with CUDA graphs,
                  ``mode="reduce-overhead"``). Same interface, same logits up to float rounding.
* ``llamacpp`` -- :class:`~spectune.decoding.llamacpp_runner.LlamaCppRunner`: llama.cpp's kernels (through
                  llama-cpp-python) over a GGUF of the same weights, on a CPU; a ragged batch is one
                  ``llama_decode`` call, rollback drops cache cells. At the memory-bandwidth limit on CPUs.
* ``auto``     -- ``compiled`` on CUDA, ``eager`` on a CPU here; where the models are known by name,
                  ``spectune.profile.pick_runtime`` picks on a CPU what this machine's profiles measured faster
                  (``llamacpp`` where its profile prices the target's forward at the run's batch size below
                  the eager one's). Never
                  ``compiled`` on a CPU: a compiled step was roughly 15-20 % faster per forward (SmolLM2, batch
                  1, 2 cores), but each of a model's four graphs took 35-40 s to compile, which a decode of a few
                  hundred tokens never earns back (``examples/runtime_compare.py`` measures them; docs/gpu.md).

The runners take ``feeds: {seq: [ids]}`` and return float32 CPU logits per sequence; ``rollback``,
``release``, ``maybe_compact``, ``n``, ``dtype`` and the counters of :class:`Counted`.
"""
from __future__ import annotations

from typing import Any

from spectune.errors import ConfigError

RUNTIMES = ("auto", "eager", "compiled", "llamacpp")


class Counted:
    """The counters every runner keeps, which the decoder's stats and calibration read: ``calls``, ``seconds``
    (forwards of warm shapes), ``tokens`` (real tokens fed), ``by_k`` (feed length K -> [calls, seconds]: L(b, K) as
    the loop paid it), ``prefill_seconds`` (forwards that fed some row its prompt: the cost model prices decoding
    only) and ``compile_seconds`` (the compiled runtime's first calls of a shape; 0 elsewhere). The runner keeps
    ``n`` (tokens per row), which says whether a forward fed a prompt."""

    n: list[int]

    def _start_counts(self) -> None:
        self.calls, self.seconds, self.tokens, self.prefill_seconds, self.compile_seconds = 0, 0.0, 0, 0.0, 0.0
        self.by_k: dict[int, list[float]] = {}

    def _count(self, feeds: dict[int, list[int]], k: int, dt: float, tokens: int) -> None:
        """One forward of ``dt`` seconds over feeds of at most ``k`` tokens, ``tokens`` real ones, counted (before
        ``n`` grows by the feeds)."""
        self.calls += 1
        self.tokens += tokens
        self.seconds += dt
        if any(self.n[s] == 0 for s in feeds):
            self.prefill_seconds += dt
        acc = self.by_k.setdefault(k, [0, 0.0])
        acc[0] += 1
        acc[1] += dt


def resolve_runtime(requested: str | None, device: Any = "cpu") -> str:
    """``eager`` or ``compiled`` for a run on ``device`` (see the module docstring); a bad name, or ``compiled``
    on a device other than cpu / cuda, is a one-line ``ConfigError``."""
    name = "auto" if requested is None else requested
    if not isinstance(name, str) or name.strip().lower() not in RUNTIMES:
        raise ConfigError(f"invalid runtime {name!r}: expected one of {', '.join(RUNTIMES)}")
    name = name.strip().lower()
    kind = str(device).split(":")[0]
    if name == "auto":
        return "compiled" if kind == "cuda" else "eager"
    if name == "compiled" and kind not in ("cpu", "cuda"):
        raise ConfigError(f"the compiled runtime runs on cpu or cuda, not {device}: use --runtime eager")
    if name == "llamacpp" and kind != "cpu":
        raise ConfigError(f"the llamacpp runtime runs on the cpu, not {device}: use --device cpu")
    return name


def make_runner(runtime: str, model: Any, rows: int, device: Any = "cpu", max_len: int = 512) -> Any:
    """A runner of ``model`` over ``rows`` sequences for ``runtime`` (``eager``, ``compiled``, ``llamacpp``;
    ``auto`` is resolved for ``device``). ``max_len``: the longest sequence expected (sizes the cache)."""
    runtime = resolve_runtime(runtime, device)
    if runtime == "llamacpp":
        from spectune.decoding.llamacpp_runner import LlamaCppRunner

        return LlamaCppRunner(model, rows, max_len=max_len)
    if runtime == "compiled":
        from spectune.decoding.static_cache import StaticRunner

        return StaticRunner(model, rows, device, max_len=max_len)
    from spectune.decoding.batch_cache import BatchedRunner

    return BatchedRunner(model, rows, device)
