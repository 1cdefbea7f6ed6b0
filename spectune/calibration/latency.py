"""Forward latency of every model with a warm KV cache, as a function of batch size b, new tokens k and context.

One *chunk* is one (batch size, context length) cell for every model: each model's ``DynamicCache`` is prefilled
with ``ctx`` random tokens at batch 1 and repeated to batch ``b`` (the contents do not change the cost), then
``model(input_ids=[b, k], cache=cache)`` is timed for k = 1..K and the k new entries are cropped away. The timed
call is the eager runtime's (``BatchedRunner.forward``): the same 4-D mask, explicit position ids, logits upcast
to float32; transformers' mask-less path is another kernel choice (on Zen 5 in bf16 up to 42 % slower at k = 1).
Small batch sizes time every k; larger ones k in {1, 2, 4, ..., K} (``LatencyGrid.k_values``).
Within a chunk the (model, k) order is shuffled afresh for every repeat, so slow phases of a shared machine
spread over all models instead of biasing one. CPU: ``time.perf_counter``; CUDA: CUDA events around the forward
plus a synchronize. Medians over repeats are reported with min / max / standard deviation.

Infeasible cells (out of memory, more positions than the model supports, or an estimated KV cache above half
of the free memory on CPU) are rows with ``feasible = False`` and a ``note``, never a crash; larger batch sizes
of a model that ran out of memory are skipped as infeasible.

The table's columns (``LATENCY_COLUMNS``), the cost coefficients derived from it (``cost_table``) and the
latency model fitted on it (``LatencyModel``) live in ``spectune.profile``: reading them needs no torch.
"""
from __future__ import annotations

import random
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import pandas as pd
import torch
from transformers import DynamicCache

from spectune.calibration.hardware import CpuWatch, mem_available_bytes
from spectune.decoding.batch_cache import feed_mask
from spectune.decoding.hf_compat import cache_of, forward
from spectune.decoding.llamacpp_runner import LlamaCppRunner
from spectune.decoding.static_cache import StaticRunner, k_bucket


@dataclass(frozen=True)
class LatencyGrid:
    batch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    max_k: int = 8
    contexts: tuple[int, ...] = (64, 256)
    repeats: int = 3
    warmup: int = 1
    seed: int = 0
    dense_k_max_batch: int = 2  # every k in 1..K up to this batch size; above it k in {1, 2, 4, ..., K}
    spread_limit: float = 0.25  # a cell whose (max - min) / median exceeds this gets more repeats ...
    max_repeats: int = 7  # ... up to this many (extra_pass)
    quiet_limit: float = 0.1  # a chunk is timed again while others took more than this share of the CPU ...
    slow_limit: float = 0.15  # ... or while a reference forward ran this much slower than its median ...
    quiet_attempts: int = 3  # ... at most this many times in all (measure_quiet)

    def chunks(self) -> list[tuple[int, int]]:
        """(batch, ctx) cells in measuring order: small batches first, so memory limits show up last."""
        return [(b, c) for b in sorted(self.batch_sizes) for c in sorted(self.contexts)]

    def k_values(self, batch: int) -> list[int]:
        """New-token counts timed at ``batch``: all of 1..K for small batches (where the draft length is chosen
        token by token), powers of two plus K above (L is close to linear in k there; ``LatencyModel``
        interpolates linearly between them). The large-batch cells dominate the stage's time."""
        if batch <= self.dense_k_max_batch:
            return list(range(1, self.max_k + 1))
        return sorted({2 ** i for i in range(self.max_k.bit_length()) if 2 ** i <= self.max_k} | {self.max_k})

    def weight(self, batch: int) -> float:
        """Relative cost of one chunk (for progress ETAs): a fixed overhead per call plus the tokens computed."""
        return float(sum(4 + batch * k for k in self.k_values(batch)))


def _is_oom(e: BaseException) -> bool:
    if isinstance(e, MemoryError):
        return True
    oom = getattr(torch.cuda, "OutOfMemoryError", None)
    if oom is not None and isinstance(e, oom):
        return True
    return isinstance(e, RuntimeError) and "out of memory" in str(e).lower()


