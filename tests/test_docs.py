"""The manual and README cannot drift: the site builds strictly, every command they show still
composes and validates, and every results file they cite exists and says where it came from.

* ``mkdocs build --strict`` (docs/, mkdocs.yml) into a temporary directory: a broken link, a missing
  page in the nav or an API reference to a name that no longer exists fails the build;
* every shell command shown in README.md and docs/*.md — fenced ``bash`` blocks and inline code spans
  that start with ``python -m purejaxrl_opt.`` or ``python experiments/`` — is parsed as a shell would,
  and its configuration is composed with Hydra's compose API on conf/ (multirun sweeps expanded into
  their jobs, a search range ``interval(a, b)`` into its two ends) and validated with the project's own checks (``config.parse_settings`` and
  ``sweep.plan_from_config`` for training, as ``train.run_from_config`` does before compiling;
  ``sft.config_from_hydra`` for SFT; ``generate.config_from_hydra`` for generation; the benchmark's dry run for suites; the CLI's argument parser for
  ``evaluate`` and ``report``; the script's own flags for ``experiments/*.py``). Nothing is compiled or
  trained, so a renamed or removed key fails CI within seconds;
* experiments/provenance.py's citation check over README.md and docs/*.md.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# --------------------------------------------------------------------------- commands in the docs
_FENCE = re.compile(r"^ {0,3}```([A-Za-z]*)[^\n]*\n(.*?)^ {0,3}```[ \t]*$", re.M | re.S)
_INLINE = re.compile(r"`([^`\n]+)`")
SHELL_LANGS = {"bash", "sh", "shell", "console"}
ENTRY_POINTS = ("train", "sft", "evaluate", "report", "benchmark", "generate")


@dataclass(frozen=True)
class Command:
    where: str  # document:line
    argv: tuple[str, ...]  # from "python" on, comments and placeholders ("...") dropped

    @property
    def target(self) -> str:
        """``train`` / ``sft`` / ... for ``python -m purejaxrl_opt.X``, else the script path."""
        if self.argv[1] == "-m":
            return self.argv[2].split(".", 1)[1]
        return self.argv[1]

    @property
    def args(self) -> list[str]:
        return list(self.argv[3:] if self.argv[1] == "-m" else self.argv[2:])


def _split(line: str) -> list[list[str]]:
    """The simple commands of one shell line (``a && b; c``), each as argv, comments dropped."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    lexer.commenters = ""
    commands, current = [], []
    for token in lexer:
        if token.startswith("#"):
            break
        if set(token) <= set(";&|"):
            commands.append(current)
            current = []
        else:
            current.append(token)
    commands.append(current)
    return [c for c in commands if c]


def _ours(argv: list[str]) -> bool:
    if len(argv) < 2 or argv[0] != "python":
        return False
    if argv[1] == "-m":
        return len(argv) > 2 and argv[2].startswith("purejaxrl_opt.")
    return argv[1].startswith("experiments/")


def commands_in(text: str, name: str) -> list[Command]:
    """Every command of this project shown in a Markdown text: fenced shell blocks (continuation
    lines joined, ``$ `` prompts dropped) and inline code spans outside fences."""
    found: list[Command] = []

    def add(line: str, lineno: int) -> None:
        line = line.strip()
        if line.startswith("$ "):
            line = line[2:]
        if "python" not in line:
            return
        for argv in _split(line):
            argv = [a for a in argv if a != "..."]
            if _ours(argv):
                found.append(Command(f"{name}:{lineno}", tuple(argv)))

    for match in _FENCE.finditer(text):
        if match.group(1).lower() not in SHELL_LANGS:
            continue
        start = text.count("\n", 0, match.start(2)) + 1
        pending, first = "", start
        for offset, line in enumerate(match.group(2).split("\n")):
            if not pending:
                first = start + offset
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            add(pending + line, first)
            pending = ""
    outside = _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    for match in _INLINE.finditer(outside):
        span = match.group(1)
        if span.startswith(("python -m purejaxrl_opt.", "python experiments/")):
            add(span, outside.count("\n", 0, match.start()) + 1)
    return found


def all_commands() -> list[Command]:
    return [c for doc in DOCUMENTS for c in commands_in(doc.read_text(), str(doc.relative_to(ROOT)))]


