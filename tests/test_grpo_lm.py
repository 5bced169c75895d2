"""GRPO on a language model (purejaxrl_opt/core/algos/grpo_lm.py, lm/runner.py) on tiny random models: the
loss against a hand computation over an independent scorer, exact micro-batch accumulation, LoRA
touching only its adapters, the "always answer 7" reward rising, bitwise resume, reward-function
errors mid-run, and config errors before anything compiles."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxrl_opt.formats import checkpoint
from purejaxrl_opt.core.algos import grpo_lm
from purejaxrl_opt.config.schema import hyperparameters
from purejaxrl_opt.core.algos.grpo import GRPOConfig
from purejaxrl_opt.config.errors import ConfigError
from purejaxrl_opt.host.lm import rewards, runner
from purejaxrl_opt.host.lm.tiny import tiny_model
from purejaxrl_opt.config.lm import LMTrainConfig, ModelConfig
from purejaxrl_opt.core.models import sampling
from tests.conftest import compose

P, T = 6, 4  # prompt and completion lengths of the hand-made batch


@pytest.fixture(scope="module")
def model():
    return tiny_model(num_layers=2, hidden=32, seed=1)


def make_grpo(model, algo: GRPOConfig, micro: int = 0, lora_rank: int = 0, targets=("q", "v")):
    lm = LMTrainConfig(max_new_tokens=T, micro_batch_size=micro)
    config = ModelConfig(path="tiny", lora_rank=lora_rank, lora_targets=targets)
    return grpo_lm.LMGRPO(algo, lm, config, model.cfg, model.sampling_config(T, 1.0), P, 10)


def hand_batch(model):
    """Two groups of two completions with hand-chosen lengths (3, 1 | 4, 2) and rewards."""
    rng = np.random.default_rng(0)
    prompts = rng.integers(3, 100, (2, P)).astype(np.int32)
    prompt_mask = np.ones((2, P), np.int32)
    prompt_mask[1, :2] = 0  # left padding
    completions = rng.integers(3, 100, (4, T)).astype(np.int32)
    lengths = np.array([3, 1, 4, 2], np.int32)
    completions[np.arange(T)[None] >= lengths[:, None]] = model.tokenizer.pad_id
    return grpo_lm.Batch(prompts, prompt_mask, completions, lengths, np.array([1.0, 0.0, 0.2, 0.6], np.float32))


def test_loss_matches_a_hand_computation_for_every_reduction(model):
    batch = hand_batch(model)
    tokens, attention, completion_mask = (np.asarray(x) for x in make_grpo(model, GRPOConfig(num_groups=2, group_size=2)).sequences(batch))
    # an independent path to the policy's log-probs: the teacher-forced scorer of models/sampling.py
    full_mask = np.concatenate([np.zeros((4, P), np.int32), completion_mask.astype(np.int32)], axis=1)
    log_prob = np.asarray(sampling.score(model.params, model.cfg, tokens, attention, full_mask))[:, P:]
    rng = np.random.default_rng(1)
    old = log_prob + rng.normal(0, 0.3, log_prob.shape)
    ref = log_prob + rng.normal(0, 0.3, log_prob.shape)
    advantages = np.array([1.0, -1.0, -1.0, 1.0])  # z-scores of (1, 0) and (0.2, 0.6) in their groups
    mask = completion_mask
    for loss_norm in ("sequence", "token", "constant"):
        algo = GRPOConfig(num_groups=2, group_size=2, loss_norm=loss_norm, beta=0.1, epsilon=0.2,
                          update_epochs=2, num_minibatches=1)
        hparams = hyperparameters(algo)
        ratio = np.exp(log_prob - old)
        surrogate = np.minimum(ratio * advantages[:, None], np.clip(ratio, 0.8, 1.2) * advantages[:, None])
        k3 = np.exp(ref - log_prob) - (ref - log_prob) - 1
        per_token = np.where(mask, surrogate - 0.1 * k3, 0.0)
        expected = -{"sequence": np.mean(per_token.sum(1) / mask.sum(1)),
                     "token": per_token.sum() / mask.sum(),
                     "constant": per_token.sum() / (4 * T)}[loss_norm]
        data = {"tokens": tokens, "attention": attention, "completions": batch.completions,
                "advantages": np.broadcast_to(advantages[:, None], mask.shape).astype(np.float32),
                "mask": mask, "log_prob_old": old.astype(np.float32), "log_prob_ref": ref.astype(np.float32)}
        np.testing.assert_allclose(np.asarray(grpo_lm.advantages_of(make_grpo(model, algo), batch)),
                                   advantages, atol=1e-5)
        # four micro-batches of one completion: their shares must add up to the minibatch's loss; for
        # the token mean (whose denominator spans micro-batches) also the whole minibatch in one pass
        results = []
        for micro in (1, 0) if loss_norm == "token" else (1,):
            grpo = make_grpo(model, algo, micro)
            trained, frozen = grpo.init(model.params, jax.random.key(0))[0].trained, None
            (loss, grads), _ = jax.jit(grpo_lm.minibatch_grads, static_argnums=(0, 5))(
                grpo, trained, frozen, data, hparams, False)
            np.testing.assert_allclose(float(loss), expected, rtol=2e-5, err_msg=loss_norm)
            results.append(grads)
        if len(results) == 2:
            jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-7),
                                   *results)


def test_lora_update_changes_only_the_adapters(model):
    algo = GRPOConfig(num_groups=2, group_size=2, update_epochs=1, num_minibatches=1, lr=1e-2, beta=0.1)
    grpo = make_grpo(model, algo, lora_rank=2)
    state, frozen = grpo.init(model.params, jax.random.key(0))
    assert all(a is b for a, b in zip(jax.tree_util.tree_leaves(frozen), jax.tree_util.tree_leaves(model.params)))
    assert set(state.trained) == {"q", "v"}
    new_state, metrics = grpo.update(state, frozen, hand_batch(model), hyperparameters(algo), jax.random.key(1))
    assert float(metrics["kl_ref"]) == 0.0  # adapters start at b = 0: the policy is the base
    merged = grpo.policy_params(new_state.trained, frozen)
    scale = 16.0 / 2
    for path, leaf in jax.tree_util.tree_flatten_with_path(merged)[0]:
        name = jax.tree_util.keystr(path)
        base = model.params
        for key in path:
            base = base[key.key]
        if name in ("['layers']['q']", "['layers']['v']"):
            adapter = new_state.trained[path[-1].key]
            assert np.abs(np.asarray(adapter["b"])).max() > 0
            np.testing.assert_allclose(leaf, base + scale * np.einsum("nir,nro->nio", adapter["a"], adapter["b"]),
                                       rtol=1e-6, atol=1e-7)
            assert not np.array_equal(leaf, base)
        else:
            np.testing.assert_array_equal(leaf, base, err_msg=name)


@pytest.mark.slow
def test_bfloat16_lora_keeps_the_base_in_bfloat16_and_trains_float32_adapters():
    model16 = tiny_model(num_layers=1, hidden=32, seed=2, dtype="bfloat16")
    algo = GRPOConfig(num_groups=2, group_size=2, update_epochs=1, num_minibatches=1, lr=1e-2, beta=0.1)
    lm = LMTrainConfig(max_new_tokens=T)
    grpo = grpo_lm.LMGRPO(algo, lm, ModelConfig(path="tiny", dtype="bfloat16", lora_rank=2), model16.cfg,
                          model16.sampling_config(T, 1.0), P, 10)
    state, frozen = grpo.init(model16.params, jax.random.key(0))
    new_state, metrics = grpo.update(state, frozen, hand_batch(model16), hyperparameters(algo), jax.random.key(1))
    assert {leaf.dtype for leaf in jax.tree_util.tree_leaves(grpo.policy_params(new_state.trained, frozen))} == {
        jnp.dtype("bfloat16")}
    assert {leaf.dtype for leaf in jax.tree_util.tree_leaves(new_state.trained)} == {jnp.dtype("float32")}
    assert all(np.isfinite(float(v)) for v in metrics.values())
    assert np.abs(np.asarray(new_state.trained["q"]["b"])).max() > 0

SEVEN = ("algo=grpo", "env=lm/prompts", "env.params.generator=tests.lm_fixtures:digit_prompts",
         "env.params.num_eval=8", "eval_episodes=8", "model.path=tiny", "model.tiny_hidden=32",
         "lm.max_new_tokens=4", "algo.num_groups=4", "algo.group_size=8", "algo.lr=0.1",
         "progress.mode=off", "lm.save_model=false", "lm.eval_batch_size=8")


def seven_settings(*overrides):
    return runner.parse_settings(compose(*SEVEN, *overrides))


@pytest.fixture(scope="module")
def seven_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("seven")
    settings = seven_settings("env.params.rewards=[tests.lm_fixtures:sevens]", "lm.num_updates=8",
                              "checkpoint.every_updates=4", "lm.save_model=true")
    return out, settings, runner.execute(settings, out)


def test_grpo_raises_the_always_answer_7_reward(seven_run):
    out, _, summary = seven_run
    rows = [dict(zip(*[line.split(",") for line in (header, row)]))
            for header in [open(out / "metrics.csv").readline().strip()]
            for row in open(out / "metrics.csv").read().strip().splitlines()[1:]]
    first = np.mean([float(r["reward/sevens"]) for r in rows[:2]])
    last = np.mean([float(r["reward/sevens"]) for r in rows[-2:]])
    assert len(rows) == 8 and last > first + 0.2, (first, last)
    assert summary["held_out_after"]["reward/sevens"] > summary["held_out_before"]["reward/sevens"] + 0.2
    examples = [json.loads(line) for line in open(out / "examples.jsonl")]
    assert {e["split"] for e in examples} == {"train", "held_out"} and "sevens" in examples[0]
    saved = __import__("purejaxrl_opt.host.lm", fromlist=["load"]).load(out / "model")
    assert saved.tokenizer.chat_template and saved.cfg.hidden_size == 32


def test_resume_is_bitwise(seven_run, tmp_path):
    out, settings, _ = seven_run
    assert checkpoint.tree_steps(out) == [4, 8]
    resumed = tmp_path / "resumed"
    shutil.copytree(out, resumed)
    shutil.rmtree(resumed / "checkpoints" / "8")
    runner.execute(dataclasses.replace(settings, resume=str(resumed)), tmp_path / "unused")
    digests = [checkpoint.read_tree_manifest(d / "checkpoints" / "8")["digests"] for d in (out, resumed)]
    assert digests[0] == digests[1]
    with pytest.raises(checkpoint.CheckpointError, match="another configuration"):
        runner.execute(dataclasses.replace(settings, resume=str(resumed), seed=5), tmp_path / "unused")


def test_a_failing_reward_function_stops_the_run_and_keeps_the_last_checkpoint(tmp_path):
    from tests import lm_fixtures

    lm_fixtures.CALLS["flaky"] = 0
    settings = seven_settings("env.params.rewards=[tests.lm_fixtures:flaky]", "lm.num_updates=3",
                              "checkpoint.every_updates=1")
    with pytest.raises(rewards.RewardError, match="reward function 'flaky' raised RuntimeError: reward server"):
        runner.execute(settings, tmp_path)
    assert checkpoint.tree_steps(tmp_path) == [1]
    assert checkpoint.read_tree_manifest(tmp_path / "checkpoints" / "1")["update"] == 1
    assert not (tmp_path / "summary.json").exists()


def test_the_cli_path_exits_1_naming_a_failing_reward_function(tmp_path, capsys):
    from tests import lm_fixtures

    lm_fixtures.CALLS["flaky"] = 0
    cfg = compose(*SEVEN, "env.params.rewards=[tests.lm_fixtures:flaky]", "lm.num_updates=3")
    with pytest.raises(SystemExit) as exit_info:
        runner.main(cfg, tmp_path)
    assert exit_info.value.code == 1
    assert "reward function error: reward function 'flaky' raised RuntimeError" in capsys.readouterr().err


@pytest.mark.parametrize("override,key", [
    ("lm.micro_batch_size=3", r"lm\.micro_batch_size"),
    ("algo.num_minibatches=3", r"algo\.num_minibatches"),
    ("algo.grouping=unrelated", r"algo\.grouping"),
    ("num_seeds=2", r"num_seeds"),
    ("model.lora_targets=[q,qq]", r"model\.lora_targets"),
    ("model.dtype=float16", r"model\.dtype"),
    ("+lm.steps=3", r"lm\.steps"),
    ("algo.overlong_buffer=4", r"algo\.overlong_buffer"),
    ("algo.loss_type=dapo", None),
])
def test_config_errors_name_the_key(override, key):
    if key is None:
        seven_settings("env.params.rewards=[answer_format]", override)
        return
    with pytest.raises(ConfigError, match=key):
        seven_settings("env.params.rewards=[answer_format]", override)


def test_cli_refuses_a_bad_key_before_compiling(tmp_path):
    result = subprocess.run([sys.executable, "-m", "purejaxrl_opt.train", "algo=trpo", "env=lm/countdown",
                             f"hydra.run.dir={tmp_path}"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "algo.name" in result.stderr, result.stderr[-2000:]
