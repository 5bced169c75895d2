"""Per-backend implementations (purejaxrl_opt/config/implementations.py): what ``auto`` picks on each
backend, and that both choices of each key, wired through the network config, compute the same
function and gradients here on the CPU (tests/test_conv.py and tests/test_recurrent.py check the
pieces themselves against flax.linen.Conv and against autodiff of RecurrentCell)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxrl_opt.config import implementations
from purejaxrl_opt.config.schema import ConfigError, NetworkConfig
from purejaxrl_opt.envs import EnvSpec
from purejaxrl_opt.core.models.policies import make_policy, make_value, replay

MINATAR_LIKE = EnvSpec("image", (6, 6, 3), True, 3, None, None, 100)
VECTOR = EnvSpec("vector", (5,), True, 2, None, None, 100)


def test_auto_picks_the_measured_forms_per_backend():
    assert implementations.conv_impl("auto", "cpu") == "patch"
    assert implementations.recurrent_grad("auto", "cpu") == "fused"
    # the patch conv on GPU: 5.0x lax.conv for PPO on MinAtar at 1,024 lanes on an H200
    assert implementations.conv_impl("auto", "gpu") == "patch"
    assert implementations.conv_impl("auto", "tpu") == "lax"
    for platform in ("gpu", "tpu"):
        assert implementations.recurrent_grad("auto", platform) == "autodiff"
    for choice in ("patch", "lax"):  # an explicit choice holds on every backend
        assert implementations.conv_impl(choice, "gpu") == choice == implementations.conv_impl(choice, "cpu")
    assert implementations.recurrent_grad("fused", "tpu") == "fused"
    assert implementations.backend() == "cpu"  # tests/conftest.py: JAX_PLATFORMS=cpu
    assert implementations.describe() == {"backend": "cpu", "conv_impl": "patch", "recurrent_grad": "fused"}


@pytest.mark.parametrize("key,bad", [("conv_impl", "cudnn"), ("recurrent_grad", "fast")])
def test_unknown_choice_is_a_config_error_naming_the_key(key, bad):
    net = dataclasses.replace(NetworkConfig(), **{key: bad})
    with pytest.raises(ConfigError, match=f"network.{key}.*{bad}.*auto"):
        net.validate("network")


def _close(a, b, scale_tol=1e-4):
    a, b = np.asarray(a), np.asarray(b)
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=scale_tol * max(1.0, np.abs(b).max()))


# the patch convolution is checked against flax (lax.conv) in the fast tier (tests/test_conv.py)
@pytest.mark.slow
def test_conv_torso_patch_and_lax_agree_in_values_parameters_and_gradients():
    nets = {impl: NetworkConfig(hidden_sizes=(16,), cnn_channels=(4, 3), conv_impl=impl)
            for impl in ("patch", "lax")}
    actors = {impl: make_policy(MINATAR_LIKE, net) for impl, net in nets.items()}
    critics = {impl: make_value(MINATAR_LIKE, net) for impl, net in nets.items()}
    key = jax.random.PRNGKey(0)
    params = actors["patch"].init(key)
    # the same parameter tree and the same initial values under the same key
    lax_params = actors["lax"].init(key)
    assert jax.tree_util.tree_structure(params) == jax.tree_util.tree_structure(lax_params)
    for a, b in zip(jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(lax_params)):
        np.testing.assert_array_equal(a, b)
    obs = jax.random.uniform(jax.random.PRNGKey(1), (2, 7) + MINATAR_LIKE.obs_shape)

    def loss(impl, p):
        logits = actors[impl].apply(p, obs)["logits"]
        return jnp.sum(jnp.sin(3.0 * logits))

    _close(actors["patch"].apply(params, obs)["logits"], actors["lax"].apply(params, obs)["logits"])
    grads = {impl: jax.grad(lambda p, impl=impl: loss(impl, p))(params) for impl in nets}
    for a, b in zip(jax.tree_util.tree_leaves(grads["patch"]), jax.tree_util.tree_leaves(grads["lax"])):
        _close(a, b)
    assert float(jnp.abs(grads["lax"]["params"]["Torso_0"]["Conv_0"]["kernel"]).max()) > 1e-4
    value_params = critics["patch"].init(key)
    _close(critics["patch"].apply(value_params, obs), critics["lax"].apply(value_params, obs))


# the fused cell's derivative is checked against autodiff in the fast tier
# (tests/test_recurrent.py)
@pytest.mark.slow
@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_recurrent_fused_and_autodiff_agree_through_the_policy(cell):
    nets = {grad: NetworkConfig(hidden_sizes=(8,), recurrent=cell, recurrent_size=6, recurrent_grad=grad)
            for grad in ("fused", "autodiff")}
    policies = {grad: make_policy(VECTOR, net) for grad, net in nets.items()}
    params = policies["fused"].init(jax.random.PRNGKey(0))
    obs = jax.random.normal(jax.random.PRNGKey(1), (9, 3, 5))  # [T, N, obs]
    done = jnp.zeros((9, 3), bool).at[3, 1].set(True).at[6, 0].set(True)
    zero = policies["fused"].recurrence.zero((3,))

    def loss(grad, p):
        _, out, after = replay(policies[grad].recurrence, p, zero, obs, done)
        return jnp.sum(jnp.cos(2.0 * out["logits"])) + sum(jnp.sum(a) for a in jax.tree_util.tree_leaves(after))

    values = {grad: loss(grad, params) for grad in nets}
    _close(values["fused"], values["autodiff"])
    grads = {grad: jax.grad(lambda p, grad=grad: loss(grad, p))(params) for grad in nets}
    for a, b in zip(jax.tree_util.tree_leaves(grads["fused"]), jax.tree_util.tree_leaves(grads["autodiff"])):
        _close(a, b)
    assert float(jnp.abs(grads["fused"]["params"]["cell"]["recurrent_kernel"]).max()) > 1e-3
    # forward mode (TRPO's Fisher-vector products) too
    tangent = jax.tree_util.tree_map(jnp.cos, params)
    _, t_fused = jax.jvp(lambda p: loss("fused", p), (params,), (tangent,))
    _, t_auto = jax.jvp(lambda p: loss("autodiff", p), (params,), (tangent,))
    _close(t_fused, t_auto)


def test_checkpoint_fingerprint_leaves_out_auto_implementation_keys():
    """A checkpoint written before network.conv_impl / recurrent_grad existed has neither key: runs at
    the default (auto) must still match it; an explicit choice is part of the fingerprint."""
    from purejaxrl_opt.formats import checkpoint
    from purejaxrl_opt.config.schema import EnvConfig, RunConfig
    from purejaxrl_opt.core.algos.ppo import PPOConfig

    run = RunConfig(algo=PPOConfig(), env=EnvConfig(id="CartPole-v1"))
    auto = checkpoint.fingerprint(run, None, {})
    assert "conv_impl" not in auto["config"]["network"] and "recurrent_grad" not in auto["config"]["network"]
    explicit = dataclasses.replace(run, network=dataclasses.replace(run.network, conv_impl="lax"))
    lines = checkpoint.mismatches(auto, checkpoint.fingerprint(explicit, None, {}))
    assert lines == ["network.conv_impl: checkpoint has nothing, this run has 'lax'"]
