"""The package map by layer, enforced: no upward import, no reach into another package's private names.

An AST walk of every module under `shopsimrl/` collects every import of ours: at module top, inside
functions (the lazy imports that keep `shopsimrl --help` and the hooks light), under
`TYPE_CHECKING`, and modules named as strings for importlib (`"module:attribute"`, as the CLI's
command table names them, or a literal given to `import_module`/`load_function`). A package may
import its own modules and packages of a strictly lower row of `LAYERS`, so packages cannot import
each other in a circle; inside a package, no two modules may import each other (other than for type
annotations).

The click edge is one layer, the top one: `cli.py`, the `cli_*.py` modules beside it and every
package's `commands.py` (STYLE.md rule 9: a thin layer over library functions), so a `commands` module may
import any package and no library module may import a `commands` module.

A new package must be added to `LAYERS` (the test fails on an unknown one), which is the moment to
decide what it may import.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "shopsimrl"

# Lowest first. A package imports only itself and packages of a lower row; packages in one row do
# not import each other. `shopsimrl` is the root package (`__version__`).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("shopsimrl", "errors", "contract"),  # nothing of ours below them
    ("storage", "shop"),  # files and the environment
    ("config", "metrics", "models"),  # plugin options, metric names and computation, model files
    ("records", "skills"),  # audit records of a stage; the skillbank and its candidate edits
    ("rollout", "tracking"),  # the agent loop; W&B logging, offline reading, failure records, export
    ("stages",),  # what every stage shares: lock, registered inputs, session (logger, signals)
    # peers that never import each other: the Analyst, checkpoints on fixed episodes, episode-level
    # analysis, host and slime checks, and the hooks slime calls
    ("analyst", "evaluation", "behavior", "ops", "slime_hooks", "slime_metrics"),
    ("gate", "local"),  # the validation gate; the CPU backend
    ("round",),  # a whole round
    ("cli",),  # the click edge: cli.py, cli_*.py and every package's commands modules
)
LAYER: dict[str, int] = {package: row for row, packages in enumerate(LAYERS) for package in packages}

_DOTTED = re.compile(r"^shopsimrl(\.[A-Za-z_][A-Za-z0-9_]*)+(:[A-Za-z_][A-Za-z0-9_]*)?$")


@dataclass(frozen=True)
class Import:
    source: str  # the importing module, dotted
    path: Path
    line: int
    target: str  # the imported module (or module.attribute), dotted
    names: tuple[str, ...]  # for `from target import a, b`
    when: str  # "top" (runs at import), "function" (lazy), "type_checking", "string" (importlib)


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of(module: str) -> str:
    """`shopsimrl.a.b.c` -> `a`; the root package itself -> `shopsimrl`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def is_cli_edge(module: str) -> bool:
    last = module.rpartition(".")[2]
    top = module.split(".")[1] if module.count(".") else ""
    return top == "cli" or top.startswith("cli_") or last == "commands" or last.endswith("_commands")


def layer_package(module: str) -> str:
    """The row of `LAYERS` a module answers to: its package, or `cli` for the click edge."""
    return "cli" if is_cli_edge(module) else package_of(module)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _resolve(source: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = source.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imports_of(path: Path, text: str | None = None) -> Iterator[Import]:
    """Every import of ours in the module at `path` (its file, or `text` as if it were that file)."""
    source = module_name(path)
    tree = ast.parse(path.read_text(encoding="utf-8") if text is None else text, filename=str(path))
    is_package = path.name == "__init__.py"

    def walk(node: ast.AST, when: str) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            inner = when
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) and when == "top":
                inner = "function"
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for statement in child.body:
                    yield from walk(ast.Module(body=[statement], type_ignores=[]), "type_checking")
                for statement in child.orelse:
                    yield from walk(ast.Module(body=[statement], type_ignores=[]), when)
                continue
            if isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name.split(".")[0] == "shopsimrl":
                        yield Import(source, path, child.lineno, alias.name, (), when)
            elif isinstance(child, ast.ImportFrom):
                target = _resolve(source, is_package, child)
                if target.split(".")[0] == "shopsimrl":
                    yield Import(source, path, child.lineno, target, tuple(a.name for a in child.names), when)
            elif _named_module(child):
                yield Import(source, path, child.lineno, _named_module(child), (), "string")
            yield from walk(child, inner)

    yield from walk(tree, "top")