def _kv_bytes(model: Any, batch: int, tokens: int) -> int:
    cfg = model.config
    layers = getattr(cfg, "num_hidden_layers", 1)
    heads = getattr(cfg, "num_key_value_heads", None) or getattr(cfg, "num_attention_heads", 1)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // getattr(cfg, "num_attention_heads", 1)
    elt = next(model.parameters()).element_size()
    return 2 * layers * heads * head_dim * batch * tokens * elt


def _infeasible_reason(model: Any, batch: int, ctx: int, max_k: int, device: torch.device) -> str | None:
    max_pos = getattr(model.config, "max_position_embeddings", None)
    if max_pos is not None and ctx + max_k > max_pos:
        return f"ctx+k={ctx + max_k} exceeds max_position_embeddings={max_pos}"
    if device.type == "cpu":
        need = _kv_bytes(model, batch, ctx + max_k) + batch * max_k * model.config.vocab_size * 4 * 2
        free = mem_available_bytes()
        if free is not None and need > free // 2:
            return f"needs ~{need / 2**30:.1f} GiB, more than half of the {free / 2**30:.1f} GiB available"
    return None


def _timer(device: torch.device) -> Callable[[Callable[[], Any]], float]:
    if device.type == "cuda":
        def run(fn):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize(device)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize(device)
            return start.elapsed_time(end) / 1000.0
    else:
        def run(fn):
            t0 = time.perf_counter()
            fn()
            return time.perf_counter() - t0
    return run


def _prefill(model: Any, batch: int, ctx: int, device: torch.device, gen: torch.Generator):
    ids = torch.randint(0, model.config.vocab_size, (1, ctx), generator=gen).to(device)
    cache = DynamicCache(config=model.config)
    cache = cache_of(forward(model, cache, input_ids=ids, use_cache=True))
    if batch > 1:
        cache.batch_repeat_interleave(batch)
    return cache


def _runtime_feed(model: Any, batch: int, ctx: int, k: int, device: torch.device) -> dict[str, torch.Tensor]:
    """The keyword arguments of the eager runtime's forward (``BatchedRunner.forward``) for k new tokens of every
    row over ``ctx`` valid slots: its 4-D mask, explicit position_ids and cache_position. The timed call then
    upcasts the logits to float32, as the runtime does before any sampling math."""
    dtype = next(model.parameters()).dtype
    cache_pos = torch.arange(ctx, ctx + k, device=device)
    mask = feed_mask(torch.ones(batch, ctx, dtype=torch.bool), [k] * batch, k, dtype).to(device)
    pos = cache_pos[None].expand(batch, k).contiguous()
    return dict(attention_mask=mask, position_ids=pos, cache_position=cache_pos)


def _row(name: str, batch: int, ctx: int, k: int, times: Sequence[float] | None, note: str = "") -> dict:
    """One latency row: the statistics of ``times``, or an infeasible row with ``note`` when there are none."""
    if not times:
        return dict(model=name, batch=batch, ctx=ctx, k=k, median_s=np.nan, mean_s=np.nan, std_s=np.nan,
                    min_s=np.nan, max_s=np.nan, repeats=0, feasible=False, note=note)
    return dict(model=name, batch=batch, ctx=ctx, k=k, median_s=statistics.median(times),
                mean_s=statistics.fmean(times), std_s=statistics.pstdev(times) if len(times) > 1 else 0.0,
                min_s=min(times), max_s=max(times), repeats=len(times), feasible=True, note="")


