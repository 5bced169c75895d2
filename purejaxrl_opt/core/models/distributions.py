"""Action distributions as pure functions on a parameter pytree.

A policy network outputs *distribution parameters*: ``{"logits": [..., A]}`` (categorical),
``{"mean": [..., D], "log_std": [..., D]}`` (diagonal Gaussian) or ``{"loc": [..., D], "raw_scale":
[..., D]}`` (tanh-squashed Gaussian, ``network.action_dist=tanh_normal``). Each distribution object
below gives log-probabilities, entropy, KL, sampling and the analytic Fisher information of the
distribution with respect to its own parameters (``fisher_product``), which TRPO's Gauss-Newton
Fisher-vector product needs. Small enough that a dependency (distrax pulls a nightly TFP) is not worth it.

An *action* here is what the rollout stores and ``log_prob`` scores; ``postprocess`` maps it to what the
env takes (the identity, except for :class:`TanhNormal`, whose stored actions are the pre-squash samples).
"""

from __future__ import annotations

import math
from typing import Protocol

import jax
import jax.numpy as jnp
import numpy as np

DistParams = dict[str, jnp.ndarray]

# the logit of an illegal action: finite, so log-probs, entropy and KL stay finite (its probability
# is exactly 0 in float32: exp(-1e9 - max) underflows), and far below any legal logit
MASKED_LOGIT = -1e9


def mask_logits(logits: jnp.ndarray, action_mask: jnp.ndarray) -> jnp.ndarray:
    """``logits [..., A]`` with the illegal actions (``action_mask [..., A]`` 0; 1 = legal) set to
    :data:`MASKED_LOGIT`: the categorical over the legal actions, renormalised. The masked entries are
    constants, so their gradient (and their share of the Fisher) is zero."""
    return jnp.where(action_mask > 0.5, logits, MASKED_LOGIT)


class Distribution(Protocol):
    # entropy(params, key) is a sampled estimate that needs a key (TanhNormal); else key is unused
    entropy_needs_key: bool

    def log_prob(self, params: DistParams, action: jnp.ndarray) -> jnp.ndarray: ...
    def entropy(self, params: DistParams, key: jax.Array | None = None) -> jnp.ndarray: ...
    def kl(self, p: DistParams, q: DistParams) -> jnp.ndarray: ...
    def sample(self, key: jax.Array, params: DistParams) -> jnp.ndarray: ...
    def draw(self, key: jax.Array, params: DistParams) -> jnp.ndarray: ...
    def sample_from(self, noise: jnp.ndarray, params: DistParams) -> jnp.ndarray: ...
    def mode(self, params: DistParams) -> jnp.ndarray: ...
    def fisher_product(self, params: DistParams, tangent: DistParams) -> DistParams: ...
    def postprocess(self, action: jnp.ndarray) -> jnp.ndarray: ...


def gumbel_uniform(key: jax.Array, shape, dtype) -> jnp.ndarray:
    """The uniform draw behind ``jax.random.gumbel``'s default (low-range) mode: ``U[tiny, 1)``.

    Sampling is split into this draw and a pure function of it (``Distribution.draw`` /
    ``sample_from``) so that a rollout can make every step's draw in one batched call before its loop:
    the threefry hash is integer arithmetic and the uniform's float steps are exact, so a batched
    draw has the same bits as one made inside the loop, while on XLA:CPU each draw inside the loop is
    a small loop of its own (JAX's rolled threefry). The float math that is not exact (logs, erf_inv)
    stays in ``sample_from``, where the loop computes it as before. tests/test_math.py holds
    ``sample_from(draw(key, p), p)`` bitwise to ``jax.random.categorical`` / ``jax.random.normal``.
    """
    return jax.random.uniform(key, shape, dtype, minval=jnp.finfo(dtype).tiny, maxval=1.0)


def normal_uniform(key: jax.Array, shape, dtype) -> jnp.ndarray:
    """The uniform draw behind ``jax.random.normal``: ``U(-1, 1)`` from just above -1 (see
    :func:`gumbel_uniform`)."""
    lo = np.nextafter(np.array(-1.0, dtype), np.array(0.0, dtype), dtype=dtype)
    return jax.random.uniform(key, shape, dtype, lo, np.array(1.0, dtype))


def standard_normal(noise: jnp.ndarray) -> jnp.ndarray:
    """``N(0, 1)`` from :func:`normal_uniform`'s draw, as ``jax.random.normal`` computes it."""
    return jax.lax.mul(np.array(np.sqrt(2), noise.dtype), jax.lax.erf_inv(noise))


