"""The task API (purejaxrl_opt/envs/tasks.py): reward functions on hand-made answers, Multiply-v0, pass@k
against the formula and exhaustive enumeration, bad task definitions refused before compiling, and a
task from a module outside the package trained through the CLIs (SFT, then GRPO from it)."""

from __future__ import annotations

import csv
import itertools
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxrl_opt.envs import tasks, tokens as te
from purejaxrl_opt.config.errors import ConfigError
from purejaxrl_opt.core.stages.evaluation import pass_at_k
from tests.conftest import cli


def _sample(answer: str, limit: int) -> tasks.Sample:
    tokens = te.encode(answer)
    ref = np.zeros(limit, np.int32)
    ref[:len(tokens)] = tokens
    return tasks.Sample(jnp.zeros(3, jnp.int32), jnp.int32(0), jnp.asarray(ref), jnp.int32(len(tokens)))


def _generated(text: str, limit: int):
    tokens = te.encode(text)
    out = np.zeros(limit, np.int32)
    out[:len(tokens)] = tokens
    return jnp.asarray(out), jnp.int32(len(tokens))


# --------------------------------------------------------------------------- reward functions by hand
@pytest.mark.parametrize("text, exact, well_formed, digits", [
    ("408$", 1.0, 1.0, 1.0),
    ("418$", 0.0, 1.0, 0.75),   # 3 of the 4 positions (incl. <eos>) right
    ("40$", 0.0, 1.0, 0.5),     # '4', '0' right; '$' where '8' belongs; PAD where '$' belongs
    ("4080$", 0.0, 1.0, 0.0),   # longer than the reference: no partial credit
    ("$", 0.0, 0.0, 0.0),       # no digit
    ("4+8$", 0.0, 0.0, 0.75),   # not only digits (3 of the 4 positions right)
    ("40", 0.0, 0.0, 0.5),      # no <eos> (ran to a limit of 2)
])
def test_reward_functions_on_hand_made_answers(text, exact, well_formed, digits):
    limit = 5
    sample = _sample("408$", limit)
    generated, length = _generated(text, limit)
    assert float(tasks.exact_answer(sample, generated, length)) == exact
    assert float(tasks.well_formed_digits(sample, generated, length)) == well_formed
    assert float(tasks.digit_match(sample, generated, length)) == digits


def _play(env, params, state, text):
    step = jax.jit(env.step_env)
    for token in te.encode(text):
        _, state, reward, done, info = step(jax.random.PRNGKey(0), state, te.action_of_token(token), params)
    return float(reward), bool(done), bool(info["correct"]), np.asarray(info["reward_terms"]).tolist()


def test_multiply_env_weighted_rewards_and_terms():
    env, params = te.make("Multiply-v0", {"digit_reward": 0.5, "format_reward": 0.25})
    assert env.vocab == te.ARITH_VOCAB and env.num_actions == 14
    assert env.reward_names == ("correct", "digits", "format") and env.answer_limit == 5
    obs, state = jax.jit(env.reset)(jax.random.PRNGKey(4), params)
    prompt = te.decode(obs, env.vocab)
    a, b = map(int, prompt[:-1].split("*"))
    assert 10 <= a <= 99 and 10 <= b <= 99
    product = str(a * b)
    assert te.decode(state.answer, env.vocab) == product + "$"
    assert _play(env, params, state, product + "$") == (1.75, True, True, [1.0, 1.0, 1.0])
    wrong = str((int(product[0]) + 1) % 10) + product[1:]  # first digit wrong
    frac = (len(product)) / (len(product) + 1)
    reward, done, correct, terms = _play(env, params, state, wrong + "$")
    assert (done, correct) == (True, False) and terms == pytest.approx([0.0, frac, 1.0])
    assert reward == pytest.approx(0.5 * frac + 0.25)
    # reward_weights (an env option) override the task's weights
    env, params = te.make("Multiply-v0", {"reward_weights": {"correct": 2.0}})
    assert params.weights == {"correct": 2.0, "digits": 0.0, "format": 0.0}
    assert _play(env, params, state, product + "$")[0] == 2.0
    with pytest.raises(ConfigError, match="env.params.reward_weights"):
        te.make("Multiply-v0", {"reward_weights": {"bogus": 1.0}})


