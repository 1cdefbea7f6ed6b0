"""``--runtime llamacpp``: the models' forwards on llama.cpp's kernels, behind the runner interface.

llama.cpp runs a small model's decode step at the machine's memory bandwidth (SmolLM2-135M in bf16: about 11 ms a
token on a 2-core Zen 4, where transformers' eager forward takes about 46), so every method of the decode state
machine -- CoS, n-model collaboration, SV, the lookups and their chain -- runs at that speed over it. This module
talks to llama.cpp through llama-cpp-python's low-level API (``llama_cpp``: the C API as ctypes functions; pinned
in the ``llamacpp-runtime`` extra), never its high-level ``Llama`` object, which holds one sequence.

Glossary:

* *row* / *seq*: one sequence of the batch; its llama.cpp sequence id is the row index, so rows share one context
  and one ``llama_decode`` call verifies a ragged batch (each row feeds its own number of tokens).
* ``n[seq]``: tokens of the row in llama.cpp's KV cache (positions 0 .. n - 1).
* *feed*: the tokens a row appends in one forward; the runner returns float32 logits for every one of them
  (``[len(feed), V]``: position n + 1 .. n + len), as :class:`~spectune.decoding.batch_cache.BatchedRunner` does.
* *rollback*: ``llama_memory_seq_rm`` of the row's positions from n on; *release*: of all its positions.

The model is a GGUF of the same weights in their own dtype (``spectune.decoder.runner_models``: the bundled family
converted once by ``spectune.models.gguf`` and cached beside the safetensors); the sampling math stays
spectune's (``sampling.py``) on these logits, so the methods sample exactly from the combination of the
distributions of the weights llama.cpp runs.
"""
from __future__ import annotations

import ctypes
import logging
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from spectune.decoding.runtime import Counted
from spectune.errors import ConfigError

N_BATCH = 512  # tokens per llama_decode call: a longer feed (a batch of prompts) is decoded in chunks
_MODELS: dict[str, "GGUFModel"] = {}  # one load per file per process: llama.cpp maps the weights once


def _lib() -> Any:
    """llama-cpp-python's C API, its backend initialised and its log quiet (errors only)."""
    try:
        import llama_cpp
    except ImportError:
        raise ConfigError("--runtime llamacpp needs llama-cpp-python: pip install -e '.[llamacpp-runtime]' (it "
                          "builds llama.cpp from source: about 6 minutes on 2 cores)") from None
    if not getattr(_lib, "ready", False):
        logging.getLogger("llama-cpp-python").setLevel(logging.ERROR)
        llama_cpp.llama_backend_init()
        _lib.ready = True  # type: ignore[attr-defined]
    return llama_cpp


