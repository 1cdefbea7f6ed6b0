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
  * ``sv``        - Speculative Verification (sv.py): model 0 drafts, model 1 (the companion) scores the drafts,
                    calibrated bins predict each draft's acceptance and a goodput-optimal k* (batch: the greedy
                    scheduler) decides how many drafts the models in r verify; the rest are discarded unverified.

Proposers and draft-length policies (one registry each: proposers.py, policy.py):
  * ``proposer=NgramProposer`` (``sd`` only) - prompt lookup (ngram.py) proposes instead of model 0, as point masses.
  * ``policy`` - how many tokens model 0 drafts per block (fixed, heuristic, confidence); exact by construction.
"""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Generator, Sequence

import torch

from spectune.decoding import sampling as S
from spectune.decoding.batch_cache import BatchedRunner
from spectune.decoding.combine import Combination
from spectune.decoding.ngram import NgramProposer, point_mass
from spectune.decoding.policy import DraftPolicy
from spectune.decoding.runtime import make_runner, resolve_runtime
from spectune.decoding.stats import DecodeStats
from spectune.decoding.sv import SVPolicy, expected_tokens, features


@dataclass
class Proposal:
    token: int
    q: torch.Tensor | None  # [V] the distribution the token was sampled from; None: looked up (a point mass)
    model: int  # proposer index (the ngram proposer is index len(models))
    block: int  # draft block id (see stats.py)


@dataclass
class _Block:
    model: int
    size: int = 0  # proposals drafted
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
    """Per-sequence decode state; row ``row`` of every model's batched cache belongs to this sequence."""

    row: int
    seq: list[int]
    prompt_len: int
    max_new_tokens: int
    generator: torch.Generator
    stats: DecodeStats
    n_committed: int = 0
    pending: list[Proposal] = field(default_factory=list)
    dists: list[dict[int, torch.Tensor]] = field(default_factory=list)  # per model: position -> logits [V]
    blocks: dict[int, _Block] = field(default_factory=dict)
    next_block: int = 0
    draft_len: int = 0  # how many tokens model 0 drafts next (the draft-length policy moves it)
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


# A step of one sequence is a generator: it yields feed requests (model index, token ids) and receives the
# logits [len, V] of that feed. The driver batches the requests of all sequences per model (see generate_batch).
# sv also yields ("sv", predicted acceptance per draft) and receives how many drafts to verify.
Feed = tuple[int, list[int]]
Step = Generator[Feed, torch.Tensor, None]
SV_REQUEST = "sv"


