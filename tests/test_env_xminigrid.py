"""The xminigrid adapter against the real xminigrid: spaces, and the gymnax 1.x truth (terminated vs
truncated, the pre-reset observation, no action lost at an episode's end, no reset inside xminigrid's
own step). Jit/vmap/scan and determinism are checked by the contract suite (tests/test_env_contract.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import xminigrid
from xminigrid.core.constants import Tiles

from purejaxrl_opt.envs import xminigrid as adapter  # noqa: E402
from purejaxrl_opt.config.errors import ConfigError  # noqa: E402
from env_play import check_reset_and_step_against_spaces, play  # noqa: E402  (tests/env_play.py)
from tests import cli_lifecycle

FORWARD, TURN_CW, TURN_CCW = 0, 1, 2  # xminigrid.core.actions.take_action's order
RIGHT, DOWN = 1, 2  # xminigrid's directions (DIRECTIONS: up, right, down, left)
LIMIT = 5  # the shortest path to Empty-5x5's goal takes exactly 5 steps
AGENT_CELL = (6, 3)  # the agent's cell in a 7x7 view (bottom centre, facing up)


@pytest.fixture(scope="module")
def empty5():
    """Empty-5x5 with a 5-step limit, its jitted step and reset (one compile each for the module)."""
    env, params = adapter.make("MiniGrid-Empty-5x5", {"max_steps_in_episode": LIMIT})
    return env, params, jax.jit(env.step), jax.jit(env.reset)


def _path_to_goal(state) -> tuple[int, ...]:
    """The actions from Empty's fixed start (facing right, the goal below and to the right) to the
    goal, read off the grid: east along the top row, one clockwise turn, south."""
    grid = np.asarray(state.timestep.state.grid)
    agent = state.timestep.state.agent
    (goal_y,), (goal_x,) = np.nonzero(grid[..., 0] == Tiles.GOAL)
    y, x = (int(v) for v in np.asarray(agent.position))
    assert int(agent.direction) == RIGHT and goal_x > x and goal_y > y
    return (FORWARD,) * (goal_x - x) + (TURN_CW,) + (FORWARD,) * (goal_y - y)


def test_ids_and_spaces(empty5):
    env, params, step, reset = empty5
    assert {"MiniGrid-Empty-5x5", "MiniGrid-DoorKey-8x8", "MiniGrid-MemoryS8"} <= set(adapter.ids())
    assert set(adapter.ids()) == {i for i in xminigrid.registered_environments() if i.startswith("MiniGrid-")}
    assert not any(i.startswith("XLand") for i in adapter.ids())  # they need a downloaded ruleset
    space = env.observation_space(params)
    assert space.shape == (7, 7, 2) and space.dtype == jnp.uint8
    assert env.action_space(params).n == 6 and params.max_steps_in_episode == LIMIT
    space, state = check_reset_and_step_against_spaces(env, params, reset, step, FORWARD)
    # xminigrid's defaults: MemoryS8 sees 3x3, the others 7x7; the episode limits are MiniGrid's
    memory, memory_params = adapter.make("MiniGrid-MemoryS8", {})
    assert memory.observation_space(memory_params).shape == (3, 3, 2)
    assert memory_params.max_steps_in_episode == 5 * 8 ** 2
    assert adapter.make("MiniGrid-Empty-6x6", {})[1].max_steps_in_episode == 4 * 6 * 6
    wide, wide_params = adapter.make("MiniGrid-Empty-5x5", {"view_size": 5})
    assert wide.observation_space(wide_params).shape == (5, 5, 2)
    flat, flat_params = adapter.make("MiniGrid-Empty-5x5", {"flatten": True})
    assert flat.observation_space(flat_params).shape == (98,)
    assert np.asarray(jax.jit(env.render_frame)(state, params)).shape == (80, 80, 3)


def test_goal_reached_is_a_termination_with_the_final_observation(empty5):
    """The goal is reached on the step the time limit falls: a termination (discount 0), not a
    truncation; the observation before the reset is in info["final_observation"]."""
    env, params, step, reset = empty5
    start, state = reset(jax.random.PRNGKey(0), params)
    to_goal = _path_to_goal(state)
    assert to_goal == (FORWARD, FORWARD, TURN_CW, FORWARD, FORWARD)
    state, out = play(step, state, to_goal, params)
    for obs, reward, terminated, truncated, _ in out[:-1]:
        assert not terminated and not truncated and reward == 0
    obs, reward, terminated, truncated, info = out[-1]
    assert terminated and not truncated
    assert reward > 0 and np.isclose(float(reward), 1 - 0.9 * LIMIT / LIMIT)  # xminigrid's reward
    assert info["discount"] == 0
    final = np.asarray(info["final_observation"])
    assert final[AGENT_CELL + (0,)] == Tiles.GOAL  # the agent stands on the goal, pre-reset
    assert np.asarray(start)[AGENT_CELL + (0,)] != Tiles.GOAL
    np.testing.assert_array_equal(obs, start)  # Empty's start is fixed: the reset happened in the same step
    assert int(state.timestep.state.step_num) == 0
    # no lost action: the very next step acts (the agent moves east: its new cell is the start's
    # cell in front of it)
    obs, state, *_ = step(jax.random.PRNGKey(9), state, FORWARD, params)
    np.testing.assert_array_equal(np.asarray(state.timestep.state.agent.position), (1, 2))
    # xminigrid's own step does not reset: after the LAST step it goes on from the terminal state
    xm_env, xm_params = xminigrid.make("MiniGrid-Empty-5x5", max_steps=LIMIT)
    timestep = xm_env.reset(xm_params, jax.random.PRNGKey(0))
    for action in to_goal:
        timestep = xm_env.step(xm_params, timestep, action)
    assert timestep.last() and float(timestep.discount) == 0
    after = xm_env.step(xm_params, timestep, TURN_CW)
    assert int(after.state.step_num) == LIMIT + 1
    np.testing.assert_array_equal(np.asarray(after.state.agent.position), (3, 3))


def test_time_limit_is_a_truncation(empty5):
    env, params, step, reset = empty5
    start, state = reset(jax.random.PRNGKey(0), params)
    actions = (TURN_CCW, TURN_CCW, TURN_CW, TURN_CW, TURN_CW, FORWARD)
    state, out = play(step, state, actions, params)
    assert [(bool(te), bool(tr)) for _, _, te, tr, _ in out[:LIMIT]] == [(False, False)] * 4 + [(False, True)]
    obs, reward, _, _, info = out[LIMIT - 1]
    assert reward == 0 and info["discount"] == 1  # xminigrid: LAST with discount 1
    final = np.asarray(info["final_observation"])
    assert not np.array_equal(final, np.asarray(start))  # it turned: it faces down, the view differs
    np.testing.assert_array_equal(obs, start)
    # the first action of the next episode acts: FORWARD from the start moves east
    np.testing.assert_array_equal(np.asarray(state.timestep.state.agent.position), (1, 2))
    assert not out[LIMIT][2] and not out[LIMIT][3]


def test_bad_ids_and_options_are_config_errors():
    with pytest.raises(ConfigError, match="MiniGrid-Empty-5x5") as error:
        adapter.make("MiniGrid-Nope", {})
    assert "XLand-MiniGrid" not in str(error.value)
    with pytest.raises(ConfigError, match="xminigrid/XLand-MiniGrid-R1-9x9"):
        adapter.make("XLand-MiniGrid-R1-9x9", {})
    with pytest.raises(ConfigError, match=r"env.params.max_step\b.*allowed.*max_steps_in_episode.*view_size"):
        adapter.make("MiniGrid-Empty-5x5", {"max_step": 3})
    with pytest.raises(ConfigError, match="env.params.max_steps_in_episode"):
        adapter.make("MiniGrid-Empty-5x5", {"max_steps_in_episode": 0})
    with pytest.raises(ConfigError, match="env.params.view_size.*odd"):
        adapter.make("MiniGrid-Empty-5x5", {"view_size": 4})
    with pytest.raises(ConfigError, match="env.params.flatten"):
        adapter.make("MiniGrid-Empty-5x5", {"flatten": "yes"})
    with pytest.raises(ConfigError, match="env.params.one_hot"):
        adapter.make("MiniGrid-Empty-5x5", {"one_hot": 1})


def test_one_hot_codes_the_library_observation():
    """MemoryS8 (3x3 view), a start whose view holds the object to remember: the one-hot cells are
    exactly the library's (tile, colour) ids, tile block first; flattened the same values."""
    raw_env, params = adapter.make("MiniGrid-MemoryS8", {})
    hot_env, _ = adapter.make("MiniGrid-MemoryS8", {"one_hot": True})
    flat_env, _ = adapter.make("MiniGrid-MemoryS8", {"one_hot": True, "flatten": True})
    assert hot_env.observation_space(params).shape == (3, 3, 25)
    assert hot_env.observation_space(params).dtype == jnp.float32 and hot_env.observation_space(params).high == 1
    assert flat_env.observation_space(params).shape == (225,)
    keys = jax.random.split(jax.random.PRNGKey(0), 64)
    raw, _ = jax.vmap(raw_env.reset, in_axes=(0, None))(keys, params)
    hot, _ = jax.vmap(hot_env.reset, in_axes=(0, None))(keys, params)
    flat, _ = jax.vmap(flat_env.reset, in_axes=(0, None))(keys, params)
    raw, hot = np.asarray(raw), np.asarray(hot)
    assert hot.dtype == np.float32 and set(np.unique(hot)) == {0.0, 1.0}
    np.testing.assert_array_equal(hot[..., :13].sum(-1), 1)
    np.testing.assert_array_equal(hot[..., 13:].sum(-1), 1)
    np.testing.assert_array_equal(hot[..., :13].argmax(-1), raw[..., 0])
    np.testing.assert_array_equal(hot[..., 13:].argmax(-1), raw[..., 1])
    np.testing.assert_array_equal(np.asarray(flat), hot.reshape(64, -1))
    # some starts see the ball or the key (the object to remember) in the view's corner
    assert np.isin(raw[:, 2, 0, 0], (Tiles.BALL, Tiles.KEY)).any()