@pytest.mark.parametrize("env_id, op, order", [("Multiply-v0", "*", "msd"), ("Multiply-v0", "*", "lsd"),
                                               ("Addition-v0", "+", "lsd")])
def test_arithmetic_prompts_match_answers_and_split(env_id, op, order):
    env, params = te.make(env_id, {"answer_order": order} if order != "msd" else {})
    assert env.num_prompts == 90 * 90
    for split in (0, 1):
        keys = jax.random.split(jax.random.PRNGKey(split), 256)
        obs, state = jax.device_get(jax.jit(jax.vmap(env.reset, in_axes=(0, None)))(keys, params.replace(split=split)))
        assert (env.is_test_prompt(obs) == bool(split)).all()
        for i in range(0, 256, 17):
            a, b = map(int, te.decode(obs[i], env.vocab)[:-1].split(op))
            result = str(a * b if op == "*" else a + b)
            assert te.decode(state.answer[i], env.vocab) == (result if order == "msd" else result[::-1]) + "$"


def test_lsd_answers_keep_the_prompts_and_their_split():
    """answer_order changes only the answer: the same prompts, so the same held-out split."""
    keys = jax.random.split(jax.random.PRNGKey(3), 64)
    (env, params), (lsd, lsd_params) = te.make("Multiply-v0", {}), te.make("Multiply-v0", {"answer_order": "lsd"})
    obs, _ = jax.jit(jax.vmap(env.reset, in_axes=(0, None)))(keys, params)
    obs_lsd, _ = jax.jit(jax.vmap(lsd.reset, in_axes=(0, None)))(keys, lsd_params)
    np.testing.assert_array_equal(np.asarray(obs), np.asarray(obs_lsd))


def _work(a: int, b: int, order: str, digits: int = 2) -> str:
    """The scratchpad answer to a*b written by hand: a * b_j * 10**j for each digit of b, zero-padded
    to digits + 1 + j, '+' between, '=' then the product, each number in ``order``."""
    flip = (lambda x: x[::-1]) if order == "lsd" else (lambda x: x)
    parts = [f"{a * int(d) * 10**j:0{digits + 1 + j}d}" for j, d in enumerate(reversed(str(b)))]
    return "+".join(flip(p) for p in parts) + "=" + flip(str(a * b)) + "$"


@pytest.mark.parametrize("order", ["lsd", pytest.param("msd", marks=pytest.mark.slow)])  # one order, fast
def test_multiply_scratchpad_answers_match_the_hand_written_work(order):
    """scratchpad=true: the reference is the partial products, then the product; the prompts (and so
    the split) are those of the plain task; the reference scores 1 on every reward; only the product
    after the last '=' decides correctness."""
    env, params = te.make("Multiply-v0", {"answer_order": order, "scratchpad": True, "min_digits": 1,
                                          "format_reward": 1.0})
    plain, plain_params = te.make("Multiply-v0", {"answer_order": order, "min_digits": 1})
    assert env.answer_limit == 3 + 1 + 4 + 1 + 4 + 1  # two partial products, the product, <eos>
    keys = jax.random.split(jax.random.PRNGKey(7), 128)
    obs, state = jax.device_get(jax.jit(jax.vmap(env.reset, in_axes=(0, None)))(keys, params))
    plain_obs, _ = jax.jit(jax.vmap(plain.reset, in_axes=(0, None)))(keys, plain_params)
    prompt_len = env.max_prompt_len  # the token buffers differ in length (answer limits 14 and 5)
    np.testing.assert_array_equal(np.asarray(obs)[:, :prompt_len], np.asarray(plain_obs)[:, :prompt_len])
    seen_one_digit_b = False
    for i in range(128):
        a, b = map(int, te.decode(obs[i], env.vocab)[:-1].split("*"))
        seen_one_digit_b |= b < 10
        work = _work(a, b, order)
        assert te.decode(state.answer[i], env.vocab) == work and int(state.answer_len[i]) == len(work)
    assert seen_one_digit_b  # b < 10: one partial product, then '='
    one = jax.tree_util.tree_map(lambda x: x[3], state)
    a, b = map(int, te.decode(obs[3], env.vocab)[:-1].split("*"))
    product = str(a * b) if order == "msd" else str(a * b)[::-1]
    assert _play(env, params, one, _work(a, b, order)) == (2.0, True, True, [1.0, 1.0, 1.0])
    wrong_work = "0" * (len(_work(a, b, order)) - len(product) - 2) + "=" + product + "$"
    reward, done, correct, terms = _play(env, params, one, wrong_work)
    assert (done, correct) == (True, True) and terms[0] == 1.0 and terms[1] < 1.0


