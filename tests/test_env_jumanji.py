"""The jumanji adapter against the real jumanji: the encoding of structured observations, spaces,
determinism, jit/vmap/scan, the gymnax 1.x truth (a time limit is a truncation with the final
observation kept; a death is a termination) and action masks the policy never violates."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jumanji  # noqa: F401 - the real library (the test extra installs it)

import jumanji  # noqa: E402

from purejaxrl_opt.envs import jumanji as adapter  # noqa: E402
from purejaxrl_opt.config.schema import NetworkConfig  # noqa: E402
from purejaxrl_opt.core.models.distributions import Categorical  # noqa: E402
from purejaxrl_opt.envs import EnvSpec  # noqa: E402
from purejaxrl_opt.config.errors import ConfigError  # noqa: E402
from purejaxrl_opt.core.models.networks import Actor  # noqa: E402
from tests import cli_lifecycle  # noqa: E402

LIMIT = 8  # Snake 6x6's episode limit in these tests
UP = 0


@pytest.fixture(scope="module")
def snake():
    env, params = adapter.make("Snake-v1", {"num_rows": 6, "num_cols": 6, "max_steps_in_episode": LIMIT})
    return env, params, jax.jit(env.step), jax.jit(env.reset)


def _first_legal(obs, num_actions=4):
    return int(np.argmax(np.asarray(obs)[-num_actions:]))


def test_encoding_of_structured_observations():
    """Every field but the mask, flattened in field order (step counters / limit), then the mask."""
    env, params = adapter.make("Maze-v0", {})
    assert params.max_steps_in_episode == 100 and env.action_mask
    key = jax.random.PRNGKey(0)
    obs, state = env.reset(key, params)
    _, timestep = jax.jit(jumanji.make("Maze-v0").reset)(key)
    lib = timestep.observation
    expected = np.concatenate([[lib.agent_position.row, lib.agent_position.col, lib.target_position.row,
                                lib.target_position.col], np.ravel(lib.walls), [lib.step_count / 100],
                               np.asarray(lib.action_mask, np.float32)]).astype(np.float32)
    np.testing.assert_array_equal(obs, expected)
    space = env.observation_space(params)
    assert obs.shape == space.shape == (109,) and obs.dtype == space.dtype == jnp.float32
    assert env.action_space(params).n == 4
    game, game_params = adapter.make("Game2048-v1", {})
    obs, _ = game.reset(key, game_params)
    _, timestep = jax.jit(jumanji.make("Game2048-v1").reset)(key)
    np.testing.assert_array_equal(obs, np.concatenate([np.ravel(timestep.observation.board),
                                                       timestep.observation.action_mask]))
    assert game.observation_space(game_params).shape == (20,)
    assert game_params.max_steps_in_episode == adapter.NO_LIMIT_DEFAULT  # jumanji's 2048 has no limit
    unmasked, unmasked_params = adapter.make("Game2048-v1", {"action_mask": False})
    assert not unmasked.action_mask and unmasked.observation_space(unmasked_params).shape == (16,)


def test_time_limit_is_a_truncation_with_the_final_observation(snake):
    env, params, step, reset = snake
    start, state = reset(jax.random.PRNGKey(1), params)
    obs = start
    for t in range(1, LIMIT + 1):
        obs, state, reward, terminated, truncated, info = step(jax.random.PRNGKey(t), state,
                                                               _first_legal(obs), params)
        assert not terminated and bool(truncated) == (t == LIMIT)
    final = np.asarray(info["final_observation"])
    assert final[-5] == 1.0  # its step_count / limit: the observation of step 8, before the reset
    assert obs[-5] == 0.0 and not np.array_equal(final, obs)
    # reset in the same step, from the reset half of the step's key (gymnax's step)
    np.testing.assert_array_equal(obs, reset(jax.random.split(jax.random.PRNGKey(LIMIT))[1], params)[0])
    # why the adapter owns the limit: jumanji's Snake ends at its time_limit with discount 0, as if
    # the snake had died
    lib = jumanji.make("Snake-v1", num_rows=6, num_cols=6, time_limit=2)
    lib_state, timestep = jax.jit(lib.reset)(jax.random.PRNGKey(1))
    lib_step = jax.jit(lib.step)
    for _ in range(2):
        lib_state, timestep = lib_step(lib_state, jnp.argmax(timestep.observation.action_mask))
    assert timestep.last() and float(timestep.discount) == 0.0


def test_hitting_the_wall_is_a_termination(snake):
    env, params, step, reset = snake
    obs, state = reset(jax.random.PRNGKey(2), params)
    ends = []
    for t in range(7):  # up until the wall: at most 6 moves on a 6-row board, then death
        obs, state, reward, terminated, truncated, info = step(jax.random.PRNGKey(t), state, UP, params)
        ends.append((bool(terminated), bool(truncated)))
        if terminated:
            assert info["discount"] == 0.0 and reward == 0.0
            assert np.asarray(info["final_observation"])[-4 + UP] == 0.0  # UP was illegal: the wall
            break
    assert ends[-1] == (True, False) and all(e == (False, False) for e in ends[:-1])


def test_determinism_and_jit_vmap_scan(snake):
    env, params, _, _ = snake
    num_envs, num_steps = 8, 24
    vmapped = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def rollout(key, step=vmapped):
        reset_key, key = jax.random.split(key)
        obs, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(reset_key, num_envs), params)

        def _step(carry, step_key):
            obs, state = carry
            action_key, env_key = jax.random.split(step_key)
            action = jax.random.randint(action_key, (num_envs,), 0, 4)
            obs, state, reward, terminated, truncated, info = step(
                jax.random.split(env_key, num_envs), state, action, params)
            return (obs, state), (obs, reward, terminated, truncated, info["final_observation"])

        return jax.lax.scan(_step, (obs, state), jax.random.split(key, num_steps))[1]

    # the adapter's step_batch (resets computed only on steps where an episode ended) gives
    # vmap(step)'s numbers, across deaths and time limits
    play = jax.jit(rollout)
    first, second = play(jax.random.PRNGKey(3)), play(jax.random.PRNGKey(3))
    batched = jax.jit(lambda key: rollout(key, env.step_batch))(jax.random.PRNGKey(3))
    jax.tree_util.tree_map(np.testing.assert_array_equal, first, second)
    jax.tree_util.tree_map(np.testing.assert_array_equal, first, batched)
    obs, reward, terminated, truncated, final = first
    space = env.observation_space(params)
    assert obs.shape == (num_steps, num_envs) + space.shape and obs.dtype == space.dtype
    assert reward.dtype == jnp.float32 and terminated.dtype == jnp.bool_
    assert np.any(terminated) and np.any(truncated)  # random play dies; survivors hit the limit
    # a death on the limit's step is both (gymnax's rule: terminated wins for the bootstrap)


# Snake's and Game2048's masked sampling is checked in the fast tier by the contract suite
@pytest.mark.parametrize("name, options", [pytest.param("Snake-v1", {"num_rows": 6, "num_cols": 6}, marks=pytest.mark.slow),
                                           pytest.param("Maze-v0", {}, marks=pytest.mark.slow)])
def test_the_masked_policy_never_samples_an_illegal_action(name, options):
    env, params = adapter.make(name, options)
    spec = EnvSpec(f"jumanji/{name}", tuple(env.observation_space(params).shape), True, env.num_actions,
                   None, None, params.max_steps_in_episode, action_mask=env.action_mask)
    actor = Actor(spec, NetworkConfig(hidden_sizes=(16,)))
    num_envs, num_steps = 16, 48
    obs, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(jax.random.PRNGKey(0), num_envs),
                                                         params)
    actor_params = actor.init(jax.random.PRNGKey(1), obs)
    # push the policy towards action 0 (often illegal at a wall): the mask must still win
    bias = actor_params["params"]["Dense_0"]["bias"]
    actor_params["params"]["Dense_0"]["bias"] = bias.at[0].set(20.0)
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    @jax.jit
    def rollout(key, obs, state):
        def _step(carry, step_key):
            obs, state = carry
            action_key, env_key = jax.random.split(step_key)
            action = Categorical().sample(action_key, actor.apply(actor_params, obs))
            mask = obs[:, -env.num_actions:]
            legal = jnp.take_along_axis(mask, action[:, None], axis=1)[:, 0]
            obs, state, *_ = step(jax.random.split(env_key, num_envs), state, action, params)
            return (obs, state), (legal, mask.min(axis=1), mask.max(axis=1))

        return jax.lax.scan(_step, (obs, state), jax.random.split(key, num_steps))[1]

    legal, some_illegal, any_legal = map(np.asarray, rollout(jax.random.PRNGKey(2), obs, state))
    assert np.all(legal[any_legal == 1] == 1)
    assert np.mean(some_illegal == 0) > 0.1  # masks with illegal actions were met often


def test_bad_ids_and_options_are_config_errors():
    with pytest.raises(ConfigError, match="not one Discrete.*jumanji/Snake-v1"):
        adapter.make("Tetris-v0", {})
    with pytest.raises(ConfigError, match="unknown id"):
        adapter.make("Nope-v0", {})
    with pytest.raises(ConfigError, match="env.params.rows.*allowed.*num_rows"):
        adapter.make("Snake-v1", {"rows": 6})
    with pytest.raises(ConfigError, match="env.params.num_rows"):
        adapter.make("Snake-v1", {"num_rows": "six"})
    with pytest.raises(ConfigError, match="env.params.max_steps_in_episode"):
        adapter.make("Snake-v1", {"max_steps_in_episode": -1})


@pytest.mark.parametrize("algo", cli_lifecycle.matrix_params("jumanji"))
def test_cli_train_evaluate_gif_kill_and_resume(algo, tmp_path):
    """Through the CLI with a user's defaults: train, evaluate (--gif), SIGKILL after a checkpoint,
    resume= -> metrics.csv bitwise the uninterrupted run's (tests/cli_lifecycle.py)."""
    cli_lifecycle.check_library("jumanji", algo, tmp_path)

