"""Token envs end to end: the policy's three paths agree, SFT learns, GRPO/PPO improve on it, bad input
fails before compiling."""

from __future__ import annotations

import json
import re
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxrl_opt.core import algos
from purejaxrl_opt import envs, sft
from purejaxrl_opt.core.algos.sft import SFTConfig
from purejaxrl_opt.host.sft import run_sft
from purejaxrl_opt.core.models import pretrained
from purejaxrl_opt.host import runner
from purejaxrl_opt.core.stages import rollout
from purejaxrl_opt.core.algos import make_algorithm
from purejaxrl_opt.config.schema import ConfigError, EnvConfig, NetworkConfig, RunConfig
from purejaxrl_opt.core.algos.grpo import GRPOConfig
from purejaxrl_opt.core.algos.ppo import PPOConfig
from purejaxrl_opt.core.algos.trpo import TRPOConfig
from purejaxrl_opt.core.models.distributions import Categorical
from purejaxrl_opt.core.models.policies import episode_tokens, make_policy
from purejaxrl_opt.core.algos.base import host_metrics
from tests.conftest import compose_config as compose

NET = NetworkConfig(kind="transformer", d_model=32, num_layers=1, num_heads=2, mlp_ratio=2)
ONE_DIGIT = {"min_digits": 1, "max_digits": 1}


def token_run(algo, env_params=None, **kwargs) -> RunConfig:
    run = RunConfig(algo=algo, env=EnvConfig(id="Addition-v0", params=env_params or dict(ONE_DIGIT)),
                    network=kwargs.pop("network", NET), **kwargs)
    run.validate()
    return run


# --------------------------------------------------------------------------- the policy's paths
def test_cached_acting_episode_rescoring_and_stepwise_apply_agree():
    """Log-probs of sampled answers: the rollout's (cached decode) = the loss's (one teacher-forced
    pass per answer) = the per-step re-encoding path, for a random transformer."""
    env, env_params, spec = envs.make("Addition-v0", {})
    policy = make_policy(spec, NET)
    params = policy.init(jax.random.PRNGKey(1))
    dist = Categorical()

    @jax.jit
    def paths(key):
        batch = rollout.group_rollout(env, env_params, spec, dist, policy, params, None, key, 6, 4,
                                      spec.max_steps, True)
        obs, action = jnp.swapaxes(batch.obs, 0, 1), batch.action.T
        rescored = dist.log_prob(policy.episode_apply(params, obs, action), action)
        stepwise = dist.log_prob(policy.apply(params, obs), action)
        return batch.log_prob.T, rescored, stepwise, batch.mask.T

    cached, rescored, stepwise, mask = map(np.asarray, paths(jax.random.PRNGKey(0)))
    assert mask.all(axis=1).any() and (~mask).any()  # some answers stop early (random policy)
    np.testing.assert_allclose(np.where(mask, rescored, 0), np.where(mask, cached, 0), atol=2e-5)
    np.testing.assert_allclose(np.where(mask, stepwise, 0), np.where(mask, cached, 0), atol=2e-5)


def test_episode_tokens_places_actions_after_the_prompt():
    prompt = jnp.asarray([[4, 12, 5, 13, 0, 0, 0], [3, 13, 0, 0, 0, 0, 0]])  # "2+3=", "1="
    obs = jnp.broadcast_to(prompt[:, None], (2, 3, 7))
    action = jnp.asarray([[3, 0, 7], [1, 2, 0]])  # tokens 4, 1, 8 / 2, 3, 1
    tokens, positions = episode_tokens(obs, action)
    np.testing.assert_array_equal(tokens, [[4, 12, 5, 13, 4, 1, 8], [3, 13, 2, 3, 1, 0, 0]])
    np.testing.assert_array_equal(positions, [[3, 4, 5], [1, 2, 3]])


# --------------------------------------------------------------------------- SFT
@pytest.fixture(scope="module")
def sft_run(tmp_path_factory):
    """A tiny SFT run: 1-digit addition (100 prompts), 48 examples, a 1-layer transformer."""
    out = tmp_path_factory.mktemp("sft")
    cfg = SFTConfig(num_examples=48, steps=300, batch_size=32, lr=3e-3, eval_prompts=64)
    env_cfg = EnvConfig(id="Addition-v0", params=dict(ONE_DIGIT))
    summary = run_sft(env_cfg, NET, cfg, seed=0, out_dir=out, log=lambda *_: None)
    return out, summary


