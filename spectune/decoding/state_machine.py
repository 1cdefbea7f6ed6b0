"""The decode state machine, written once and run by two backends: the runtime and the simulator.

A *method* (``spectune/decoding/methods/``) is a step function over the primitives of :class:`Machine` below:
"bring model i's cache up to position j" (``feed``), "model i proposes at the end" (``draft``, ``lookup``),
"accept / recover at the first pending position" (``verify``), "an exact sample from r" (``sample``: the token
of ``standard``, the ``sd`` bonus). Everything a method decides (who feeds what, how long a block is, what is
committed, rolled back or discarded, every stat) happens here, in the same code for both backends.

A backend is what differs:
  * ``runners`` - one per model, with ``n[row]`` (tokens of sequence ``row`` held in its cache), ``forward(feeds)``
    (one batched forward: ``{row: token ids}`` -> ``{row: output}``), ``rollback(row, n)``, ``release(rows)``,
    ``maybe_compact()`` and the counters ``calls``, ``seconds``, ``tokens``, ``by_k``, ``prefill_seconds``.
    Runtime: ``BatchedRunner`` (a real model and KV cache). Simulator: ``SimRunner`` (a length per row; every
    forward costs the calibrated latency L(model, batch, k)).
  * the oracle methods of :class:`Backend` - the token-level math. Runtime (``loop.py``): sampling from the stored
    logits and the Leviathan rule (``sampling.py``). Simulator (``tune/simulate.py``): calibrated draft traces,
    whose per-position acceptance decides each proposal.

Positions. ``seq`` = prompt + committed tokens + pending proposals; the distribution of the token at position j
comes from feeding tokens ``< j``. A pending proposal at position j is *verified* once every model r depends on
(``uses``) has scored position j.

Glossary (one verification; see also ``sampling.py`` and ``stats.py``):
  * proposal / draft token - a token proposed by a model (or looked up); it waits in ``pending``.
  * accepted token  - a proposal kept by the rule; it is committed.
  * recovered token - the exact replacement for the first rejected proposal; later proposals are discarded.
  * bonus token     - ``sd``: an exact sample from r after a fully accepted block; ``cos``: the verifier's own
                      next token, which becomes a proposal of a new block.
"""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Generator, Protocol, Sequence

from spectune.decoding.policy import DraftPolicy
from spectune.decoding.stats import DecodeStats

# A step of one sequence is a generator. It yields requests and receives their answers:
#   (model i, start, upto)  -> the output of feeding seq[start:upto] to model i (runtime: logits [upto-start, V])
#   (SV_REQUEST, preds)     -> how many drafts to verify (the batch scheduler of sv.py decides for every row at once)
SV_REQUEST = -1
Request = tuple[int, Any, Any]
Step = Generator[Request, Any, None]


@dataclass
class Proposal:
    token: int
    model: int  # proposer index (a lookup proposer is index len(models))
    block: int  # draft block id (see stats.py)
    conf: float  # the proposer's probability of its own token (1 for a lookup): what a confidence policy reads
    data: Any = None  # the backend's: runtime q [V] (None: a point mass); simulator: the drawn accept decision


@dataclass
class Block:
    model: int
    size: int = 0  # proposals made
    verified: int = 0
    accepted: int = 0


@dataclass
class SequenceState:
    """Per-sequence decode state; row ``row`` of every runner belongs to this sequence."""

    row: int
    seq: list[int]
    prompt_len: int
    max_new_tokens: int
    stats: DecodeStats
    n_committed: int = 0
    pending: list[Proposal] = field(default_factory=list)
    blocks: dict[int, Block] = field(default_factory=dict)
    next_block: int = 0
    draft_len: int = 0  # how many tokens model 0 drafts next (the draft-length policy moves it)
    rounds: int = 0  # rounds the method started (its renewal points: a fresh draft of model 0, a lookup, ...)
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


