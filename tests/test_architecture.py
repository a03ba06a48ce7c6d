"""The package's shape: no import cycle (lazy imports included), statistics that import nothing
of the engine, registries where third parties can add to them."""

import ast
from pathlib import Path

from promptprobe import providers, retrievers
from promptprobe.checks import CHECK_TYPES, METRICS

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "promptprobe"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports() -> dict[str, set[str]]:
    """Every module's imports of other promptprobe modules, at any depth but TYPE_CHECKING."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text())
        skipped = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                   and "TYPE_CHECKING" in ast.unparse(node.test) for n in ast.walk(node)}
        for node in ast.walk(tree):
            if id(node) in skipped or not isinstance(node, ast.ImportFrom | ast.Import):
                continue
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = package.split(".")
                if node.level > 1:
                    base = base[: len(base) - (node.level - 1)]
                prefix = ".".join(base) if node.level else ""
                target = ".".join(filter(None, [prefix, node.module or ""]))
                targets = [f"{target}.{alias.name}" if f"{target}.{alias.name}" in modules else target
                           for alias in node.names]
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    found, state = [], {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                found.append(trail[trail.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def test_the_import_graph_has_no_cycle():
    assert cycles(imports()) == []


def test_statistics_import_nothing_of_the_engine():
    graph = imports()
    for name, targets in graph.items():
        if name.startswith("promptprobe.stats"):
            assert all(t.startswith("promptprobe.stats") for t in targets), (name, targets)


def test_registries_live_in_the_package_init_and_take_third_parties():
    assert set(providers.REGISTRY) >= {"anthropic", "openai"}
    assert set(retrievers.REGISTRY) >= {"http", "python", "local", "none"}
    assert len(METRICS) == sum(len(c.metrics) for c in CHECK_TYPES)
    # The interface modules import no concrete implementation.
    graph = imports()
    assert not {t for t in graph["promptprobe.providers.base"] if "provider" in t.rpartition(".")[2]}
    assert "promptprobe.retrievers.local" not in graph["promptprobe.retrievers.base"]
