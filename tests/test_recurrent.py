"""Recurrent policies (network.recurrent=gru|lstm): hidden-state resets at episode ends, the update's
replay of the rollout, the critic's bootstrap, TRPO's Fisher-vector product through a GRU, GRPO's
episode re-scoring, observation masking, and resume / in-compile sweeps with a recurrent state."""

from __future__ import annotations

import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from purejaxrl_opt.core import algos
from purejaxrl_opt import envs
from purejaxrl_opt.core.stages import natural_gradient as ng, rollout
from purejaxrl_opt.core.stages.actor_critic import make_stage, replay_actor, replay_critic
from purejaxrl_opt.config.schema import ConfigError, EnvConfig, NetworkConfig, RunConfig, from_dictconfig, hyperparameters
from purejaxrl_opt.core.algos.grpo import GRPOConfig
from purejaxrl_opt.core.algos.ppo import PPOConfig
from purejaxrl_opt.core.algos.trpo import TRPOConfig
from purejaxrl_opt.core.models.distributions import Categorical, DiagGaussian
from purejaxrl_opt.envs import EnvSpec
from purejaxrl_opt.core.models.networks import GATES
from purejaxrl_opt.core.models.policies import make_policy, replay

CARTPOLE = EnvSpec("CartPole-v1", (4,), True, 2, None, None, 500)


def _net(cell: str, size: int = 8) -> NetworkConfig:
    return NetworkConfig(hidden_sizes=(16,), recurrent=cell, recurrent_size=size)


def _run(algo, cell="gru", obs_mask=(1, 0, 1, 0), **kwargs) -> RunConfig:
    run = RunConfig(algo=algo, env=EnvConfig(id="CartPole-v1", obs_mask=obs_mask), network=_net(cell, 16),
                    **kwargs)
    run.validate()
    return run


# --------------------------------------------------------------------------- the cell
def _flax_to_fused(cell: str, flax_params) -> dict:
    """flax's per-gate GRUCell / OptimizedLSTMCell parameters as RecurrentCell's fused ones."""
    p = flax_params["params"]
    if cell == "gru":
        return {"input": {"kernel": jnp.concatenate([p[g]["kernel"] for g in ("ir", "iz", "in")], -1),
                          "bias": jnp.concatenate([p[g]["bias"] for g in ("ir", "iz", "in")], -1)},
                "recurrent_kernel": jnp.concatenate([p[g]["kernel"] for g in ("hr", "hz", "hn")], -1),
                "recurrent_bias": p["hn"]["bias"]}
    gates = ("i", "f", "g", "o")
    return {"input": {"kernel": jnp.concatenate([p["i" + g]["kernel"] for g in gates], -1),
                      "bias": jnp.concatenate([p["h" + g]["bias"] for g in gates], -1)},
            "recurrent_kernel": jnp.concatenate([p["h" + g]["kernel"] for g in gates], -1)}


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_fused_cell_is_flaxs_cell_and_a_projected_sequence_is_its_steps(cell):
    import flax.linen as nn

    from purejaxrl_opt.core.models.networks import RecurrentCell

    size, dim = 5, 3
    reference = nn.GRUCell(size) if cell == "gru" else nn.OptimizedLSTMCell(size)
    h0 = jax.random.normal(jax.random.PRNGKey(1), (4, size))
    memory = h0 if cell == "gru" else (jax.random.normal(jax.random.PRNGKey(2), (4, size)), h0)
    xs = jax.random.normal(jax.random.PRNGKey(3), (7, 4, dim))  # [T, N, D]
    flax_params = reference.init(jax.random.PRNGKey(0), memory, xs[0])
    # non-zero biases, so a misplaced bias (GRU's n gate: inside r * (...)) shows
    flax_params = jax.tree_util.tree_map(
        lambda x: x + 0.3 * jax.random.normal(jax.random.PRNGKey(x.size), x.shape), flax_params)
    fused = RecurrentCell(cell, size)
    params = {"params": _flax_to_fused(cell, flax_params)}
    # the mapped tree is the cell's subtree of the network the policy builds
    network = make_policy(EnvSpec("tiny", (dim,), True, 2, None, None, 0),
                          NetworkConfig(hidden_sizes=(), recurrent=cell, recurrent_size=size))
    built = network.init(jax.random.PRNGKey(0))["params"]["cell"]
    assert jax.tree_util.tree_structure(params["params"]) == jax.tree_util.tree_structure(built)
    assert jax.tree_util.tree_map(jnp.shape, params["params"]) == jax.tree_util.tree_map(jnp.shape, built)

    projected = fused.apply(params, xs, method="project")  # all steps at once
    m_ref, m_fused = memory, memory
    for t in range(xs.shape[0]):
        m_ref, out_ref = reference.apply(flax_params, m_ref, xs[t])
        m_fused, out = fused.apply(params, m_fused, projected[t])
        # float tolerance: the gates' matmuls are fused and the biases added in another order
        np.testing.assert_allclose(out, out_ref, rtol=1e-5, atol=1e-6)
        for a, b in zip(jax.tree_util.tree_leaves(m_fused), jax.tree_util.tree_leaves(m_ref)):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert float(jnp.abs(out).max()) > 0.1