class Backend(Protocol):
    """What a backend provides besides its ``runners`` (see the module docstring)."""

    runners: list[Any]

    def stored(self, s: SequenceState, i: int, start: int, out: Any) -> None:
        """Keep model i's output of a feed that started at ``start`` (positions start+1 ..)."""

    def propose(self, s: SequenceState, i: int, block: int, pos: int) -> Proposal:
        """Model i's proposal for position ``s.end`` (the ``pos``-th of its block); its scores there are known."""

    def lookup(self, s: SequenceState, k: int, block: int) -> list[Proposal]:
        """Up to k looked-up proposals after ``seq`` (a lookup proposer), [] on a miss."""

    def judge(self, s: SequenceState, props: list[Proposal]) -> tuple[int, int | None]:
        """The accept rule over the first pending proposals: (how many are accepted before the first rejection,
        the recovered token when one is rejected, else None)."""

    def sample(self, s: SequenceState) -> int:
        """An exact sample from r at position ``s.end``."""

    def drop(self, s: SequenceState, keep: int) -> None:
        """Forget outputs derived from tokens at index >= keep."""

    def sv_predict(self, s: SequenceState) -> list[float]:
        """sv: the predicted acceptance of each pending draft from the companion's view of it."""


@dataclass(frozen=True)
class Rules:
    """What a machine runs, built alike by the decoder and the simulator: the method's ``step`` over r's models
    ``uses`` with ``gamma`` per model and the draft-length ``policy``; ``scorers``: the models whose distributions
    a step scores (default: ``uses``); with ``lookup`` the default proposer looks up to ``lookup_k`` tokens up
    (default gamma_0) instead of model 0 drafting, and with ``fallback`` (ngram+model) model 0 drafts where it
    misses; ``sv``: the policy whose batch scheduler answers SV_REQUEST; ``eos``: the end-of-sequence token (None:
    rows end at their length only)."""

    step: Callable[["Machine", SequenceState], Step]
    uses: Sequence[int]
    gamma: Sequence[int]
    policy: DraftPolicy | None = None
    scorers: Sequence[int] | None = None
    lookup: bool = False
    lookup_k: int | None = None
    fallback: bool = False
    sv: Any = None
    eos: int | None = None


