"""``spectune export CONFIG --engine vllm|llamacpp --check``: start the engine from exactly the exported artifact
(or attach to one), run held-out prompts at the batch sizes of its schedule, and prove from the engine's own
counters and log that it ran what the artifact says.

Proof, per batch size measured (the concurrency of the clients):

* **K**: the draft length of every speculative step (vLLM: its per-request step metrics; llama.cpp: its log's
  ``accepted a/ n draft tokens`` line per step): the most frequent is the K the engine's own rule gives the
  artifact at that batch size (``Engine.scheduled_k``: vLLM's schedule, llama.cpp's ``--spec-draft-n-max``), and
  no length appears that no batch size up to it schedules (a step at the ramp, where fewer requests run, takes a
  smaller batch size's K; llama.cpp drafts fewer where fewer tokens are left to generate). Without per-step
  lengths (an attached engine), draft tokens per draft must lie between those K. A prompt lookup, or a lookup
  before the draft model, proposes up to K (a match near the end of the context has fewer tokens after it), so
  there no step may exceed K.
* **method**: what the engine says it runs (vLLM's start-up line: method, draft model, K; llama.cpp's log: each
  speculative implementation it added, with its n-max / n-min / p-min or n-gram sizes) is what the artifact asks
  for (not checkable when attached: said so).
* **no silent fallback**: drafts happened wherever K > 0, none where the schedule says 0; the engine generated
  every token the clients asked for; one per-position acceptance counter per draft position.

Beside the proof: measured goodput (wall-clock, over all clients; decoding only, less each request's time to
first token) against the profile's prediction for the plan at that batch size, and the engine's acceptance per
draft position (accepted at position i / drafts) against the profile's traces (the mean over drafts of
prod_{j <= i} beta_j for the same proposer and K).
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np

from spectune.artifacts import ranges
from spectune.engines import ENGINES, Drive, EngineSettings, engine_class, open_engine
from spectune.errors import ConfigError, EngineError
from spectune.models import load_tokenizer
from spectune.profile import profile_names
from spectune.tune import CostModel

NAN = float("nan")
CHECKABLE = tuple(ENGINES)


@dataclass(frozen=True)
class CheckSettings:
    """What the check runs: held-out prompts of ``workload`` (at least the batch size of them), ``repeats``
    interleaved over the batch sizes, ``max_batches`` ranges of a schedule at most."""

    workload: str = "mix"
    prompts: int = 4
    repeats: int = 3
    seed: int = 0
    max_batches: int = 2


@dataclass
class BatchProof:
    batch_size: int
    k: int  # what the artifact asks for at this batch size (the engine's own rule)
    allowed: frozenset[int]  # the K of every batch size up to this one: a step at the ramp runs fewer requests
    drives: list[Drive]
    lookup: bool  # a prompt lookup proposes: up to K
    chain: bool = False  # a lookup before the draft model: steps of either, none longer than K
    shorter: bool = False  # the engine drafts fewer than K where fewer tokens are left to generate (llama.cpp)
    predicted: float = NAN  # decode tok/s from the profile
    profile_acceptance: list[float] = field(default_factory=list)

    @property
    def counters(self) -> Any:
        return sum((d.counters for d in self.drives[1:]), self.drives[0].counters)

    @property
    def tokens_per_draft(self) -> float:
        return self.counters.tokens_per_draft

    def steps(self) -> Counter | None:
        """How many speculative steps ran each draft length: from the responses (vLLM) or the engine's log
        (llama.cpp); None where the engine reported neither."""
        per = [c.drafted for d in self.drives for c in d.completions]
        if per and all(x is not None for x in per):
            return Counter(k for x in per for k in x)
        logged = [d.steps_by_draft for d in self.drives]
        if logged and all(x is not None for x in logged):
            return sum(logged, Counter())
        return None

    def failures(self) -> list[str]:
        c, b, k = self.counters, self.batch_size, self.k
        asked = sum(d.tokens for d in self.drives)
        out = []
        if c.generated and abs(c.generated - asked) > 0.5:
            out.append(f"b={b}: the engine counted {c.generated:.0f} generated tokens, the clients got {asked}")
        steps = self.steps()
        if k == 0:  # drafts a row made (the counters and the per-step lengths alike count one per row a step)
            n = sum(v for kk, v in steps.items() if kk > 0) if steps is not None else c.drafts
            if n > 0.25 * asked:
                out.append(f"b={b}: the artifact does not speculate here, the engine drafted {n:.0f} times in "
                           f"{asked} tokens")
            return out
        if not c.drafts:
            return out + [f"b={b}: the artifact asks for K = {k}, the engine drafted nothing (fell back to the "
                          "target alone, or runs with --disable-log-stats)"]
        if self.lookup or self.chain:
            top = max(steps) if steps else c.tokens_per_draft
            if top > k + 1e-9:
                out.append(f"b={b}: a lookup proposed {top:g} tokens, more than K = {k}")
            return out
        if steps is not None:
            mode = steps.most_common(1)[0][0]
            stray = sorted(x for x in set(steps) - self.allowed if not (self.shorter and x < k))
            if mode != k or stray:
                out.append(f"b={b}: the engine drafted {dict(sorted(steps.items()))} tokens per step (length: "
                           f"steps), the artifact asks for K = {k}")
        elif not min(self.allowed) - 1e-9 <= c.tokens_per_draft <= max(self.allowed) + 1e-9:
            out.append(f"b={b}: {c.tokens_per_draft:.2f} draft tokens per draft, the artifact asks for K = {k}")
        return out

    def measured(self) -> float:
        return float(np.median([d.decode_goodput for d in self.drives]))

    def row(self) -> dict[str, Any]:
        c = self.counters
        acc = c.acceptance_per_pos()
        return {"batch_size": self.batch_size, "k": self.k, "tokens_per_draft": _fin(self.tokens_per_draft),
                "drafts": c.drafts, "draft_tokens": c.draft_tokens, "accepted": c.accepted,
                "steps_by_draft_length": {str(k): v for k, v in sorted((self.steps() or {}).items())},
                "decode_goodput": [_fin(d.decode_goodput) for d in self.drives],
                "goodput": [_fin(d.goodput) for d in self.drives], "measured": _fin(self.measured()),
                "predicted": _fin(self.predicted), "acceptance_per_pos": [_fin(a) for a in acc],
                "profile_acceptance_per_pos": [_fin(a) for a in self.profile_acceptance],
                "failures": self.failures()}


@dataclass
class EngineCheck:
    engine: str
    version: str
    artifact: Any
    resolved: dict[str, Any] | None  # what the engine's log says it runs; None when attached
    proofs: list[BatchProof]
    settings: CheckSettings
    profile: str | None
    url: str
    max_new_tokens: int

    def failures(self) -> list[str]:
        cls = engine_class(self.engine)
        out = cls.method_failures(self.artifact, self.resolved)
        for p in self.proofs:
            out += p.failures()
        n_pos = max((len(p.counters.accepted_per_pos) for p in self.proofs), default=0)
        k_max = cls.positions(self.artifact)
        if k_max and n_pos and n_pos != k_max:
            out.append(f"the engine counts acceptance at {n_pos} draft positions, the artifact's longest draft is "
                       f"{k_max}")
        return out

    def to_dict(self) -> dict[str, Any]:
        bad = self.failures()
        return {"engine": self.engine, "version": self.version, "url": self.url, "artifact": self.artifact,
                "resolved": self.resolved, "workload": self.settings.workload, "repeats": self.settings.repeats,
                "max_new_tokens": self.max_new_tokens, "profile": self.profile,
                "batches": [p.row() for p in self.proofs], "honoured": not bad, "failures": bad}

    def report(self) -> str:
        s = self.settings
        lines = [f"# check: {self.engine} {self.version} at {self.url} runs the artifact on held-out prompts of "
                 f"{s.workload}, {s.repeats} repeat(s), {self.max_new_tokens} tokens each"]
        if self.resolved is None:
            lines.append("#   method: not checked (attached: spectune has no start-up log of this engine)")
        else:
            lines.append(f"#   the engine's start-up line: {_said(self.resolved)}")
        for p in self.proofs:
            lines += _batch_lines(p, self.profile)
        bad = self.failures()
        lines.append("#   verdict: the engine honoured the artifact" if not bad else
                     "#   verdict: NOT honoured: " + "; ".join(bad))
        return "\n".join(lines)


def _batch_lines(p: BatchProof, profile: str | None) -> list[str]:
    c, pct = p.counters, lambda x: f"{x:+.1%}" if math.isfinite(x) else "-"  # noqa: E731
    head = f"#   b={p.batch_size}: K asked {p.k}"
    steps = p.steps()
    if p.k:
        head += (f", draft tokens per draft {p.tokens_per_draft:.2f} ({c.drafts:.0f} drafts), accepted "
                 f"{c.accepted / c.drafts:.2f} per draft" if c.drafts else ", no drafts")
    if steps:
        head += f"; steps by draft length {dict(sorted(steps.items()))}"
    meas = p.measured()
    head += f"; measured {meas:.1f} tok/s decoding ({np.median([d.goodput for d in p.drives]):.1f} with prefill)"
    out = [head]
    if profile is not None and math.isfinite(p.predicted):
        out.append(f"#     predicted {p.predicted:.1f} tok/s ({pct((p.predicted - meas) / meas)} vs measured; "
                   f"profile {profile})")
    acc = c.acceptance_per_pos()
    if acc:
        eng = " ".join(f"{a:.3f}" for a in acc)
        prof = " ".join(f"{a:.3f}" for a in p.profile_acceptance) or "-"
        diff = [abs(a - b) for a, b in zip(acc, p.profile_acceptance) if math.isfinite(b)]
        over = ", its rounds that proposed a token" if p.lookup or p.chain else ""
        out.append(f"#     acceptance by position, engine: {eng}; profile (predicted{over}): {prof}"
                   + (f" (largest difference {max(diff):.3f})" if diff else ""))
    return out


def _said(resolved: dict[str, Any]) -> str:
    if not resolved:
        return "no speculation (the target alone)"
    return ", ".join(f"{k}={v}" for k, v in resolved.items())


def _fin(x: float) -> float | None:
    return float(x) if isinstance(x, (int, float)) and math.isfinite(x) else None


def check_batches(exp: Any, max_batches: int) -> list[int]:
    """The batch sizes the check runs: the config's, or with a schedule one calibrated batch size from each of
    its first ``max_batches`` ranges."""
    plan = exp.plan
    if not plan.schedule:
        return [exp.config.batch_size]

    out = []
    for lo, hi, _ in ranges(plan.schedule)[:max_batches]:
        out.append(next(b for b, _ in plan.schedule if lo <= b <= hi))
    return out


def check_engine_export(exp: Any, engine: EngineSettings, settings: CheckSettings = CheckSettings(),
                        say: Callable[[str], None] = lambda s: None) -> EngineCheck:
    """Run ``exp`` (an ``Export`` for an engine in ``CHECKABLE``) in that engine and prove it honoured the
    artifact (see the module docstring). An engine fault is an ``EngineError`` carrying the rows measured so
    far."""
    if exp.engine not in CHECKABLE or engine.name != exp.engine:
        raise ConfigError(f"--check runs the artifact in its engine: spectune runs {', '.join(CHECKABLE)} and hf; "
                          f"not {exp.engine}")
    cls = engine_class(exp.engine)
    artifact = cls.speculative_of(exp.rendered.artifact)
    batches = check_batches(exp, settings.max_batches)
    pool = _prompts(exp, settings.workload)
    max_new = exp.plan.max_new_tokens
    lookup, chain = exp.plan.ngram is not None and exp.plan.draft is None, exp.plan.ngram is not None
    proofs = [BatchProof(b, cls.scheduled_k(artifact, b), frozenset(cls.scheduled_k(artifact, x)
                                                                    for x in range(1, b + 1)),
                         [], lookup, chain and not lookup, cls.shorter_at_end) for b in batches]
    say(f"starting {engine.name} for {exp.served['target']}" if not engine.url else f"attaching to {engine.name}")
    with open_engine(engine, exp.served["target"], artifact, max(batches), say) as eng:
        version = eng.version()
        eng.drive(pool[:1], 1, 4, seed=settings.seed)  # warm-up, not recorded
        try:
            for rep in range(settings.repeats):
                for p in proofs:
                    ps = [pool[i % len(pool)] for i in range(max(p.batch_size, settings.prompts))]
                    say(f"[repeat {rep + 1}/{settings.repeats}] b={p.batch_size}: {len(ps)} prompts x {max_new} tokens")
                    p.drives.append(eng.drive(ps, p.batch_size, max_new, exp.plan.temperature, settings.seed))
        except EngineError as e:
            raise EngineError(str(e), [p.row() for p in proofs if p.drives]) from None
        resolved = eng.resolved()
        url = eng.shown()
    prof = _price(exp, proofs, settings.workload)
    return EngineCheck(exp.engine, version, artifact, resolved, proofs, settings, prof, url, max_new)


def _prompts(exp: Any, workload: str) -> list[list[int]]:
    """The workload's held-out prompts as the runtime feeds them (chat template; ``decoder.encode_prompt``)."""
    from spectune.decoder import encode_workload

    return encode_workload(load_tokenizer(exp.config.models[-1]), workload)