def test_step_batch_equals_vmapped_step():
    """The batch-level reset (ResetWhereDone: grids generated only on steps where some episode ended)
    gives ``vmap(env.step)``'s numbers, across corridor ends and time limits (MemoryS8 with a 6-step
    limit: random starts along the corridor, its ends a few steps away)."""
    env, params = adapter.make("MiniGrid-MemoryS8", {"max_steps_in_episode": 6})
    num_envs, num_steps = 8, 20

    def rollout(key, step):
        reset_key, key = jax.random.split(key)
        obs, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(reset_key, num_envs), params)

        def _step(state, step_key):
            action_key, env_key = jax.random.split(step_key)
            action = jax.random.randint(action_key, (num_envs,), 0, 3)  # forward and the two turns
            obs, state, reward, terminated, truncated, info = step(
                jax.random.split(env_key, num_envs), state, action, params)
            return state, (obs, reward, terminated, truncated, info["final_observation"])

        return jax.lax.scan(_step, state, jax.random.split(key, num_steps))

    vmapped = jax.vmap(env.step, in_axes=(0, 0, 0, None))
    both = jax.jit(lambda key: (rollout(key, vmapped), rollout(key, env.step_batch)))(jax.random.PRNGKey(4))
    jax.tree_util.tree_map(np.testing.assert_array_equal, both[0], both[1])
    _, (obs, reward, terminated, truncated, final) = both[0]
    assert np.any(terminated) and np.any(truncated)  # both kinds of end happen in the rollout


