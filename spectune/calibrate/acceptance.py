"""Acceptance traces along real decoding trajectories.

For one prompt (``run.py`` wraps it in the tokenizer's chat template when ``chat_template`` and the tokenizer
has one; with ``ignore_eos`` the trajectory continues past end-of-sequence), every model gets a batch-1 :class:`~spectune.decoding.cache.ModelRunner`. At each trajectory
*state* (committed sequence ``seq`` of length t):

1. every model p in turn is the proposer: it drafts ``gamma_max`` tokens from its own distribution q (greedy:
   argmax; otherwise a sample at the calibration temperature / top-k / top-p), and every other model scores
   the draft block in one forward, so all models' distributions at the drafted positions are known;
2. one row per drafted token is recorded (see below) for every *combination set* the proposer belongs to:
   the user's combination over all models, and ``target`` over every pair (i < j) of models (r = model j);
3. the trajectory advances by exact speculative decoding of the user's combination r with proposer 0 (the
   default proposer): the accepted prefix of its block plus one token from r (recovered or bonus), so
   states are visited along a sample path of r (greedy: r's argmax path).

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
A draft is (workload, proposer, draft_id); the same draft_id across proposers is the same trajectory state.
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
from spectune.decoding.cache import ModelRunner
from spectune.decoding.combine import Combination, parse_combination

TRACE_COLUMNS = ["workload", "prompt", "state", "draft_id", "proposer", "models", "combination", "pos", "token",
                 "beta", "alpha", "beta_soft", "alpha_soft"]
SV_COLUMNS = ["workload", "prompt", "state", "draft_id", "draft", "companion", "target", "pos", "token", "beta",
              "beta_soft", "s", "a"]
MODELS_SEP = ","


@dataclass(frozen=True)
class AcceptanceSettings:
    gamma_max: int = 8
    prompts_per_workload: int = 3
    states_per_prompt: int = 5
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    max_prompt_tokens: int = 192
    chat_template: bool = True  # wrap prompts in the tokenizer's chat template (when it has one)
    ignore_eos: bool = True  # keep decoding past end-of-sequence (as the tuner's measured runs do)

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


def _feed(run: ModelRunner, ids: Sequence[int]) -> torch.Tensor:
    return run.forward(list(ids))


def trace_prompt(models: Sequence[Any], names: Sequence[str], combine: Any, prompt_ids: Sequence[int],
                 settings: AcceptanceSettings, workload: str, prompt_index: int, eos_token_id: int | None = None,
                 device: str = "cpu") -> tuple[list[dict], list[dict]]:
    """Trace rows and SV rows for one prompt (see the module docstring). ``models`` are torch modules."""
    n = len(models)
    st = settings
    gm = st.gamma_max
    sets = combination_sets(n, combine)
    user = sets[0]
    gen = torch.Generator().manual_seed(st.seed * 1_000_003 + prompt_index * 7919 + sum(map(ord, workload)))
    runners = [ModelRunner(m, device) for m in models]
    seq = [int(x) for x in prompt_ids]

    def probs(logits: torch.Tensor) -> torch.Tensor:
        return S.logits_to_probs(logits, st.temperature, st.top_k, st.top_p)

    def r_of(cs: CombinationSet, L: list[torch.Tensor], temp: float) -> torch.Tensor:
        # L: per model logits [rows, V]; r over the set's members, in the combination's ``uses`` order
        return cs.comb.probs([L[cs.members[u]] for u in cs.comb.uses], temp, st.top_k, st.top_p)

    trace_rows: list[dict] = []
    sv_rows: list[dict] = []
    for state in range(st.states_per_prompt):
        t = len(seq)
        draft_id = prompt_index * 1000 + state
        logits: dict[int, list[torch.Tensor]] = {}  # proposer -> per-model logits at positions t .. t+gm
        drafts: dict[int, list[int]] = {}
        for p in range(n):
            run = runners[p]
            run.rollback(min(run.n, t - 1))
            rows = [_feed(run, seq[run.n:t])[-1]]  # distribution of position t
            draft: list[int] = []
            for j in range(gm):
                x = int(S.sample(probs(rows[j]), st.greedy, gen))
                draft.append(x)
                if j < gm - 1 or p == 0:  # proposer 0 also needs position t+gm (bonus token of r)
                    rows.append(_feed(run, [x])[-1])
            run.rollback(t)
            per_model: list[torch.Tensor] = [torch.empty(0)] * n
            per_model[p] = torch.stack(rows)
            for i in range(n):
                if i == p:
                    continue
                ri = runners[i]
                ri.rollback(min(ri.n, t - 1))
                out = _feed(ri, seq[ri.n:t] + draft)  # logits for positions ri.n+1 .. t+gm
                per_model[i] = out[-(gm + 1):]
                ri.rollback(t)
            logits[p], drafts[p] = per_model, draft
            tok = torch.tensor(draft)
            q = probs(per_model[p][:gm])  # greedy: built at temperature 1 (the decoder's convention)
            L = [lg[:gm] for lg in per_model]
            for cs in sets:
                if p not in cs.members:
                    continue
                r = r_of(cs, L, st.temperature)
                beta_soft = S.accept_prob(r, q, tok)
                alpha_soft = S.overlap(q, r)
                if st.greedy:
                    beta = (tok == r.argmax(-1)).float()
                    alpha = (q.argmax(-1) == r.argmax(-1)).float()
                else:
                    beta, alpha = beta_soft, alpha_soft
                label, spec = cs.label(names), cs.comb.spec
                for j in range(gm):
                    trace_rows.append(dict(workload=workload, prompt=prompt_index, state=state, draft_id=draft_id,
                                           proposer=names[p], models=label, combination=spec, pos=j,
                                           token=draft[j], beta=float(beta[j]), alpha=float(alpha[j]),
                                           beta_soft=float(beta_soft[j]), alpha_soft=float(alpha_soft[j])))
            # SV triples with p as the draft model
            for c, tg in itertools.permutations([i for i in range(n) if i != p], 2):
                qc = probs(L[c])
                s_ind = S.overlap(q, qc)
                a_ind = S.accept_prob(qc, q, tok)
                pt = probs(L[tg])
                b_soft = S.accept_prob(pt, q, tok)
                b = (tok == pt.argmax(-1)).float() if st.greedy else b_soft
                for j in range(gm):
                    sv_rows.append(dict(workload=workload, prompt=prompt_index, state=state, draft_id=draft_id,
                                        draft=names[p], companion=names[c], target=names[tg], pos=j,
                                        token=draft[j], beta=float(b[j]), beta_soft=float(b_soft[j]),
                                        s=float(s_ind[j]), a=float(a_ind[j])))
        # advance the trajectory: exact speculative decoding of the user's r with proposer 0
        L0 = logits[0]
        r_all = r_of(user, L0, st.temperature)  # [gm+1, V]
        q0 = probs(L0[0][:gm])
        committed: list[int] = []
        for j in range(gm):
            x = drafts[0][j]
            if bool(S.accept(r_all[j], q0[j], torch.tensor(x), st.greedy, gen)):
                committed.append(x)
                if eos_token_id is not None and x == eos_token_id:
                    break
            else:
                committed.append(int(S.recover(r_all[j], q0[j], st.greedy, gen)))
                break
        else:
            committed.append(int(S.sample(r_all[gm], st.greedy, gen)))
        seq += committed
        if eos_token_id is not None and eos_token_id in committed:
            break
    return trace_rows, sv_rows


def estimate_seconds(latency: Any, names: Sequence[str], settings: AcceptanceSettings, n_prompts: int,
                     ctx: float | None = None) -> float:
    """Rough time of the acceptance stage from measured latencies (``latency(name, b, k, ctx)``)."""
    gm = settings.gamma_max
    per_state = 0.0
    for p, name in enumerate(names):
        per_state += (gm + (p == 0)) * latency(name, 1, 1, ctx)
        per_state += sum(latency(o, 1, gm + 1, ctx) for o in names if o != name)
    return per_state * settings.states_per_prompt * n_prompts
