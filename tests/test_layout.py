"""The source layout keeps its shape: no import cycles, imports only point down the layers,
and no source file grows past 600 lines."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("runtime", "grammars", "kernels", "lang")
MAX_LINES = 600

# Lowest first. A module sits in the layer of the longest prefix that names it. It may import
# modules of lower layers, and modules of its own layer only inside its own package.
LAYERS = [
    # records and leaf utilities everyone may use
    [
        "runtime.model.config",
        "runtime.model.gguf_convert",
        "runtime.model.gguf_index",
        "runtime.model.loader",
        "runtime.model.qgemv",
        "runtime.sampling.params",
        "runtime.cache.memory_pool",
        "runtime.detokenizer.incremental",
        "runtime.server.metrics",
        "runtime.faults",
        "runtime.version",
        "runtime.transfer",
    ],
    ["runtime.server_args", "runtime.scheduler.req"],
    ["runtime.messages", "runtime.ipc", "runtime.outputs", "runtime.cache", "runtime.sampling"],
    ["runtime.model"],
    ["runtime.scheduler", "runtime.detokenizer"],
    ["runtime.engine"],
    ["runtime.server"],
    ["runtime.launch_server", "runtime.cli", "runtime"],
]


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the nodes under `if TYPE_CHECKING:` (imports for annotations, never run)."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                skipped.update(id(n) for n in ast.walk(child))
    return skipped


def _imports(name: str, path: pathlib.Path) -> set[str]:
    """Project modules that `name` imports anywhere in its body (lazy imports included, those
    only for type checking not)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    tree = ast.parse(path.read_text())
    skipped = _type_checking_only(tree)
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names
            ]
        else:
            continue
        for target in targets:
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _layer(module: str) -> tuple[int, str]:
    """(layer index, the prefix that placed it)."""
    best = None
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (
                best is None or len(prefix) > len(best[1])
            ):
                best = (index, prefix)
    assert best is not None, f"{module} is in no layer: add it to LAYERS"
    return best


def _package(module: str) -> str:
    """`runtime.scheduler` for runtime.scheduler.policy, `runtime` for runtime.engine."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 else parts[0]


def test_every_module_parses_and_the_graph_is_not_empty():
    assert "runtime.scheduler.scheduler" in GRAPH
    assert "runtime.cache.radix_cache" in GRAPH["runtime.scheduler.scheduler"]


def test_no_import_cycles():
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for dep in sorted(GRAPH[module]):
            if state.get(dep) == 1:
                cycle = path[path.index(dep) :] + [dep]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if dep not in state:
                visit(dep, path + [dep])
        state[module] = 2

    for module in sorted(GRAPH):
        if module not in state:
            visit(module, [module])


def test_runtime_imports_point_down_the_layers():
    wrong = []
    for module, deps in GRAPH.items():
        if not module.startswith("runtime"):
            continue
        layer, _ = _layer(module)
        for dep in deps:
            if not dep.startswith("runtime"):
                continue
            dep_layer, _ = _layer(dep)
            if dep_layer > layer or (dep_layer == layer and _package(dep) != _package(module)):
                wrong.append(f"{module} (layer {layer}) imports {dep} (layer {dep_layer})")
    assert not wrong, "\n".join(sorted(wrong))


def test_lower_packages_never_import_the_runtime():
    for module, deps in GRAPH.items():
        if module.split(".")[0] in ("grammars", "kernels", "lang"):
            assert not [d for d in deps if d.startswith("runtime")], module


@pytest.mark.parametrize("package", ["runtime", "grammars"])
def test_no_source_file_above_the_size_limit(package):
    long = {
        str(p.relative_to(ROOT)): n
        for p in (ROOT / package).rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"files above {MAX_LINES} lines: {long}"
