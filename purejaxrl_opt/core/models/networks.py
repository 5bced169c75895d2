"""Flax modules: actor heads (categorical, diagonal Gaussian, tanh-squashed Gaussian) and critic, on an MLP or CNN torso.

Actor and critic are separate modules with separate parameters (``{"actor": ..., "critic": ...}``) so
that TRPO can step the policy alone and GRPO can drop the critic. PPO can also share the torso (and the
recurrent cell) between them (``network.shared``: :class:`ActorCritic`, :class:`RecurrentActorCritic`,
two heads on one trunk, as Craftax_Baselines' ``ppo_rnn.py`` or CleanRL's Atari PPO). Inputs are
``[..., *obs_shape]`` with any number of leading batch axes.
"""

from __future__ import annotations

from typing import Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from purejaxrl_opt.config import implementations
from purejaxrl_opt.config.schema import NetworkConfig
from purejaxrl_opt.core.models.distributions import mask_logits
from purejaxrl_opt.envs import EnvSpec

ACTIVATIONS: dict[str, Callable] = {"tanh": nn.tanh, "relu": nn.relu, "gelu": nn.gelu, "silu": nn.silu}


def _dense(features: int, scale: float, init: str = "orthogonal") -> nn.Dense:
    """A dense layer with zero biases and ``network.init``'s kernels: ``orthogonal`` with gain ``scale``
    (PureJaxRL's and CleanRL's: sqrt(2) hidden, 0.01 policy output, 1.0 value output) or
    ``lecun_uniform`` (Brax's MLP on every layer, outputs too; ``scale`` unused)."""
    kernel = (nn.initializers.lecun_uniform() if init == "lecun_uniform"
              else nn.initializers.orthogonal(scale))
    return nn.Dense(features, kernel_init=kernel, bias_init=nn.initializers.zeros)


def patch_indices(height: int, width: int, channels: int, kh: int, kw: int) -> np.ndarray:
    """Flat indices into an ``[H*W*C]`` image of every VALID ``kh x kw`` patch, ``[out_h*out_w*kh*kw*C]``:
    position-major, then the patch's features in the order ``(i, j, c)`` of the row-major flattening
    of a kernel ``[kh, kw, C, :]``."""
    flat = np.arange(height * width * channels).reshape(height, width, channels)
    out_h, out_w = height - kh + 1, width - kw + 1
    patches = np.stack([flat[i:i + out_h, j:j + out_w, :] for i in range(kh) for j in range(kw)], axis=2)
    return patches.reshape(-1)


class PatchConv(nn.Module):
    """A stride-1 VALID convolution ``[N, H, W, C] -> [N, H-kh+1, W-kw+1, features]`` computed as
    im2col patches times one matrix: the same function and parameters as ``flax.linen.Conv(features,
    kernel_size, padding="VALID")`` (``kernel [kh, kw, C, features]``, ``bias [features]``; flax's
    initialisers draw the same values under the same name).

    Why not ``nn.Conv``: XLA:CPU runs a convolution fast only in its canonical layout (Eigen's spatial
    convolution). The kernel gradient of a conv is itself a convolution that contracts over the batch
    and the output positions (``dim_labels=f01b_i01o->01bf``); XLA:CPU emits it as a plain loop nest,
    which in PPO on MinAtar cost ~10x the forward conv of the same multiply-adds and >50% of the
    update's time; vmapped over lanes with per-lane inputs it turns into a grouped convolution
    (``feature_group_count=lanes``) that is slower still. As patches @ kernel, the forward, both
    gradients and the vmap over lanes are ordinary (batched) matmuls. See experiments/bench_cnn.py.

    The patches are one gather with constant indices (:func:`patch_indices`), not a concatenation of
    ``kh*kw`` shifted slices: vmapped over lanes (a leading lane axis on the image), XLA:CPU ran that
    rank-5 minor-axis concatenation 3-5x slower than the same one unbatched, and the critic's forward
    over a rollout (512 Breakout observations) took 3.3 ms instead of 1.2 ms; the gather costs the
    same with or without the lane axis (PPO on Breakout-MinAtar: 13.4k -> 17.5k env steps/s).
    """

    features: int
    kernel_size: tuple[int, int] = (3, 3)
    kernel_init: Callable = nn.initializers.lecun_normal()
    bias_init: Callable = nn.initializers.zeros

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        kh, kw = self.kernel_size
        n, height, width, channels = x.shape
        if height < kh or width < kw:
            raise ValueError(f"PatchConv: input {height}x{width} is smaller than the {kh}x{kw} kernel")
        kernel = self.param("kernel", self.kernel_init, (kh, kw, channels, self.features), jnp.float32)
        bias = self.param("bias", self.bias_init, (self.features,), jnp.float32)
        out_h, out_w = height - kh + 1, width - kw + 1
        patches = jnp.take(x.reshape((n, height * width * channels)),
                           patch_indices(height, width, channels, kh, kw), axis=1, mode="clip")
        out = patches.reshape((-1, kh * kw * channels)) @ kernel.reshape((kh * kw * channels, -1))
        return (out + bias).reshape((n, out_h, out_w, self.features))


