"""The runtime: a :class:`Decoder` runs a registered method (``registry.py``) on real models.

The method's steps and the batch driver are :class:`~spectune.decoding.state_machine.Machine`'s, shared with the
simulator that the cost model uses. This module is the runtime backend: one runner per model (``runtime.py``:
``BatchedRunner``'s ragged KV cache with rollback, eager; or ``StaticRunner``'s static cache and compiled steps)
and :class:`RuntimeBackend`, the token-level math over the models' logits, from
``sampling.py`` (warp, sample, the Leviathan rule, the residual) and ``combine.py`` (r = C(...)).

Each model keeps its logits for positions ``[n_committed, runner.n]`` of each sequence; r_j = C(...) of the logits
at position j of the models in ``combination.uses``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import torch

from spectune.decoding import sampling as S
from spectune.decoding.combine import Combination
from spectune.decoding.state_machine import Machine, Proposal, Rules, SequenceState, batch_stats, new_states
from spectune.decoding.proposers import MODEL, Proposer
from spectune.decoding.policy import DraftPolicy
from spectune.decoding.registry import get_method
from spectune.decoding.runtime import make_runner, resolve_runtime
from spectune.decoding.stats import DecodeStats
from spectune.decoding.sv_policy import SVPolicy, features


@dataclass
class SamplingParams:
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


class RuntimeBackend:
    """The runtime's oracle: real logits, the sampling math, one random stream per sequence (row)."""

    def __init__(self, runners: list[Any], comb: Combination, sp: SamplingParams, seeds: Sequence[int],
                 proposer: Proposer = MODEL, sv: SVPolicy | None = None):
        self.runners, self.comb, self.sp, self.proposer, self.sv = runners, comb, sp, proposer, sv
        self.gens = [torch.Generator().manual_seed(int(sd)) for sd in seeds]
        self.dists: list[list[dict[int, torch.Tensor]]] = [[{} for _ in runners] for _ in seeds]  # row, model

    def _q(self, logits: torch.Tensor) -> torch.Tensor:
        """A model's own sampling distribution (warp applied per model). [..., V] -> [..., V]"""
        return S.logits_to_probs(logits, self.sp.temperature, self.sp.top_k, self.sp.top_p)

    def _r(self, s: SequenceState, j0: int, m: int) -> torch.Tensor:
        """r at positions j0 .. j0 + m - 1 in one combination call. -> [m, V]"""
        d = self.dists[s.row]
        per_model = [torch.stack([d[i][j0 + t] for t in range(m)]) for i in self.comb.uses]
        return self.comb.probs(per_model, self.sp.temperature, self.sp.top_k, self.sp.top_p)

    def stored(self, s: SequenceState, i: int, start: int, out: torch.Tensor) -> None:
        # out: [upto - start, V] logits for positions start + 1 .. upto; earlier positions are no longer needed
        d = self.dists[s.row][i]
        for k in range(out.shape[0]):
            if start + 1 + k >= s.n_committed:
                d[start + 1 + k] = out[k]
        for pos in [p for p in d if p < s.n_committed]:
            del d[pos]

    def propose(self, s: SequenceState, i: int, block: int, pos: int) -> Proposal:
        q = self._q(self.dists[s.row][i][s.end])  # [V]
        x = int(S.sample(q, self.sp.greedy, self.gens[s.row]))
        return Proposal(x, i, block, float(q[x]), q)

    def lookup(self, s: SequenceState, k: int, block: int) -> list[Proposal]:
        toks = self.proposer.propose(s.seq, k)  # type: ignore[attr-defined]  # a lookup's (Rules.lookup)
        return [Proposal(x, len(self.runners), block, 1.0, None) for x in toks]

    def judge(self, s: SequenceState, props: list[Proposal]) -> tuple[int, int | None]:
        """One vectorised accept over the block (one host read of its decisions, as vLLM's rejection sampler);
        the recovered token from the first rejected position's residual."""
        r = self._r(s, s.n_committed, len(props))  # [m, V]
        q = torch.stack([p.data if p.data is not None else S.point_mass(p.token, r.shape[-1]) for p in props])
        gen = self.gens[s.row]
        ok = S.accept(r, q, torch.tensor([p.token for p in props]), self.sp.greedy, gen).tolist()  # [m]
        a = ok.index(False) if False in ok else len(ok)
        return a, (int(S.recover(r[a], q[a], self.sp.greedy, gen)) if a < len(ok) else None)

    def sample(self, s: SequenceState) -> int:
        return int(S.sample(self._r(s, s.end, 1)[0], self.sp.greedy, self.gens[s.row]))

    def drop(self, s: SequenceState, keep: int) -> None:
        for d in self.dists[s.row]:
            for pos in [p for p in d if p > keep]:
                del d[pos]

    def sv_predict(self, s: SequenceState) -> list[float]:
        """The companion's (model 1's) view of each pending draft -> predicted acceptance from the bins."""
        j0, d = s.n_committed, self.dists[s.row][1]
        q = torch.stack([p.data for p in s.pending])  # [k, V]
        c = self._q(torch.stack([d[j0 + t] for t in range(len(s.pending))]))  # [k, V]
        sim, acc = features(q, c, torch.tensor([p.token for p in s.pending]))
        return self.sv.predict(sim.numpy(), acc.numpy()).tolist()  # type: ignore[union-attr]


@dataclass(frozen=True)
class DecodePlan:
    """What a ``Decoder`` runs: ``method`` over the models combined by ``combination``, proposing ``gamma`` per
    model, sampling by ``sampling``; ``proposer``: who proposes (``MODEL``: model 0 drafts; a lookup);
    ``policy``: the draft-length policy (None: fixed); ``sv_policy``: method sv's."""

    method: str
    combination: Combination
    gamma: Sequence[int]
    sampling: SamplingParams
    proposer: Proposer = MODEL
    policy: DraftPolicy | None = None
    sv_policy: SVPolicy | None = None