class Machine:
    """The primitives every method's step is written in, and the batch driver (``run``), over ``backend`` by
    ``rules``."""

    def __init__(self, backend: Backend, rules: Rules):
        self.B = backend
        self.step = rules.step
        self.uses = tuple(rules.uses)
        self.gamma = list(rules.gamma)
        self.policy = rules.policy or DraftPolicy()
        self.lookup_proposer = rules.lookup  # the default proposer looks tokens up instead of model 0 drafting
        self.fallback = rules.fallback  # ngram+model: model 0 drafts where the lookup misses
        self.lookup_k = rules.lookup_k or self.gamma[0]  # the longest lookup (ngram: gamma_0)
        self.eos = rules.eos
        self.scorers = list(rules.scorers) if rules.scorers is not None else list(self.uses)
        self.sv = rules.sv  # sv: the policy whose batch scheduler answers SV_REQUEST
        self.events: list[tuple] | None = None  # set to a list to record every decision (tests compare backends)
        self.on_round: Callable[[SequenceState], None] | None = None  # called as a round starts (the simulator)

    # ---- the primitives --------------------------------------------------------------------------------

    def n(self, s: SequenceState, i: int) -> int:
        """Tokens of sequence s held in model i's cache."""
        return self.B.runners[i].n[s.row]

    def log(self, *event: Any) -> None:
        if self.events is not None:
            self.events.append(event)

    def new_round(self, s: SequenceState) -> None:
        """A method's renewal point: it starts afresh here (a fresh block of the default proposer, a lookup, ...)."""
        if self.on_round is not None:
            self.on_round(s)
        s.rounds += 1
        self.log("round", s.row)

    def feed(self, s: SequenceState, i: int, upto: int) -> Step:
        """Bring model i's cache to ``seq[:upto]`` in one forward."""
        start = self.n(s, i)
        if start >= upto:
            return
        self.log("feed", s.row, i, upto - start)
        out = yield (i, start, upto)
        self.B.stored(s, i, start, out)

    def rewind(self, s: SequenceState, i: int, keep: int) -> None:
        """Model i keeps at most ``keep`` tokens of s (it will re-score what follows)."""
        self.B.runners[i].rollback(s.row, min(self.n(s, i), keep))

    def draft(self, s: SequenceState, i: int, count: int) -> Generator[Request, Any, int]:
        """Model i proposes up to ``count`` tokens at the end of ``seq`` (one new block). Returns how many."""
        count = min(count, s.room())
        if count <= 0:
            return 0
        block = self._open_block(s, i)
        for k in range(count):
            yield from self.feed(s, i, s.end)  # the first feed may catch up several tokens; later ones feed one
            prop = self.B.propose(s, i, block, k)
            s.pending.append(prop)
            s.seq.append(prop.token)
            s.blocks[block].size += 1
            if prop.token == self.eos or (i == 0 and self.policy.stop(prop.conf)):
                count = k + 1
                break
        self.log("draft", s.row, i, count)
        return count

    def lookup(self, s: SequenceState) -> None:
        """The lookup proposer proposes up to ``lookup_k`` tokens (one block; none on a miss)."""
        props = self.B.lookup(s, min(self.lookup_k, s.room()), s.next_block)
        toks = [p.token for p in props]
        if self.eos in toks:
            props = props[: toks.index(self.eos) + 1]
        self.log("lookup", s.row, len(props))
        if not props:
            return
        block = self._open_block(s, props[0].model)
        s.blocks[block].size = len(props)
        s.pending += props
        s.seq += [p.token for p in props]

    def _open_block(self, s: SequenceState, model: int) -> int:
        block, s.next_block = s.next_block, s.next_block + 1
        s.blocks[block] = Block(model=model)
        return block

    def sample(self, s: SequenceState) -> None:
        """Commit an exact sample from r at the end (nothing may be pending)."""
        self.log("sample", s.row)
        self._commit(s, self.B.sample(s))

    def verify(self, s: SequenceState) -> bool:
        """Verify the pending proposals every model in r has scored, in one call of the accept rule; commit them
        in order up to the first rejection, which is replaced by a recovered token. False on a rejection."""
        if s.done or not s.pending:
            return True
        m = min(len(s.pending), min(self.n(s, i) for i in self.uses) - s.n_committed + 1)
        if m <= 0:
            return True  # not every model in r has scored the first pending position yet
        props = s.pending[:m]
        accepted, recovered = self.B.judge(s, props)
        self.log("verify", s.row, m, accepted)
        for prop in props[:accepted]:
            blk = s.blocks[prop.block]
            blk.verified += 1
            blk.accepted += 1
            self._commit(s)
            if not s.pending or s.pending[0].block != prop.block:
                self._close_block(s, prop.block)
            if s.done:
                return True
        if accepted == m:
            return True
        rejected = props[accepted].block
        s.blocks[rejected].verified += 1
        for b in [rejected] + sorted({p.block for p in s.pending} - {rejected}):
            self._close_block(s, b)
        s.stats.recovered_tokens += 1
        s.stats.discarded_tokens += len(s.pending) - 1
        self.truncate(s, s.n_committed)
        self._commit(s, recovered)
        return False

    def truncate(self, s: SequenceState, keep: int) -> None:
        """Drop every token at index >= keep: pending proposals, cache entries and outputs derived from them."""
        del s.pending[keep - s.n_committed:], s.seq[keep:]
        for run in self.B.runners:
            run.rollback(s.row, min(run.n[s.row], keep))
        self.B.drop(s, keep)

    def _commit(self, s: SequenceState, token: int | None = None) -> None:
        """Commit the first pending proposal (token None) or append an exact sample (recovered / bonus)."""
        if token is None:
            s.pending.pop(0)
        else:
            assert not s.pending and s.end == s.n_committed
            s.seq.append(token)
        s.n_committed += 1
        if s.seq[s.n_committed - 1] == self.eos or s.n_output >= s.max_new_tokens:
            s.done = True

    def _close_block(self, s: SequenceState, block: int) -> None:
        blk = s.blocks.pop(block, None)
        if blk is not None and blk.verified > 0:
            s.stats.record_block(blk.model, blk.verified, blk.accepted)
            if blk.model == 0:
                s.draft_len = self.policy.update(s.draft_len, blk.size, blk.accepted)

    def finish(self, s: SequenceState, elapsed: float) -> None:
        """Close a finished sequence's stats (the driver then drops its cache rows)."""
        for b in list(s.blocks):
            self._close_block(s, b)
        s.stats.discarded_tokens += len(s.pending)
        s.stats.output_tokens = min(s.n_output, s.max_new_tokens)
        s.stats.wall_seconds = elapsed

    # ---- the batch driver ------------------------------------------------------------------------------

    def run(self, states: list[SequenceState]) -> None:
        """Decode every sequence to the end. Each tick runs one batched forward of the model that the most
        waiting sequences need (or, when every live sequence waits for its sv verification length, the sv
        batch scheduler); sequences accept different numbers of tokens and progress independently."""
        steps: dict[int, Step] = {}
        waiting: dict[int, Request] = {}
        finished: list[int] = []
        t0 = time.perf_counter()

        def advance(row: int, answer: Any) -> None:
            """Run sequence ``row`` until it makes a request or finishes."""
            s = states[row]
            while not s.done or row in steps:
                if row not in steps:
                    steps[row], answer = self.step(self, s), None
                try:
                    waiting[row] = steps[row].send(answer)
                    return
                except StopIteration:
                    del steps[row]
                    answer = None
            self.finish(s, time.perf_counter() - t0)
            finished.append(row)

        for row in range(len(states)):
            advance(row, None)
        while waiting:
            m = _busiest(waiting)
            if m == SV_REQUEST:  # every live sequence waits for its sv verification length: schedule the batch
                rows = sorted(waiting)
                for row, k in zip(rows, self.sv.schedule([waiting[r][1] for r in rows])):
                    del waiting[row]
                    advance(row, k)
                continue
            feeds = {row: states[row].seq[a:b] for row, (i, a, b) in waiting.items() if i == m}
            out = self.B.runners[m].forward(feeds)
            for row in feeds:
                del waiting[row]
                advance(row, out[row])
            if finished:  # finished sequences leave every model's batch
                for run in self.B.runners:
                    run.release(finished)
                finished.clear()
            self.B.runners[m].maybe_compact()


