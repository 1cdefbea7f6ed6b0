"""The calibrated evidence a cost model simulates on, selected from a profile once and cached: each proposer's
drafts against r (``traces``: one calibration prompt's label on each draft), r's greedy paths and the models'
tokens along them (``paths``), per-position acceptance (``alpha``, ``survival``), for one workload; and the same
over a bootstrap resample of the calibration prompts (``resampled``: each workload's prompts drawn with
replacement, one draw shared by every proposer, the base's drafts re-indexed). Apart from the pricing
(``cost.CostModel``), which holds one of these.
"""
from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import numpy as np

from spectune.profile import MODELS_SEP
from spectune.decoding.combine import parse_combination
from spectune.tune.simulate import Paths, Traces
from spectune.tune.closed_forms import survival_from_betas


def profile_workload(profile: Any, workload: str | None) -> str | None:
    """A profile's trace workload for a user's workload name: itself when measured, else all pooled."""
    if workload in (None, "", "all", "mix"):
        return None
    return workload if workload in profile.workloads else None


def wide(sel: Any, column: str) -> np.ndarray:
    """[n_drafts, gamma_max] of one trace column (rows: drafts, columns: positions)."""
    w = sel.pivot_table(index=["workload", "draft_id"], columns="pos", values=column, aggfunc="first")
    return w.sort_index(axis=1).to_numpy(float)


def prompt_labels(sel: Any) -> np.ndarray:
    """[n_drafts] the calibration prompt ("workload/prompt") of each row of ``wide(sel, ...)``."""
    first = sel.groupby(["workload", "draft_id"])["prompt"].first()
    return np.array([f"{w}/{p}" for (w, _), p in first.items()])


def complete(*arrays: np.ndarray | None) -> np.ndarray:
    """Rows where every given array is finite (drafts the calibration recorded in full)."""
    ok = np.ones(arrays[0].shape[0], dtype=bool)  # type: ignore[union-attr]
    for a in arrays:
        if a is not None:
            ok &= ~np.isnan(a).any(axis=1)
    return ok


class CalibratedTraces:
    """A profile's calibrated drafts and paths for ``workload`` (None: every workload pooled), read once; with
    ``draws`` (calibration prompts "workload/prompt", repeats allowed) the drafts of ``base`` re-indexed over them.
    An engine profile's lookups copy as that engine's do (``lookup_match``: ``decoding.ngram.MATCHES``)."""

    def __init__(self, profile: Any, workload: str | None = None, draws: list[str] | None = None,
                 base: "CalibratedTraces | None" = None):
        self.profile, self.workload, self.draws, self.base = profile, workload, draws, base
        self.order = {m: i for i, m in enumerate(profile.models)}
        self.lookup_match = str((profile.meta.get("engine") or {}).get("lookup_match", "recent"))
        self._traces: dict[tuple[str, str, str], Any] = {}
        self._alpha: dict[tuple[str, str, str], float] = {}
        self._paths: dict[str, tuple[list[int], int]] | None = None  # prompt -> (ids, answer start)
        self._along: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] | None = None  # path_draft_table's

    def resampled(self, seed: int) -> "CalibratedTraces":
        """These traces over a bootstrap resample of the calibration prompts, stratified by workload (each
        workload's prompts drawn with replacement, as many as it has: `mix` keeps its composition, as its
        held-out prompts do)."""
        rng = np.random.default_rng(seed)
        draws = []
        for _, group in itertools.groupby(self.prompts(), key=lambda p: p.rsplit("/", 1)[0]):
            ps = list(group)
            draws += [ps[i] for i in rng.integers(0, len(ps), len(ps))]
        return CalibratedTraces(self.profile, self.workload, draws, base=self)

    def prompts(self) -> list[str]:
        """The calibration prompts ("workload/prompt") of this model's traces, sorted."""
        t = self.profile.traces
        if self.workload is not None:
            t = t[t["workload"] == self.workload]
        return sorted({f"{w}/{p}" for w, p in zip(t["workload"], t["prompt"])})

    def resample(self, t: Any) -> Any:
        """``t`` (Traces) over ``self.draws``: each drawn prompt's drafts once per draw, labelled apart per draw
        (the simulator gives every label an equal share of a row's tokens)."""
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

    def lookup_proposers(self) -> tuple[str, ...]:
        """The lookup proposers (``ngram:N_MIN,N_MAX``) the profile traced."""
        names = self.profile.traces["proposer"].unique() if not self.profile.traces.empty else []
        return tuple(sorted(str(p) for p in names if p not in self.order))

    def acceptance_key(self, models: tuple[str, ...], combine: str) -> tuple[str, str]:
        """(models label, combination spec) under which the profile recorded r for this model order."""
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
        key = (proposer, label, comb)
        got = self._traces.get(key)
        if got is None and self.base is not None:  # a resample: the base's drafts, re-indexed
            got = self._traces[key] = self.resample(self.base.traces(proposer, label, comb))
        if got is None:
            sel = self.profile.select_traces(proposer, comb, label, self.workload)
            beta = wide(sel, "beta")
            conf = wide(sel, "q") if "q" in sel.columns and sel["q"].notna().any() else None
            length = (wide(sel, "token") >= 0).sum(axis=1) if proposer not in self.order else None
            ok = complete(beta, conf)
            got = self._traces[key] = Traces(beta[ok], None if conf is None else conf[ok],
                                             None if length is None else length[ok], group=prompt_labels(sel)[ok])
        return got

    def paths(self, look: Any, models: tuple[str, ...], label: str, comb: str, temperature: float = 0.0) -> Any:
        """r's greedy trajectories for lookup ``look`` (None: no lookup) and the models' greedy tokens along them to
        walk (``simulate.Paths``), or None where they do not apply: a profile calibrated before they were recorded,
        sampling (a sample path is not what every method decodes; the config's temperature and the calibration's),
        or an r other than the one the calibration decoded (the user's combination over all models, in any order:
        ``label`` / ``comb`` are ``acceptance_key``'s; for ``target``, the last model alone)."""
        prof = self.profile
        own = (comb == prof.combination and label == MODELS_SEP.join(prof.models)) or (
            comb == "target" == prof.combination and models[-1] == prof.models[-1])
        greedy = float(temperature) == 0.0 == float(prof.settings.get("acceptance", {}).get("temperature", 0.0))
        if not own or not greedy:
            return None
        table, along = self.path_table(), self.path_draft_table()
        drafts = {i: along[m] for i, m in enumerate(models) if m in along}
        if not table or (not look.looks_up and not drafts):
            return None
        return Paths(table, replace(look, match=self.lookup_match).propose if look.looks_up else None, drafts)

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