def measure_chunk(models: dict[str, Any], batch: int, ctx: int, grid: LatencyGrid, device: str | torch.device = "cpu",
                  skip: dict[str, str] | None = None, runtime: str = "eager",
                  compile_log: dict[str, float] | None = None) -> list[dict]:
    """Time every model at one (batch, ctx) cell for k = 1..max_k. ``skip``: model -> reason it is infeasible.
    ``runtime``: ``eager`` times transformers' forward over a ``DynamicCache``; ``compiled`` the static runtime's
    forward (see :func:`_measure_compiled`), whose compile time is added to ``compile_log["seconds"]``;
    ``llamacpp`` llama.cpp's (``models``: GGUF models, see :func:`_measure_llamacpp`)."""
    if runtime == "compiled":
        return _measure_compiled(models, batch, ctx, grid, torch.device(device), skip, compile_log)
    if runtime == "llamacpp":
        return _measure_llamacpp(models, batch, ctx, grid, skip)
    return _measure_eager(models, batch, ctx, grid, device, skip)


@torch.inference_mode()
def _measure_eager(models: dict[str, Any], batch: int, ctx: int, grid: LatencyGrid, device: str | torch.device,
                   skip: dict[str, str] | None) -> list[dict]:
    """The eager runtime's cell: each model's ``DynamicCache`` prefilled, its forward timed per k with the
    runtime's own mask and positions (:func:`_runtime_feed`)."""
    dev = torch.device(device)
    order_rng = random.Random(grid.seed * 7919 + batch * 31 + ctx)
    timer = _timer(dev)
    ks = grid.k_values(batch)
    caches, inputs, rows = _eager_cell(models, batch, ctx, grid, dev, skip)
    failed: dict[str, str] = {}
    times: dict[tuple[str, int], list[float]] = {(n, k): [] for n in caches for k in ks}

    def step(name: str, k: int) -> float:
        m, cache = models[name], caches[name]
        t = timer(lambda: forward(m, cache, use_cache=True, **inputs[name, k]).logits.float())
        cache.crop(-k)  # transformers 5.x: drop the k new entries, back to ctx
        return t

    passes = _passes(list(caches), ks, grid, order_rng)
    for rep, work in enumerate(passes):  # grows while a cell's repeats disagree (extra_pass)
        for name, k in work:
            if name in failed:
                continue
            try:
                t = step(name, k)
            except Exception as e:  # noqa: BLE001
                if not _is_oom(e):
                    raise
                failed[name] = "out of memory"
                continue
            if rep >= grid.warmup:
                times[name, k].append(t)
        if rep == len(passes) - 1:
            passes += extra_pass({c: ts for c, ts in times.items() if c[0] not in failed}, grid, order_rng,
                                 rep + 1 - grid.warmup)
    for name in caches:
        for k in ks:
            rows.append(_row(name, batch, ctx, k, None, failed[name]) if name in failed
                        else _row(name, batch, ctx, k, times[name, k]))
    caches.clear()
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return rows


def _cell_start(grid: LatencyGrid, batch: int, ctx: int) -> tuple[torch.Generator, list[int], list[dict]]:
    """(the cell's seeded generator, its k values, its rows: none yet)."""
    return torch.Generator().manual_seed(grid.seed * 1000003 + batch * 1009 + ctx), list(grid.k_values(batch)), []


def _runnable(models: dict[str, Any], batch: int, ctx: int, grid: LatencyGrid, dev: torch.device,
              skip: dict[str, str] | None, rows: list[dict]) -> Iterator[tuple[str, Any]]:
    """(name, model) of each model that can run the cell; each other gets its rows, one per k, with the reason
    (``skip``'s or its memory's), appended to ``rows``."""
    for name, m in models.items():
        reason = (skip or {}).get(name) or _infeasible_reason(m, batch, ctx, grid.max_k, dev)
        if reason:
            rows += [_row(name, batch, ctx, k, None, reason) for k in grid.k_values(batch)]
        else:
            yield name, m


