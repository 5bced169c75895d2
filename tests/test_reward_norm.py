"""Return-based reward normalisation (``env.normalize_reward``): the running discounted returns, their
statistics, the scaled rewards inside PPO/TRPO, and bad input."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxrl_opt import envs
from purejaxrl_opt.core.algos import make_algorithm
from purejaxrl_opt.config.schema import ConfigError, EnvConfig, NetworkConfig, RunConfig
from purejaxrl_opt.core.algos.grpo import GRPOConfig
from purejaxrl_opt.core.algos.ppo import PPOConfig
from purejaxrl_opt.core.algos.trpo import TRPOConfig


def test_discounted_returns_restart_after_every_episode_end():
    rng = np.random.default_rng(0)
    reward = rng.normal(size=(7, 3)).astype(np.float32)
    done = np.zeros((7, 3), bool)
    done[2, 0] = done[5, 0] = done[0, 1] = done[6, 2] = True
    carried_in = np.asarray([0.5, -1.0, 2.0], np.float32)
    gamma = 0.9
    per_step, carried = envs.discounted_returns(jnp.asarray(carried_in), jnp.asarray(reward),
                                                jnp.asarray(done), gamma)
    expected = np.zeros_like(reward)
    g = carried_in.copy()
    for t in range(7):
        g = gamma * g + reward[t]
        expected[t] = g
        g = np.where(done[t], 0.0, g)
    np.testing.assert_allclose(per_step, expected, rtol=1e-6)
    np.testing.assert_allclose(carried, g, rtol=1e-6)
    assert float(carried[2]) == 0.0  # env 2's episode ended at the last step


def test_scale_divides_by_the_std_of_all_returns_seen():
    first, second = np.arange(6.0).reshape(3, 2), np.asarray([[10.0, -4.0]])
    stats = envs.obs_norm_update(envs.reward_norm_init(), jnp.asarray(first))
    stats = envs.obs_norm_update(stats, jnp.asarray(second))
    seen = np.concatenate([first.ravel(), second.ravel()])
    # the prior (mean 0, var 1, count 1e-4) weighs 1e-4 of one sample
    np.testing.assert_allclose(float(stats.var), seen.var(), rtol=1e-4)
    reward = jnp.asarray([1.0, -2.0, 1e6])
    np.testing.assert_allclose(envs.reward_norm_scale(stats, reward),
                               [1.0 / np.sqrt(seen.var()), -2.0 / np.sqrt(seen.var()), 10.0], rtol=1e-4)


def _run(algo, normalize_reward=True, env_params=None, **kwargs):
    run = RunConfig(algo=algo, env=EnvConfig(id="Pendulum-v1", normalize_reward=normalize_reward,
                                             params=env_params or {}),
                    total_timesteps=4 * 32 * 2, eval_episodes=1, **kwargs)
    run.validate()
    return run


def test_the_stage_feeds_gae_the_scaled_rewards_and_carries_each_envs_return():
    """One rollout through the PPO/TRPO stage, recomputed by hand from the same rollout: the env
    carries each env's discounted return (numpy loop), the statistics are those of every step's
    return, and the advantages are GAE on the rewards divided by their std."""
    from purejaxrl_opt.core.stages import rollout
    from purejaxrl_opt.core.stages.actor_critic import make_stage

    run = _run(PPOConfig(num_envs=4, num_steps=32), env_params={"max_steps_in_episode": 20})
    env, env_params, spec = envs.make(run.env.id, dict(run.env.params))
    stage = make_stage(run, env, env_params, spec)
    parts = stage.init(jax.random.PRNGKey(0))
    hparams = {"gamma": jnp.float32(0.9), "gae_lambda": jnp.float32(0.95)}
    key = jax.random.PRNGKey(1)
    exp = stage.experience(parts.actor_params, parts.critic_params, None, parts.env, key, hparams,
                           parts.reward_norm)
    _, batch, _ = rollout.collect(env, env_params, spec, stage.dist, stage.policy.apply, parts.actor_params,
                                  None, parts.env, key, 32, True)
    reward, done = np.asarray(batch.reward), np.asarray(batch.done)
    assert done.any()  # episodes of 20 steps end inside the rollout
    g, seen = np.zeros(4), []
    for t in range(32):
        g = 0.9 * g + reward[t]
        seen.append(g.copy())
        g = np.where(done[t], 0.0, g)
    np.testing.assert_allclose(exp.carry.discounted_return, g, rtol=1e-5)
    std = np.sqrt(np.var(np.concatenate(seen)))
    np.testing.assert_allclose(np.sqrt(float(exp.reward_norm.var)), std, rtol=1e-3)
    values = stage.value.apply(parts.critic_params, batch.obs)
    next_values = stage.value.apply(parts.critic_params, batch.final_obs)
    advantages, _ = rollout.gae(jnp.asarray(reward / std), values, next_values, batch.terminated, batch.done,
                                0.9, 0.95)
    np.testing.assert_allclose(exp.transitions.advantages, np.asarray(advantages).reshape(-1), rtol=1e-3,
                               atol=1e-5)


@pytest.mark.parametrize("algo", [PPOConfig(num_envs=4, num_steps=32, num_minibatches=2, update_epochs=1),
                                  pytest.param(TRPOConfig(num_envs=4, num_steps=32), marks=pytest.mark.slow)],
                         ids=["ppo", "trpo"])  # the statistics stage is shared: TRPO's case in the slow tier
def test_updates_merge_every_step_into_the_statistics(algo):
    alg = make_algorithm(_run(algo))
    hparams = alg.default_hparams()
    state = alg.init(jax.random.PRNGKey(0), hparams)
    assert state.env.discounted_return.shape == (4,) and float(state.reward_norm.count) == pytest.approx(1e-4)
    update = jax.jit(alg.update)
    for i in range(2):
        state, metrics = update(state, hparams, i)
    assert float(state.reward_norm.count) == pytest.approx(2 * 4 * 32 + 1e-4)
    # Pendulum's rewards are in [-16.3, 0] and its episodes 200 steps: every return so far is negative
    assert np.all(np.asarray(state.env.discounted_return) < 0) and float(state.reward_norm.var) > 1.0


def test_off_adds_no_state():
    alg = make_algorithm(_run(PPOConfig(num_envs=4, num_steps=32), normalize_reward=False))
    state = alg.init(jax.random.PRNGKey(0), alg.default_hparams())
    assert state.reward_norm is None and state.env.discounted_return == ()


def test_grpo_and_token_envs_refuse_it():
    with pytest.raises(ConfigError, match="env.normalize_reward"):
        _run(GRPOConfig())
    run = RunConfig(algo=PPOConfig(num_steps=3), env=EnvConfig(id="Addition-v0", normalize_reward=True),
                    network=NetworkConfig(kind="transformer", d_model=32, num_layers=1, num_heads=2,
                                          mlp_ratio=2))
    run.validate()
    with pytest.raises(ConfigError, match="env.normalize_reward"):
        make_algorithm(run)
