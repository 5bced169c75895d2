"""Every Playground task by ``env=playground/<task>`` with Playground's own tuned PPO config mapped
onto ours (purejaxrl_opt/envs/playground_ppo.py, served by hydra_plugins/purejaxrl_opt_envs), and the
asymmetric actor-critic (``env.params.critic_obs_key``) against the real Go1 env.

The expected values are read from Playground's ``brax_ppo_config`` here and mapped by hand (one
task per family), so a wrong row of the mapping table fails."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("mujoco_playground")

from purejaxrl_opt.config.errors import ConfigError  # noqa: E402
from purejaxrl_opt.config.schema import from_dictconfig  # noqa: E402
from tests.conftest import cli, cli_environment, compose  # noqa: E402
from tests.go1_meshes import write_go1_visual_meshes  # noqa: E402

# one task per family, and a num_envs of ours that keeps Brax's minibatches of whole unrolls
FAMILIES = [("CartpoleSwingup", "dm_control_suite_params", 64),
            ("Go1JoystickFlatTerrain", "locomotion_params", 32),
            ("PandaPickCube", "manipulation_params", 8)]


def _playground(module_name: str, task: str) -> dict:
    import importlib

    return importlib.import_module(f"mujoco_playground.config.{module_name}").brax_ppo_config(task).to_dict()


@pytest.mark.parametrize("task, module_name, num_envs", FAMILIES)
def test_each_family_composes_with_playgrounds_config_scaled(task, module_name, num_envs):
    brax = _playground(module_name, task)
    cfg = compose("algo=ppo", f"env=playground/{task}", f"algo.num_envs={num_envs}")
    run = from_dictconfig(cfg)  # the CLI's validation, interpolations resolved
    algo, net, env = run.algo, run.network, run.env
    network = brax.get("network_factory", {})
    assert (algo.lr, algo.ent_coef, algo.gamma) == (brax["learning_rate"], brax["entropy_cost"], brax["discounting"])
    assert algo.clip_eps == brax.get("clipping_epsilon", 0.3) and algo.gae_lambda == 0.95  # Brax's defaults
    assert (algo.update_epochs, algo.num_minibatches) == (brax["num_updates_per_batch"], brax["num_minibatches"])
    assert algo.max_grad_norm == (1e6 if brax.get("max_grad_norm") is None else brax["max_grad_norm"])
    assert not algo.anneal_lr and not algo.clip_value and algo.vf_coef == 0.5 and algo.normalize_advantages
    # Brax's unrolls per env per training step, kept at our num_envs
    unrolls = brax["batch_size"] * brax["num_minibatches"] // brax["num_envs"]
    assert algo.num_envs == num_envs and algo.num_steps == brax["unroll_length"] * unrolls
    assert (num_envs * unrolls) % brax["num_minibatches"] == 0
    assert run.total_timesteps == brax["num_timesteps"] and env.normalize_obs == brax["normalize_observations"]
    assert list(net.hidden_sizes) == list(network.get("policy_hidden_layer_sizes", (32,) * 4))
    assert list(net.critic_sizes) == list(network.get("value_hidden_layer_sizes", (256,) * 5))
    assert net.activation == "silu"  # Brax's swish
    value_key = network.get("value_obs_key", "state")
    assert env.params.get("critic_obs_key") == (None if value_key == network.get("policy_obs_key", "state")
                                                 else value_key)
    # without a num_envs of the user's: Playground's own
    assert compose("algo=ppo", f"env=playground/{task}").algo.num_envs == brax["num_envs"]


def test_go1_critic_reads_playgrounds_value_obs_key():
    assert _playground("locomotion_params", "Go1JoystickFlatTerrain")["network_factory"]["value_obs_key"] \
        == "privileged_state"
    cfg = compose("algo=ppo", "env=playground/Go1JoystickFlatTerrain")
    assert cfg.env.params.critic_obs_key == "privileged_state" and "obs_key" not in cfg.env.params


def test_a_num_envs_that_cannot_keep_whole_unrolls_is_refused():
    # CartpoleSwingup: 16 unrolls per env, 32 minibatches: num_envs must be even
    with pytest.raises(ConfigError, match=r"config key 'algo.num_envs' = 7 is invalid for Playground's PPO config "
                                          r"of playground/CartpoleSwingup: must be a positive multiple of 2"):
        from_dictconfig(compose("algo=ppo", "env=playground/CartpoleSwingup", "algo.num_envs=7"))


@pytest.mark.parametrize("recurrent", ["none", "gru", "lstm"])
def test_a_recurrent_network_keeps_the_per_unroll_bootstrap_without_in_loss_gae(recurrent):
    """Brax's in-loss GAE is on for a feed-forward network and off for a recurrent one (which it cannot
    serve: a recurrent critic scores an unroll only from the hidden state carried into it); the
    bootstrap every unroll stays; an explicit choice wins, and a recurrent one is refused by name."""
    cfg = compose("algo=ppo", "env=playground/CartpoleSwingup", "algo.num_envs=32",
                  f"network.recurrent={recurrent}")
    run = from_dictconfig(cfg)
    assert run.algo.recompute_advantages is (recurrent == "none")
    assert run.algo.unroll_length == 30 and run.algo.num_steps == 480
    assert run.network.recurrent == recurrent
    assert from_dictconfig(compose("algo=ppo", "env=playground/CartpoleSwingup", "algo.num_envs=32",
                                   "algo.recompute_advantages=false")).algo.recompute_advantages is False
    if recurrent != "none":
        with pytest.raises(ConfigError, match="recompute_advantages"):
            from_dictconfig(compose("algo=ppo", "env=playground/CartpoleSwingup", "algo.num_envs=32",
                                    f"network.recurrent={recurrent}", "algo.recompute_advantages=true"))


def test_brax_reset_schedule_is_mapped_at_the_runs_budget_and_scale():
    """``num_resets_per_eval`` -> ``algo.reset_envs_every``: Brax's epoch length in training steps,
    ceil(num_timesteps / (max(num_evals - 1, 1) * num_envs * num_steps * action_repeat *
    num_resets_per_eval)), after each of which Brax resets every training env; computed here by hand
    from Playground's values (dm_control: 60M steps, 10 evals, 10 resets per eval, 480 steps per env
    per training step; PandaPickCube: 20M, 4 evals, 10 resets, 8 unrolls of 10 steps)."""
    def reset_every(*overrides):
        return from_dictconfig(compose("algo=ppo", *overrides)).algo.reset_envs_every

    # the side-by-side budget: every training step (as Brax's PPO ran beside ours)
    assert reset_every("env=playground/CartpoleSwingup", "algo.num_envs=32", "total_timesteps=614400") == 1
    # Playground's budget at 32 envs: 60e6 / (9 * 32 * 480 * 10) = 43.4 -> 44
    assert reset_every("env=playground/CartpoleSwingup", "algo.num_envs=32") == 44
    # Playground's own scale, 2048 envs: 60e6 / (9 * 2048 * 480 * 10) = 0.68 -> 1
    assert reset_every("env=playground/CartpoleSwingup") == 1
    # 20e6 / (3 * 2048 * 80 * 10) = 4.07 -> 5; at 8 envs: 20e6 / (3 * 8 * 80 * 10) = 1041.7 -> 1042
    assert reset_every("env=playground/PandaPickCube") == 5
    assert reset_every("env=playground/PandaPickCube", "algo.num_envs=8") == 1042
    # a float budget from the command line; the user's value wins; our tuned files keep their 0
    assert reset_every("env=playground/CartpoleSwingup", "algo.num_envs=32", "total_timesteps=6e5") == 1
    assert reset_every("env=playground/CartpoleSwingup", "algo.reset_envs_every=0") == 0
    assert reset_every("env=playground/CartpoleBalance") == 0
    # no resets in Brax's config: none here
    from purejaxrl_opt.config.resolvers import brax_ppo_reset_every

    assert brax_ppo_reset_every(614400, 32, 480, 1, 10, 0) == 0
    assert brax_ppo_reset_every(614400, 32, 480, 2, 10, 1) == 3  # 614400 / (9 * 32 * 480 * 2) = 2.2
    with pytest.raises(ConfigError, match="num_resets_per_eval = -1 must be an int >= 0"):
        brax_ppo_reset_every(614400, 32, 480, 1, 10, -1)
    with pytest.raises(ConfigError, match="brax_ppo_reset_every: num_envs = 0 must be a positive int"):
        brax_ppo_reset_every(614400, 0, 480, 1, 10, 10)


def test_an_unknown_task_names_the_closest():
    with pytest.raises(ConfigError, match=r"'playground/CartpoleSwingUp' is invalid: playground has no env "
                                          r"'CartpoleSwingUp'; closest: \['CartpoleSwingup'"):
        from_dictconfig(compose("algo=ppo", "env=playground/CartpoleSwingUp"))


def test_every_task_maps_and_an_unlisted_key_is_refused(monkeypatch):
    """Every key of every task's config is in one of the tables; a key in none is refused, naming it;
    Brax's own choices are set with Playground's values."""
    from purejaxrl_opt.envs import playground_ppo
    from purejaxrl_opt.envs.playground import ids

    original = playground_ppo.brax_ppo_config
    for task in ids("playground"):
        assert "algo" in playground_ppo.ppo_node(task)
    node = playground_ppo.ppo_node("CartpoleSwingup")
    assert (node["env"]["reward_scale"], node["network"]["action_dist"], node["env"]["obs_norm_style"]) == (
        10.0, "tanh_normal", "brax")  # Brax's choices, as Playground's config and Brax's defaults say
    assert node["algo"]["unroll_length"] == 30
    assert node["algo"]["recompute_advantages"] == "${feed_forward:${network.recurrent}}"
    for key, value in (("normalize_observations_std_eps", 1e-3), ("normalize_observations_mode", "ema"),
                       ("network_factory.distribution_type", "beta")):
        monkeypatch.setattr(playground_ppo, "brax_ppo_config",
                            lambda task, impl="jax", k=key, v=value: {**original(task, impl), k: v})
        with pytest.raises(ConfigError, match=key.split(".")[-1]):
            playground_ppo.ppo_node("CartpoleSwingup")
    monkeypatch.setattr(playground_ppo, "brax_ppo_config",
                        lambda task, impl="jax": {**original(task, impl), "new_knob": 3})
    with pytest.raises(ConfigError, match=r"has key 'new_knob' = 3, which .* neither maps"):
        playground_ppo.ppo_node("CartpoleSwingup")


# --------------------------------------------------------------------------- asymmetric actor-critic
@pytest.fixture(scope="module")
def go1(tmp_path_factory):
    """Playground's Go1JoystickFlatTerrain with the critic on ``privileged_state`` (MENAGERIE_ROOT: a
    menagerie holding Go1's visual meshes only, tests/go1_meshes.py)."""
    import os

    from purejaxrl_opt import envs

    root = write_go1_visual_meshes(tmp_path_factory.mktemp("menagerie"))
    previous = os.environ.get("MENAGERIE_ROOT")
    os.environ["MENAGERIE_ROOT"] = str(root)
    try:
        yield envs.make("playground/Go1JoystickFlatTerrain", {"critic_obs_key": "privileged_state"})
    finally:
        if previous is None:
            os.environ.pop("MENAGERIE_ROOT")
        else:
            os.environ["MENAGERIE_ROOT"] = previous