def _lax_conv(features: int, kernel_size: tuple[int, int], kernel_init: Callable, name: str) -> nn.Conv:
    """The stride-1 VALID ``flax.linen.Conv`` that :class:`PatchConv` computes another way."""
    return nn.Conv(features, kernel_size, padding="VALID", kernel_init=kernel_init,
                   bias_init=nn.initializers.zeros, name=name)


class Torso(nn.Module):
    """Conv layers for image observations (``[..., H, W, C]``), then an MLP; flattens other shapes.

    Conv layer ``i`` is named ``Conv_i``, a :class:`PatchConv` (``conv_impl="patch"``, the CPU and
    GPU choice) or ``flax.linen.Conv`` (``"lax"``: ``lax.conv``, cuDNN on GPU); ``"auto"`` picks by backend
    (purejaxrl_opt/config/implementations.py). The parameter tree is the same either way
    (``Conv_0/kernel [3, 3, C_in, C_out]``, ``Conv_0/bias``), so checkpoints load either way and the
    initial values are the same.
    """

    obs_ndim: int
    hidden_sizes: Sequence[int]
    activation: str
    cnn_channels: Sequence[int] = ()
    conv_impl: str = "auto"
    dense_init: str = "orthogonal"  # network.init: the dense layers' kernels (conv layers stay orthogonal)

    @nn.compact
    def __call__(self, obs: jnp.ndarray) -> jnp.ndarray:
        act = ACTIVATIONS[self.activation]
        batch_shape = obs.shape[: obs.ndim - self.obs_ndim]
        # explicit sizes, not -1: an empty batch (a replay of zero steps) must reshape too
        x = obs.reshape((int(np.prod(batch_shape)),) + obs.shape[obs.ndim - self.obs_ndim:]).astype(jnp.float32)
        if self.obs_ndim == 3:
            conv = PatchConv if implementations.conv_impl(self.conv_impl) == "patch" else _lax_conv
            for index, channels in enumerate(self.cnn_channels):
                x = nn.relu(conv(channels, (3, 3), kernel_init=nn.initializers.orthogonal(np.sqrt(2)),
                                 name=f"Conv_{index}")(x))
        x = x.reshape((x.shape[0], int(np.prod(x.shape[1:]))))
        for size in self.hidden_sizes:
            x = act(_dense(size, np.sqrt(2), self.dense_init)(x))
        return x.reshape(batch_shape + (x.shape[-1],))


def policy_input(spec: EnvSpec, obs: jnp.ndarray) -> jnp.ndarray:
    """What the policy reads of observations ``[..., D]``: the first ``spec.policy_obs_size`` entries
    for an asymmetric actor-critic (``env.params.critic_obs_key``), else all of them."""
    return obs if spec.policy_obs_size is None else obs[..., :spec.policy_obs_size]


def critic_input(spec: EnvSpec, obs: jnp.ndarray) -> jnp.ndarray:
    """What the critic reads of observations ``[..., D]``: the entries after the policy's for an
    asymmetric actor-critic (e.g. Playground's ``privileged_state``), else all of them."""
    return obs if spec.policy_obs_size is None else obs[..., spec.policy_obs_size:]


def action_mask_of(spec: EnvSpec, obs: jnp.ndarray) -> jnp.ndarray:
    """The legal-action mask ``[..., A]`` of observations ``[..., D]`` of an env with
    ``spec.action_mask``: their last ``A`` entries (envs/protocol: 1 = legal)."""
    return obs[..., obs.shape[-1] - spec.num_actions:]


