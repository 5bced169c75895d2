"""``network.shared``: actor and critic as two heads on one torso (and recurrent cell), for PPO.

Checked against hand computations from the parameter tree, against the policy's and the value
function's own step-by-step paths, and end to end (PPO learns CartPole with it; resuming is covered by
the checkpoint code's generic tree handling and was checked by hand, not here).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxrl_opt.core.stages.actor_critic import Sequences, make_networks, replay_actor, replay_critic
from purejaxrl_opt.config.schema import ConfigError, NetworkConfig
from purejaxrl_opt.core.algos.grpo import GRPOConfig
from purejaxrl_opt.core.algos.ppo import PPOConfig
from purejaxrl_opt.core.algos.trpo import TRPOConfig
from purejaxrl_opt.envs import EnvSpec
from purejaxrl_opt.core.models.policies import make_policy, make_value, shared_apply
from tests.conftest import small_run

A = 3  # actions; an env with action masks carries them as the observation's last A entries
MASKED = EnvSpec("masked", (7,), True, A, None, None, 10, action_mask=True)
CONTINUOUS = EnvSpec("continuous", (5,), False, 2, (-1.0, -1.0), (1.0, 1.0), 10)
FEED_FORWARD = NetworkConfig(hidden_sizes=(8, 6), head_sizes=(5,), activation="relu", shared=True)
RECURRENT = NetworkConfig(hidden_sizes=(8,), head_sizes=(5,), activation="tanh", recurrent="gru",
                          recurrent_size=4, shared=True)


def _obs(key, spec: EnvSpec, batch: tuple[int, ...]) -> jnp.ndarray:
    obs = jax.random.normal(key, batch + spec.obs_shape)
    if spec.action_mask:  # a legal-action mask with at least one legal action per row
        mask = (jax.random.uniform(jax.random.fold_in(key, 1), batch + (A,)) < 0.6).at[..., 0].set(True)
        obs = obs.at[..., -A:].set(mask.astype(jnp.float32))
    return obs


def _dense(p, x):
    return x @ np.asarray(p["kernel"], np.float64) + np.asarray(p["bias"], np.float64)


def test_feed_forward_shared_network_is_one_torso_and_two_heads_by_hand():
    policy, value = make_policy(MASKED, FEED_FORWARD), make_value(MASKED, FEED_FORWARD)
    params = policy.init(jax.random.PRNGKey(0))
    # one parameter tree for both: the value function's own init builds the same tree
    assert (jax.tree_util.tree_structure(value.init(jax.random.PRNGKey(1)))
            == jax.tree_util.tree_structure(params))
    p = params["params"]
    assert set(p) == {"torso", "heads"}
    assert set(p["heads"]) == {"actor_layers_0", "actor_out", "critic_layers_0", "critic_out"}

    obs = _obs(jax.random.PRNGKey(2), MASKED, (6,))
    x = np.asarray(obs, np.float64)
    for i in range(2):
        x = np.maximum(_dense(p["torso"][f"Dense_{i}"], x), 0.0)
    logits = _dense(p["heads"]["actor_out"], np.maximum(_dense(p["heads"]["actor_layers_0"], x), 0.0))
    v = _dense(p["heads"]["critic_out"], np.maximum(_dense(p["heads"]["critic_layers_0"], x), 0.0))[:, 0]
    legal = np.asarray(obs[:, -A:]) > 0
    probs = np.where(legal, np.exp(logits - logits.max(-1, keepdims=True)), 0.0)
    probs /= probs.sum(-1, keepdims=True)

    out = policy.apply(params, obs)
    np.testing.assert_allclose(jax.nn.softmax(out["logits"]), probs, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(value.apply(params, obs), v, rtol=1e-5, atol=1e-6)
    both_out, both_v = shared_apply(MASKED, FEED_FORWARD)(params, obs)
    np.testing.assert_array_equal(both_out["logits"], out["logits"])
    np.testing.assert_allclose(both_v, v, rtol=1e-5, atol=1e-6)


def test_recurrent_shared_network_replays_both_heads_from_the_one_hidden_state():
    """The one-pass replay of both heads equals stepping the policy and the value function one
    observation at a time from the same state (resets included), and each head's own replay."""
    for spec in (MASKED, CONTINUOUS):
        networks = make_networks(spec, RECURRENT)
        params = networks.policy.init(jax.random.PRNGKey(0))
        assert set(params["params"]) == {"torso", "cell", "heads"}
        n, t = 3, 5
        obs = _obs(jax.random.PRNGKey(1), spec, (n, t))
        done = jax.random.uniform(jax.random.PRNGKey(2), (n, t)) < 0.3
        start = jax.random.normal(jax.random.PRNGKey(3), (n, RECURRENT.recurrent_size))
        zeros = jnp.zeros((n, t))
        seq = Sequences(obs, zeros, zeros, zeros, zeros, zeros, done, actor_start=start, critic_start=start)

        dist_params, values = networks.actor_critic_apply({"actor": params, "critic": {}}, seq)
        assert networks.critic_params({"actor": params, "critic": {}}) is params

        memory, stepped_out, stepped_v = start, [], []
        for i in range(t):
            _, out = networks.policy.recurrence.step(params, memory, obs[:, i])
            new_memory, v = networks.value.recurrence.step(params, memory, obs[:, i])
            stepped_out.append(out)
            stepped_v.append(v)
            memory = jnp.where(done[:, i, None], 0.0, new_memory)
        stepped_out = jax.tree_util.tree_map(lambda *x: jnp.stack(x, 1), *stepped_out)
        for name in dist_params:
            np.testing.assert_allclose(dist_params[name], stepped_out[name], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(values, jnp.stack(stepped_v, 1), rtol=1e-5, atol=1e-6)
        jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
                               dist_params, replay_actor(networks.policy, params, seq))
        np.testing.assert_allclose(values, replay_critic(networks.value, params, seq), rtol=1e-5, atol=1e-6)