def test_sft_loss_falls_and_training_accuracy_rises(sft_run):
    out, summary = sft_run
    rows = np.genfromtxt(out / "metrics.csv", delimiter=",", names=True)
    assert rows["loss"][-1] < 0.5 * rows["loss"][0]
    assert rows["train_accuracy"][0] < 0.3 and summary["train_accuracy"] > 0.8
    assert (out / "checkpoint" / "0").is_dir() and (out / "examples.txt").is_file()  # orbax
    meta = pretrained.read_meta(str(out))
    assert meta["vocab"] == list(envs.make("Addition-v0", {})[2].vocab)
    assert set(meta["network"]) == set(pretrained.NETWORK_KEYS) and "structure" in meta


def test_sft_schedule_warms_up_then_decays_and_bad_values_are_refused():
    cfg = SFTConfig(steps=1000, lr=2e-3, schedule="cosine", warmup_steps=100)
    cfg.validate()
    lr = cfg.learning_rate()
    np.testing.assert_allclose([float(lr(0)), float(lr(50)), float(lr(100)), float(lr(550)), float(lr(1000))],
                               [0.0, 1e-3, 2e-3, 1e-3, 0.0], atol=1e-9)
    assert SFTConfig(lr=2e-3).learning_rate() == 2e-3  # constant (the default)
    for bad, key in [(dict(schedule="linear"), "sft.schedule"),
                     (dict(schedule="cosine", steps=100, warmup_steps=100), "sft.warmup_steps"),
                     (dict(warmup_steps=-1), "sft.warmup_steps"), (dict(warmup_steps=10), "sft.warmup_steps")]:
        with pytest.raises(ConfigError, match=key):
            SFTConfig(**bad).validate()


def test_init_from_loads_the_sft_policy_as_policy_and_reference(sft_run):
    out, _ = sft_run
    run = token_run(GRPOConfig(num_groups=2, group_size=2, num_minibatches=1), init_from=str(out),
                    total_timesteps=64)
    algo = make_algorithm(run)
    state = algo.init(jax.random.PRNGKey(0), algo.default_hparams())
    loaded = pretrained.load_policy(str(out), NET, algo.spec)
    for a, b, c in zip(*(jax.tree_util.tree_leaves(t) for t in (state.params["actor"], state.ref_params,
                                                                  loaded))):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, c)


# --------------------------------------------------------------------------- RL from the SFT start
def training_prompt_accuracy(algo, actor_params, num_prompts: int = 512) -> np.ndarray:
    """Greedy accuracy of each lane's policy (leading axis) on ``num_prompts`` draws from the
    training split, the prompts RL trains on; the same draws for every lane and every call."""
    def lane(params):
        batch = rollout.group_rollout(algo.env, algo.env_params, algo.spec, algo.dist, algo.policy,
                                      params, None, jax.random.PRNGKey(7), num_prompts, 1,
                                      algo.spec.max_steps, False, greedy=True)
        return batch.correct.astype(jnp.float32).mean()

    return np.asarray(jax.jit(jax.vmap(lane))(actor_params))


