"""Monte Carlo simulation of the decode loop over calibrated draft traces.

The simulator runs the same state machine as ``spectune/decoding/loop.py`` (``_step_standard``, ``_step_sd``,
``_step_cos`` with and without bonus, Algorithm 2 for n models: the scorer with the fewest cached positions
scores next) on abstract tokens: a sequence is the committed count, the pending proposals and each model's
cache length. Whether a proposal is accepted is drawn when it is verified: a block of proposer k picks one
calibrated draft of k at random and accepts its i-th proposal with probability beta_i of that draft (greedy
traces: 0/1), so E[accepted | gamma] = mean prod beta exactly as in the traces.

Every forward is priced with the measured latency of the model at the live batch size and the longest feed in
the batch (``BatchedRunner`` pads shorter rows), and the driver ticks like ``Decoder.generate_batch``: each tick
runs one batched forward of the model most waiting sequences need. That covers what the closed forms do not:
CoS over three or more models and the batch effect of rows that fall out of step.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Generator, Sequence

import numpy as np

Latency = Callable[[int, int, int], float]  # (model index, live batch size, k) -> seconds


@dataclass
class SimResult:
    tokens: int
    seconds: float  # simulated wall time of the whole batch
    rows: int
    forwards: Counter = field(default_factory=Counter)  # model index -> forward calls
    proposed: int = 0
    accepted: int = 0
    blocks: int = 0

    @property
    def goodput(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def latency_per_token(self) -> float:
        """Seconds per output token of one request (every row sits through every tick)."""
        return self.seconds / (self.tokens / self.rows) if self.tokens else float("inf")

    @property
    def mean_accepted_length(self) -> float:
        return self.accepted / self.blocks if self.blocks else 0.0


class _Seq:
    __slots__ = ("n", "committed", "pending", "done", "max_new", "row")

    def __init__(self, n_models: int, max_new: int, row: int):
        self.n = [0] * n_models  # cache length of each model (positions; the prompt is one token at position 0)
        self.committed = 1  # prompt
        self.pending: list[list] = []  # [proposer, block id, ok]
        self.done = False
        self.max_new = max_new
        self.row = row

    @property
    def end(self) -> int:
        return self.committed + len(self.pending)

    @property
    def out(self) -> int:
        return self.committed - 1

    def room(self) -> int:
        return self.max_new - self.out - len(self.pending)


class Simulator:
    """Simulates ``method`` over models 0..n-1 (0 = default proposer) with per-model gamma and r's ``uses``.

    ``betas[k]``: [n_drafts, gamma_max] calibrated betas of model k's drafts against r (None for a model that
    never proposes).
    """

    def __init__(self, method: str, gamma: Sequence[int], uses: Sequence[int], betas: Sequence[np.ndarray | None],
                 latency: Latency, seed: int = 0):
        self.method = method
        self.gamma = list(gamma)
        self.uses = tuple(uses)
        self.n_models = len(gamma)
        self.betas = list(betas)
        self.latency = latency
        self.rng = np.random.default_rng(seed)
        self.scorers = list(range(self.n_models)) if method == "cos" else list(self.uses)
        for k, g in enumerate(self.gamma):
            b = self.betas[k]
            if b is not None and g > b.shape[1]:
                raise ValueError(f"gamma {g} of model {k} exceeds the calibrated gamma_max {b.shape[1]}")
        self._block = 0
        self.stats = SimResult(0, 0.0, 0)
        self.on_forward: Callable[[int, int], None] | None = None  # (model, k) per sequence feed, if set

    # -- one sequence (mirrors loop.py) --------------------------------------------------------------

    def _feed(self, s: _Seq, i: int, upto: int):
        k = upto - s.n[i]
        if k > 0:
            if self.on_forward is not None:
                self.on_forward(i, k)
            yield (i, k)
            s.n[i] = upto

    def _draft(self, s: _Seq, i: int, count: int):
        count = min(count, s.room())
        if count <= 0:
            return 0
        b = self.betas[i]
        row = b[self.rng.integers(b.shape[0])]
        u = self.rng.random(count)
        self._block += 1
        blk = self._block
        for j in range(count):
            yield from self._feed(s, i, s.end)
            s.pending.append([i, blk, bool(u[j] < row[j]), j == 0])
        return count

    def _commit(self, s: _Seq, n: int = 1) -> None:
        s.committed += n
        if s.out >= s.max_new:
            s.done = True

    def _verify(self, s: _Seq) -> bool:
        while s.pending and not s.done:
            j = s.committed
            if any(s.n[i] < j for i in self.uses):
                return True
            prop = s.pending[0]
            first = prop[3]
            if first:
                self.stats.blocks += 1
            self.stats.proposed += 1
            if prop[2]:
                self.stats.accepted += 1
                s.pending.pop(0)
                self._commit(s)
            else:
                s.pending.clear()
                for i in range(self.n_models):
                    s.n[i] = min(s.n[i], j)
                self._commit(s)  # the recovered token
                return False
        return True

    def _step(self, s: _Seq):
        m = self.method
        if m == "standard":
            for i in self.uses:
                yield from self._feed(s, i, s.end)
            self._commit(s)
        elif m == "sd":
            yield from self._draft(s, 0, self.gamma[0])
            for i in self.uses:
                if i == 0:
                    s.n[0] = min(s.n[0], s.committed - 1)
                yield from self._feed(s, i, s.end)
            if self._verify(s) and not s.done:
                self._commit(s)  # bonus token from r
        else:
            if not s.pending:
                yield from self._draft(s, 0, self.gamma[0])
                return
            k = min(self.scorers, key=lambda i: (s.n[i], i))
            yield from self._feed(s, k, s.end)
            if not self._verify(s) or s.done:
                return
            if m == "cos" and (yield from self._draft(s, k, self.gamma[k])) > 0:
                self._verify(s)

    def _run_seq(self, s: _Seq):
        while not s.done:
            yield from self._step(s)

    # -- the batch driver (mirrors Decoder.generate_batch) ---------------------------------------------

    def run(self, rows: int = 1, max_new_tokens: int = 256) -> SimResult:
        self.stats = SimResult(0, 0.0, rows)
        seqs = [_Seq(self.n_models, max_new_tokens, r) for r in range(rows)]
        gens: dict[int, Generator] = {}
        waiting: dict[int, tuple[int, int]] = {}
        for s in seqs:  # prefill is not part of decoding goodput: every model starts with the prompt cached
            s.n = [1] * self.n_models
        for s in seqs:
            g = self._run_seq(s)
            try:
                waiting[s.row] = next(g)
                gens[s.row] = g
            except StopIteration:
                pass
        t = 0.0
        while waiting:
            live = len(waiting) + 0
            need = Counter(i for i, _ in waiting.values())
            m = max(need, key=lambda i: (need[i], -i))
            feeds = [r for r, (i, _) in waiting.items() if i == m]
            kmax = max(waiting[r][1] for r in feeds)
            t += self.latency(m, live, kmax)
            self.stats.forwards[m] += 1
            for r in feeds:
                del waiting[r]
                try:
                    waiting[r] = gens[r].send(None)
                except StopIteration:
                    del gens[r]
        self.stats.tokens = sum(min(s.out, s.max_new) for s in seqs)
        self.stats.seconds = t
        return self.stats


def simulate(method: str, gamma: Sequence[int], uses: Sequence[int], betas: Sequence[np.ndarray | None],
             latency: Latency, rows: int = 1, max_new_tokens: int = 256, seed: int = 0) -> SimResult:
    """One Monte Carlo run of the decode loop (see the module docstring)."""
    return Simulator(method, gamma, uses, betas, latency, seed).run(rows, max_new_tokens)