def _busiest(waiting: dict[int, Request]) -> int:
    """The model that the most waiting sequences need (ties: the lower index); SV_REQUEST when none needs one."""
    if len(waiting) == 1:
        return next(iter(waiting.values()))[0]
    need = Counter(r[0] for r in waiting.values() if r[0] != SV_REQUEST)
    return max(need, key=lambda i: (need[i], -i)) if need else SV_REQUEST


def new_states(prompts: Sequence[Sequence[int]], max_new_tokens: int, gamma0: int, stat_names: list[str],
               method: str) -> list[SequenceState]:
    """One fresh state per prompt (row b = prompt b)."""
    return [SequenceState(b, list(p), len(p), max_new_tokens, DecodeStats.for_models(method, stat_names),
                          n_committed=len(p), draft_len=gamma0) for b, p in enumerate(prompts)]


def batch_stats(method: str, stat_names: list[str], states: Sequence[SequenceState], runners: Sequence[Any],
                wall: float) -> DecodeStats:
    """The batch's stats: every sequence's counts, and each model's forwards as its runner counted them."""
    total = DecodeStats.for_models(method, stat_names)
    for s in states:
        total.merge(s.stats)
    total.wall_seconds = wall
    for m, run in zip(total.models, runners):
        m.forward_calls, m.forward_seconds, m.tokens_fed = run.calls, run.seconds, run.tokens
        m.calls_by_k = {k: list(v) for k, v in run.by_k.items()}
        m.prefill_seconds = run.prefill_seconds
    return total