@pytest.mark.slow  # ~50 s on 2 cores: a learning check, run with the slow tier
def test_ppo_from_the_sft_start_answers_most_training_prompts(sft_run, tmp_path):
    """From the tiny SFT model, 30k env steps of PPO: every seed's greedy accuracy on the training
    prompts (the prompts RL trains on) above 0.65.

    Calibrated with one compile per SFT model over 20 vmapped RL seeds (a scratch script running
    ``run_updates`` on lane keys 100.., 1100.., 2100..; this PPO config, 78 updates), for SFT seeds
    0, 1, 2: start (SFT) 0.643 / 0.807 / 0.789, after PPO min 0.742 / 0.721 / 0.807, mean 0.832 /
    0.833 / 0.860. The worst of the 60 runs is 0.721. How far PPO lifts the *start* depends on the
    SFT model (seed 1's start is already 0.81, and its worst PPO seed ends below it), and the SFT
    model's floats differ from machine to machine, so the gain over the start is not asserted; nor
    is held-out accuracy (0.20..0.56 after PPO over these runs; a result for
    ``experiments/compare_tokens.py``, not a test).
    """
    out, _ = sft_run
    cfg = PPOConfig(num_envs=128, num_steps=3, update_epochs=2, num_minibatches=2, lr=1e-3, gamma=1.0,
                    ent_coef=0.0, anneal_lr=False)
    run = token_run(cfg, init_from=str(out), total_timesteps=30_000, eval_episodes=64, seed=1,
                    num_seeds=2)
    algo = make_algorithm(run)
    assert algo.num_updates == 78
    result = runner.execute(run, tmp_path, loggers=(), num_chunks=1)
    # the SFT start as lane 0, the two trained seeds as lanes 1, 2: one compile
    lanes = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a[None], b]),
                                   pretrained.load_policy(str(out), NET, algo.spec),
                                   algo.policy_params(result.loop.algo_state)[0])
    start, *final = training_prompt_accuracy(algo, lanes)
    assert start < 0.95, start  # the SFT model does not already answer them all
    assert np.all(np.asarray(final) > 0.65), (start, final)


@pytest.mark.slow  # ~8 min on 2 cores: a learning check, run with the slow tier
def test_grpo_lifts_held_out_products_when_the_work_is_written(tmp_path):
    """Multiply-v0 with its work written first (``scratchpad``, least significant digit first): from
    an SFT start on 512 examples, GRPO with the tuned file's shapes for 2M env steps lifts both
    seeds' greedy accuracy on held-out products (prompts RL never trains on) by more than 0.08.

    Calibrated on the GRPO runs of ``experiments/results/multiply_scratchpad.md`` (the same shapes,
    4 seeds each; periodic evaluations on 256 held-out prompts between 1.7M and 2.1M env steps,
    16 per run): from this start (SFT seed 0, 0.402) every evaluation gained +0.21 or more, mean
    +0.26; from another SFT seed's start (seed 100, 0.316) +0.16 at the least, mean +0.22; from a start
    fitted on the same examples (0.602) +0.10 at the least. At 1.2M steps the least was +0.08 (seed
    100), too close to a floor that must hold for other machines' floats (their SFT start differs).
    """
    env_cfg = EnvConfig(id="Multiply-v0", params={"answer_order": "lsd", "scratchpad": True})
    net = NetworkConfig(kind="transformer")
    start = run_sft(env_cfg, net, SFTConfig(num_examples=512, steps=500, eval_prompts=2048),
                    seed=0, out_dir=tmp_path / "sft", log=lambda *_: None)
    assert 0.2 < start["eval_accuracy"] < 0.6, start  # room above, and not a broken start
    run = RunConfig(algo=GRPOConfig(num_groups=32, group_size=8, update_epochs=2, num_minibatches=2,
                                    lr=1e-4, beta=0.04),
                    env=env_cfg, network=net, init_from=str(tmp_path / "sft"), total_timesteps=2_000_000,
                    eval_episodes=256, seed=0, num_seeds=2)
    run.validate()
    result = runner.execute(run, tmp_path / "grpo", loggers=(), num_chunks=1)
    gains = np.asarray(result.summary["eval_accuracy_per_seed"]) - start["eval_accuracy"]
    assert np.all(gains > 0.08), (start["eval_accuracy"], gains)