class Categorical:
    """Categorical over the last axis of ``logits [..., A]``; actions are int ``[...]``."""

    entropy_needs_key = False

    def log_prob(self, params, action):
        log_p = jax.nn.log_softmax(params["logits"])
        return jnp.take_along_axis(log_p, action[..., None].astype(jnp.int32), axis=-1)[..., 0]

    def entropy(self, params, key=None):
        log_p = jax.nn.log_softmax(params["logits"])
        return -jnp.sum(jnp.exp(log_p) * log_p, axis=-1)

    def kl(self, p, q):
        """KL(p || q) per batch element ``[...]``."""
        log_p, log_q = jax.nn.log_softmax(p["logits"]), jax.nn.log_softmax(q["logits"])
        return jnp.sum(jnp.exp(log_p) * (log_p - log_q), axis=-1)

    def sample(self, key, params):
        return self.sample_from(self.draw(key, params), params)

    def draw(self, key, params):
        """The uniform noise of :meth:`sample` (``params`` may be shapes only): JAX's Gumbel draw."""
        return gumbel_uniform(key, params["logits"].shape, params["logits"].dtype)

    def sample_from(self, noise, params):
        """The action :meth:`sample` draws with the noise ``noise = draw(key, params)``: the Gumbel-max
        trick, bitwise ``jax.random.categorical(key, logits)``."""
        return jnp.argmax(-jnp.log(-jnp.log(noise)) + params["logits"], axis=-1)

    def mode(self, params):
        return jnp.argmax(params["logits"], axis=-1)

    def fisher_product(self, params, tangent):
        """``M v`` with ``M = diag(p) - p p^T``, the Fisher of a categorical in its logits."""
        p = jax.nn.softmax(params["logits"])
        v = tangent["logits"]
        return {"logits": p * v - p * jnp.sum(p * v, axis=-1, keepdims=True)}

    def postprocess(self, action):
        return action


class DiagGaussian:
    """Diagonal Gaussian over the last axis; ``mean`` and ``log_std`` are ``[..., D]``."""

    entropy_needs_key = False

    def log_prob(self, params, action):
        mean, log_std = params["mean"], params["log_std"]
        z = (action - mean) * jnp.exp(-log_std)
        return jnp.sum(-0.5 * z**2 - log_std - 0.5 * math.log(2 * math.pi), axis=-1)

    def entropy(self, params, key=None):
        return jnp.sum(params["log_std"] + 0.5 * math.log(2 * math.pi * math.e), axis=-1)

    def kl(self, p, q):
        """KL(p || q) per batch element ``[...]``."""
        var_p, var_q = jnp.exp(2 * p["log_std"]), jnp.exp(2 * q["log_std"])
        return jnp.sum(q["log_std"] - p["log_std"] + (var_p + (p["mean"] - q["mean"]) ** 2) / (2 * var_q)
                       - 0.5, axis=-1)

    def sample(self, key, params):
        return self.sample_from(self.draw(key, params), params)

    def draw(self, key, params):
        """The uniform noise of :meth:`sample` (``params`` may be shapes only)."""
        return normal_uniform(key, params["mean"].shape, params["mean"].dtype)

    def sample_from(self, noise, params):
        return params["mean"] + jnp.exp(params["log_std"]) * standard_normal(noise)

    def mode(self, params):
        return params["mean"]

    def fisher_product(self, params, tangent):
        """Fisher in (mean, log_std): ``1/sigma^2`` on the mean, ``2`` on the log-std (diagonal)."""
        return {"mean": tangent["mean"] * jnp.exp(-2 * params["log_std"]),
                "log_std": 2.0 * tangent["log_std"]}

    def postprocess(self, action):
        return action


# Brax's NormalTanhDistribution defaults (brax/training/distribution.py, as make_ppo_networks builds it)
TANH_MIN_STD = 0.001
TANH_VAR_SCALE = 1.0


def _log_det_tanh_jacobian(u: jnp.ndarray) -> jnp.ndarray:
    """``log(d tanh(u) / du) = log(1 - tanh(u)^2)`` per entry, in the form that stays finite where
    ``tanh`` saturates: ``2 (log 2 - u - softplus(-2u))`` (Brax's TanhBijector)."""
    return 2.0 * (jnp.log(2.0) - u - jax.nn.softplus(-2.0 * u))


def _log_normalization(scale: jnp.ndarray) -> jnp.ndarray:
    """``log(sqrt(2 pi) scale)``, with the constant computed as Brax computes it (float32)."""
    return 0.5 * jnp.log(2.0 * jnp.pi) + jnp.log(scale)


