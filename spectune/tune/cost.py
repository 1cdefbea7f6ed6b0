"""Cost model: predicted goodput (output tokens/s) and per-token latency of a configuration from a profile.

The closed forms of the papers (``speedup_thm31`` and friends) live in ``spectune.tune.closed_forms``: the test
oracles of the simulator, and bench's theorem columns. Here:

* :class:`CostModel`: every configuration is priced by running its method's own step function (the decode
  state machine the runtime runs) in the simulator (``simulate.py``) over the profile's calibrated traces. A
  run of one row counts forwards per output token by (model, feed length k); the prediction at batch size b
  prices each with the measured latency L(model, b, k): a renewal-reward estimate of E[seconds] / E[tokens].
  Methods whose decisions couple the rows of a batch (``sv``'s scheduler; ``couples_rows`` in the registry) are
  simulated with b rows, every forward priced at the live batch size.
* ``CostModel.resampled(seed)``: the same model over a bootstrap resample of the calibration prompts (each
  workload's drawn with replacement, one draw shared by every proposer, so configurations stay paired; the
  latencies and calibrated drafts are the base model's, re-indexed). How often a pick stays near
  the best across resamples (``tune/robustness.py``) says whether the calibration prompts decide it at all.

Goodput = b / (seconds per output token of one row); latency per token = seconds per token of one request (every
row of a batch pays every batched forward).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from spectune.decoding.combine import parse_combination
from spectune.decoding.proposers import parse_proposer
from spectune.decoding.registry import METHODS, get_method
from spectune.decoding.sv_policy import SVPolicy
from spectune.tune.simulate import Traces, simulate, simulate_requests
from spectune.tune.closed_forms import block_accepted
from spectune.tune.traces import CalibratedTraces, complete, profile_workload, prompt_labels, wide

# ------------------------------------------------------------------------------------------------ predictions


@dataclass
class Prediction:
    goodput: float  # output tokens / s over the whole batch
    latency_per_token: float  # seconds per output token of one request
    speedup_vs_standard: float  # over standard collaborative decoding of the same models and combination
    speedup_vs_target: float  # over the last model alone (plain autoregressive decoding of the target)
    alpha: float  # mean acceptance rate of the default proposer's drafts against r (nan for standard)
    c: float  # cost coefficient L(proposer, b, 1) / L(last model, b, 1)
    expected_accepted: float  # E[accepted | gamma_0] of the default proposer, from the traces
    tokens_per_round: float  # output tokens per round of the method (its renewal unit; see machine.py)
    seconds_per_round: float
    memory_bytes: float
    source: str = "simulation"  # "analytic" for standard
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SimCounts:
    """What a one-row simulation of a configuration says, independent of the batch size."""

    calls: dict[tuple[int, int], float]  # (model index, feed length k) -> forwards per output token (k = 0: turns)
    tokens_per_round: float
    mean_accepted_length: float
    # [gamma_max] P(the first i proposals accepted) over the rounds that proposed (DecodeStats.acceptance_by_position)
    by_position: tuple[float, ...] = ()


_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int8": 1}


def _edge(batch: int, max_new_tokens: int) -> float:
    """Decoding forwards per token of a plain model: at b > 1 requests of n tokens are priced as batches of them,
    and each row's first token comes from its prompt's forward, so n tokens take n - 1 (as the runtime runs)."""
    return 1.0 if batch == 1 else (int(max_new_tokens) - 1) / max(int(max_new_tokens), 1)


class CostModel:
    """Predictions for one profile and workload; latencies, traces and simulations are computed once and cached.

    ``predict(config)`` takes a :class:`~spectune.config.DecodeConfig` whose models are a subset (any order) of
    the profile's models and whose combination the profile measured acceptance for (the user's combination
    over all models, or ``target`` over a pair; ``we`` weights follow the model order). ``sim_tokens``: output
    tokens of each simulation (traces are drawn stratified, so a few hundred rounds cover the calibration).
    ``ctx``: the context every forward is priced at; by default the mean context a request of ``max_new_tokens``
    tokens decodes at, the workload's mean calibration prompt plus half of them (a profile without prompt lengths:
    the middle of its calibrated contexts). On the Zen 4 bundled profile L(1, 4) is 45.0 ms at context 64 and
    48.2 ms at 256, and 64-token `mix` requests decode at about 100.
    """

    def __init__(self, profile: Any, workload: str | None = None, ctx: float | None = None,
                 sim_tokens: int = 1024, sim_seed: int = 0, max_new_tokens: int = 64,
                 calibrated: CalibratedTraces | None = None, base: "CostModel | None" = None):
        self.profile = profile
        self.workload = profile_workload(profile, workload)
        prompt = profile.prompt_tokens(self.workload) if ctx is None else None
        self.ctx = ctx if prompt is None else prompt + max_new_tokens / 2
        self.sim_tokens, self.sim_seed = sim_tokens, sim_seed
        # the drafts and paths simulated on (a resample's: the base's, re-indexed over drawn prompts)
        self.calibrated = calibrated or CalibratedTraces(profile, self.workload)
        self.base = base  # the model resampled: its latencies are reused, not read again
        # an engine that runs a step's feeds flattened prices it at their mean (Engine.ragged; SimRunner._price)
        self.ragged = bool((profile.meta.get("engine") or {}).get("ragged"))
        # an engine whose speculative starts serve the target otherwise (calibration.engine's target-spec stage):
        # the target alone's plain start's step at each batch size measured; L(b, 1) is the speculative starts'
        plain = (profile.meta.get("engine") or {}).get("plain_step_s") or {}
        self.plain = {int(b): float(s) for b, s in sorted(plain.items(), key=lambda kv: int(kv[0]))}
        # an engine profile priced on the steps its client saw (calibration.engine, steps="client"): each step holds
        # the time its batch waited for the rows that finished last, so batches are priced without stragglers
        self.waits_in_steps = ((profile.meta.get("engine") or {}).get("grid") or {}).get("steps") == "client"
        self._lat: dict[tuple[str, int, int], float] = {}
        self._counts: dict[tuple, SimCounts] = {}
        self._sv: dict[tuple, tuple[Any, Any]] = {}
        self._batches: dict[tuple, tuple[float, float, float, float]] = {}  # _batch_sim's cache
        lat = profile.latency
        self.batch_sizes = sorted(int(b) for b in lat["batch"].unique()) if not lat.empty else [1]
        bad = lat[~lat["feasible"].astype(bool)] if not lat.empty else lat
        self.infeasible = {(str(r.model), int(r.batch)) for r in bad.itertuples()}
        self.gamma_max = int(profile.settings.get("acceptance", {}).get("gamma_max", 0)) or (
            int(profile.traces["pos"].max()) + 1 if not profile.traces.empty else 1)
        drafted = ((profile.meta.get("engine") or {}).get("grid") or {}).get("draft_ks")
        if drafted:  # an engine's draft is priced up to the longest K it ran: its per-forward cost is below the
            self.gamma_max = min(self.gamma_max, max(drafted))  # host's noise at short K, a line past them a guess
        hw = profile.hardware
        nv = hw.get("nvml") or {}
        self.memory_limit = float(nv.get("memory_total_bytes") or hw.get("memory_total_bytes") or float("inf"))
        self.weights_bytes = {m["name"]: float(m.get("parameters", 0)) * _DTYPE_BYTES.get(
            str(m.get("dtype", "float32")).replace("torch.", ""), 4) for m in profile.meta.get("models", [])}

    @property
    def draws(self) -> list[str] | None:
        """The calibration prompts of a bootstrap resample ("workload/prompt"; see ``resampled``), else None."""
        return self.calibrated.draws

    def resampled(self, seed: int) -> "CostModel":
        """This cost model over a bootstrap resample of its calibration prompts (``CalibratedTraces.resampled``):
        the same draw for every proposer and method; the same latencies and context, simulations made afresh."""
        return CostModel(self.profile, self.workload, self.ctx, self.sim_tokens, self.sim_seed,
                         calibrated=self.calibrated.resampled(seed), base=self)

    def supports(self, method: str, proposer: str = "model", policy: str = "fixed") -> bool:
        """Whether ``predict`` can price the method with this proposer and policy from this profile."""
        return self.unsupported(method, proposer, policy) is None

    def unsupported(self, method: str, proposer: str = "model", policy: str = "fixed") -> str | None:
        """Why this profile cannot price (method, proposer, policy), in a few words; None when it can."""
        if method not in METHODS:
            return f"unknown method '{method}'"
        if method == "sv" and (len(self.profile.models) < 3 or self.profile.sv_bins_table.empty):
            return "needs a profile of 3+ models with SV bins"

        t, look = self.profile.traces, parse_proposer(proposer)
        if look.looks_up and not (t["proposer"] == look.lookup_spec).any():
            return f"the profile has no lookup traces of '{look.lookup_spec}': recalibrate"
        if policy.startswith("confidence") and not ("q" in t.columns and t["q"].notna().any()):
            return "the profile has no draft confidence (column q): recalibrate"
        return None

    # -------------------------------------------------------------- cached lookups

    def L(self, model: str, batch: int, k: int) -> float:
        """The profile's L(model, batch, k) at this model's context, cached (k = 0: the model's turn cost)."""
        key = (model, int(batch), int(k))
        v = self._lat.get(key)
        if v is None:
            v = self._lat[key] = (self.base.L(model, batch, k) if self.base is not None
                                  else float(self.profile.L(model, batch, k, self.ctx)))
        return v

    def memory(self, models: tuple[str, ...]) -> float:
        return float(sum(self.weights_bytes.get(m, 0.0) for m in models))

    def feasible(self, models: tuple[str, ...], batch: int) -> bool:
        """No model's latency cell at this batch size ran out of memory, and the weights fit the device."""
        return all((m, int(batch)) not in self.infeasible for m in models) and self.memory(models) <= self.memory_limit

    # -------------------------------------------------------------- simulation

    def _sv_setup(self, models: tuple[str, ...], combine: str, gamma0: int) -> tuple[Any, Any]:
        """sv's policy (the decoder's own: bins and latencies) and model 0's calibrated drafts with their
        predicted acceptance, from the companion features (s, a) of the SV traces of (draft, companion, last
        model), joined with the drafts' betas against r by (workload, draft id)."""
        key = (models, combine, gamma0)
        if key not in self._sv:
            label, comb = self.calibrated.acceptance_key(models, combine)
            sv = self.profile.sv_traces
            sv = sv[(sv["draft"] == models[0]) & (sv["companion"] == models[1]) & (sv["target"] == models[-1])]
            if self.workload is not None:
                sv = sv[sv["workload"] == self.workload]
            if sv.empty:
                raise KeyError(f"no SV traces for draft '{models[0]}', companion '{models[1]}', target '{models[-1]}'")
            tr = self.profile.select_traces(models[0], comb, label, self.workload)
            S_, A_ = wide(sv, "s"), wide(sv, "a")
            keys = sv.pivot_table(index=["workload", "draft_id"], values="s", aggfunc="first").index
            rows = tr.pivot_table(index=["workload", "draft_id"], values="beta", aggfunc="first").index
            common = keys.intersection(rows)
            pick = lambda a, idx: a[idx.get_indexer(common)]  # noqa: E731
            S_, A_, B_ = pick(S_, keys), pick(A_, keys), pick(wide(tr, "beta"), rows)
            ok = complete(S_, A_, B_)
            if not ok.any():
                raise KeyError("no calibrated draft has both SV features and acceptance against r")

            uses = parse_combination(combine, len(models)).uses
            policy = SVPolicy.from_profile(self.profile, models[0], models[1], [models[i] for i in uses], gamma0)
            preds = policy.predict(S_[ok].ravel(), A_[ok].ravel()).reshape(-1, S_.shape[1])
            drafts = Traces(B_[ok], sv_pred=preds, group=pick(prompt_labels(tr), rows)[ok])
            self._sv[key] = (policy, self.calibrated.resample(drafts))
        return self._sv[key]

    def _setup(self, config: Any) -> dict[str, Any]:
        """The simulator's arguments for ``config``: its method, r's models, every proposer's traces."""
        models, look = tuple(config.models), config.proposing
        spec = get_method(config.method)
        cal = self.calibrated
        label, comb = cal.acceptance_key(models, config.combine)
        lookup = None
        if look.looks_up:  # a lookup is verified by r alone: for r = target, traced against the target alone
            lookup = cal.traces(look.lookup_spec, models[-1] if comb == "target" else label, comb)
        drafts = look.drafts
        proposers = (range(len(models)) if spec.scorers == "all" else [0] if drafts and spec.gammas != "none"
                     else [])
        traces = [cal.traces(m, label, comb) if i in proposers else None for i, m in enumerate(models)]
        sv = None
        if spec.needs_profile:
            sv, traces[0] = self._sv_setup(models, config.combine, config.gamma[0])
        return dict(method=spec, gamma=config.gamma, uses=parse_combination(config.combine, len(models)).uses,
                    traces=traces, lookup=lookup, policy=config.policy, sv=sv,
                    lookup_k=look.k, fallback=look.fallback,
                    paths=cal.paths(look, models, label, comb, config.temperature))

    def sim_counts(self, config: Any) -> SimCounts:
        """Forwards per output token by (model index, feed length) from a one-row simulation, cached; pricing them
        at any batch size is then a dot product with L(b, k). The row visits the calibration prompts in turn for a
        request's length (``config.max_new_tokens``) each, as a measured workload decodes them."""
        key = (config.method, tuple(config.models), config.combine, tuple(config.gamma), config.proposer,
               config.policy, float(config.temperature), int(config.max_new_tokens))
        got = self._counts.get(key)
        if got is None:
            res = simulate(**self._setup(config), rows=1, max_new_tokens=self.sim_tokens, seed=self.sim_seed,
                           visit=int(config.max_new_tokens))
            tokens, k = max(res.tokens, 1), max(self.gamma_max, *config.gamma)
            got = self._counts[key] = SimCounts({mk: n / tokens for mk, n in res.calls_by_k.items()},
                                                res.tokens / max(res.rounds, 1), res.mean_accepted_length,
                                                tuple(res.stats.acceptance_by_position(k)))
        return got

    def acceptance_by_position(self, config: Any) -> list[float]:
        """[K] P(the first i draft tokens are accepted), i = 1..K (``config.gamma[0]``), over the rounds of
        ``config``'s one-row simulation that proposed a token: an engine's per-position counters over its drafts,
        predicted. Rounds, not the calibration's draft states: a row drafts more often where fewer tokens are
        accepted, and walks r's greedy path where calibration recorded one (a lookup there proposes exactly what
        the engine's does). ValueError past the calibrated gamma_max, as ``predict``."""
        self._check_lengths(config)
        return list(self.sim_counts(config).by_position[: config.gamma[0]])

    def _check_lengths(self, config: Any) -> None:
        """ValueError where ``config`` drafts (its gammas, its lookup's K) past the calibrated gamma_max."""
        gammas = config.gamma[: get_method(config.method).gamma_count(len(config.models))]
        if any(g > self.gamma_max for g in gammas):
            raise ValueError(f"gamma {max(config.gamma)} exceeds the calibrated gamma_max {self.gamma_max}")
        if (config.proposing.k or 0) > self.gamma_max:
            raise ValueError(f"lookup length {config.proposing.k} exceeds the calibrated gamma_max {self.gamma_max}")

    def _batch_sim(self, config: Any) -> tuple[float, float, float, float]:
        """(seconds per token, tokens per round, mean accepted length, mean verification length) of static batches
        of ``config.max_new_tokens``-token requests (``simulate_requests``: every forward at the live batch size,
        each batch as long as its slowest row), about ``sim_tokens`` tokens in all; cached. On an engine profile
        priced on its client's steps, which hold a batch's wait for its slowest rows already (``waits_in_steps``),
        a batch of long rows instead: the rows' padding kept, the wait at their end a small share."""
        key = (config.method, tuple(config.models), config.combine, tuple(config.gamma), config.proposer,
               config.policy, int(config.batch_size), int(config.max_new_tokens), float(config.temperature))
        if key not in self._batches:
            b, n, models = int(config.batch_size), int(config.max_new_tokens), tuple(config.models)
            if b == 1 or self.waits_in_steps:
                res = self.simulate(config, rows=b, max_new_tokens=None if b == 1 else max(self.sim_tokens // b, 4 * n))
            else:
                res = simulate_requests(b, n, max(1, -(-self.sim_tokens // (b * n))), self.sim_seed,
                                        latency=lambda m, b_, k: self.L(models[m], b_, k),
                                        turn=lambda m, b_: self.L(models[m], b_, 0), ragged=self.ragged,
                                        **self._setup(config))
            hist = res.stats.verified_len_hist
            self._batches[key] = (res.latency_per_token, res.tokens / max(res.rounds, 1), res.mean_accepted_length,
                                  sum(k * v for k, v in hist.items()) / max(1, sum(hist.values())))
        return self._batches[key]

    def simulate(self, config: Any, rows: int | None = None, max_new_tokens: int | None = None,
                 seed: int | None = None) -> Any:
        """A batched simulation of ``config`` (rows: its batch size), each forward priced at the live batch size;
        one row visits the calibration prompts for ``config.max_new_tokens`` tokens each (``sim_counts``)."""
        models = tuple(config.models)
        return simulate(**self._setup(config), latency=lambda m, b, k: self.L(models[m], b, k),
                        turn=lambda m, b: self.L(models[m], b, 0), ragged=self.ragged,
                        rows=rows or config.batch_size, max_new_tokens=max_new_tokens or self.sim_tokens,
                        seed=self.sim_seed if seed is None else seed, visit=int(config.max_new_tokens))

    # -------------------------------------------------------------- predictions

    def standard_seconds(self, models: tuple[str, ...], combine: str, batch: int) -> float:
        """Seconds per token of ``standard``: one 1-token forward of every model in r; the target alone of an engine
        profile with ``plain_step_s`` at its plain start's step (interpolated over b as a ratio to L(b, 1))."""
        uses = list(parse_combination(combine, len(models)).uses)
        if self.plain and uses == [len(models) - 1]:
            bs = list(self.plain)
            ratio = np.interp(batch, bs, [self.plain[x] / self.L(models[-1], x, 1) for x in bs])
            return self.L(models[-1], batch, 1) * float(ratio)
        return sum(self.L(models[i], batch, 1) for i in uses)

    def target_seconds(self, models: tuple[str, ...], combine: str, batch: int, max_new_tokens: int) -> float:
        """Seconds per token of the target decoding alone, over requests of ``max_new_tokens``: r's last model, or
        with ``we`` (whose model order the search permutes) its slowest model alone, the last of the user's
        smallest-first order. Every "x the target alone" spectune prints divides by this."""
        target = models[-1]
        if combine.startswith("we"):
            target = max(models, key=lambda m: self.standard_seconds((m,), "target", batch))
        return self.standard_seconds((target,), "target", batch) * _edge(batch, max_new_tokens)

    def predict(self, config: Any) -> Prediction:
        models, b, spec = tuple(config.models), int(config.batch_size), get_method(config.method)
        t_std = self.standard_seconds(models, config.combine, b) * _edge(b, config.max_new_tokens)
        t_target = self.target_seconds(models, config.combine, b, config.max_new_tokens)
        look = config.proposing
        lookup = not look.drafts  # a lookup alone: no model drafts
        c = 0.0 if lookup else self.L(models[0], b, 1) / self.L(models[-1], b, 1)
        if spec.gammas == "none":
            return self._prediction(config, t_std, 1.0, t_std, t_target, c, float("nan"), float("nan"), {})
        self._check_lengths(config)
        label, comb = self.calibrated.acceptance_key(models, config.combine)
        first = config.proposer if lookup else models[0]
        alpha = self.calibrated.alpha(first, label, comb)
        acc = block_accepted(self.calibrated.survival(first, label, comb), min(config.gamma[0], self.gamma_max))
        if spec.couples_rows or (b > 1 and not (self.waits_in_steps and self.ragged)):
            # rows that decide together (sv), or a batch of requests: its rows accept at rates of their own (one
            # prompt each) and the batch runs until its slowest is done (Zen 4 mix validation, 32 tokens at
            # batch 4: speculative configurations priced 15-20 % high from one row's steady state); adaptive
            # policies' rows also draft lengths of their own: simulate the batches as the batched loop runs them.
            # A flattening engine priced on its client's steps, which hold the waits already, prices one row's
            # steady state (its flattened step is the mean of its rows' prices: one row's, in expectation)
            per_token, tpr, mal, verified = self._batch_sim(config)
            extra = {"sv_mean_verified": verified} if spec.couples_rows else {}
        else:
            sc = self.sim_counts(config)
            per_token = sum(n * self.L(models[m], b, k) for (m, k), n in sc.calls.items())
            tpr, mal, extra = sc.tokens_per_round, sc.mean_accepted_length, {}
        extra["sim_mean_accepted_length"] = mal
        return self._prediction(config, per_token, tpr, t_std, t_target, c, alpha, acc, extra, "simulation")

    def _prediction(self, config: Any, per_token: float, tokens_per_round: float, t_std: float, t_target: float,
                    c: float, alpha: float, acc: float, extra: dict, source: str = "analytic") -> Prediction:
        b = int(config.batch_size)
        return Prediction(
            goodput=b / per_token, latency_per_token=per_token, speedup_vs_standard=t_std / per_token,
            speedup_vs_target=t_target / per_token, alpha=alpha, c=c, expected_accepted=acc,
            tokens_per_round=tokens_per_round, seconds_per_round=per_token * tokens_per_round,
            memory_bytes=self.memory(tuple(config.models)), source=source, extra=extra)