def test_the_memory_tuned_file_composes_the_gru_with_a_view_that_needs_memory():
    """``algo=ppo env=xminigrid/MiniGrid-MemoryS8`` picks conf/tuned/ppo_xminigrid/MiniGrid-MemoryS8.yaml: the GRU
    with a head layer, one-hot cells, three times the entropy bonus, 12M steps and a 5x5 view (where memory is
    required, the test below), which the adapter turns into a [5, 5, 25] observation; the feed-forward comparison
    (recurrent none, no head layers) validates too."""
    from purejaxrl_opt.config.schema import from_dictconfig
    from tests.conftest import compose

    gru = compose("algo=ppo", "env=xminigrid/MiniGrid-MemoryS8")
    mlp = compose("algo=ppo", "env=xminigrid/MiniGrid-MemoryS8", "network.recurrent=none", "network.head_sizes=[]")
    trpo = compose("algo=trpo", "env=xminigrid/MiniGrid-MemoryS8")
    run = from_dictconfig(gru)
    net = run.network
    assert (net.hidden_sizes, net.recurrent, net.recurrent_size, net.head_sizes) == ((64,), "gru", 64, (64,))
    assert dict(run.env.params) == {"one_hot": True, "view_size": 5}
    assert (run.algo.num_envs, run.algo.num_steps, run.algo.num_minibatches, run.algo.lr, run.algo.ent_coef) == (64, 64, 8, 5e-4, 0.03)
    assert run.total_timesteps == 12_000_000
    assert (from_dictconfig(mlp).network.recurrent, from_dictconfig(mlp).network.head_sizes) == ("none", ())
    assert from_dictconfig(trpo).network.recurrent == "none"  # the file is PPO's only
    env, params = adapter.make("MiniGrid-MemoryS8", dict(run.env.params))
    obs, _ = env.reset(jax.random.PRNGKey(0), params)
    assert obs.shape == (5, 5, 25) and obs.dtype == jnp.float32