@pytest.mark.slow  # builds Go1's MJX env (~10 s); the layout itself: test_observation_layout_of_a_dict_observation
def test_policy_reads_state_and_critic_privileged_state(go1):
    import jax
    import jax.numpy as jnp

    from purejaxrl_opt.config.schema import NetworkConfig
    from purejaxrl_opt.core.models.networks import Actor, Critic

    env, params, spec = go1
    raw_obs = jax.eval_shape(env.raw_env.reset, jax.random.PRNGKey(0)).obs
    state, privileged = raw_obs["state"].shape[0], raw_obs["privileged_state"].shape[0]
    assert spec.policy_obs_size == state and spec.obs_shape == (state + privileged,)
    # each network's first layer is as wide as its field, and its output moves with that field only
    net = NetworkConfig(hidden_sizes=(8,), critic_hidden_sizes=(8,), activation="silu")
    actor, critic = Actor(spec, net), Critic(spec, net)
    batch = jax.random.normal(jax.random.PRNGKey(0), (4,) + spec.obs_shape)
    actor_params = actor.init(jax.random.PRNGKey(1), batch)
    critic_params = critic.init(jax.random.PRNGKey(2), batch)
    assert actor_params["params"]["Torso_0"]["Dense_0"]["kernel"].shape == (state, 8)
    assert critic_params["params"]["Torso_0"]["Dense_0"]["kernel"].shape == (privileged, 8)
    policy_part_changed = batch.at[:, :state].add(1.0)
    critic_part_changed = batch.at[:, state:].add(1.0)
    mean = lambda x: actor.apply(actor_params, x)["mean"]  # noqa: E731
    value = lambda x: critic.apply(critic_params, x)  # noqa: E731
    np.testing.assert_array_equal(mean(critic_part_changed), mean(batch))
    np.testing.assert_array_equal(value(policy_part_changed), value(batch))
    assert not jnp.allclose(mean(policy_part_changed), mean(batch))
    assert not jnp.allclose(value(critic_part_changed), value(batch))