def _eager_cell(models: dict[str, Any], batch: int, ctx: int, grid: LatencyGrid, dev: torch.device,
                skip: dict[str, str] | None) -> tuple[dict[str, Any], dict[tuple[str, int], dict], list[dict]]:
    """(each feasible model's cache prefilled with ``ctx`` random tokens, the forward's keyword arguments per
    (model, k), built untimed once, the rows of the models that cannot run the cell: infeasible or out of
    memory)."""
    gen, ks, rows = _cell_start(grid, batch, ctx)
    caches: dict[str, Any] = {}
    inputs: dict[tuple[str, int], dict[str, torch.Tensor]] = {}
    for name, m in _runnable(models, batch, ctx, grid, dev, skip, rows):
        try:
            caches[name] = _prefill(m, batch, ctx, dev, gen)
            for k in ks:
                ids = torch.randint(0, m.config.vocab_size, (batch, k), generator=gen).to(dev)
                inputs[name, k] = dict(input_ids=ids, **_runtime_feed(m, batch, ctx, k, dev))
        except Exception as e:  # noqa: BLE001 - only out-of-memory is expected; anything else re-raises
            if not _is_oom(e):
                raise
            caches.pop(name, None)
            rows += [_row(name, batch, ctx, k, None, "out of memory") for k in ks]
    return caches, inputs, rows


def _passes(names: Sequence[str], ks: Sequence[int], grid: LatencyGrid, rng: random.Random) -> list[list]:
    """Untimed warm-up passes (largest and smallest k of every model), then one shuffled pass per repeat."""
    passes = [[(n, k) for n in names for k in sorted({ks[-1], ks[0]}, reverse=True)]] * grid.warmup
    for _ in range(grid.repeats):
        work = [(n, k) for n in names for k in ks]
        rng.shuffle(work)
        passes.append(work)
    return passes


def extra_pass(times: dict[tuple[str, int], list[float]], grid: LatencyGrid, rng: random.Random,
               timed: int = 0) -> list[list]:
    """One more shuffled pass over the cells whose repeats disagree ((max - min) / median above
    ``grid.spread_limit``: a burst of noise on a shared machine) until each has ``grid.max_repeats``; [] when
    every cell agrees, or after ``grid.max_repeats`` timed passes (``timed``: so far; a cell that stopped getting
    samples cannot extend the chunk forever). The median of more repeats outvotes a burst that three cannot."""
    if timed >= grid.max_repeats:
        return []
    work = [cell for cell, ts in times.items() if 0 < len(ts) < grid.max_repeats
            and (max(ts) - min(ts)) > grid.spread_limit * statistics.median(ts)]
    rng.shuffle(work)
    return [work] if work else []


def _measure_compiled(models: dict[str, Any], batch: int, ctx: int, grid: LatencyGrid, dev: torch.device,
                      skip: dict[str, str] | None, compile_log: dict[str, float] | None) -> list[dict]:
    """The compiled runtime's cell: per model a :class:`~spectune.decoding.static_cache.StaticRunner` of
    ``batch`` rows, every k bucket of the cell compiled (and on CUDA captured) first -- that time goes to
    ``compile_log``, never into a timing --, the rows prefilled with ``ctx`` random tokens, then the runner's
    forward of k tokens per row timed as the decode loop pays it (wall clock to a synchronize) and rolled back.
    The store is sized for the largest batch and context of the grid, so every cell reuses one engine per
    model and its four compiled graphs (its attention spans every slot: the compiled runtime's L depends on
    that capacity rather than on ctx)."""
    gen, ks, rows = _cell_start(grid, batch, ctx)
    runners: dict[str, Any] = {}
    for name, m in _runnable(models, batch, ctx, grid, dev, skip, rows):
        try:
            run = StaticRunner(m, batch, dev, max_len=max(grid.contexts) + grid.max_k,
                               rows_cap=max(grid.batch_sizes))
            run.warmup(k_buckets=sorted({k_bucket(k) for k in ks}))
            prompt = torch.randint(0, m.config.vocab_size, (batch, ctx), generator=gen)
            run.forward({r: prompt[r].tolist() for r in range(batch)})
            runners[name] = run
        except Exception as e:  # noqa: BLE001 - only out-of-memory is expected; anything else re-raises
            if not _is_oom(e):
                raise
            rows += [_row(name, batch, ctx, k, None, "out of memory") for k in ks]
    inputs = {(n, k): torch.randint(0, models[n].config.vocab_size, (batch, k), generator=gen).tolist()
              for n in runners for k in ks}
    rows += _time_cell(runners, inputs, batch, ctx, ks, grid, "every call compiled")
    if compile_log is not None:
        compile_log["seconds"] = compile_log.get("seconds", 0.0) + sum(r.compile_seconds for r in runners.values())
    runners.clear()
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return rows


