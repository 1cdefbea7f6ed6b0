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

import itertools
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from spectune.tune.closed_forms import block_accepted, survival_from_betas

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


_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int8": 1}


def _profile_workload(profile: Any, workload: str | None) -> str | None:
    """A profile's trace workload for a user's workload name: itself when measured, else all pooled."""
    if workload in (None, "", "all", "mix"):
        return None
    return workload if workload in profile.workloads else None


def _wide(sel: Any, column: str) -> np.ndarray:
    """[n_drafts, gamma_max] of one trace column (rows: drafts, columns: positions)."""
    w = sel.pivot_table(index=["workload", "draft_id"], columns="pos", values=column, aggfunc="first")
    return w.sort_index(axis=1).to_numpy(float)


def _prompts(sel: Any) -> np.ndarray:
    """[n_drafts] the calibration prompt ("workload/prompt") of each row of ``_wide(sel, ...)``."""
    first = sel.groupby(["workload", "draft_id"])["prompt"].first()
    return np.array([f"{w}/{p}" for (w, _), p in first.items()])


def _complete(*arrays: np.ndarray | None) -> np.ndarray:
    """Rows where every given array is finite (drafts the calibration recorded in full)."""
    ok = np.ones(arrays[0].shape[0], dtype=bool)  # type: ignore[union-attr]
    for a in arrays:
        if a is not None:
            ok &= ~np.isnan(a).any(axis=1)
    return ok


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
                 sim_tokens: int = 1024, sim_seed: int = 0, max_new_tokens: int = 64, draws: list[str] | None = None,
                 base: "CostModel | None" = None):
        self.profile = profile
        self.workload = _profile_workload(profile, workload)
        prompt = profile.prompt_tokens(self.workload) if ctx is None else None
        self.ctx = ctx if prompt is None else prompt + max_new_tokens / 2
        self.sim_tokens, self.sim_seed = sim_tokens, sim_seed
        self.order = {m: i for i, m in enumerate(profile.models)}
        self._lat: dict[tuple[str, int, int], float] = {}
        self._traces: dict[tuple[str, str, str], Any] = {}
        self._counts: dict[tuple, SimCounts] = {}
        self._sv: dict[tuple, tuple[Any, Any]] = {}
        self._batches: dict[tuple, tuple[float, float, float, float]] = {}  # _batch_sim's cache
        self._alpha: dict[tuple[str, str, str], float] = {}
        self._paths: dict[str, tuple[list[int], int]] | None = None  # prompt -> (ids, answer start)
        self._along: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] | None = None  # path_draft_table's
        # an engine profile's lookups copy as that engine's do (decoding.ngram.MATCHES); spectune's runtime: "recent"
        self.lookup_match = str((profile.meta.get("engine") or {}).get("lookup_match", "recent"))
        self.draws = draws  # a bootstrap resample of the calibration prompts ("workload/prompt"; see resampled)
        self.base = base  # the model resampled: its latencies and calibrated drafts are reused, not rebuilt
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

    def prompts(self) -> list[str]:
        """The calibration prompts ("workload/prompt") of this model's traces, sorted."""
        t = self.profile.traces
        if self.workload is not None:
            t = t[t["workload"] == self.workload]
        return sorted({f"{w}/{p}" for w, p in zip(t["workload"], t["prompt"])})

    def resampled(self, seed: int) -> "CostModel":
        """This cost model over a bootstrap resample of its calibration prompts, stratified by workload (each
        workload's prompts drawn with replacement, as many as it has: `mix` keeps its composition, as its
        held-out prompts do); the same draw for every proposer and method; the same latencies and context,
        simulations made afresh."""
        rng = np.random.default_rng(seed)
        draws = []
        for _, group in itertools.groupby(self.prompts(), key=lambda p: p.rsplit("/", 1)[0]):
            ps = list(group)
            draws += [ps[i] for i in rng.integers(0, len(ps), len(ps))]
        return CostModel(self.profile, self.workload, self.ctx, self.sim_tokens, self.sim_seed, draws=draws, base=self)

    def _resample(self, t: Any) -> Any:
        """``t`` (Traces) over ``self.draws``: each drawn prompt's drafts once per draw, labelled apart per draw
        (the simulator gives every label an equal share of a row's tokens)."""
        from spectune.tune.simulate import Traces

        if self.draws is None or t.group is None:
            return t
        idx, labels = [], []
        for j, g in enumerate(self.draws):
            rows = np.flatnonzero(t.group == g)
            idx.append(rows)
            labels += [f"{g}#{j}"] * len(rows)
        ix = np.concatenate(idx)
        if ix.size == 0:  # a proposer traced on none of the drawn prompts keeps its whole calibration
            return t
        pick = lambda a: None if a is None else a[ix]  # noqa: E731
        return Traces(t.beta[ix], pick(t.conf), pick(t.length), pick(t.sv_pred), np.array(labels))

    def supports(self, method: str, proposer: str = "model", policy: str = "fixed") -> bool:
        """Whether ``predict`` can price the method with this proposer and policy from this profile."""
        return self.unsupported(method, proposer, policy) is None

    def unsupported(self, method: str, proposer: str = "model", policy: str = "fixed") -> str | None:
        """Why this profile cannot price (method, proposer, policy), in a few words; None when it can."""
        from spectune.decoding.registry import METHODS

        if method not in METHODS:
            return f"unknown method '{method}'"
        if method == "sv" and (len(self.profile.models) < 3 or self.profile.sv_bins_table.empty):
            return "needs a profile of 3+ models with SV bins"
        from spectune.decoding.proposers import parse_proposer

        t, look = self.profile.traces, parse_proposer(proposer)
        if look is not None and not (t["proposer"] == look.lookup_spec).any():
            return f"the profile has no lookup traces of '{look.lookup_spec}': recalibrate"
        if policy.startswith("confidence") and not ("q" in t.columns and t["q"].notna().any()):
            return "the profile has no draft confidence (column q): recalibrate"
        return None

    def lookup_proposers(self) -> tuple[str, ...]:
        """The lookup proposers (``ngram:N_MIN,N_MAX``) the profile traced."""
        names = self.profile.traces["proposer"].unique() if not self.profile.traces.empty else []
        return tuple(sorted(str(p) for p in names if p not in self.order))

    # -------------------------------------------------------------- cached lookups

    def L(self, model: str, batch: int, k: int) -> float:
        """The profile's L(model, batch, k) at this model's context, cached (k = 0: the model's turn cost)."""
        key = (model, int(batch), int(k))
        v = self._lat.get(key)
        if v is None:
            v = self._lat[key] = (self.base.L(model, batch, k) if self.base is not None
                                  else float(self.profile.L(model, batch, k, self.ctx)))
        return v

    def acceptance_key(self, models: tuple[str, ...], combine: str) -> tuple[str, str]:
        """(models label, combination spec) under which the profile recorded r for this model order."""
        from spectune.profile import MODELS_SEP
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

    def traces(self, proposer: str, label: str, comb: str) -> Any:
        """The calibrated drafts of ``proposer`` (a model, or a lookup spec such as ``ngram:1,3``) against r."""
        from spectune.tune.simulate import Traces

        key = (proposer, label, comb)
        got = self._traces.get(key)
        if got is None and self.base is not None:  # a resample: the base's drafts, re-indexed
            got = self._traces[key] = self._resample(self.base.traces(proposer, label, comb))
        if got is None:
            sel = self.profile.select_traces(proposer, comb, label, self.workload)
            beta = _wide(sel, "beta")
            conf = _wide(sel, "q") if "q" in sel.columns and sel["q"].notna().any() else None
            length = (_wide(sel, "token") >= 0).sum(axis=1) if proposer not in self.order else None
            ok = _complete(beta, conf)
            got = self._traces[key] = Traces(beta[ok], None if conf is None else conf[ok],
                                             None if length is None else length[ok], group=_prompts(sel)[ok])
        return got

    def paths(self, look: Any, models: tuple[str, ...], label: str, comb: str, temperature: float = 0.0) -> Any:
        """r's greedy trajectories for lookup ``look`` (None: no lookup) and the models' greedy tokens along them to
        walk (``simulate.Paths``), or None where they do not apply: a profile calibrated before they were recorded,
        sampling (a sample path is not what every method decodes; the config's temperature and the calibration's),
        or an r other than the one the calibration decoded (the user's combination over all models, in any order:
        ``label`` / ``comb`` are ``acceptance_key``'s; for ``target``, the last model alone)."""
        from spectune.profile import MODELS_SEP
        from spectune.tune.simulate import Paths

        prof = self.profile
        own = (comb == prof.combination and label == MODELS_SEP.join(prof.models)) or (
            comb == "target" == prof.combination and models[-1] == prof.models[-1])
        greedy = float(temperature) == 0.0 == float(prof.settings.get("acceptance", {}).get("temperature", 0.0))
        if not own or not greedy:
            return None
        table, along = self.path_table(), self.path_draft_table()
        drafts = {i: along[m] for i, m in enumerate(models) if m in along}
        if not table or (look is None and not drafts):
            return None
        return Paths(table, replace(look, match=self.lookup_match).propose if look is not None else None, drafts)

    def path_table(self) -> dict[str, tuple[list[int], int]]:
        """{"workload/prompt": (prompt + answer ids, answer start)} of this workload, read once (a resample reuses
        its base's: its labels "workload/prompt#j" name the same prompts)."""
        if self._paths is None:
            if self.base is not None:
                self._paths = self.base.path_table()
            else:
                t = self.profile.trajectories
                if self.workload is not None:
                    t = t[t["workload"] == self.workload]
                self._paths = {f"{w}/{p}": ([int(x) for x in g["token"]], int((g["pos"] < 0).sum()))
                               for (w, p), g in t.sort_values("pos").groupby(["workload", "prompt"])}
        return self._paths

    def path_draft_table(self) -> dict[str, dict[str, tuple[np.ndarray, np.ndarray]]]:
        """{model: {"workload/prompt": (its greedy token, its q) at each index of the prompt's path}} (the prompt's
        indices: -1, nan; ``path_table``'s alignment), read once; empty for a profile without them. A prompt whose
        rows do not cover its answer exactly is left out (its drafts are then drawn from the traces)."""
        if self._along is None:
            if self.base is not None:
                self._along = self.base.path_draft_table()
            else:
                paths, t = self.path_table(), self.profile.path_drafts
                self._along = {}
                for (m, w, p), g in t.sort_values("pos").groupby(["model", "workload", "prompt"]):
                    path = paths.get(f"{w}/{p}")
                    if path is None or len(g) != len(path[0]) - path[1]:
                        continue
                    pad = np.full(path[1], -1)
                    self._along.setdefault(str(m), {})[f"{w}/{p}"] = (
                        np.concatenate([pad, g["token"].to_numpy(int)]),
                        np.concatenate([np.full(path[1], np.nan), g["q"].to_numpy(float)]))
        return self._along

    def betas(self, proposer: str, label: str, comb: str) -> np.ndarray:
        return self.traces(proposer, label, comb).beta

    def survival(self, proposer: str, label: str, comb: str) -> np.ndarray:
        b = self.betas(proposer, label, comb)
        return survival_from_betas(b, b.shape[1])

    def alpha(self, proposer: str, label: str, comb: str) -> float:
        """Mean per-position acceptance of ``proposer``'s drafts against r (a lookup: of the positions proposed)."""
        key = (proposer, label, comb)
        if key not in self._alpha:
            if proposer in self.order:
                a = self.profile.alpha(proposer, combination=comb, models=label, workload=self.workload)
            else:
                t = self.traces(proposer, label, comb)
                made = np.arange(t.gamma_max)[None, :] < t.length[:, None]  # type: ignore[index]
                a = t.beta[made].mean() if made.any() else 0.0
            self._alpha[key] = float(a)
        return self._alpha[key]

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
        from spectune.decoding.sv_policy import SVPolicy
        from spectune.tune.simulate import Traces

        key = (models, combine, gamma0)
        if key not in self._sv:
            label, comb = self.acceptance_key(models, combine)
            sv = self.profile.sv_traces
            sv = sv[(sv["draft"] == models[0]) & (sv["companion"] == models[1]) & (sv["target"] == models[-1])]
            if self.workload is not None:
                sv = sv[sv["workload"] == self.workload]
            if sv.empty:
                raise KeyError(f"no SV traces for draft '{models[0]}', companion '{models[1]}', target '{models[-1]}'")
            tr = self.profile.select_traces(models[0], comb, label, self.workload)
            S_, A_ = _wide(sv, "s"), _wide(sv, "a")
            keys = sv.pivot_table(index=["workload", "draft_id"], values="s", aggfunc="first").index
            rows = tr.pivot_table(index=["workload", "draft_id"], values="beta", aggfunc="first").index
            common = keys.intersection(rows)
            pick = lambda a, idx: a[idx.get_indexer(common)]  # noqa: E731
            S_, A_, B_ = pick(S_, keys), pick(A_, keys), pick(_wide(tr, "beta"), rows)
            ok = _complete(S_, A_, B_)
            if not ok.any():
                raise KeyError("no calibrated draft has both SV features and acceptance against r")
            from spectune.decoding.combine import parse_combination

            uses = parse_combination(combine, len(models)).uses
            policy = SVPolicy.from_profile(self.profile, models[0], models[1], [models[i] for i in uses], gamma0)
            preds = policy.predict(S_[ok].ravel(), A_[ok].ravel()).reshape(-1, S_.shape[1])
            self._sv[key] = (policy, self._resample(Traces(B_[ok], sv_pred=preds, group=pick(_prompts(tr), rows)[ok])))
        return self._sv[key]

    def _setup(self, config: Any) -> dict[str, Any]:
        """The simulator's arguments for ``config``: its method, r's models, every proposer's traces."""
        from spectune.decoding.combine import parse_combination
        from spectune.decoding.proposers import parse_proposer
        from spectune.decoding.registry import get_method

        models, look = tuple(config.models), parse_proposer(config.proposer)
        spec = get_method(config.method)
        label, comb = self.acceptance_key(models, config.combine)
        lookup = None
        if look is not None:  # a lookup is verified by r alone: for r = target, traced against the target alone
            lookup = self.traces(look.lookup_spec, models[-1] if comb == "target" else label, comb)
        drafts = look is None or look.fallback
        proposers = (range(len(models)) if spec.scorers == "all" else [0] if drafts and spec.gammas != "none"
                     else [])
        traces = [self.traces(m, label, comb) if i in proposers else None for i, m in enumerate(models)]
        sv = None
        if spec.needs_profile:
            sv, traces[0] = self._sv_setup(models, config.combine, config.gamma[0])
        return dict(method=spec, gamma=config.gamma, uses=parse_combination(config.combine, len(models)).uses,
                    traces=traces, lookup=lookup, policy=config.policy, sv=sv,
                    lookup_k=look.k if look is not None else None, fallback=bool(look and look.fallback),
                    paths=self.paths(look, models, label, comb, config.temperature))

    def sim_counts(self, config: Any) -> SimCounts:
        """Forwards per output token by (model index, feed length) from a one-row simulation, cached; pricing them
        at any batch size is then a dot product with L(b, k). The row visits the calibration prompts in turn for a
        request's length (``config.max_new_tokens``) each, as a measured workload decodes them."""
        from spectune.tune.simulate import simulate

        key = (config.method, tuple(config.models), config.combine, tuple(config.gamma), config.proposer,
               config.policy, float(config.temperature), int(config.max_new_tokens))
        got = self._counts.get(key)
        if got is None:
            res = simulate(**self._setup(config), rows=1, max_new_tokens=self.sim_tokens, seed=self.sim_seed,
                           visit=int(config.max_new_tokens))
            tokens = max(res.tokens, 1)
            got = self._counts[key] = SimCounts({mk: n / tokens for mk, n in res.calls_by_k.items()},
                                                res.tokens / max(res.rounds, 1), res.mean_accepted_length)
        return got

    def _batch_sim(self, config: Any) -> tuple[float, float, float, float]:
        """(seconds per token, tokens per round, mean accepted length, mean verification length) of static batches
        of ``config.max_new_tokens``-token requests (``simulate_requests``: every forward at the live batch size,
        each batch as long as its slowest row), about ``sim_tokens`` tokens in all; cached."""
        from spectune.tune.simulate import simulate_requests

        key = (config.method, tuple(config.models), config.combine, tuple(config.gamma), config.proposer,
               config.policy, int(config.batch_size), int(config.max_new_tokens), float(config.temperature))
        if key not in self._batches:
            b, n, models = int(config.batch_size), int(config.max_new_tokens), tuple(config.models)
            res = self.simulate(config, rows=1) if b == 1 else simulate_requests(
                b, n, max(1, -(-self.sim_tokens // (b * n))), self.sim_seed,
                latency=lambda m, b_, k: self.L(models[m], b_, k), turn=lambda m, b_: self.L(models[m], b_, 0),
                **self._setup(config))
            hist = res.stats.verified_len_hist
            self._batches[key] = (res.latency_per_token, res.tokens / max(res.rounds, 1), res.mean_accepted_length,
                                  sum(k * v for k, v in hist.items()) / max(1, sum(hist.values())))
        return self._batches[key]

    def simulate(self, config: Any, rows: int | None = None, max_new_tokens: int | None = None,
                 seed: int | None = None) -> Any:
        """A batched simulation of ``config`` (rows: its batch size), each forward priced at the live batch size;
        one row visits the calibration prompts for ``config.max_new_tokens`` tokens each (``sim_counts``)."""
        from spectune.tune.simulate import simulate

        models = tuple(config.models)
        return simulate(**self._setup(config), latency=lambda m, b, k: self.L(models[m], b, k),
                        turn=lambda m, b: self.L(models[m], b, 0),
                        rows=rows or config.batch_size, max_new_tokens=max_new_tokens or self.sim_tokens,
                        seed=self.sim_seed if seed is None else seed, visit=int(config.max_new_tokens))

    # -------------------------------------------------------------- predictions

    def standard_seconds(self, models: tuple[str, ...], combine: str, batch: int) -> float:
        """Seconds per token of ``standard``: one 1-token forward of every model in r."""
        from spectune.decoding.combine import parse_combination

        return sum(self.L(models[i], batch, 1) for i in parse_combination(combine, len(models)).uses)

    def predict(self, config: Any) -> Prediction:
        from spectune.decoding.proposers import parse_proposer
        from spectune.decoding.registry import get_method

        models, b, spec = tuple(config.models), int(config.batch_size), get_method(config.method)
        # at b > 1 requests of n tokens are priced as batches of them (below): each row's first token comes from
        # its prompt's forward, so n tokens take n - 1 decoding forwards of a plain model, as the runtime runs
        edge = 1.0 if b == 1 else (int(config.max_new_tokens) - 1) / max(int(config.max_new_tokens), 1)
        t_std = self.standard_seconds(models, config.combine, b) * edge
        t_target = self.L(models[-1], b, 1) * edge
        look = parse_proposer(config.proposer)
        lookup = look is not None and not look.fallback  # no model drafts
        c = 0.0 if lookup else self.L(models[0], b, 1) / t_target
        if spec.gammas == "none":
            return self._prediction(config, t_std, 1.0, t_std, t_target, c, float("nan"), float("nan"), {})
        if any(g > self.gamma_max for g in config.gamma[: spec.gamma_count(len(models))]):
            raise ValueError(f"gamma {max(config.gamma)} exceeds the calibrated gamma_max {self.gamma_max}")
        if look is not None and (look.k or 0) > self.gamma_max:
            raise ValueError(f"lookup length {look.k} exceeds the calibrated gamma_max {self.gamma_max}")
        label, comb = self.acceptance_key(models, config.combine)
        first = config.proposer if lookup else models[0]
        alpha = self.alpha(first, label, comb)
        acc = block_accepted(self.survival(first, label, comb), min(config.gamma[0], self.gamma_max))
        if spec.couples_rows or b > 1:
            # rows that decide together (sv), or a batch of requests: its rows accept at rates of their own (one
            # prompt each) and the batch runs until its slowest is done (Zen 4 mix validation, 32 tokens at
            # batch 4: speculative configurations priced 15-20 % high from one row's steady state); adaptive
            # policies' rows also draft lengths of their own: simulate the batches as the batched loop runs them
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
