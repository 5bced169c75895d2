"""``envs.protocol.flat_over_lanes``: a batch step vmapped over lanes runs once on the lanes' envs as one
flat batch -- the numbers of the plain vmap, bitwise, one batch axis in the program, and (for the
``ResetWhereDone`` adapters) the batch's reset still a ``cond``, not a select that runs it every step."""

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxrl_opt.envs.protocol import flat_over_lanes


def _traced_shapes_and_fn():
    shapes = []

    def batch_step(keys, state, action, params):
        shapes.append(state["x"].shape)
        noise = jax.vmap(lambda key: jax.random.uniform(key))(keys)
        x = state["x"] * params["scale"] + action + noise[:, None]
        return x.sum(-1), {"x": x, "t": state["t"] + 1}

    return shapes, batch_step


def _inputs(lanes, num_envs, dim=3):
    keys = jax.random.split(jax.random.key(0), lanes * num_envs).reshape(lanes, num_envs)
    x = jnp.arange(lanes * num_envs * dim, dtype=jnp.float32).reshape(lanes, num_envs, dim) / 7
    state = {"x": x, "t": jnp.zeros((lanes, num_envs), jnp.int32)}
    action = jnp.linspace(-1, 1, lanes * num_envs * dim).reshape(lanes, num_envs, dim)
    return keys, state, action


def test_lanes_run_as_one_flat_batch_with_each_lanes_numbers():
    shapes, batch_step = _traced_shapes_and_fn()
    keys, state, action = _inputs(lanes=3, num_envs=4)
    params = {"scale": jnp.float32(1.5)}
    flat = jax.jit(jax.vmap(flat_over_lanes(batch_step), in_axes=(0, 0, 0, None)))(keys, state, action, params)
    assert shapes[-1] == (12, 3)  # the batch step the program runs: the 3 x 4 envs as one batch
    one = jax.jit(batch_step)
    for lane in range(3):
        alone = one(keys[lane], jax.tree.map(lambda v: v[lane], state), action[lane], params)
        jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a)[lane], np.asarray(b)), flat, alone)


def test_an_unbatched_input_is_broadcast_and_two_vmaps_flatten_into_one_batch():
    shapes, batch_step = _traced_shapes_and_fn()
    keys, state, action = _inputs(lanes=2 * 3, num_envs=2)
    params = {"scale": jnp.float32(0.5)}
    fn = flat_over_lanes(batch_step)
    nested = jax.vmap(jax.vmap(fn, in_axes=(0, 0, None, None)), in_axes=(0, 0, None, None))
    split = jax.tree.map(lambda v: v.reshape((2, 3) + v.shape[1:]), (keys, state))
    out = jax.jit(nested)(*split, action[0], params)
    assert shapes[-1] == (12, 3)
    plain = jax.vmap(jax.vmap(batch_step, in_axes=(0, 0, None, None)), in_axes=(0, 0, None, None))
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)),
                 out, jax.jit(plain)(*split, action[0], params))


def test_lanes_with_their_own_params_fall_back_to_the_plain_vmap():
    shapes, batch_step = _traced_shapes_and_fn()
    keys, state, action = _inputs(lanes=2, num_envs=4)
    params = {"scale": jnp.asarray([1.0, -2.0], jnp.float32)}
    out = jax.jit(jax.vmap(flat_over_lanes(batch_step)))(keys, state, action, params)
    assert set(shapes) == {(4, 3)}  # the N-env step, vmapped
    expected = jax.jit(jax.vmap(batch_step))(keys, state, action, params)
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), out, expected)


def _primitives(jaxpr, found=None):
    found = set() if found is None else found
    for eqn in jaxpr.eqns:
        found.add(eqn.primitive.name)
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                if isinstance(sub, jax.extend.core.ClosedJaxpr):
                    _primitives(sub.jaxpr, found)
                elif isinstance(sub, jax.extend.core.Jaxpr):
                    _primitives(sub, found)
    return found


def test_jumanji_lanes_equal_each_lane_alone_and_the_reset_stays_a_cond(monkeypatch):
    """The real adapter (Jumanji's Snake: deaths and a time limit reset envs): random play over 3 lanes
    of 4 envs gives each lane's numbers, bitwise, and the lane-vmapped step keeps the reset's cond
    (with the plain nested vmap instead, the cond becomes a select that runs the reset every step)."""
    from purejaxrl_opt.envs import jumanji as adapter
    from purejaxrl_opt.envs import protocol

    env, params = adapter.make("Snake-v1", {"num_rows": 6, "num_cols": 6, "max_steps_in_episode": 6})
    num_envs, num_steps = 4, 10

    def rollout(key):
        reset_key, key = jax.random.split(key)
        obs, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(reset_key, num_envs), params)

        def _step(state, step_key):
            action_key, env_key = jax.random.split(step_key)
            action = jax.random.randint(action_key, (num_envs,), 0, 4)
            obs, state, reward, terminated, truncated, info = env.step_batch(
                jax.random.split(env_key, num_envs), state, action, params)
            return state, (obs, reward, terminated, truncated, info["final_observation"])

        return jax.lax.scan(_step, state, jax.random.split(key, num_steps))[1]

    keys = jax.random.split(jax.random.PRNGKey(3), 3)
    lanes = jax.jit(jax.vmap(rollout))(keys)
    one = jax.jit(rollout)
    for lane in range(3):
        jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a)[lane], np.asarray(b)),
                     lanes, one(keys[lane]))
    assert np.any(lanes[2]) and np.any(lanes[3])  # deaths and time limits: the reset ran
    _, state = jax.vmap(jax.vmap(env.reset, in_axes=(0, None)), in_axes=(0, None))(
        jax.random.split(jax.random.PRNGKey(0), 12).reshape(3, 4, 2), params)
    step_keys = jax.random.split(jax.random.PRNGKey(1), 12).reshape(3, 4, 2)

    def lane_step_primitives():
        return _primitives(jax.make_jaxpr(jax.vmap(env.step_batch, in_axes=(0, 0, 0, None)))(
            step_keys, state, jnp.zeros((3, 4), jnp.int32), params).jaxpr)

    assert "cond" in lane_step_primitives()
    monkeypatch.setattr(protocol, "flat_over_lanes", lambda fn: fn)  # the plain nested vmap
    assert "cond" not in lane_step_primitives()
