"""The Craftax adapter against the real library (craftax 1.6.x).

Craftax compiles for tens of seconds, so the fast tier shares one env (Craftax-Classic-Symbolic-v1)
and two compiled functions (a batched reset and a two-step scan of ``step_batch``) across the module;
the episode limit is a traced parameter, so the time-limit case reuses them. Pixel and full-Craftax
ids, the per-env ``reset_ratio = 1`` equivalence, seeds under ``vmap`` and rendering are in the slow tier.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxrl_opt.envs import craftax as craftax_adapter
from purejaxrl_opt.config.errors import ConfigError
from tests import cli_lifecycle

NAME = "Craftax-Classic-Symbolic-v1"
NUM_ENVS, RESET_RATIO, NUM_STEPS = 8, 4, 2  # 2 pool worlds for 8 envs
# Classic symbolic observation: the 7 x 9 x (17 blocks + 4 mobs) map, then 12 inventory entries, then
# health, food, drink, energy (each / 10), ...
HEALTH_INDEX = 7 * 9 * 21 + 12


@pytest.fixture(scope="module")
def craftax():
    env, params = craftax_adapter.make(NAME, {"reset_ratio": RESET_RATIO})
    reset = jax.jit(jax.vmap(env.reset, in_axes=(0, None)))

    @jax.jit
    def rollout(keys, state, actions, params):  # keys, actions [T, N]
        def _step(state, x):
            k, a = x
            obs, state, reward, terminated, truncated, info = env.step_batch(k, state, a, params)
            return state, (obs, state, reward, terminated, truncated, info)

        return jax.lax.scan(_step, state, (keys, actions))

    keys = jax.random.split(jax.random.PRNGKey(0), NUM_ENVS)
    obs, state = reset(keys, params)
    return dict(env=env, params=params, reset=reset, rollout=rollout, obs=obs, state=state)


def _keys(seed):
    return jax.random.split(jax.random.PRNGKey(seed), NUM_STEPS * NUM_ENVS).reshape(NUM_STEPS, NUM_ENVS, -1)


def _noop(seed=0):
    return jnp.zeros((NUM_STEPS, NUM_ENVS), jnp.int32)  # action 0 = NOOP


def _tree_equal(a, b):
    return all(np.array_equal(np.asarray(x), np.asarray(y))
               for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def _rows(tree, index):
    return jax.tree.map(lambda x: x[index], tree)


def test_ids_and_config_errors():
    assert craftax_adapter.LIBRARY == "craftax"
    assert set(craftax_adapter.ids()) == {"Craftax-Classic-Symbolic-v1", "Craftax-Classic-Pixels-v1",
                                          "Craftax-Symbolic-v1", "Craftax-Pixels-v1"}
    with pytest.raises(ConfigError, match="Craftax-Classic-Symbolic-v1"):
        craftax_adapter.make("Craftax-Nope-v1", {})
    with pytest.raises(ConfigError, match="env.params.bogus.*allowed.*max_timesteps"):
        craftax_adapter.make(NAME, {"bogus": 1})
    with pytest.raises(ConfigError, match="env.params.reset_ratio"):
        craftax_adapter.make(NAME, {"reset_ratio": 0})
    with pytest.raises(ConfigError, match="env.params.day_length"):
        craftax_adapter.make(NAME, {"day_length": "long"})
    env, params = craftax_adapter.make(NAME, {"max_steps_in_episode": 50, "day_length": 100})
    assert params.max_steps_in_episode == 50 and params.inner.max_timesteps == 50
    assert params.inner.day_length == 100
    assert craftax_adapter.make(NAME, {})[1].max_steps_in_episode == 10000  # the library's limit
    assert env.num_resets(64) == 64 // craftax_adapter.DEFAULT_RESET_RATIO
    assert env.keyed_reset and not env.action_mask


# the fast tier's Craftax contract checks (the contract suite runs Craftax in the slow tier): these
# reuse the module's one compiled rollout
def test_shapes_dtypes_against_spaces(craftax):
    env, params = craftax["env"], craftax["params"]
    obs_space, action_space = env.observation_space(params), env.action_space(params)
    assert obs_space.shape == (1345,) and obs_space.dtype == jnp.float32
    assert action_space.n == 17
    obs = craftax["obs"]
    assert obs.shape == (NUM_ENVS,) + obs_space.shape and obs.dtype == jnp.float32
    assert float(obs.min()) >= 0.0 and float(obs.max()) <= 1.0
    actions = jax.random.randint(jax.random.PRNGKey(3), (NUM_STEPS, NUM_ENVS), 0, action_space.n)
    _, (obs, _, reward, terminated, truncated, info) = craftax["rollout"](
        _keys(1), craftax["state"], actions, params)
    assert obs.shape == (NUM_STEPS, NUM_ENVS) + obs_space.shape and obs.dtype == jnp.float32
    assert info["final_observation"].shape == obs.shape
    assert reward.shape == (NUM_STEPS, NUM_ENVS) and reward.dtype == jnp.float32
    assert terminated.dtype == jnp.bool_ and truncated.dtype == jnp.bool_
    assert info["achievements"].shape == (NUM_STEPS, NUM_ENVS, 22) and info["achievements"].dtype == jnp.bool_
    # a fresh world: full health (9 / 10) in the observation
    np.testing.assert_allclose(np.asarray(craftax["obs"][:, HEALTH_INDEX]), 0.9, atol=1e-3)


def test_deterministic_under_the_same_key(craftax):
    params = craftax["params"]
    keys = jax.random.split(jax.random.PRNGKey(0), NUM_ENVS)
    obs, state = craftax["reset"](keys, params)
    assert _tree_equal((obs, state), (craftax["obs"], craftax["state"]))
    other_obs, _ = craftax["reset"](jax.random.split(jax.random.PRNGKey(1), NUM_ENVS), params)
    assert not np.array_equal(np.asarray(other_obs), np.asarray(obs))  # another key, another world
    actions = jax.random.randint(jax.random.PRNGKey(3), (NUM_STEPS, NUM_ENVS), 0, 17)
    first = craftax["rollout"](_keys(1), state, actions, params)
    second = craftax["rollout"](_keys(1), state, actions, params)
    assert _tree_equal(first, second)


def _pool(craftax, step_keys, params):
    """The worlds ``step_batch`` generated from ``step_keys [N]``: the library's reset under the second
    half of each env's key split (pool world k = row k)."""
    reset_keys = jax.vmap(jax.random.split)(step_keys)[:, 1]
    return craftax["reset"](reset_keys, params)