# --------------------------------------------------------------------------- validation
def _jobs(overrides: list[str], multirun: bool) -> list[list[str]]:
    """The override lists of the jobs a command runs: one, or Hydra's basic sweeper's expansion."""
    if not multirun:
        return [overrides]
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from hydra.core.override_parser.types import IntervalSweep

    parser = OverridesParser.create()
    parsed = parser.parse_overrides(overrides)
    # a search range (interval(a, b), a search sweeper's syntax) becomes its two ends: the basic
    # sweeper cannot expand it, and each end must compose and validate
    ranged = []
    for override, text in zip(parsed, overrides):
        value = override.value() if override.is_sweep_override() else None
        if isinstance(value, IntervalSweep):
            key = text.split("=", 1)[0]
            ranged.append(parser.parse_override(f"{key}={value.start!r},{value.end!r}"))
        else:
            ranged.append(override)
    return [job for batch in BasicSweeper.split_arguments(ranged, None) for job in batch]


@contextlib.contextmanager
def _hydra():
    """Hydra's compose API on conf/ (reused when already initialised, as suites.compose_entry does)."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        yield
        return
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        yield


def _compose(config_name: str, overrides: list[str]):
    """Compose as the CLI does; with overrides of the hydra section (a launcher and its keys) that
    section is composed too, so they must exist, and then dropped."""
    from hydra import compose
    from omegaconf import open_dict

    with_hydra = any(o.lstrip("+~").startswith("hydra") for o in overrides)
    with _hydra():
        cfg = compose(config_name=config_name, overrides=overrides, return_hydra_config=with_hydra)
    if with_hydra:
        with open_dict(cfg):
            del cfg["hydra"]
    return cfg


def _validate_train(overrides: list[str]) -> None:
    from omegaconf import open_dict

    from purejaxrl_opt.host import sweep
    from purejaxrl_opt.host.settings import parse_settings

    cfg = _compose("config", overrides)
    if cfg.get("resume") is not None:
        # RUN_DIR is a placeholder: the key composes and names a string; checkpoint.check_resume_dir
        # (which needs a real run dir) is left out
        assert isinstance(cfg.resume, str)
        assert cfg.get("resume_step") is None or isinstance(cfg.resume_step, int)
        with open_dict(cfg):
            cfg.resume = None
            cfg.resume_step = None
    from purejaxrl_opt.host.lm import runner as lm_runner

    if lm_runner.is_lm_run(cfg):  # env=lm/<task>: the language-model run's own checks
        if cfg.get("init_from") == "RUN_DIR":  # a placeholder of an SFT run dir, as resume's above
            with open_dict(cfg):
                cfg.init_from = None
        lm_runner.parse_settings(cfg)
        return
    settings = parse_settings(cfg)
    sweep.plan_from_config(settings.sweep, settings.run)


def _validate_sft(overrides: list[str]) -> None:
    from purejaxrl_opt import sft

    cfg = _compose("sft", overrides)
    if sft.is_lm_task(cfg):  # env=lm/<task>: the language-model SFT's own checks
        from purejaxrl_opt.host.lm import sft as lm_sft

        lm_sft.parse_settings(cfg)
        return
    env_cfg, net, sft_cfg, _ = sft.config_from_hydra(cfg)
    sft_cfg.validate()
    env_cfg.validate("env")
    net.validate("network")


def _validate_benchmark(overrides: list[str], checked: set) -> None:
    from purejaxrl_opt import benchmark
    from purejaxrl_opt.host import suites

    s = benchmark._settings(_compose("benchmark", overrides))
    suite = suites.load_suite(s["suite"], s["num_seeds"], s["seed"], s["only"])
    with _hydra():
        for entry in suite.entries:  # what dry_run=true checks (each entry once per test run)
            if entry.peer is not None:  # another code's run: no config of ours
                continue
            key = tuple(entry.train_overrides(list(s["train_overrides"])))
            if key not in checked:
                suites.check_entry(entry, suites.compose_entry(entry, s["train_overrides"]))
                checked.add(key)


def _validate_cli(main, args: list[str], tmp_dir: Path) -> None:
    """The CLI's own argument parser accepts ``args``; its positional run dir becomes an empty
    directory, so the command stops right after parsing (no checkpoint there) and runs nothing."""
    args = [str(tmp_dir) if i == 0 else a for i, a in enumerate(args)]
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        try:
            main(args)
        except SystemExit as exit_:  # argparse: unknown flag or bad value
            raise AssertionError(f"arguments {args[1:]} refused: {stderr.getvalue().strip()}") from None
        except FileNotFoundError:  # report: no runs under the empty directory
            pass


def _validate_script(command: Command) -> None:
    script = ROOT / command.target
    assert script.is_file(), f"{command.target} does not exist"
    source = script.read_text()
    for arg in command.args:
        if arg.startswith("--"):
            flag = arg.split("=", 1)[0]
            assert f'"{flag}"' in source or f"'{flag}'" in source, (
                f"{command.target} has no option {flag}")


# Hydra's own flags that print the composed config instead of running (--cfg job --resolve)
_HYDRA_FLAGS_WITH_VALUE = ("--cfg", "-c", "--package", "-p")
_HYDRA_FLAGS = ("--resolve",)


def _without_hydra_flags(args: list[str]) -> list[str]:
    """The overrides of ``args``, without Hydra's printing flags (and their values)."""
    kept, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in _HYDRA_FLAGS_WITH_VALUE:
            skip = True
        elif arg not in _HYDRA_FLAGS:
            kept.append(arg)
    return kept