def test_fused_init_draws_each_gate_block_like_flax():
    """The hidden-side kernel is orthogonal per [H, H] gate block (flax's per-gate init), not as a
    whole [H, 3H] matrix."""
    from purejaxrl_opt.core.models.networks import RecurrentCell

    params = RecurrentCell("gru", 6).init(jax.random.PRNGKey(0), jnp.zeros((1, 6)), jnp.zeros((1, 18)))
    kernel = np.asarray(params["params"]["recurrent_kernel"])
    assert kernel.shape == (6, 18)
    for block in np.split(kernel, 3, axis=1):
        np.testing.assert_allclose(block.T @ block, np.eye(6), atol=1e-5)
    assert np.abs(kernel.T @ kernel - np.eye(18)).max() > 0.1
    assert np.all(np.asarray(params["params"]["recurrent_bias"]) == 0)


# the LSTM's fused derivative in the slow tier (its cell against flax's is in the fast tier above)
@pytest.mark.parametrize("cell", ["gru", pytest.param("lstm", marks=pytest.mark.slow)])
def test_scanned_sequence_and_its_derivatives_equal_plain_autodiff_of_the_steps(cell):
    """policies.scan_cell (a custom JVP, for speed) against scanning RecurrentCell.__call__ with
    JAX's own derivatives: outputs, gradients and forward-mode tangents, with resets inside."""
    from purejaxrl_opt.core.models.networks import RecurrentCell
    from purejaxrl_opt.core.models.policies import reset_where, scan_cell

    size, steps, batch = 4, 6, 3
    module = RecurrentCell(cell, size)
    memory = jax.random.normal(jax.random.PRNGKey(1), (batch, size))
    memory = memory if cell == "gru" else (0.5 * memory, jnp.tanh(memory))
    projected = jax.random.normal(jax.random.PRNGKey(2), (steps, batch, GATES[cell] * size))
    done = jnp.zeros((steps, batch), bool).at[2, 0].set(True).at[4, 2].set(True)
    params = module.init(jax.random.PRNGKey(0), memory, projected[0])
    params = jax.tree_util.tree_map(lambda x: x + 0.3 * jax.random.normal(jax.random.PRNGKey(x.size), x.shape),
                                    params)

    def reference(p, m, x):
        def _step(m, inputs):
            m, h = module.apply(p, m, inputs[0])
            return reset_where(m, inputs[1]), (h, m)
        last, (h, after) = jax.lax.scan(_step, m, (x, done))
        return last, h, after

    def fused(p, m, x):
        cell_params = p["params"]
        return scan_cell(cell, cell_params["recurrent_kernel"], cell_params.get("recurrent_bias"), m, x, done)

    def loss(fn, p, m, x):
        last, h, after = fn(p, m, x)
        weights = jnp.cos(jnp.arange(h.size, dtype=jnp.float32)).reshape(h.shape)
        return (jnp.sum(h * weights) + sum(jnp.sum(jnp.sin(a)) for a in jax.tree_util.tree_leaves(after))
                + sum(jnp.sum(a ** 2) for a in jax.tree_util.tree_leaves(last)))

    args = (params, memory, projected)
    for a, b in zip(jax.tree_util.tree_leaves(fused(*args)), jax.tree_util.tree_leaves(reference(*args))):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    grads = jax.grad(lambda *a: loss(fused, *a), argnums=(0, 1, 2))(*args)
    expected = jax.grad(lambda *a: loss(reference, *a), argnums=(0, 1, 2))(*args)
    for a, b in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(expected)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    assert float(jnp.abs(grads[0]["params"]["recurrent_kernel"]).max()) > 1e-2
    tangents = jax.tree_util.tree_map(lambda x: jnp.cos(x), args)
    _, t_fused = jax.jvp(lambda *a: loss(fused, *a), args, tangents)
    _, t_ref = jax.jvp(lambda *a: loss(reference, *a), args, tangents)
    np.testing.assert_allclose(t_fused, t_ref, rtol=1e-5)


