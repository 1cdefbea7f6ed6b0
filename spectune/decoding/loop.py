"""The decode loop: standard collaborative decoding, SD, Naive-CoS and CoS on one shared state.

Positions. ``seq`` = prompt + committed tokens + pending proposals. The distribution of the token at position
j comes from feeding tokens ``< j``; each model keeps its logits for positions ``[n_committed, runner.n]``
(see ``cache.py``). A pending proposal at position j is *verified* as soon as every model that r depends on
(``combination.uses``) has its logits at j: r_j = C(...) and the Leviathan rule with the proposal's own q.

Methods (paper: Collaborative Decoding via Speculation, §3 and Algorithms 1-2):
  * ``standard``  - every model in r runs one forward per output token; sample from r.
  * ``sd``        - model 0 drafts gamma_0 tokens; r is a black box: every model in r (the proposer too) scores
                    the drafts in one forward each; a bonus token from r when all are accepted.
  * ``naive-cos`` - model 0 drafts gamma_0 tokens; the other models score them (one forward each, the drafter
                    reuses the q it drafted with); verify against r; no bonus token.
  * ``cos``       - as naive-cos, but the model that scores last also samples a bonus token from its own
                    distribution and drafts gamma_k - 1 more: that block is then verified by the models that
                    have not scored it yet (the alternate proposal framework; with n models Algorithm 2: the
                    model with the fewest cached distributions scores next). Any rejection hands the turn
                    back to the default proposer, model 0.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence

import torch

from spectune.decoding import sampling as S
from spectune.decoding.cache import ModelRunner
from spectune.decoding.combine import Combination
from spectune.decoding.stats import DecodeStats


@dataclass
class Proposal:
    token: int
    q: torch.Tensor  # [V] the distribution the token was sampled from
    model: int  # proposer index
    block: int  # draft block id (see stats.py)


@dataclass
class _Block:
    model: int
    verified: int = 0
    accepted: int = 0


@dataclass
class SamplingParams:
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass
class SequenceState:
    """Per-sequence decode state (batch-ready: nothing here is shared between sequences)."""

    seq: list[int]
    prompt_len: int
    max_new_tokens: int
    generator: torch.Generator
    n_committed: int = 0
    pending: list[Proposal] = field(default_factory=list)
    dists: list[dict[int, torch.Tensor]] = field(default_factory=list)  # per model: position -> logits [V]
    blocks: dict[int, _Block] = field(default_factory=dict)
    next_block: int = 0
    done: bool = False

    @property
    def end(self) -> int:
        return len(self.seq)

    @property
    def n_output(self) -> int:
        return self.n_committed - self.prompt_len

    def room(self) -> int:
        """How many more tokens may still be proposed before max_new_tokens is reached."""
        return self.max_new_tokens - self.n_output - len(self.pending)


class Decoder:
    """Runs one method over loaded models. ``generate`` decodes one prompt; state lives in ``SequenceState``."""

    def __init__(
        self,
        models: Sequence[torch.nn.Module],
        names: Sequence[str],
        method: str,
        combination: Combination,
        gamma: Sequence[int],
        sampling: SamplingParams,
        eos_token_id: int | None,
        device: str = "cpu",
    ):
        assert len(models) == len(gamma) == len(names)
        assert method in ("standard", "sd", "naive-cos", "cos"), method
        self.runners = [ModelRunner(m, device) for m in models]
        self.names = list(names)
        self.method = method
        self.comb = combination
        self.gamma = list(gamma)
        self.sp = sampling
        self.eos = eos_token_id
        # who scores proposals: cos alternates among all models; naive-cos and sd only need r's models
        self.scorers = list(range(len(models))) if method == "cos" else list(combination.uses)

    # ---- small helpers over one sequence -------------------------------------------------------------

    def _q(self, logits: torch.Tensor) -> torch.Tensor:
        """A model's own sampling distribution (warp applied per model). [V] -> [V]"""
        return S.logits_to_probs(logits, self.sp.temperature, self.sp.top_k, self.sp.top_p)

    def _r(self, s: SequenceState, j: int) -> torch.Tensor:
        """The combined distribution r_j = C(...) at position j. -> [V]"""
        return self.comb.probs([s.dists[i][j] for i in self.comb.uses], self.sp.temperature, self.sp.top_k, self.sp.top_p)

    def _feed(self, s: SequenceState, i: int, upto: int) -> None:
        """Bring model i's cache to ``seq[:upto]`` in one forward, storing its logits for the new positions."""
        run = self.runners[i]
        if run.n >= upto:
            return
        start = run.n
        logits = run.forward(s.seq[start:upto])  # [upto - start, V], logits for positions start+1 .. upto
        for k in range(logits.shape[0]):
            pos = start + 1 + k
            if pos >= s.n_committed:
                s.dists[i][pos] = logits[k]

    def _draft(self, s: SequenceState, i: int, count: int) -> int:
        """Model i proposes up to ``count`` tokens at the end of ``seq`` (one new block). Returns how many."""
        count = min(count, s.room())
        if count <= 0:
            return 0
        block = s.next_block
        s.next_block += 1
        s.blocks[block] = _Block(model=i)
        for k in range(count):
            self._feed(s, i, s.end)  # the first call may catch up several tokens; later ones feed one
            q = self._q(s.dists[i][s.end])
            x = int(S.sample(q, self.sp.greedy, s.generator))
            s.pending.append(Proposal(x, q, i, block))
            s.seq.append(x)
            if x == self.eos:
                return k + 1
        return count

    def _commit(self, s: SequenceState, token: int | None = None) -> None:
        """Commit the first pending proposal (token None) or append an exact sample (recovered / bonus)."""
        if token is None:
            s.pending.pop(0)
        else:
            assert not s.pending and s.end == s.n_committed
            s.seq.append(token)
        for d in s.dists:
            d.pop(s.n_committed, None)
        s.n_committed += 1
        out = s.seq[s.prompt_len : s.n_committed]
        if out[-1] == self.eos or s.n_output >= s.max_new_tokens:
            s.done = True

    def _reject(self, s: SequenceState, token: int) -> None:
        """Replace the first pending proposal by the recovered token; drop everything derived from it."""
        j = s.n_committed
        self.stats.discarded_tokens += len(s.pending) - 1
        s.pending.clear()
        del s.seq[j:]
        for i, run in enumerate(self.runners):
            run.rollback(min(run.n, j))
            for pos in [p for p in s.dists[i] if p > j]:
                del s.dists[i][pos]
        self._commit(s, token)

    def _verify(self, s: SequenceState) -> bool:
        """Verify pending proposals in order while r is computable. Returns False on a rejection."""
        while s.pending and not s.done:
            j = s.n_committed
            if any(self.runners[i].n < j for i in self.comb.uses):
                return True  # not every model in r has scored position j yet
            prop = s.pending[0]
            r = self._r(s, j)
            blk = s.blocks[prop.block]
            blk.verified += 1
            ok = bool(S.accept(r, prop.q, torch.tensor(prop.token), self.sp.greedy, s.generator))
            if ok:
                blk.accepted += 1
                self._commit(s)
                if not s.pending or s.pending[0].block != prop.block:
                    self._close_block(s, prop.block)
            else:
                self._close_block(s, prop.block)
                for b in {p.block for p in s.pending[1:]}:
                    self._close_block(s, b)
                self.stats.recovered_tokens += 1
                self._reject(s, int(S.recover(r, prop.q, self.sp.greedy, s.generator)))
                return False
        return True

    def _close_block(self, s: SequenceState, block: int) -> None:
        blk = s.blocks.pop(block, None)
        if blk is not None and blk.verified > 0:
            self.stats.record_block(blk.model, blk.verified, blk.accepted)

    # ---- one step of each method ---------------------------------------------------------------------

    def _step_standard(self, s: SequenceState) -> None:
        # 1. every model in r scores the newest position; 2. sample from r; 3. commit
        for i in self.comb.uses:
            self._feed(s, i, s.end)
        r = self._r(s, s.end)
        self._commit(s, int(S.sample(r, self.sp.greedy, s.generator)))

    def _step_sd(self, s: SequenceState) -> None:
        # 1. model 0 drafts gamma_0 tokens
        before = self.runners[0].n
        self._draft(s, 0, self.gamma[0])
        # 2. the black-box target scores them: each model in r runs one forward over the drafts (the
        #    proposer re-scores from where it was before drafting, as a separate target model would)
        for i in self.comb.uses:
            if i == 0:
                self.runners[0].rollback(before)
            self._feed(s, i, s.end)
        # 3. verify; 4. a bonus token from r when every draft was accepted
        if self._verify(s) and not s.done:
            self.stats.bonus_tokens += 1
            self._commit(s, int(S.sample(self._r(s, s.end), self.sp.greedy, s.generator)))

    def _step_cos(self, s: SequenceState, bonus: bool) -> None:
        if not s.pending:
            # 1. the default proposer drafts a fresh block
            self._draft(s, 0, self.gamma[0])
            return
        # 2. the model with the fewest cached distributions scores every pending token in one forward
        k = min(self.scorers, key=lambda i: (self.runners[i].n, i))
        self._feed(s, k, s.end)
        # 3. verify what every model in r has now scored; a rejection ends the turn (model 0 takes over)
        if not self._verify(s) or s.done:
            return
        # 4. cos: k's next-token distribution gives a bonus proposal, followed by gamma_k - 1 drafts
        if bonus and self._draft(s, k, self.gamma[k]) > 0:
            self.stats.bonus_tokens += 1
            self._verify(s)  # models in r that already scored these positions (e.g. r = target = k)

    # ---- public ------------------------------------------------------------------------------------

    def generate(self, prompt_ids: Sequence[int], max_new_tokens: int, seed: int) -> tuple[list[int], DecodeStats]:
        """Decode one prompt. Returns the generated token ids (prompt excluded) and the run's stats."""
        assert len(prompt_ids) > 0, "the prompt must hold at least one token"
        self.stats = DecodeStats.for_models(self.method, self.names)
        calls0 = [(r.calls, r.seconds, r.tokens) for r in self.runners]
        g = torch.Generator().manual_seed(int(seed))
        s = SequenceState(list(prompt_ids), len(prompt_ids), max_new_tokens, g, n_committed=len(prompt_ids))
        s.dists = [{} for _ in self.runners]
        for run in self.runners:
            run.reset()
        step = {
            "standard": self._step_standard,
            "sd": self._step_sd,
            "naive-cos": lambda st: self._step_cos(st, bonus=False),
            "cos": lambda st: self._step_cos(st, bonus=True),
        }[self.method]
        t0 = time.perf_counter()
        while not s.done:
            step(s)
        self.stats.wall_seconds = time.perf_counter() - t0
        for b in list(s.blocks):
            self._close_block(s, b)
        self.stats.discarded_tokens += len(s.pending)
        out = s.seq[s.prompt_len : s.n_committed][:max_new_tokens]
        self.stats.output_tokens = len(out)
        for m, run, (c, sec, tok) in zip(self.stats.models, self.runners, calls0):
            m.forward_calls, m.forward_seconds, m.tokens_fed = run.calls - c, run.seconds - sec, run.tokens - tok
        return out, self.stats