class Decoder:
    """Runs one ``plan`` over loaded models, for one prompt (``generate``) or a batch (``generate_batch``); the
    models' forwards on ``runtime`` (eager, compiled, llamacpp) on ``device``."""

    def __init__(self, models: Sequence[torch.nn.Module], names: Sequence[str], plan: DecodePlan,
                 eos_token_id: int | None = None, device: str = "cpu", runtime: str = "eager"):
        method, combination, gamma, sampling = plan.method, plan.combination, plan.gamma, plan.sampling
        sv_policy, proposer, policy = plan.sv_policy, plan.proposer, plan.policy
        spec = get_method(method)
        assert len(models) == len(gamma) == len(names)
        assert proposer.kind in spec.proposers, f"{proposer.spec} does not run with {method}"
        assert spec.policies or policy is None or policy.spec == "fixed", f"{method} takes no draft-length policy"
        assert not spec.needs_profile or (sv_policy is not None and len(models) >= spec.min_models), method
        self.spec, self.models, self.names, self.method = spec, list(models), list(names), method
        self.comb, self.gamma, self.sp, self.eos, self.device = combination, list(gamma), sampling, eos_token_id, device
        self.sv, self.proposer, self.policy = sv_policy, proposer, policy or DraftPolicy()
        self.runtime = resolve_runtime(runtime, device)  # eager | compiled | llamacpp: which runner runs the forwards
        self.stat_names = self.names + ([proposer.spec] if proposer.looks_up else [])  # stats row per proposer
        self.runners: list[Any] = []
        self.events: list[tuple] | None = None  # set to a list to record the machine's decisions
        self._states: list[SequenceState] = []

    def machine(self, backend: Any) -> Machine:
        """This decoder's method as a state machine over ``backend`` (the simulator builds the same one)."""
        scorers = range(len(self.models)) if self.spec.scorers == "all" else self.comb.uses
        look = self.proposer
        m = Machine(backend, Rules(self.spec.step, self.comb.uses, self.gamma, self.policy, scorers, look.looks_up,
                                   look.k, look.fallback, self.sv, self.eos))
        m.events = self.events
        return m

    def generate(self, prompt_ids: Sequence[int], max_new_tokens: int, seed: int) -> tuple[list[int], DecodeStats]:
        """Decode one prompt. Returns the generated token ids (prompt excluded) and the run's stats."""
        outs, _, total = self.generate_batch([prompt_ids], max_new_tokens, [seed])
        return outs[0], total

    def generate_batch(self, prompts: Sequence[Sequence[int]], max_new_tokens: int, seeds: Sequence[int]
                       ) -> tuple[list[list[int]], list[DecodeStats], DecodeStats]:
        """Decode a batch in one loop; sequences accept different numbers of tokens and progress independently.

        Returns (generated ids per prompt, stats per prompt, batch stats). Per-prompt stats hold that sequence's
        acceptance counts and its wall time to finish; forward calls and times are batch-level (batch stats).
        """
        assert len(prompts) == len(seeds) and len(prompts) > 0
        assert all(len(p) > 0 for p in prompts), "every prompt must hold at least one token"
        max_len = max(map(len, prompts)) + max_new_tokens + max(self.gamma) + 2  # the static runner grows past it
        self.runners = [make_runner(self.runtime, m, len(prompts), self.device, max_len) for m in self.models]
        backend = RuntimeBackend(self.runners, self.comb, self.sp, seeds, self.proposer, self.sv)
        self._states = states = new_states(prompts, max_new_tokens, self.gamma[0], self.stat_names, self.method)
        t0 = time.perf_counter()
        self.machine(backend).run(states)
        total = batch_stats(self.method, self.stat_names, states, self.runners, time.perf_counter() - t0)
        outs = [s.seq[s.prompt_len: s.n_committed][:max_new_tokens] for s in states]
        return outs, [s.stats for s in states], total

    def batches(self, prompts: Sequence[Sequence[int]], max_new_tokens: int, batch_size: int, seed: int
                ) -> Iterator[tuple[list[list[int]], list[DecodeStats], DecodeStats]]:
        """``generate_batch`` over ``prompts`` in batches of ``batch_size``, prompt i seeded ``seed + i`` (so a
        prompt decodes the same whatever batch it lands in); yields each batch's (outputs, per-prompt stats, batch
        stats) as it finishes."""
        for first in range(0, len(prompts), batch_size):
            chunk = prompts[first : first + batch_size]
            yield self.generate_batch(chunk, max_new_tokens, [seed + first + i for i in range(len(chunk))])

    def generate_many(self, prompts: Sequence[Sequence[int]], max_new_tokens: int, batch_size: int, seed: int
                      ) -> tuple[list[list[int]], list[DecodeStats], DecodeStats]:
        """Every prompt in batches of ``batch_size`` (``batches``): (outputs, per-prompt stats, merged stats)."""
        outs: list[list[int]] = []
        per: list[DecodeStats] = []
        total: DecodeStats | None = None
        for o, p, st in self.batches(prompts, max_new_tokens, batch_size, seed):
            outs += o
            per += p
            total = st if total is None else (total.merge(st) or total)
        assert total is not None, "generate_many needs at least one prompt"
        return outs, per, total

    def partial_outputs(self) -> list[list[int]]:
        """The tokens committed so far per sequence of the latest ``generate_batch`` (after a failure in it)."""
        return [s.seq[s.prompt_len: s.n_committed] for s in self._states]