def masked(spec: EnvSpec, logits: jnp.ndarray, obs: jnp.ndarray) -> jnp.ndarray:
    """``logits`` with the actions ``obs`` marks illegal masked out (unchanged unless ``spec.action_mask``).

    The mask entries stay in the observation the torso sees: they are a function of the state (e.g.
    Snake: which neighbours are free), so they are features the critic and the actor can use, and the
    torso, the critic and the observation shape are the same for every env."""
    if not spec.action_mask:
        return logits
    return mask_logits(logits, action_mask_of(spec, obs))


def _tanh_normal(spec: EnvSpec, net: NetworkConfig) -> bool:
    return not spec.discrete and net.action_dist == "tanh_normal"


def _log_std(module: nn.Module, spec: EnvSpec, net: NetworkConfig) -> jnp.ndarray | None:
    """A continuous Gaussian policy's state-free ``log_std [A]`` parameter of ``module`` (initial
    ``network.log_std_init``); None for a categorical or tanh-normal policy (no such parameter)."""
    if spec.discrete or _tanh_normal(spec, net):
        return None
    return module.param("log_std", nn.initializers.constant(net.log_std_init), (spec.num_actions,))


def _policy_out(spec: EnvSpec, net: NetworkConfig) -> nn.Dense:
    """The policy's output layer: ``A`` logits or means; ``2A`` (loc, raw scale) for tanh_normal, whose
    scale depends on the state as in Brax's policy network."""
    return _dense(spec.num_actions * (2 if _tanh_normal(spec, net) else 1), 0.01, net.init)


def _distribution(spec: EnvSpec, net: NetworkConfig, out: jnp.ndarray, log_std) -> dict[str, jnp.ndarray]:
    """Distribution parameters of an output layer's ``out [..., A]`` (``[..., 2A]`` for tanh_normal):
    categorical logits, a diagonal Gaussian's mean with ``log_std`` broadcast to it, or a tanh-normal's
    ``loc`` and ``raw_scale`` (the first and second halves of ``out``, Brax's split)."""
    if spec.discrete:
        return {"logits": out}
    if _tanh_normal(spec, net):
        loc, raw_scale = jnp.split(out, 2, axis=-1)
        return {"loc": loc, "raw_scale": raw_scale}
    return {"mean": out, "log_std": jnp.broadcast_to(log_std, out.shape)}


class Actor(nn.Module):
    """Policy network: observation -> distribution parameters (see distributions.py)."""

    spec: EnvSpec
    net: NetworkConfig

    @nn.compact
    def __call__(self, obs: jnp.ndarray) -> dict[str, jnp.ndarray]:
        x = Torso(len(self.spec.obs_shape), self.net.hidden_sizes, self.net.activation,
                  self.net.cnn_channels, self.net.conv_impl, self.net.init)(policy_input(self.spec, obs))
        out = _policy_out(self.spec, self.net)(x)
        if self.spec.discrete:
            return {"logits": masked(self.spec, out, obs)}
        return _distribution(self.spec, self.net, out, _log_std(self, self.spec, self.net))


class Critic(nn.Module):
    """State-value network: observation ``[..., *obs_shape]`` -> value ``[...]``."""

    spec: EnvSpec
    net: NetworkConfig

    @nn.compact
    def __call__(self, obs: jnp.ndarray) -> jnp.ndarray:
        x = Torso(len(self.spec.obs_shape), self.net.critic_sizes, self.net.activation,
                  self.net.cnn_channels, self.net.conv_impl, self.net.init)(critic_input(self.spec, obs))
        return _dense(1, 1.0, self.net.init)(x)[..., 0]


class Heads(nn.Module):
    """The actor's and the critic's heads on one trunk's features ``[..., F]`` (``network.shared``): each
    is the hidden layers ``network.head_sizes`` (activation ``network.activation``) then its output layer
    (actor: scale 0.01, and a state-free ``log_std`` for Gaussian actions; critic: scale 1)."""

    spec: EnvSpec
    net: NetworkConfig

    def setup(self):
        self.actor_layers = [_dense(size, np.sqrt(2), self.net.init) for size in self.net.head_sizes]
        self.actor_out = _policy_out(self.spec, self.net)
        self.log_std = _log_std(self, self.spec, self.net)
        self.critic_layers = [_dense(size, np.sqrt(2), self.net.init) for size in self.net.head_sizes]
        self.critic_out = _dense(1, 1.0, self.net.init)

    def _hidden(self, layers, x: jnp.ndarray) -> jnp.ndarray:
        act = ACTIVATIONS[self.net.activation]
        for layer in layers:
            x = act(layer(x))
        return x

    def actor(self, x: jnp.ndarray) -> dict[str, jnp.ndarray]:
        return _distribution(self.spec, self.net, self.actor_out(self._hidden(self.actor_layers, x)),
                             self.log_std)

    def critic(self, x: jnp.ndarray) -> jnp.ndarray:
        return self.critic_out(self._hidden(self.critic_layers, x))[..., 0]

    def __call__(self, x: jnp.ndarray):
        return self.actor(x), self.critic(x)