def validate(command: Command, tmp_dir: Path, checked: set | None = None) -> None:
    """Raise (ConfigError, a Hydra error, AssertionError) where ``command`` would not start.
    ``checked``: benchmark entries already validated (shared by the suites of several commands)."""
    checked = set() if checked is None else checked
    if not command.argv[1] == "-m":
        return _validate_script(command)
    target, args = command.target, command.args
    multirun = any(a in ("-m", "--multirun") for a in args)
    overrides = _without_hydra_flags([a for a in args if a not in ("-m", "--multirun")])
    if target == "train":
        for job in _jobs(overrides, multirun):
            _validate_train(job)
    elif target == "sft":
        for job in _jobs(overrides, multirun):
            _validate_sft(job)
    elif target == "benchmark":
        for job in _jobs(overrides, multirun):
            _validate_benchmark(job, checked)
    elif target == "generate":
        from purejaxrl_opt import generate

        for job in _jobs(overrides, multirun):
            generate.config_from_hydra(_compose("generate", job))
    elif target == "evaluate":
        from purejaxrl_opt import evaluate

        _validate_cli(evaluate.main, args, tmp_dir)
    elif target == "report":
        from purejaxrl_opt import report

        _validate_cli(report.main, args, tmp_dir)
    else:
        raise AssertionError(f"python -m purejaxrl_opt.{target}: not an entry point of the project "
                             f"({list(ENTRY_POINTS)})")


# --------------------------------------------------------------------------- tests
def test_the_extractor_reads_fences_continuations_inline_spans_and_multirun():
    text = """
Run `python -m purejaxrl_opt.report multirun/DATE/TIME` or `pip install x`.

```bash
python3 -m venv .venv && . .venv/bin/activate && pip install -e . && python -m purejaxrl_opt.train
python -m purejaxrl_opt.train -m algo=ppo,trpo seed=0,1 ...   # a comment with algo=bad
python experiments/compare_tokens.py --env Multiply-v0 \\
    --seeds 4
$ python -m purejaxrl_opt.train sweep.vmap='{algo.lr: [1e-4, 3e-4]}'
```

```text
python -m purejaxrl_opt.train algo.not_shown=1
```
"""
    found = commands_in(text, "x.md")
    assert [c.argv for c in found] == [
        ("python", "-m", "purejaxrl_opt.train"),
        ("python", "-m", "purejaxrl_opt.train", "-m", "algo=ppo,trpo", "seed=0,1"),
        ("python", "experiments/compare_tokens.py", "--env", "Multiply-v0", "--seeds", "4"),
        ("python", "-m", "purejaxrl_opt.train", "sweep.vmap={algo.lr: [1e-4, 3e-4]}"),
        ("python", "-m", "purejaxrl_opt.report", "multirun/DATE/TIME"),
    ]
    assert [c.where for c in found] == ["x.md:5", "x.md:6", "x.md:7", "x.md:9", "x.md:2"]
    assert _jobs(list(found[1].args[1:]), multirun=True) == [
        ["algo=ppo", "seed=0"], ["algo=ppo", "seed=1"], ["algo=trpo", "seed=0"], ["algo=trpo", "seed=1"]]
    # a search sweeper's range: both ends are composed
    assert _jobs(["algo.lr=interval(1e-4, 1e-3)", "seed=0"], multirun=True) == [
        ["algo.lr=0.0001", "seed=0"], ["algo.lr=0.001", "seed=0"]]


@pytest.fixture
def fresh_hydra():
    """No Hydra state left by another test: every compose here is on conf/."""
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    yield
    GlobalHydra.instance().clear()


