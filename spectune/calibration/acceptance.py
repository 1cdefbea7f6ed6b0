"""Acceptance traces along real decoding trajectories.

For one prompt (``run.py`` wraps it in the tokenizer's chat template when ``chat_template`` and the tokenizer
has one; with ``ignore_eos`` the trajectory continues past end-of-sequence) the procedure below runs at every
trajectory *state* (committed sequence ``seq`` of length t). Prompts are traced side by side, up to
``prompt_batch`` at a time: every model keeps one ragged :class:`~spectune.decoding.batch_cache.BatchedRunner`
whose rows are the prompts, so one forward serves every prompt (on 2 CPU cores a batch of 12 prompts costs
about 3x less than 12 batch-1 forwards). Each prompt keeps its own random stream, so its rows do not depend on
which prompts share its batch (up to float rounding of batched matmuls).

1. every model p in turn is the proposer: it drafts ``gamma_max`` tokens from its own distribution q (greedy:
   argmax; otherwise a sample at the calibration temperature / top-k / top-p), and every other model scores
   the draft block in one forward, so all models' distributions at the drafted positions are known;
2. one row per drafted token is recorded (see below) for every *combination set* the proposer belongs to:
   the user's combination over all models, and ``target`` over every pair (i < j) of models (r = model j);
3. the trajectory advances by exact speculative decoding of the user's combination r with proposer 0 (the
   default proposer): the accepted prefix of its block plus one token from r (recovered or bonus), so
   states are visited along a sample path of r (greedy: r's argmax path). Unrecorded steps of the same kind
   follow until the trajectory has grown by ``state_stride`` tokens since the state, so the states spread over
   the first ``states_per_prompt * state_stride`` tokens of each answer, as decoding spends them (acceptance --
   a lookup's above all -- changes along an answer: its first tokens often restate the prompt).

Because the non-first models are proposers too, the reverse direction used by the alternate proposal framework
(a verifier's bonus token and continuation checked by the other model) is measured at the same states.

Per drafted token x at draft position ``pos`` (0-based) with proposer q and combined r:
  * ``beta``  = min(1, r(x)/q(x)), the probability the Leviathan rule accepts x; greedy (temperature 0): the
    greedy rule's acceptance 1[x == argmax r];
  * ``alpha`` = sum_x min(q(x), r(x)), the exact acceptance probability at this position; greedy:
    1[argmax q == argmax r] (the temperature -> 0 limit);
  * ``beta_soft`` / ``alpha_soft``: min(1, r(x)/q(x)) and sum_x min(q, r) of the distributions themselves (the
    decoder builds them at temperature 1 when greedy); equal to beta / alpha when sampling, and with greedy
    calibration they keep the information the 0/1 indicators lose.
  * ``q``: the proposer's probability of its own token (built as the decoder builds q: at temperature 1 when
    greedy), what a ``confidence`` draft-length policy reads.
A draft is (workload, proposer, draft_id); the same draft_id across proposers is the same trajectory state.
The trajectory itself (the prompt's ids, then every token the advancing steps committed) is kept per prompt
(``trajectories``): under greedy decoding it is what every exact method decodes, so a lookup can be replayed on it
at every position, not only at the states; and every model's greedy token along it (``path_drafts``,
``path_draft_rows``), from which a model's drafts are replayed on it the same way.

Lookups (prompt lookup / n-gram proposers, ``settings.lookups`` such as ``ngram:1,3``): at the same states, each
lookup proposes up to ``gamma_max`` tokens from the context (prompt + committed), exactly as the decoder's lookup
would, and every model scores the looked-up block in one forward. One row per position with ``proposer`` = the
lookup's spec, against the user's combination and against every model alone (r = ``target`` of one model, what
``sd`` with a lookup and r = the target verifies). Proposed positions: q is a point mass, so ``beta`` = r(x)
(greedy: 1[x == argmax r]), ``alpha`` = ``beta``, ``q`` = 1. Positions the lookup did not reach (a miss: all of
them): ``token`` = -1 and every probability 0, so a draft's proposed length is its count of tokens >= 0.
E[accepted | gamma] of a draft is sum_{i<=gamma} prod_{j<i} beta_j (see ``Profile.expected_accepted``).

SV (speculative verification) rows, for every ordered triple (draft d, companion c, target t) of distinct
models, from d's drafts: ``s`` = sum_x min(q_d(x), q_c(x)), ``a`` = min(1, q_c(x)/q_d(x)) (from the
distributions themselves, as beta_soft), and ``beta`` / ``beta_soft`` of x against the target alone.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from spectune.decoding import sampling as S
from spectune.decoding.batch_cache import BatchedRunner
from spectune.decoding.combine import Combination, parse_combination
from spectune.decoding.proposers import parse_proposer
from spectune.profile import MODELS_SEP

CALIBRATION_PROMPTS = 15  # prompts traced in all by default, spread over the workloads (3 each for mix's five)


def default_prompts_per_workload(n_workloads: int) -> int:
    """Calibration prompts per workload by default: a budget of ``CALIBRATION_PROMPTS`` shared by the workloads,
    at least 3 each. One workload gets 15 prompts, not 3: a lookup's acceptance varies from prompt to prompt far
    more than a draft's (an answer that restates its prompt copies whole blocks), and 3 prompts of ``code`` priced
    ``ngram:2,4`` at 2.8x the target alone where held-out prompts measured 1.5x (docs/benchmarks.md)."""
    return max(3, -(-CALIBRATION_PROMPTS // max(1, n_workloads)))


@dataclass(frozen=True)
class AcceptanceSettings:
    gamma_max: int = 8
    prompts_per_workload: int = 3
    states_per_prompt: int = 8
    state_stride: int = 8  # tokens of r's trajectory between recorded states (at least one SD step)
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    max_prompt_tokens: int = 192
    chat_template: bool = True  # wrap prompts in the tokenizer's chat template (when it has one)
    ignore_eos: bool = True  # keep decoding past end-of-sequence (as the tuner's measured runs do)
    prompt_batch: int = 16  # prompts traced side by side (one checkpoint per batch)
    lookups: tuple[str, ...] = ("ngram:1,2", "ngram:1,3", "ngram:2,4")  # lookup proposers traced beside the models

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass(frozen=True)
class CombinationSet:
    """r over a subset of the models: ``members`` are indices into the full model list (in order)."""

    members: tuple[int, ...]
    comb: Combination

    def label(self, names: Sequence[str]) -> str:
        return MODELS_SEP.join(names[i] for i in self.members)


def combination_sets(n_models: int, combine: Any) -> list[CombinationSet]:
    """The user's combination over all models, then ``target`` over every pair i < j (deduplicated)."""
    sets = [CombinationSet(tuple(range(n_models)), parse_combination(combine, n_models))]
    for i, j in itertools.combinations(range(n_models), 2):
        cs = CombinationSet((i, j), parse_combination("target", 2))
        if not (cs.members == sets[0].members and cs.comb.spec == sets[0].comb.spec):
            sets.append(cs)
    return sets


