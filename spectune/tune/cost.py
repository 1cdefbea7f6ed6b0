"""Cost model: predicted goodput (output tokens/s) and per-token latency of a configuration from a profile.

Two layers:

* pure closed forms named after the paper's results (floats or numpy arrays in, floats/arrays out; no models,
  no profiles): ``speedup_thm31`` (Naive-CoS), ``speedup_thm36`` (alternate proposal framework),
  ``speedup_sd`` (speculative decoding with its bonus token), ``tokens_per_block`` and friends, and the
  trace-based survival curve ``survival_from_betas`` (P[first i proposals accepted] = mean over drafts of
  prod_{j<i} beta_j, not alpha^i);
* ``predict(config, profile, workload)``: the same renewal arguments, but every model call costs the measured
  forward latency L(model, b, k) at the configuration's batch size b and its real feed length k (the loop in
  ``spectune/decoding/loop.py`` decides k), and acceptance comes from the calibrated draft traces. Methods the
  closed forms do not cover (CoS over three or more models) are predicted by the Monte Carlo simulation of the
  decode loop in ``simulate.py``.

Units: a *round* (sd, naive-cos) or *block* (cos) ends at the first rejection or when the block is used up.
Goodput = b * E[tokens per round] / E[seconds per round]; latency per token = E[seconds] / E[tokens] (every row
of a batch pays every batched forward).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

# ------------------------------------------------------------------------------------------------ closed forms


def _geom(alpha, n):
    """sum_{i=0}^{n-1} alpha^i = (1 - alpha^n) / (1 - alpha), with the alpha -> 1 limit n."""
    a = np.asarray(alpha, dtype=float)
    n = np.asarray(n, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(np.isclose(a, 1.0), n, (1.0 - a ** n) / (1.0 - a))
    return out if out.ndim else float(out)


def tokens_per_round_sd(alpha, gamma):
    """E[tokens per SD round] = (1 - alpha^(gamma+1)) / (1 - alpha) (accepted drafts + recovered/bonus token)."""
    return _geom(alpha, np.asarray(gamma) + 1)


def tokens_per_block(alpha, gamma):
    """E[tokens per block without a bonus token] = (1 - alpha^gamma) / (1 - alpha) (Naive-CoS, Thm 3.1)."""
    return _geom(alpha, gamma)


def expected_accepted_iid(alpha, gamma):
    """E[accepted proposals | gamma] under i.i.d. acceptance: sum_{i=1}^{gamma} alpha^i."""
    return np.asarray(alpha, dtype=float) * _geom(alpha, gamma) if np.ndim(alpha) else float(alpha) * _geom(alpha, gamma)


def speedup_sd(alpha, gamma, c):
    """Speculative decoding with its bonus token over the target alone (Leviathan et al.):
    (1 - alpha^(gamma+1)) / ((1 - alpha)(1 + gamma c))."""
    return tokens_per_round_sd(alpha, gamma) / (1.0 + np.asarray(gamma) * np.asarray(c))


def speedup_thm31(alpha, gamma, c):
    """Naive-CoS over standard collaborative decoding (Thm 3.1): (1 - alpha^gamma)(1 + c) / ((1 - alpha)(1 + c gamma))."""
    return tokens_per_block(alpha, gamma) * (1.0 + np.asarray(c)) / (1.0 + np.asarray(c) * np.asarray(gamma))


def speedup_thm36(alpha, gamma_q, gamma_p, c):
    """Alternate proposal framework over standard collaborative decoding (Thm 3.6):
    (1 - alpha^gamma_q)(1 + c) / ((1 - alpha)(1 + c gamma_q - alpha^gamma_p c))."""
    a, c = np.asarray(alpha, dtype=float), np.asarray(c, dtype=float)
    den = 1.0 + c * np.asarray(gamma_q) - a ** np.asarray(gamma_p) * c
    out = tokens_per_block(a, gamma_q) * (1.0 + c) / den
    return out if np.ndim(out) else float(out)


def survival_from_betas(betas: np.ndarray, upto: int) -> np.ndarray:
    """S[i] = P[the first i proposals of a draft are accepted], i = 0..upto, from calibrated draft traces.

    ``betas``: [n_drafts, gamma_max] acceptance probability of each drafted token (greedy: 0/1). S[i] is the
    mean over drafts of prod_{j<i} beta_j, so position-dependence and within-draft correlation are kept.
    """
    b = np.asarray(betas, dtype=float)
    if b.ndim != 2 or b.shape[0] == 0:
        raise ValueError("betas must be a non-empty [n_drafts, gamma_max] array")
    if upto > b.shape[1]:
        raise ValueError(f"gamma {upto} exceeds the calibrated gamma_max {b.shape[1]}")
    s = np.ones(upto + 1)
    s[1:] = np.cumprod(b[:, :upto], axis=1).mean(axis=0)
    return s


def survival_iid(alpha: float, upto: int) -> np.ndarray:
    return float(alpha) ** np.arange(upto + 1)


def block_tokens(S: np.ndarray, gamma: int) -> float:
    """E[tokens of a block of ``gamma`` proposals, no bonus] = sum_{i<gamma} S[i] (accepted + recovered)."""
    return float(np.sum(S[:gamma]))


def block_accepted(S: np.ndarray, gamma: int) -> float:
    """E[accepted proposals | gamma] = sum_{i=1}^{gamma} S[i]."""
    return float(np.sum(S[1 : gamma + 1]))


# ------------------------------------------------------------------------------------------------ renewal forms
# Latencies below are seconds of one batched forward: ``L[i](k)`` for model i feeding k tokens per row.


def round_sd(S: np.ndarray, gamma: int, L: list, uses: tuple[int, ...]) -> tuple[float, float]:
    """(E[tokens], E[seconds]) of one SD round of proposer 0 (see loop.py ``_step_sd``).

    Proposer: gamma forwards; its first feeds 2 tokens after a full accept when it is not in r (the last draft
    and the bonus), else 1. Every model in r scores gamma + 1 positions in one forward (the proposer re-scores).
    Tokens: accepted + 1 (recovered or bonus).
    """
    full = float(S[gamma])
    first = L[0](1) if 0 in uses else (1 - full) * L[0](1) + full * L[0](2)
    t = first + (gamma - 1) * L[0](1) + sum(L[i](gamma + 1) for i in uses)
    return 1.0 + block_accepted(S, gamma), t


def round_naive(S: np.ndarray, gamma: int, L: list, uses: tuple[int, ...]) -> tuple[float, float]:
    """(E[tokens], E[seconds]) of one Naive-CoS round (``_step_cos`` without bonus): proposer 0 drafts gamma
    (gamma forwards of 1 token), every other model in r scores in one forward of gamma + 1 tokens after a
    rejection (the recovered token too) or gamma after a full accept. No bonus token."""
    full = float(S[gamma])
    t = gamma * L[0](1) + sum((1 - full) * L[i](gamma + 1) + full * L[i](gamma) for i in uses if i != 0)
    return block_tokens(S, gamma), t


def cos2(Sq: np.ndarray, Sp: np.ndarray, gq: int, gp: int, L: list, uses: tuple[int, ...] = (0, 1)
         ) -> tuple[float, float]:
    """(E[tokens], E[seconds]) of one renewal cycle of two-model CoS (``_step_cos`` with bonus; model 0 = q).

    r over both models (``uses`` = (0, 1)): a cycle starts with a fresh q block (gq forwards of q, one forward of
    p over gq + 1 tokens); every full accept hands the turn over: the scorer's bonus token starts its own block
    (p: gp - 1 more forwards of p, then q scores gp + 1 tokens; q after a p block: gq - 1 forwards, then p
    scores gq + 1 tokens); any rejection ends the cycle. r = p alone (``uses`` = (1,)): p's block is p's own
    sample (always accepted) and q does not score it; q's next draft catches up gp + 1 tokens.
    With gamma_q = gamma_p = 1, i.i.d. alpha and constant latencies this equals Thm 3.6; for longer blocks
    Thm 3.6 is the paper's simplification, and this renewal follows the loop (checked against the Monte Carlo
    simulation in the tests).
    """
    Aq, Ap = float(Sq[gq]), float(Sp[gp])
    Eq, Ep = block_tokens(Sq, gq), block_tokens(Sp, gp)
    if 0 not in uses:
        tokens = Eq + Aq * gp
        seconds = ((gq - 1) * L[0](1) + (1 - Aq) * L[0](1) + Aq * L[0](gp + 1) + L[1](gq + 1)
                   + Aq * (gp - 1) * L[1](1))
        return tokens, seconds
    x = Aq * Ap
    c_p = (gp - 1) * L[1](1) + L[0](gp + 1)
    c_q = (gq - 1) * L[0](1) + L[1](gq + 1)
    if x >= 1.0 - 1e-12:  # every proposal always accepted: the alternating steady state
        return Eq + Ep, c_p + c_q
    c_fresh = gq * L[0](1) + L[1](gq + 1)
    tokens = (Eq + Aq * Ep) / (1.0 - x)
    seconds = c_fresh + (Aq * c_p + x * c_q) / (1.0 - x)
    return tokens, seconds


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
    tokens_per_round: float
    seconds_per_round: float
    memory_bytes: float
    source: str = "analytic"  # or "simulation"
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int8": 1}


def _profile_workload(profile: Any, workload: str | None) -> str | None:
    """A profile's trace workload for a user's workload name: itself when measured, else all pooled."""
    if workload in (None, "", "all", "mix"):
        return None
    return workload if workload in profile.workloads else None


class CostModel:
    """Predictions for one profile and workload; every latency and survival curve is computed once and cached.

    ``predict(config)`` takes a :class:`~spectune.config.DecodeConfig` whose models are a subset (any order) of
    the profile's models and whose combination the profile measured acceptance for (the user's combination
    over all models, or ``target`` over a pair; ``we`` weights follow the model order).
    """

    def __init__(self, profile: Any, workload: str | None = None, ctx: float | None = None,
                 sim_tokens: int = 384, sim_seed: int = 0):
        self.profile = profile
        self.workload = _profile_workload(profile, workload)
        self.ctx = ctx
        self.sim_tokens = sim_tokens
        self.sim_seed = sim_seed
        self.order = {m: i for i, m in enumerate(profile.models)}
        self._lat: dict[tuple[str, int, int], float] = {}
        self._betas: dict[tuple[str, str, str], np.ndarray] = {}
        self._surv: dict[tuple[str, str, str], np.ndarray] = {}
        self._alpha: dict[tuple[str, str, str], float] = {}
        self._sim: dict[tuple, dict[tuple[int, int], float]] = {}
        lat = profile.latency
        self.batch_sizes = sorted(int(b) for b in lat["batch"].unique()) if not lat.empty else [1]
        bad = lat[~lat["feasible"].astype(bool)] if not lat.empty else lat
        self.infeasible = {(str(r.model), int(r.batch)) for r in bad.itertuples()}
        self.gamma_max = int(profile.settings.get("acceptance", {}).get("gamma_max", 0)) or (
            int(profile.traces["pos"].max()) + 1 if not profile.traces.empty else 1)
        hw = profile.hardware
        nv = hw.get("nvml") or {}
        self.memory_limit = float(nv.get("memory_total_bytes") or hw.get("memory_total_bytes") or float("inf"))
        self.weights_bytes = {m["name"]: float(m.get("parameters", 0)) * _DTYPE_BYTES.get(
            str(m.get("dtype", "float32")).replace("torch.", ""), 4) for m in profile.meta.get("models", [])}

    SUPPORTED = ("standard", "sd", "naive-cos", "cos", "sv")

    def supports(self, method: str) -> bool:
        """Whether ``predict`` can price ``method`` for this profile (``sv``: it needs the SV statistics)."""
        if method == "sv":
            return len(self.profile.models) >= 3 and not self.profile.sv_bins_table.empty
        return method in self.SUPPORTED

    def _sv_inputs(self, models: tuple[str, ...], combine: str, gamma: int):
        """Per calibrated draft of models[0]: companion features (s, a) from the SV traces of (draft, companion,
        last model) and betas against r from the acceptance traces (same draft ids), plus the decoder's policy."""
        from spectune.decoding.combine import parse_combination
        from spectune.decoding.sv import SVPolicy

        key = ("sv", models, combine, gamma)
        got = self._sim.get(key)
        if got is not None:
            return got
        label, comb = self.acceptance_key(models, combine)
        uses = parse_combination(combine, len(models)).uses
        sv = self.profile.sv_traces
        sv = sv[(sv["draft"] == models[0]) & (sv["companion"] == models[1]) & (sv["target"] == models[-1])]
        if self.workload is not None:
            sv = sv[sv["workload"] == self.workload]
        if sv.empty:
            raise KeyError(f"no SV traces for draft '{models[0]}', companion '{models[1]}', target '{models[-1]}'")
        tr = self.profile._select(models[0], comb, label, self.workload)
        idx = ["workload", "draft_id"]
        S_ = sv.pivot_table(index=idx, columns="pos", values="s", aggfunc="first").sort_index(axis=1)
        A_ = sv.pivot_table(index=idx, columns="pos", values="a", aggfunc="first").sort_index(axis=1)
        B_ = tr.pivot_table(index=idx, columns="pos", values="beta", aggfunc="first").sort_index(axis=1)
        common = S_.index.intersection(B_.index)
        S_, A_, B_ = (x.loc[common].to_numpy(float)[:, :gamma] for x in (S_, A_, B_))
        ok = ~(np.isnan(S_).any(1) | np.isnan(A_).any(1) | np.isnan(B_).any(1))
        if not ok.any():
            raise KeyError("no calibrated draft has both SV features and acceptance against r")
        policy = SVPolicy.from_profile(self.profile, models[0], models[1], [models[i] for i in uses], gamma)
        preds = policy.predict(S_[ok].ravel(), A_[ok].ravel()).reshape(-1, S_.shape[1])
        got = self._sim[key] = (policy, preds, B_[ok], uses)
        return got

    def _predict_sv(self, models: tuple[str, ...], combine: str, gamma: tuple[int, ...], b: int,
                    ) -> tuple[float, float, dict]:
        """(tokens, seconds, extra) of one SV step of b rows in lock-step: the decoder's own policy picks the
        verification lengths (its greedy batch scheduler over b calibrated drafts at a time), the models in r
        verify the longest row's k + 1 tokens (the runtime pads), accepted tokens come from betas against r."""
        policy, preds, betas, uses = self._sv_inputs(models, combine, gamma[0])
        n = preds.shape[0]
        rng = np.random.default_rng(self.sim_seed)
        groups = max(1, int(np.ceil(max(n, 64) / b)))
        tokens = seconds = 0.0
        ks: list[int] = []
        t_fix = gamma[0] * self.L(models[0], b, 1) + self.L(models[1], b, gamma[0] + 1)
        for _ in range(groups):
            rows = rng.integers(n, size=b)
            k = policy.schedule([list(preds[r]) for r in rows])
            ks += k
            for r, kr in zip(rows, k):
                tokens += 1.0 + float(np.cumprod(betas[r, :kr]).sum()) if kr else 1.0
            kmax = max(k)
            seconds += t_fix + sum(self.L(models[i], b, kmax + 1) for i in uses if i > 1) + (
                self.L(models[0], b, 1) if 0 in uses and kmax == gamma[0] else 0.0)
        return tokens / b / groups, seconds / groups, {"sv_mean_verified": float(np.mean(ks))}

    # -------------------------------------------------------------- cached lookups

    def L(self, model: str, batch: int, k: int) -> float:
        key = (model, int(batch), int(k))
        v = self._lat.get(key)
        if v is None:
            v = self._lat[key] = float(self.profile.L(model, batch, k, self.ctx))
        return v

    def acceptance_key(self, models: tuple[str, ...], combine: str) -> tuple[str, str]:
        """(models label, combination spec) under which the profile recorded r for this model order."""
        from spectune.calibrate.acceptance import MODELS_SEP
        from spectune.decoding.combine import parse_combination

        unknown = [m for m in models if m not in self.order]
        if unknown:
            raise KeyError(f"model(s) {', '.join(unknown)} are not in the profile")
        perm = sorted(range(len(models)), key=lambda i: self.order[models[i]])
        canon = tuple(models[i] for i in perm)
        comb = parse_combination(combine, len(models)).spec
        if comb.startswith("we:"):
            w = comb[3:].split(",")
            comb = parse_combination("we:" + ",".join(w[i] for i in perm), len(models)).spec
        elif comb == "target":
            if canon[-1] != models[-1]:
                raise KeyError(f"r = target must be the profile's largest model of the set ({canon[-1]})")
        elif perm != list(range(len(models))):
            raise KeyError(f"combination '{comb}' depends on the model order; it cannot be reordered")
        return MODELS_SEP.join(canon), comb

    def betas(self, proposer: str, label: str, comb: str) -> np.ndarray:
        key = (proposer, label, comb)
        b = self._betas.get(key)
        if b is None:
            b = self.profile.draft_betas(proposer, combination=comb, models=label, workload=self.workload)
            b = b[~np.isnan(b).any(axis=1)] if np.isnan(b).any() else b
            self._betas[key] = b
            self._surv[key] = survival_from_betas(b, b.shape[1])
            self._alpha[key] = float(self.profile.alpha(proposer, combination=comb, models=label,
                                                        workload=self.workload))
        return b

    def survival(self, proposer: str, label: str, comb: str) -> np.ndarray:
        self.betas(proposer, label, comb)
        return self._surv[(proposer, label, comb)]

    def alpha(self, proposer: str, label: str, comb: str) -> float:
        self.betas(proposer, label, comb)
        return self._alpha[(proposer, label, comb)]

    def memory(self, models: tuple[str, ...]) -> float:
        return float(sum(self.weights_bytes.get(m, 0.0) for m in models))

    def feasible(self, models: tuple[str, ...], batch: int) -> bool:
        """No model's latency cell at this batch size ran out of memory, and the weights fit the device."""
        return all((m, int(batch)) not in self.infeasible for m in models) and self.memory(models) <= self.memory_limit

    # -------------------------------------------------------------- simulation

    def sim_counts(self, method: str, models: tuple[str, ...], combine: str, gamma: tuple[int, ...]
                   ) -> dict[tuple[int, int], float]:
        """Forwards per output token by (model index, feed length) from a batch-1 simulation of the loop,
        cached; pricing them at any batch size is then a dot product with L(b, k)."""
        from spectune.decoding.combine import parse_combination
        from spectune.tune.simulate import Simulator

        key = (method, models, combine, gamma)
        got = self._sim.get(key)
        if got is not None:
            return got
        label, comb = self.acceptance_key(models, combine)
        uses = parse_combination(combine, len(models)).uses
        betas = [self.betas(m, label, comb) for m in models]
        counts: Counter = Counter()
        sim = Simulator(method, gamma, uses, betas, latency=lambda m, b, k: 0.0, seed=self.sim_seed)
        sim.on_forward = lambda m, k: counts.update([(m, k)])
        res = sim.run(1, self.sim_tokens)
        got = {mk: n / max(res.tokens, 1) for mk, n in counts.items()}
        got[(-1, 0)] = res.mean_accepted_length  # stash the block statistic
        self._sim[key] = got
        return got

    def simulate(self, config: Any, rows: int | None = None, max_new_tokens: int | None = None, seed: int = 0):
        """A full batched simulation of ``config`` (rows = its batch size): see ``simulate.py``."""
        from spectune.decoding.combine import parse_combination
        from spectune.tune.simulate import Simulator

        models = tuple(config.models)
        label, comb = self.acceptance_key(models, config.combine)
        uses = parse_combination(config.combine, len(models)).uses
        betas = [self.betas(m, label, comb) if config.method != "standard" else None for m in models]
        sim = Simulator(config.method, config.gamma, uses, betas,
                        latency=lambda m, b, k: self.L(models[m], b, k), seed=seed)
        return sim.run(rows or config.batch_size, max_new_tokens or self.sim_tokens)

    # -------------------------------------------------------------- predictions

    def standard_seconds(self, models: tuple[str, ...], combine: str, batch: int) -> float:
        from spectune.decoding.combine import parse_combination

        uses = parse_combination(combine, len(models)).uses
        return sum(self.L(models[i], batch, 1) for i in uses)

    def predict(self, config: Any) -> Prediction:
        from spectune.decoding.combine import parse_combination

        models = tuple(config.models)
        b = int(config.batch_size)
        method = config.method
        gamma = tuple(config.gamma)
        uses = parse_combination(config.combine, len(models)).uses
        t_std = self.standard_seconds(models, config.combine, b)
        t_target = self.L(models[-1], b, 1)
        c = self.L(models[0], b, 1) / t_target
        alpha = acc = float("nan")
        source, extra = "analytic", {}
        if method == "standard":
            tokens, seconds = 1.0, t_std
        else:
            if any(g > self.gamma_max for g in gamma):
                raise ValueError(f"gamma {max(gamma)} exceeds the calibrated gamma_max {self.gamma_max}")
            label, comb = self.acceptance_key(models, config.combine)
            S0 = self.survival(models[0], label, comb)
            alpha = self.alpha(models[0], label, comb)
            acc = block_accepted(S0, gamma[0])
            Lf = [(lambda k, m=m: self.L(m, b, k)) for m in models]
            if method == "sd":
                tokens, seconds = round_sd(S0, gamma[0], Lf, uses)
            elif method == "naive-cos":
                tokens, seconds = round_naive(S0, gamma[0], Lf, uses)
            elif method == "sv":
                tokens, seconds, extra = self._predict_sv(models, config.combine, gamma, b)
                source = "sv-policy over traces"
            elif method == "cos" and len(models) == 2:
                S1 = self.survival(models[1], label, comb)
                tokens, seconds = cos2(S0, S1, gamma[0], gamma[1], Lf, uses)
            else:
                counts = self.sim_counts(method, models, config.combine, gamma)
                seconds = sum(n * self.L(models[m], b, k) for (m, k), n in counts.items() if m >= 0)
                tokens, source = 1.0, "simulation"
                extra["sim_mean_accepted_length"] = counts[(-1, 0)]
        per_token = seconds / tokens
        return Prediction(
            goodput=b / per_token, latency_per_token=per_token, speedup_vs_standard=t_std / per_token,
            speedup_vs_target=t_target / per_token, alpha=alpha, c=c, expected_accepted=acc,
            tokens_per_round=tokens, seconds_per_round=seconds, memory_bytes=self.memory(models), source=source,
            extra=extra,
        )


_MODELS: dict[tuple[int, str | None], CostModel] = {}


def predict(config: Any, profile: Any, workload: str | None = None) -> Prediction:
    """Predicted goodput / latency of ``config`` from ``profile`` (a cached :class:`CostModel` per profile)."""
    key = (id(profile), workload)
    cm = _MODELS.get(key)
    if cm is None or cm.profile is not profile:
        cm = _MODELS[key] = CostModel(profile, workload)
    return cm.predict(config)
