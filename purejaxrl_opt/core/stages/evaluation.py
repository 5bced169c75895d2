"""Evaluation, in one place: the final and periodic evaluation inside training, the evaluate CLI, and
held-out accuracy on token envs.

Everything takes an ``algo`` (:class:`purejaxrl_opt.core.algos.base.Algorithm`: its env, its ``policy``
bundle and ``policy_params(state) -> (actor_params, obs_norm)``) and runs inside jit unless it says
otherwise. Envs other than the token envs (gymnax and every adapter): complete episodes played in
parallel (deterministic = the distribution's mode).
Token envs: one answer to each of ``eval_episodes`` held-out (test-split) prompts (greedy accuracy,
sampled accuracy), and with ``eval_samples = n > 0`` also ``n`` sampled answers to each for pass@k.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from purejaxrl_opt import envs
from purejaxrl_opt.core.stages import rollout
from purejaxrl_opt.core.models.distributions import Distribution
from purejaxrl_opt.envs import EnvSpec, ObsNormState
from purejaxrl_opt.core.models.policies import as_policy


def play_episodes(env, env_params, spec: EnvSpec, dist: Distribution, actor_fn, actor_params,
                  obs_norm: ObsNormState | None, key: jax.Array, num_episodes: int, deterministic: bool,
                  clip_actions: bool = True) -> jnp.ndarray:
    """Play ``num_episodes`` complete episodes in parallel; returns their returns ``[num_episodes]``.

    Runs a ``while_loop`` until every episode has ended (or the env's step limit, as a guard).
    ``actor_fn``: an ``actor_fn(params, obs)`` or a Policy; a recurrent one carries its hidden state
    from the zero state through each episode.
    """
    recurrence = as_policy(actor_fn).recurrence
    if recurrence is None:
        step = lambda params, memory, obs: (memory, actor_fn(params, obs))  # noqa: E731
        memory = ()
    else:
        step, memory = recurrence.step, recurrence.zero((num_episodes,))
    reset_key, loop_key = jax.random.split(key)
    carry = rollout.reset_carry(env, env_params, reset_key, num_episodes)
    limit = spec.max_steps if spec.max_steps > 0 else 100_000

    def _cond(loop):
        t, _, _, alive, _, _, _ = loop
        return jnp.logical_and(t < limit, jnp.any(alive))

    def _body(loop):
        t, env_state, obs, alive, returns, key, memory = loop
        key, action_key, env_key = jax.random.split(key, 3)
        # an episode's end needs no reset: its later steps are not counted
        memory, dist_params = step(actor_params, memory, envs.obs_norm_apply(obs_norm, obs))
        _, obs, env_state, reward, alive, _ = rollout.alive_step(
            env, env_params, spec, dist, action_key, env_key, env_state, alive, dist_params,
            deterministic, clip_actions)
        return t + 1, env_state, obs, alive, returns + reward, key, memory

    init = (jnp.zeros((), jnp.int32), carry.env_state, carry.obs, jnp.ones((num_episodes,), bool),
            jnp.zeros((num_episodes,), jnp.float32), loop_key, memory)
    return jax.lax.while_loop(_cond, _body, init)[4]


def token_generations(algo, actor_params, key: jax.Array, greedy: bool,
                      num_prompts: int | None = None) -> rollout.GroupBatch:
    """One answer to each of ``num_prompts`` (default ``eval_episodes``) held-out prompts."""
    return rollout.group_rollout(
        algo.env, algo.eval_env_params, algo.spec, algo.dist, algo.policy, actor_params, None,
        key, num_prompts or algo.run.eval_episodes, 1, algo.spec.max_steps, False, greedy=greedy)


def pass_at_k(num_samples: int, num_correct, k: int):
    """Unbiased pass@k (Chen et al. 2021) from ``num_correct`` correct answers among ``num_samples``
    per prompt: ``1 - C(n - c, k) / C(n, k)``, computed as ``1 - prod_{i=n-c+1}^{n} (1 - k / i)``
    (no large binomials), exactly 1 when ``n - c < k``. ``num_correct`` may be an array (any shape);
    jittable; float32."""
    n = num_samples
    if not 1 <= k <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n; got k={k}, n={n}")
    c = jnp.asarray(num_correct, jnp.float32)[..., None]
    i = jnp.arange(1, n + 1, dtype=jnp.float32)
    factors = jnp.where(i > n - c, 1.0 - k / i, 1.0)
    return jnp.where(n - c[..., 0] < k, 1.0, 1.0 - jnp.prod(factors, axis=-1))


def pass_at_k_metrics(algo, actor_params, key: jax.Array) -> dict:
    """``{eval_pass@k: mean over prompts}`` from ``run.eval_samples`` sampled answers to each of
    ``eval_episodes`` held-out prompts (a group per prompt, same reset key)."""
    run = algo.run
    n = run.eval_samples
    batch = rollout.group_rollout(
        algo.env, algo.eval_env_params, algo.spec, algo.dist, algo.policy, actor_params, None, key,
        run.eval_episodes, n, algo.spec.max_steps, True)
    num_correct = batch.correct.reshape(run.eval_episodes, n).sum(axis=1)
    return {f"eval_pass@{k}": pass_at_k(n, num_correct, k).mean() for k in run.eval_pass_k}


def pass_at_k_names(run) -> tuple[str, ...]:
    return tuple(f"eval_pass@{k}" for k in run.eval_pass_k) if run.eval_samples else ()


# pass@k's key is folded from the evaluation key (not split from it): greedy and sampled answers keep
# the keys they had before pass@k existed
_PASS_AT_K_FOLD = 0x7061


def returns(algo, state, key: jax.Array, deterministic: bool | None = None) -> jnp.ndarray:
    """``[eval_episodes]`` returns of the policy of ``state`` (``run.eval_deterministic`` by default)."""
    actor_params, obs_norm = algo.policy_params(state)
    run = algo.run
    deterministic = run.eval_deterministic if deterministic is None else deterministic
    if algo.spec.vocab is not None:
        return token_generations(algo, actor_params, key, greedy=deterministic).returns
    policy = algo.policy if algo.policy.recurrence is not None else algo.policy.apply
    return play_episodes(algo.env, algo.eval_env_params, algo.spec, algo.dist, policy,
                         actor_params, obs_norm, key, run.eval_episodes, deterministic,
                         run.env.clip_actions)


def final_returns(algo, loop) -> jnp.ndarray:
    """The final evaluation of a training loop: ``[eval_episodes]`` returns with the loop's own key."""
    return returns(algo, loop.algo_state, loop.eval_key)


def periodic_metrics(algo, state, key: jax.Array) -> dict:
    """The periodic evaluation (``eval_every``): mean return; on token envs also greedy and sampled
    accuracy."""
    if algo.spec.vocab is None:
        return {"eval_return": returns(algo, state, key).mean()}
    actor_params, _ = algo.policy_params(state)
    greedy_key, sampled_key = jax.random.split(key)
    greedy = token_generations(algo, actor_params, greedy_key, greedy=True)
    sampled = token_generations(algo, actor_params, sampled_key, greedy=False)
    metrics = {"eval_return": greedy.returns.mean(),
               "eval_accuracy": greedy.correct.astype(jnp.float32).mean(),
               "eval_accuracy_sampled": sampled.correct.astype(jnp.float32).mean()}
    if algo.run.eval_samples:
        metrics.update(pass_at_k_metrics(algo, actor_params, jax.random.fold_in(key, _PASS_AT_K_FOLD)))
    return metrics


def token_accuracy(algo, loop) -> tuple[dict, str]:
    """Held-out accuracy of every lane's final policy (greedy and sampled answers to the same
    ``eval_episodes`` test-split prompts) and a text of example answers (lane 0, greedy). ``loop``
    has a leading lane axis; runs on the host (jit + vmap over lanes inside)."""
    from purejaxrl_opt.envs.tokens import format_answers

    def _lane(loop):
        actor_params, _ = algo.policy_params(loop.algo_state)
        greedy = token_generations(algo, actor_params, loop.eval_key, greedy=True)
        sampled = token_generations(algo, actor_params, loop.eval_key, greedy=False)
        passes = (pass_at_k_metrics(algo, actor_params, jax.random.fold_in(loop.eval_key, _PASS_AT_K_FOLD))
                  if algo.run.eval_samples else {})
        return greedy, sampled.correct, passes

    greedy, sampled_correct, passes = jax.tree_util.tree_map(np.asarray, jax.jit(jax.vmap(_lane))(loop))
    per_lane = greedy.correct.mean(axis=1)
    per_lane_sampled = sampled_correct.mean(axis=1)
    stats = {"eval_accuracy": float(per_lane.mean()),
             "eval_accuracy_per_seed": [float(x) for x in per_lane],
             "eval_accuracy_sampled": float(per_lane_sampled.mean()),
             "eval_accuracy_sampled_per_seed": [float(x) for x in per_lane_sampled],
             "eval_prompts": int(greedy.correct.shape[1]), "eval_split": "test"}
    for name, per_seed in passes.items():
        stats[name] = float(per_seed.mean())
        stats[f"{name}_per_seed"] = [float(x) for x in per_seed]
    if passes:
        stats["eval_samples"] = algo.run.eval_samples
    lines = ["# held-out (test-split) prompts and the greedy answers of lane 0's final policy"]
    lines += format_answers(greedy.obs[0, 0], greedy.action[0].T, greedy.lengths[0], greedy.correct[0],
                            32, algo.spec.vocab)
    return stats, "\n".join(lines) + "\n"


EPISODE_STEP_CAP = 10_000  # episode_states' length on an env without a step limit


def episode_limit(spec) -> int:
    """The steps :func:`episode_states` plays: the env's step limit, or :data:`EPISODE_STEP_CAP`."""
    return spec.max_steps if spec.max_steps > 0 else EPISODE_STEP_CAP


def episode_start(algo, state, key: jax.Array):
    """The carry of :func:`episode_steps` at the start of an episode of the policy of ``state`` (one
    env, reset with a key drawn from ``key``)."""
    key, reset_key = jax.random.split(key)
    obs, env_state = envs.reset_batch(algo.env, algo.env_params, reset_key[None])
    recurrence = algo.policy.recurrence
    memory = () if recurrence is None else recurrence.zero((1,))
    return key, env_state, obs, memory


def episode_steps(algo, state, carry, length: int, deterministic: bool = True):
    """``length`` steps of one env under the policy of ``state`` from ``carry`` (:func:`episode_start`):
    ``(carry, (env states [length], rewards [length], done [length]))``; ``states[t]`` is the state
    acted on at step ``t`` (stepped by :func:`purejaxrl_opt.envs.step_batch`, so no reset happens
    before the first ``done``); entries after the first ``done`` are to be dropped by the caller."""
    actor_params, obs_norm = algo.policy_params(state)
    env, env_params, spec, dist = algo.env, algo.env_params, algo.spec, algo.dist
    recurrence = algo.policy.recurrence

    def _step(carry, _):
        key, env_state, obs, memory = carry
        key, step_key = jax.random.split(key)
        action_key, env_key = jax.random.split(step_key)
        if recurrence is None:
            dist_params = algo.policy.apply(actor_params, envs.obs_norm_apply(obs_norm, obs))
        else:
            memory, dist_params = recurrence.step(actor_params, memory, envs.obs_norm_apply(obs_norm, obs))
        action = dist.mode(dist_params) if deterministic else dist.sample(action_key, dist_params)
        next_obs, next_state, reward, terminated, truncated, _ = envs.step_batch(
            env, env_params, env_key[None], env_state,
            envs.to_env_action(spec, dist.postprocess(action), algo.run.env.clip_actions))
        unbatched = jax.tree_util.tree_map(lambda x: x[0], env_state)
        return (key, next_state, next_obs, memory), (unbatched, reward[0],
                                                      jnp.logical_or(terminated, truncated)[0])

    return jax.lax.scan(_step, carry, None, length=length)


def episode_states(algo, state, key: jax.Array, deterministic: bool = True):
    """One episode of the policy of ``state`` for rendering: ``(env states [T], rewards [T], done [T])``
    over :func:`episode_limit` steps, in one scan (:func:`episode_steps` from :func:`episode_start`)."""
    carry = episode_start(algo, state, key)
    _, (states, rewards, done) = episode_steps(algo, state, carry, episode_limit(algo.spec), deterministic)
    return states, rewards, done