@pytest.mark.parametrize("text, final, well_formed", [
    ("21+042=252$", 1.0, 1.0),
    ("99+999=252$", 1.0, 1.0),    # wrong work, right product: correct (only the product is checked)
    ("252$", 1.0, 0.0),           # no work, no '=': all of it is the answer
    ("=252$", 1.0, 0.0),          # '=' with no work before it
    ("1=2=252$", 1.0, 0.0),       # two '='
    ("21+042=2520$", 0.0, 1.0),   # a digit too many
    ("21+042=25$", 0.0, 1.0),     # a digit too few
    ("21+042=252", 0.0, 0.0),     # no <eos> (ran to the limit)
    ("21+042=$", 0.0, 0.0),       # no product
    ("21+042+252$", 0.0, 0.0),    # no '='
    ("21++042=252$", 1.0, 0.0),   # '+' not after a digit
])
def test_scratchpad_rewards_on_hand_made_answers(text, final, well_formed):
    limit = 12
    sample = tasks.Sample(jnp.zeros(3, jnp.int32), jnp.int32(0), jnp.zeros(limit, jnp.int32), jnp.int32(0),
                          (jnp.asarray(te.encode("252$") + [0]), jnp.int32(4)))
    generated, length = _generated(text, limit)
    assert float(tasks.final_answer(sample, generated, length)) == final
    assert float(tasks.well_formed_work(sample, generated, length)) == well_formed


# --------------------------------------------------------------------------- pass@k
def test_pass_at_k_matches_the_formula_and_enumeration():
    for n in range(1, 11):
        for c in range(n + 1):
            for k in range(1, n + 1):
                formula = 1.0 - math.comb(n - c, k) / math.comb(n, k)
                assert float(pass_at_k(n, c, k)) == pytest.approx(formula, abs=1e-6), (n, c, k)
    # exhaustive: over every k-subset of n samples of which the first c are correct, the fraction
    # of subsets holding a correct one
    for n, c, k in [(4, 1, 2), (5, 2, 3), (6, 0, 2), (6, 6, 1), (7, 3, 4)]:
        subsets = list(itertools.combinations(range(n), k))
        hits = sum(any(i < c for i in s) for s in subsets) / len(subsets)
        assert float(pass_at_k(n, c, k)) == pytest.approx(hits, abs=1e-6)
    # vectorised and jitted, and pass@1 is the fraction correct
    counts = jnp.asarray([0, 3, 8])
    np.testing.assert_allclose(jax.jit(lambda c: pass_at_k(8, c, 1))(counts), [0.0, 3 / 8, 1.0], atol=1e-6)
    # large n: stable (no overflowing binomials)
    assert 0.0 < float(pass_at_k(1000, 1, 10)) == pytest.approx(0.01, abs=1e-5)
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)


# --------------------------------------------------------------------------- user tasks: checks
def test_user_task_from_its_own_module():
    env, params = te.make("tests.task_fixtures:Parity", {"num_bits": 4, "short_reward": 0.25})
    assert env.name == "tests.task_fixtures:Parity" and env.max_prompt_len == 5 and env.max_len == 8
    assert params.weights == {"correct": 1.0, "short": 0.25}
    obs, state = jax.jit(env.reset)(jax.random.PRNGKey(0), params)
    bits = te.decode(obs)[:-1]
    parity = str(bits.count("1") % 2)
    assert _play(env, params, state, parity + "$") == (1.25, True, True, [1.0, 1.0])
    assert _play(env, params, state, str(1 - int(parity)) + "$") == (0.25, True, False, [0.0, 1.0])