def test_death_is_terminated_keeps_final_obs_and_resets_to_a_real_reset_state(craftax):
    params = craftax["params"]
    state = craftax["state"]
    dead = jnp.arange(NUM_ENVS) % 3 == 0  # envs 0, 3, 6 die on the first step: 3 ends, 2 pool worlds
    state = state.replace(player_health=jnp.where(dead, 0, state.player_health),
                          player_recover=jnp.where(dead, 0.0, state.player_recover))
    keys = _keys(5)
    _, (obs, new_state, reward, terminated, truncated, info) = craftax["rollout"](keys, state, _noop(), params)
    np.testing.assert_array_equal(np.asarray(terminated[0]), np.asarray(dead))
    assert not bool(truncated.any())
    final = info["final_observation"][0]
    # the pre-reset observation is the dead player's; the returned one a fresh world's
    np.testing.assert_allclose(np.asarray(final[dead, HEALTH_INDEX]), 0.0)
    np.testing.assert_allclose(np.asarray(obs[0][dead, HEALTH_INDEX]), 0.9, atol=1e-3)
    alive = ~dead
    np.testing.assert_array_equal(np.asarray(final[alive]), np.asarray(obs[0][alive]))
    # the j-th env that ended starts pool world j mod 2, the library's reset under its key
    index = np.asarray(info["reset_index"][0])
    np.testing.assert_array_equal(index[np.asarray(dead)], [0, 1, 0])
    pool_obs, pool_state = _pool(craftax, keys[0], params)
    for env_i in np.flatnonzero(np.asarray(dead)):
        k = index[env_i]
        np.testing.assert_array_equal(np.asarray(obs[0][env_i]), np.asarray(pool_obs[k]))
        assert _tree_equal(_rows(_rows(new_state, 0), env_i), _rows(pool_state, k))
    # a reset state is a start state: step 0, and the next step carries on from it
    assert np.all(np.asarray(new_state.timestep[0])[np.asarray(dead)] == 0)
    assert not bool(terminated[1].any())


