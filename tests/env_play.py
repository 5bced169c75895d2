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