def test_the_value_loss_trains_the_shared_trunk_and_the_critic_keeps_no_parameters():
    for net in (FEED_FORWARD, RECURRENT):
        networks = make_networks(MASKED, net)
        assert networks.shared and networks.init_critic(jax.random.PRNGKey(0)) == {}
        params = {"actor": networks.policy.init(jax.random.PRNGKey(0)), "critic": {}}
        obs = _obs(jax.random.PRNGKey(1), MASKED, (4, 3))
        if net.is_recurrent:
            zeros = jnp.zeros((4, 3))
            inputs = Sequences(obs, zeros, zeros, zeros, zeros, zeros, zeros.astype(bool),
                               actor_start=jnp.zeros((4, 4)), critic_start=jnp.zeros((4, 4)))
        else:
            inputs = obs
        grads = jax.grad(lambda p: jnp.sum(networks.actor_critic_apply(p, inputs)[1] ** 2))(params)
        g = grads["actor"]["params"]
        trunk = [g["torso"]] + ([g["cell"]] if net.is_recurrent else [])
        assert all(float(jnp.abs(x).sum()) > 0 for x in jax.tree_util.tree_leaves(trunk))
        # the value's gradient reaches the critic's head and not the actor's
        assert float(jnp.abs(g["heads"]["critic_out"]["kernel"]).sum()) > 0
        assert float(jnp.abs(g["heads"]["actor_out"]["kernel"]).sum()) == 0


@pytest.mark.parametrize("algo,net,key", [
    (TRPOConfig(), NetworkConfig(shared=True), "network.shared"),
    (GRPOConfig(), NetworkConfig(shared=True), "network.shared"),
    (PPOConfig(), NetworkConfig(shared=True, critic_hidden_sizes=(32,)), "network.critic_hidden_sizes"),
    (PPOConfig(), NetworkConfig(kind="transformer", shared=True), "network.shared"),
])
def test_shared_is_refused_where_it_has_no_meaning(algo, net, key):
    with pytest.raises(ConfigError, match=key):
        small_run(algo, network=net)


@pytest.mark.slow  # a learning check; the shared network's wiring is checked by hand in the fast tier
def test_ppo_with_a_shared_trunk_learns_cartpole():
    """Calibrated on tuning seeds 0-15 (one vmapped compile of this config through the CLI,
    ``network.shared=true total_timesteps=60000 num_seeds=16 eval_episodes=8``): final return per seed
    85..412, mean 256 (separate networks, same seeds: 351..500, mean 436; a random policy: ~22). The
    test wants > 55 (2.5x random) on each of its 2 seeds."""
    from purejaxrl_opt.host import runner

    run = small_run(num_seeds=2, total_timesteps=60_000, eval_episodes=8, network=NetworkConfig(shared=True))
    import tempfile

    result = runner.execute(run, tempfile.mkdtemp(prefix="pjo_shared_"), loggers=())
    assert result.loop.algo_state.params["critic"] == {}
    per_seed = result.eval_returns.mean(axis=1)
    assert per_seed.min() > 55, per_seed
