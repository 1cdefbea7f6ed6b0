"""Prompt sets (workloads) for calibration and held-out evaluation.

Five sets written by this project (``code``, ``math``, ``chat``, ``summarize``, ``edit``; 30 prompts each, 20
calibration and 10 held out) plus ``mix``, their deterministic interleave and the default. ``edit`` asks for
outputs that copy from the prompt (rename a variable, fix typos, list -> JSON): the case for prompt lookup
(``--proposer ngram``). Profiles record the sets they pooled (older ones pooled ``mix`` as the first four). A
user's ``.jsonl`` (or ``.txt``) prompt file can be loaded the same way: ``load_workload("path/to/prompts.jsonl")``.
"""
from spectune.workloads.reader import read_prompt_file, read_prompts
from spectune.workloads.catalog import BASE_WORKLOADS, DEFAULT_WORKLOAD, load_workload, workload_names
from spectune.workloads.workload import CALIBRATION, HELDOUT, Workload

__all__ = [
    "BASE_WORKLOADS",
    "CALIBRATION",
    "DEFAULT_WORKLOAD",
    "HELDOUT",
    "Workload",
    "load_workload",
    "read_prompt_file",
    "read_prompts",
    "workload_names",
]
