"""The package's shape: no import cycle (lazy imports included; in the engine, imports for type
checking too), statistics that import nothing of the engine, live and batch as two back-ends of one
interface the run drives, no engine class past about 150 lines, registries where third parties can
add to them."""

import ast
import functools
from pathlib import Path

from promptprobe import providers, retrievers
from promptprobe.checks import CHECK_TYPES, METRICS

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "promptprobe"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(type_checking: bool = False) -> dict[str, set[str]]:
    """Every module's imports of other promptprobe modules, at any depth (inside functions too);
    those under `if TYPE_CHECKING:` only when `type_checking`."""
    # Parsed once per process (the sources do not change during a session); each test gets its own sets.
    return {name: set(targets) for name, targets in _imports(type_checking).items()}


@functools.cache
def _imports(type_checking: bool) -> dict[str, frozenset[str]]:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text())
        skipped = set() if type_checking else {
            id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
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
    return {name: frozenset(targets) for name, targets in graph.items()}


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


ENGINE = "promptprobe.engine"


def engine_graph() -> dict[str, set[str]]:
    """The engine's modules and their imports of each other, type-checking imports included."""
    return {name: {t for t in targets if t.startswith(ENGINE)}
            for name, targets in imports(type_checking=True).items() if name.startswith(ENGINE)}


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


def test_the_engine_has_no_cycle_not_even_through_imports_for_type_checking():
    graph = engine_graph()
    assert len(graph) > 10 and cycles(graph) == []
    # The check can fail: the circle the engine once had (run -> batch -> run) is found.
    assert cycles({**graph, f"{ENGINE}.batch": graph[f"{ENGINE}.batch"] | {f"{ENGINE}.run"}})


def test_nothing_below_the_run_imports_the_run():
    graph = engine_graph()
    for below in ("backend", "backends", "scheduler", "batch", "manifest", "parts", "preflight", "recorder"):
        assert {f"{ENGINE}.run", f"{ENGINE}.sequential"}.isdisjoint(reachable(graph, f"{ENGINE}.{below}")), below


def test_live_and_batch_are_two_back_ends_of_one_interface_the_run_drives():
    from promptprobe.engine.backend import Backend
    from promptprobe.engine.batch import BatchScheduler
    from promptprobe.engine.run import ProbeRun
    from promptprobe.engine.scheduler import Scheduler

    assert issubclass(Scheduler, Backend) and issubclass(BatchScheduler, Backend)
    assert {"submit", "collect"} <= set(Backend.__abstractmethods__)
    assert ProbeRun.run_units.__annotations__["return"] is Backend
    # The run knows the interface and where back-ends are made, not either back-end.
    run_imports = engine_graph()[f"{ENGINE}.run"]
    assert f"{ENGINE}.backend" in run_imports and f"{ENGINE}.backends" in run_imports
    assert not {t for t in run_imports if t.rpartition(".")[2] in ("scheduler", "batch", "executor")}


CLASS_LINES = 150  # about: a class longer than that is doing two jobs


def test_no_engine_class_is_past_about_150_lines():
    long = {}
    for path in (PACKAGE / "engine").glob("*.py"):
        for node in ast.parse(path.read_text()).body:
            lines = node.end_lineno - node.lineno + 1 if isinstance(node, ast.ClassDef) else 0
            if lines > CLASS_LINES:
                long[f"{path.name}:{node.name}"] = lines
    assert long == {}


def test_statistics_import_nothing_of_the_engine():
    graph = imports()
    for name, targets in graph.items():
        if name.startswith("promptprobe.stats"):
            assert all(t.startswith("promptprobe.stats") for t in targets), (name, targets)


def test_the_comparison_is_a_room_below_the_views():
    """The comparison (tests, intervals, adjustment, hints, words) and the planning (`probe plan`'s
    sizes, powers and simulations) import nothing of the views, the viewer, the CLI or the API; and
    the views that render them compute no statistic: none imports promptprobe.stats."""
    graph = imports()
    above = ("promptprobe.views", "promptprobe.viewer", "promptprobe.cli", "promptprobe.api")
    for room in ("promptprobe.comparison", "promptprobe.planning"):
        modules = {name: targets for name, targets in graph.items() if name.startswith(room)}
        assert len(modules) > 5, room
        for name, targets in modules.items():
            assert not {t for t in targets if t.startswith(above)}, (name, targets)
    for name, targets in graph.items():
        if name.startswith(("promptprobe.views", "promptprobe.viewer")):
            assert not {t for t in targets if t.startswith("promptprobe.stats")}, (name, targets)


def test_registries_live_in_the_package_init_and_take_third_parties():
    assert set(providers.REGISTRY) >= {"anthropic", "openai"}
    assert set(retrievers.REGISTRY) >= {"http", "python", "local", "none"}
    assert len(METRICS) == sum(len(c.metrics) for c in CHECK_TYPES)
    # The interface modules import no concrete implementation.
    graph = imports()
    assert not {t for t in graph["promptprobe.providers.base"] if "provider" in t.rpartition(".")[2]}
    assert "promptprobe.retrievers.local" not in graph["promptprobe.retrievers.base"]


def test_no_template_computes_a_figure():
    """One view object per view: a rate, a percentage or a hue is computed where the numbers are,
    so that the terminal, JSON, HTML and the viewer show the same; a template only places it."""
    import re

    figure = re.compile(r"\{[{%][^}%]*(\*|\|\s*round|\|\s*int\b| / )[^}%]*[}%]\}")
    found = []
    for template in sorted((PACKAGE / "views" / "templates").glob("*.j2")):
        for number, line in enumerate(template.read_text(encoding="utf-8").splitlines(), start=1):
            found += [f"{template.name}:{number}: {m.group(0)}" for m in figure.finditer(line)]
    assert found == []