@dataclass(frozen=True)
class PromptUnit:
    """One calibration prompt: its workload, its index in that workload's calibration split, its token ids."""

    workload: str
    index: int
    ids: tuple[int, ...]


def _generator(settings: AcceptanceSettings, unit: PromptUnit) -> torch.Generator:
    """Per-prompt random stream: a prompt draws the same numbers whichever batch it is traced in."""
    return torch.Generator().manual_seed(settings.seed * 1_000_003 + unit.index * 7919 + sum(map(ord, unit.workload)))


def lookup_sets(n_models: int, combine: Any) -> list[CombinationSet]:
    """What lookups are verified against: the user's combination over all models, then each model alone."""
    return [CombinationSet(tuple(range(n_models)), parse_combination(combine, n_models))] + [
        CombinationSet((j,), parse_combination("target", 1)) for j in range(n_models)]


def _record(names: Sequence[str], sets: list[CombinationSet], p: int, per_model: list[torch.Tensor],
            draft: list[int], st: AcceptanceSettings, key: dict, trace_rows: list[dict], sv_rows: list[dict]) -> None:
    """Trace rows (every combination set holding proposer p) and SV rows (p as the draft) of one draft.

    per_model: n tensors [gamma_max (+1), V], each model's logits at the drafted positions; draft: gamma_max ids.
    """
    gm = st.gamma_max
    n = len(per_model)
    tok = torch.tensor(draft)  # [gm]
    q = _probs(per_model[p][:gm], st)  # greedy: built at temperature 1 (the decoder's convention)
    q_tok = q.gather(-1, tok[:, None]).squeeze(-1)  # [gm] the proposer's probability of its own token
    L = [lg[:gm] for lg in per_model]
    for cs in sets:
        if p not in cs.members:
            continue
        r = _combined(cs, L, st)
        beta_soft = S.accept_prob(r, q, tok)  # min(1, r(x)/q(x))
        alpha_soft = S.overlap(q, r)  # sum_x min(q(x), r(x))
        if st.greedy:
            beta = (tok == r.argmax(-1)).float()
            alpha = (q.argmax(-1) == r.argmax(-1)).float()
        else:
            beta, alpha = beta_soft, alpha_soft
        label, spec = cs.label(names), cs.comb.spec
        for j in range(gm):
            trace_rows.append(dict(**key, proposer=names[p], models=label, combination=spec, pos=j, token=draft[j],
                                   beta=float(beta[j]), alpha=float(alpha[j]), beta_soft=float(beta_soft[j]),
                                   alpha_soft=float(alpha_soft[j]), q=float(q_tok[j])))
    for c, tg in itertools.permutations([i for i in range(n) if i != p], 2):  # SV triples with p as the draft
        qc = _probs(L[c], st)
        s_ind = S.overlap(q, qc)  # s = sum_x min(q_d(x), q_c(x))
        a_ind = S.accept_prob(qc, q, tok)  # a = min(1, q_c(x)/q_d(x))
        pt = _probs(L[tg], st)
        b_soft = S.accept_prob(pt, q, tok)
        b = (tok == pt.argmax(-1)).float() if st.greedy else b_soft
        for j in range(gm):
            sv_rows.append(dict(**key, draft=names[p], companion=names[c], target=names[tg], pos=j, token=draft[j],
                                beta=float(b[j]), beta_soft=float(b_soft[j]), s=float(s_ind[j]), a=float(a_ind[j])))


