"""How the code base is laid out: stage packages over a small core, short functions, thin adapters,
package entry points that resolve and import nothing heavy."""

import ast
import importlib
import json
import pkgutil
import subprocess
import sys

import pytest

import sharflow
from testkit import REPO

SRC = REPO / "src" / "sharflow"
PACKAGES = (
    "core",
    "io",
    "work",
    "segment",
    "prepare",
    "text",
    "quality",
    "identity",
    "splits",
    "context",
    "shar",
    "codes",
    "models",
    "dataset",
    "verify",
    "publish",
    "report",
    "plan",
    "explore",
    "workflow",
)
# Floors, bottom up: a package imports only from floors below it; on the stages' floor a stage may
# import another (quality writes identity parts), as long as no import goes round (docs: development).
FLOORS = {
    "core": 0,
    "io": 1,
    "models": 1,
    "work": 2,
    **dict.fromkeys(
        (
            "segment",
            "prepare",
            "text",
            "quality",
            "identity",
            "splits",
            "context",
            "shar",
            "codes",
            "dataset",
        ),
        3,
    ),
    **dict.fromkeys(("verify", "publish", "plan"), 3),
    **dict.fromkeys(("report", "explore", "workflow"), 4),
}
HEAVY = ("torch", "lhotse", "nemo", "pandas", "pyarrow", "matplotlib", "onnxruntime")
MAX_FUNCTION_LINES = 60
MAX_ADAPTER_LINES = 29  # 4 of them the hand-over to the warm server (sharflow.work.warm)


def test_the_package_holds_only_stage_packages_over_the_core():
    top = sorted(p.name for p in SRC.iterdir() if p.name != "__pycache__")
    assert top == sorted(["__init__.py", *PACKAGES])
    for name in PACKAGES:
        init = SRC / name / "__init__.py"
        assert init.is_file(), f"{name} is not a package"
        assert ast.get_docstring(ast.parse(init.read_text())), f"{init} does not say what the stage does"


