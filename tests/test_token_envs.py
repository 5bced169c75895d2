"""Token envs (Addition-v0, Reverse-v0): rewards, episode ends, prompt/answer consistency, split
disjointness, option validation, jit + vmap."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxrl_opt.envs import tokens as te
from purejaxrl_opt.config.schema import ConfigError
from tests import cli_lifecycle


def _batched_reset(env, params, n, seed=0):
    keys = jax.random.split(jax.random.PRNGKey(seed), n)
    # on the host: the tests index single prompts in Python loops (a device array would dispatch a
    # gather per index)
    return jax.device_get(jax.jit(jax.vmap(env.reset, in_axes=(0, None)))(keys, params))


_STEPS: dict = {}  # id(env) -> (env, jit(env.step)): the env is held, so its id is not reused


def _jitted_step(env):
    if id(env) not in _STEPS:
        _STEPS[id(env)] = (env, jax.jit(env.step))
    return _STEPS[id(env)][1]


def _play(env, params, state, tokens, seed=0):
    """Emit ``tokens`` one per step through gymnax ``step`` (auto-reset); returns the per-step outputs."""
    key = jax.random.PRNGKey(seed)
    out = []
    step = _jitted_step(env)  # one compile per env, not one dispatch per primitive per token
    for t in tokens:
        key, sub = jax.random.split(key)
        obs, state, reward, term, trunc, info = step(sub, state, jnp.int32(te.action_of_token(t)), params)
        format_term = info["reward_terms"][env.reward_names.index("format")]
        out.append((float(reward), bool(term), bool(trunc), bool(info["correct"]), bool(format_term)))
    return out


def _answer_tokens(state):
    return [int(t) for t in np.asarray(state.answer)[: int(state.answer_len)]]


# --------------------------------------------------------------------------- vocabulary
def test_vocab_and_action_mapping():
    assert te.VOCAB == ("<pad>", "<eos>", *"0123456789", "+", "=")
    assert (te.PAD, te.EOS, te.PLUS, te.EQUALS) == (0, 1, 12, 13)
    env, params = te.make("Addition-v0", {})
    assert env.vocab == te.VOCAB and env.num_actions == len(te.VOCAB) - 1 == 13
    assert env.action_space(params).n == 13
    acts = jnp.arange(13)
    np.testing.assert_array_equal(te.token_of_action(acts), np.arange(1, 14))
    np.testing.assert_array_equal(te.action_of_token(te.token_of_action(acts)), acts)
    assert te.decode([5, 6, 12, 3, 13, 7, 1, 0, 0]) == "34+1=5$"
    assert te.encode("34+1=5$") == [5, 6, 12, 3, 13, 7, 1]


# --------------------------------------------------------------------------- rewards and episode ends
@pytest.mark.parametrize("env_id", te.TOKEN_ENVS)
def test_rewards_and_episode_ends(env_id):
    env, params = te.make(env_id, {})
    _, state = env.reset(jax.random.PRNGKey(3), params)
    answer = _answer_tokens(state)
    assert answer[-1] == te.EOS and len(answer) >= 2
    limit = env.answer_limit

    # exact answer: reward only on the final (EOS) step, terminated there, never truncated
    out = _play(env, params, state, answer)
    assert [o[0] for o in out] == [0.0] * (len(answer) - 1) + [1.0]
    assert [o[1] for o in out] == [False] * (len(answer) - 1) + [True]
    assert [o[3] for o in out] == [False] * (len(answer) - 1) + [True]
    assert not any(o[2] for o in out)

    # one wrong digit -> 0, still ends at EOS
    wrong = list(answer)
    wrong[0] = te.DIGIT0 + (wrong[0] - te.DIGIT0 + 1) % 10
    out = _play(env, params, state, wrong)
    assert out[-1][:2] == (0.0, True) and not out[-1][3] and not any(o[1] for o in out[:-1])

    # no EOS: the episode ends at the answer limit with reward 0
    digits = [te.DIGIT0 + 1] * limit
    out = _play(env, params, state, digits)
    assert [o[1] for o in out] == [False] * (limit - 1) + [True]
    assert all(o[0] == 0.0 and not o[3] for o in out)
    # the right digits but a digit where EOS belongs: runs to the limit, 0 (also for an answer that
    # fills the limit, where the digit is the last token generated)
    full = next(s for s in (env.reset(jax.random.PRNGKey(k), params)[1] for k in range(100))
                if int(s.answer_len) == limit)
    for st in (state, full):
        ans = _answer_tokens(st)
        out = _play(env, params, st, ans[:-1] + [te.DIGIT0] * (limit - len(ans) + 1))
        assert [o[1] for o in out] == [False] * (limit - 1) + [True]
        assert all(o[0] == 0.0 and not o[3] for o in out)

    # early EOS: ends at once with 0
    out = _play(env, params, state, [te.EOS])
    assert out == [(0.0, True, False, False, False)]

    # format reward: only when set, only for well-formed output (digits then EOS, at least one digit)
    fparams = params.replace(weights={**params.weights, "format": 0.5})
    assert _play(env, params, state, wrong)[-1][0] == 0.0
    assert _play(env, fparams, state, wrong)[-1][0] == 0.5
    assert _play(env, fparams, state, wrong)[-1][4]
    assert _play(env, fparams, state, answer)[-1][0] == 1.5
    assert _play(env, fparams, state, [te.EOS])[-1][0] == 0.0
    assert _play(env, fparams, state, digits)[-1][0] == 0.0
    assert _play(env, fparams, state, [te.DIGIT0, te.PLUS, te.EOS])[-1][0] == 0.0


def test_absorbing_after_end_and_token_buffer():
    env, params = te.make("Addition-v0", {})
    _, state = env.reset(jax.random.PRNGKey(1), params)
    answer = _answer_tokens(state)
    key = jax.random.PRNGKey(0)
    step_env = jax.jit(env.step_env)
    for t in answer:
        obs, state, reward, term, info = step_env(key, state, te.action_of_token(t), params)
    assert bool(term) and float(reward) == 1.0
    n = int(state.prompt_len) + len(answer)
    assert int(state.length) == n and int(state.time) == len(answer)
    np.testing.assert_array_equal(np.asarray(obs)[int(state.prompt_len):n], answer)
    assert (np.asarray(obs)[n:] == te.PAD).all()
    # callers that ignore done: same state, reward 0, still terminated, finite
    for a in range(env.num_actions):
        obs2, state2, reward2, term2, info2 = step_env(key, state, a, params)
        np.testing.assert_array_equal(obs2, obs)
        assert float(reward2) == 0.0 and bool(term2) and not bool(info2["correct"])
        assert int(state2.length) == int(state.length)


# --------------------------------------------------------------------------- prompts vs answers
def _expected_answer(env_id, prompt: str) -> str:
    body = prompt[:-1]
    if env_id == "Addition-v0":
        a, b = body.split("+")
        return str(int(a) + int(b))
    return body[::-1]


@pytest.mark.parametrize("env_id,digits", [("Addition-v0", (1, 3)), ("Addition-v0", (4, 4)),
                                           ("Addition-v0", (9, 9)), ("Reverse-v0", (1, 7)),
                                           ("Reverse-v0", (3, 5))])
def test_prompt_matches_answer(env_id, digits):
    lo, hi = digits
    env, params = te.make(env_id, {"min_digits": lo, "max_digits": hi})
    obs, state = _batched_reset(env, params, 512)
    obs, answer = np.asarray(obs), np.asarray(state.answer)
    assert obs.dtype == np.int32 and obs.shape == (512, env.max_len)
    lengths = set()
    for i in range(512):
        plen, alen = int(state.prompt_len[i]), int(state.answer_len[i])
        prompt = te.decode(obs[i, :plen])
        assert te.decode(obs[i]) == prompt and prompt.endswith("=") and prompt.count("=") == 1
        assert int(state.length[i]) == plen and int(state.time[i]) == 0
        assert te.decode(answer[i]) == _expected_answer(env_id, prompt) + "$"
        assert answer[i, alen - 1] == te.EOS and (answer[i, alen:] == te.PAD).all()
        if env_id == "Addition-v0":
            a, b = prompt[:-1].split("+")
            for x in (a, b):
                assert lo <= len(x) <= hi and (len(x) == 1 or x[0] != "0")
                lengths.add(len(x))
        else:
            assert lo <= len(prompt) - 1 <= hi
            lengths.add(len(prompt) - 1)
    assert lengths == set(range(lo, hi + 1))  # every digit count is drawn


# --------------------------------------------------------------------------- train/test split
@pytest.mark.parametrize("env_id,options", [("Addition-v0", {"min_digits": 1, "max_digits": 1}),
                                            ("Reverse-v0", {"min_digits": 1, "max_digits": 2})])
def test_splits_disjoint_and_cover(env_id, options):
    env, params = te.make(env_id, options)
    prompts = {}
    for split in (0, 1):
        obs, state = _batched_reset(env, params.replace(split=split), 2048, seed=split)
        flags = env.is_test_prompt(obs)
        assert flags.shape == (2048,) and (flags == bool(split)).all()
        prompts[split] = {te.decode(o) for o in np.asarray(obs)}
    assert prompts[0] and prompts[1] and not (prompts[0] & prompts[1])
    everything = set(s for s in env.prompt_strings())
    assert prompts[0] | prompts[1] == everything  # small space: both splits fully covered
    frac = len(prompts[1]) / len(everything)
    assert 0.05 < frac < 0.4, frac


def test_split_fraction_and_vmapped_split():
    env, params = te.make("Addition-v0", {"test_fraction": 0.3})
    everything = [te.encode(s) for s in env.prompt_strings()]
    assert len(everything) == env.num_prompts == 90 * 90
    frac = env.is_test_prompt(np.asarray(everything)).mean()
    assert abs(frac - 0.3) < 0.03, frac
    # split as a vmapped EnvParams leaf
    splits = jnp.arange(256) % 2
    keys = jax.random.split(jax.random.PRNGKey(7), 256)
    batched = params.replace(split=splits)
    in_axes = te.TokenEnvParams(max_steps_in_episode=None, split=0, weights=None)
    obs, _ = jax.jit(jax.vmap(env.reset, in_axes=(0, in_axes)))(keys, batched)
    np.testing.assert_array_equal(env.is_test_prompt(obs), np.asarray(splits) == 1)


# --------------------------------------------------------------------------- option validation
@pytest.mark.parametrize("env_id,options,key,fragment", [
    ("Addition-v0", {"max_len": 6}, "max_len", "must be >= 10 (longest prompt 6 + longest answer 4"),
    ("Addition-v0", {"bogus": 1}, "bogus", "allowed"),
    ("Addition-v0", {"min_digits": 3, "max_digits": 2}, "min_digits", "<= env.params.max_digits = 2"),
    ("Addition-v0", {"max_digits": 10}, "max_digits", "int32"),
    ("Addition-v0", {"min_digits": 0}, "min_digits", ">= 1"),
    ("Addition-v0", {"test_fraction": 1.0}, "test_fraction", "(0, 1)"),
    ("Addition-v0", {"test_fraction": 0.0}, "test_fraction", "(0, 1)"),
    ("Addition-v0", {"min_digits": 1, "max_digits": 1, "test_fraction": 0.001}, "test_fraction",
     "split"),
    ("Addition-v0", {"split": 2}, "split", "0 (train prompts) or 1"),
    ("Addition-v0", {"max_steps_in_episode": 5}, "max_steps_in_episode", "[1, 4]"),
    ("Addition-v0", {"format_reward": float("nan")}, "format_reward", "finite"),
    ("Reverse-v0", {"max_len": 11}, "max_len", ">= 12"),
    ("Reverse-v0", {"min_digits": 6}, "min_digits", "<= env.params.max_digits = 5"),
])
def test_bad_options_raise_config_error(env_id, options, key, fragment):
    with pytest.raises(ConfigError) as err:
        te.make(env_id, options)
    msg = str(err.value)
    assert f"env.params.{key}" in msg and fragment in msg, msg
    if key != "bogus":
        assert repr(options[key]) in msg, msg


def test_good_options_and_unknown_env():
    env, params = te.make("Reverse-v0", {"max_len": 20, "split": 1, "format_reward": 0.25,
                                         "max_steps_in_episode": 3, "test_fraction": 0.5})
    assert env.max_len == 20 and env.observation_space(params).shape == (20,)
    assert (params.split, params.weights, params.max_steps_in_episode) == (
        1, {"correct": 1.0, "format": 0.25}, 3)
    assert env.name == "Reverse-v0" and env.answer_limit == 6 and env.max_prompt_len == 6
    with pytest.raises(ConfigError, match="env.id"):
        te.make("Subtraction-v0", {})


# --------------------------------------------------------------------------- jit + vmap rollout
@pytest.mark.parametrize("env_id", [pytest.param(e, marks=() if i == 0 else pytest.mark.slow)
                                    for i, e in enumerate(te.TOKEN_ENVS)])  # one in the fast tier
def test_jit_vmap_random_rollout(env_id):
    env, params = te.make(env_id, {})
    n, steps = 64, 3 * env.answer_limit
    obs, state = _batched_reset(env, params, n)
    space = env.observation_space(params)
    assert space.shape == (env.max_len,) and space.dtype == jnp.int32

    def one(carry, key):
        state = carry
        ka, ks = jax.random.split(key)
        actions = jax.random.randint(ka, (n,), 0, env.num_actions)
        obs, state, reward, term, trunc, info = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
            jax.random.split(ks, n), state, actions, params)
        return state, (obs, reward, term, trunc, info["correct"])

    keys = jax.random.split(jax.random.PRNGKey(1), steps)
    _, (obs, reward, term, trunc, correct) = jax.jit(lambda s: jax.lax.scan(one, s, keys))(state)
    assert obs.dtype == jnp.int32 and obs.shape == (steps, n, env.max_len)
    assert ((obs >= 0) & (obs < len(env.vocab))).all()
    assert np.isfinite(np.asarray(reward)).all() and set(np.unique(reward)) <= {0.0, 1.0}
    assert not trunc.any() and term.any()
    assert (np.asarray(reward) == np.asarray(correct)).all()
    # episodes never outlive the answer limit
    ends = np.asarray(term)
    run = np.zeros(n, int)
    for t in range(steps):
        run = np.where(ends[t], 0, run + 1)
        assert (run < env.answer_limit).all()


@pytest.mark.parametrize("algo", cli_lifecycle.matrix_params("tokens"))
def test_cli_train_evaluate_gif_kill_and_resume(algo, tmp_path):
    """Through the CLI with a user's defaults: train, evaluate (--gif), SIGKILL after a checkpoint,
    resume= -> metrics.csv bitwise the uninterrupted run's (tests/cli_lifecycle.py)."""
    cli_lifecycle.check_library("tokens", algo, tmp_path)

