"""The images' requirement files derive from pyproject.toml: drift is a failing test, not a failed build.

The first real build of the tools image failed at `shopsimrl --help` because the lock lacked the
firewall's dependencies; `check` on those files listed exactly those packages.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from shopsimrl.ops import image_requirements as ir

ROOT = Path(__file__).resolve().parents[2]


def _copy(tmp_path: Path) -> Path:
    for relative in (ir.PYPROJECT, ir.TRAIN_REQUIREMENTS, ir.TOOLS_LOCK, ir.CPU_REQUIREMENTS):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / relative, tmp_path / relative)
    return tmp_path


def test_the_committed_files_are_what_pyproject_gives():
    assert ir.check(ROOT) == []


def test_a_dependency_added_to_pyproject_alone_is_drift(tmp_path: Path):
    root = _copy(tmp_path)
    pyproject = root / ir.PYPROJECT
    text = pyproject.read_text()
    pyproject.write_text(text.replace('  "click>=8.1,<9",\n', '  "click>=8.1,<9",\n  "rich>=13,<15",\n', 1))
    problems = ir.check(root)
    assert f"{ir.TRAIN_REQUIREMENTS} is not what pyproject.toml's dependencies give" in problems
    assert f"{ir.TOOLS_LOCK} was not resolved from pyproject.toml's current dependencies" in problems
    assert f"{ir.TOOLS_LOCK} lacks rich (rich<15,>=13)" in problems


def test_a_lock_pin_outside_its_range_and_a_missing_package_are_named(tmp_path: Path):
    root = _copy(tmp_path)
    lock = root / ir.TOOLS_LOCK
    lines = [line for line in lock.read_text().splitlines() if not line.startswith("rapidfuzz==")]
    lines = ["click==7.0" if line.startswith("click==") else line for line in lines]
    lock.write_text("\n".join(lines) + "\n")
    problems = ir.check(root)
    assert f"{ir.TOOLS_LOCK} lacks rapidfuzz (rapidfuzz<4,>=3.9)" in problems
    assert f"{ir.TOOLS_LOCK} pins click==7.0, outside click<9,>=8.1" in problems


def test_comments_and_spacing_in_pyproject_are_not_drift():
    deps = ir.project_dependencies(ROOT / ir.PYPROJECT)
    assert ir.dependencies_hash(deps) == ir.dependencies_hash([d.replace(",", ", ") for d in deps])
    assert ir.render_train(deps).splitlines()[-len(deps):] == [str(ir.Requirement(d)) for d in deps]


def test_a_torn_lock_line_is_an_error_naming_the_line(tmp_path: Path):
    root = _copy(tmp_path)
    lock = root / ir.TOOLS_LOCK
    lock.write_text(lock.read_text() + "numpy>=2\n")
    try:
        ir.check(root)
    except ir.RequirementsDrift as error:
        assert str(error).startswith(f"{ir.TOOLS_LOCK}:") and "'numpy>=2'" in str(error)
    else:
        raise AssertionError("a line that is not name==version was accepted")


def test_the_cpu_image_gets_the_local_extra_without_torch(tmp_path: Path):
    lines = [line for line in (ROOT / ir.CPU_REQUIREMENTS).read_text().splitlines() if not line.startswith("#")]
    assert lines and not any(line.startswith("torch") for line in lines) and any("transformers" in x for x in lines)
    root = _copy(tmp_path)
    pyproject = root / ir.PYPROJECT
    pyproject.write_text(pyproject.read_text().replace('"gguf>=0.19.0,<0.20",', '"gguf>=0.19.0,<0.21",'))
    assert ir.check(root) == [f"{ir.CPU_REQUIREMENTS} is not what pyproject.toml's local extra gives"]
