"""The conv torso's PatchConv against flax.linen.Conv: same parameters, same function, same gradients
(also vmapped over parameter lanes with per-lane inputs, the case that lowered to grouped convolutions),
and a compiled gradient that contains no convolution op."""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxrl_opt.core.models.networks import PatchConv, Torso



def assert_close(actual, desired):
    """float32 agreement up to summation order, relative to the largest magnitude in ``desired``.

    The two sides are different float32 programs (patches @ kernel vs XLA's convolution, other
    vmap and jit boundaries), so they round differently. With the random-normal parameters used here
    the sums are large (conv outputs of 10-100 fed to sin, 1024-term dense pre-activations) and on an
    AVX-512 Xeon each side is ~1e-5 of the largest value away from a float64 evaluation, the two ~1.5e-5
    apart. 1e-4 leaves room for other CPUs' summation orders; a misordered or transposed kernel is
    off by O(1)."""
    desired = np.asarray(desired)
    np.testing.assert_allclose(actual, desired, rtol=1e-5, atol=1e-4 * max(1.0, np.abs(desired).max()))


class FlaxConvStack(nn.Module):
    """Reference: relu(nn.Conv(c, 3x3, VALID)) per channel count, auto-named Conv_0, Conv_1, ..."""

    channels: Sequence[int]
    kernel_init: nn.initializers.Initializer = nn.initializers.lecun_normal()

    @nn.compact
    def __call__(self, x):
        for c in self.channels:
            x = nn.relu(nn.Conv(c, (3, 3), padding="VALID", kernel_init=self.kernel_init)(x))
        return x


class PatchConvStack(nn.Module):
    channels: Sequence[int]
    kernel_init: nn.initializers.Initializer = nn.initializers.lecun_normal()

    @nn.compact
    def __call__(self, x):
        for index, c in enumerate(self.channels):
            x = nn.relu(PatchConv(c, (3, 3), kernel_init=self.kernel_init, name=f"Conv_{index}")(x))
        return x


class FlaxConvTorso(nn.Module):
    """The torso as it was built with nn.Conv (what existing checkpoints hold)."""

    hidden_sizes: Sequence[int]
    cnn_channels: Sequence[int]

    @nn.compact
    def __call__(self, x):
        for c in self.cnn_channels:
            x = nn.relu(nn.Conv(c, (3, 3), padding="VALID",
                                kernel_init=nn.initializers.orthogonal(np.sqrt(2)))(x))
        x = x.reshape((x.shape[0], -1))
        for size in self.hidden_sizes:
            x = nn.tanh(nn.Dense(size, kernel_init=nn.initializers.orthogonal(np.sqrt(2)))(x))
        return x


def _random_params(params, key):
    """Replace every leaf (biases too, which init to zero) by normal noise, so a transposed or
    misordered kernel cannot match by accident."""
    leaves, tree = jax.tree_util.tree_flatten(params)
    keys = jax.random.split(key, len(leaves))
    return jax.tree_util.tree_unflatten(tree, [jax.random.normal(k, x.shape) for k, x in zip(keys, leaves)])


@pytest.mark.parametrize("shape,channels", [((5, 10, 10, 4), (16,)), ((3, 9, 7, 6), (8, 5))])
def test_same_parameters_and_initial_values_as_flax_conv(shape, channels):
    x = jnp.zeros(shape)
    ours = PatchConvStack(channels).init(jax.random.PRNGKey(0), x)
    ref = FlaxConvStack(channels).init(jax.random.PRNGKey(0), x)
    assert jax.tree_util.tree_structure(ours) == jax.tree_util.tree_structure(ref)
    for a, b in zip(jax.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(ref)):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert ours["params"]["Conv_0"]["kernel"].shape == (3, 3, shape[-1], channels[0])


