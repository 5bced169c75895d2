"""A helper of the env adapter tests (imported by them; not a test module)."""

import jax


def play(step, state, actions, params):
    """Steps ``state`` through ``actions`` with a jitted protocol ``step`` (key ``i`` at step ``i``):
    ``(state, [(obs, reward, terminated, truncated, info), ...])``."""
    out = []
    for i, action in enumerate(actions):
        obs, state, reward, terminated, truncated, info = step(jax.random.PRNGKey(i), state, action, params)
        out.append((obs, reward, terminated, truncated, info))
    return state, out


def check_reset_and_step_against_spaces(env, params, reset, step, action):
    """One jitted ``reset`` and ``step`` (with ``action``) give the observation space's shape and
    dtype, a float32 scalar reward, bool ``terminated``/``truncated`` and a final observation of the
    space's shape; returns ``(space, the state after the step)``."""
    import jax.numpy as jnp

    space = env.observation_space(params)
    obs, state = reset(jax.random.PRNGKey(0), params)
    assert obs.shape == space.shape and obs.dtype == space.dtype and space.contains(obs)
    obs, state, reward, terminated, truncated, info = step(jax.random.PRNGKey(1), state, action, params)
    assert obs.shape == space.shape and obs.dtype == space.dtype
    assert reward.dtype == jnp.float32 and reward.shape == ()
    assert terminated.dtype == jnp.bool_ and truncated.dtype == jnp.bool_
    assert info["final_observation"].shape == space.shape
    return space, state