class ActorCritic(nn.Module):
    """Actor and critic on one (conv +) MLP torso (``network.shared``, feed-forward): ``actor(obs)``
    (distribution parameters, illegal actions masked), ``critic(obs)`` (values) and ``__call__(obs)``
    (both from one pass of the torso)."""

    spec: EnvSpec
    net: NetworkConfig

    def setup(self):
        self.torso = Torso(len(self.spec.obs_shape), self.net.hidden_sizes, self.net.activation,
                           self.net.cnn_channels, self.net.conv_impl, self.net.init)
        self.heads = Heads(self.spec, self.net)

    def actor(self, obs: jnp.ndarray) -> dict[str, jnp.ndarray]:
        return _masked_out(self.spec, self.heads.actor(self.torso(obs)), obs)

    def critic(self, obs: jnp.ndarray) -> jnp.ndarray:
        return self.heads.critic(self.torso(obs))

    def __call__(self, obs: jnp.ndarray):
        out, value = self.heads(self.torso(obs))
        return _masked_out(self.spec, out, obs), value


def _masked_out(spec: EnvSpec, out: dict, obs: jnp.ndarray) -> dict:
    return dict(out, logits=masked(spec, out["logits"], obs)) if spec.discrete else out


# --------------------------------------------------------------------------- recurrent (GRU / LSTM)
def zero_memory(net: NetworkConfig, batch_shape: tuple[int, ...]):
    """The zero hidden state of the recurrent cell for ``batch_shape`` (GRU: ``h``; LSTM: ``(c, h)``)."""
    h = jnp.zeros(batch_shape + (net.recurrent_size,), jnp.float32)
    return (h, h) if net.recurrent == "lstm" else h


GATES = {"gru": 3, "lstm": 4}  # gate blocks of the fused input and hidden kernels


def _per_gate(init: Callable, num_gates: int) -> Callable:
    """An initialiser of a fused ``[in, num_gates * H]`` kernel that draws each ``[in, H]`` gate block
    on its own key: the same distribution as flax's one ``Dense`` per gate (an orthogonal init of the
    whole ``[H, 3H]`` would not be: only its rows would be orthonormal, not each block)."""

    def block_init(key, shape, dtype=jnp.float32):
        size = shape[-1] // num_gates
        blocks = [init(k, shape[:-1] + (size,), dtype) for k in jax.random.split(key, num_gates)]
        return jnp.concatenate(blocks, axis=-1)

    return block_init


class RecurrentCell(nn.Module):
    """A GRU or LSTM cell split into its input side and its hidden side, with all gates fused.

    ``project(x [..., D]) -> [..., G*H]`` is the input side of every gate (one matmul, biases
    included); it does not depend on the hidden state, so a sequence projects all its steps at once.
    ``__call__(memory, projected) -> (memory, h)`` is the rest: one ``[H, G*H]`` matmul of the hidden
    state and the gates' elementwise math -- the only part a scan over time has to run step by step.

    The same function as ``flax.linen.GRUCell`` (gates r, z, n) and ``OptimizedLSTMCell`` (i, f, g, o):
    their per-gate kernels are the column blocks of ``input/kernel`` and ``recurrent_kernel``; GRU's
    input biases are ``input/bias`` and its ``hn`` bias is ``recurrent_bias``; the LSTM's hidden-side
    biases (flax's ``h*`` biases; its input side has none) are folded into ``input/bias``
    (tests/test_recurrent.py maps flax's parameters onto these and compares).
    """

    cell: str  # gru | lstm
    size: int

    def setup(self):
        gates = GATES[self.cell]
        self.input = nn.Dense(gates * self.size, kernel_init=_per_gate(nn.initializers.lecun_normal(), gates),
                              bias_init=nn.initializers.zeros)
        self.recurrent_kernel = self.param("recurrent_kernel", _per_gate(nn.initializers.orthogonal(), gates),
                                           (self.size, gates * self.size), jnp.float32)
        if self.cell == "gru":  # n's hidden side has its own bias: it is scaled by r
            self.recurrent_bias = self.param("recurrent_bias", nn.initializers.zeros, (self.size,), jnp.float32)

    def project(self, x: jnp.ndarray) -> jnp.ndarray:
        return self.input(x)

    def __call__(self, memory, projected: jnp.ndarray):
        bias = self.recurrent_bias if self.cell == "gru" else None
        return cell_update(self.cell, hidden_side(self.cell, memory, self.recurrent_kernel, bias), projected,
                           memory)