def threads() -> int:
    """The CPUs this process may run on: llama.cpp's threads for every forward."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


class GGUFModel:
    """A GGUF model loaded by llama.cpp (its weights mapped once per process): ``load`` it by file."""

    def __init__(self, path: Path):
        lc = _lib()
        self.path = Path(path)
        self.ptr = lc.llama_model_load_from_file(str(self.path).encode(), lc.llama_model_default_params())
        if not self.ptr:
            raise ConfigError(f"llama.cpp could not load {self.path} (not a GGUF of a model this build runs)")
        self.n_vocab = int(lc.llama_vocab_n_tokens(lc.llama_model_get_vocab(self.ptr)))
        self._free = lc.llama_model_free

    @classmethod
    def load(cls, path: str | Path) -> "GGUFModel":
        key = str(Path(path).resolve())
        if key not in _MODELS:
            _MODELS[key] = cls(Path(key))
        return _MODELS[key]

    def __del__(self) -> None:
        if getattr(self, "ptr", None):
            self._free(self.ptr)
            self.ptr = None


class LlamaCppRunner(Counted):
    """Forward passes of one GGUF model over ``rows`` sequences in one llama.cpp context (see the module
    docstring); ``n``, ``dtype`` (of the logits returned) and the counters of ``runtime.Counted``."""

    def __init__(self, model: GGUFModel | str | Path, rows: int, max_len: int = 512):
        lc = self.lc = _lib()
        self.model = model if isinstance(model, GGUFModel) else GGUFModel.load(model)
        per_row = 256 * -(-(max_len + 1) // 256)  # llama.cpp pads each sequence's cache to 256 cells
        p = lc.llama_context_default_params()
        p.n_ctx, p.n_seq_max, p.n_batch, p.n_ubatch = per_row * rows, rows, N_BATCH, N_BATCH
        p.n_threads = p.n_threads_batch = threads()
        p.no_perf = True
        # one KV buffer for every row: a ragged batch is one ubatch (one forward). Per-row streams split it into
        # per-row ubatches: L(8, 1) took 77.8 ms and L(8, 8) 358 ms, against 54.7 / 153 for the eager runtime
        # (Emerald Rapids guest, 2 cores, SmolLM2-135M bf16, examples/runtime_compare.py)
        p.kv_unified = True
        self.ctx = lc.llama_init_from_model(self.model.ptr, p)
        if not self.ctx:
            raise ConfigError(f"llama.cpp could not make a context of {rows} rows x {per_row} tokens")
        self.mem = lc.llama_get_memory(self.ctx)
        self.batch = lc.llama_batch_init(N_BATCH, 0, 1)
        self.n = [0] * rows
        self.live = set(range(rows))
        self._start_counts()
        self.dtype = torch.float32

    @property
    def rows(self) -> int:
        return len(self.n)

    def forward(self, feeds: dict[int, list[int]]) -> dict[int, torch.Tensor]:
        """Feed ``feeds[seq]`` to each listed row in one ragged batch; float32 logits ``[len, V]`` per row."""
        assert feeds and all(len(v) > 0 for v in feeds.values()), "every feed needs at least one token"
        k = max(len(v) for v in feeds.values())
        flat = [(seq, self.n[seq] + j, int(t)) for seq, toks in feeds.items() for j, t in enumerate(toks)]
        logits = np.empty((len(flat), self.model.n_vocab), dtype=np.float32)  # [tokens fed, V] in feed order
        t0 = time.perf_counter()
        for first in range(0, len(flat), N_BATCH):
            self._decode(flat[first : first + N_BATCH], logits[first : first + N_BATCH])
        self._count(feeds, k, time.perf_counter() - t0, len(flat))
        out, at = {}, 0
        for seq, toks in feeds.items():
            out[seq] = torch.from_numpy(logits[at : at + len(toks)])
            at += len(toks)
            self.n[seq] += len(toks)
        return out

    def _decode(self, chunk: list[tuple[int, int, int]], into: np.ndarray) -> None:
        """One ``llama_decode`` of ``chunk`` [(seq, position, token)], every token's logits copied to ``into``."""
        lc, b = self.lc, self.batch
        for i, (seq, pos, tok) in enumerate(chunk):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = tok, pos, 1, 1
            b.seq_id[i][0] = seq
        b.n_tokens = len(chunk)
        rc = lc.llama_decode(self.ctx, b)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc} for {len(chunk)} tokens (1: no room in the KV cache)")
        got = ctypes.cast(lc.llama_get_logits(self.ctx), ctypes.POINTER(ctypes.c_float))  # rows in batch order
        into[:] = np.ctypeslib.as_array(got, shape=(len(chunk), self.model.n_vocab))

    def rollback(self, seq: int, n: int) -> None:
        """Keep only the first ``n`` tokens of row ``seq``."""
        assert 0 <= n
        if n >= self.n[seq]:
            return
        if not self.lc.llama_memory_seq_rm(self.mem, seq, n, -1):
            raise RuntimeError(f"llama.cpp could not drop positions {n}.. of row {seq}")
        self.n[seq] = n

    def release(self, seqs: list[int]) -> None:
        """Finished rows leave the batch: their cache cells are freed, so they cost no further compute."""
        for seq in set(seqs) & self.live:
            self.lc.llama_memory_seq_rm(self.mem, seq, -1, -1)
            self.live.discard(seq)
            self.n[seq] = 0

    def maybe_compact(self) -> None:
        pass  # llama.cpp reuses freed cells itself

    def __del__(self) -> None:
        if getattr(self, "ctx", None):
            self.lc.llama_batch_free(self.batch)
            self.lc.llama_free(self.ctx)
            self.ctx = None
