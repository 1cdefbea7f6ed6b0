"""A preallocated (static-shape) KV cache for a ragged batch, and its compiled forward steps.

The design is :mod:`batch_cache`'s -- one physical slot axis shared by the batch, a validity mask per row, the
row's logical sequence is its valid slots in physical order, explicit ``position_ids`` (the logical index),
rollback by invalidation -- with every shape fixed, so that ``torch.compile`` (on CUDA with CUDA graphs) can
capture a forward once per shape and replay it:

* An :class:`Engine` per model holds every layer's keys and values preallocated as ``[rows_cap, heads, slots,
  head_dim]``, the validity mask ``[rows_cap, slots]`` and the write pointer, all on the device at fixed
  addresses (``torch._dynamo.mark_static_address``, as transformers' ``StaticCache``).
* A forward writes its new slots at the write pointer for every row; feeds are padded to a *k bucket*
  (``K_BUCKETS``) and the live rows to a *batch bucket* (a power of two). Padding tokens and padding rows are
  invalid slots: no real query attends to them, so they never change a real row's logits.
* The 4-D additive mask over all ``slots`` is built on the device inside the step from the validity mask, the
  write pointer and the rows' feed lengths; the step also marks the real new slots valid. No host sync inside.
* Feeds longer than the largest k bucket (prompts) run the same step uncompiled.
* Rollback invalidates a row's slots past the kept length (no data moves); the write pointer rewinds past
  slots no row holds any more, and when it would pass the capacity the valid slots are packed to the left
  (compaction, in place: the addresses the captured graphs read stay the same). Rows that leave the batch are
  packed to the front the same way, so the live rows are always rows ``0 .. rows - 1``.

The step is compiled on first use or by :meth:`StaticRunner.warmup`, with batch size and feed length as
dynamic dimensions (four graphs per model: size 1 or more, for each) -- compiling one static graph per bucket
pair cost about a minute each for SmolLM2 on a CPU; CUDA graph trees still capture one CUDA graph per concrete
bucket shape. The time of the calls that compile or capture is ``compile_seconds``, never part of ``seconds``.
Engines are kept per model (at most ``MAX_ENGINES``) and reused by later runners of a fitting size, so a
shape is compiled and captured once per process.
"""
from __future__ import annotations

import time
import weakref
from typing import Any

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from spectune.decoding.attention import eager_attention
from spectune.decoding.hf_compat import cache_arg
from spectune.decoding.runtime import Counted

PAD_ID = 0  # token id fed in padding slots (never attended to)
K_BUCKETS = (1, 2, 4, 8, 16)  # feed lengths the step is compiled for; longer feeds run uncompiled
MIN_SLOTS = 256  # smallest cache capacity (slots per row)
MAX_ENGINES = 4  # engines kept per model (each holds a KV store)
CUDA_WARM_CALLS = 3  # CUDA graph trees: a warm-up run, the recording, then replays


def k_bucket(k: int) -> int | None:
    """The smallest k bucket holding ``k`` tokens, or None (longer than every bucket: run uncompiled)."""
    return next((b for b in K_BUCKETS if b >= k), None)


def batch_bucket(rows: int) -> int:
    """The batch bucket of ``rows`` live rows: the next power of two."""
    return 1 << max(0, rows - 1).bit_length()


