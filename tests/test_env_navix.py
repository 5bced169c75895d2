"""The navix adapter against the real navix: spaces, determinism, jit/vmap/scan, and the gymnax 1.x
truth (terminated vs truncated, the pre-reset observation, no action lost at an episode's end)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import navix

from purejaxrl_opt.envs import navix as adapter  # noqa: E402
from purejaxrl_opt.config.errors import ConfigError  # noqa: E402
from env_play import check_reset_and_step_against_spaces, play  # noqa: E402  (tests/env_play.py)
from tests import cli_lifecycle  # noqa: E402

# Navix-Empty-5x5-v0: the player starts at (1, 1) facing east, the goal is at (3, 3)
FORWARD, ROTATE_CW, ROTATE_CCW = 2, 1, 0
TO_GOAL = (FORWARD, FORWARD, ROTATE_CW, FORWARD, FORWARD)
PLAYER, GOAL = 10, 8


@pytest.fixture(scope="module")
def empty5():
    """Empty-5x5 with a 5-step limit: the shortest path to the goal takes exactly 5 steps."""
    env, params = adapter.make("Navix-Empty-5x5-v0", {"max_steps_in_episode": len(TO_GOAL)})
    return env, params, jax.jit(env.step), jax.jit(env.reset)


def test_ids_and_spaces(empty5):
    env, params, step, reset = empty5
    assert {"Navix-Empty-8x8-v0", "Navix-DoorKey-5x5-v0"} <= set(adapter.ids())
    assert set(adapter.ids()) == set(navix.registry())
    space = env.observation_space(params)
    assert space.shape == (5, 5, 3) and space.dtype == jnp.uint8
    assert env.action_space(params).n == 7 and params.max_steps_in_episode == 5
    space, state = check_reset_and_step_against_spaces(env, params, reset, step, FORWARD)
    flat, flat_params = adapter.make("Navix-Empty-5x5-v0", {"flatten": True})
    assert flat.observation_space(flat_params).shape == (75,)
    first_person, fp_params = adapter.make("Navix-Empty-8x8-v0", {"observation": "symbolic_first_person"})
    assert first_person.observation_space(fp_params).shape == (7, 7, 3)
    assert env.render_frame(state, params).shape == (40, 40, 3)


def test_goal_reached_is_a_termination_with_the_final_observation(empty5):
    """The goal is reached on the step the time limit falls: a termination (no bootstrap), not a
    truncation (navix's check_truncation gives termination priority)."""
    env, params, step, reset = empty5
    start, state = reset(jax.random.PRNGKey(0), params)
    assert start[1, 1, 0] == PLAYER and start[3, 3, 0] == GOAL
    state, out = play(step, state, TO_GOAL, params)
    for obs, reward, terminated, truncated, _ in out[:-1]:
        assert not terminated and not truncated and reward == 0
    obs, reward, terminated, truncated, info = out[-1]
    assert terminated and not truncated and reward == 1.0
    final = np.asarray(info["final_observation"])
    assert final[3, 3, 0] == PLAYER and final[1, 1, 0] != PLAYER  # the player on the goal, pre-reset
    np.testing.assert_array_equal(obs, start)  # Empty's start is fixed: reset happened in the same step
    # no lost action: the very next step acts (navix's own step would spend it on the reset)
    obs, *_ = step(jax.random.PRNGKey(9), state, FORWARD, params)
    assert obs[1, 2, 0] == PLAYER
    nx_env = navix.make("Navix-Empty-5x5-v0", max_steps=5)
    timestep = nx_env.reset(jax.random.PRNGKey(0))
    for action in TO_GOAL:
        timestep = nx_env.step(timestep, action)
    assert timestep.step_type == 2
    assert np.asarray(nx_env.step(timestep, FORWARD).observation)[1, 1, 0] == PLAYER  # the action ignored


def test_time_limit_is_a_truncation(empty5):
    env, params, step, reset = empty5
    start, state = reset(jax.random.PRNGKey(0), params)
    state, out = play(step, state, (ROTATE_CCW, ROTATE_CCW, ROTATE_CW, ROTATE_CW, ROTATE_CW, FORWARD), params)
    assert [(bool(te), bool(tr)) for _, _, te, tr, _ in out[:5]] == [(False, False)] * 4 + [(False, True)]
    obs, reward, _, _, info = out[4]
    final = np.asarray(info["final_observation"])
    assert reward == 0 and final[1, 1, 0] == PLAYER  # it only turned
    assert not np.array_equal(final[..., 2], np.asarray(start)[..., 2])  # the direction changed
    np.testing.assert_array_equal(obs, start)
    assert out[5][0][1, 2, 0] == PLAYER  # the first action of the next episode acts


@pytest.mark.slow  # the contract suite checks Navix's determinism under jit + vmap + scan in the fast tier
def test_determinism_and_jit_vmap_scan():
    env, params = adapter.make("Navix-Empty-Random-5x5-v0", {})
    num_envs, num_steps = 8, 40
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    @jax.jit
    def rollout(key):
        reset_key, key = jax.random.split(key)
        obs, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(reset_key, num_envs), params)

        def _step(carry, step_key):
            obs, state = carry
            action_key, env_key = jax.random.split(step_key)
            action = jax.random.randint(action_key, (num_envs,), 0, 7)
            obs, state, reward, terminated, truncated, info = step(
                jax.random.split(env_key, num_envs), state, action, params)
            return (obs, state), (obs, reward, terminated, truncated, info["final_observation"])

        return jax.lax.scan(_step, (obs, state), jax.random.split(key, num_steps))[1]

    first, second = rollout(jax.random.PRNGKey(3)), rollout(jax.random.PRNGKey(3))
    jax.tree_util.tree_map(np.testing.assert_array_equal, first, second)
    obs, reward, terminated, truncated, final = first
    assert obs.shape == (num_steps, num_envs, 5, 5, 3) and obs.dtype == jnp.uint8
    assert reward.shape == (num_steps, num_envs)
    assert not np.any(np.logical_and(terminated, truncated))
    # Empty-Random draws the start from the reset key: different keys, different starts
    starts = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(jax.random.PRNGKey(0), 8), params)[0]
    assert len({np.asarray(s).tobytes() for s in starts}) > 1