def _record_lookup(names: Sequence[str], sets: list[CombinationSet], spec: str, per_model: list[torch.Tensor] | None,
                   toks: list[int], st: AcceptanceSettings, key: dict, trace_rows: list[dict]) -> None:
    """Rows of one lookup (``toks``: what it proposed, maybe nothing) against every lookup set.

    per_model: n tensors [len(toks) + 1, V], each model's logits at the looked-up positions (None on a miss)."""
    n = len(toks)
    tok = torch.tensor(toks, dtype=torch.long)
    for cs in sets:
        beta = rx = torch.zeros(0)
        if per_model is not None:
            r = _combined(cs, [lg[:n] for lg in per_model], st)  # [n, V]
            rx = r.gather(-1, tok[:, None]).squeeze(-1)  # r(x): q is a point mass, so min(1, r/q) = r(x)
            beta = (tok == r.argmax(-1)).float() if st.greedy else rx
        for j in range(st.gamma_max):
            b, soft = (float(beta[j]), float(rx[j])) if j < n else (0.0, 0.0)
            trace_rows.append(dict(**key, proposer=spec, models=cs.label(names), combination=cs.comb.spec, pos=j,
                                   token=toks[j] if j < n else -1, beta=b, alpha=b, beta_soft=soft, alpha_soft=soft,
                                   q=1.0 if j < n else 0.0))


def _probs(logits: torch.Tensor, st: AcceptanceSettings) -> torch.Tensor:
    return S.logits_to_probs(logits, st.temperature, st.top_k, st.top_p)


def _combined(cs: CombinationSet, L: Sequence[torch.Tensor], st: AcceptanceSettings) -> torch.Tensor:
    """r over the set's members (in the combination's ``uses`` order) from every model's logits L [rows, V]."""
    return cs.comb.probs([L[cs.members[u]] for u in cs.comb.uses], st.temperature, st.top_k, st.top_p)


def _score(run: BatchedRunner, blocks: dict[int, list[int]], seqs: list[list[int]], t: dict[int, int]
           ) -> dict[int, torch.Tensor]:
    """One forward of a model over each row's ``blocks[row]`` after its state ``seqs[row][:t[row]]``; the cache is
    back at the state afterwards. Returns logits [len(block) + 1, V] per row, for positions t .. t + len(block)."""
    for r in blocks:
        run.rollback(r, min(run.n[r], t[r] - 1))
    out = run.forward({r: seqs[r][run.n[r]:t[r]] + blocks[r] for r in blocks})
    for r in blocks:
        run.rollback(r, t[r])
    return {r: out[r][-(len(blocks[r]) + 1):] for r in blocks}