class TanhNormal:
    """Brax's NormalTanhDistribution: ``a = tanh(u)``, ``u ~ N(loc, scale)`` per entry, with a
    state-dependent ``scale = (softplus(raw_scale) + 0.001) * 1`` (Brax's ``min_std``, ``var_scale``);
    ``loc`` and ``raw_scale`` are ``[..., D]``, the two halves of the policy's output layer.

    As in Brax, the rollout stores the pre-squash sample ``u`` (Brax's ``raw_action``) and every
    log-prob is of ``u``: ``log N(u; loc, scale) - log(1 - tanh(u)^2)``, the density of ``a = tanh(u)``,
    exact and finite where ``tanh`` saturates (an ``arctanh`` of a stored ``a`` would not be).
    ``postprocess(u)`` is the env's action: ``tanh(u)``, mapped affinely onto the env's bounds when they
    are not ``[-1, 1]`` (``low``/``high``; None: ``tanh(u)`` itself, Brax's and Playground's case).

    ``entropy`` is Brax's one-sample estimate ``H(N(loc, scale)) + log(1 - tanh(u)^2)`` with ``u`` drawn
    with ``key`` (reparametrised: its gradient flows through ``u``); the tanh-squashed Gaussian has no
    closed-form entropy. ``mode`` is ``loc`` (``postprocess``: ``tanh(loc)``, Brax's ``mode``). ``kl`` and
    ``fisher_product`` are exact: KL and Fisher information are invariant under the bijection ``tanh``,
    so they are the pre-squash Gaussian's (in ``loc``, ``raw_scale``).
    """

    entropy_needs_key = True

    def __init__(self, low=None, high=None):
        if low is None:
            self._center = self._half_width = None
        else:
            low, high = np.asarray(low, np.float32), np.asarray(high, np.float32)
            self._center, self._half_width = (high + low) / 2, (high - low) / 2

    @staticmethod
    def scale(params) -> jnp.ndarray:
        return (jax.nn.softplus(params["raw_scale"]) + TANH_MIN_STD) * TANH_VAR_SCALE

    def log_prob(self, params, action):
        loc, scale = params["loc"], self.scale(params)
        # Brax's _NormalDistribution.log_prob, term for term (the same float32 rounding)
        log_normal = -0.5 * jnp.square(action / scale - loc / scale) - _log_normalization(scale)
        return jnp.sum(log_normal - _log_det_tanh_jacobian(action), axis=-1)

    def entropy(self, params, key=None):
        if key is None:
            raise ValueError("TanhNormal.entropy is a sampled estimate: it needs a key")
        gaussian = 0.5 + _log_normalization(self.scale(params))
        return jnp.sum(gaussian + _log_det_tanh_jacobian(self.sample(key, params)), axis=-1)

    def kl(self, p, q):
        """KL(p || q) per batch element ``[...]``: the pre-squash Gaussians' (tanh is a bijection)."""
        scale_p, scale_q = self.scale(p), self.scale(q)
        return jnp.sum(jnp.log(scale_q / scale_p) + (jnp.square(scale_p) + jnp.square(p["loc"] - q["loc"]))
                       / (2 * jnp.square(scale_q)) - 0.5, axis=-1)

    def sample(self, key, params):
        """The pre-squash sample ``u [..., D]`` (Brax's ``sample_no_postprocessing``)."""
        return self.sample_from(self.draw(key, params), params)

    def draw(self, key, params):
        """The uniform noise of :meth:`sample` (``params`` may be shapes only)."""
        return normal_uniform(key, params["loc"].shape, params["loc"].dtype)

    def sample_from(self, noise, params):
        return standard_normal(noise) * self.scale(params) + params["loc"]

    def mode(self, params):
        return params["loc"]

    def fisher_product(self, params, tangent):
        """Fisher in (loc, raw_scale): ``1/scale^2`` on loc, ``2 (dscale/draw)^2 / scale^2`` on
        raw_scale, ``dscale/draw = sigmoid(raw_scale) * var_scale`` (diagonal)."""
        scale = self.scale(params)
        dscale = jax.nn.sigmoid(params["raw_scale"]) * TANH_VAR_SCALE
        return {"loc": tangent["loc"] / jnp.square(scale),
                "raw_scale": 2.0 * jnp.square(dscale / scale) * tangent["raw_scale"]}

    def postprocess(self, action):
        squashed = jnp.tanh(action)
        if self._center is None:
            return squashed
        return self._center + self._half_width * squashed


ACTION_DISTS = ("gaussian", "tanh_normal")  # network.action_dist


def for_spec(discrete: bool, action_dist: str = "gaussian", spec=None) -> Distribution:
    """The policy's distribution: categorical for discrete actions; for continuous ones a diagonal
    Gaussian or (``action_dist="tanh_normal"``) a :class:`TanhNormal` squashed onto ``spec``'s action
    bounds (an :class:`purejaxrl_opt.envs.EnvSpec`; bounds of exactly ``[-1, 1]`` or no spec: ``tanh``
    itself)."""
    if discrete:
        return Categorical()
    if action_dist == "gaussian":
        return DiagGaussian()
    if action_dist != "tanh_normal":
        raise ValueError(f"unknown action distribution {action_dist!r}; one of {list(ACTION_DISTS)}")
    if spec is None or (all(lo == -1.0 for lo in spec.action_low) and all(hi == 1.0 for hi in spec.action_high)):
        return TanhNormal()
    return TanhNormal(spec.action_low, spec.action_high)
