"""The import contract: the layers of ``adapter/`` hold, no module imports another's private
names, and there is no import cycle (type-only imports included).

Read from the source (``ast``), not by importing it, so a violation behind a lazy import or an
``importlib`` call is found too.  The layers, lowest first:

* base: ``adapter.constants``, ``adapter.errors`` -- import nothing of the adapter;
* ``adapter.core`` (+ ``adapter.naming``, its public face) -- pure: base only, and no Kafka,
  Spark or network client, no clock, thread, uuid, random or process module of the standard
  library;
* ``adapter.io`` -- thin Kafka wrappers: base and core;
* ``adapter.telemetry`` -- OpenTelemetry spans and context (the optional extra): base, core, io;
* ``adapter.clients`` and ``adapter.services`` -- what users run: base, core, io, telemetry,
  clients (no
  ``ops``, ``analytics``, ``cli``, ``bench``, ``embedded``, ``testing``);
* ``adapter.ops`` and ``adapter.analytics`` -- operations and analytics over the clients;
* ``adapter.console`` -- the operator's web console: over ``ops`` (beside ``adapter.cli``, which
  starts it; never the other way round: nothing below imports the console);
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
TELEMETRY = (*IO, "adapter.telemetry")
CLIENTS = (*TELEMETRY, "adapter.clients", "adapter.services")

#: layer (module prefix) -> what it may import from the adapter (module prefixes)
ALLOWED: dict[str, tuple[str, ...]] = {
    "adapter.constants": (),
    "adapter.errors": (),
    "adapter.core": CORE,
    "adapter.naming": CORE,
    "adapter.io": IO,
    "adapter.telemetry": TELEMETRY,
    "adapter.clients": CLIENTS,
    "adapter.services": CLIENTS,
    "adapter.console": (*CLIENTS, "adapter.ops", "adapter.console"),
}
#: third-party packages the pure core must not import
CLIENT_LIBRARIES = ("confluent_kafka", "pyspark", "fastavro", "tenacity", "prometheus_client")
#: the standard library the pure core must not import either: clocks, threads, ids, chance,
#: the process and the network (time and ids are handed in by the client that owns them)
IMPURE_STDLIB = (
    "time",
    "threading",
    "uuid",
    "random",
    "secrets",
    "os",
    "subprocess",
    "multiprocessing",
    "concurrent",
    "asyncio",
    "socket",
)


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
            if layer in ("adapter.core", "adapter.naming") and _under(
                target, CLIENT_LIBRARIES + IMPURE_STDLIB
            ):
                violations.append(f"{name}:{line} imports {target} (the core is pure)")
            if not _under(target, ("adapter",)):
                continue
            for mod in _resolved(target, names, known) or [target]:
                if mod != "adapter" and not _under(mod, allowed):
                    violations.append(f"{name}:{line} imports {mod} (above {layer})")
    assert not violations, "\n".join(violations)


#: inside ``adapter.clients``: a client's package -> the client packages it may import.  Three
#: floors: ``share`` -> ``simple`` -> ``member``, ``push`` -> ``member``; ``producer`` and
#: ``dropin`` stand apart.  Type-only imports count too: a drawing of the imports has no circle.
CLIENT_FLOORS: dict[str, tuple[str, ...]] = {
    "adapter.clients.member": ("adapter.clients.member",),
    "adapter.clients.push": ("adapter.clients.push", "adapter.clients.member"),
    "adapter.clients.simple": ("adapter.clients.simple", "adapter.clients.member"),
    "adapter.clients.share": (
        "adapter.clients.share",
        "adapter.clients.simple",
        "adapter.clients.member",
    ),
    "adapter.clients.dropin": ("adapter.clients.dropin",),
    "adapter.clients.producer": ("adapter.clients.producer",),
}

#: imports across the floors, and why: the SimpleConsumer facade (in ``simple``) creates the
#: share backend (in ``share``, above it) when ``backend="share"`` is asked for, importing
#: it lazily in that branch
CLIENT_FLOOR_CROSSINGS = {
    ("adapter.clients.simple.simple_consumer", "adapter.clients.share.share_backend"),
}


def test_every_client_package_imports_only_the_floors_below_it() -> None:
    known = modules()
    violations = []
    for name, path in known.items():
        floor = next((f for f in CLIENT_FLOORS if _under(name, (f,))), None)
        if floor is None:
            assert not _under(name, ("adapter.clients",)) or name == "adapter.clients", (
                f"{name} is in no client package"
            )
            continue
        for target, names, line in imports(name, path, runtime_only=False):
            if not _under(target, ("adapter.clients",)):
                continue
            for mod in _resolved(target, names, known) or [target]:
                if (name, mod) in CLIENT_FLOOR_CROSSINGS:
                    continue
                if mod != "adapter.clients" and not _under(mod, CLIENT_FLOORS[floor]):
                    violations.append(f"{name}:{line} imports {mod} (beside or above {floor})")
    assert not violations, "\n".join(violations)


#: the clock reads the clients and services make through the injected ``Clock`` only
#: (``adapter/io/clock.py``), so a test drives their timing with a fake one
CLOCK_READS = ("time", "time_ns", "monotonic", "monotonic_ns")
#: what still reads the system's clock there, and why
CLOCK_READS_ALLOWED = {
    # a one-off bounded read of one record by the DLQ redrive (no timing rule depends on it)
    "adapter.services.redrive",
}


def test_clients_and_services_read_time_through_the_injected_clock() -> None:
    violations = []
    for name, path in modules().items():
        if not _under(name, ("adapter.clients", "adapter.services")):
            continue
        if name in CLOCK_READS_ALLOWED:
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "time"
                and node.attr in CLOCK_READS
            ):
                violations.append(f"{name}:{node.lineno} reads time.{node.attr}")
            if isinstance(node, ast.ImportFrom) and node.module == "time":
                violations.append(f"{name}:{node.lineno} imports from time")
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


def import_graph(known: dict[str, Path], *, runtime_only: bool = True) -> dict[str, set[str]]:
    """Module -> the adapter modules importing it runs, lazy imports included (and the
    type-only ones, unless ``runtime_only``).  Importing
    ``a.b.c`` runs the packages ``a`` and ``a.b`` too, so a module outside a package depends on
    that package's ``__init__`` (and on what it re-exports).  A package's own modules importing
    the package (``from adapter.cli import topics``) are left out: the package runs first, so
    that is no cycle of concern."""
    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        own = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for target, names, _ in imports(name, path, runtime_only=runtime_only):
            parts = target.split(".")
            parents = [".".join(parts[:i]) for i in range(2, len(parts))]
            for mod in [*_resolved(target, names, known), *parents]:
                if mod not in known or mod == name:
                    continue
                if known[mod].name == "__init__.py" and _under(own, (mod,)):
                    continue  # a module of the package (or the package) importing the package
                graph[name].add(mod)
    return graph


def test_no_import_cycles() -> None:
    """Runtime imports between adapter modules (lazy ones too) form no cycle."""
    cycles = _cycles(import_graph(modules()))
    assert not cycles, "\n".join(" <-> ".join(c) for c in cycles)


#: type-only import circles still to be undone (none left)
TYPE_ONLY_CYCLES_LEFT: list[list[str]] = []


def test_no_import_cycles_type_only_imports_included() -> None:
    """Imports under ``if TYPE_CHECKING:`` count too: a drawing of the modules' imports has
    no circle (but the ones listed in :data:`TYPE_ONLY_CYCLES_LEFT`)."""
    cycles = _cycles(import_graph(modules(), runtime_only=False))
    new = [c for c in cycles if c not in TYPE_ONLY_CYCLES_LEFT]
    assert not new, "\n".join(" <-> ".join(c) for c in new)


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
    for impure in ("time", "threading", "uuid", "random"):
        assert _under(impure, IMPURE_STDLIB)


def test_a_cycle_through_a_package_init_is_found(tmp_path: Path) -> None:
    """Importing ``adapter.x.opts`` runs ``adapter/x/__init__``: when that re-exports a module
    which (even lazily) imports the importer, it is a cycle (how ``adapter.analytics.cli`` and
    ``adapter.cli`` once stood)."""
    files = {
        "adapter.x": "from adapter.x.run import go\n",
        "adapter.x.run": "def go():\n    from adapter.y.tool import t\n",
        "adapter.x.opts": "o = 1\n",
        "adapter.y.tool": "from adapter.x.opts import o\nt = o\n",
    }
    known = {}
    for name, text in files.items():
        path = tmp_path / (name.replace(".", "_") + ".py")
        if name == "adapter.x":
            path = tmp_path / "x" / "__init__.py"
            path.parent.mkdir()
        path.write_text(text)
        known[name] = path
    assert _cycles(import_graph(known)) == [["adapter.x", "adapter.x.run", "adapter.y.tool"]]


def test_no_test_imports_a_private_name_of_the_adapter() -> None:
    """Tests use what the adapter offers: a private name is free to change."""
    violations = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for target, names, line in imports("tests.x", path, runtime_only=False):
            if not _under(target, ("adapter",)):
                continue
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            if any(part.startswith("_") and part != "__init__" for part in target.split(".")):
                private.append(target)
            if private:
                where = path.relative_to(ROOT)
                violations.append(f"{where}:{line} imports {private} from {target}")
    assert not violations, "\n".join(violations)