def _draft(run: BatchedRunner, live: list[int], seqs: list[list[int]], t: dict[int, int], st: AcceptanceSettings,
           gens: list[torch.Generator], with_bonus: bool) -> tuple[dict[int, list[torch.Tensor]], dict[int, list[int]]]:
    """The model drafts ``gamma_max`` tokens for every live row from its own distribution. Returns per row its
    logits at the drafted positions (+ the next one ``with_bonus``: r's bonus token) and the draft."""
    for r in live:
        run.rollback(r, min(run.n[r], t[r] - 1))
    out = run.forward({r: seqs[r][run.n[r]:t[r]] for r in live})
    rows = {r: [out[r][-1]] for r in live}  # distribution of position t
    draft: dict[int, list[int]] = {r: [] for r in live}
    for j in range(st.gamma_max):
        for r in live:
            draft[r].append(int(S.sample(_probs(rows[r][j], st), st.greedy, gens[r])))
        if j < st.gamma_max - 1 or with_bonus:
            out = run.forward({r: [draft[r][-1]] for r in live})
            for r in live:
                rows[r].append(out[r][-1])
    for r in live:
        run.rollback(r, t[r])
    return rows, draft


def _trace_lookups(runners: list[BatchedRunner], names: Sequence[str], sets: list[CombinationSet],
                   live: list[int], seqs: list[list[int]], t: dict[int, int], st: AcceptanceSettings,
                   keys: dict[int, dict], trace_rows: list[dict]) -> None:
    """Every lookup of ``st.lookups`` at every live row's state, each distinct looked-up block scored by every
    model in one forward per model (rows side by side)."""
    found = {r: {spec: parse_proposer(spec).propose(seqs[r][:t[r]], st.gamma_max) for spec in st.lookups}
             for r in live}
    distinct = {r: list(dict.fromkeys(tuple(b) for b in found[r].values() if b)) for r in live}
    scored: dict[int, dict[tuple[int, ...], list[torch.Tensor]]] = {r: {} for r in live}
    for u in range(max((len(d) for d in distinct.values()), default=0)):
        todo = {r: list(distinct[r][u]) for r in live if len(distinct[r]) > u}
        per_model = [_score(run, todo, seqs, t) for run in runners]
        for r, blk in todo.items():
            scored[r][tuple(blk)] = [pm[r] for pm in per_model]
    for r in live:
        for spec, toks in found[r].items():
            _record_lookup(names, sets, spec, scored[r].get(tuple(toks)), toks, st, keys[r], trace_rows)


def _advance(L0: list[torch.Tensor], draft0: list[int], user: CombinationSet, st: AcceptanceSettings,
             gen: torch.Generator, eos: int | None) -> list[int]:
    """The tokens one step of exact speculative decoding of the user's r with proposer 0 commits: the accepted
    prefix of its block plus one token from r (recovered or bonus)."""
    gm = st.gamma_max
    r_all = _combined(user, L0, st)  # [gm + 1, V]
    q0 = _probs(L0[0][:gm], st)
    committed: list[int] = []
    for j, x in enumerate(draft0):
        if not bool(S.accept(r_all[j], q0[j], torch.tensor(x), st.greedy, gen)):
            return committed + [int(S.recover(r_all[j], q0[j], st.greedy, gen))]
        committed.append(x)
        if eos is not None and x == eos:
            return committed
    return committed + [int(S.sample(r_all[gm], st.greedy, gen))]


