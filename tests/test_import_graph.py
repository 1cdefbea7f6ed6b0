"""Data flows one way: the layers of spectune and the only direction imports may take between them.

Every import counts, at module level or inside a function (a lazy import is still a dependency). A unit is a
top-level module or subpackage of spectune; it may import itself and units of lower layers only, so siblings of
one layer (calibration and tune) never import each other. Also: no private name or private module of another
unit is imported, no third-party private module (Optuna through its public API only), and reading profiles
imports neither torch nor transformers. docs/architecture.md draws the same layers.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "spectune"

LAYERS: list[tuple[str, ...]] = [  # lowest first
    ("errors",),
    ("checks", "masking", "machine", "outputs", "workloads"),  # utilities
    ("profile_schema",),
    ("decoding",),  # the decode loop, sampling, combinations, proposers, policies
    ("config",),  # DecodeConfig, validated settings
    ("models",),  # loading by name / directory (torch only once a model loads)
    ("profile",),  # data: tables, latency fit, load / save, the one finder
    ("decoder", "engines"),  # the runtime decoder over loaded models | serving engines driven over HTTP
    ("calibration", "tune"),  # measure profiles | price and search configurations
    ("artifacts",),  # engine artifacts from configs, profiles and tune's public predictions
    ("bench",),
    ("api",),  # generate, recommend (calibrating first when no profile matches)
    ("cli",),
    ("cli_docs", "__main__"),
]
LAYER = {unit: i for i, units in enumerate(LAYERS) for unit in units}
# (importing module, imported module): why it is still there. The test fails when one of them is gone, so the
# list only shrinks.
KNOWN: dict[tuple[str, str], str] = {}
# private attributes read on objects other than self / cls: (module, attribute) -> why it is allowed
PRIVATE_ATTRS: dict[tuple[str, str], str] = {
    ("spectune.decoding.static_cache", "_dynamo"):
        "torch.compile's static-address and dynamic-dim marks exist only as torch._dynamo.mark_static_address / "
        "maybe_mark_dynamic in torch 2.13 (no torch.compiler equivalent; transformers' StaticCache uses the same)",
}
# third-party private modules, each with why no public API does it: (module, imported module) -> reason
PRIVATE_MODULES: dict[tuple[str, str], str] = {
    ("spectune.decoding.static_cache", "torch._dynamo.utils"):
        "counters['stats']['unique_graphs']: which forward compiled, so its time goes to compile time, not L(b, k)",
    ("spectune.decoding.static_cache", "torch._dynamo.config"):
        "recompile limits (one graph per bucket shape by design); torch.compiler.config does not hold them",
    ("spectune.decoding.static_cache", "torch._inductor.config"):
        "the CUDA-graph dynamic-shape warning limit (one CUDA graph per bucket shape is the design)",
}


def _modules() -> dict[str, ast.Module]:
    out = {}
    for f in sorted(ROOT.rglob("*.py")):
        parts = f.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = ast.parse(f.read_text(), str(f))
    return out


MODULES = _modules()


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "spectune"


def _imports(module: str, tree: ast.Module) -> list[tuple[str, str | None, int]]:
    """(imported module, imported name or None, line) for every import of ``module``, relative ones resolved."""
    out = []
    package = module if module in {m.rsplit(".", 1)[0] for m in MODULES if "." in m} else module.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, None, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.append((sub, None, node.lineno) if sub in MODULES else (base, a.name, node.lineno))
    return out


def _edges() -> list[tuple[str, str, str | None, int]]:
    return [(m, target, name, line) for m, tree in MODULES.items() for target, name, line in _imports(m, tree)
            if target == "spectune" or target.startswith("spectune.")]


def test_every_unit_has_a_layer():
    units = {_unit(m) for m in MODULES} - {"spectune"}
    assert units <= set(LAYER), f"units without a layer (add them to LAYERS): {sorted(units - set(LAYER))}"


def test_imports_go_down_the_layers_only():
    bad, seen_known = [], set()
    for src, dst, name, line in _edges():
        a, b = _unit(src), _unit(dst)
        if a == b or a == "spectune" or (dst, name) == ("spectune", "__version__"):
            continue  # within a unit; the package's lazy name table; the version string
        if (src, dst) in KNOWN:
            seen_known.add((src, dst))
            continue
        if b == "spectune" or LAYER[b] >= LAYER[a]:
            bad.append(f"{src}:{line} imports {dst} ({a} must not depend on {b})")
    assert not bad, "imports against the layers:\n" + "\n".join(bad)
    assert seen_known == set(KNOWN), f"fixed, remove from KNOWN: {sorted(set(KNOWN) - seen_known)}"


def test_the_package_imports_nothing_heavy_eagerly():
    """spectune/__init__.py maps public names to modules and imports them on first use (PEP 562)."""
    eager = [dst for src, dst, _, _ in _edges() if src == "spectune" and dst not in ("spectune.errors",)]
    assert not eager, f"spectune/__init__.py imports {eager} at import time"


def test_no_private_helper_crosses_a_unit():
    bad = []
    for src, dst, name, line in _edges():
        if _unit(src) == _unit(dst):
            continue
        private_module = any(p.startswith("_") and p != "__init__" for p in dst.split(".")[1:])
        if private_module or (name is not None and name.startswith("_") and not name.startswith("__")):
            bad.append(f"{src}:{line} imports {dst}{'.' + name if name else ''}")
    assert not bad, "private helpers imported across packages:\n" + "\n".join(bad)


def test_no_private_attribute_of_another_object_and_no_private_third_party_module():
    """Optuna (and every other library) through its public API: no ``pkg._private`` module import, no
    ``obj._private`` attribute but the listed ones (torch.compile's knobs that have no public home, each with
    its reason)."""
    bad, seen, seen_mod = [], set(), set()
    for module, tree in MODULES.items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                for n in names:
                    if not n.startswith(("spectune", "__future__")) and any(p.startswith("_") for p in n.split(".")):
                        if (module, n) in PRIVATE_MODULES:
                            seen_mod.add((module, n))
                        else:
                            bad.append(f"{module}:{node.lineno} imports private module {n}")
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                    and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
                if (module, node.attr) in PRIVATE_ATTRS:
                    seen.add((module, node.attr))
                else:
                    bad.append(f"{module}:{node.lineno} reads {ast.unparse(node)}")
    assert not bad, "\n".join(bad)
    assert seen == set(PRIVATE_ATTRS), f"gone, remove from PRIVATE_ATTRS: {sorted(set(PRIVATE_ATTRS) - seen)}"
    assert seen_mod == set(PRIVATE_MODULES), f"gone, remove from PRIVATE_MODULES: {set(PRIVATE_MODULES) - seen_mod}"


TORCH_FREE = r"""
import sys
import spectune.profile as P
assert not {"torch", "transformers"} & set(sys.modules), "import"
dirs = [d for d in sorted(P.BUNDLED_DIR.iterdir()) if (d / "profile.json").is_file()]
for d in dirs:
    prof = P.load_profile(d, check_hardware=False)
    prof.L(prof.models[-1], 3, 2, 100.0), prof.c(prof.models[0], prof.models[-1], 2)
    prof.expected_accepted(prof.models[0], 3), prof.select_traces(prof.models[0])