@pytest.mark.parametrize("env_id, options, fragments", [
    ("tests.task_fixtures:BadRewardShape", {}, ["task 'Parity'", "reward 'per_token'", "returns (3,)",
                                                "scalar"]),
    ("tests.task_fixtures:BadAnswerShape", {}, ["task 'Parity'", "sample(key).answer", "(7,)", "(3,)"]),
    ("tests.task_fixtures:LongPrompt", {"max_len": 20}, ["env.params.max_len", ">= 43", "task 'Parity'"]),
    ("tests.task_fixtures:Parity", {"bogus": 1}, ["env.params.bogus", "num_bits", "max_len"]),
    ("tests.task_fixtures:Parity", {"num_bits": 1, "test_fraction": 0.01}, ["env.params.test_fraction",
                                                                           "split"]),
    ("tests.task_fixtures:NotATask", {}, ["env.id", "not a purejaxrl_opt.envs.tasks.Task"]),
    ("tests.task_fixtures:Missing", {}, ["env.id", "no attribute 'Missing'"]),
    ("no_such_module_xyz:Task", {}, ["env.id", "cannot import"]),
    ("Subtraction-v0", {}, ["env.id", "Multiply-v0", "module:TaskClass"]),
    ("Multiply-v0", {"answer_order": "reversed"}, ["env.params.answer_order", "'msd', 'lsd'"]),
    ("Multiply-v0", {"scratchpad": "yes"}, ["env.params.scratchpad", "true or false"]),
])
def test_bad_task_definitions_fail_before_compiling(env_id, options, fragments):
    with pytest.raises(ConfigError) as err:
        te.make(env_id, options)
    for fragment in fragments:
        assert fragment in str(err.value), str(err.value)


def _cli(module, *overrides, timeout=600):
    return cli(*overrides, module=f"purejaxrl_opt.{module}", timeout=timeout)


def test_cli_refuses_a_bad_task_before_compiling(tmp_path):
    proc = _cli("train", "algo=grpo", "env=task", "env.id=tests.task_fixtures:BadRewardShape",
                f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "task 'Parity'" in proc.stderr and "reward 'per_token'" in proc.stderr
    assert not (tmp_path / "summary.json").exists()


@pytest.mark.slow  # a CLI compile; the task's validation and rewards are checked in the fast tier
def test_user_task_trains_through_the_cli(tmp_path):
    """SFT then GRPO (with pass@k, periodic and final) on a task of a test module."""
    task = ["env=task", "env.id=tests.task_fixtures:Parity", "+env.params.num_bits=3",
            "network.d_model=32", "network.num_layers=1"]
    sft = _cli("sft", *task, "sft.num_examples=4", "sft.steps=50", "sft.eval_prompts=8",
               f"hydra.run.dir={tmp_path / 'sft'}")
    assert sft.returncode == 0, sft.stderr[-3000:]
    proc = _cli("train", "algo=grpo", *task, f"init_from={tmp_path / 'sft'}", "num_seeds=2",
                "total_timesteps=288", "algo.num_groups=4", "algo.group_size=4", "algo.num_minibatches=2",
                "eval_every=3", "eval_episodes=4", "eval_samples=4", "eval_pass_k=[1,4]", "logger=none",
                f"hydra.run.dir={tmp_path / 'grpo'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((tmp_path / "grpo" / "summary.json").read_text())
    # a budget of 288 real steps: each seed runs updates of 16 answers (1..3 tokens) until it has
    # consumed them, so it ends within one update's worth (48 steps) above the budget
    updates = summary["updates_per_seed"]
    assert all(288 <= steps < 288 + 48 for steps in summary["env_steps_per_seed"])
    assert summary["eval_samples"] == 4 and all(u >= 288 // 48 for u in updates)
    for k in (1, 4):
        assert 0.0 <= summary[f"eval_pass@{k}"] <= 1.0 and len(summary[f"eval_pass@{k}_per_seed"]) == 2
    assert summary["eval_pass@1"] <= summary["eval_pass@4"]
    rows = list(csv.DictReader(open(tmp_path / "grpo" / "metrics.csv")))
    assert len(rows) == sum(updates)
    for row in rows:
        # the return is the weighted sum of the reward functions (weights 1 and 0.5), per update
        ret = float(row["return_mean"])
        assert ret == pytest.approx(float(row["reward/correct"]) + 0.5 * float(row["reward/short"]), abs=1e-5)
    periodic = [r for r in rows if r["eval_pass@4"] != ""]  # NaN (no evaluation) is written empty
    assert len(periodic) == sum(u // 3 for u in updates)  # every 3rd update of each seed
    assert all(float(r["eval_pass@1"]) <= float(r["eval_pass@4"]) for r in periodic)
