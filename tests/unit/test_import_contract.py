"""The import contract: the layers of ``adapter/`` hold, no module imports another's private
names, and there is no import cycle.

Read from the source (``ast``), not by importing it, so a violation behind a lazy import or an
``importlib`` call is found too.  The layers, lowest first:

* base: ``adapter.constants``, ``adapter.errors`` -- import nothing of the adapter;
* ``adapter.core`` (+ ``adapter.naming``, its public face) -- pure: base only, and no Kafka,
  Spark or network client;
* ``adapter.io`` -- thin Kafka wrappers: base and core;
* ``adapter.clients`` and ``adapter.services`` -- what users run: base, core, io, clients (no
  ``ops``, ``analytics``, ``cli``, ``bench``, ``embedded``, ``testing``);
* ``adapter.ops`` and ``adapter.analytics`` -- operations and analytics over the clients;
* the top: ``adapter.cli``, ``adapter.bench``, ``adapter.demo``, ``adapter.testing``, ...
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "adapter"

BASE = ("adapter.constants", "adapter.errors")
CORE = (*BASE, "adapter.core", "adapter.naming")
IO = (*CORE, "adapter.io")
CLIENTS = (*IO, "adapter.clients", "adapter.services")

#: layer (module prefix) -> what it may import from the adapter (module prefixes)
ALLOWED: dict[str, tuple[str, ...]] = {
    "adapter.constants": (),
    "adapter.errors": (),
    "adapter.core": CORE,
    "adapter.naming": CORE,
    "adapter.io": IO,
    "adapter.clients": CLIENTS,
    "adapter.services": CLIENTS,
}
#: third-party packages the pure core must not import
CLIENT_LIBRARIES = ("confluent_kafka", "pyspark", "fastavro", "tenacity", "prometheus_client")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _type_checking_lines(tree: ast.Module) -> set[int]:
    """Lines inside ``if TYPE_CHECKING:`` blocks (no runtime import)."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                for sub in ast.walk(child):
                    if hasattr(sub, "lineno"):
                        lines.add(sub.lineno)
    return lines


def imports(
    name: str, path: Path, *, runtime_only: bool = True
) -> Iterator[tuple[str, list[str], int]]:
    """``(imported module, imported names, line)`` for every import in a module, at any depth
    (function-level imports included) and every ``importlib.import_module("...")`` literal."""
    tree = ast.parse(path.read_text(), str(path))
    skip = _type_checking_lines(tree) if runtime_only else set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, [], node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            yield base, [a.name for a in node.names], node.lineno
        elif (
            isinstance(node, ast.Call)
            and ast.unparse(node.func).endswith("import_module")
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            yield str(node.args[0].value), [], node.lineno


def _under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _layer(module: str) -> str | None:
    for layer in sorted(ALLOWED, key=len, reverse=True):
        if _under(module, (layer,)):
            return layer
    return None


def _resolved(target: str, names: list[str], known: dict[str, Path]) -> list[str]:
    """The adapter modules an import statement loads (``from pkg import mod`` loads ``pkg.mod``)."""
    out = [target] if target in known else []
    out += [f"{target}.{n}" for n in names if f"{target}.{n}" in known]
    return out


def test_every_layer_imports_only_what_is_below_it() -> None:
    known = modules()
    violations = []
    for name, path in known.items():
        layer = _layer(name)
        if layer is None:
            continue
        allowed = ALLOWED[layer]
        for target, names, line in imports(name, path):
            if layer in ("adapter.core", "adapter.naming") and _under(target, CLIENT_LIBRARIES):
                violations.append(f"{name}:{line} imports {target} (the core is pure)")
            if not _under(target, ("adapter",)):
                continue
            for mod in _resolved(target, names, known) or [target]:
                if mod != "adapter" and not _under(mod, allowed):
                    violations.append(f"{name}:{line} imports {mod} (above {layer})")
    assert not violations, "\n".join(violations)


def test_no_module_imports_another_modules_private_names() -> None:
    known = modules()
    violations = []
    for name, path in known.items():
        for target, names, line in imports(name, path, runtime_only=False):
            if not _under(target, ("adapter",)) or target == name:
                continue
            private = [n for n in names if n.startswith("_") and n != "__all__"]
            if any(part.startswith("_") and part != "__init__" for part in target.split(".")):
                private.append(target)
            if private:
                violations.append(f"{name}:{line} imports {private} from {target}")
    assert not violations, "\n".join(violations)


def test_no_private_names_of_client_libraries() -> None:
    """``confluent_kafka`` and friends change their private modules without notice."""
    violations = []
    for name, path in modules().items():
        for target, names, line in imports(name, path, runtime_only=False):
            parts = target.split(".")
            if parts[0] in CLIENT_LIBRARIES and (
                any(p.startswith("_") for p in parts[1:]) or any(n.startswith("_") for n in names)
            ):
                violations.append(f"{name}:{line} imports {names or target} from {target}")
    assert not violations, "\n".join(violations)


def test_no_import_cycles() -> None:
    """Runtime imports between adapter modules (lazy ones too) form no cycle.  A package's
    ``__init__`` re-exporting its own modules is not a cycle of concern and is left out."""
    known = modules()
    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        if path.name == "__init__.py":
            continue
        for target, names, _ in imports(name, path):
            for mod in _resolved(target, names, known):
                if mod != name and known[mod].name != "__init__.py":
                    graph[name].add(mod)
    cycles = _cycles(graph)
    assert not cycles, "\n".join(" <-> ".join(c) for c in cycles)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_checker_sees_a_violation() -> None:
    """The contract can fail: a cycle and an upward import are found in a made-up graph."""
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]
    assert _layer("adapter.core.engine.tracking") == "adapter.core"
    assert not _under("adapter.ops.admin", ALLOWED["adapter.clients"])
