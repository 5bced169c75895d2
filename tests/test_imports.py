"""The package's import graph reads top-down (../shared/DESIGN.md): a module imports only from its own
layer or below, no algorithm imports another, and there is no cycle. Parsed from the source (ast), so
imports inside functions count as much as module-level ones, and nothing is imported to check."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = "purejaxrl_opt"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE

ENTRY, ORCHESTRATION, REGISTRY, ALGORITHM, FRAMEWORK, STAGE, MODEL, ENV, LEAF = 8, 7, 6, 5, 4, 3, 2, 1, 0
# every module of the package and its layer; a new module must be placed here
LAYERS = {
    # entry points: CLIs that compose a config and call
    "train": ENTRY, "sft": ENTRY, "evaluate": ENTRY, "benchmark": ENTRY,
    # the Hydra search sweeper (hydra/sweeper=optuna): launches train jobs, reads their results
    "search": ENTRY,
    # text generation from a pretrained LM (python -m purejaxrl_opt.generate)
    "generate": ENTRY,
    # orchestration (report: reads run dirs and plots; its CLI is an entry point, but runner/artifacts
    # plot with it, and it imports nothing of the package)
    "runner": ORCHESTRATION, "artifacts": ORCHESTRATION, "loggers": ORCHESTRATION,
    "parallel": ORCHESTRATION, "sweep": ORCHESTRATION, "report": ORCHESTRATION,
    "stats": ORCHESTRATION,
    # GRPO on a pretrained LM, host side: prompts, tasks, Python reward functions, the split-step driver
    "lm.data": ORCHESTRATION, "lm.rewards": ORCHESTRATION, "lm.tasks": ORCHESTRATION,
    "lm.runner": ORCHESTRATION, "lm.tiny": ORCHESTRATION,
    # pretrained LMs, host side: loaders (safetensors, GGUF), tokenizer and chat template, save
    "lm": ORCHESTRATION, "lm.tokenizer": ORCHESTRATION, "lm.weights": ORCHESTRATION,
    "lm.gguf_file": ORCHESTRATION,
    # name (and env kind) -> algorithm module
    "algos": REGISTRY,
    # one file per algorithm: never imports another
    "algos.ppo": ALGORITHM, "algos.trpo": ALGORITHM, "algos.grpo": ALGORITHM, "algos.ppo_tokens": ALGORITHM,
    # GRPO on a pretrained LM: the compiled sampling and update of its split step
    "algos.grpo_lm": ALGORITHM,
    # PPO on a pretrained LM with a value LM (the memory comparison's other trainer)
    "algos.ppo_lm": ALGORITHM,
    # what every algorithm plugs into: Algorithm, Loop, run_updates
    "algos.base": FRAMEWORK,
    # shared stages
    "rollout": STAGE, "actor_critic": STAGE, "evaluation": STAGE, "losses": STAGE,
    "natural_gradient": STAGE, "optim": STAGE, "collectives": STAGE, "episode_losses": STAGE,
    # GRPO's objective and advantages: the env algorithm and the language-model trainer call them
    "grpo_objective": STAGE,
    # the language-model trainers' shared policy side: batch layout, log-probs, micro-batches, sharding
    "lm_policy": STAGE,
    # models
    "policies": MODEL, "networks": MODEL, "transformer": MODEL, "distributions": MODEL,
    "pretrained": MODEL,
    # pretrained causal LMs (Llama / Qwen2 families) and their sampler
    "models": MODEL, "models.causal_lm": MODEL, "models.sampling": MODEL,
    # low-rank adapters over a causal LM's params dict
    "models.lora": MODEL,
    # environments (envs/: the protocol, one adapter per library, wrappers; every module of envs/ not
    # named here is an adapter, at this layer: see layer())
    "envs": ENV, "envs.protocol": ENV, "envs.tokens": ENV, "envs.tasks": ENV, "envs.wrappers": ENV,
    "envs.normalisation": ENV, "envs.gymnax": ENV, "envs.options": ENV,
    # leaves. The env registry is a table of module names (imports only errors; it loads the adapter
    # of a named library with importlib), which config's validation of env.id reads.
    # the model / lm sections of a language-model run
    "lm_config": LEAF,
    "config": LEAF, "errors": LEAF, "checkpoint": LEAF, "xla_flags": LEAF, "envs.registry": LEAF,
    # the run directory's lock and recorded config (a Hydra callback too)
    "rundir": LEAF,
    # per-backend implementation choices (config validates against them) and the progress bars
    "implementations": LEAF, "progress": LEAF,
}


def layer(module: str, layers: dict[str, int] = LAYERS) -> int:
    """A module's layer: ``layers``, and ENV for an adapter file of envs/ (adding a library is one file)."""
    if module not in layers and module.startswith("envs."):
        return ENV
    return layers[module]


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
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
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


def violations(graph: dict[str, set[str]], layers: dict[str, int]) -> list[str]:
    found = []
    for module, targets in sorted(graph.items()):
        if module == "__init__":
            continue
        for target in sorted(targets):
            if layer(target, layers) > layer(module, layers):
                found.append(f"{module} imports {target}, a layer above it")
            elif layer(target, layers) == layer(module, layers) == ALGORITHM:
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


def test_every_module_has_a_layer():
    unplaced = sorted(m for m in set(import_graph()) - set(LAYERS) - {"__init__"}
                      if not m.startswith("envs."))
    assert not unplaced, f"modules without a layer in tests/test_imports.py LAYERS: {unplaced}"


def test_imports_point_down_and_no_algorithm_imports_another():
    graph = import_graph()
    assert not violations(graph, LAYERS), "\n".join(violations(graph, LAYERS))


def test_the_env_layer_imports_no_algorithm_stage_or_runner():
    """envs/ (the protocol, the registry, the adapters) reaches only environments and leaves."""
    graph = import_graph()
    modules = [m for m in graph if m == "envs" or m.startswith("envs.")]
    assert {"envs", "envs.protocol", "envs.registry", "envs.gymnax", "envs.tokens"} <= set(modules)
    above = sorted(f"{m} imports {t}" for m in modules for t in graph[m] if layer(t) > ENV)
    assert not above, above


def test_an_adapter_file_needs_no_layers_line():
    assert layer("envs.navix") == ENV
    assert violations({"envs.navix": {"rollout"}, "rollout": set()}, LAYERS) == [
        "envs.navix imports rollout, a layer above it"]


def test_import_graph_is_acyclic():
    cycle = find_cycle(import_graph())
    assert cycle is None, " -> ".join(cycle)


@pytest.mark.parametrize("graph,expected", [
    ({"algos.ppo": {"algos.grpo"}, "algos.grpo": set()}, "algorithm algos.ppo imports algorithm algos.grpo"),
    ({"config": {"envs"}, "envs": set()}, "config imports envs, a layer above it"),
    ({"algos.grpo": {"sft"}, "sft": set()}, "algos.grpo imports sft, a layer above it"),
])
def test_checker_catches_bad_imports(graph, expected):
    assert expected in violations(graph, LAYERS)


def test_checker_finds_cycles_and_parses_both_import_forms():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    tree = ast.parse("from purejaxrl_opt import envs, losses\nimport purejaxrl_opt.algos.ppo\n"
                     "def f():\n    from purejaxrl_opt.algos.base import Loop\n")
    # the named module only, not the packages above it (`algos.base` is not the registry `algos`)
    assert imported_modules(tree, {"envs", "losses", "algos.ppo", "algos.base", "algos"}) == {
        "envs", "losses", "algos.ppo", "algos.base"}
