"""The benchmark suite runner: the smoke suite end to end through the CLI (files, statistics columns,
the CLI's own composition, reuse of finished entries), the shipped suites' validity, and bad input."""

from __future__ import annotations

import csv
import functools
import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from omegaconf import OmegaConf
from scipy import stats as sps

from purejaxrl_opt import benchmark
from purejaxrl_opt.host import suites
from purejaxrl_opt.host import stats
from purejaxrl_opt.config.schema import ConfigError
from tests.conftest import cli

ROOT = Path(__file__).resolve().parents[1]
bench_cli = functools.partial(cli, module="purejaxrl_opt.benchmark", timeout=600)


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "smoke"
    proc = bench_cli("suite=smoke", f"hydra.run.dir={out}", "bootstrap.reps=2000", "bootstrap.curve_reps=200")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, proc


# a suite invocation through the CLI (two compiles, the bootstrap); the statistics and the suites'
# validity are checked in the fast tier below
@pytest.mark.slow
def test_smoke_suite_writes_every_artifact(smoke_run):
    out, _ = smoke_run
    for name in ("table.md", "table.csv", "results.json", "learning_curves.png",
                 "probability_of_improvement.png"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    for entry in ("ppo_CartPole-v1", "trpo_CartPole-v1"):
        for name in ("summary.json", "metrics.csv", "config.yaml"):
            assert (out / entry / name).is_file(), (entry, name)
    assert not (out / "ppo_CartPole-v1" / "checkpoints").exists()  # checkpoint.final=false


@pytest.mark.slow  # the smoke suite's invocation
def test_smoke_table_statistics_are_those_of_the_per_seed_final_returns(smoke_run):
    out, _ = smoke_run
    rows = list(csv.DictReader((out / "table.csv").open()))
    assert [r["entry"] for r in rows] == ["ppo_CartPole-v1", "trpo_CartPole-v1"]
    for column in suites.TABLE_COLUMNS:
        assert column in rows[0], column
    for row in rows:
        summary = json.loads((out / row["entry"] / "summary.json").read_text())
        returns = np.asarray(summary["final_return_per_seed"])
        assert summary["seeds"] == [1000, 1001, 1002, 1003] and row["seeds"] == "1000-1003"
        assert float(row["iqm"]) == pytest.approx(sps.trim_mean(returns, 0.25))
        assert float(row["mean"]) == pytest.approx(returns.mean())
        assert float(row["median"]) == pytest.approx(np.median(returns))
        for name in ("iqm", "mean", "median"):
            low, mid, high = (float(row[f"{name}_ci_low"]), float(row[name]), float(row[f"{name}_ci_high"]))
            assert returns.min() <= low <= mid <= high <= returns.max(), (name, low, mid, high)
        assert float(row["compile_s"]) == pytest.approx(summary["compile_seconds"])
        assert float(row["env_steps_per_s"]) == pytest.approx(summary["env_steps_per_second"])
        assert row["machine"] and "jax 0.9.2" in row["machine"]
    assert rows[0]["reference"] == "500" and "rl-baselines3-zoo" in rows[0]["reference_source"]
    assert rows[1]["reference"] == ""  # no citable number -> empty, not invented
    results = json.loads((out / "results.json").read_text())
    ppo, trpo = (np.asarray(e["final_returns"]) for e in results["entries"])
    (pair,) = results["probability_of_improvement"]
    assert (pair["x"], pair["y"], pair["envs"]) == ("ppo_CartPole-v1", "trpo_CartPole-v1", ["CartPole-v1"])
    assert pair["p"] == pytest.approx(stats.probability_of_improvement(ppo, trpo))
    assert pair["ci_low"] <= pair["p"] <= pair["ci_high"]
    curve = results["entries"][0]["curve"]
    assert len(curve["env_steps"]) == len(curve["iqm"]) > 1 and curve["env_steps"][-1] == 4096
    table = (out / "table.md").read_text()
    assert "| ppo_CartPole-v1 | ppo | CartPole-v1 | 4,096 | 4 (1000-1003) |" in table
    assert "Probability of improvement" in table and "jax 0.9.2" in table


@pytest.mark.slow  # the smoke suite's invocation
def test_smoke_entries_run_the_configuration_the_training_cli_composes(smoke_run):
    """The entry's config is the one ``python -m purejaxrl_opt.train`` composes from the same
    overrides -- including conf/tuned/trpo_CartPole-v1.yaml (anneal_max_kl) and the suite's seeds."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    out, _ = smoke_run
    saved = yaml.safe_load((out / "trpo_CartPole-v1" / "config.yaml").read_text())
    overrides = ["checkpoint.final=false", "algo.num_envs=4", "algo.num_steps=64",
                 "network.hidden_sizes=[16]", "eval_episodes=2", "progress.mode=off", "logger=none",
                 "algo=trpo", "env=CartPole-v1", "total_timesteps=4096", "num_seeds=4", "seed=1000"]
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        expected = OmegaConf.to_container(compose(config_name="config", overrides=overrides), resolve=True)
    assert saved == expected
    assert saved["algo"]["anneal_max_kl"] is True and saved["seed"] == 1000


@pytest.mark.slow  # a second suite invocation
def test_rerun_reads_finished_entries_back_with_the_same_numbers(smoke_run):
    out, _ = smoke_run
    before = (out / "table.csv").read_text()
    proc = bench_cli("suite=smoke", f"hydra.run.dir={out}", "bootstrap.reps=2000", "bootstrap.curve_reps=200",
                     timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("read back") == 2 and "compiled in" not in proc.stdout
    assert (out / "table.csv").read_text() == before  # seeded bootstrap: the same table


def test_shipped_suites_compose_and_validate_without_training():
    for name in ("quick", "full", "smoke"):
        suite = suites.load_suite(name)
        for entry in suite.entries:
            suites.check_entry(entry, suites.compose_entry(entry))
    quick = suites.load_suite("quick")
    assert {e.algo for e in quick.entries} == {"ppo", "trpo", "grpo"}
    assert all(e.num_seeds == 16 and e.seed == 2000 for e in quick.entries)  # a report range (SEEDS.md)
    for entry in quick.entries:
        for ref in entry.references:
            assert ref.source.startswith("https://") and ref.what
    text = suites.dry_run_text(quick)
    assert "grpo_CartPole-v1" in text and "96,000,000" in text


def write_suite(tmp_path, body: dict) -> str:
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(body))
    return str(path)


GOOD = {"algo": "ppo", "env": "CartPole-v1", "total_timesteps": 1000}


@pytest.mark.parametrize("body, fragment", [
    ({"entries": [{**GOOD, "algo": "dqn"}]}, "'entries[0].algo' = 'dqn' is invalid: must be one of"),
    ({"entries": [{**GOOD, "env": "Nope-v0"}]}, "'entries[0].env' = 'Nope-v0'"),
    ({"entries": [{**GOOD, "budget": 3}]}, "'entries[0].budget' is unknown"),
    ({"entries": [GOOD, GOOD]}, "two entries are named 'ppo_CartPole-v1'"),
    ({"entries": [{**GOOD, "overrides": ["seed=3"]}]}, "sets 'seed': set the entry's own 'seed'"),
    ({"entries": [{**GOOD, "total_timesteps": 0}]}, "'entries[0].total_timesteps' = 0"),
    ({"entries": [{**GOOD, "reference": {"value": 1.0}}]}, "'entries[0].reference'"),
    ({"entries": [{**GOOD, "reference": {"value": "high", "source": "x"}}]}, "reference.value"),
    ({"entries": []}, "'entries'"),
    ({"entries": [GOOD], "tier": 1}, "suite key 'tier' is unknown"),
])
def test_bad_suite_files_are_refused_naming_the_key(tmp_path, body, fragment):
    with pytest.raises(ConfigError) as info:
        suites.load_suite(write_suite(tmp_path, body))
    assert fragment in str(info.value), str(info.value)


def test_bad_entry_config_fails_before_anything_trains(tmp_path):
    path = write_suite(tmp_path, {"entries": [GOOD, {**GOOD, "name": "bad", "overrides": ["algo.num_minibatches=3"]}]})
    suite = suites.load_suite(path)
    with pytest.raises(ConfigError, match="num_minibatches"):
        suites.run_suite(suite, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_only_selects_entries_and_names_unknown_ones():
    assert [e.name for e in suites.load_suite("quick", only=["ppo_Pendulum-v1"]).entries] == ["ppo_Pendulum-v1"]
    with pytest.raises(ConfigError, match="'only' names \\['sac_Pendulum'\\]"):
        suites.load_suite("quick", only=["sac_Pendulum"])


def test_cli_bad_input_exits_2_with_the_allowed_values(tmp_path):
    proc = bench_cli("suite=nope", "dry_run=true", f"hydra.run.dir={tmp_path}", timeout=120)
    assert proc.returncode == 2
    assert "'suite' = 'nope' is invalid" in proc.stderr and "quick" in proc.stderr


@pytest.mark.parametrize("override", ["total_timesteps=1000", "num_seeds=2", "seed=5", "+env=Acrobot-v1"])
def test_train_overrides_that_the_entries_set_themselves_are_refused(override):
    # the entry's own algo/env/budget/seeds come after the overrides: a budget here would be ignored
    cfg = OmegaConf.create({"suite": "quick", "dry_run": True, "reuse": False, "only": None,
                            "num_seeds": None, "seed": None, "train_overrides": [override]})
    key = override.split("=")[0].lstrip("+")
    with pytest.raises(ConfigError, match=f"'train_overrides' sets '{key}'"):
        benchmark._settings(cfg)


def test_improvement_pairs_per_env_and_aggregated_over_shared_envs():
    rng = np.random.default_rng(0)

    def entry(algo, env, n, shift):
        return {"name": f"{algo}_{env}", "algo": algo, "env": env,
                "final_returns": (rng.normal(size=n) + shift).tolist()}

    results = [entry("ppo", "A", 8, 1.0), entry("trpo", "A", 8, 0.0), entry("ppo", "B", 6, 0.0),
               entry("trpo", "B", 5, 0.0), entry("grpo", "B", 4, 0.0), {"name": "failed", "algo": "grpo",
                                                                        "env": "A", "error": "x"}]
    pairs = suites.improvement_pairs(results, reps=500, level=0.95, seed=0)
    names = [(p["x"], p["y"]) for p in pairs]
    assert names == [("ppo_A", "trpo_A"), ("ppo_B", "trpo_B"), ("ppo_B", "grpo_B"), ("trpo_B", "grpo_B"),
                     ("ppo", "trpo")]  # grpo is on one env only: no aggregate with it
    per_env = [p["p"] for p in pairs[:2]]
    aggregate = pairs[-1]
    assert aggregate["envs"] == ["A", "B"] and aggregate["p"] == pytest.approx(np.mean(per_env))
    assert aggregate["ci_low"] <= aggregate["p"] <= aggregate["ci_high"]


def test_a_pairs_ci_does_not_depend_on_the_other_entries_of_the_run():
    """Bootstrap seeds follow the entries' names: a pair's CI is the same whether or not other
    entries (before it in suite order) share the invocation, as with only=[...]."""
    rng = np.random.default_rng(1)
    ppo_b, trpo_b = ({"name": f"{a}_B", "algo": a, "env": "B", "final_returns": rng.normal(size=8).tolist()}
                     for a in ("ppo", "trpo"))
    ppo_a, trpo_a = ({"name": f"{a}_A", "algo": a, "env": "A", "final_returns": rng.normal(size=8).tolist()}
                     for a in ("ppo", "trpo"))
    alone = suites.improvement_pairs([ppo_b, trpo_b], reps=300, level=0.95, seed=0)
    together = suites.improvement_pairs([ppo_a, trpo_a, ppo_b, trpo_b], reps=300, level=0.95, seed=0)
    pair = [p for p in together if (p["x"], p["y"]) == ("ppo_B", "trpo_B")]
    assert len(alone) == 1 and len(pair) == 1
    assert (alone[0]["ci_low"], alone[0]["ci_high"]) == (pair[0]["ci_low"], pair[0]["ci_high"])
    assert suites.name_seed(0, "ppo_B") != suites.name_seed(0, "trpo_B")


def test_learning_curve_carries_returns_over_updates_without_episodes():
    # 4 seeds x 10 updates; seed 3 finishes no episode until update 3, all seeds miss update 5
    ys = np.tile(np.arange(10, dtype=float), (4, 1))
    ys[3, :3] = np.nan
    ys[:, 5] = np.nan
    metrics = {"env_steps": np.tile(np.arange(1, 11) * 100.0, (4, 1)), "return_mean": ys}
    curve = suites.learning_curve(metrics, reps=200, level=0.95, seed=0)
    assert curve["env_steps"][0] == 400.0  # the first point where every seed has a return
    assert curve["iqm"] == [3.0, 4.0, 4.0, 6.0, 7.0, 8.0, 9.0]  # update 5 carries update 4's return
    assert suites.learning_curve({"env_steps": metrics["env_steps"]}, 200, 0.95, 0) is None
