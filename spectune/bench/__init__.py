"""``spectune bench``: measured proof -- a grid of configurations on the runtime decoder beside what a user would
run instead (the target alone, HF assisted generation), and ``validate_advice``: does the recommended
configuration win on held-out prompts? See ``grid.py`` (what runs), ``runner.py`` (how it is measured),
``analysis.py`` (what is derived), ``advice.py`` (regret, MAPE, Spearman)."""
from spectune.bench.advice import AdviceResult, validate_advice
from spectune.bench.grid import BenchSpec, Run
from spectune.bench.runner import BenchResult, RunSettings, bench

__all__ = ["AdviceResult", "BenchResult", "BenchSpec", "Run", "RunSettings", "bench", "validate_advice"]