# --------------------------------------------------------------------------- resets
@pytest.mark.parametrize("cell", ["gru", pytest.param("lstm", marks=pytest.mark.slow)])
def test_a_done_in_the_middle_equals_two_separate_sequences(cell):
    policy = make_policy(CARTPOLE, _net(cell))
    params = policy.init(jax.random.PRNGKey(0))
    obs = jax.random.normal(jax.random.PRNGKey(1), (12, 3, 4))  # [T, N, obs]
    done = jnp.zeros((12, 3), bool).at[4, 0].set(True).at[7, 2].set(True)
    zero = policy.recurrence.zero((3,))
    _, out, _ = replay(policy.recurrence, params, zero, obs, done)
    logits = np.asarray(out["logits"])

    never = jnp.zeros((12, 3), bool)
    for env, cut in ((0, 5), (2, 8), (1, 12)):
        one = lambda o: replay(policy.recurrence, params, policy.recurrence.zero((1,)), o,  # noqa: E731
                               never[: o.shape[0], :1])[1]["logits"][:, 0]
        first, second = one(obs[:cut, env:env + 1]), one(obs[cut:, env:env + 1])
        # float tolerance: the reset is an exact zero, but a batch of 3 and a batch of 1 are
        # different matmul shapes (rounding differs in the last bits)
        np.testing.assert_allclose(logits[:cut, env], first, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(logits[cut:, env], second, rtol=1e-5, atol=1e-7)
    # and the memory does matter: without the reset env 0's second episode is scored differently
    _, carried, _ = replay(policy.recurrence, params, zero, obs, never)
    assert np.abs(np.asarray(carried["logits"])[5:, 0] - logits[5:, 0]).max() > 1e-4


# --------------------------------------------------------------------------- rollout -> update
@pytest.fixture(scope="module", params=["gru", "lstm"])
def experience(request):
    """One PPO rollout of a recurrent policy on CartPole without velocities, after a few updates so
    the memory carried into it is not the zero state."""
    run = _run(PPOConfig(num_envs=4, num_steps=64, num_minibatches=2), request.param,
               total_timesteps=4 * 64 * 3)
    env, env_params, spec = algos.make_env(run)
    stage = make_stage(run, env, env_params, spec)
    parts = stage.init(jax.random.PRNGKey(3))
    hparams = hyperparameters(run.algo)
    carry = parts.env
    fn = jax.jit(lambda c, k: stage.experience(parts.actor_params, parts.critic_params, None, c, k, hparams))
    for i in range(2):
        exp = fn(carry, jax.random.PRNGKey(10 + i))
        carry = exp.carry
    return stage, parts, exp, hparams


def test_replayed_log_probs_equal_the_rollouts(experience):
    stage, parts, exp, _ = experience
    seq = exp.transitions
    assert seq.obs.shape[:2] == (4, 64) and bool(seq.done.any()), "the rollout must contain episode ends"
    assert float(jnp.abs(jax.tree_util.tree_leaves(seq.actor_start)[0]).max()) > 0, "a carried start state"
    dist_params = jax.jit(replay_actor, static_argnums=0)(stage.policy, parts.actor_params, seq)
    log_prob = stage.dist.log_prob(dist_params, seq.action)
    # float tolerance, not bitwise: the rollout steps the cell on [N, obs] inside the env scan and
    # the replay on [N, obs] inside its own scan; XLA may fuse/tile the two programs differently
    np.testing.assert_allclose(log_prob, seq.log_prob_old, atol=2e-6, rtol=0)
    # the replay needs the stored start state: from zeros the first steps differ
    zero_start = seq.replace(actor_start=stage.policy.recurrence.zero((4,)))
    wrong = stage.dist.log_prob(replay_actor(stage.policy, parts.actor_params, zero_start), seq.action)
    assert float(jnp.abs(wrong - seq.log_prob_old)[:, :3].max()) > 1e-5


def test_replayed_values_equal_the_values_of_gae(experience):
    """The PPO loss replays the critic as the rollout's GAE did (its value clipping is around these)."""
    stage, parts, exp, _ = experience
    seq = exp.transitions
    values = jax.jit(replay_critic, static_argnums=0)(stage.value, parts.critic_params, seq)
    np.testing.assert_allclose(values, seq.value_old, atol=2e-5, rtol=0)


def test_critic_bootstraps_within_an_episode_from_the_next_value(experience):
    """GAE's next value of a step that did not end an episode is the next step's value (the same
    recurrent state), so the recurrent critic's deltas telescope as they must."""
    stage, parts, exp, hparams = experience
    seq = exp.transitions
    v, adv, done = map(np.asarray, (seq.value_old, seq.advantages, seq.done))
    np.testing.assert_allclose(np.asarray(seq.returns) - v, adv, atol=1e-5)
    # the bootstrap path (step the critic from its state after step t on the observation t reached)
    # gives, within an episode, exactly the next step's value
    _, _, after = replay(stage.value.recurrence, parts.critic_params, seq.critic_start,
                         jnp.swapaxes(seq.obs, 0, 1), jnp.swapaxes(seq.done, 0, 1))
    _, nv_same = stage.value.recurrence.step(
        parts.critic_params, jax.tree_util.tree_map(lambda m: m[:-1], after), jnp.swapaxes(seq.obs, 0, 1)[1:])
    cont = ~done[:, :-1]
    np.testing.assert_allclose(np.asarray(nv_same).T[cont], v[:, 1:][cont], atol=2e-5)


# --------------------------------------------------------------------------- TRPO
# each mode and each head in the fast tier; the other two pairs in the slow tier
@pytest.mark.parametrize("mode, discrete", [
    pytest.param("gauss_newton", False, id="gauss_newton-gaussian"),
    pytest.param("hessian", True, id="hessian-categorical"),
    pytest.param("gauss_newton", True, id="gauss_newton-categorical", marks=pytest.mark.slow),
    pytest.param("hessian", False, id="hessian-gaussian", marks=pytest.mark.slow)])
def test_fvp_through_a_gru_matches_explicit_hessian_of_mean_kl(discrete, mode):
    spec = EnvSpec("tiny", (3,), discrete, 2, None, None, 0)
    policy = make_policy(spec, NetworkConfig(hidden_sizes=(4,), recurrent="gru", recurrent_size=3))
    key_init, key_noise, key_obs = jax.random.split(jax.random.PRNGKey(0), 3)
    theta, unravel = ravel_pytree(policy.init(key_init))
    theta = theta + 0.5 * jax.random.normal(key_noise, theta.shape)  # a generic point
    obs = jax.random.normal(key_obs, (6, 2, 3))  # [T, N, obs], with an episode end inside
    done = jnp.zeros((6, 2), bool).at[2, 1].set(True)
    start = jax.random.normal(jax.random.PRNGKey(5), (2, 3))

    def dist_fn(t):
        return replay(policy.recurrence, unravel(t), start, obs, done)[1]

    dist = Categorical() if discrete else DiagGaussian()
    fisher = jax.jit(jax.hessian(ng.mean_kl_fn(dist_fn, dist, theta)))(theta)
    fvp = jax.jit(lambda v: ng.make_fisher_vector_product(dist_fn, dist, theta, mode)(v))
    columns = jax.vmap(fvp)(jnp.eye(theta.size))
    scale = float(jnp.abs(fisher).max())
    assert scale > 1e-3
    np.testing.assert_allclose(columns, fisher, atol=1e-5 * scale)


# TRPO's trust region is checked on the feed-forward policy in the fast tier, the Fisher product
# through a GRU below
@pytest.mark.slow
def test_trpo_recurrent_update_runs_and_keeps_the_trust_region():
    run = _run(TRPOConfig(num_envs=4, num_steps=32, critic_minibatches=2, fvp_subsample=0.5),
               total_timesteps=4 * 32 * 3, eval_episodes=2)
    algo = algos.make_algorithm(run)
    from purejaxrl_opt.core.algos.base import make_train

    out = jax.jit(make_train(algo))(jax.random.PRNGKey(0))
    kl = np.asarray(out.metrics["kl"]) if "kl" in out.metrics else None
    assert np.all(np.isfinite(np.asarray(out.metrics["value_loss"])))
    if kl is not None:
        assert np.all(kl <= 1.5 * run.algo.max_kl + 1e-6)
    assert np.all(np.isfinite(np.asarray(out.eval_returns)))


# --------------------------------------------------------------------------- GRPO
def test_grpo_rescoring_from_the_zero_state_equals_the_rollouts_log_probs():
    run = RunConfig(algo=GRPOConfig(num_groups=2, group_size=3, num_minibatches=2), env=EnvConfig(id="CartPole-v1"),
                    network=_net("gru"), total_timesteps=10_000)
    run.validate()
    env, env_params, spec = algos.make_env(run)
    policy = make_policy(spec, run.network)
    params = policy.init(jax.random.PRNGKey(0))
    from purejaxrl_opt.core.models.distributions import for_spec

    dist = for_spec(True)
    batch = jax.jit(lambda k: rollout.group_rollout(env, env_params, spec, dist, policy, params, None, k, 2, 3,
                                                    60, True))(jax.random.PRNGKey(1))
    obs, action = jnp.swapaxes(batch.obs, 0, 1), jnp.swapaxes(batch.action, 0, 1)
    rescored = dist.log_prob(policy.episode_apply(params, obs, action), action)
    mask = np.asarray(batch.mask).T
    np.testing.assert_allclose(np.asarray(rescored)[mask], np.asarray(batch.log_prob).T[mask], atol=2e-6)
    # an MLP on the same observations would not give these numbers: the state matters past step 0
    first = dist.log_prob(policy.apply(params, obs), action)
    assert float(np.abs(np.asarray(first)[:, 1:][mask[:, 1:]] - np.asarray(rescored)[:, 1:][mask[:, 1:]]).max()) > 1e-5


# --------------------------------------------------------------------------- observation masking
def test_obs_mask_zeroes_entries_of_every_observation_and_refuses_a_wrong_length():
    env, env_params, spec = envs.make("CartPole-v1", {}, (1, 0, 1, 0))
    assert spec.obs_shape == (4,)
    obs, state = env.reset(jax.random.PRNGKey(0), env_params)
    seen = [obs]
    for i in range(40):
        obs, state, _, terminated, truncated, info = env.step(jax.random.PRNGKey(i), state, 1, env_params)
        seen += [obs, info["final_observation"]]
    seen = np.stack(seen)
    assert np.all(seen[:, [1, 3]] == 0) and np.all(np.abs(seen[:, [0, 2]]).sum(0) > 0)
    _, velocity = env.step_env(jax.random.PRNGKey(0), state, 1, env_params)[:2]
    assert float(velocity.theta_dot) != 0.0  # the state still has them; only the observation hides them
    with pytest.raises(ConfigError, match=r"env.obs_mask.*4 entries"):
        envs.make("CartPole-v1", {}, (1, 0, 1))
    with pytest.raises(ConfigError, match="env.obs_mask"):
        from_dictconfig({"algo": {"name": "ppo"}, "env": {"id": "CartPole-v1", "obs_mask": [1, 2, 0, 0]}})


def test_recurrent_config_is_checked_before_compiling():
    with pytest.raises(ConfigError, match="network.recurrent"):
        from_dictconfig({"algo": {"name": "ppo"}, "env": {"id": "CartPole-v1"}, "network": {"recurrent": "rnn"}})
    with pytest.raises(ConfigError, match="network.recurrent"):
        from_dictconfig({"algo": {"name": "grpo"}, "env": {"id": "CartPole-v1"},
                         "network": {"kind": "transformer", "recurrent": "gru"}})
    with pytest.raises(ConfigError, match=r"algo.num_minibatches.*whole env sequences"):
        from_dictconfig({"algo": {"name": "ppo", "num_envs": 6, "num_minibatches": 4},
                         "env": {"id": "CartPole-v1"}, "network": {"recurrent": "gru"}})
    with pytest.raises(ConfigError, match=r"algo.critic_minibatches.*whole env sequences"):
        from_dictconfig({"algo": {"name": "trpo", "num_envs": 6, "critic_minibatches": 4},
                         "env": {"id": "CartPole-v1"}, "network": {"recurrent": "lstm"}})


def test_head_sizes_put_hidden_layers_between_the_cell_and_each_output_layer():
    """``network.head_sizes`` (Craftax_Baselines' ppo_rnn.py: two 512 layers per head): actor and critic
    each compute out(act(W2 act(W1 h))) from the cell's state h; refused without a recurrent cell."""
    from purejaxrl_opt.core.models.networks import RecurrentActor, RecurrentCritic, zero_memory

    net = NetworkConfig(hidden_sizes=(16,), recurrent="gru", recurrent_size=8, head_sizes=(6, 5),
                        activation="relu")
    net.validate("network")
    obs = jax.random.normal(jax.random.PRNGKey(1), (3, 4))
    memory = zero_memory(net, (3,))
    for module in (RecurrentActor(CARTPOLE, net), RecurrentCritic(CARTPOLE, net)):
        params = module.init(jax.random.PRNGKey(0), memory, obs)
        p = params["params"]
        _, h = module.apply(params, memory, obs, method=lambda m, mem, o: m.core(mem, m.embed(o)))
        x = h
        for i, width in enumerate((6, 5)):
            assert p[f"head_layers_{i}"]["kernel"].shape[-1] == width
            x = jax.nn.relu(x @ p[f"head_layers_{i}"]["kernel"] + p[f"head_layers_{i}"]["bias"])
        out = x @ p["out"]["kernel"] + p["out"]["bias"]
        _, got = module.apply(params, memory, obs)
        want = {"logits": out} if isinstance(module, RecurrentActor) else out[..., 0]
        jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), got, want)
    with pytest.raises(ConfigError, match="network.head_sizes"):
        NetworkConfig(head_sizes=(8,)).validate("network")
    with pytest.raises(ConfigError, match="network.head_sizes"):
        NetworkConfig(recurrent="gru", head_sizes=(0,)).validate("network")