def _measure_llamacpp(models: dict[str, Any], batch: int, ctx: int, grid: LatencyGrid,
                      skip: dict[str, str] | None) -> list[dict]:
    """The llamacpp runtime's cell: per model a :class:`~spectune.decoding.llamacpp_runner.LlamaCppRunner` of
    ``batch`` rows prefilled with ``ctx`` random tokens, then its forward of k tokens per row timed as the decode
    loop pays it (one ragged ``llama_decode``, the logits copied out) and rolled back."""
    gen = np.random.default_rng(grid.seed * 1000003 + batch * 1009 + ctx)
    ks = grid.k_values(batch)
    rows: list[dict] = []
    runners: dict[str, Any] = {}
    for name, m in models.items():
        if (skip or {}).get(name):
            rows += [_row(name, batch, ctx, k, None, skip[name]) for k in ks]  # type: ignore[index]
            continue
        run = runners[name] = LlamaCppRunner(m, batch, max_len=ctx + grid.max_k)
        run.forward({r: gen.integers(0, m.n_vocab, ctx).tolist() for r in range(batch)})
    inputs = {(n, k): gen.integers(0, run.model.n_vocab, (batch, k)).tolist() for n, run in runners.items()
              for k in ks}
    return rows + _time_cell(runners, inputs, batch, ctx, ks, grid)


def _time_cell(runners: dict[str, Any], inputs: dict[tuple[str, int], list], batch: int, ctx: int,
               ks: Sequence[int], grid: LatencyGrid, note: str = "") -> list[dict]:
    """The rows of one cell of runner-timed models (the compiled and llamacpp runtimes): every (model, k) timed in
    shuffled passes (``_time_runners``), a model that ran out of memory recorded as such."""
    rng = random.Random(grid.seed * 7919 + batch * 31 + ctx)
    times = _time_runners(runners, inputs, ctx, _passes(list(runners), ks, grid, rng), grid, rng)
    return [_row(name, batch, ctx, k, None, times[name]) if isinstance(times[name], str)
            else _row(name, batch, ctx, k, times[name].get(k), note) for name in runners for k in ks]


def _time_runners(runners: dict[str, Any], inputs: dict[tuple[str, int], list], ctx: int, passes: list[list],
                  grid: LatencyGrid, rng: random.Random) -> dict[str, Any]:
    """{model: {k: [seconds]}} of every timed pass (``passes[grid.warmup:]``, then ``extra_pass``es), or
    {model: 'out of memory'}. A call that compiled after all (a guard the warm-up did not meet) is compile time,
    not a sample."""
    times: dict[str, Any] = {n: {} for n in runners}
    warmup = grid.warmup
    for rep, work in enumerate(passes):
        for name, k in work:
            run = runners[name]
            if isinstance(times[name], str):
                continue
            before, compiling = run.seconds, run.compile_seconds
            try:
                run.forward({r: toks for r, toks in enumerate(inputs[name, k])})
            except Exception as e:  # noqa: BLE001
                if not _is_oom(e):
                    raise
                times[name] = "out of memory"
                continue
            for r in range(run.rows):
                run.rollback(r, ctx)
            if rep >= warmup and run.compile_seconds == compiling:
                times[name].setdefault(k, []).append(run.seconds - before)
        if rep == len(passes) - 1:
            passes += extra_pass({(n, k): ts for n, d in times.items() if not isinstance(d, str)
                                  for k, ts in d.items()}, grid, rng, rep + 1 - warmup)
    return times