# a long compile per algorithm (SFT start, periodic held-out evaluation): the slow tier; token GRPO
# trains in the fast tier in tests/test_grpo_options.py
@pytest.mark.slow
@pytest.mark.parametrize("algo_name", ["grpo", "ppo"])
def test_rl_from_the_sft_start_evaluates_held_out_prompts_periodically(sft_run, algo_name, tmp_path):
    """A short RL run from the SFT checkpoint: the periodic held-out evaluation (every 5th update,
    NaN in between), the final held-out accuracy in the summary, example answers in the run dir."""
    out, _ = sft_run
    if algo_name == "grpo":
        cfg = GRPOConfig(num_groups=8, group_size=4, update_epochs=1, num_minibatches=1, beta=0.0)
    else:
        cfg = PPOConfig(num_envs=32, num_steps=3, update_epochs=1, num_minibatches=1, gamma=1.0)
    run = token_run(cfg, init_from=str(out), total_timesteps=1000, eval_episodes=16, seed=1,
                    eval_every=5)
    result = runner.execute(run, tmp_path, loggers=(), num_chunks=1)
    ran = np.isfinite(host_metrics(result.loop.metrics)["env_steps"][0])  # GRPO: until its budget
    accuracy = np.asarray(result.loop.metrics["eval_accuracy"])[0][ran]
    assert accuracy.size >= 10
    evaluated = (np.arange(accuracy.size) + 1) % 5 == 0
    assert np.isfinite(accuracy[evaluated]).all() and np.isnan(accuracy[~evaluated]).all()
    assert np.all((accuracy[evaluated] >= 0) & (accuracy[evaluated] <= 1))
    assert 0 <= result.summary["eval_accuracy"] <= 1 and result.summary["eval_split"] == "test"
    examples = (tmp_path / "examples.txt").read_text().splitlines()
    assert len(examples) > 10 and "=" in examples[1] and ("[correct]" in examples[1] or "[wrong]" in examples[1])


# token GRPO's budget over real steps runs in the fast tier (tests/test_grpo_options.py); the
# budget rule is one function for every algorithm
@pytest.mark.slow
def test_token_ppo_budget_counts_real_answer_tokens():
    """total_timesteps counts answer tokens (unmasked steps), not num_envs x num_steps: answers that
    end with <eos> before the limit leave room for more updates; a lane stops within one update
    above the budget, the rows after stay NaN, and the counter is an exact unsigned int."""
    cfg = PPOConfig(num_envs=16, num_steps=3, update_epochs=1, num_minibatches=1, gamma=1.0)
    run = token_run(cfg, total_timesteps=200, eval_episodes=4)
    algo = make_algorithm(run)
    assert algo.num_updates == 13  # ceil(200 / 16): answers of one token would need that many
    out = jax.jit(algos.make_train(run))(jax.random.PRNGKey(0))
    steps = host_metrics(out.metrics)["env_steps"]
    ran = np.isfinite(steps)
    per_update = np.diff(np.concatenate([[0.0], steps[ran]]))
    np.testing.assert_allclose(per_update, 16 * np.asarray(out.metrics["episode_length"])[ran], rtol=1e-6)
    assert np.all(per_update < 16 * 3)  # some answers end before the 3-token limit
    assert steps[ran][-1] >= 200 > steps[ran][-2]
    assert ran.sum() > 200 // (16 * 3) and not ran[ran.sum():].any()
    state = out.loop.algo_state
    assert state.env_steps.dtype == jnp.uint32 and int(state.env_steps) == int(steps[ran][-1])


# --------------------------------------------------------------------------- bad input
def test_prompt_longer_than_the_buffer_fails_before_compiling():
    run = token_run(GRPOConfig(), env_params={"min_digits": 2, "max_digits": 2, "max_len": 6})
    with pytest.raises(ConfigError, match="env.params.max_len"):
        make_algorithm(run)


def test_transformer_needs_a_token_env_and_trpo_refuses_token_envs():
    run = RunConfig(algo=PPOConfig(), env=EnvConfig(id="CartPole-v1"), network=NET)
    with pytest.raises(ConfigError, match="network.kind"):
        make_algorithm(run)
    with pytest.raises(ConfigError, match="algo.name"):
        make_algorithm(token_run(TRPOConfig()))
    with pytest.raises(ConfigError, match="algo.num_steps"):
        make_algorithm(token_run(PPOConfig(num_steps=8)))
    for options in ({"unroll_length": 1}, {"recompute_advantages": True, "num_minibatches": 1}):
        with pytest.raises(ConfigError, match=f"algo.{next(iter(options))}.*whole answers"):
            make_algorithm(token_run(PPOConfig(num_steps=3, **options)))