@pytest.mark.slow  # Go1's reset run op by op: minutes on 2 CPU cores
def test_observation_is_the_raw_envs_state_then_privileged_state(go1):
    import jax

    env, params, spec = go1
    key = jax.random.PRNGKey(3)
    raw = env.raw_env.reset(key)
    obs, _ = env.reset_env(key, params)
    np.testing.assert_array_equal(np.asarray(obs[:spec.policy_obs_size]), np.asarray(raw.obs["state"]))
    np.testing.assert_array_equal(np.asarray(obs[spec.policy_obs_size:]), np.asarray(raw.obs["privileged_state"]))


def test_observation_layout_of_a_dict_observation():
    """The adapter's ``_obs_array`` (what reset and step return): the policy's field flattened, then
    the critic's."""
    import jax.numpy as jnp

    from purejaxrl_opt.envs.playground import _obs_array

    obs = {"state": jnp.arange(3.0), "privileged_state": jnp.arange(4.0).reshape(2, 2) + 10, "other": jnp.ones(2)}
    np.testing.assert_array_equal(_obs_array(obs, "state", "privileged_state"), [0, 1, 2, 10, 11, 12, 13])
    np.testing.assert_array_equal(_obs_array(obs, "state"), [0, 1, 2])


@pytest.mark.slow  # builds Go1 once more
def test_an_unknown_critic_field_is_refused(go1):
    from purejaxrl_opt.envs import playground as pg

    with pytest.raises(ConfigError, match=r"env\.params\.critic_obs_key.*must be one of its observation fields "
                                          r"\['privileged_state', 'state'\]"):
        pg.make("Go1JoystickFlatTerrain", {"critic_obs_key": "nope"}, "playground")


