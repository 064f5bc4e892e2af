"""Every package pyproject.toml declares is imported by sharflow, or listed here with its reason."""

import ast
import re
import tomllib
from importlib.metadata import packages_distributions

import pytest

from testkit import REPO

# Declared but never imported by a sharflow module, and why each stays.
KEPT = {
    "snakemake-executor-plugin-slurm": "the Slurm executor profiles/slurm names; Snakemake loads it",
    "urllib3": "imported by lhotse, which does not declare it",
    "resemblyzer": "only its pretrained GE2E weights file is read (its import chain needs pkg_resources)",
    "smart-open": "lhotse opens s3:// Shar paths with it (NeMo reading a published set); < 8 for Snakemake",
    "speechmos": "only its DNSMOS ONNX weights are read, as package data (sharflow.quality.metrics)",
}


def declared() -> list[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return [re.split(r"[\s\[<>=!~;]", spec, maxsplit=1)[0] for spec in project["dependencies"]]


def imported_modules() -> set[str]:
    """Top-level names of every module imported anywhere in src/sharflow (lazy imports included)."""
    names = set()
    for path in (REPO / "src" / "sharflow").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module.split(".")[0])
    return names


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def imported_distributions() -> set[str]:
    by_module = packages_distributions()  # installed metadata: import name -> distributions
    return {normalize(d) for module in imported_modules() for d in by_module.get(module, [])}


def test_every_declared_dependency_is_imported_or_kept_for_a_reason():
    used = imported_distributions()
    assert {"torch", "lhotse", "numpy", "pandas", "pyarrow"} <= used  # the mapping works
    unused = [d for d in declared() if normalize(d) not in used and d not in KEPT]
    assert not unused, f"declared in pyproject.toml but imported by no sharflow module: {unused}"
    stale = [d for d in KEPT if normalize(d) in used]
    assert not stale, f"listed as kept but imported after all (drop them from KEPT): {stale}"
    assert set(KEPT) <= set(declared())


def test_the_check_catches_an_unused_package(monkeypatch):
    import test_dependencies

    listed = declared()
    monkeypatch.setattr(test_dependencies, "declared", lambda: [*listed, "hypothesis"])
    with pytest.raises(AssertionError, match="imported by no sharflow module: \\['hypothesis'\\]"):
        test_every_declared_dependency_is_imported_or_kept_for_a_reason()
