"""The simulator: the decode state machine of ``spectune/decoding/state_machine.py`` over calibrated traces.

It runs a registered method's own step function (the same code as the runtime) with a second backend:

* :class:`SimRunner` per model - a cache length per sequence instead of a KV cache; every batched forward costs
  the calibrated latency L(model, live batch size, longest feed), as ``BatchedRunner`` pads shorter rows;
* :class:`TraceBackend` - the token-level decisions from calibrated draft traces. A block of proposer i takes the
  next calibrated draft of i (a shuffled pass over all of them, then another: stratified, so a run of a few
  hundred blocks sees the whole calibration) and accepts its first A proposals, where P[A >= j] = prod_{i<j}
  beta_i of that draft (greedy traces: 0/1, so A is the draft's own accepted length). A is read off a 1-D
  low-discrepancy sequence (u_n = frac(u_0 + n / golden ratio)) rather than independent coins, so acceptance
  frequencies converge like 1/n, not 1/sqrt(n). E[accepted | gamma] = mean prod beta exactly as in the traces,
  with the drafts' position dependence and correlation kept. The same draft's ``conf`` (the proposer's
  probability of its own token) drives a confidence policy, its ``length`` a lookup's proposal count, its
  ``sv_pred`` sv's prediction.
  Past the calibrated length (a heuristic policy's growing blocks) a draft keeps its last position's beta.
  Drafts labelled with their calibration prompt (``Traces.group``) are drawn prompt by prompt: a row spends an
  equal share of its ``max_new_tokens`` on each prompt (row r starting at the r-th; the cost model's one-row runs
  visit every prompt in turn for a request's length, ``visit``, each visit starting its draft-length policy
  afresh), as a measured workload gives every prompt the same number of new tokens. Pooled draws would weight
  prompts by rounds instead of tokens and over-price a proposer that does very well on a few prompts (prompt
  lookup on edits). Within a prompt, a lookup's states are drawn in proportion to 1 / the tokens a block from
  them yields (``TraceBackend._weighted``): whether a lookup hits belongs to the stretch of the answer around its
  state, which decoding crosses in few long rounds where it copies and many short ones where it does not.
  Under greedy decoding every exact method commits r's own greedy tokens, so where the profile recorded r's
  trajectory for each calibration prompt (``Paths``: prompt + answer ids), a lookup is not drawn at all: each row
  walks its prompt's path, the lookup proposes from the path's prefix exactly as the runtime's would, and its
  accepted length is the proposal's common prefix with the path -- the runtime's own lookups, position by
  position. Where the profile also recorded each model's greedy token at every position of the path, fed the path
  before it (``Paths.drafts``), a model's blocks walk the path too: while its drafts stay on the path they are the
  tokens it recorded there, so a proposal is accepted iff it and every pending proposal before it match the path
  -- the runtime's own accepted lengths at every position, where the traces hold 8 states a prompt, up to
  numerics: in bf16 the recorded forward over the whole path rounds differently from the runtime's incremental
  ones, and near-ties flip (the target's own token there equals its path at 98.2 % of the positions of the
  bundled Zen 5 profile), as the runtime's own answer leaves the calibration's at a near-tie. What
  the path cannot say is how sure a draft is once it has left the path: there a confidence policy reads the q the
  model had at the same position of the path (it decides only how many more rejected tokens are drafted). ``sv``
  keeps its drawn drafts (they carry the companion's predictions).

No tokens or logits exist here: sequences hold placeholder tokens, and there is no end-of-sequence.
The cost model prices configurations with it (``cost.py``); the closed forms there are its test oracles.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

import numpy as np

from spectune.decoding.state_machine import Machine, Proposal, Rules, SequenceState, batch_stats, new_states
from spectune.decoding.policy import DraftPolicy, parse_policy
from spectune.decoding.registry import Method, get_method
from spectune.decoding.stats import DecodeStats

Latency = Callable[[int, int, int], float]  # (model index, live batch size, k) -> seconds
Turn = Callable[[int, int], float]  # (model index, live batch size) -> seconds of a model's turn (SimRunner)


@dataclass
class Paths:
    """r's greedy trajectories, one per calibration prompt, the lookup that walks them and the models' greedy
    tokens along them (see the module docstring)."""

    tokens: dict[Any, tuple[list[int], int]]  # prompt label -> (prompt + answer token ids, where the answer starts)
    propose: Callable[[Sequence[int], int], list[int]] | None = None  # the lookup: (context, k) -> up to k ids
    # model index -> prompt label -> (its greedy token, its probability q) at each index of the path (the prompt's:
    # -1, nan), each fed the path before it
    drafts: dict[int, dict[Any, tuple[np.ndarray, np.ndarray]]] = field(default_factory=dict)

    def _key(self, group: Any) -> Any:
        if group is None:
            return next(iter(self.tokens)) if len(self.tokens) == 1 else None
        label = str(group)
        return label.rpartition("#")[0] if "#" in label else label  # a resample's "label#j": its prompt's path

    def path(self, group: Any) -> tuple[list[int], int] | None:
        """The path of a traces' prompt label (a resample's "label#j" is its prompt's path)."""
        return self.tokens.get(self._key(group))

    def drafted(self, group: Any, model: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Model ``model``'s greedy tokens and their q along the path of ``group``, where recorded."""
        return self.drafts.get(model, {}).get(self._key(group))


@dataclass
class Traces:
    """The calibrated drafts of one proposer (rows = drafts, columns = position in the draft)."""

    beta: np.ndarray  # [n, gm] P[the j-th proposal is accepted | the ones before were] (greedy: 0/1)
    conf: np.ndarray | None = None  # [n, gm] the proposer's probability of its own token
    length: np.ndarray | None = None  # [n] how many tokens a lookup proposed (None: a model drafts every position)
    sv_pred: np.ndarray | None = None  # [n, gm] sv's predicted acceptance of the draft (the bins of its features)
    group: np.ndarray | None = None  # [n] the calibration prompt each draft came from (None: one pool)

    def __post_init__(self) -> None:
        self.beta = np.asarray(self.beta, dtype=float)
        if self.beta.ndim != 2 or self.beta.shape[0] == 0 or self.beta.shape[1] == 0:
            raise ValueError("traces need a non-empty [n_drafts, gamma_max] beta array")
        self.survival = np.cumprod(self.beta, axis=1)  # [n, gm] P[the first j + 1 proposals are accepted]

    @property
    def gamma_max(self) -> int:
        return self.beta.shape[1]


class SimRunner:
    """A model in the simulator: ``BatchedRunner``'s interface over cache lengths, priced by the latency model."""

    def __init__(self, model: int, rows: int, latency: Latency | None, cached: int = 1, last: list | None = None,
                 turn: Turn | None = None, ragged: bool = False):
        self.model, self.latency, self.turn, self.ragged = model, latency, turn, ragged
        self.n = [cached] * rows  # the prompt is cached: prefill is not part of decoding goodput
        self.live = rows
        self.calls, self.seconds, self.tokens, self.prefill_seconds = 0, 0.0, 0, 0.0
        self.by_k: dict[int, list[float]] = {}  # feed length k -> [calls, seconds]
        self.last = last if last is not None else [None]  # shared by a run's runners: the model that ran last
        self.turns = 0  # forwards that followed another model's: each pays turn(model, b), an engine's fixed cost

    def forward(self, feeds: dict[int, list[int]]) -> dict[int, None]:
        lens = [len(v) for v in feeds.values()]
        k, fed = max(lens, default=0), sum(lens)
        for row, v in feeds.items():
            self.n[row] += len(v)
        dt = self._price(k, lens) if self.latency is not None else 0.0
        if self.last[0] != self.model:
            self.last[0] = self.model
            self.turns += 1
            dt += self.turn(self.model, self.live) if self.turn is not None else 0.0
        self.calls += 1
        self.seconds += dt
        self.tokens += fed
        acc = self.by_k.get(k)
        if acc is None:
            acc = self.by_k[k] = [0, 0.0]
        acc[0] += 1
        acc[1] += dt
        return dict.fromkeys(feeds)

    def _price(self, k: int, lens: list[int]) -> float:
        """A forward's seconds: L(live, k) at the longest feed ``k`` (spectune's runtime pads every row to it), or
        with ``ragged`` (an engine that runs the rows' tokens as one flattened forward: ``Engine.ragged``) the mean
        over its rows of L(live, k_i), each row's feed priced as if every row were fed alike: with L linear in k
        that is L at the mean feed, and a fixed cost of a drafting row (L's step from k = 1 to 2 above its
        slope) is paid by the rows that draft only."""
        assert self.latency is not None
        if not self.ragged or min(lens, default=k) == k:
            return self.latency(self.model, self.live, k)
        return sum(self.latency(self.model, self.live, n) for n in lens) / len(lens)

    def rollback(self, row: int, n: int) -> None:
        self.n[row] = min(self.n[row], n)

    def release(self, rows: list[int]) -> None:
        self.live -= len(rows)

    def maybe_compact(self) -> None:
        pass


class TraceBackend:
    """The simulator's oracle: every decision from calibrated traces (see the module docstring)."""

    GOLDEN = 0.6180339887498949  # 1 / golden ratio: the additive recurrence with the most even 1-D coverage

    PLASTIC = 0.7548776662466927  # 1 / plastic number: the draft stream's step, independent of GOLDEN's

    def __init__(self, runners: list[SimRunner], traces: Sequence[Traces | None], seed: int = 0,
                 shuffle: bool = True, horizon: int = 0, lookup_k: int | None = None,
                 requests: tuple[int, int] | None = None, fallback_k: int = 0, paths: Paths | None = None,
                 visit: int = 0):
        self.runners, self.traces, self.shuffle, self.horizon = runners, list(traces), shuffle, horizon
        self.visit = visit  # tokens a row spends on a prompt per visit (0: horizon / prompts, one visit each)
        self.paths = paths  # r's greedy trajectories: lookups and model drafts walk them instead of drawing states
        self._entered: dict[int, tuple[Any, int]] = {}  # row -> (the visit it walks, its output count on entering)
        self.lookup_k = lookup_k  # the lookup's longest proposal: its drafts are drawn by weight (_weighted)
        self.fallback_k = fallback_k  # ngram+model: model 0 drafts up to this many where the lookup misses
        self.requests = requests  # (batch j, batches): row r stays on one prompt (simulate_requests)
        self.rng = np.random.default_rng(seed)
        labels = {g for t in self.traces if t is not None and t.group is not None for g in t.group.tolist()}
        self.groups = sorted(labels) if horizon > 0 else []  # the prompts a row visits, an equal share each
        self._order: dict[tuple[int, Any], list[int]] = {}  # (proposer, prompt) -> its drafts left in this pass
        self._pick: dict[tuple[int, Any], tuple[np.ndarray, np.ndarray, list[float]]] = {}  # weighted draws
        self._u: dict[int, float] = {}  # proposer -> its low-discrepancy stream's last value
        self._drawn: dict[tuple[int, int], tuple[int, int]] = {}  # (row, block) -> (calibrated draft, A)
        self._walking: dict[tuple[int, int], tuple] = {}  # (row, block) -> the path it walks (_walk_draft)

    def _traces(self, i: int) -> Traces:
        t = self.traces[i] if i < len(self.traces) else None
        if t is None:
            raise KeyError(f"no calibrated traces for proposer {i}")
        return t

    def visit_of(self, s: SequenceState) -> int:
        """Which of its visits to the prompts row ``s`` is on: its output so far in visits of ``visit`` tokens (0:
        in shares of the horizon, one per prompt). simulate_requests: 0 (a row stays on one prompt)."""
        if self.requests is not None or not self.groups:
            return 0
        n = min(max(s.n_output, 0), self.horizon - 1)
        return n // self.visit if self.visit else n * len(self.groups) // self.horizon

    def _group(self, s: SequenceState) -> Any:
        """The calibration prompt row ``s`` is on: its visit's, counted from its own (row r starts at the r-th)."""
        if not self.groups:
            return None
        g = len(self.groups)
        if self.requests is not None:  # one request per row: row r of batch j, strided over every prompt
            j, batches = self.requests
            return self.groups[(s.row * batches + j) * g // (len(self.runners[0].n) * batches) % g]
        return self.groups[(s.row + self.visit_of(s)) % g]

    def _pool(self, t: Traces, group: Any) -> np.ndarray:
        if group is not None and t.group is not None and (t.group == group).any():
            return np.flatnonzero(t.group == group)
        return np.arange(t.beta.shape[0])

    def _draw(self, i: int, s: SequenceState) -> tuple[int, int]:
        """A new block of proposer i: (the calibrated draft it follows, how many of its proposals are accepted)."""
        t, group = self._traces(i), self._group(s)
        if self.shuffle and self.lookup_k is not None and i == len(self.runners):
            d = self._weighted(i, t, group, self.lookup_k)
        else:
            left = self._order.get((i, group))
            if not left:
                pool = self._pool(t, group)
                left = self._order[(i, group)] = list(pool[self.rng.permutation(len(pool))] if self.shuffle
                                                      else pool[::-1])
            d = int(left.pop())
        u = self._u[i] = (self._u.get(i, self.rng.random()) + self.GOLDEN) % 1.0
        return d, int((u < t.survival[d]).sum())

    def _weighted(self, i: int, t: Traces, group: Any, k: int) -> int:
        """A lookup's calibrated state, each drawn in proportion to 1 / (the tokens a block from it yields with
        proposals of up to k): the states sit at evenly spaced positions of r's trajectory, and whether a lookup
        hits is a property of the stretch around it (the answer copies a passage of the prompt, or does not),
        so decoding crosses a copied stretch in few long rounds and the rest in many one-token rounds (rounds
        per token = 1 / tokens per round). A draft model's acceptance varies from round to round far more than
        from stretch to stretch: its drafts are drawn evenly (``_draw``). Systematic draws along a
        low-discrepancy stream over the cumulative weights, so a few hundred blocks see each state its share."""
        got = self._pick.get((i, group))
        if got is None:
            pool = self._pool(t, group)
            pool = pool[self.rng.permutation(len(pool))]
            reach = np.arange(t.gamma_max) < k
            if t.length is not None:
                reach = reach[None, :] & (np.arange(t.gamma_max)[None, :] < t.length[pool][:, None])
            advance = 1.0 + (t.survival[pool] * reach).sum(axis=1)
            if self.fallback_k and t.length is not None:  # ngram+model: a miss is followed by model 0's block
                own = self._traces(0)
                advance[t.length[pool] == 0] += own.survival[:, : min(self.fallback_k, own.gamma_max)].sum(1).mean()
            cum = np.cumsum(1.0 / advance)
            got = self._pick[(i, group)] = (pool, cum / cum[-1], [float(self.rng.random())])
        pool, cum, v = got
        v[0] = (v[0] + self.PLASTIC) % 1.0
        return int(pool[min(int(np.searchsorted(cum, v[0], side="right")), len(pool) - 1)])

    def _proposal(self, i: int, block: int, drawn: tuple[int, int], pos: int) -> Proposal:
        t, (d, accepted) = self._traces(i), drawn
        j = min(pos, t.gamma_max - 1)
        if pos < t.gamma_max or accepted < t.gamma_max:
            ok = pos < accepted
        else:  # past the calibrated length of a fully accepted draft: its last position's beta
            ok = bool(self.rng.random() < t.beta[d, j])
        conf = float(t.conf[d, j]) if t.conf is not None else 1.0
        pred = float(t.sv_pred[d, j]) if t.sv_pred is not None else float("nan")
        return Proposal(0, i, block, conf, (ok, pred))

    def stored(self, s: SequenceState, i: int, start: int, out: Any) -> None:
        pass

    def propose(self, s: SequenceState, i: int, block: int, pos: int) -> Proposal:
        key = (s.row, block)
        if pos == 0:  # a block walks the path or is drawn, decided at its first proposal
            walk = self._walk_draft(s, i)
            if walk is None:
                self._drawn[key] = self._draw(i, s)
            else:
                self._walking[key] = walk
        if key not in self._walking:
            return self._proposal(i, block, self._drawn[key], pos)
        (toks, at), (drafted, conf) = self._walking[key]
        # this proposal's index on the path (past a pending proposal that left the path, the draft's context is
        # not the path's, but the judge stops at that one first)
        j = at + len(s.pending)
        ok = j < len(toks) and drafted[j] == toks[j]
        return Proposal(0, i, block, float(conf[min(j, len(conf) - 1)]), (bool(ok), float("nan")))

    def _walk_draft(self, s: SequenceState, i: int) -> tuple[tuple[list[int], int], tuple] | None:
        """Paths: model i drafting on r's path -- (``_walk``, its greedy tokens and q along it) -- or None (no
        recorded path or tokens for the row's prompt, past the answer's end, or sv, whose drafts carry the
        companion's predictions)."""
        t = self.traces[i] if i < len(self.traces) else None
        if self.paths is None or (t is not None and t.sv_pred is not None):
            return None
        drafted = self.paths.drafted(self._group(s), i)
        walk = self._walk(s) if drafted is not None else None
        return (walk, drafted) if walk is not None else None

    def _walk(self, s: SequenceState) -> tuple[list[int], int] | None:
        """Paths: (the path row ``s`` walks, the index of its next token); it starts its prompt's answer afresh on
        each visit to that prompt. None without a path for the row's prompt, or past the recorded answer's end
        (blocks are drawn from the states there). A visit can start while proposals are pending (cos: a partial
        verification crosses into the next visit); the new answer then starts that many positions in."""
        group = self._group(s)
        path = self.paths.path(group) if self.paths is not None else None
        if path is None:
            return None
        seen, visit = self._entered.get(s.row), (group, self.visit_of(s))
        if seen is None or seen[0] != visit:
            seen = self._entered[s.row] = (visit, s.n_output)
        toks, start = path
        at = start + s.n_output - seen[1]
        return (toks, at) if at < len(toks) else None

    def lookup(self, s: SequenceState, k: int, block: int) -> list[Proposal]:
        i = len(self.runners)  # the lookup proposer's index
        walk = self._walk(s)
        if walk is not None:  # the runtime's own lookup on r's path: its proposal and accepted length, exactly
            toks, at = walk
            props = self.paths.propose(toks[:at], k)  # type: ignore[union-attr]
            ok = [a == b for a, b in zip(props, toks[at:])]
            accepted = ok.index(False) if False in ok else len(ok)
            return [Proposal(0, i, block, 1.0, (pos < accepted, float("nan"))) for pos in range(len(props))]
        t, drawn = self._traces(i), self._draw(i, s)
        n = min(k, int(t.length[drawn[0]]) if t.length is not None else t.gamma_max)
        return [self._proposal(i, block, drawn, pos) for pos in range(n)]

    def judge(self, s: SequenceState, props: list[Proposal]) -> tuple[int, int | None]:
        for a, p in enumerate(props):
            if not p.data[0]:
                return a, 0
        return len(props), None

    def sample(self, s: SequenceState) -> int:
        return 0

    def drop(self, s: SequenceState, keep: int) -> None:
        pass

    def sv_predict(self, s: SequenceState) -> list[float]:
        return [p.data[1] for p in s.pending]


@dataclass
class SimResult:
    """A simulation's totals. With one row they count whole rounds only, from the second round's start (the first
    inherits the prompt's logits) to the start of the first round past ``max_new_tokens`` (no block is shortened
    for lack of room), so tokens / seconds is the renewal-reward estimate of goodput without boundary effects.
    With several rows: every tick of the batch until every row has ``max_new_tokens``."""

    tokens: int
    seconds: float  # simulated wall time of the whole batch
    rows: int
    stats: DecodeStats  # every decision of the whole run (the last round too)
    rounds: int = 0  # rounds the method started, over all rows (see machine.SequenceState.rounds)
    calls_by_k: dict[tuple[int, int], int] = field(default_factory=dict)  # (model, feed length) -> forward calls;
    # (model, 0) -> the model's turns (see SimRunner), each priced at turn(model, b)

    def add(self, other: "SimResult") -> None:
        """Add another run's totals (the same configuration and rows) into this one."""
        self.stats.merge(other.stats)
        self.tokens, self.seconds, self.rounds = (self.tokens + other.tokens, self.seconds + other.seconds,
                                                  self.rounds + other.rounds)
        self.calls_by_k = dict(Counter(self.calls_by_k) + Counter(other.calls_by_k))

    @property
    def forwards(self) -> Counter:
        """Forward calls per model index."""
        out: Counter = Counter()
        for (m, k), n in self.calls_by_k.items():
            if k:
                out[m] += n
        return out

    @property
    def goodput(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def latency_per_token(self) -> float:
        """Seconds per output token of one request (every row sits through every tick)."""
        return self.seconds / (self.tokens / self.rows) if self.tokens else float("inf")

    @property
    def mean_accepted_length(self) -> float:
        return self.stats.mean_accepted_length


def _as_traces(t: Traces | np.ndarray | None) -> Traces | None:
    return t if t is None or isinstance(t, Traces) else Traces(np.asarray(t, dtype=float))


@dataclass(frozen=True)
class SimOptions:
    """What :func:`simulate` runs besides the method and its models' traces, and how.

    ``lookup``: the lookup proposer's traces, which then proposes instead of model 0 (sd) up to ``lookup_k`` tokens
    (default gamma_0), or with ``fallback`` (ngram+model) first: model 0 drafts on a miss; ``paths``: r's greedy
    trajectories, which the lookup (and model drafts, with ``Paths.drafts``) then walk instead of drawing
    calibrated states; ``visit``: with one row, the tokens it spends on a prompt at a time (a request's length: the
    share a measured workload gives each prompt, and a walk within the recorded answer), every prompt in turn,
    ``max_new_tokens`` rounded to whole passes over the prompts (0: each prompt once, an equal share of
    ``max_new_tokens``); ``turn(model, batch)`` prices each turn of a model (its first forward after another
    model's: an engine's fixed cost of a step's draft; None: free); ``sv``: the ``SVPolicy`` of method sv.
    ``shuffle=False`` takes each proposer's drafts in order; ``as_runtime`` keeps the runtime's boundaries (the
    prompt of ``prompt_len`` tokens is fed; ``max_new_tokens`` ends every row exactly): with both, a run replays
    recorded decisions step by step (the shared-machine test). ``requests``: see :func:`simulate_requests`;
    ``events``: a list the machine appends its events to. ``ragged``: a forward is priced at the mean of its rows'
    prices (an engine's flattened batch), not at the longest feed (the runtime's padded one; ``SimRunner._price``).
    """

    rows: int = 1
    max_new_tokens: int = 256
    seed: int = 0
    policy: DraftPolicy | str | None = None
    lookup: Traces | None = None
    lookup_k: int | None = None
    fallback: bool = False
    paths: Paths | None = None
    visit: int = 0
    turn: Turn | None = None
    sv: Any = None
    events: list | None = None
    shuffle: bool = True
    as_runtime: bool = False
    prompt_len: int = 1
    requests: tuple[int, int] | None = None
    ragged: bool = False


def simulate(method: str | Method, gamma: Sequence[int], uses: Sequence[int],
             traces: Sequence[Traces | np.ndarray | None], latency: Latency | None = None,
             options: SimOptions | None = None, **fields: Any) -> SimResult:
    """Run ``method`` over models 0..n-1 (0 = the default proposer) on calibrated traces: ``traces[i]`` is model
    i's drafts against r (a :class:`Traces` or a [n, gamma_max] beta array; None for a model that never
    proposes); ``latency(model, batch, k)`` prices each forward (None: count only); ``options``
    (:class:`SimOptions`), any of its fields given by keyword over it, say the rest."""
    o = replace(options or SimOptions(), **fields)
    spec = get_method(method) if isinstance(method, str) else method
    n, rows, max_new_tokens, lookup = len(gamma), o.rows, o.max_new_tokens, o.lookup
    last: list = [None]
    runners = [SimRunner(i, rows, latency, cached=0 if o.as_runtime else o.prompt_len, last=last, turn=o.turn,
                         ragged=o.ragged) for i in range(n)]
    k = (o.lookup_k or gamma[0]) if lookup is not None else None
    fallback = o.fallback and lookup is not None
    backend = TraceBackend(runners, [_as_traces(t) for t in traces] + [lookup], o.seed, o.shuffle, max_new_tokens,
                           k, o.requests, fallback_k=gamma[0] if fallback else 0, paths=o.paths,
                           visit=o.visit if rows == 1 and o.requests is None else 0)
    if backend.visit and backend.groups:  # whole passes: every prompt the same number of visits
        per_pass = backend.visit * len(backend.groups)
        max_new_tokens = backend.horizon = per_pass * max(1, round(max_new_tokens / per_pass))
    scorers = range(n) if spec.scorers == "all" else uses
    machine = Machine(backend, Rules(spec.step, uses, gamma, parse_policy(o.policy), scorers, lookup is not None, k,
                                     fallback, o.sv))
    machine.events = o.events
    names = [str(i) for i in range(n)] + (["lookup"] if lookup is not None else [])
    window = rows == 1 and not o.as_runtime  # measure whole rounds only (see SimResult): room never shortens a block
    states = new_states([[0] * o.prompt_len] * rows, max_new_tokens + (_UNBOUNDED if window else 0), gamma[0],
                        names, spec.name)
    marks = _watch_rounds(machine, backend, runners, max_new_tokens, gamma[0]) if window else []
    machine.run(states)
    stats = batch_stats(spec.name, names, states, runners, 0.0)
    if len(marks) >= 2:
        (t0, r0, s0, k0), (t1, r1, s1, k1) = marks[0], marks[-1]
        return SimResult(t1 - t0, s1 - s0, rows, stats, r1 - r0, _diff(k1, k0))
    _, _, seconds, by_k = _mark(states[0], runners)
    return SimResult(stats.output_tokens, seconds, rows, stats, sum(s.rounds for s in states), by_k)


def _watch_rounds(machine: Machine, backend: TraceBackend, runners: list[SimRunner], max_new_tokens: int,
                  gamma0: int) -> list[tuple]:
    """One row's window of whole rounds: the counts as the second and as the latest round start (the list
    returned, filled as the machine runs); the row stops at the first round past ``max_new_tokens``, and starts
    each visit to a prompt as a request does (the policy at its first length)."""
    marks: list[tuple] = []
    visiting = [0]  # the visit the row is on

    def on_round(s: SequenceState) -> None:
        if s.rounds >= 1:
            del marks[1:]
            marks.append(_mark(s, runners))
        if s.n_output >= max_new_tokens:
            s.done = True  # the window is full; the round starting now is not counted
        now = backend.visit_of(s) if backend.visit else visiting[0]
        if now != visiting[0]:
            visiting[0], s.draft_len = now, gamma0

    machine.on_round = on_round
    return marks


def simulate_requests(rows: int, max_new_tokens: int, batches: int, seed: int = 0, **kw: Any) -> SimResult:
    """``batches`` static batches of ``rows`` requests of ``max_new_tokens`` tokens each, run one after another as
    the runtime runs a workload; the totals of all of them. Every row stays on one calibration prompt for its whole
    request (row r of batch j on the (r * batches + j)-th of the prompts spread evenly, so each batch mixes the
    workload's kinds), and a batch runs until its slowest row is done (finished rows leave it): a batch pays for
    its straggler, which is where short requests at batch > 1 lose to the steady state of one row (Zen 4 mix
    validation, 32 tokens at batch 4: sd gamma=1 ran 26 rounds per batch where its mean row needed 21.9).
    ``kw``: :func:`simulate`'s other arguments."""
    total: SimResult | None = None
    for j in range(batches):
        res = simulate(rows=rows, max_new_tokens=max_new_tokens, seed=seed + j, requests=(j, batches), **kw)
        if total is None:
            total = res
        else:
            total.add(res)
    assert total is not None, "simulate_requests needs at least one batch"
    return total


_UNBOUNDED = 1 << 40


def _mark(s: SequenceState, runners: list[SimRunner]) -> tuple[int, int, float, dict[tuple[int, int], int]]:
    """(tokens of s, its rounds, seconds of every runner, forwards by (model, feed length), with a model's turns
    at feed length 0) so far."""
    return s.n_output, s.rounds, sum(r.seconds for r in runners), {
        **{(r.model, k): int(v[0]) for r in runners for k, v in r.by_k.items()},
        **{(r.model, 0): r.turns for r in runners if r.turns}}


def _diff(a: dict, b: dict) -> dict:
    return {k: v - b.get(k, 0) for k, v in a.items() if v - b.get(k, 0)}