# resume and sweeps are checked bitwise on the feed-forward PPO in the fast tier
# (tests/test_kill_and_resume.py, tests/test_sweep.py)
@pytest.mark.slow
# --------------------------------------------------------------------------- resume and sweeps
def test_resume_and_in_compile_sweep_with_a_recurrent_state(tmp_path):
    from purejaxrl_opt.formats import checkpoint
    from purejaxrl_opt.host import runner, sweep

    run = _run(PPOConfig(num_envs=4, num_steps=32, num_minibatches=2), "lstm", num_seeds=2,
               total_timesteps=4 * 32 * 8, eval_episodes=2)
    plan = sweep.SweepPlan("grid", ("algo.lr",), ({"algo.lr": 2.5e-4}, {"algo.lr": 1e-3}))
    every = checkpoint.CheckpointConfig(every_updates=3, final=True)
    ref = runner.execute(run, tmp_path / "ref", num_chunks=1, plan=plan)
    full = runner.execute(run, tmp_path / "run", num_chunks=3, plan=plan, checkpoints=every)
    metrics_ref = (tmp_path / "ref" / "metrics.csv").read_bytes()
    assert (tmp_path / "run" / "metrics.csv").read_bytes() == metrics_ref
    # lanes of different learning rates learn differently in the one compiled function
    returns = np.asarray(ref.eval_returns)
    assert returns.shape == (4, 2)
    lr_lane0 = np.asarray(ref.loop.hparams["lr"])
    np.testing.assert_allclose(lr_lane0, [2.5e-4, 2.5e-4, 1e-3, 1e-3])
    # the memory is part of the checkpointed state (an LSTM: (c, h) per env)
    memory = ref.loop.algo_state.env.memory
    assert memory[0].shape == (4, 4, 16) and float(np.abs(np.asarray(memory[1])).max()) > 0

    # drop everything after update 3, resume: bitwise the uninterrupted run
    for step in checkpoint.available_steps(tmp_path / "run"):
        if step > 3:
            shutil.rmtree(checkpoint.checkpoint_dir(tmp_path / "run") / str(step))
    for name in ("metrics.csv", "summary.json"):
        (tmp_path / "run" / name).unlink(missing_ok=True)
    resumed = runner.execute(run, tmp_path / "run", num_chunks=2, plan=plan, checkpoints=every, resume=True)
    assert (tmp_path / "run" / "metrics.csv").read_bytes() == metrics_ref
    for a, b in zip(jax.tree_util.tree_leaves(full.loop), jax.tree_util.tree_leaves(resumed.loop)):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