def trace_batch(models: Sequence[Any], names: Sequence[str], combine: Any, units: Sequence[PromptUnit],
                settings: AcceptanceSettings, eos_token_id: int | None = None, device: str = "cpu",
                path_rows: list[dict] | None = None, draft_rows: list[dict] | None = None
                ) -> tuple[list[dict], list[dict]]:
    """Trace rows and SV rows for several prompts traced side by side (see the module docstring); with
    ``path_rows`` also each prompt's trajectory (``path_rows_of``), with ``draft_rows`` every model's greedy token
    along it (``path_draft_rows``).

    Every model gets one :class:`BatchedRunner` whose rows are the prompts, so each forward of the loop below
    serves all prompts at once (ragged lengths are padded and masked); the per-prompt arithmetic, random
    streams and rows are those of tracing each prompt alone. ``models`` are torch modules.
    """
    n, st = len(models), settings
    sets, look_sets = combination_sets(n, combine), lookup_sets(n, combine)
    gens = [_generator(st, u) for u in units]
    runners = [BatchedRunner(m, len(units), device) for m in models]
    seqs = [[int(x) for x in u.ids] for u in units]
    live = list(range(len(units)))  # prompts whose trajectory goes on (all of them with ignore_eos)
    trace_rows: list[dict] = []
    sv_rows: list[dict] = []
    for state in range(st.states_per_prompt):
        if not live:
            break
        t = {r: len(seqs[r]) for r in live}
        keys = {r: dict(workload=units[r].workload, prompt=units[r].index, state=state,
                        draft_id=units[r].index * 1000 + state) for r in live}
        lead: dict[int, tuple[list[torch.Tensor], list[int]]] = {}  # row -> proposer 0's per-model logits, draft
        for p in range(n):
            # 1. proposer p drafts; 2. every other model scores each row's draft block in one forward
            rows, draft = _draft(runners[p], live, seqs, t, st, gens, with_bonus=p == 0)
            per_model = {r: [torch.empty(0)] * n for r in live}
            for r in live:
                per_model[r][p] = torch.stack(rows[r])
            for i in (i for i in range(n) if i != p):
                for r, lg in _score(runners[i], {r: draft[r] for r in live}, seqs, t).items():
                    per_model[r][i] = lg
            if p == 0:
                lead = {r: (per_model[r], draft[r]) for r in live}
            # 3. one row per drafted token
            for r in live:
                _record(names, sets, p, per_model[r], draft[r], st, keys[r], trace_rows, sv_rows)
        _trace_lookups(runners, names, look_sets, live, seqs, t, st, keys, trace_rows)
        # 4. advance every trajectory by exact speculative decoding of the user's r with proposer 0, at least
        #    state_stride tokens (the first step reuses the recorded block)
        ended = _stride(runners, lead, seqs, t, live, sets[0], st, gens, eos_token_id)
        live = [r for r in live if r not in ended]
        for run in runners:
            run.release(ended)
            run.maybe_compact()
    if path_rows is not None:
        for unit, seq in zip(units, seqs):
            path_rows += path_rows_of(unit, seq)
    if draft_rows is not None and st.greedy:
        runners.clear()  # the tracing caches go before the path forwards allocate theirs
        draft_rows += path_draft_rows(models, names, units, seqs, st, device)
    return trace_rows, sv_rows


def path_rows_of(unit: PromptUnit, seq: Sequence[int]) -> list[dict]:
    """The trajectory of one prompt as rows (``trajectories`` table): its prompt's ids at pos -len(prompt)..-1,
    then the answer r's sample path committed (greedy: r's own greedy tokens) at pos 0, 1, ..."""
    n = len(unit.ids)
    return [dict(workload=unit.workload, prompt=unit.index, pos=j - n, token=int(x)) for j, x in enumerate(seq)]


def path_draft_rows(models: Sequence[Any], names: Sequence[str], units: Sequence[PromptUnit],
                    seqs: Sequence[Sequence[int]], settings: AcceptanceSettings, device: str = "cpu") -> list[dict]:
    """Every model's greedy token and its probability q (as a draft's ``conf``: q built as the decoder builds it)
    at each answer position of each prompt's trajectory ``seqs``, fed the trajectory before that position: one
    forward per model and prompt (``path_drafts`` table). Under greedy decoding a block a model drafts from a point
    of r's path proposes these tokens while they stay on the path (up to numerics: this forward over the whole
    path rounds differently from the runtime's incremental ones, and in bf16 near-ties flip), and the first that
    leaves it is the first rejected, so the simulator walks model drafts (all but sv's, which carry the
    companion's predictions) as it walks lookups, position by position."""
    rows: list[dict] = []
    for model, name in zip(models, names):
        for unit, seq in zip(units, seqs):
            n = len(unit.ids)
            if len(seq) <= n:
                continue
            run = BatchedRunner(model, 1, device)
            logits = run.forward({0: list(seq[:-1])})[0][n - 1:]  # [answer length, V] positions n .. len - 1
            q = _probs(logits, settings)  # [answer length, V]
            tok = S.sample(q, True, None)  # the greedy draft's own choice (argmax, as the decoder takes it)
            conf = q.gather(-1, tok[:, None]).squeeze(-1)
            rows += [dict(workload=unit.workload, prompt=unit.index, model=name, pos=j, token=int(x), q=float(c))
                     for j, (x, c) in enumerate(zip(tok.tolist(), conf.tolist()))]
    return rows