assert dirs and not {"torch", "transformers"} & set(sys.modules), "load and price"
from spectune.config import DecodeConfig
from spectune.tune import CostModel, SearchSpace
cm = CostModel(prof, sim_tokens=64)  # the cost model runs the decode state machine in its simulator
for method in ("standard", "sd", "naive-cos", "cos", "sv"):
    cm.predict(DecodeConfig(models=tuple(prof.models), method=method, combine="target", gamma=(2, 1, 1)))
SearchSpace(tuple(prof.models), "target", (1, 2), 4).enumerate()
assert not {"torch", "transformers"} & set(sys.modules), "tune: predictions and the search space"
P.find_profiles(prof.models, search=dirs)  # the machine check reads torch's thread count, nothing more
assert "transformers" not in sys.modules, "find"
"""


def test_reading_and_pricing_a_profile_needs_no_torch():
    """``import spectune.profile`` and loading, pricing (latency model, acceptance, the cost model's simulation of
    every method, the search space) and listing profiles import neither torch nor transformers; only asking
    whether a profile describes this machine reads torch's thread count (``spectune.machine.here``)."""
    r = subprocess.run([sys.executable, "-c", TORCH_FREE], capture_output=True, text=True, cwd=ROOT.parent)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("module", ["spectune", "spectune.profile", "spectune.errors", "spectune.machine",
                                    "spectune.tune", "spectune.decoding.registry", "spectune.artifacts"])
def test_import_is_torch_free(module):
    code = f"import sys, {module}; assert not {{'torch', 'transformers'}} & set(sys.modules), sorted(sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT.parent)
    assert r.returncode == 0, r.stderr[-2000:]
