"""README's package map lists every package of shopsimrl/, and each line says what its docstring says.

The map is the fenced block under "## Package map": `shopsimrl/`, then one line per package, indented
two spaces per level (`  rollout/`, `    generators/`), its name and then the first sentence of its
`__init__.py` docstring, whitespace collapsed (the first paragraph up to its first ". "). A package
added, removed or re-described without the README following fails here.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "shopsimrl"
LINE = re.compile(r"(?P<indent>(  )+)(?P<name>[a-z_]+)/ +(?P<text>\S.*)")


def first_sentence(docstring: str) -> str:
    paragraph = " ".join(docstring.split("\n\n")[0].split())
    head, sep, _ = paragraph.partition(". ")
    return head + "." if sep else paragraph


def packages() -> dict[str, str]:
    """{"rollout/generators": first sentence of its docstring} for every package below shopsimrl/."""
    found = {}
    for init in sorted(PACKAGE.rglob("__init__.py")):
        if init.parent == PACKAGE or "__pycache__" in init.parts:
            continue
        docstring = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        found[init.parent.relative_to(PACKAGE).as_posix()] = first_sentence(docstring)
    return found


def readme_map() -> dict[str, str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"^## Package map\n.*?^```\n(?P<body>.*?)^```$", text, re.S | re.M)
    assert block is not None, 'README.md has no "## Package map" with a fenced block'
    lines = block["body"].splitlines()
    assert lines[0] == "shopsimrl/", lines[0]
    listed: dict[str, str] = {}
    parents: list[str] = []
    for line in lines[1:]:
        match = LINE.fullmatch(line)
        assert match is not None, f"not `  name/  what it is`: {line!r}"
        depth = len(match["indent"]) // 2
        parents = parents[: depth - 1] + [match["name"]]
        assert len(parents) == depth, f"{line!r} is indented below no package"
        listed["/".join(parents)] = match["text"]
    return listed


def test_the_readme_lists_every_package_and_no_other() -> None:
    listed, actual = readme_map(), packages()
    assert (sorted(set(actual) - set(listed)), sorted(set(listed) - set(actual))) == ([], [])


def test_each_line_is_its_packages_docstring() -> None:
    listed, actual = readme_map(), packages()
    # {package: (README's line, the docstring's first sentence)} for every line that differs
    assert {name: (text, actual[name]) for name, text in listed.items() if name in actual and text != actual[name]} == {}


def test_every_package_has_a_docstring() -> None:
    assert [name for name, text in packages().items() if not text] == []


def test_the_first_sentence_and_a_line_are_read_as_documented() -> None:
    assert first_sentence("W&B tracking: a, b,\nc and d. More.\n\nLater.") == "W&B tracking: a, b, c and d."
    assert first_sentence("One line, no stop") == "One line, no stop"
    match = LINE.fullmatch("    generators/  Generators of the loop.")
    assert match is not None and (match["indent"], match["name"], match["text"]) == ("    ", "generators", "Generators of the loop.")
