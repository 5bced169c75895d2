"""Policies and value functions as small bundles of pure functions, for MLPs and causal transformers.

Every algorithm needs a policy in three ways:

* ``apply(params, obs) -> dist_params`` — one observation (any leading axes) at a time; the default
  acting and evaluation path.
* ``start(params, obs) -> (carry, dist_params)`` and ``advance(params, carry, action, next_obs) ->
  (carry, dist_params)`` — acting through one episode from its first observation, with a carry
  (a transformer's key/value cache: one new token per step instead of re-encoding the prefix).
* ``episode_apply(params, obs [E, T, ...], action [E, T]) -> dist_params [E, T, ...]`` — re-scoring
  whole episodes in the loss (a transformer: one teacher-forced causal pass per answer).

For an MLP all three are ``apply`` (the carry is ``None``). A recurrent policy (``network.recurrent=gru|lstm``)
carries its hidden state: ``start`` steps from the zero state, ``advance`` from the carry,
``episode_apply`` replays each episode from the zero state; ``apply`` treats every observation as an
episode's first. Its :class:`Recurrence` (``policy.recurrence``) is the one network that all of these,
the continuing rollouts of PPO/TRPO (:func:`replay`, with resets at episode ends) and the evaluation
use: acting steps it one observation at a time, a replay runs the feed-forward parts on whole
sequences and scans only the cell's hidden side (:func:`scan_cell`). For a transformer on a token env
(purejaxrl_opt/envs/tokens.py) the observation is the token buffer ``[max_len]`` — the prompt, then
the answer tokens generated so far, then padding — and the policy's output at the last filled
position gives the next token: action ``a`` is token ``a + 1`` (padding is never emitted).
``episode_apply`` rebuilds the answer from the first observation and the actions, which is exact
because the transformer is causal: what follows a position never changes its output.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, Callable

import jax
import jax.numpy as jnp

from purejaxrl_opt.config.schema import ConfigError, NetworkConfig
from purejaxrl_opt.envs import EnvSpec


@dataclass(frozen=True)
class Recurrence:
    """A recurrent network split where the time dependence is: ``embed(params, obs [..., *obs])`` (the
    feed-forward torso and the cell's input side: any leading axes, no memory), ``core(params,
    memory [N, ...], embedded [N, ...]) -> (memory, h)`` (the cell's hidden side: the only part that
    runs step by step) and ``head(params, h [..., H]) -> out``. ``step`` is the three in turn (acting);
    :func:`replay` embeds a whole sequence at once, scans ``core`` and applies ``head`` to the stacked
    outputs -- the same function. ``zero(batch_shape)`` is the state every episode starts from."""

    zero: Callable[[tuple[int, ...]], Any]
    embed: Callable[[Any, jnp.ndarray], jnp.ndarray]
    core: Callable[[Any, Any, jnp.ndarray], tuple[Any, jnp.ndarray]]
    head: Callable[[Any, jnp.ndarray], Any]
    # (params, memory [N, ...], embedded [T, N, ...], done [T, N]) -> (memory, h [T, N, H],
    # memory_after [T, N, ...]): ``core`` scanned over time with resets (:func:`scan_cell`)
    sequence: Callable[[Any, Any, jnp.ndarray, jnp.ndarray], tuple[Any, jnp.ndarray, Any]]
    # (out, obs) -> out: what the head's output needs from the observation it answers (an actor on an
    # env with action masks: networks.masked); identity otherwise
    finish: Callable[[Any, jnp.ndarray], Any] = lambda out, obs: out

    def step(self, params, memory, obs: jnp.ndarray):
        """One step: ``(memory [N, ...], obs [N, *obs]) -> (memory, out)``."""
        memory, h = self.core(params, memory, self.embed(params, obs))
        return memory, self.finish(self.head(params, h), obs)


@dataclass(frozen=True)
class Policy:
    init: Callable[[jax.Array], Any]
    apply: Callable[[Any, jnp.ndarray], dict]
    start: Callable[[Any, jnp.ndarray], tuple[Any, dict]]
    advance: Callable[[Any, Any, jnp.ndarray, jnp.ndarray], tuple[Any, dict]]
    episode_apply: Callable[[Any, jnp.ndarray, jnp.ndarray], dict]
    recurrence: Recurrence | None = None  # recurrent networks only


@dataclass(frozen=True)
class ValueFunction:
    init: Callable[[jax.Array], Any]
    apply: Callable[[Any, jnp.ndarray], jnp.ndarray]  # obs [..., *obs_shape] -> [...]
    episode_apply: Callable[[Any, jnp.ndarray, jnp.ndarray], jnp.ndarray]  # -> [E, T]
    recurrence: Recurrence | None = None  # recurrent networks only


def reset_where(memory, done: jnp.ndarray):
    """``memory`` with the rows of ended episodes (``done [N]``) set to the zero state."""
    return jax.tree_util.tree_map(
        lambda m: jnp.where(done.reshape(done.shape + (1,) * (m.ndim - done.ndim)), jnp.zeros_like(m), m),
        memory)


def replay(recurrence: Recurrence, params, memory, obs: jnp.ndarray, done: jnp.ndarray):
    """Run a recurrent network over time-major sequences ``obs [T, N, *obs]`` from ``memory [N, ...]``,
    resetting it after every step whose ``done [T, N]`` is set (the next observation is a new
    episode's, as gymnax auto-resets inside ``step``) -- exactly what the rollout did.

    Returns ``(memory after the last step (reset where it ended an episode), out [T, N, ...],
    memory_after [T, N, ...])``: ``memory_after[t]`` is the state after observation ``t`` *before* any
    reset, from which the critic bootstraps the episode's final observation.
    """

    # only the hidden side is sequential: the torso and the cell's input side see all [T, N]
    # observations in one batched call, the head all [T, N] outputs
    memory, h, memory_after = recurrence.sequence(params, memory, recurrence.embed(params, obs), done)
    return memory, recurrence.finish(recurrence.head(params, h), obs), memory_after


def _scan_forward(cell: str, kernel, bias, memory, projected, done):
    """The cell over ``projected [T, N, G*H]`` from ``memory``, reset after every step with ``done``.
    Also returns what the JVP needs: the state before each step and its hidden side."""
    from purejaxrl_opt.core.models.networks import cell_update, hidden_side

    def _step(m, inputs):
        x, d = inputs
        hidden = hidden_side(cell, m, kernel, bias)
        m_next, h = cell_update(cell, hidden, x, m)
        return reset_where(m_next, d), (h, m_next, m, hidden)

    return jax.lax.scan(_step, memory, (projected, done))


@partial(jax.custom_jvp, nondiff_argnums=(0,))
def scan_cell(cell: str, kernel, bias, memory, projected, done):
    """``(memory, h [T, N, H], memory_after [T, N, ...])`` of a GRU/LSTM cell (networks.RecurrentCell)
    with ``recurrent_kernel`` ``kernel [H, G*H]``, GRU ``recurrent_bias`` ``bias`` (LSTM: None), over
    ``projected [T, N, G*H]`` (its input side, all steps) from ``memory``, resetting the state after
    every step whose ``done [T, N]`` is set.

    The same function as scanning ``RecurrentCell.__call__``; only its derivative is arranged for
    speed (XLA:CPU, seeds vmapped): plain autodiff of a scan adds the kernel's gradient up one step
    at a time (a rank-N outer product into ``[H, G*H]`` per step) and multiplies by the transposed
    kernel in a batched-dot layout XLA:CPU runs ~2x slower. Here the parameters' tangent enters every
    step as ``h_{t-1} @ dkernel + dbias``, one matmul over all ``[T, N]`` states outside the scan (its
    transpose, the kernel's gradient, is one matmul too), and the scan carries only the state's
    tangent, multiplied by a pre-transposed kernel so that the backward pass gets the plain layout.
    Forward mode (TRPO's Fisher-vector products) and higher orders go through the same rule.
    """
    last, (h, after, _, _) = _scan_forward(cell, kernel, bias, memory, projected, done)
    return last, h, after


@scan_cell.defjvp
def _scan_cell_jvp(cell, primals, tangents):
    from purejaxrl_opt.core.models.networks import cell_jacobian, cell_tangent, hidden_bias, hidden_of

    kernel, bias, memory, projected, done = primals
    d_kernel, d_bias, d_memory, d_projected, _ = tangents
    last, (h, after, before, hidden) = _scan_forward(cell, kernel, bias, memory, projected, done)
    # everything that does not need the previous step's tangent, for all [T, N] at once
    jac = cell_jacobian(cell, hidden, projected, before)
    d_hidden_params = hidden_of(cell, before) @ d_kernel + hidden_bias(d_bias)  # [T, N, G*H]
    kernel_t = jnp.swapaxes(kernel, -1, -2)  # [G*H, H]

    def _tangent_step(dm, inputs):  # linear in (dm, dx, dhp)
        dx, dhp, jac_t, d = inputs
        # dh_{t-1} @ kernel written against kernel^T: its transpose (the backward pass) is dh @ kernel_t
        d_hid = jnp.einsum("...k,jk->...j", hidden_of(cell, dm), kernel_t) + dhp
        dm_next, dh = cell_tangent(cell, jac_t, dx, d_hid, dm)
        return reset_where(dm_next, d), (dh, dm_next)

    def _tangent_scan(dm, dx, dhp):
        return jax.lax.scan(_tangent_step, dm, (dx, dhp, jac, done))

    # the scan is linear, so it is its own JVP; bound through jax.jvp, JAX marks its tangent inputs
    # linear (a scan bound directly here would be transposed as if they were residuals and fail)
    zeros = jax.tree_util.tree_map(jnp.zeros_like, (d_memory, d_projected, d_hidden_params))
    _, (d_last, (d_h, d_after)) = jax.jvp(_tangent_scan, zeros, (d_memory, d_projected, d_hidden_params))
    return (last, h, after), (d_last, d_h, d_after)


def scan_cell_autodiff(cell: str, kernel, bias, memory, projected, done):
    """:func:`scan_cell` with JAX's own derivative of the scan (``network.recurrent_grad=autodiff``,
    the ``auto`` choice on GPU/TPU, where the CPU-specific arrangement of :func:`scan_cell` has no
    measured reason to be): the same function, the same values."""
    last, (h, after, _, _) = _scan_forward(cell, kernel, bias, memory, projected, done)
    return last, h, after


def _scan_fn(net: NetworkConfig) -> Callable:
    from purejaxrl_opt.config import implementations

    return scan_cell if implementations.recurrent_grad(net.recurrent_grad) == "fused" else scan_cell_autodiff


def as_policy(policy_or_fn) -> Policy:
    """A :class:`Policy` as is; a plain ``actor_fn(params, obs)`` as a carry-free policy."""
    if isinstance(policy_or_fn, Policy):
        return policy_or_fn
    fn = policy_or_fn
    return Policy(init=None, apply=fn, start=lambda params, obs: (None, fn(params, obs)),
                  advance=lambda params, carry, action, obs: (None, fn(params, obs)),
                  episode_apply=lambda params, obs, action: fn(params, obs))


def check_network(net: NetworkConfig, spec: EnvSpec) -> None:
    """Refuse, before compiling, a network that does not fit the env."""
    if net.kind == "transformer" and spec.vocab is None:
        raise ConfigError(f"config key 'network.kind' = 'transformer' needs a token env (one of "
                          f"{list(token_env_ids())}); {spec.env_id} has vector/image observations: use "
                          "network=mlp")


def token_env_ids() -> tuple[str, ...]:
    from purejaxrl_opt.envs.tokens import TOKEN_ENVS

    return TOKEN_ENVS


# --------------------------------------------------------------------------- MLP (and CNN)
def _feed_forward(spec: EnvSpec, net: NetworkConfig, outputs: str) -> tuple[Callable, Callable]:
    """``(init, apply(params, obs))`` of the feed-forward network giving ``outputs`` (``"policy"``,
    ``"value"``; ``network.shared``: also ``"both"``), from :class:`networks.Actor` /
    :class:`networks.Critic`, or the one :class:`networks.ActorCritic` with ``network.shared``."""
    from purejaxrl_opt.core.models.networks import Actor, ActorCritic, Critic

    if net.shared:
        module = ActorCritic(spec, net)
        method = {"policy": "actor", "value": "critic", "both": "__call__"}[outputs]
        apply = partial(module.apply, method=method)
    else:
        module = (Actor if outputs == "policy" else Critic)(spec, net)
        apply = module.apply

    def init(key):
        return module.init(key, jnp.zeros((1,) + spec.obs_shape, jnp.float32))

    return init, apply


def mlp_policy(spec: EnvSpec, net: NetworkConfig) -> Policy:
    init, apply = _feed_forward(spec, net, "policy")

    def start(params, obs):
        return None, apply(params, obs)

    def advance(params, carry, action, next_obs):
        return None, apply(params, next_obs)

    def episode_apply(params, obs, action):
        return apply(params, obs)

    return Policy(init, apply, start, advance, episode_apply)


def mlp_value(spec: EnvSpec, net: NetworkConfig) -> ValueFunction:
    init, apply = _feed_forward(spec, net, "value")
    return ValueFunction(init, apply, lambda params, obs, action: apply(params, obs))


def shared_apply(spec: EnvSpec, net: NetworkConfig) -> Callable:
    """``network.shared``: ``(params, inputs) -> (distribution parameters, values)`` from one pass of
    the shared trunk. Feed-forward: ``inputs`` are observations ``[..., *obs]``; recurrent: a rollout's
    env sequences (actor_critic.Sequences, ``[N, T]`` leaves) replayed from their start states (the
    actor's: the one hidden state), outputs ``[N, T, ...]``."""
    if not net.is_recurrent:
        return _feed_forward(spec, net, "both")[1]
    from purejaxrl_opt.core.models.networks import RecurrentActorCritic

    _, recurrence = _recurrence(RecurrentActorCritic(spec, net), spec, net, "both")

    def apply(params, seq):
        _, out, _ = replay(recurrence, params, seq.actor_start, jnp.swapaxes(seq.obs, 0, 1),
                           jnp.swapaxes(seq.done, 0, 1))
        return jax.tree_util.tree_map(lambda x: jnp.swapaxes(x, 0, 1), out)

    return apply


# --------------------------------------------------------------------------- recurrent (GRU / LSTM)
def _recurrence(module, spec: EnvSpec, net: NetworkConfig, outputs: str = "value",
                head: str = "head") -> tuple[Callable, Recurrence]:
    """``(init, Recurrence)`` of a recurrent module whose ``head`` method (``head``) gives ``outputs``:
    ``"policy"`` (distribution parameters: the illegal actions' logits are masked here), ``"value"`` or
    ``"both"`` (``(distribution parameters, values)``, a shared network's two heads)."""
    from purejaxrl_opt.core.models.networks import masked, zero_memory

    def mask(out, obs):  # the actor's logits with the illegal actions masked (networks.masked)
        return dict(out, logits=masked(spec, out["logits"], obs))

    if not spec.action_mask or outputs == "value":
        finish = lambda out, obs: out  # noqa: E731
    elif outputs == "policy":
        finish = mask
    else:
        finish = lambda out, obs: (mask(out[0], obs), out[1])  # noqa: E731

    def init(key):
        return module.init(key, zero_memory(net, (1,)), jnp.zeros((1,) + spec.obs_shape, jnp.float32))

    scan = _scan_fn(net)
    return init, Recurrence(
        zero=lambda batch_shape: zero_memory(net, batch_shape),
        embed=lambda params, obs: module.apply(params, obs, method="embed"),
        core=lambda params, memory, x: module.apply(params, memory, x, method="core"),
        head=lambda params, h: module.apply(params, h, method=head),
        sequence=lambda params, memory, x, done: scan(
            net.recurrent, params["params"]["cell"]["recurrent_kernel"],
            params["params"]["cell"].get("recurrent_bias"), memory, x, done),
        finish=finish)


def _batch_shape(spec: EnvSpec, obs: jnp.ndarray) -> tuple[int, ...]:
    return obs.shape[: obs.ndim - len(spec.obs_shape)]


def _episodes(recurrence: Recurrence, spec: EnvSpec, params, obs: jnp.ndarray):
    """``out [E, T, ...]`` of each episode ``obs [E, T, *obs]`` replayed from the zero state."""
    num_episodes = obs.shape[0]
    time_major = jnp.swapaxes(obs, 0, 1)
    never = jnp.zeros(time_major.shape[:2], bool)  # steps after an episode's end are masked by callers
    _, out, _ = replay(recurrence, params, recurrence.zero((num_episodes,)), time_major, never)
    return jax.tree_util.tree_map(lambda x: jnp.swapaxes(x, 0, 1), out)


def recurrent_policy(spec: EnvSpec, net: NetworkConfig) -> Policy:
    from purejaxrl_opt.core.models.networks import RecurrentActor, RecurrentActorCritic

    if net.shared:
        init, recurrence = _recurrence(RecurrentActorCritic(spec, net), spec, net, "policy", "actor_head")
    else:
        init, recurrence = _recurrence(RecurrentActor(spec, net), spec, net, "policy")

    def start(params, obs):
        return recurrence.step(params, recurrence.zero(_batch_shape(spec, obs)), obs)

    def advance(params, carry, action, next_obs):
        return recurrence.step(params, carry, next_obs)

    return Policy(init, lambda params, obs: start(params, obs)[1], start, advance,
                  lambda params, obs, action: _episodes(recurrence, spec, params, obs), recurrence)


def recurrent_value(spec: EnvSpec, net: NetworkConfig) -> ValueFunction:
    from purejaxrl_opt.core.models.networks import RecurrentActorCritic, RecurrentCritic

    if net.shared:
        init, recurrence = _recurrence(RecurrentActorCritic(spec, net), spec, net, "value", "critic_head")
    else:
        init, recurrence = _recurrence(RecurrentCritic(spec, net), spec, net)

    def apply(params, obs):
        return recurrence.step(params, recurrence.zero(_batch_shape(spec, obs)), obs)[1]

    return ValueFunction(init, apply, lambda params, obs, action: _episodes(recurrence, spec, params, obs),
                         recurrence)


# --------------------------------------------------------------------------- causal transformer
def _model(spec: EnvSpec, net: NetworkConfig, num_outputs: int):
    from purejaxrl_opt.core.models.transformer import CausalTransformer

    return CausalTransformer(vocab_size=len(spec.vocab), num_outputs=num_outputs,
                             max_len=spec.obs_shape[0], d_model=net.d_model,
                             num_layers=net.num_layers, num_heads=net.num_heads,
                             mlp_ratio=net.mlp_ratio)


def filled_length(tokens: jnp.ndarray) -> jnp.ndarray:
    """Number of filled (non-padding) tokens of buffers ``[..., L]``: padding (0) is only at the end."""
    return jnp.sum(tokens != 0, axis=-1).astype(jnp.int32)


def _at_last(out: jnp.ndarray, length: jnp.ndarray) -> jnp.ndarray:
    """``out [..., L, K]`` at position ``length - 1`` -> ``[..., K]``."""
    idx = jnp.maximum(length - 1, 0)[..., None, None]
    return jnp.take_along_axis(out, idx, axis=-2)[..., 0, :]


def episode_tokens(obs: jnp.ndarray, action: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
    """The whole answer buffer of each episode and the positions whose outputs scored its actions.

    ``obs [E, T, L]`` (first observation = the prompt), ``action [E, T]`` -> ``(tokens [E, L],
    positions [E, T])``: action ``t`` (token ``a + 1``) sits at ``prompt_len + t`` and was chosen from
    the output at ``prompt_len - 1 + t``. Positions past the buffer (only after an episode's end,
    masked by every caller) are dropped from the buffer and clamped in ``positions``.
    """
    prompt = obs[:, 0].astype(jnp.int32)
    max_len, num_steps = prompt.shape[-1], action.shape[1]
    start = filled_length(prompt)  # [E]
    write = start[:, None] + jnp.arange(num_steps)[None, :]  # [E, T]
    rows = jnp.broadcast_to(jnp.arange(prompt.shape[0])[:, None], write.shape)
    tokens = prompt.at[rows, write].set(action.astype(jnp.int32) + 1, mode="drop")
    return tokens, jnp.minimum(write - 1, max_len - 1)


def _gather_positions(out: jnp.ndarray, positions: jnp.ndarray) -> jnp.ndarray:
    """``out [E, L, K]`` at ``positions [E, T]`` -> ``[E, T, K]``."""
    return jnp.take_along_axis(out, positions[..., None], axis=1)


def transformer_policy(spec: EnvSpec, net: NetworkConfig) -> Policy:
    model = _model(spec, net, spec.num_actions)
    max_len = spec.obs_shape[0]

    def init(key):
        return model.init(key, jnp.zeros((1, max_len), jnp.int32))

    def apply(params, obs):
        tokens = obs.astype(jnp.int32)
        return {"logits": _at_last(model.apply(params, tokens), filled_length(tokens))}

    def start(params, obs):
        tokens = obs.astype(jnp.int32)
        length = filled_length(tokens)
        logits, cache = model.apply(params, tokens, length, method=model.prefill)
        return (cache, length), {"logits": logits}

    def advance(params, carry, action, next_obs):
        cache, pos = carry
        logits, cache = model.apply(params, action.astype(jnp.int32) + 1, pos, cache,
                                    method=model.decode)
        return (cache, pos + 1), {"logits": logits}

    def episode_apply(params, obs, action):
        tokens, positions = episode_tokens(obs, action)
        return {"logits": _gather_positions(model.apply(params, tokens), positions)}

    return Policy(init, apply, start, advance, episode_apply)


def transformer_value(spec: EnvSpec, net: NetworkConfig) -> ValueFunction:
    model = _model(spec, net, 1)
    max_len = spec.obs_shape[0]

    def init(key):
        return model.init(key, jnp.zeros((1, max_len), jnp.int32))

    def apply(params, obs):
        tokens = obs.astype(jnp.int32)
        return _at_last(model.apply(params, tokens), filled_length(tokens))[..., 0]

    def episode_apply(params, obs, action):
        tokens, positions = episode_tokens(obs, action)
        return _gather_positions(model.apply(params, tokens), positions)[..., 0]

    return ValueFunction(init, apply, episode_apply)


def make_policy(spec: EnvSpec, net: NetworkConfig) -> Policy:
    check_network(net, spec)
    if net.is_recurrent:
        return recurrent_policy(spec, net)
    return transformer_policy(spec, net) if net.kind == "transformer" else mlp_policy(spec, net)


def make_value(spec: EnvSpec, net: NetworkConfig) -> ValueFunction:
    check_network(net, spec)
    if net.is_recurrent:
        return recurrent_value(spec, net)
    return transformer_value(spec, net) if net.kind == "transformer" else mlp_value(spec, net)