def test_init_from_refuses_other_architectures_vocabularies_and_buffers(sft_run, tmp_path):
    out, _ = sft_run
    other_net = NetworkConfig(kind="transformer", d_model=64, num_layers=1, num_heads=2, mlp_ratio=2)
    with pytest.raises(ConfigError, match="network.d_model: checkpoint has 32, this run has 64"):
        make_algorithm(token_run(GRPOConfig(), network=other_net, init_from=str(out)))
    with pytest.raises(ConfigError, match="max_len"):  # 2-digit prompts: a longer buffer
        make_algorithm(token_run(GRPOConfig(), env_params={"min_digits": 2, "max_digits": 2},
                                 init_from=str(out)))
    # the same parameters saved with another vocabulary in their fingerprint
    meta = pretrained.read_meta(str(out))
    meta = {k: v for k, v in meta.items() if k != "structure"}
    params = pretrained.load_policy(str(out), NET, envs.make("Addition-v0", dict(ONE_DIGIT))[2])
    edited = tmp_path / "edited"
    pretrained.save_checkpoint(edited, params, {**meta, "vocab": meta["vocab"][:-1] + ["*"]})
    with pytest.raises(ConfigError, match="vocabulary mismatch"):
        make_algorithm(token_run(GRPOConfig(), init_from=str(edited)))
    # a leaf whose data no longer matches the digest recorded when it was saved: refused as corrupt
    corrupt = tmp_path / "corrupt"
    shutil.copytree(out / "checkpoint", corrupt)
    manifest_file = corrupt / "0" / "manifest" / "metadata"  # orbax's JSON item
    manifest = json.loads(manifest_file.read_text())
    manifest["digests"][next(iter(manifest["digests"]))] = "0" * 64
    manifest_file.write_text(json.dumps(manifest))
    with pytest.raises(ConfigError, match="init_from.*corrupt"):
        make_algorithm(token_run(GRPOConfig(), init_from=str(corrupt)))
    with pytest.raises(ConfigError, match="init_from"):
        make_algorithm(token_run(GRPOConfig(), init_from=str(tmp_path / "missing")))
    with pytest.raises(ConfigError, match="init_from"):
        make_algorithm(RunConfig(algo=GRPOConfig(), env=EnvConfig(id="CartPole-v1"),
                                 init_from=str(out)))


@pytest.mark.parametrize("module, overrides, message", [
    ("sft", ["+sft.bogus=1"], "unknown config key 'sft.bogus'"),
    ("sft", ["sft.num_examples=0"], "'sft.num_examples' = 0"),
    ("sft", ["env=CartPole-v1"], "must be a token env"),
    ("train", ["algo=grpo", "env=Addition-v0", "env.params.max_len=5"], "'env.params.max_len' = 5"),
    ("train", ["algo=grpo", "env=Addition-v0", "init_from=/nonexistent"], "'init_from'"),
])
def test_bad_token_input_fails_before_compiling(module, overrides, message, tmp_path, monkeypatch):
    """In process (the CLI's own functions): each case a ConfigError naming the key, nothing written,
    nothing compiled. The command line's exit code 2 is checked once below (a subprocess each)."""
    from purejaxrl_opt.train import run_from_config

    def _refuse(*args, **kwargs):
        raise AssertionError("compiled despite bad input")

    monkeypatch.setattr(runner, "Compiled", _refuse)
    monkeypatch.setattr("purejaxrl_opt.host.sft.make_sft_train", _refuse)
    out = tmp_path / "run"
    with pytest.raises(ConfigError, match=re.escape(message)):
        if module == "sft":
            run_sft(*sft.config_from_hydra(compose("sft", overrides)), out_dir=out, log=lambda *_: None)
        else:
            run_from_config(compose("config", overrides), str(out))
    assert not out.exists()


@pytest.mark.parametrize("module, overrides, message", [
    ("sft", ["sft.num_examples=0"], "'sft.num_examples' = 0"),
    ("train", ["algo=grpo", "env=Addition-v0", "env.params.max_len=5"], "'env.params.max_len' = 5"),
])
def test_cli_bad_token_input_exits_with_code_2(module, overrides, message, tmp_path):
    import subprocess
    import sys

    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", f"purejaxrl_opt.{module}", *overrides,
                           f"hydra.run.dir={out}"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert message in proc.stderr
    assert not (out / "summary.json").exists() and not (out / "checkpoint").exists()