def capacity(max_len: int) -> int:
    """Slots per row for sequences of up to ``max_len`` tokens: a power of two >= ``MIN_SLOTS`` with room for a
    quarter more (rolled-back slots, padding) before the cache compacts. Powers of two keep the number of
    distinct compiled shapes small across runs with different lengths."""
    need = max_len + max(2 * K_BUCKETS[-1], max_len // 4)
    return max(MIN_SLOTS, 1 << (need - 1).bit_length())


class _SlotLayer(CacheLayerMixin):
    """One layer's keys and values, written at the engine's write pointer (allocated at the first write)."""

    is_compileable = True
    is_sliding = False

    def __init__(self, engine: Engine):
        super().__init__()
        self.engine = engine

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        e = self.engine
        shape = (e.rows_cap, key_states.shape[1], e.slots)
        self.keys = torch.zeros(*shape, key_states.shape[-1], dtype=key_states.dtype, device=key_states.device)
        self.values = torch.zeros(*shape, value_states.shape[-1], dtype=value_states.dtype, device=key_states.device)
        torch._dynamo.mark_static_address(self.keys)
        torch._dynamo.mark_static_address(self.values)
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Write the new ``[b, heads, k, dim]`` states at slots ``ptr .. ptr + k - 1`` of rows ``0 .. b - 1``;
        return those rows' whole store (the mask says which slots count)."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        b, k = key_states.shape[0], key_states.shape[2]
        wpos = self.engine.ptr + torch.arange(k, device=key_states.device)
        keys, values = self.keys[:b], self.values[:b]
        keys.index_copy_(2, wpos, key_states.to(keys.dtype))
        values.index_copy_(2, wpos, value_states.to(values.dtype))
        return keys, values

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.engine.slots, 0

    def get_seq_length(self) -> int:
        return 0

    def get_max_length(self) -> int:
        return self.engine.slots


class _SlotCache(Cache):
    """The transformers ``Cache`` the model sees: one :class:`_SlotLayer` per layer, created on first use."""

    def __init__(self, engine: Engine):
        super().__init__(layers=[])
        self.engine = engine

    def update(self, key_states, value_states, layer_idx: int, *args, **kwargs):
        while len(self.layers) <= layer_idx:
            self.layers.append(_SlotLayer(self.engine))
        return self.layers[layer_idx].update(key_states, value_states)


class Engine:
    """One model's static KV store, validity mask and write pointer, and its (compiled) step per shape."""

    def __init__(self, model: Any, rows_cap: int, slots: int, device: torch.device, compiled: bool):
        self.model, self.rows_cap, self.slots, self.device, self.compiled = model, rows_cap, slots, device, compiled
        self.dtype = next(model.parameters()).dtype
        self.cache = _SlotCache(self)
        self.cache_kw = cache_arg(model)  # read here, outside the compiled step
        self.valid = torch.zeros(rows_cap, slots, dtype=torch.bool, device=device)
        self.ptr = torch.zeros((), dtype=torch.long, device=device)
        torch._dynamo.mark_static_address(self.valid)
        torch._dynamo.mark_static_address(self.ptr)
        self.calls_by_shape: dict[tuple[int, int], int] = {}  # (batch bucket, k bucket) -> calls so far
        self.owner: Any = None  # weakref to the runner using the engine now
        self._compiled = None
        self.mode = "reduce-overhead" if device.type == "cuda" else None

    @property
    def initialized(self) -> bool:
        return bool(self.cache.layers) and all(layer.is_initialized for layer in self.cache.layers)

    def step(self, x: torch.Tensor) -> torch.Tensor:
        """One forward. ``x`` [3, b, k] int64 on the device: the feed's token ids, its logical positions, and
        each row's feed length (in every column). Returns float32 logits [b, k, V]; the rows' real new slots
        become valid."""
        b, k = x.shape[1], x.shape[2]
        ids, pos, lens = x[0], x[1], x[2, :, 0]
        q = torch.arange(k, device=x.device)
        rel = torch.arange(self.slots, device=x.device) - self.ptr  # [S] slot index relative to the write pointer
        real = q[None, :] < lens[:, None]  # [b, k] real (non-padding) new tokens
        new_ok = (rel[None, None, :] >= 0) & (rel[None, None, :] <= q[None, :, None]) \
            & (rel[None, None, :] < lens[:, None, None])  # [b, k, S] causal within the feed, real keys only
        ok = (self.valid[:b, None, :] | new_ok) & real[:, :, None]
        ok = ok | (~real[:, :, None] & (rel[None, None, :] == q[None, :, None]))  # padding query: itself only
        mask = torch.zeros(ok.shape, dtype=self.dtype, device=x.device)
        mask = mask.masked_fill(~ok, torch.finfo(self.dtype).min)[:, None]  # [b, 1, k, S]
        out = self.model(input_ids=ids, position_ids=pos, attention_mask=mask, use_cache=True,
                         **{self.cache_kw: self.cache})
        self.valid[:b].index_copy_(1, self.ptr + q, real)
        return out.logits.float()

    def run(self, x: torch.Tensor, compile_ok: bool) -> tuple[torch.Tensor, bool]:
        """The step, compiled when ``compile_ok`` and the engine compiles (never for the call that allocates the
        store). Returns (logits, whether this call compiled a graph or, on CUDA, warmed up or
        captured its shape's CUDA graph).

        Batch size and feed length are marked dynamic (from 2 on: dynamo specialises size 1), so a model compiles
        four graphs -- (b = 1 | b >= 2) x (k = 1 | k >= 2) -- instead of one per bucket pair; CUDA graph trees
        still capture one CUDA graph per concrete bucket shape."""
        if not (self.compiled and compile_ok and self.initialized):
            with eager_attention(self.device):  # prompts of any length run eagerly: no cuDNN plan per length
                return self.step(x), False
        if self._compiled is None:
            _raise_recompile_limit()
            self._compiled = torch.compile(self.step, mode=self.mode)
        shape = (x.shape[1], x.shape[2])
        seen = self.calls_by_shape.get(shape, 0)
        self.calls_by_shape[shape] = seen + 1
        for dim in (1, 2):
            if x.shape[dim] >= 2:
                torch._dynamo.maybe_mark_dynamic(x, dim)
        if self.device.type == "cuda":
            torch.compiler.cudagraph_mark_step_begin()  # the previous step's outputs were copied out: reuse them
        graphs = _graphs_compiled()
        out = self._compiled(x)
        return out, _graphs_compiled() != graphs or (self.device.type == "cuda" and seen < CUDA_WARM_CALLS)

    def warm(self, b: int, k: int) -> bool:
        """Whether shape (batch bucket b, k bucket k) has been compiled and (CUDA) captured."""
        need = CUDA_WARM_CALLS if self.device.type == "cuda" else 1
        return self.calls_by_shape.get((b, k), 0) >= need

    def reset(self) -> None:
        """Forget every row (a new runner takes the engine): no slot is valid."""
        self.valid.zero_()


def _graphs_compiled() -> int:
    """Graphs dynamo has compiled in this process (a change across a call: that call compiled)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def _no_grad():
    """Plain no-grad tensors whatever the caller's mode: the store must stay writable outside inference mode."""
    import contextlib

    stack = contextlib.ExitStack()
    stack.enter_context(torch.inference_mode(False))
    stack.enter_context(torch.no_grad())
    return stack


def _raise_recompile_limit() -> None:
    """Every (model, shape) is its own compiled graph of the same code: allow enough of them before dynamo
    falls back to eager (its default limit is 8 per code object)."""
    import torch._dynamo.config as dc
    import torch._inductor.config as ic

    dc.recompile_limit = max(dc.recompile_limit, 512)
    dc.accumulated_recompile_limit = max(dc.accumulated_recompile_limit, 4096)
    if hasattr(ic.triton, "cudagraph_dynamic_shape_warn_limit"):  # one CUDA graph per bucket shape is the design
        ic.triton.cudagraph_dynamic_shape_warn_limit = None


_ENGINES: weakref.WeakKeyDictionary[Any, list[Engine]] = weakref.WeakKeyDictionary()


def acquire(model: Any, rows: int, slots: int, device: torch.device, compiled: bool, owner: Any) -> Engine:
    """A free engine of ``model`` with room for ``rows`` rows and ``slots`` slots (the smallest fitting one, its
    compiled shapes kept: the graphs depend on the store's shape, not on the engine), else a new one of
    ``batch_bucket(rows)`` rows; it now belongs to ``owner``. At most ``MAX_ENGINES`` are kept per model: the
    oldest free one is dropped first."""
    engines = _ENGINES.setdefault(model, [])
    fits = [e for e in engines if e.device == device and e.compiled == compiled and e.rows_cap >= rows
            and slots <= e.slots <= 4 * slots and (e.owner is None or e.owner() is None)]
    if fits:
        eng = min(fits, key=lambda e: (e.rows_cap * e.slots, e.slots))
        engines.remove(eng)
    else:
        eng = Engine(model, batch_bucket(rows), slots, device, compiled)
        free = [e for e in engines if e.owner is None or e.owner() is None]
        while len(engines) >= MAX_ENGINES and free:
            engines.remove(free.pop(0))
    engines.append(eng)  # most recently used last
    eng.reset()
    eng.owner = weakref.ref(owner)
    return eng


class StaticRunner(Counted):
    """``BatchedRunner``'s interface over a static :class:`Engine`: forward passes of one causal LM over
    ``rows`` sequences with per-row lengths. ``max_len``: the longest sequence expected (sizes the cache; a
    longer one makes the cache grow, which recompiles). ``rows_cap``: rows of the store (default the batch
    bucket of ``rows``); runners of different batch sizes given one ``rows_cap`` share one store and its
    compiled graphs (calibration does so). ``compiled``: compile the step (else the same static path runs
    eagerly -- the tests' reference for the cache logic)."""

    def __init__(self, model: Any, rows: int, device: torch.device | str = "cpu", max_len: int = 512,
                 compiled: bool = True, rows_cap: int | None = None):
        self.model = model
        self.device = torch.device(device)
        self.compiled = compiled
        cap = batch_bucket(max(rows, rows_cap or 1))
        self.engine = acquire(model, cap, capacity(max_len), self.device, compiled, self)
        self.live = list(range(rows))  # sequence ids still in the batch; engine row b belongs to live[b]
        self.row_of = {seq: b for b, seq in enumerate(self.live)}
        self.slots_of: dict[int, list[int]] = {seq: [] for seq in self.live}  # physical slot of each logical token
        self.n = [0] * rows  # logical length per sequence id
        self._start_counts()  # by_k: real feed length K, warm shapes; compile_seconds: compile, CUDA graph capture
        self.compactions = 0  # times the write pointer reached the capacity and the rows were packed
        self.dtype = next(model.parameters()).dtype

    @property
    def rows(self) -> int:
        return len(self.live)

    @property
    def slots(self) -> int:
        return self.engine.slots

    def _check_owner(self) -> None:
        if self.engine.owner is None or self.engine.owner() is not self:
            raise RuntimeError("this runner's KV store was taken by a newer runner of the same model")

    def _ptr(self) -> int:
        """The write pointer: one past the last slot any live row still holds."""
        return 1 + max((s[-1] for s in (self.slots_of[q] for q in self.live) if s), default=-1)

    def forward(self, feeds: dict[int, list[int]]) -> dict[int, torch.Tensor]:
        """Feed ``feeds[seq]`` to each listed sequence (others get padding). Returns float32 logits ``[len, V]``
        on the CPU per fed sequence."""
        assert feeds and all(len(v) > 0 for v in feeds.values()), "every feed needs at least one token"
        self._check_owner()
        k_real = max(len(v) for v in feeds.values())
        kb = k_bucket(k_real)
        k = kb or k_real
        if self.compiled:
            self._ensure_store()
        ptr = self._make_room(k)
        b = batch_bucket(self.rows)
        x = torch.zeros(3, b, k, dtype=torch.long)
        x[0] = PAD_ID
        for r, seq in enumerate(self.live):
            toks = feeds.get(seq)
            if toks:
                x[0, r, : len(toks)] = torch.tensor(toks)
                x[2, r] = len(toks)
            x[1, r] = self.n[seq] + torch.arange(k)  # logical positions (padding continues the count)
        x = x.to(self.device)
        self.engine.ptr.fill_(ptr)
        t0 = time.perf_counter()
        with _no_grad():
            logits, warming = self.engine.run(x, compile_ok=kb is not None)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        dt = time.perf_counter() - t0
        self._account(feeds, k_real, dt, warming)
        return self._collect(feeds, logits, ptr)

    def _ensure_store(self) -> None:
        """Allocate the store with one all-padding eager step (it writes only invalid slots), so that every real
        forward of a bucketed length runs compiled, whatever the engine's history."""
        if not self.engine.initialized:
            self.engine.ptr.fill_(self._ptr())
            with _no_grad():  # the engine's uncompiled step (run with compile_ok False), attention as run chooses
                self.engine.run(torch.zeros(3, 1, 1, dtype=torch.long, device=self.device), compile_ok=False)

    def _account(self, feeds: dict[int, list[int]], k_real: int, dt: float, warming: bool) -> None:
        """Timing and counters of one forward (a call that compiled or warmed its shape is compile time)."""
        tokens = sum(len(v) for v in feeds.values())
        if not warming:
            self._count(feeds, k_real, dt, tokens)
            return
        self.calls += 1
        self.tokens += tokens
        self.compile_seconds += dt

    def _collect(self, feeds: dict[int, list[int]], logits: torch.Tensor, ptr: int) -> dict[int, torch.Tensor]:
        """Book the new slots of every fed row and copy only the real positions' logits to the CPU (one copy)."""
        rows = [(self.row_of[s], s, len(v)) for s, v in feeds.items()]
        idx = torch.tensor([r * logits.shape[1] + j for r, _, n in rows for j in range(n)], device=logits.device)
        flat = logits.reshape(-1, logits.shape[-1]).index_select(0, idx).cpu()
        out, at = {}, 0
        for _, seq, n in rows:
            out[seq] = flat[at:at + n]
            at += n
            self.slots_of[seq] += range(ptr, ptr + n)
            self.n[seq] += n
        return out

    def rollback(self, seq: int, n: int) -> None:
        """Keep only the first ``n`` tokens of sequence ``seq``: its slots from the n-th on become invalid (every
        valid slot after it in physical order is a later token of the row)."""
        assert 0 <= n
        if n >= self.n[seq]:
            return
        self._check_owner()
        slots = self.slots_of[seq]
        self.engine.valid[self.row_of[seq], slots[n]:] = False
        del slots[n:]
        self.n[seq] = n

    def release(self, seqs: list[int]) -> None:
        """Finished sequences leave the batch: the live rows are packed to the front of the store."""
        gone = set(seqs) & set(self.row_of)
        if not gone:
            return
        self._check_owner()
        keep = [b for b, s in enumerate(self.live) if s not in gone]
        if keep and self.engine.initialized and keep != list(range(len(keep))):
            idx = torch.tensor(keep, device=self.device)
            for layer in self.engine.cache.layers:
                layer.keys[: len(keep)].copy_(layer.keys.index_select(0, idx))
                layer.values[: len(keep)].copy_(layer.values.index_select(0, idx))
            self.engine.valid[: len(keep)].copy_(self.engine.valid.index_select(0, idx))
        self.engine.valid[len(keep):] = False
        self.live = [self.live[b] for b in keep]
        self.row_of = {seq: b for b, seq in enumerate(self.live)}
        for seq in gone:
            self.n[seq] = 0
            self.slots_of[seq] = []
        if not self.live:
            self.engine.owner = None  # every sequence finished: the store is free for the next runner

    def maybe_compact(self) -> None:
        """Nothing to do between forwards: the static store compacts inside ``forward`` when the write pointer
        would pass its capacity (attention always spans all slots, so earlier compaction saves no compute)."""

    def _make_room(self, k: int) -> int:
        """The write pointer for a k-token forward, after compacting (or, past that, growing) the store."""
        ptr = self._ptr()
        if ptr + k <= self.slots:
            return ptr
        self._compact()
        ptr = self._ptr()
        if ptr + k > self.slots:
            self._grow(ptr + k)
        return ptr

    def _compact(self) -> None:
        """Pack every live row's valid slots to the left, in place (the store keeps its addresses)."""
        e = self.engine
        if not self.rows or not e.initialized:
            return
        self.compactions += 1
        width = max(self.n[s] for s in self.live)
        gather = torch.zeros(self.rows, width, dtype=torch.long)
        for b, seq in enumerate(self.live):
            gather[b, : self.n[seq]] = torch.tensor(self.slots_of[seq], dtype=torch.long)
        gather = gather.to(self.device)
        for layer in e.cache.layers:
            for store in (layer.keys, layer.values):
                g = gather[:, None, :, None].expand(-1, store.shape[1], -1, store.shape[3])
                store[: self.rows, :, :width].copy_(store[: self.rows].gather(2, g))
        e.valid.zero_()
        for b, seq in enumerate(self.live):
            e.valid[b, : self.n[seq]] = True
            self.slots_of[seq] = list(range(self.n[seq]))

    def _grow(self, need: int) -> None:
        """Move to a larger engine (a new capacity is a new shape: its steps compile again)."""
        old = self.engine
        new = acquire(self.model, old.rows_cap, capacity(need), self.device, self.compiled, self)
        self.engine = new
        if old.initialized and self.rows:
            self._ensure_store()
            for lo, ln in zip(old.cache.layers, new.cache.layers):
                ln.keys[: self.rows, :, : old.slots].copy_(lo.keys[: self.rows])
                ln.values[: self.rows, :, : old.slots].copy_(lo.values[: self.rows])
            new.valid[: self.rows, : old.slots].copy_(old.valid[: self.rows])
            new.valid[: self.rows, old.slots:] = False
        old.owner = None

    def warmup(self, batch_buckets: Any = None, k_buckets: Any = K_BUCKETS) -> float:
        """Compile (and on CUDA capture) every (batch bucket, k bucket) shape up front with all-padding feeds
        (they change no row). ``batch_buckets``: default the live rows' bucket; buckets above the store's rows
        are skipped. Returns the seconds it took, added to ``compile_seconds``."""
        if not self.compiled:
            return 0.0
        self._check_owner()
        t0 = time.perf_counter()
        bs = [b for b in (batch_buckets or [batch_bucket(max(1, self.rows))]) if b <= self.engine.rows_cap]
        self._ensure_store()
        for b in bs:
            for k in k_buckets:
                while not self.engine.warm(b, k):
                    self.engine.ptr.fill_(self._make_room(k))
                    with _no_grad():
                        self.engine.run(torch.zeros(3, b, k, dtype=torch.long, device=self.device), True)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        dt = time.perf_counter() - t0
        self.compile_seconds += dt
        return dt