def hidden_of(cell: str, memory) -> jnp.ndarray:
    """The hidden state ``h`` of a cell's memory (GRU: ``h``; LSTM: ``(c, h)``)."""
    return memory if cell == "gru" else memory[1]


def hidden_bias(recurrent_bias) -> jnp.ndarray | float:
    """GRU's ``recurrent_bias [H]`` as a bias of all three gates' hidden side ``[3H]`` (zero on r and z);
    the LSTM has none (0)."""
    if recurrent_bias is None:
        return 0.0
    return jnp.concatenate([jnp.zeros(recurrent_bias.shape[:-1] + (2 * recurrent_bias.shape[-1],),
                                      recurrent_bias.dtype), recurrent_bias], axis=-1)


def hidden_side(cell: str, memory, recurrent_kernel: jnp.ndarray, recurrent_bias) -> jnp.ndarray:
    """``h @ recurrent_kernel`` plus GRU's n-gate bias: every gate's hidden-side pre-activation."""
    return hidden_of(cell, memory) @ recurrent_kernel + hidden_bias(recurrent_bias)


def _gru_gates(hidden: jnp.ndarray, projected: jnp.ndarray):
    """GRU's reset and update gates, candidate state and hidden-side n pre-activation."""
    hr, hz, hn = jnp.split(hidden, 3, axis=-1)
    xr, xz, xn = jnp.split(projected, 3, axis=-1)
    r = nn.sigmoid(xr + hr)
    z = nn.sigmoid(xz + hz)
    return r, z, jnp.tanh(xn + r * hn), hn


def cell_update(cell: str, hidden: jnp.ndarray, projected: jnp.ndarray, memory):
    """One step's gates given both sides: ``hidden`` (:func:`hidden_side`) and ``projected`` (the
    input side) -> ``(memory, h)``."""
    if cell == "gru":
        h = memory
        _, z, n, _ = _gru_gates(hidden, projected)
        h = (1.0 - z) * n + z * h
        return h, h
    c, h = memory
    i, f, g, o = jnp.split(projected + hidden, 4, axis=-1)
    c = nn.sigmoid(f) * c + nn.sigmoid(i) * jnp.tanh(g)
    h = nn.sigmoid(o) * jnp.tanh(c)
    return (c, h), h


def _fold(v: jnp.ndarray, gates: int) -> jnp.ndarray:
    return sum(jnp.split(v, gates, axis=-1))


def cell_jacobian(cell: str, hidden: jnp.ndarray, projected: jnp.ndarray, memory) -> dict:
    """The factors of :func:`cell_update`'s derivative at a point (any leading axes, computed for all
    steps at once): :func:`cell_tangent` with them is its JVP, a function linear in the tangents."""
    if cell == "gru":
        h = memory
        r, z, n, hn = _gru_gates(hidden, projected)
        dn = (1.0 - z) * (1.0 - n * n)  # dh / d(n's pre-activation)
        dr = dn * hn * r * (1.0 - r)
        dz = (h - n) * z * (1.0 - z)
        return {"input": jnp.concatenate([dr, dz, dn], -1), "hidden": jnp.concatenate([dr, dz, dn * r], -1),
                "keep": z}
    c, _ = memory
    i, f, g, o = jnp.split(projected + hidden, 4, axis=-1)
    si, sf, so, tg = nn.sigmoid(i), nn.sigmoid(f), nn.sigmoid(o), jnp.tanh(g)
    tc = jnp.tanh(sf * c + si * tg)
    return {"gates": jnp.concatenate([si * (1.0 - si) * tg, sf * (1.0 - sf) * c, si * (1.0 - tg * tg)], -1),
            "keep": sf, "out": so * (1.0 - so) * tc, "through": so * (1.0 - tc * tc)}


