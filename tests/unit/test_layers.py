"""The house rules of docs/architecture.md, read from the source.

- A layer imports only from layers below it:
  llm / trace -> kb -> facts -> recall -> learn -> plane -> agent -> faces
  (ui, cli, mcp, integrations, demo, testing, plane_server). Imports under
  ``if TYPE_CHECKING:`` do not count: they never run.
- No module takes another package's private (``_name``) names; a package's
  offer to others is public. Private top-level helper modules (``fastaiagent._x``)
  are shared plumbing for every layer.
- No function is longer than MAX_FUNCTION_LINES.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "fastaiagent"
MAX_FUNCTION_LINES = 60
FACES = ("ui", "cli", "mcp", "integrations", "demo", "testing", "plane_server")
LAYERS: dict[str, float] = {
    "llm": 1, "trace": 1, "kb": 2, "facts": 3, "recall": 3.5, "learn": 4, "plane": 5, "agent": 6,
    **dict.fromkeys(FACES, 7),
}  # fmt: skip
PLUMBING = ("errors",)  # with every "_x" module: below every layer


def layer(module: str) -> float:
    """The layer of a dotted module path under fastaiagent ("" is the public root,
    which only the faces may import)."""
    if module == "":
        return LAYERS["ui"]
    head = module.split(".")[0]
    if head.startswith("_") or head in PLUMBING:
        return 0
    return LAYERS.get(head, LAYERS["agent"] + 0.5)


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(part for part in parts if part != "__init__")


def type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            lines.update(sub.lineno for sub in ast.walk(node) if hasattr(sub, "lineno"))
    return lines


def imported(node: ast.Import | ast.ImportFrom, me: str, is_package: bool) -> list[tuple[str, str]]:
    """(module, name) pairs a node imports from fastaiagent; name is "" for a module."""
    if isinstance(node, ast.Import):
        return [
            (alias.name.removeprefix("fastaiagent").lstrip("."), "")
            for alias in node.names
            if alias.name.split(".")[0] == "fastaiagent"
        ]
    if node.level:
        base = me.split(".") if is_package else me.split(".")[:-1]
        base = base[: len(base) - node.level + 1]
        module = ".".join([*base, *([node.module] if node.module else [])])
    elif node.module and node.module.split(".")[0] == "fastaiagent":
        module = node.module.removeprefix("fastaiagent").lstrip(".")
    else:
        return []
    pairs = []
    for alias in node.names:
        sub = f"{module}.{alias.name}" if module else alias.name
        is_module = (SRC / sub.replace(".", "/")).is_dir() or (
            SRC / (sub.replace(".", "/") + ".py")
        ).exists()
        pairs.append((sub, "") if is_module else (module, alias.name))
    return pairs


@cache  # one read of the source serves every rule
def findings() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {"upward import": [], "private name": [], "long function": []}
    for path in sorted(SRC.rglob("*.py")):
        me, tree = module_name(path), ast.parse(path.read_text(encoding="utf-8"))
        skip, is_package = type_checking_lines(tree), path.name == "__init__.py"
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    found["long function"].append(f"{path}:{node.lineno} {node.name}: {length}")
            if not isinstance(node, (ast.Import, ast.ImportFrom)) or node.lineno in skip:
                continue
            for module, name in imported(node, me, is_package):
                mine, theirs = me.split(".")[0], module.split(".")[0]
                if me == "" or (is_package and mine == theirs):
                    continue  # the root, or a package re-exporting its own modules
                if layer(module) > layer(me):
                    found["upward import"].append(f"{path}:{node.lineno} {me} -> {module}")
                private = name.startswith("_") and not name.startswith("__")
                if private and mine != theirs and not theirs.startswith("_"):
                    found["private name"].append(f"{path}:{node.lineno} {me} takes {module}.{name}")
    return found


def test_no_layer_imports_from_a_layer_above_it() -> None:
    assert findings()["upward import"] == []


def test_no_module_takes_another_packages_private_names() -> None:
    assert findings()["private name"] == []


def test_no_function_is_longer_than_the_limit() -> None:
    assert findings()["long function"] == []


def test_the_check_sees_a_violation(tmp_path: Path) -> None:
    """The rules catch what they are meant to (so a silent pass means something)."""
    tree = ast.parse("from fastaiagent.agent.memory import Memory\nfrom fastaiagent.facts import _x\n")
    nodes = [n for n in tree.body if isinstance(n, ast.ImportFrom)]
    assert imported(nodes[0], "kb.embedding", False) == [("agent.memory", "Memory")]
    assert layer("agent.memory") > layer("kb.embedding")
    assert imported(nodes[1], "kb.embedding", False) == [("facts", "_x")]
    assert layer("") > layer("agent") > layer("facts") > layer("_sqlite")