@pytest.mark.parametrize("shape,channels", [((5, 10, 10, 4), (16,)), ((3, 9, 7, 6), (8, 5))])
def test_forward_and_gradients_match_flax_conv(shape, channels):
    x = jax.random.normal(jax.random.PRNGKey(1), shape)
    ours, ref = PatchConvStack(channels), FlaxConvStack(channels)
    params = _random_params(ref.init(jax.random.PRNGKey(0), x), jax.random.PRNGKey(2))
    weights = jax.random.normal(jax.random.PRNGKey(3), ref.apply(params, x).shape)

    def loss(module):
        return lambda p, x: jnp.sum(module.apply(p, x) * weights)

    assert_close(ours.apply(params, x), ref.apply(params, x))
    assert float(jnp.mean(ref.apply(params, x) > 0)) > 0.2  # relu not dead: gradients are non-trivial
    g_ours = jax.jit(jax.grad(loss(ours), argnums=(0, 1)))(params, x)
    g_ref = jax.jit(jax.grad(loss(ref), argnums=(0, 1)))(params, x)
    for a, b in zip(jax.tree_util.tree_leaves(g_ours), jax.tree_util.tree_leaves(g_ref)):
        assert float(jnp.abs(b).max()) > 0
        assert_close(a, b)


@pytest.mark.slow  # a big compile; the unvmapped equality and the lane tests of the training loop stay in the fast tier
def test_vmapped_over_parameter_lanes_with_per_lane_inputs_matches_flax_conv():
    lanes, channels = 3, (16, 4)
    xs = jax.random.normal(jax.random.PRNGKey(1), (lanes, 6, 10, 10, 4))
    ours, ref = PatchConvStack(channels), FlaxConvStack(channels)
    params = jax.vmap(lambda k: _random_params(ref.init(k, xs[0]), k))(
        jax.random.split(jax.random.PRNGKey(0), lanes))

    def grad_fn(module):
        return jax.jit(jax.vmap(jax.value_and_grad(lambda p, x: jnp.sum(jnp.sin(module.apply(p, x))))))

    (v_ours, g_ours), (v_ref, g_ref) = grad_fn(ours)(params, xs), grad_fn(ref)(params, xs)
    assert_close(v_ours, v_ref)
    for a, b in zip(jax.tree_util.tree_leaves(g_ours), jax.tree_util.tree_leaves(g_ref)):
        assert_close(a, b)
    # and each lane on its own: the vmap did not mix lanes
    for lane in range(lanes):
        p = jax.tree_util.tree_map(lambda x: x[lane], params)
        g = jax.grad(lambda p: jnp.sum(jnp.sin(ref.apply(p, xs[lane]))))(p)
        for a, b in zip(jax.tree_util.tree_leaves(g), jax.tree_util.tree_leaves(g_ours)):
            assert_close(a, b[lane])


def test_torso_loads_parameters_of_the_flax_conv_torso():
    """A checkpoint written when the torso used nn.Conv restores into this one and computes the same."""
    obs = jax.random.bernoulli(jax.random.PRNGKey(1), 0.3, (2, 7, 10, 10, 4))  # MinAtar: bool images
    torso = Torso(3, (64, 64), "tanh", (16,))
    old = FlaxConvTorso((64, 64), (16,))
    old_params = _random_params(old.init(jax.random.PRNGKey(0), obs[0].astype(jnp.float32)),
                                jax.random.PRNGKey(5))
    new_params = torso.init(jax.random.PRNGKey(0), obs)
    assert jax.tree_util.tree_structure(new_params) == jax.tree_util.tree_structure(old_params)
    out = torso.apply(old_params, obs)
    assert out.shape == (2, 7, 64)
    ref = jax.vmap(lambda o: old.apply(old_params, o.astype(jnp.float32)))(obs)
    assert_close(out, ref)


def test_vmapped_torso_gradient_compiles_without_convolutions():
    """What made the conv torso slow on CPU was XLA's convolution for the kernel gradient (a grouped
    one under vmap); the patches formulation must leave only dots in the compiled program."""
    lanes = 2
    torso = Torso(3, (64,), "tanh", (16,))
    xs = jnp.ones((lanes, 128, 10, 10, 4))
    params = jax.vmap(torso.init)(jax.random.split(jax.random.PRNGKey(0), lanes), xs)
    grad = jax.jit(jax.vmap(jax.grad(lambda p, x: jnp.sum(torso.apply(p, x) ** 2))))
    hlo = grad.lower(params, xs).compile().as_text()
    assert " convolution(" not in hlo
    assert " dot(" in hlo or " dot_general(" in hlo