def test_asymmetric_critic_option_is_checked():
    from purejaxrl_opt.envs import playground as pg

    with pytest.raises(ConfigError, match=r"env\.params\.critic_obs_key' is invalid for playground/CartpoleBalance: "
                                          r"its observation is one array"):
        pg.make("CartpoleBalance", {"critic_obs_key": "privileged_state"}, "playground")
    with pytest.raises(ConfigError, match=r"network\.shared.*env\.params\.critic_obs_key"):
        from_dictconfig(compose("algo=ppo", "env=playground/Go1JoystickFlatTerrain", "network.shared=true",
                                "network.critic_hidden_sizes=null"))


def test_menagerie_task_without_menagerie_names_what_to_do(monkeypatch, tmp_path):
    from purejaxrl_opt.envs import playground as pg

    monkeypatch.setenv("MENAGERIE_ROOT", str(tmp_path / "absent"))
    with pytest.raises(ConfigError, match=r"mujoco_menagerie.*MENAGERIE_ROOT.*does not exist.*does not download"):
        pg.make("Go1JoystickFlatTerrain", {}, "playground")
    assert not (tmp_path / "absent").exists()


@pytest.mark.slow  # Go1's MJX step compiles for minutes on 2 CPU cores (390 s measured)
def test_go1_trains_through_the_cli_with_its_asymmetric_critic(tmp_path):
    root = write_go1_visual_meshes(tmp_path / "menagerie")
    run_dir = tmp_path / "run"
    result = cli("algo=ppo", "env=playground/Go1JoystickFlatTerrain", "algo.num_envs=32", "total_timesteps=1280",
                 "num_seeds=1", "eval_episodes=1", "+env.params.episode_length=40", "progress.mode=off",
                 "logger=none", f"hydra.run.dir={run_dir}", timeout=1500,
                 env=cli_environment(MENAGERIE_ROOT=str(root)))
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] == 1280 and summary["num_updates"] == 2
    assert np.isfinite(summary["final_return_mean"])
    from omegaconf import OmegaConf

    recorded = OmegaConf.load(run_dir / ".hydra" / "config.yaml")
    assert (recorded.algo.unroll_length, recorded.env.reward_scale, recorded.network.action_dist) == (
        20, 1.0, "tanh_normal")  # Playground's Go1 config and Brax's default distribution
    assert recorded.env.params.critic_obs_key == "privileged_state"
    from purejaxrl_opt.config import resolvers

    resolvers.register()  # Brax's reset before every training step at this budget: the second update's
    assert OmegaConf.to_container(recorded, resolve=True)["algo"]["reset_envs_every"] == 1