def test_a_renamed_key_or_flag_in_a_shown_command_fails(tmp_path, fresh_hydra):
    from hydra.errors import HydraException

    from purejaxrl_opt.config.schema import ConfigError

    bad = {
        "python -m purejaxrl_opt.train algo.clip_epsilon=0.1": HydraException,  # no such key
        "python -m purejaxrl_opt.train +algo.clip_epsilon=0.1": ConfigError,  # added, then refused
        "python -m purejaxrl_opt.train algo=trpo algo.critic_minibatches=3": ConfigError,  # bad value
        "python -m purejaxrl_opt.train -m algo=ppo,trpo algo.clip_eps=0.1": HydraException,  # trpo's job
        "python -m purejaxrl_opt.train sweep.vmap='{algo.num_envs: [4, 8]}'": ConfigError,  # a shape
        "python -m purejaxrl_opt.train -m 'algo.clip_eps=interval(-0.1, 0.2)'": ConfigError,  # one end
        "python -m purejaxrl_opt.train -m hydra/launcher=parallel hydra.launcher.jobs=2": HydraException,
        "python -m purejaxrl_opt.sft sft.step=10": HydraException,
        "python -m purejaxrl_opt.benchmark suite=quick only=[ppo_CartPole]": ConfigError,
        "python -m purejaxrl_opt.evaluate RUN_DIR --rounds 3": AssertionError,
        "python experiments/compare_tokens.py --num-seeds 4": AssertionError,
    }
    for line, error in bad.items():
        (command,) = commands_in(f"```bash\n{line}\n```\n", "bad.md")
        with pytest.raises(error):
            validate(command, tmp_path)


def test_every_command_in_readme_and_docs_composes_and_validates(tmp_path, fresh_hydra):
    commands = all_commands()
    targets = {c.target for c in commands}
    # the extractor finds the commands (a regression in it would pass vacuously otherwise)
    assert len(commands) >= 60, len(commands)
    assert set(ENTRY_POINTS) <= targets, targets
    assert any(t.startswith("experiments/") for t in targets)
    assert any(c.argv[:3] == ("python", "-m", "purejaxrl_opt.train") and len(c.argv) == 3
               for c in commands if c.where.startswith("README.md"))  # the set-up command
    failures, checked, start = [], set(), time.perf_counter()
    unique = {c.argv: c for c in reversed(commands)}  # a command shown twice is checked once
    with _hydra():
        for command in reversed(unique.values()):
            try:
                validate(command, tmp_path, checked)
            except Exception as error:  # noqa: BLE001 - every failure is reported at once
                failures.append(f"{command.where}: {shlex.join(command.argv)}\n    "
                                f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}")
    assert not failures, "commands shown in the docs that would not start:\n" + "\n".join(failures)
    print(f"{len(unique)} distinct commands ({len(commands)} shown) validated in "
          f"{time.perf_counter() - start:.1f} s")


def test_mkdocs_build_strict(tmp_path):
    """The manual builds with every warning an error (links, nav, the API's references); the API
    page is rendered from the docstrings by static analysis, without importing the package."""
    site = tmp_path / "site"
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                            cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    seconds = time.perf_counter() - start
    assert result.returncode == 0, result.stdout + result.stderr
    for page in ("index.html", "getting-started/index.html", "algorithms/index.html",
                 "environments/index.html", "sweeps/index.html", "results/index.html",
                 "extending/index.html", "api/index.html"):
        assert (site / page).is_file(), page
    api = (site / "api" / "index.html").read_text()
    for name in ("GRPOConfig", "make_train", "trust_region_step", "k3_kl", "split_id"):
        assert name in api, name  # rendered from the docstrings
    print(f"mkdocs build --strict: {seconds:.1f} s")


def _provenance():
    spec = importlib.util.spec_from_file_location("provenance", ROOT / "experiments" / "provenance.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_results_file_readme_and_docs_cite_exists_and_names_its_commit_and_command():
    provenance = _provenance()
    assert [p.name for p in provenance.documents()][:2] == ["README.md", "algorithms.md"]
    assert len(provenance.cited_paths()) >= 10  # the parser finds the citations
    assert len(provenance.cited_paths(ROOT / "README.md")) >= 2  # README's headline table cites too
    assert provenance.problems() == []


def test_provenance_check_catches_a_missing_file_and_an_unstamped_one(tmp_path):
    provenance = _provenance()
    readme = tmp_path / "README.md"
    readme.write_text("see `experiments/results/no_such_file.md` and `experiments/results/decode.{json,md}`\n"
                      "```bash\npython x.py --out experiments/results/not_a_citation\n```\n")
    assert provenance.cited_paths(readme) == ["no_such_file.md", "decode.json", "decode.md"]
    page = tmp_path / "page.md"
    page.write_text("`experiments/results/also_missing.json`")
    found = provenance.problems([readme, page])
    assert any(p.startswith("no_such_file.md: cited by README.md but missing") for p in found)
    assert any(p.startswith("decode.md: cited by README.md but missing") for p in found)
    assert any(p.startswith("also_missing.json: cited by page.md but missing") for p in found)
    assert not any(p.startswith("decode.json") for p in found)  # in PROVENANCE.json
