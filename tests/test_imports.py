"""The package's import graph reads top-down (../shared/DESIGN.md): a module imports only from its own
layer or below, no algorithm imports another, and there is no cycle. Parsed from the source (ast), so
imports inside functions count as much as module-level ones, and nothing is imported to check."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = "purejaxrl_opt"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE

ENTRY, HOST, REGISTRY, ALGORITHM, FRAMEWORK, STAGE, MODEL, ENV, FORMAT, CONFIG = 9, 8, 7, 6, 5, 4, 3, 2, 1, 0
# A module's layer is its folder (docs/design.md): a new module needs no line here.
FOLDERS = {
    "host": HOST,  # drives the core: runner, checkpoints, loggers, artifacts, sweeps, search, lm/ files
    "core.algos": ALGORITHM,  # one file per algorithm: never imports another
    "core.stages": STAGE,  # what algorithms share: rollout, losses, optimisers, evaluation
    "core.models": MODEL,  # networks, distributions, transformer, causal LMs
    "envs": ENV,  # the env protocol and one adapter per library
    "formats": FORMAT,  # on-disk formats any layer reads: checkpoint trees
    "config": CONFIG,  # typed config, validation, ConfigError: imports nothing above
}
# the few modules a folder's layer does not describe
EXCEPTIONS = {
    "core.algos": REGISTRY,  # the registry: name (and env kind) -> algorithm module
    "core.algos.base": FRAMEWORK,  # what every algorithm plugs into: Algorithm, Loop, run_updates
    # a table of adapter module names that config's validation of env.id reads (imports only errors);
    # it loads the adapter of a named library with importlib
    "envs.registry": CONFIG,
    "core": CONFIG,  # the core's package docstring (a module of the core lives in one of its folders)
}
PACKAGES = {"core", "host", "envs", "config", "formats", "core.algos", "core.stages", "core.models", "host.lm"}


def layer(module: str) -> int:
    """A module's layer: a top-level module is a command-line entry point (``python -m
    purejaxrl_opt.<name>``); any other module's layer is that of the deepest folder holding it."""
    if module in EXCEPTIONS:
        return EXCEPTIONS[module]
    if "." not in module and module not in PACKAGES:
        return ENTRY
    parts = module.split(".")
    for depth in range(len(parts), 0, -1):
        folder = ".".join(parts[:depth])
        if folder in FOLDERS:
            return FOLDERS[folder]
    raise KeyError(f"{module} is in no layer folder: {sorted(FOLDERS)}")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts) or "__init__"


def imported_modules(tree: ast.AST, known: set[str]) -> set[str]:
    """Package modules named by ``import`` / ``from ... import`` anywhere in ``tree``."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # `from purejaxrl_opt import envs` names a module; `from purejaxrl_opt.envs import X` a member
            members = [f"{node.module}.{alias.name}" for alias in node.names]
            # `from purejaxrl_opt.core.stages import losses` names the module, not the package above it
            names = members if any(m[len(PACKAGE) + 1:] in known for m in members) else [node.module]
        else:
            continue
        for name in names:
            if name == PACKAGE or not name.startswith(PACKAGE + "."):
                continue
            name = name[len(PACKAGE) + 1:]
            if name in known:
                found.add(name)
    return found


def import_graph() -> dict[str, set[str]]:
    paths = sorted(ROOT.rglob("*.py"))
    known = {module_name(p) for p in paths}
    return {module_name(p): imported_modules(ast.parse(p.read_text()), known) - {module_name(p)}
            for p in paths}


def violations(graph: dict[str, set[str]]) -> list[str]:
    found = []
    for module, targets in sorted(graph.items()):
        if module == "__init__":
            continue
        for target in sorted(targets):
            if layer(target) > layer(module):
                found.append(f"{module} imports {target}, a layer above it")
            elif layer(target) == layer(module) == ALGORITHM:
                found.append(f"algorithm {module} imports algorithm {target}")
    return found


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return stack[stack.index(target):] + [target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_every_module_is_in_a_layer_folder_and_the_top_level_holds_only_entry_points():
    graph = import_graph()
    for module in graph:
        if module != "__init__":
            layer(module)  # raises for a module outside the layer folders
    top = sorted(m for m in graph if "." not in m and m not in PACKAGES and m != "__init__")
    assert top == ["benchmark", "evaluate", "generate", "report", "sft", "train"], top
    assert layer("core.algos.ppo") == ALGORITHM and layer("host.lm.runner") == HOST
    assert layer("core.models.causal_lm") == MODEL and layer("envs.navix") == ENV


def test_imports_point_down_and_no_algorithm_imports_another():
    graph = import_graph()
    assert not violations(graph), "\n".join(violations(graph))


def test_the_core_never_imports_the_host_side_or_an_entry_point():
    graph = import_graph()
    up = sorted(f"{m} imports {t}" for m in graph if m.startswith("core.") for t in graph[m]
                if layer(t) >= HOST)
    assert not up, up


def test_the_env_layer_imports_no_algorithm_stage_or_runner():
    """envs/ (the protocol, the registry, the adapters) reaches only environments and config."""
    graph = import_graph()
    modules = [m for m in graph if m == "envs" or m.startswith("envs.")]
    assert {"envs", "envs.protocol", "envs.registry", "envs.gymnax", "envs.tokens"} <= set(modules)
    above = sorted(f"{m} imports {t}" for m in modules for t in graph[m] if layer(t) > ENV)
    assert not above, above


def test_import_graph_is_acyclic():
    cycle = find_cycle(import_graph())
    assert cycle is None, " -> ".join(cycle)


@pytest.mark.parametrize("graph,expected", [
    ({"core.algos.ppo": {"core.algos.grpo"}, "core.algos.grpo": set()},
     "algorithm core.algos.ppo imports algorithm core.algos.grpo"),
    ({"config.schema": {"envs"}, "envs": set()}, "config.schema imports envs, a layer above it"),
    ({"core.algos.grpo": {"sft"}, "sft": set()}, "core.algos.grpo imports sft, a layer above it"),
    ({"core.stages.rollout": {"host.runner"}, "host.runner": set()},
     "core.stages.rollout imports host.runner, a layer above it"),
    ({"envs.navix": {"core.stages.rollout"}, "core.stages.rollout": set()},
     "envs.navix imports core.stages.rollout, a layer above it"),
])
def test_checker_catches_bad_imports(graph, expected):
    assert expected in violations(graph)


def test_checker_finds_cycles_and_parses_both_import_forms():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    tree = ast.parse("from purejaxrl_opt import envs\nfrom purejaxrl_opt.core.stages import losses\n"
                     "import purejaxrl_opt.core.algos.ppo\n"
                     "def f():\n    from purejaxrl_opt.core.algos.base import Loop\n")
    # the named module only, not the packages above it (`core.algos.base` is not the registry)
    known = {"envs", "core.stages.losses", "core.algos.ppo", "core.algos.base", "core.algos", "core.stages"}
    assert imported_modules(tree, known) == {"envs", "core.stages.losses", "core.algos.ppo", "core.algos.base"}
