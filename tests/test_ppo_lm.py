"""PPO on a language model with a value LM (purejaxrl_opt/core/algos/ppo_lm.py) on a tiny random model: the
per-token rewards and GAE against a loop over tokens, the loss against a hand computation (and exact
micro-batch accumulation), an update changing the policy and the value model, and the value model
learning a constant reward."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from purejaxrl_opt.core.algos import ppo_lm
from purejaxrl_opt.config.schema import hyperparameters
from purejaxrl_opt.config.errors import ConfigError
from purejaxrl_opt.host.lm.tiny import tiny_model
from purejaxrl_opt.config.lm import LMTrainConfig, ModelConfig, PPOLMConfig
from purejaxrl_opt.core.stages.lm_policy import Batch, sequences
from purejaxrl_opt.core.models import sampling

P, T = 6, 4


@pytest.fixture(scope="module")
def model():
    return tiny_model(num_layers=2, hidden=32, seed=1)


def make_ppo(model, algo: PPOLMConfig, micro: int = 0, max_new_tokens: int = T):
    lm = LMTrainConfig(max_new_tokens=max_new_tokens, micro_batch_size=micro)
    return ppo_lm.LMPPO(algo, lm, ModelConfig(path="tiny"), model.cfg,
                        model.sampling_config(max_new_tokens, 1.0), P, 10)


def hand_batch(model):
    rng = np.random.default_rng(0)
    prompts = rng.integers(3, 100, (4, P)).astype(np.int32)
    prompt_mask = np.ones((4, P), np.int32)
    prompt_mask[1, :2] = 0
    completions = rng.integers(3, 100, (4, T)).astype(np.int32)
    lengths = np.array([3, 1, 4, 2], np.int32)
    completions[np.arange(T)[None] >= lengths[:, None]] = model.tokenizer.pad_id
    return Batch(prompts, prompt_mask, completions, lengths, np.array([1.0, 0.0, 0.2, 0.6], np.float32))


def test_token_rewards_and_gae_match_a_loop_over_tokens():
    rng = np.random.default_rng(2)
    lengths = np.array([3, 1, 4, 2])
    mask = np.arange(T)[None] < lengths[:, None]
    scores = rng.normal(size=4).astype(np.float32)
    old, ref, values = (rng.normal(size=(4, T)).astype(np.float32) for _ in range(3))
    kl_coef, gamma, lam = 0.1, 0.9, 0.8
    rewards = np.asarray(ppo_lm.token_rewards(scores, lengths, mask, old, ref, kl_coef))
    advantages, returns = (np.asarray(x) for x in ppo_lm.token_advantages(rewards, values, mask, gamma, lam))
    for b in range(4):
        n = lengths[b]
        r = [-kl_coef * (old[b, t] - ref[b, t]) + (scores[b] if t == n - 1 else 0.0) for t in range(n)]
        np.testing.assert_allclose(rewards[b, :n], r, rtol=1e-6, atol=1e-7)
        np.testing.assert_array_equal(rewards[b, n:], 0.0)
        running = 0.0
        for t in reversed(range(n)):
            next_value = values[b, t + 1] if t + 1 < n else 0.0
            running = r[t] + gamma * next_value - values[b, t] + gamma * lam * running
            np.testing.assert_allclose(advantages[b, t], running, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(returns[b, t], running + values[b, t], rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(advantages[b, n:], 0.0)


def test_loss_matches_a_hand_computation_and_micro_batches_add_up(model):
    batch = hand_batch(model)
    tokens, attention, mask = (np.asarray(x) for x in sequences(batch, 1))
    algo = PPOLMConfig(num_prompts=4, clip_eps=0.2, vf_coef=0.1, ent_coef=0.0)
    ppo = make_ppo(model, algo)
    state, frozen = ppo.init(model.params, jax.random.key(0))
    # an independent path to the policy's log-probs: the teacher-forced scorer; the values: the value
    # head (w, c set by hand) over the body's hidden states
    full_mask = np.concatenate([np.zeros((4, P), np.int32), mask.astype(np.int32)], axis=1)
    log_prob = np.asarray(sampling.score(model.params, model.cfg, tokens, attention, full_mask))[:, P:]
    rng = np.random.default_rng(1)
    trained = state.trained
    trained["value"]["head"] = {"w": rng.normal(0, 0.3, 32).astype(np.float32), "c": np.float32(0.4)}
    values = np.asarray(ppo_lm.token_values(trained["value"], model.cfg, tokens, attention, P, T))
    old = log_prob + rng.normal(0, 0.3, log_prob.shape)
    values_old = values + rng.normal(0, 0.3, values.shape)
    returns = rng.normal(0, 1, values.shape)
    advantages = rng.normal(0, 1, values.shape)
    ratio = np.exp(log_prob - old)
    surrogate = np.minimum(ratio * advantages, np.clip(ratio, 0.8, 1.2) * advantages)
    clipped = values_old + np.clip(values - values_old, -0.2, 0.2)
    value_loss = 0.5 * np.maximum((values - returns) ** 2, (clipped - returns) ** 2)

    def token_mean(x):
        return np.where(mask, x, 0.0).sum() / mask.sum()

    expected = -token_mean(surrogate) + 0.1 * token_mean(value_loss)
    data = {"tokens": tokens, "attention": attention, "completions": batch.completions, "mask": mask,
            "advantages": advantages.astype(np.float32), "returns": returns.astype(np.float32),
            "log_prob_old": old.astype(np.float32), "values_old": values_old.astype(np.float32)}
    results = []
    for micro in (1, 0):
        ppo = make_ppo(model, algo, micro)
        (loss, grads), diagnostics = jax.jit(ppo_lm.minibatch_grads, static_argnums=0)(
            ppo, trained, frozen, data, hyperparameters(algo))
        np.testing.assert_allclose(float(loss), expected, rtol=2e-5)
        np.testing.assert_allclose(float(diagnostics["value_loss"]), token_mean(value_loss), rtol=2e-5)
        results.append(grads)
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-7), *results)
    assert np.abs(np.asarray(results[0]["value"]["head"]["w"])).max() > 0


def test_an_update_changes_the_policy_and_the_value_model(model):
    algo = PPOLMConfig(num_prompts=4, update_epochs=2, num_minibatches=2, lr=1e-3, kl_coef=0.1)
    ppo = make_ppo(model, algo, micro=1)
    state, frozen = ppo.init(model.params, jax.random.key(0))
    assert "lm_head" not in state.trained["value"]["body"]  # tied embeddings; and never the LM head
    new_state, metrics = ppo.update(state, frozen, hand_batch(model), hyperparameters(algo), jax.random.key(1))
    assert all(np.isfinite(float(v)) for v in metrics.values())
    assert float(metrics["kl_ref"]) == 0.0 and float(metrics["value_mean"]) == 0.0  # the start: pi = ref, w = 0
    for part in ("policy", "value"):
        before, after = jax.tree_util.tree_leaves(state.trained[part]), jax.tree_util.tree_leaves(new_state.trained[part])
        assert any(not np.array_equal(a, b) for a, b in zip(before, after)), part
    assert int(new_state.update_idx) == 1


def test_the_value_model_learns_a_constant_reward(model):
    """Every completion scores 1 (gamma = 1, no KL): every token's return is 1, and a few updates bring
    the value model's predictions from 0 to 1."""
    algo = PPOLMConfig(num_prompts=4, group_size=2, update_epochs=2, num_minibatches=2, lr=1e-2, kl_coef=0.0,
                       gamma=1.0, gae_lambda=1.0, vf_coef=1.0)
    ppo = make_ppo(model, algo, max_new_tokens=3)
    state, frozen = ppo.init(model.params, jax.random.key(0))
    hparams = hyperparameters(algo)
    prompts = np.asarray([[model.tokenizer.encode(f"{i}: say 7")[-1]] * P for i in range(4)], np.int32)
    prompt_mask = np.ones_like(prompts)
    value_means = []
    for update in range(8):
        key = jax.random.fold_in(jax.random.key(3), update)
        completions, lengths = ppo.sample(state, frozen, prompts, prompt_mask, key)
        batch = Batch(prompts, prompt_mask, completions, lengths, np.ones(8, np.float32))
        state, metrics = ppo.update(state, frozen, batch, hparams, key)
        value_means.append(float(metrics["value_mean"]))  # the values before this update's steps
        np.testing.assert_allclose(float(metrics["return_mean"]), 1.0, rtol=1e-6)
    assert value_means[0] == 0.0 and abs(value_means[-1] - 1.0) < 0.1, value_means


def test_a_bad_setting_is_a_config_error_naming_the_key(model):
    with pytest.raises(ConfigError, match=r"ppo_lm\.num_minibatches"):
        make_ppo(model, PPOLMConfig(num_prompts=3, num_minibatches=2))
    with pytest.raises(ConfigError, match=r"lm\.micro_batch_size"):
        make_ppo(model, PPOLMConfig(num_prompts=4), micro=3)
