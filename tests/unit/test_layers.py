"""The layers of DESIGN.md, as pyproject.toml's import-linter contracts (`lint-imports` in .ci/run): the
real tree keeps them, and a copy of src/ with one deliberately added import that breaks them fails, naming
the contract and the import. Imports inside functions count (a lazy import still ties the design)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
LAYERS = "shou's five layers: faces, runtime, capabilities, platform, foundation"
ACYCLIC = "no import circle between the modules of a package"
FACADE = "no module imports the facade, shou/__init__.py"
# The CLI, run as `lint-imports` is, by this interpreter: its graph is of the `shou` found first on PYTHONPATH.
LINT = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"


def lint(root: Path) -> tuple[int, str]:
    """`lint-imports` over the tree at `root` (its pyproject.toml, its src/): exit status and report."""
    env = {**os.environ, "PYTHONPATH": str(root / "src"), "NO_COLOR": "1", "COLUMNS": "200"}
    done = subprocess.run([sys.executable, "-c", LINT, "--no-cache", "--no-logo"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)
    return done.returncode, done.stdout + done.stderr


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the project's pyproject.toml and src/shou to break."""
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copytree(ROOT / "src" / "shou", tmp_path / "src" / "shou", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def add_function_import(module: Path, target: str) -> None:
    """Append to `module` a function that imports `target`: a lazy import, which counts like any other."""
    with module.open("a", encoding="utf-8") as f:
        f.write(f"\n\ndef _layers_test_import() -> None:\n    import {target}  # noqa: F401\n")


def test_the_tree_keeps_every_contract() -> None:
    status, report = lint(ROOT)
    assert status == 0, report
    assert f"{LAYERS} KEPT" in report and f"{ACYCLIC} KEPT" in report and f"{FACADE} KEPT" in report, report
    assert "Contracts: 3 kept, 0 broken." in report, report


def test_the_copy_is_what_gets_linted(tree: Path) -> None:
    """The checks below mean something only if the copy, not the installed tree, is what is analysed."""
    status, report = lint(tree)
    assert status == 0, report


def test_an_upward_import_inside_a_function_breaks_the_layers(tree: Path) -> None:
    add_function_import(tree / "src" / "shou" / "errors.py", "shou.cli")
    status, report = lint(tree)
    assert status == 1, report
    assert f"{LAYERS} BROKEN" in report, report  # (and a circle: the CLI imports errors)
    assert "shou.errors is not allowed to import shou.cli" in report and "shou.errors -> shou.cli" in report, report


def test_independent_siblings_may_not_import_each_other(tree: Path) -> None:
    """`agent | observe`: the runtime's two halves meet only through the events the emitter hands observers."""
    add_function_import(tree / "src" / "shou" / "agent" / "loop.py", "shou.observe.alerts")
    status, report = lint(tree)
    assert status == 1, report
    assert f"{LAYERS} BROKEN" in report and "shou.agent is not allowed to import shou.observe" in report, report


def test_a_circle_between_modules_of_one_layer_breaks_the_acyclic_contract(tree: Path) -> None:
    """Siblings joined by `:` may import each other in one direction; both directions are a circle."""
    foundation = tree / "src" / "shou"
    add_function_import(foundation / "glob.py", "shou.ranking")
    add_function_import(foundation / "ranking.py", "shou.glob")
    status, report = lint(tree)
    assert status == 1, report
    assert f"{ACYCLIC} BROKEN" in report and f"{LAYERS} KEPT" in report, report
    assert "No cycles are allowed in shou." in report, report


def test_importing_the_facade_from_inside_breaks_its_contract(tree: Path) -> None:
    """`from shou import Agent` in errors.py ties the foundation to every layer through shou/__init__.py,
    which no layer holds: its own contract sees it."""
    with (tree / "src" / "shou" / "errors.py").open("a", encoding="utf-8") as f:
        f.write("\n\ndef _layers_test_import() -> None:\n    from shou import Agent  # noqa: F401\n")
    status, report = lint(tree)
    assert status == 1, report
    assert f"{FACADE} BROKEN" in report and "shou.errors is not allowed to import shou:" in report, report


def test_a_module_no_layer_names_breaks_the_layers(tree: Path) -> None:
    """Every top-level module is placed: a new one has to be given a layer before it can land."""
    (tree / "src" / "shou" / "unplaced.py").write_text('"""Nowhere yet."""\n')
    status, report = lint(tree)
    assert status == 1, report
    assert f"{LAYERS} BROKEN" in report and "shou.unplaced" in report, report


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph.modules):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.find_modules_directly_imported_by(nxt)))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while (member := stack.pop()) != node:
                        on_stack.discard(member)
                        component.append(member)
                    on_stack.discard(node)
                    if component:
                        found.append(sorted([node, *component]))
    return found


def test_no_import_circle_between_any_two_modules() -> None:
    """What acyclic_siblings cannot see: a circle through a package's own `__init__` (a child importing its
    package, which imports the child). Over every module, the contract's known exceptions removed."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    graph = grimp.build_graph("shou", cache_dir=None,
                              exclude_type_checking_imports=config.get("exclude_type_checking_imports", False))
    for contract in config["contracts"]:
        for line in contract.get("ignore_imports", ()):
            importer, _, imported = (part.strip() for part in line.partition("->"))
            graph.remove_import(importer=importer, imported=imported)
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_circle() -> None:
    """The finder itself, on a graph with a known circle (a -> b -> c -> a) beside an acyclic part."""
    graph = grimp.ImportGraph()
    for importer, imported in (("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d"), ("p.d", "p.e")):
        graph.add_import(importer=importer, imported=imported)
    assert _cycles(graph) == [["p.a", "p.b", "p.c"]]
