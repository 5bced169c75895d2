"""The language-model runs from the command line (``python -m purejaxrl_opt.train ... env=lm/<task>``,
``python -m purejaxrl_opt.sft env=lm/<task>``) on the tiny random model: PPO with a value model end to
end (held-out evaluation before and after, examples, the saved model, checkpoints and a bitwise
resume); the SFT warm start on a task's reference answers and GRPO started from exactly its weights,
logging to W&B offline with the samples table; bad keys of both refused before anything compiles."""

from __future__ import annotations

import csv
import json
import shutil

import numpy as np
import pytest

from purejaxrl_opt.formats import checkpoint
from tests.conftest import cli

pytest.importorskip("safetensors")

# prompts asking for a digit and the share of digits as the reward (tests/lm_fixtures.py), tiny model
SEVEN = ["env=lm/prompts", "env.params.generator=tests.lm_fixtures:digit_prompts",
         "env.params.rewards=[tests.lm_fixtures:digits]", "env.params.num_eval=4", "eval_episodes=4",
         "model.path=tiny", "model.tiny_hidden=32", "lm.max_new_tokens=4", "lm.eval_batch_size=4",
         "progress.mode=lines"]
PPO = ["algo=ppo", *SEVEN, "algo.num_prompts=2", "algo.group_size=4", "algo.update_epochs=2",
       "algo.num_minibatches=2", "algo.lr=0.01", "lm.num_updates=2", "checkpoint.every_updates=1"]


def rows_of(path):
    with open(path) as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def ppo_run(tmp_path_factory, cli_env):
    out = tmp_path_factory.mktemp("ppo") / "run"
    result = cli(PPO, f"hydra.run.dir={out}", env=cli_env)
    assert result.returncode == 0, result.stderr[-3000:]
    return out, result


def test_ppo_on_a_language_model_from_the_cli(ppo_run):
    out, result = ppo_run
    summary = json.loads((out / "summary.json").read_text())
    assert summary["algo"] == "ppo" and summary["config"]["algo"]["num_prompts"] == 2
    # the policy (full fine-tuning) and a value model of the same body: more than twice the LM's
    # params minus its head are trained
    assert summary["num_trained_params"] > 1.5 * summary["num_params"]
    for split in ("held_out_before", "held_out_after"):
        assert set(summary[split]) >= {"reward", "reward/digits", "completion_length"}
    rows = rows_of(out / "metrics.csv")
    assert [r["update"] for r in rows] == ["1", "2"]
    assert all(np.isfinite(float(r[k])) for r in rows for k in ("value_loss", "policy_loss", "kl_ref",
                                                                 "reward/digits"))
    # the value model starts at 0 (zero head) and has learnt from the first update's returns
    assert float(rows[0]["value_mean"]) == 0.0 and float(rows[1]["value_mean"]) != 0.0
    assert float(rows[0]["reward"]) > 0
    examples = [json.loads(line) for line in open(out / "examples.jsonl")]
    assert {e["split"] for e in examples} == {"train", "held_out"} and "digits" in examples[0]
    assert "[lm-ppo] update 2/2" in result.stdout
    from purejaxrl_opt.host.lm import load

    from purejaxrl_opt.host.lm.tiny import tiny_model
    import jax

    saved, start = load(out / "model"), tiny_model(2, 32, 0)
    assert saved.tokenizer.chat_template and saved.cfg == start.cfg
    # the trained policy, not the start (the value model is not part of the saved model)
    assert jax.tree_util.tree_structure(saved.params) == jax.tree_util.tree_structure(start.params)
    assert any(not np.array_equal(a, b) for a, b in zip(jax.tree_util.tree_leaves(saved.params),
                                                        jax.tree_util.tree_leaves(start.params)))
    assert checkpoint.tree_steps(out) == [1, 2]