def _stride(runners: list[BatchedRunner], lead: dict[int, tuple[list[torch.Tensor], list[int]]],
            seqs: list[list[int]], t: dict[int, int], live: list[int], user: CombinationSet,
            st: AcceptanceSettings, gens: list[torch.Generator], eos: int | None) -> list[int]:
    """Advance every live trajectory from its state ``t`` by exact SD steps of r with proposer 0 (the first one
    is the recorded block ``lead``) until it has grown by ``st.state_stride`` tokens; the rows that met EOS."""
    ended: list[int] = []
    blocks = lead
    todo = list(live)
    while todo:
        for r in todo:
            committed = _advance(*blocks[r], user, st, gens[r], eos)
            seqs[r] += committed
            if eos is not None and eos in committed:
                ended.append(r)
        todo = [r for r in todo if r not in ended and len(seqs[r]) - t[r] < st.state_stride]
        if todo:  # an unrecorded step: proposer 0 drafts, every other model scores its block
            now = {r: len(seqs[r]) for r in todo}
            rows, draft = _draft(runners[0], todo, seqs, now, st, gens, with_bonus=True)
            blocks = {r: ([torch.stack(rows[r])] + [torch.empty(0)] * (len(runners) - 1), draft[r]) for r in todo}
            for i in sorted({user.members[u] for u in user.comb.uses} - {0}):  # r's models; 0 drafted
                for r, lg in _score(runners[i], {r: draft[r] for r in todo}, seqs, now).items():
                    blocks[r][0][i] = lg
    return ended


def trace_prompt(models: Sequence[Any], names: Sequence[str], combine: Any, prompt_ids: Sequence[int],
                 settings: AcceptanceSettings, workload: str, prompt_index: int, eos_token_id: int | None = None,
                 device: str = "cpu") -> tuple[list[dict], list[dict]]:
    """Trace rows and SV rows for one prompt: :func:`trace_batch` with a batch of one."""
    unit = PromptUnit(workload, prompt_index, tuple(int(x) for x in prompt_ids))
    return trace_batch(models, names, combine, [unit], settings, eos_token_id, device)


def group_sizes(n_prompts: int, size: int) -> list[int]:
    """Sizes of the consecutive groups of at most ``size`` prompts, as even as possible."""
    if n_prompts <= 0:
        return []
    k = -(-n_prompts // max(1, size))  # number of groups
    step = -(-n_prompts // k)
    return [min(step, n_prompts - i) for i in range(0, n_prompts, step)]


def batches(units: Sequence[PromptUnit], size: int) -> list[list[PromptUnit]]:
    """The prompts in consecutive groups of ``group_sizes`` (the checkpoint units of the stage)."""
    out, i = [], 0
    for k in group_sizes(len(units), size):
        out.append(list(units[i:i + k]))
        i += k
    return out


def estimate_seconds(latency: Any, names: Sequence[str], settings: AcceptanceSettings, sizes: Sequence[int],
                     ctx: float | None = None) -> float:
    """Rough time of the acceptance stage for prompt groups of these ``sizes``, from measured latencies
    (``latency(name, b, k, ctx)``); the one forward per model and prompt over its whole path (``path_draft_rows``,
    a prefill each) is left out."""
    gm = settings.gamma_max
    total = 0.0
    for b in sizes:
        per_state = 0.0
        for p, name in enumerate(names):
            per_state += (gm + (p == 0)) * latency(name, b, 1, ctx)
            per_state += sum(latency(o, b, gm + 1, ctx) for o in names if o != name)
        per_state += len(settings.lookups) * sum(latency(o, b, gm + 1, ctx) for o in names)  # at most: all hit
        advance = (gm + 1) * latency(names[0], b, 1, ctx) + sum(latency(o, b, gm + 1, ctx) for o in names[1:])
        total += (per_state + advance * max(0, settings.state_stride // 2 - 1)) * settings.states_per_prompt
    return total