class Canary:
    """How fast the machine is right now: the median of ``n`` one-token forwards of ``model`` at batch 1 over a
    cache of ``ctx`` tokens (~0.2 s for the bundled target on a 2-core CPU). ``__call__`` times it and returns how
    much slower that is than its median over every call so far (0.3: 30 % slower): a busy neighbour on the host,
    a throttled clock or a process elsewhere slows it as it slows the cells timed beside it. The median, not the
    fastest: on the Zen 4 guest the first calls after a pause ran 20-25 % faster than any later one (a clock
    boost), and against them every chunk looked disturbed."""

    def __init__(self, model: Any, device: str | torch.device = "cpu", ctx: int = 64, n: int = 5, seed: int = 0):
        dev = torch.device(device)
        gen = torch.Generator().manual_seed(seed)
        self.model, self.n, self.timer = model, n, _timer(dev)
        with torch.inference_mode():
            self.cache = _prefill(model, 1, ctx, dev, gen)
        self.ids = torch.randint(0, model.config.vocab_size, (1, 1), generator=gen).to(dev)
        self.pos = torch.arange(ctx, ctx + 1, device=dev)
        self.history: list[float] = []
        self.seconds()  # warm-up (allocator, kernels): not a reference

    @torch.inference_mode()
    def seconds(self) -> float:
        times = []
        for _ in range(self.n):
            times.append(self.timer(lambda: forward(self.model, self.cache, input_ids=self.ids,
                                                    cache_position=self.pos, use_cache=True)))
            self.cache.crop(-1)
        return statistics.median(times)

    def __call__(self) -> float:
        t = self.seconds()
        self.history.append(t)
        return t / statistics.median(self.history) - 1.0


def measure_quiet(measure: Callable[[], list[dict]], grid: LatencyGrid, watch: Callable[[], Any] = CpuWatch,
                  canary: Callable[[], float] | None = None, pause: float = 2.0) -> tuple[list[dict], list[dict]]:
    """``measure()`` (one chunk's rows), run again while the machine was disturbed as it ran: other processes or
    the hypervisor took more than ``grid.quiet_limit`` of its CPU time (``watch``: a process beside a forward
    slows it several times over on a small machine), or ``canary`` (a :class:`Canary`, timed before and after)
    ran more than ``grid.slow_limit`` slower than usual (what the guest cannot see: a busy host). At most
    ``grid.quiet_attempts`` runs, ``pause`` seconds apart. Returns the least disturbed run's rows and each run's
    {"others", "slowdown"} (None: not measurable); a disturbance the kept run still shows goes into each timed
    row's ``note``."""
    best, kept, excess_kept = None, {}, 0.0
    seen: list[dict] = []
    for attempt in range(max(1, grid.quiet_attempts)):
        if attempt:
            time.sleep(pause)
        slow = [canary()] if canary is not None else []
        w = watch()
        rows = measure()
        share = w.others()
        slow += [canary()] if canary is not None else []
        seen.append({"others": share, "slowdown": max(slow) if slow else None})
        excess = max(share / grid.quiet_limit if share is not None else 0.0,
                     seen[-1]["slowdown"] / grid.slow_limit if slow else 0.0)
        if best is None or excess < excess_kept:
            best, kept, excess_kept = rows, seen[-1], excess
        if excess <= 1.0:
            break
    if excess_kept > 1.0:
        why = ([f"other processes took {kept['others']:.0%} of the CPU"] if (kept["others"] or 0) > grid.quiet_limit
               else []) + ([f"the machine ran {kept['slowdown']:.0%} slower than usual"]
                           if (kept["slowdown"] or 0) > grid.slow_limit else [])
        for r in best:
            if r["feasible"]:
                r["note"] = "; ".join(why) + " while timed"
    return best, seen


def oom_skips(df: pd.DataFrame, batch: int, ctx: int) -> dict[str, str]:
    """Models that already ran out of memory at a smaller-or-equal (batch, ctx): skip them here."""
    if df is None or df.empty:
        return {}
    bad = df[(~df["feasible"].astype(bool)) & (df["note"].astype(str) == "out of memory")]
    bad = bad[(bad["batch"] <= batch) & (bad["ctx"] <= ctx)]
    return {m: f"out of memory at batch {int(g['batch'].min())}" for m, g in bad.groupby("model")}