@pytest.mark.slow  # GRPO's language-model resume is bitwise-checked in the fast tier (test_grpo_lm.py)
def test_a_resumed_ppo_run_is_bitwise_the_uninterrupted_run(ppo_run, tmp_path, cli_env):
    out, _ = ppo_run
    resumed = tmp_path / "resumed"
    shutil.copytree(out, resumed)
    shutil.rmtree(resumed / "checkpoints" / "2")
    result = cli(PPO, f"resume={resumed}", f"hydra.run.dir={tmp_path / 'unused'}", env=cli_env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "resumed" in result.stdout
    digests = [checkpoint.read_tree_manifest(d / "checkpoints" / "2")["digests"] for d in (out, resumed)]
    assert digests[0] == digests[1]
    assert rows_of(out / "metrics.csv")[1]["policy_loss"] == rows_of(resumed / "metrics.csv")[1]["policy_loss"]


@pytest.mark.parametrize("override, fragment", [
    ("algo.num_envs=8", "algo.num_envs' = 8 is invalid: must be left at its default 4"),
    ("algo.normalize_advantages=false", "algo.whiten_advantages"),
    ("algo.num_minibatches=3", "algo.num_minibatches' = 3"),
    ("algo.kl_coef=-1", "algo.kl_coef"),
])
def test_a_ppo_key_that_does_not_apply_is_refused_naming_it(override, fragment):
    from purejaxrl_opt.config.errors import ConfigError
    from purejaxrl_opt.host.lm import runner
    from tests.conftest import compose

    with pytest.raises(ConfigError) as error:
        runner.parse_settings(compose(PPO, override))
    assert fragment in str(error.value)


# --------------------------------------------------------------------------- SFT warm start, W&B
# arithmetic word problems (reference answers "<answer>N</answer>"), 32 training and 8 held-out
TASK = ["env=lm/arithmetic", "model.path=tiny", "model.tiny_hidden=32", "env.params.num_train=32",
        "env.params.num_eval=8", "eval_episodes=8", "lm.eval_batch_size=8", "lm.max_new_tokens=24"]
SFT = [*TASK, "sft.num_examples=32", "sft.batch_size=8", "sft.steps=40", "sft.lr=1e-2"]


@pytest.fixture(scope="module")
def sft_then_grpo(tmp_path_factory, cli_env):
    """An SFT run, then one GRPO update started from it (``init_from``) logging to W&B offline."""
    root = tmp_path_factory.mktemp("sft")
    result = cli(SFT, f"hydra.run.dir={root / 'sft'}", module="purejaxrl_opt.sft", env=cli_env)
    assert result.returncode == 0, result.stderr[-3000:]
    grpo = cli("algo=grpo", TASK, f"init_from={root / 'sft'}", "lm.num_updates=1", "algo.num_groups=2",
               "algo.group_size=4", "logger=wandb", f"hydra.run.dir={root / 'grpo'}", env=cli_env)
    assert grpo.returncode == 0, grpo.stderr[-3000:]
    return root / "sft", root / "grpo"


@pytest.mark.slow  # two CLI runs (SFT, then GRPO from it): ~27 s on 2 cores
def test_sft_changes_the_starting_policy_and_grpo_starts_from_exactly_its_weights(sft_then_grpo):
    sft_dir, grpo_dir = sft_then_grpo
    sft = json.loads((sft_dir / "summary.json").read_text())
    # the tiny random model never writes an answer tag; after SFT on "<answer>N</answer>" most do
    assert sft["held_out_before"]["reward/format"] == 0.0 and sft["held_out_after"]["reward/format"] >= 0.5
    assert float(rows_of(sft_dir / "metrics.csv")[-1]["loss"]) < float(rows_of(sft_dir / "metrics.csv")[0]["loss"])
    grpo = json.loads((grpo_dir / "summary.json").read_text())
    # bitwise the weights the SFT run trained (their digest before saving), through its model/
    assert grpo["start_params_digest"] == sft["params_digest"]
    from purejaxrl_opt.host.lm import load
    from purejaxrl_opt.host.lm.runner import params_digest

    assert params_digest(load(sft_dir / "model").params) == sft["params_digest"]
    # the same greedy held-out evaluation of the same weights
    before = {k: v for k, v in grpo["held_out_before"].items() if k != "update"}
    assert before == sft["held_out_after"]


@pytest.mark.slow  # two CLI runs (SFT, then GRPO from it): ~27 s on 2 cores
def test_the_samples_are_a_wandb_table_of_the_offline_run(sft_then_grpo):
    _, grpo_dir = sft_then_grpo
    (table_file,) = grpo_dir.glob("wandb/offline-run-*/files/media/table/samples_*.table.json")
    table = json.loads(table_file.read_text())
    examples = [json.loads(line) for line in open(grpo_dir / "examples.jsonl")]
    assert table["columns"] == ["split", "update", "prompt", "completion", "reward", "correct", "format"]
    assert len(table["data"]) == len(examples) == 16  # 8 training completions, 8 held-out
    for row, example in zip(table["data"], examples):
        assert dict(zip(table["columns"], row)) == {"update": None, **example}
    from tests.test_wandb import _update_rows_once_written

    (history,) = _update_rows_once_written(grpo_dir, 1)
    assert history["reward"] == float(rows_of(grpo_dir / "metrics.csv")[0]["reward"])


@pytest.mark.parametrize("overrides, fragment", [
    (["sft.eval_prompts=4"], "sft.eval_prompts' = 4 is invalid: must be left at its default 512 on a "
                             "language-model SFT (use eval_episodes)"),
    (["lm.num_updates=3"], "lm.num_updates' = 3 is invalid: must be left at its default 10"),
    (["checkpoint.final=true"], "config key 'checkpoint' = {'final': True} is invalid"),
    (["+bogus=1"], "unknown config key 'bogus'"),
])
def test_bad_sft_keys_are_refused_naming_them(overrides, fragment):
    from purejaxrl_opt.config.errors import ConfigError
    from purejaxrl_opt.host.lm import sft
    from tests.conftest import compose

    with pytest.raises(ConfigError) as error:
        sft.parse_settings(compose(SFT, overrides, config_name="sft"))
    assert fragment in str(error.value)


@pytest.mark.slow  # two CLI runs (SFT, then GRPO from it): ~27 s on 2 cores
def test_init_from_must_be_a_language_model_sft_run(sft_then_grpo, tmp_path):
    from purejaxrl_opt.config.errors import ConfigError
    from purejaxrl_opt.host.lm import runner
    from tests.conftest import compose

    sft_dir, _ = sft_then_grpo
    with pytest.raises(ConfigError, match="init_from' = .* not the run dir of a language-model SFT"):
        runner.parse_settings(compose("algo=grpo", TASK, f"init_from={tmp_path}"))
    with pytest.raises(ConfigError, match=r"model.path' = 'other.gguf' is invalid: must be null or 'tiny'"):
        runner.parse_settings(compose("algo=grpo", TASK, f"init_from={sft_dir}", "model.path=other.gguf"))
