"""OmegaConf resolvers that composed configs may hold, registered before any config is resolved.

``${brax_ppo_num_steps:NUM_ENVS,UNROLL_LENGTH,UNROLLS_PER_ENV,NUM_MINIBATCHES,ENV_ID}``: the rollout
length of a Brax PPO config mapped onto ours at the run's ``algo.num_envs`` (the mapping:
purejaxrl_opt/envs/playground_ppo.py). Brax collects ``batch_size * num_minibatches`` unrolls of
``unroll_length`` steps per training step from its ``num_envs`` envs, i.e. ``UNROLLS_PER_ENV`` unrolls
per env; kept per env at any ``num_envs``, one update here is ``num_steps = UNROLL_LENGTH *
UNROLLS_PER_ENV`` steps of every env, and Brax's minibatch of whole unrolls stays whole only when
``num_envs * UNROLLS_PER_ENV`` splits into ``NUM_MINIBATCHES`` equal parts. Any other ``num_envs`` is a
ConfigError naming ``algo.num_envs`` and the allowed values. The value depends on the run's
``algo.num_envs``, so an override of it on the command line is seen (it is resolved after
composition), and the recorded config keeps the expression.

``${brax_ppo_reset_every:TOTAL_TIMESTEPS,NUM_ENVS,NUM_STEPS,ACTION_REPEAT,NUM_EVALS,NUM_RESETS_PER_EVAL}``:
how many updates apart Brax's PPO resets every training env to a fresh start state, at the run's
``total_timesteps``, ``algo.num_envs`` and ``algo.num_steps`` (one update here is one of Brax's training
steps at the same ``num_envs``). Brax's ``train`` runs ``max(num_evals - 1, 1) * max(num_resets_per_eval,
1)`` epochs of ``ceil(num_timesteps / (max(num_evals - 1, 1) * env steps per training step *
max(num_resets_per_eval, 1)))`` training steps and resets all envs after each epoch when
``num_resets_per_eval > 0``; the value is that epoch length (0, no resets, when ``num_resets_per_eval`` is
0), the ``algo.reset_envs_every`` of the mapped config. Env steps per training step are ``num_envs *
num_steps * action_repeat``, as Brax counts them.

``${feed_forward:RECURRENT}``: true when ``RECURRENT`` (the run's ``network.recurrent``) is ``none``.
Playground's mapped config sets ``algo.recompute_advantages: ${feed_forward:${network.recurrent}}``:
Brax's GAE inside each minibatch's loss needs a critic that can score any unroll alone, which a
recurrent critic (whose value depends on the hidden state carried from the env's earlier steps) cannot;
a recurrent run keeps Brax's per-unroll bootstrap (``algo.unroll_length``) with GAE from the rollout's
values, and a user's explicit ``algo.recompute_advantages`` still wins (a recurrent one is refused).

Registered by :func:`register` (idempotent): by the Hydra plugin (hydra_plugins/purejaxrl_opt_envs)
when Hydra starts, and by :func:`purejaxrl_opt.config.schema.from_dictconfig` before it resolves.
"""

from __future__ import annotations

import math

from purejaxrl_opt.config.errors import ConfigError

NUM_STEPS = "brax_ppo_num_steps"
FEED_FORWARD = "feed_forward"
RESET_EVERY = "brax_ppo_reset_every"


def _positive_ints(resolver: str, **values) -> None:
    """A ConfigError naming the resolver and the first argument that is not a positive int."""
    for name, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"{resolver}: {name} = {value!r} must be a positive int")


def brax_ppo_num_steps(num_envs, unroll_length, unrolls_per_env, num_minibatches, env_id="") -> int:
    """``unroll_length * unrolls_per_env`` after checking that ``num_envs`` keeps Brax's minibatches
    whole (``num_envs * unrolls_per_env`` divisible by ``num_minibatches``)."""
    _positive_ints(NUM_STEPS, unroll_length=unroll_length, unrolls_per_env=unrolls_per_env,
                   num_minibatches=num_minibatches)
    step = num_minibatches // math.gcd(unrolls_per_env, num_minibatches)
    if not isinstance(num_envs, int) or isinstance(num_envs, bool) or num_envs < 1 or num_envs % step:
        raise ConfigError(
            f"config key 'algo.num_envs' = {num_envs!r} is invalid for Playground's PPO config of {env_id}: "
            f"must be a positive multiple of {step} (each env runs {unrolls_per_env} unrolls of "
            f"{unroll_length} steps per update, and the num_envs x {unrolls_per_env} unrolls must split "
            f"into num_minibatches = {num_minibatches} equal minibatches of whole unrolls, as Brax's "
            f"batch_size x num_minibatches does); e.g. {step}, {2 * step}, {4 * step}, {8 * step}, "
            f"{16 * step}")
    return unroll_length * unrolls_per_env


def brax_ppo_reset_every(total_timesteps, num_envs, num_steps, action_repeat, num_evals,
                         num_resets_per_eval) -> int:
    """The training steps between two of Brax's resets of all training envs (0: none), by Brax's own
    formula (brax.training.agents.ppo.train), at the run's budget and rollout."""
    if isinstance(total_timesteps, float) and total_timesteps.is_integer():
        total_timesteps = int(total_timesteps)  # total_timesteps=6e5 on the command line
    _positive_ints(RESET_EVERY, total_timesteps=total_timesteps, num_envs=num_envs, num_steps=num_steps,
                   action_repeat=action_repeat, num_evals=num_evals)
    if not isinstance(num_resets_per_eval, int) or isinstance(num_resets_per_eval, bool) or num_resets_per_eval < 0:
        raise ConfigError(f"{RESET_EVERY}: num_resets_per_eval = {num_resets_per_eval!r} must be an int >= 0")
    if num_resets_per_eval == 0:
        return 0
    per_training_step = num_envs * num_steps * action_repeat
    epochs = max(num_evals - 1, 1) * num_resets_per_eval
    return -(-total_timesteps // (epochs * per_training_step))  # ceil, in integers


def feed_forward(recurrent) -> bool:
    """True when ``network.recurrent`` is ``none`` (a feed-forward network)."""
    return str(recurrent) == "none"


def register() -> None:
    """Register this module's resolvers with OmegaConf (again: nothing happens)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver(NUM_STEPS):
        OmegaConf.register_new_resolver(NUM_STEPS, brax_ppo_num_steps)
    if not OmegaConf.has_resolver(RESET_EVERY):
        OmegaConf.register_new_resolver(RESET_EVERY, brax_ppo_reset_every)
    if not OmegaConf.has_resolver(FEED_FORWARD):
        OmegaConf.register_new_resolver(FEED_FORWARD, feed_forward)


def config_error_of(error: BaseException) -> ConfigError | None:
    """The ConfigError a resolver raised, from the exception OmegaConf wrapped it in (its context
    chain), or None."""
    seen = error
    while seen is not None:
        if isinstance(seen, ConfigError):
            return seen
        seen = seen.__context__
    return None