def test_one_death_starts_pool_world_zero(craftax):
    """One end in a step: the env that ended starts pool world 0, exactly the world the library's
    reset makes from that env's reset key, and every other env carries on untouched."""
    params, state = craftax["params"], craftax["state"]
    dead = jnp.arange(NUM_ENVS) == 5
    state = state.replace(player_health=jnp.where(dead, 0, state.player_health),
                          player_recover=jnp.where(dead, 0.0, state.player_recover))
    keys = _keys(11)
    _, (obs, new_state, _, terminated, _, info) = craftax["rollout"](keys, state, _noop(), params)
    np.testing.assert_array_equal(np.asarray(terminated[0]), np.asarray(dead))
    assert int(info["reset_index"][0][5]) == 0
    pool_obs, pool_state = _pool(craftax, keys[0], params)
    np.testing.assert_array_equal(np.asarray(obs[0][5]), np.asarray(pool_obs[0]))
    assert _tree_equal(_rows(_rows(new_state, 0), 5), _rows(pool_state, 0))
    alive = np.flatnonzero(~np.asarray(dead))
    np.testing.assert_array_equal(np.asarray(info["final_observation"][0][alive]), np.asarray(obs[0][alive]))


def test_time_limit_is_truncated_not_terminated(craftax):
    env, params = craftax["env"], craftax["params"]
    limited = params.replace(inner=params.inner.replace(max_timesteps=2))
    keys = _keys(7)
    _, (obs, new_state, _, terminated, truncated, info) = craftax["rollout"](
        keys, craftax["state"], _noop(), limited)
    assert not bool(truncated[0].any()) and bool(truncated[1].all())
    assert not bool(terminated.any())
    assert bool(env.is_truncated(_rows(_rows(new_state, 0), 0), limited)) is False
    # every env ended at once: more ends than pool worlds, so worlds are shared (j mod 2)
    np.testing.assert_array_equal(np.asarray(info["reset_index"][1]), np.arange(NUM_ENVS) % 2)
    pool_obs, pool_state = _pool(craftax, keys[1], limited)
    np.testing.assert_array_equal(np.asarray(obs[1]), np.asarray(pool_obs[np.arange(NUM_ENVS) % 2]))
    assert _tree_equal(_rows(new_state, 1), _rows(pool_state, np.arange(NUM_ENVS) % 2))
    # the final observation is the last one of the truncated episode (not the reset one), and the
    # episode's state had reached the limit
    final = info["final_observation"][1]
    assert not np.array_equal(np.asarray(final), np.asarray(obs[1]))
    np.testing.assert_allclose(np.asarray(final[:, HEALTH_INDEX]), 0.9, atol=1e-3)


# ----------------------------------------------------------------------------------- slow tier
@pytest.mark.slow
def test_reset_ratio_one_equals_per_env_step():
    env, params = craftax_adapter.make(NAME, {"reset_ratio": 1})
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    _, state = jax.vmap(env.reset, in_axes=(0, None))(keys, params)
    state = state.replace(player_health=state.player_health.at[1].set(0))
    state = state.replace(player_recover=state.player_recover.at[1].set(0.0))
    step_keys = jax.random.split(jax.random.PRNGKey(1), 4)
    action = jnp.array([0, 1, 5, 16])
    batch = jax.jit(env.step_batch)(step_keys, state, action, params)
    per_env = jax.jit(jax.vmap(env.step, in_axes=(0, 0, 0, None)))(step_keys, state, action, params)
    info = dict(batch[5])
    del info["reset_index"]
    assert bool(batch[3][1])
    assert _tree_equal(batch[:5] + (info,), per_env)