class Decoder:
    """Runs one method over loaded models, for one prompt (``generate``) or a batch (``generate_batch``)."""

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
        sv_policy: SVPolicy | None = None,
        proposer: NgramProposer | None = None,
        policy: DraftPolicy | None = None,
        runtime: str = "eager",
    ):
        assert len(models) == len(gamma) == len(names)
        self.runtime = resolve_runtime(runtime, device)  # eager | compiled: which runner runs the forwards
        assert proposer is None or method == "sd", "the ngram proposer runs with sd"
        self.proposer, self.policy = proposer, policy or DraftPolicy()
        assert method != "sv" or self.policy.spec == "fixed", "sv decides its verification length itself"
        assert method in ("standard", "sd", "naive-cos", "cos", "sv"), method
        assert method != "sv" or (sv_policy is not None and len(models) >= 3), "sv needs a policy and 3+ models"
        self.sv = sv_policy
        self.models = list(models)
        self.device = device
        self.runners: list[BatchedRunner] = []
        self.names = list(names)
        self.stat_names = self.names + ([proposer.spec] if proposer else [])  # stats row per proposer
        self.method = method
        self.comb = combination
        self.gamma = list(gamma)
        self.sp = sampling
        self.eos = eos_token_id
        # who scores proposals: cos alternates among all models; naive-cos and sd only need r's models
        self.scorers = list(range(len(models))) if method == "cos" else list(combination.uses)

    # ---- small helpers over one sequence -------------------------------------------------------------

    def _n(self, s: SequenceState, i: int) -> int:
        """Tokens of sequence s held in model i's cache."""
        return self.runners[i].n[s.row]

    def _q(self, logits: torch.Tensor) -> torch.Tensor:
        """A model's own sampling distribution (warp applied per model). [V] -> [V]"""
        return S.logits_to_probs(logits, self.sp.temperature, self.sp.top_k, self.sp.top_p)

    def _r(self, s: SequenceState, j: int) -> torch.Tensor:
        """The combined distribution r_j = C(...) at position j. -> [V]"""
        return self.comb.probs([s.dists[i][j] for i in self.comb.uses], self.sp.temperature, self.sp.top_k, self.sp.top_p)

    def _feed(self, s: SequenceState, i: int, upto: int) -> Step:
        """Bring model i's cache to ``seq[:upto]`` in one forward, storing its logits for the new positions."""
        start = self._n(s, i)
        if start >= upto:
            return
        logits = yield (i, s.seq[start:upto])  # [upto - start, V], logits for positions start+1 .. upto
        for k in range(logits.shape[0]):
            pos = start + 1 + k
            if pos >= s.n_committed:
                s.dists[i][pos] = logits[k]

    def _draft(self, s: SequenceState, i: int, count: int) -> Generator[Feed, torch.Tensor, int]:
        """Model i proposes up to ``count`` tokens at the end of ``seq`` (one new block). Returns how many."""
        count = min(count, s.room())
        if count <= 0:
            return 0
        block = s.next_block
        s.next_block += 1
        s.blocks[block] = blk = _Block(model=i)
        for k in range(count):
            yield from self._feed(s, i, s.end)  # the first feed may catch up several tokens; later ones feed one
            q = self._q(s.dists[i][s.end])
            x = int(S.sample(q, self.sp.greedy, s.generator))
            s.pending.append(Proposal(x, q, i, block))
            s.seq.append(x)
            blk.size += 1
            if x == self.eos or (i == 0 and self.policy.stop(float(q[x]))):
                return k + 1
        return count

    def _lookup(self, s: SequenceState) -> None:
        """The ngram proposer looks up to gamma_0 tokens after the context (one block; none on a miss)."""
        toks = self.proposer.propose(s.seq, min(self.gamma[0], s.room()))  # type: ignore[union-attr]
        if self.eos in toks:
            toks = toks[: toks.index(self.eos) + 1]
        if not toks:
            return
        s.blocks[s.next_block] = _Block(model=len(self.models), size=len(toks))
        s.pending += [Proposal(x, None, len(self.models), s.next_block) for x in toks]
        s.seq += toks
        s.next_block += 1

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

    def _truncate(self, s: SequenceState, keep: int) -> None:
        """Drop every token at index >= keep: pending proposals, cache entries and logits derived from them."""
        del s.pending[keep - s.n_committed :], s.seq[keep:]
        for i, run in enumerate(self.runners):
            run.rollback(s.row, keep)
            for pos in [p for p in s.dists[i] if p > keep]:
                del s.dists[i][pos]

    def _reject(self, s: SequenceState, token: int) -> None:
        """Replace the first pending proposal by the recovered token; drop everything derived from it."""
        s.stats.discarded_tokens += len(s.pending) - 1
        self._truncate(s, s.n_committed)
        self._commit(s, token)

    def _verify(self, s: SequenceState) -> bool:
        """Verify the pending proposals every model in r has scored: one vectorised accept over the whole block
        (one host read of its decisions, as vLLM's rejection sampler), then commit in order up to the first
        rejection, which is replaced by a recovered token. Returns False on a rejection."""
        if s.done or not s.pending:
            return True
        j0 = s.n_committed
        m = min(len(s.pending), min(self._n(s, i) for i in self.comb.uses) - j0 + 1)
        if m <= 0:
            return True  # not every model in r has scored position j0 yet
        props = s.pending[:m]
        r = self._r_block(s, j0, m)  # [m, V]
        q = torch.stack([p.q if p.q is not None else point_mass(p.token, r.shape[-1]) for p in props])  # [m, V]
        ok = S.accept(r, q, torch.tensor([p.token for p in props]), self.sp.greedy, s.generator).tolist()
        for t, (prop, good) in enumerate(zip(props, ok)):
            blk = s.blocks[prop.block]
            blk.verified += 1
            if not good:
                self._close_block(s, prop.block)
                for b in {p.block for p in s.pending[1:]}:
                    self._close_block(s, b)
                s.stats.recovered_tokens += 1
                self._reject(s, int(S.recover(r[t], q[t], self.sp.greedy, s.generator)))
                return False
            blk.accepted += 1
            self._commit(s)
            if not s.pending or s.pending[0].block != prop.block:
                self._close_block(s, prop.block)
            if s.done:
                break
        return True

    def _r_block(self, s: SequenceState, j0: int, m: int) -> torch.Tensor:
        """r at positions j0 .. j0 + m - 1 in one call. -> [m, V]"""
        per_model = [torch.stack([s.dists[i][j0 + t] for t in range(m)]) for i in self.comb.uses]
        return self.comb.probs(per_model, self.sp.temperature, self.sp.top_k, self.sp.top_p)

    def _close_block(self, s: SequenceState, block: int) -> None:
        blk = s.blocks.pop(block, None)
        if blk is not None and blk.verified > 0:
            s.stats.record_block(blk.model, blk.verified, blk.accepted)
            if blk.model == 0:
                s.draft_len = self.policy.update(s.draft_len, blk.size, blk.accepted)

    # ---- one step of each method ---------------------------------------------------------------------

    def _step_standard(self, s: SequenceState) -> Step:
        # 1. every model in r scores the newest position; 2. sample from r; 3. commit
        for i in self.comb.uses:
            yield from self._feed(s, i, s.end)
        r = self._r(s, s.end)
        self._commit(s, int(S.sample(r, self.sp.greedy, s.generator)))

    def _step_sd(self, s: SequenceState) -> Step:
        # 1. model 0 drafts (the policy says how many), or the ngram proposer looks tokens up (maybe none)
        if self.proposer is None:
            yield from self._draft(s, 0, s.draft_len)
        else:
            self._lookup(s)
        # 2. the black-box target scores them: each model in r runs one forward over the drafts; the proposer
        #    re-scores the gamma + 1 positions from the last committed token, as a separate target model would
        for i in self.comb.uses:
            if i == 0 and self.proposer is None:
                self.runners[0].rollback(s.row, min(self._n(s, 0), s.n_committed - 1))
            yield from self._feed(s, i, s.end)
        # 3. verify; 4. a bonus token from r when every draft was accepted (a lookup miss: the one token from r)
        proposed = bool(s.pending)
        if self._verify(s) and not s.done:
            s.stats.bonus_tokens += proposed
            self._commit(s, int(S.sample(self._r(s, s.end), self.sp.greedy, s.generator)))

    def _step_cos(self, s: SequenceState, bonus: bool) -> Step:
        if not s.pending:
            # 1. the default proposer drafts a fresh block (the policy says how many)
            yield from self._draft(s, 0, s.draft_len)
            return
        # 2. the model with the fewest cached distributions scores every pending token in one forward
        k = min(self.scorers, key=lambda i: (self._n(s, i), i))
        yield from self._feed(s, k, s.end)
        # 3. verify what every model in r has now scored; a rejection ends the turn (model 0 takes over)
        if not self._verify(s) or s.done:
            return
        # 4. cos: k's next-token distribution gives a bonus proposal, followed by gamma_k - 1 drafts
        if bonus and (yield from self._draft(s, k, self.gamma[k])) > 0:
            s.stats.bonus_tokens += 1
            self._verify(s)  # models in r that already scored these positions (e.g. r = target = k)

    def _step_sv(self, s: SequenceState) -> Step:
        # 1. the draft (model 0) proposes gamma_0 tokens; 2. the companion (model 1) scores them in one forward
        yield from self._draft(s, 0, self.gamma[0])
        yield from self._feed(s, 1, s.end)
        # 3. companion features -> predicted acceptance per draft -> verification length k (batch scheduler)
        j0 = s.n_committed
        if s.pending:
            q = torch.stack([p.q for p in s.pending])
            c = torch.stack([self._q(s.dists[1][j0 + i]) for i in range(len(s.pending))])
            sim, acc = features(q, c, torch.tensor([p.token for p in s.pending]))
            preds = self.sv.predict(sim.numpy(), acc.numpy()).tolist()
        else:
            preds = []
        k = yield (SV_REQUEST, preds)
        s.stats.verified_len_hist[k] += 1
        s.stats.predicted_accepted += expected_tokens(preds, k) - 1
        # 4. drafts past k are discarded before verification (this depends only on draft and companion)
        if k < len(s.pending):
            s.stats.truncated_tokens += len(s.pending) - k
            self._truncate(s, j0 + k)
        # 5. the models in r score the k drafts (+ the next position) in one forward each; verify; bonus from r
        for i in self.comb.uses:
            yield from self._feed(s, i, s.end)
        accepted0 = s.n_committed
        ok = self._verify(s)
        s.stats.realised_accepted += s.n_committed - accepted0 - (0 if ok else 1)
        if ok and not s.done:
            if k > 0:
                s.stats.bonus_tokens += 1
            self._commit(s, int(S.sample(self._r(s, s.end), self.sp.greedy, s.generator)))

    def _step(self, s: SequenceState) -> Step:
        if self.method == "sv":
            return self._step_sv(s)
        if self.method == "standard":
            return self._step_standard(s)
        if self.method == "sd":
            return self._step_sd(s)
        return self._step_cos(s, bonus=self.method == "cos")

    # ---- public ------------------------------------------------------------------------------------

    def generate(self, prompt_ids: Sequence[int], max_new_tokens: int, seed: int) -> tuple[list[int], DecodeStats]:
        """Decode one prompt. Returns the generated token ids (prompt excluded) and the run's stats."""
        outs, _, total = self.generate_batch([prompt_ids], max_new_tokens, [seed])
        return outs[0], total

    def generate_batch(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int, seeds: Sequence[int]
    ) -> tuple[list[list[int]], list[DecodeStats], DecodeStats]:
        """Decode a batch in one loop; sequences accept different numbers of tokens and progress independently.

        Returns (generated ids per prompt, stats per prompt, batch stats). Per-prompt stats hold that sequence's
        acceptance counts and its wall time to finish; forward calls and times are batch-level (batch stats).
        """
        assert len(prompts) == len(seeds) and len(prompts) > 0
        assert all(len(p) > 0 for p in prompts), "every prompt must hold at least one token"
        rows = len(prompts)
        max_len = max(map(len, prompts)) + max_new_tokens + max(self.gamma) + 2
        self.runners = [make_runner(self.runtime, m, rows, self.device, max_len) for m in self.models]
        states = [
            SequenceState(b, list(p), len(p), max_new_tokens, torch.Generator().manual_seed(int(sd)),
                          DecodeStats.for_models(self.method, self.stat_names), n_committed=len(p),
                          draft_len=self.gamma[0])
            for b, (p, sd) in enumerate(zip(prompts, seeds))
        ]
        for s in states:
            s.dists = [{} for _ in self.models]
        self._states = states  # for partial_outputs() when a forward fails midway
        steps: dict[int, Step] = {}
        waiting: dict[int, Feed] = {}
        finished: list[int] = []
        t0 = time.perf_counter()

        def advance(row: int, logits: torch.Tensor | int | None) -> None:
            """Run sequence ``row`` until it requests a forward or finishes."""
            s = states[row]
            while not s.done or row in steps:
                if row not in steps:
                    steps[row], logits = self._step(s), None
                try:
                    waiting[row] = steps[row].send(logits)  # type: ignore[arg-type]
                    return
                except StopIteration:
                    del steps[row]
                    logits = None
            self._finish(s, time.perf_counter() - t0)
            finished.append(row)

        for row in range(rows):
            advance(row, None)
        while waiting:
            need = Counter(i for i, _ in waiting.values() if i != SV_REQUEST)
            if not need:
                # every live sequence waits for its sv verification length: schedule the batch at once
                rows_ = sorted(waiting)
                ks = self.sv.schedule([waiting[r][1] for r in rows_])  # type: ignore[union-attr]
                for row, k in zip(rows_, ks):
                    del waiting[row]
                    advance(row, k)  # type: ignore[arg-type]
                continue
            # one batched forward per tick: the model that the most waiting sequences need
            m = max(need, key=lambda i: (need[i], -i))
            feeds = {row: toks for row, (i, toks) in waiting.items() if i == m}
            out = self.runners[m].forward(feeds)
            for row in feeds:
                del waiting[row]
                advance(row, out[row])
            for run in self.runners:  # finished sequences leave every model's batch
                run.release(finished)
            finished.clear()
            self.runners[m].maybe_compact()
        total = DecodeStats.for_models(self.method, self.stat_names)
        for s in states:
            total.merge(s.stats)
        total.wall_seconds = time.perf_counter() - t0
        for m, run in zip(total.models, self.runners):
            m.forward_calls, m.forward_seconds, m.tokens_fed = run.calls, run.seconds, run.tokens
            m.calls_by_k = {k: list(v) for k, v in run.by_k.items()}
            m.prefill_seconds = run.prefill_seconds
        outs = [s.seq[s.prompt_len : s.n_committed][:max_new_tokens] for s in states]
        return outs, [s.stats for s in states], total

    def partial_outputs(self) -> list[list[int]]:
        """The tokens committed so far per sequence of the latest ``generate_batch`` (after a failure in it)."""
        return [s.seq[s.prompt_len : s.n_committed] for s in getattr(self, "_states", [])]

    def _finish(self, s: SequenceState, elapsed: float) -> None:
        """Close a finished sequence's stats (the driver then drops its cache rows)."""
        for b in list(s.blocks):
            self._close_block(s, b)
        s.stats.discarded_tokens += len(s.pending)
        s.stats.output_tokens = min(s.n_output, s.max_new_tokens)
        s.stats.wall_seconds = elapsed