def _price(exp: Any, proofs: list[BatchProof], workload: str) -> str | None:
    """Each proof's predicted decode goodput and the profile's acceptance by position (None: no profile)."""
    prof = exp.profile
    if prof is None:
        return None

    cm = CostModel(prof, workload, max_new_tokens=exp.config.max_new_tokens)
    base = replace(exp.config, models=profile_names(prof, exp.config.models))
    for p in proofs:
        cfg = exp.plan.nearest_config(replace(base, batch_size=p.batch_size))
        try:
            p.predicted = cm.predict(cfg).goodput
        except (KeyError, ValueError, NotImplementedError):
            p.predicted = NAN
        p.profile_acceptance = _profile_acceptance(cm, cfg) if p.k else []
    return str(getattr(prof, "path", None) or "in memory")


def _profile_acceptance(cm: CostModel, cfg: Any) -> list[float]:
    """P(the first i draft tokens are all accepted), i = 1..K, as the profile predicts the engine's per-position
    counter (``CostModel.acceptance_by_position``: over the simulated rounds that proposed a token; a lookup's
    drafts without a match are no draft to the engine); none where the profile cannot price the plan."""
    try:
        return [float(x) for x in cm.acceptance_by_position(cfg)]
    except (KeyError, ValueError, NotImplementedError):
        return []
