"""What HF ``generate`` really ran: forward hooks on the target and the assistant count, time and size every
forward, so a bench row (or a test) can show how many tokens HF drafted per step instead of trusting settings.

Assisted generation alternates: the assistant's ``generate`` runs one forward per draft token, then the target
runs one forward over the drafts (+1). So the assistant forwards between two target forwards are that step's
draft length, and the target's cache length before its forward plus its feed length is the sequence length
after the drafts. A target forward on an empty cache starts a new sequence (it prefills the prompt and verifies
the first drafts in the same forward).

Prompt lookup (``lookup=True``) has no assistant: the looked-up candidates are fed to the target behind the last
accepted token, so a step's draft length is the target's feed length - 1 (the first forward: feed - prompt
length). Plain ``generate`` reads the same way (feed 1: no drafts).

``record=True`` also keeps each target forward's input ids and each assistant forward's next-token probabilities
(softmax of its last logits), so a test can read which tokens were drafted and how sure the assistant was.
"""
from __future__ import annotations

import json
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from spectune.decoding.hf_compat import cache_in


@dataclass
class Step:
    cur_len: int  # sequence length before this step's drafts
    drafted: int  # draft tokens (assistant forwards) the target verified in this step
    accepted: int = -1  # drafts the target kept (set when the next step or the sequence end is known)


@dataclass
class _Forward:
    role: str  # "target" or "assistant"
    feed: int  # tokens fed per row
    cache: int  # cached positions before the forward
    seconds: float = 0.0
    ids: list[int] | None = None  # record: the ids fed (target forwards, row 0)
    probs: Any = None  # record: softmax of the last position's logits (assistant forwards, row 0) [V]


@dataclass
class HFTrace:
    """Context manager: hooks on ``target`` (and ``assistant``) while active; call ``end_sequence`` after each
    ``generate`` with the output length (batch 1 for assisted generation)."""

    target: Any
    assistant: Any = None
    names: tuple[str, str] = ("assistant", "target")  # row labels for calls_by_k (draft name, target name)
    lookup: bool = False  # prompt lookup: draft lengths from the target's feed lengths (see the module docstring)
    record: bool = False  # keep target input ids and assistant probabilities per forward
    forwards: list[_Forward] = field(default_factory=list)
    sequences: list[list[Step]] = field(default_factory=list)
    _handles: list[Any] = field(default_factory=list)
    _t0: float = 0.0
    _mark: int = 0  # first forward of the current sequence

    def __enter__(self) -> "HFTrace":
        for role, m in (("target", self.target), ("assistant", self.assistant)):
            if m is not None:
                self._handles.append(m.register_forward_pre_hook(self._pre(role), with_kwargs=True))
                self._handles.append(m.register_forward_hook(self._post))
        return self

    def __exit__(self, *exc: Any) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def _pre(self, role: str):
        def hook(module: Any, args: tuple, kwargs: dict) -> None:
            ids = kwargs.get("input_ids", args[0] if args else None)
            cache = cache_in(kwargs)
            feed = int(ids.shape[1]) if ids is not None else 0
            f = _Forward(role, feed, int(cache.get_seq_length()) if cache is not None else 0)
            if self.record and role == "target" and ids is not None:
                f.ids = [int(x) for x in ids[0]]
            self.forwards.append(f)
            self._t0 = time.perf_counter()
        return hook

    def _post(self, module: Any, args: tuple, output: Any) -> None:
        f = self.forwards[-1]
        f.seconds = time.perf_counter() - self._t0
        if self.record and f.role == "assistant":
            f.probs = output.logits[0, -1].float().softmax(-1).detach()

    def end_sequence(self, final_len: int, prompt_len: int | None = None) -> list[Step]:
        """Close the current ``generate`` call: its steps, with accepted drafts from the lengths. ``prompt_len``
        (the prompt's length, padding included) is needed with ``lookup``, to read the first step's drafts."""
        steps, drafted = [], 0
        for f in self.forwards[self._mark:]:
            if f.role == "assistant":
                drafted += 1
                continue
            if self.lookup:
                if f.cache == 0 and prompt_len is None:
                    raise ValueError("end_sequence needs prompt_len to read prompt lookup's first step")
                drafted = f.feed - (prompt_len if f.cache == 0 else 1)  # type: ignore[operator]
            steps.append(Step(f.cache + f.feed - drafted, drafted))
            drafted = 0
        self._mark = len(self.forwards)
        for s, nxt in zip(steps, [s.cur_len for s in steps[1:]] + [final_len]):
            s.accepted = nxt - s.cur_len - 1
        self.sequences.append(steps)
        return steps

    def draft_lengths(self) -> Counter:
        """Steps by draft length over every sequence (0: the target decoded without drafts)."""
        return Counter(s.drafted for seq in self.sequences for s in seq)

    def prefill_excess(self) -> float:
        """Seconds the first forwards of each sequence spent beyond a decoding forward of the same model (the
        prompt's share: those forwards prefill the prompt *and* do one step's work, draft or verification)."""
        out = 0.0
        for role in ("target", "assistant"):
            fs = [f for f in self.forwards if f.role == role]
            decode = [f.seconds for f in fs if f.cache > 0]
            typical = statistics.median(decode) if decode else 0.0
            out += sum(max(0.0, f.seconds - typical) for f in fs if f.cache == 0)
        return out

    def calls_by_k(self) -> dict[str, dict[str, list[float]]]:
        """{model name: {feed length: [forwards, seconds]}} of the decoding forwards (as the runtime reports)."""
        out: dict[str, dict[str, list[float]]] = {}
        for f in self.forwards:
            if f.cache == 0:
                continue
            name = self.names[0] if f.role == "assistant" else self.names[1]
            cell = out.setdefault(name, {}).setdefault(str(f.feed), [0, 0.0])
            cell[0] += 1
            cell[1] += f.seconds
        return {n: dict(sorted(d.items(), key=lambda kv: int(kv[0]))) for n, d in out.items()}

    def row_stats(self, tokens: int) -> dict[str, Any]:
        """The bench row's measured loop statistics (as ``_measure_spectune`` reports them for the runtime)."""
        steps = [s for seq in self.sequences for s in seq if s.drafted > 0]
        drafted, accepted = sum(s.drafted for s in steps), sum(s.accepted for s in steps)
        nan = float("nan")
        return dict(mean_accepted_length=accepted / len(steps) if steps else nan,
                    alpha=accepted / drafted if drafted else nan,
                    calls_per_token=len(self.forwards) / tokens if tokens else nan,
                    calls_by_k=json.dumps(self.calls_by_k()),
                    draft_lengths=json.dumps({str(k): v for k, v in sorted(self.draft_lengths().items())}))