def _memory_sightings(view_size: int, key) -> dict:
    """{(row, col, direction): set of the objects in view} over every floor cell and heading of one
    MemoryS8 layout, for the layout the adapter resets to and xminigrid's transparent field of view
    (what the adapter's observation is): "cue" (the object to remember, start room), "upper", "lower"."""
    from xminigrid.core.observation import transparent_field_of_view

    env, params = adapter.make("MiniGrid-MemoryS8", {"view_size": view_size})
    _, state = env.reset(key, params)
    inner = state.timestep.state
    grid = np.asarray(inner.grid)
    cells = [(r, c) for r in range(grid.shape[0]) for c in range(grid.shape[1])
             if grid[r, c, 0] in (Tiles.BALL, Tiles.KEY)]
    assert len(cells) == 3 and (2, 1) in cells  # xminigrid's Memory: the cue at (2, 1), the ends at the corridor's end
    ends = sorted(rc for rc in cells if rc != (2, 1))
    names = {(2, 1): "cue", ends[0]: "upper", ends[1]: "lower"}
    floor_tile = grid[3, 4]  # the start room's doorway into the corridor
    only = {}
    for rc, name in names.items():  # one grid per object, the other two replaced by floor
        g = grid.copy()
        for other in names:
            if other != rc:
                g[other] = floor_tile
        only[name] = jnp.asarray(g)
    floor = [(r, c) for r in range(grid.shape[0]) for c in range(grid.shape[1]) if grid[r, c, 0] == Tiles.FLOOR]
    poses = [(r, c, d) for r, c in floor for d in range(4)]

    @jax.jit
    def in_view(g):  # [poses]: is any object in the view of each pose
        def one(position, direction):
            agent = inner.agent.replace(position=position, direction=direction)
            tiles = transparent_field_of_view(g, agent, view_size, view_size)[..., 0]
            return jnp.isin(tiles, jnp.array([Tiles.BALL, Tiles.KEY])).any()

        return jax.vmap(one)(jnp.array([(r, c) for r, c, _ in poses]), jnp.array([d for *_, d in poses]))

    hits = {name: np.asarray(in_view(g)) for name, g in only.items()}
    return {pose: {name for name in hits if hits[name][i]} for i, pose in enumerate(poses)}


@pytest.mark.parametrize("seed", [0, 1])
def test_memory_s8_needs_memory_with_a_5x5_view_but_not_with_7x7(seed):
    """With the 7x7 view (the tuned file's), the fork facing west shows the cue and both end objects at
    once, so a memoryless policy can solve MemoryS8; with 5x5 no cell and heading shows the cue with an
    end object, and the cue is in view facing west from every start cell of the corridor."""
    key = jax.random.PRNGKey(seed)
    seven = _memory_sightings(7, key)
    assert seven[(3, 6, 3)] == {"cue", "upper", "lower"}  # the fork (row 3, col 6), facing west
    five = _memory_sightings(5, key)
    assert not any("cue" in s and len(s) > 1 for s in five.values())
    assert all("cue" in five[(3, c, 3)] for c in range(1, 6))  # one look back from any start
    assert five[(3, 6, 0)] == {"upper"} and five[(3, 6, 2)] == {"lower"}  # at the fork, the choice is in view


@pytest.mark.parametrize("algo", cli_lifecycle.matrix_params("xminigrid"))
def test_cli_train_evaluate_gif_kill_and_resume(algo, tmp_path):
    """Through the CLI with a user's defaults: train, evaluate (--gif), SIGKILL after a checkpoint,
    resume= -> metrics.csv bitwise the uninterrupted run's (tests/cli_lifecycle.py)."""
    cli_lifecycle.check_library("xminigrid", algo, tmp_path)