def package_imports(root) -> dict[str, set[str]]:
    """{package: the other sharflow packages its modules import} under `root` (src/sharflow)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts
        if len(parts) < 2:
            continue
        imported = out.setdefault(parts[0], set())
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
            imported |= {
                n.split(".")[1] for n in names if n.startswith("sharflow.") and n.split(".")[1] != parts[0]
            }
    return out


def import_problems(imports: dict[str, set[str]]) -> list[str]:
    """Each import that runs back up a floor or goes round, in words."""
    problems = [
        f"{p} (floor {FLOORS[p]}) imports {o} (floor {FLOORS[o]})"
        for p, others in imports.items()
        for o in sorted(others)
        if FLOORS[o] > FLOORS[p] or (FLOORS[o] == FLOORS[p] and FLOORS[p] != 3)
    ]
    done, path = set(), []

    def visit(p):
        if p in path:
            problems.append("a circle: " + " -> ".join([*path[path.index(p) :], p]))
            return
        if p in done:
            return
        path.append(p)
        for o in sorted(imports.get(p, ())):
            visit(o)
        path.pop()
        done.add(p)

    for p in sorted(imports):
        visit(p)
    return problems


def test_no_import_runs_back_up_a_floor_and_none_goes_round(tmp_path):
    imports = package_imports(SRC)
    assert set(imports) == set(FLOORS) == set(PACKAGES)
    assert import_problems(imports) == []
    # the check sees each kind of problem where there is one
    planted = {
        **imports,
        "core": {"io"},
        "shar": imports["shar"] | {"verify"},
        "verify": imports["verify"] | {"shar"},
    }
    found = import_problems(planted)
    assert "core (floor 0) imports io (floor 1)" in found
    assert any(p.startswith("a circle:") and "shar" in p and "verify" in p for p in found)


def long_functions(root) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    out.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({lines} lines)")
    return out


def test_no_function_is_longer_than_60_lines(tmp_path):
    assert long_functions(SRC) == []
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "long.py").write_text(f"def long():\n{body}\n")  # the check sees one that is
    found = [r.split(" ", 1)[1] for r in long_functions(tmp_path)]
    assert found == [f"long ({MAX_FUNCTION_LINES + 1} lines)"]


def test_every_entry_point_a_package_names_resolves():
    named = 0
    for module in pkgutil.walk_packages(sharflow.__path__, "sharflow."):
        package = importlib.import_module(module.name)
        for name in getattr(package, "__all__", []):
            assert callable(getattr(package, name)), f"{module.name}.{name}"
            named += 1
    assert named >= 15
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        importlib.import_module("sharflow.shar").nothing  # noqa: B018


def test_importing_a_stage_package_imports_nothing_heavy():
    """Job start-up: a package's __init__ names its entry points without importing them."""
    code = (
        "import json, sys\n"
        f"import {', '.join(f'sharflow.{p}' for p in PACKAGES)}\n"
        f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == []


def test_workflow_scripts_are_thin_adapters_over_names_that_exist():
    """...each handing its job to the run's warm server first (sharflow.work.warm), before its imports."""
    for path in sorted((REPO / "workflow_scripts").glob("*.py")):
        tree = ast.parse(path.read_text())
        assert len(path.read_text().splitlines()) <= MAX_ADAPTER_LINES, f"{path.name} is more than an adapter"
        first, call = (ast.unparse(node) for node in tree.body[1:3])
        assert first == "from sharflow.work.warm import hand_over", path.name
        assert call in ("hand_over(globals())", "hand_over(globals(), heavy=True)"), path.name
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sharflow"):
                module = importlib.import_module(node.module)
                for alias in node.names:
                    assert hasattr(module, alias.name), f"{path.name}: {node.module}.{alias.name}"


def test_the_mutation_selection_names_files_and_tests_that_exist():
    """pyproject's [tool.mutmut]: a renamed test left in its deselect list would run for every mutant."""
    import re
    import tomllib

    mutmut = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mutmut"]
    assert all((REPO / path).is_file() for path in mutmut["only_mutate"])
    args = mutmut["pytest_add_cli_args_test_selection"]
    for arg in args:
        path, _, test = arg.partition("::")
        if arg.startswith("tests/"):
            source = (REPO / path).read_text()
            assert not test or re.search(rf"def {re.escape(test)}\(", source), arg


def test_prepares_readers_are_siblings_behind_one_interface():
    """Each corpus form is one module of sharflow.prepare.readers, registered once (FORMS), named as the
    config's datasets.<name>.format says it, with every member of the Reader protocol; no reader
    imports another (what they share is readers.common and io.containers)."""
    from sharflow.core.config import load_yaml
    from sharflow.prepare import readers

    schema = load_yaml(REPO / "config" / "schema.yaml")
    formats = schema["properties"]["datasets"]["additionalProperties"]["properties"]["format"]["enum"]
    # long_form: recordings the segment stage cuts (sharflow.segment); prepare reads its NeMo manifest
    assert list(readers.FORMS) == [f for f in formats if f != "long_form"]
    members = [m for m in vars(readers.Reader) if not m.startswith("_")]
    assert {"open", "size", "chunks", "most_records"} <= set(members)
    modules = {spec.reader.split(":")[0] for spec in readers.FORMS.values()}
    assert modules == {m.name for m in pkgutil.iter_modules(readers.__path__)} - {"common"}
    for form in readers.FORMS:
        cls = readers.reader_class(form)
        assert cls.format == form, f"{cls.__name__}.format is {cls.format!r}, its form {form!r}"
        assert all(hasattr(cls, m) for m in [*members, "format", "unit", "first"]), form
    for module in modules:
        tree = ast.parse((SRC / "prepare" / "readers" / f"{module}.py").read_text(encoding="utf-8"))
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        siblings = {f"sharflow.prepare.readers.{m}" for m in modules - {module}} | {
            "sharflow.prepare.readers"
        }
        assert not imported & siblings, f"reader {module} imports {imported & siblings}"
