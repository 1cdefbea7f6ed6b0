"""``--dtype auto``, measured: where the flags rule picked a half dtype on a CPU, time it against float32.

A CPU may have bf16 instructions and still run some bf16 kernels slower than fp32 (an old oneDNN, odd shapes).
Calibration then times the largest model once in each candidate dtype -- batch 1, context 64, k = 1 and
k = max_k, the median of a few repeats, through the same timer as the latency stage -- and keeps the faster;
the profile records both timings and the choice (``settings.dtype_choice``).
"""
from __future__ import annotations

from typing import Any

from spectune.calibration.latency import LatencyGrid, measure_chunk
from spectune.machine import HALF


def needs_probe(requested: str, device: str, dtypes: list[str]) -> bool:
    """Only ``auto`` on a CPU that chose a half dtype for some model is worth a measurement."""
    return requested == "auto" and not str(device).startswith("cuda") and any(d in HALF for d in dtypes)


def time_dtypes(models: dict[str, Any], max_k: int, repeats: int = 3, seed: int = 0) -> dict[str, float]:
    """``{dtype: seconds of one k=1 plus one k=max_k forward}`` for the same model loaded in each dtype."""
    grid = LatencyGrid(batch_sizes=(1,), max_k=max_k, contexts=(64,), repeats=repeats, seed=seed,
                       dense_k_max_batch=0)
    rows = measure_chunk(models, 1, 64, grid)
    return {name: sum(r["median_s"] for r in rows if r["model"] == name and r["k"] in (1, max_k))
            for name in models}


def choose(timings: dict[str, float], chosen: str) -> tuple[str, str]:
    """(the faster dtype, why) given the flags rule's ``chosen`` half dtype and the timings."""
    best = min(timings, key=timings.get)
    ms = ", ".join(f"{d} {t * 1e3:.1f} ms" for d, t in sorted(timings.items()))
    if best == chosen:
        return chosen, f"measured faster than float32 (k=1 + k=max forward: {ms})"
    return best, f"the flags rule chose {chosen}, but {best} measured faster (k=1 + k=max forward: {ms})"


def probe(loaded: list[Any], specs: list[Any], device: str, max_k: int, load: Any) -> dict[str, Any] | None:
    """Time the largest model in its chosen half dtype and in float32; ``load(specs, dtype)`` reloads. Returns
    ``{"dtype", "why", "seconds": {dtype: s}}``, or None when there is nothing to decide."""
    big = loaded[-1]
    if big.dtype not in HALF:
        return None
    fp32 = load([specs[-1]], "float32")[0]
    timings = time_dtypes({big.dtype: big.model, "float32": fp32.model}, max_k)
    dtype, why = choose(timings, big.dtype)
    return {"dtype": dtype, "why": why, "seconds": timings}