@pytest.mark.slow
def test_step_batch_under_vmap_over_seeds_equals_each_seed():
    env, params = craftax_adapter.make(NAME, {"reset_ratio": 2})
    keys = jax.random.split(jax.random.PRNGKey(0), 2 * 4).reshape(2, 4, -1)
    _, state = jax.vmap(jax.vmap(env.reset, in_axes=(0, None)), in_axes=(0, None))(keys, params)
    state = state.replace(player_health=state.player_health.at[0, 1].set(0))
    step_keys = jax.random.split(jax.random.PRNGKey(1), 8).reshape(2, 4, -1)
    action = jnp.zeros((2, 4), jnp.int32)
    step = jax.jit(env.step_batch)
    lanes = jax.jit(jax.vmap(env.step_batch, in_axes=(0, 0, 0, None)))(step_keys, state, action, params)
    for lane in range(2):
        assert _tree_equal(_rows(lanes, lane), step(step_keys[lane], _rows(state, lane), action[lane], params))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["Craftax-Classic-Pixels-v1", "Craftax-Symbolic-v1", "Craftax-Pixels-v1"])
def test_other_ids_shapes_and_death(name):
    env, params = craftax_adapter.make(name, {"reset_ratio": 2})
    space = env.observation_space(params)
    expected = {"Craftax-Classic-Pixels-v1": (63, 63, 3), "Craftax-Symbolic-v1": (8268,),
                "Craftax-Pixels-v1": (130, 110, 3)}[name]
    assert space.shape == expected and space.dtype == jnp.float32
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    obs, state = jax.vmap(env.reset, in_axes=(0, None))(keys, params)
    assert obs.shape == (4,) + expected and obs.dtype == jnp.float32
    state = state.replace(player_health=state.player_health.at[2].set(0))
    obs, _, reward, terminated, truncated, info = jax.jit(env.step_batch)(
        jax.random.split(jax.random.PRNGKey(1), 4), state, jnp.zeros((4,), jnp.int32), params)
    np.testing.assert_array_equal(np.asarray(terminated), [False, False, True, False])
    assert not bool(truncated.any()) and reward.dtype == jnp.float32
    assert info["achievements"].shape[-1] == (22 if "Classic" in name else 67)
    assert not np.array_equal(np.asarray(info["final_observation"][2]), np.asarray(obs[2]))
    np.testing.assert_array_equal(np.asarray(info["final_observation"][0]), np.asarray(obs[0]))


@pytest.mark.slow
def test_render_frame_and_the_cnn_on_pixels():
    from purejaxrl_opt.config.schema import NetworkConfig
    from purejaxrl_opt.envs import EnvSpec
    from purejaxrl_opt.core.models.networks import Actor

    env, params = craftax_adapter.make("Craftax-Classic-Pixels-v1", {})
    obs, state = env.reset(jax.random.PRNGKey(0), params)
    frame = jax.jit(env.render_frame)(state, params)
    assert frame.shape == (9 * 16, 9 * 16, 3) and frame.dtype == jnp.uint8 and int(frame.max()) > 0
    spec = EnvSpec(f"craftax/{env.name}", tuple(obs.shape), True, 17, None, None, 10000)
    actor = Actor(spec, NetworkConfig(hidden_sizes=(64,), activation="relu", cnn_channels=(16,)))
    variables = actor.init(jax.random.PRNGKey(0), obs[None])
    out = jax.jit(actor.apply)(variables, jnp.stack([obs, obs]))
    assert out["logits"].shape == (2, 17) and bool(jnp.isfinite(out["logits"]).all())