def _named_module(node: ast.AST) -> str:
    """The module a string names for importlib: `"shopsimrl.x:attr"` anywhere, or a literal dotted
    path given to `import_module`/`load_function`; "" for anything else (`"python -m shopsimrl.cli"`
    is a command line, not an import)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and ":" in node.value:
        return node.value.split(":")[0] if _DOTTED.match(node.value) else ""
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        value = node.args[0].value
        if name in ("import_module", "load_function") and isinstance(value, str) and _DOTTED.match(value):
            return value
    return ""


def all_imports() -> list[Import]:
    return [found for path in sorted(PACKAGE.rglob("*.py")) for found in imports_of(path)]


def _where(found: Import) -> str:
    how = {"top": "at import", "function": "lazy, in a function", "type_checking": "under TYPE_CHECKING",
           "string": "named as a string for importlib"}[found.when]  # fmt: skip
    return f"{found.path.relative_to(ROOT)}:{found.line} ({how})"


MODULES = frozenset(module_name(path) for path in PACKAGE.rglob("*.py"))


def imported_modules(found: Import) -> list[str]:
    """What an import reaches: `from shopsimrl.gate import commands` reaches the module
    `shopsimrl.gate.commands`, `from shopsimrl.gate import run_gate` the package `shopsimrl.gate`."""
    submodules = [f"{found.target}.{name}" for name in found.names if f"{found.target}.{name}" in MODULES]
    return sorted(set(submodules)) + ([found.target] if len(submodules) < len(found.names) or not found.names else [])


def layer_violations(imports: list[Import]) -> list[str]:
    problems = []
    for found in imports:
        for imported in imported_modules(found):
            source, target = layer_package(found.source), layer_package(imported)
            for package in sorted({source, target} - set(LAYER)):
                problems.append(f"{_where(found)}: package {package!r} has no row in LAYERS")
            if source == target or source not in LAYER or target not in LAYER:
                continue
            if LAYER[target] >= LAYER[source]:
                direction = "upward" if LAYER[target] > LAYER[source] else "sideways (same layer)"
                problems.append(
                    f"{_where(found)}: {direction} import {found.source} -> {imported} "
                    f"({source}, layer {LAYER[source]}, may not import {target}, layer {LAYER[target]})"
                )
    return problems


def private_violations(imports: list[Import]) -> list[str]:
    """A module of another package named `_x`, or a `_x` name imported from one (dunders are public)."""
    problems = []
    for found in imports:
        if package_of(found.source) == package_of(found.target):
            continue
        private = [part for part in found.target.split(".") if part.startswith("_") and not part.startswith("__")]
        private += [name for name in found.names if name.startswith("_") and not name.startswith("__")]
        if private:
            problems.append(
                f"{_where(found)}: {found.source} uses private {', '.join(private)} of {found.target}"
            )
    return problems


def _module_of(target: str, modules: set[str]) -> str | None:
    """The module a dotted target lives in (`a.b.name` -> `a.b` when `a.b` is a module)."""
    while target and target not in modules:
        target = target.rpartition(".")[0]
    return target or None


def module_cycles(imports: list[Import]) -> list[list[str]]:
    """Cycles among modules through imports that run, at import or in a function (not the ones
    made only for type annotations: those never execute)."""
    modules = set(MODULES)
    edges: dict[str, set[str]] = {module: set() for module in modules}
    for found in imports:
        if found.when == "type_checking":
            continue
        targets = [found.target] + [f"{found.target}.{name}" for name in found.names]
        for target in targets:
            module = _module_of(target, modules)
            # a package's __init__ importing its own submodules is how packages re-export
            if module and module != found.source and not module.startswith(found.source + "."):
                edges[found.source].add(module)
    cycles, state = [], dict.fromkeys(modules, 0)  # 0 new, 1 on the stack, 2 done

    def visit(module: str, stack: list[str]) -> None:
        state[module] = 1
        stack.append(module)
        for target in sorted(edges[module]):
            if state[target] == 1:
                cycles.append([*stack[stack.index(target):], target])
            elif state[target] == 0:
                visit(target, stack)
        stack.pop()
        state[module] = 2

    for module in sorted(modules):
        if state[module] == 0:
            visit(module, [])
    return cycles


def test_every_import_goes_down_the_layers() -> None:
    problems = layer_violations(all_imports())
    assert not problems, "imports against the layer order (tests/test_layers.py LAYERS):\n" + "\n".join(problems)


def test_no_module_uses_another_packages_private_names() -> None:
    problems = private_violations(all_imports())
    assert not problems, "private names used across packages:\n" + "\n".join(problems)


def test_no_two_modules_import_each_other() -> None:
    cycles = module_cycles(all_imports())
    assert not cycles, "modules importing each other:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_every_package_has_a_layer() -> None:
    packages = {layer_package(module) for module in MODULES}
    assert sorted(packages - set(LAYER)) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("from shopsimrl.round import runner\n", "upward import shopsimrl.storage.atomic -> shopsimrl.round"),
        ("def f():\n    from shopsimrl.gate.stage import run_gate\n", f"(lazy, in a function): upward import shopsimrl.storage.atomic -> shopsimrl.gate.stage (storage, layer 1, may not import gate, layer {LAYER['gate']})"),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from shopsimrl.local import run\n", "(under TYPE_CHECKING)"),
        ("import shopsimrl.rollout.agent\n", "upward import shopsimrl.storage.atomic -> shopsimrl.rollout.agent"),
        ('TARGET = "shopsimrl.cli:main"\n', "(named as a string for importlib): upward import"),
        ('importlib.import_module("shopsimrl.round.runner")\n', "(named as a string for importlib): upward import"),
        ("from shopsimrl.gate import commands\n", "-> shopsimrl.gate.commands (storage, layer 1, may not import cli"),
        ("from shopsimrl.shop import catalog\n", "sideways (same layer) import"),
    ],
)
def test_the_walk_catches_an_upward_import_wherever_it_is(text: str, expected: str) -> None:
    path = PACKAGE / "storage" / "atomic.py"
    found = list(imports_of(path, text))
    problems = layer_violations(found)
    assert len(problems) == 1 and expected in problems[0], problems
    assert problems[0].startswith("shopsimrl/storage/atomic.py:")


def test_a_command_line_naming_a_module_is_not_an_import() -> None:
    found = list(imports_of(PACKAGE / "errors.py", 'HEAD = ["python", "-m", "shopsimrl.cli"]\n'))
    assert found == []


def test_the_walk_catches_a_private_import_and_resolves_relative_ones() -> None:
    path = PACKAGE / "models" / "checkpoint.py"
    found = list(imports_of(path, "from shopsimrl.storage.atomic import _fsync_directory\nfrom . import files\n"))
    assert private_violations(found) == [
        "shopsimrl/models/checkpoint.py:1 (at import): shopsimrl.models.checkpoint uses private "
        "_fsync_directory of shopsimrl.storage.atomic"
    ]
    assert found[1].target == "shopsimrl.models"