def cell_tangent(cell: str, jac: dict, d_projected: jnp.ndarray, d_hidden: jnp.ndarray, d_memory):
    """The tangent ``(d_memory, dh)`` of :func:`cell_update` at the point of ``jac``
    (:func:`cell_jacobian`) for tangents of its input side, hidden side and memory."""
    if cell == "gru":
        dh = _fold(jac["input"] * d_projected + jac["hidden"] * d_hidden, 3) + jac["keep"] * d_memory
        return dh, dh
    dc, _ = d_memory
    da = d_projected + d_hidden
    size = da.shape[-1] // 4
    dc = _fold(jac["gates"] * da[..., :3 * size], 3) + jac["keep"] * dc
    dh = jac["out"] * da[..., 3 * size:] + jac["through"] * dc
    return (dc, dh), dh


class _RecurrentNetwork(nn.Module):
    """Torso -> recurrent cell -> head, as three methods so a sequence runs only the cell's hidden side
    step by step (policies.replay):

    * ``embed(obs [..., *obs]) -> [..., G*H]``: the (conv +) MLP torso and the cell's input side;
    * ``core(memory, embedded) -> (memory, h)``: one step of the cell's hidden side;
    * ``head(h [..., H]) -> out``: the hidden layers ``network.head_sizes`` (none by default), then the
      output layer;

    ``__call__(memory, obs)`` is one step of all three (acting, and ``init``). Any leading axes.
    """

    spec: EnvSpec
    net: NetworkConfig

    critic: bool = False  # the critic's torso widths (network.critic_hidden_sizes)

    def setup(self):
        sizes = self.net.critic_sizes if self.critic else self.net.hidden_sizes
        self.torso = Torso(len(self.spec.obs_shape), sizes, self.net.activation,
                           self.net.cnn_channels, self.net.conv_impl, self.net.init)
        self.cell = RecurrentCell(self.net.recurrent, self.net.recurrent_size)
        self.setup_head()

    def head_hidden(self, h: jnp.ndarray) -> jnp.ndarray:
        act = ACTIVATIONS[self.net.activation]
        for layer in self.head_layers:
            h = act(layer(h))
        return h

    def embed(self, obs: jnp.ndarray) -> jnp.ndarray:
        obs = critic_input(self.spec, obs) if self.critic else policy_input(self.spec, obs)
        return self.cell.project(self.torso(obs))

    def core(self, memory, embedded: jnp.ndarray):
        return self.cell(memory, embedded)

    def __call__(self, memory, obs: jnp.ndarray):
        memory, h = self.core(memory, self.embed(obs))
        return memory, self.head(h)


class RecurrentActor(_RecurrentNetwork):
    """Recurrent policy: ``(memory, obs) -> (memory, distribution parameters)`` per step."""

    def setup_head(self):
        self.head_layers = [_dense(size, np.sqrt(2), self.net.init) for size in self.net.head_sizes]
        self.out = _policy_out(self.spec, self.net)
        self.log_std = _log_std(self, self.spec, self.net)

    def head(self, h: jnp.ndarray) -> dict[str, jnp.ndarray]:
        return _distribution(self.spec, self.net, self.out(self.head_hidden(h)), self.log_std)


class RecurrentCritic(_RecurrentNetwork):
    """Recurrent value function: ``(memory, obs) -> (memory, value [...])`` per step."""

    critic: bool = True

    def setup_head(self):
        self.head_layers = [_dense(size, np.sqrt(2), self.net.init) for size in self.net.head_sizes]
        self.out = _dense(1, 1.0, self.net.init)

    def head(self, h: jnp.ndarray) -> jnp.ndarray:
        return self.out(self.head_hidden(h))[..., 0]


class RecurrentActorCritic(_RecurrentNetwork):
    """Actor and critic on one torso and recurrent cell (``network.shared``, recurrent): one hidden
    state, then :class:`Heads`. ``head(h)`` is both outputs, ``actor_head(h)`` / ``critic_head(h)`` one
    each (logits unmasked: the policy's ``Recurrence.finish`` masks them)."""

    def setup_head(self):
        self.heads = Heads(self.spec, self.net)

    def head(self, h: jnp.ndarray):
        return self.heads(h)

    def actor_head(self, h: jnp.ndarray) -> dict[str, jnp.ndarray]:
        return self.heads.actor(h)

    def critic_head(self, h: jnp.ndarray) -> jnp.ndarray:
        return self.heads.critic(h)


def count_params(params) -> int:
    return int(sum(np.prod(x.shape) for x in jax.tree_util.tree_leaves(params)))