@pytest.mark.parametrize("env_id", ["Craftax-Classic-Symbolic-v1", "Craftax-Symbolic-v1"])
def test_the_rnn_tuned_file_composes_their_ppo_rnn_network(env_id):
    """``tuned=ppo_craftax/<env>-rnn`` (experiments/side_by_side_craftax.py --algo ppo_rnn) gives
    Craftax_Baselines' ActorCriticRNN network (their parameter count) and validates; the plain env=...
    keeps the MLP."""
    from purejaxrl_opt.config.schema import from_dictconfig
    from tests.conftest import compose

    rnn = compose("algo=ppo", f"env=craftax/{env_id}", f"tuned=ppo_craftax/{env_id}-rnn")
    mlp = compose("algo=ppo", f"env=craftax/{env_id}")
    run = from_dictconfig(rnn)
    net = run.network
    assert run.env.id == f"craftax/{env_id}"
    assert (net.hidden_sizes, net.recurrent, net.recurrent_size, net.head_sizes, net.activation) == (
        (512,), "gru", 512, (512, 512), "relu")
    assert (run.algo.num_envs, run.algo.num_steps, run.algo.num_minibatches, run.algo.gae_lambda) == (64, 64, 8, 0.8)
    plain = from_dictconfig(mlp).network
    assert (plain.hidden_sizes, plain.recurrent, plain.head_sizes, plain.shared) == ((512, 512, 512), "none", (), False)
    # one embedding and GRU under two heads (network.shared), as their ActorCriticRNN: its parameter
    # count from their layers (flax GRUCell: input-side kernels and biases for r, z, n; hidden-side
    # kernels, a bias on n only), for this env's observation width
    assert net.shared
    from purejaxrl_opt import envs
    from purejaxrl_opt.core.stages.actor_critic import make_networks
    from purejaxrl_opt.core.models.networks import count_params

    _, _, spec = envs.make(run.env.id, run.env.params)
    networks = make_networks(spec, net)
    width, (obs_dim,) = 512, spec.obs_shape
    gru = 3 * (width * width + width) + 2 * width * width + (width * width + width)
    head = 2 * (width * width + width)
    theirs = (obs_dim * width + width) + gru + head + (width * spec.num_actions + spec.num_actions) + head + (width + 1)
    params = jax.eval_shape(networks.policy.init, jax.random.PRNGKey(0))
    assert count_params(params) == theirs, (count_params(params), theirs)
    assert networks.init_critic(jax.random.PRNGKey(0)) == {}


def test_gif_frames_render_inside_jit_without_a_texture_cache(craftax, tmp_path, monkeypatch):
    """``evaluate --gif`` renders Craftax inside jit. Craftax builds its textures on first render (from
    a cache file in its install directory, else from its PNGs, then writes that file); traced, that
    build failed (TracerArrayConversionError). The adapter builds the 16-pixel set on the host and
    writes nothing."""
    from craftax.craftax_classic import constants

    from purejaxrl_opt import evaluate

    cache = tmp_path / "texture_cache_classic.pbz2"
    monkeypatch.setattr(constants, "TEXTURE_CACHE_FILE", str(cache))  # no cache file
    constants.load_all_textures.cache_clear()
    craftax_adapter.frame_textures.cache_clear()
    env, params = craftax_adapter.make(NAME, {})
    states = [jax.device_get(_rows(craftax["state"], i)) for i in range(2)]
    frames = evaluate.render_frames(env, params, states)
    assert [f.shape for f in frames] == [(9 * 16, 9 * 16, 3)] * 2 and frames[0].dtype == np.uint8
    assert len(np.unique(frames[0].reshape(-1, 3), axis=0)) > 20  # textures, not a blank image
    assert not np.array_equal(frames[0], frames[1])  # two worlds
    assert not cache.exists()


@pytest.mark.parametrize("algo", cli_lifecycle.matrix_params("craftax"))
def test_cli_train_evaluate_gif_kill_and_resume(algo, tmp_path):
    """Through the CLI with a user's defaults: train, evaluate (--gif), SIGKILL after a checkpoint,
    resume= -> metrics.csv bitwise the uninterrupted run's (tests/cli_lifecycle.py)."""
    cli_lifecycle.check_library("craftax", algo, tmp_path)