@pytest.mark.slow  # a GRU over MJX's CartpoleSwingup compiles for minutes on 2 CPU cores (500 s measured, loaded)
def test_recurrent_ppo_on_playground_without_velocities_through_the_cli(tmp_path):
    """Recurrent PPO on a Playground task made partially observable, the way the manual shows it:
    Playground's mapped config with a GRU (per-unroll bootstrap, no in-loss GAE) and the velocities
    masked; the run trains, evaluates and records what it ran."""
    run_dir = tmp_path / "run"
    result = cli("algo=ppo", "env=playground/CartpoleSwingup", "network.recurrent=gru", "env.obs_mask=[1,1,1,0,0]",
                 "algo.num_envs=8", "algo.num_minibatches=4", "algo.update_epochs=2", "total_timesteps=7680",
                 "num_seeds=1", "eval_episodes=2", "+env.params.episode_length=100", "progress.mode=off",
                 "logger=none", f"hydra.run.dir={run_dir}", timeout=1500)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] == 7680 and summary["num_updates"] == 2
    assert np.isfinite(summary["final_return_mean"])
    from omegaconf import OmegaConf

    from purejaxrl_opt.config import resolvers

    resolvers.register()  # the recorded config keeps Playground's resolver expressions
    recorded = OmegaConf.to_container(OmegaConf.load(run_dir / ".hydra" / "config.yaml"), resolve=True)
    assert recorded["network"]["recurrent"] == "gru" and recorded["env"]["obs_mask"] == [1, 1, 1, 0, 0]
    assert (recorded["algo"]["unroll_length"], recorded["algo"]["num_steps"]) == (30, 480)
    assert recorded["algo"]["recompute_advantages"] is False