def test_bad_ids_and_options_are_config_errors():
    with pytest.raises(ConfigError, match="Navix-Empty-8x8-v0"):
        adapter.make("Navix-Nope-v0", {})
    with pytest.raises(ConfigError, match="env.params.max_step.*allowed"):
        adapter.make("Navix-Empty-5x5-v0", {"max_step": 3})
    with pytest.raises(ConfigError, match="env.params.observation"):
        adapter.make("Navix-Empty-5x5-v0", {"observation": "pixels"})
    with pytest.raises(ConfigError, match="env.params.max_steps_in_episode"):
        adapter.make("Navix-Empty-5x5-v0", {"max_steps_in_episode": 0})


@pytest.mark.slow  # a big compile; the conv torso is checked against flax's conv in tests/test_conv.py
def test_the_conv_torso_takes_the_symbolic_grid(empty5):
    from purejaxrl_opt.config.schema import NetworkConfig
    from purejaxrl_opt.envs import EnvSpec
    from purejaxrl_opt.core.models.networks import Actor, Critic

    env, params, _, reset = empty5
    spec = EnvSpec("navix/Navix-Empty-5x5-v0", (5, 5, 3), True, 7, None, None, 5)
    obs, _ = reset(jax.random.PRNGKey(0), params)
    net = NetworkConfig(hidden_sizes=(16,), cnn_channels=(8, 8))  # 5x5 -> 3x3 -> 1x1
    actor_params = Actor(spec, net).init(jax.random.PRNGKey(0), obs[None])
    assert "Conv_1" in actor_params["params"]["Torso_0"]
    assert Actor(spec, net).apply(actor_params, obs[None])["logits"].shape == (1, 7)
    critic = Critic(spec, net)
    assert critic.apply(critic.init(jax.random.PRNGKey(1), obs[None]), obs[None]).shape == (1,)


@pytest.mark.parametrize("algo", cli_lifecycle.matrix_params("navix"))
def test_cli_train_evaluate_gif_kill_and_resume(algo, tmp_path):
    """Through the CLI with a user's defaults: train, evaluate (--gif), SIGKILL after a checkpoint,
    resume= -> metrics.csv bitwise the uninterrupted run's (tests/cli_lifecycle.py)."""
    cli_lifecycle.check_library("navix", algo, tmp_path)

