"""Token-generation environments (gymnax interface): any :class:`purejaxrl_opt.envs.tasks.Task` as an env.

The policy emits one token per env step; the observation is the whole token buffer, so a causal
transformer reads the prompt plus everything generated so far and predicts the next token.

Design
------
* **Vocabulary**: the task's (``Addition-v0``/``Reverse-v0``: :data:`VOCAB`, 14 tokens: ``<pad>`` (0),
  ``<eos>`` (1), digits ``0``-``9`` (tokens 2-11), ``+`` (12), ``=`` (13); ``Multiply-v0`` adds ``*``).
  PAD is only right-padding of the buffer and is never emitted: the action space is
  ``Discrete(len(vocab) - 1)`` and action ``a`` writes token ``a + 1`` (:func:`token_of_action` /
  :func:`action_of_token`).
* **Tasks** (purejaxrl_opt/envs/tasks.py): ``env.id`` names a registered task (:data:`TOKEN_ENVS`) or a
  task class of the user's own module (``env.id=mypkg.tasks:MyTask``). :func:`make` splits
  ``env.params`` into the env's own options (:data:`purejaxrl_opt.envs.tasks.ENV_OPTIONS`) and the task's
  constructor options, builds the task, and checks it by tracing its sampler and every reward function
  once (``jax.eval_shape``): a wrong shape or dtype, a prompt longer than the buffer, a duplicate
  reward name is a :class:`~purejaxrl_opt.config.errors.ConfigError` naming the task, before any compile.
* **EnvParams** (pytree of scalars, may be traced or vmapped): ``split`` (0 train, 1 test),
  ``weights`` (reward name -> weight; ``env.params.reward_weights`` overrides the task's) and
  ``max_steps_in_episode`` (the answer limit, which the library reads as the episode limit; it may be
  lowered, never raised above the task's).
* **Train/test split, disjoint by construction**: a prompt is a test prompt iff ``task.is_test``
  (default: a salted murmur3 ``fmix32`` hash of the PAD-padded prompt below ``test_fraction * 2**32``).
  ``reset`` draws prompts from the task's sampler and rejects those of the other split
  (``lax.while_loop``), which samples *exactly* from the task distribution conditioned on the split;
  it is jit-able and vmappable (the split may be a traced/vmapped value). For prompt spaces the task
  can enumerate (<= 2**20 prompts) :func:`make` refuses a ``test_fraction`` that leaves a split empty
  (the rejection loop would never end).
* **Episodes**: each step writes the action's token at ``state.length``. The episode terminates
  (never truncates) when ``<eos>`` is emitted or when ``time`` (answer tokens generated) reaches the
  answer limit. The reward is paid on the final step only: ``sum_i weights[name_i] * fn_i(sample,
  generated, length)``; ``info["reward_terms"]`` holds every ``fn_i`` (unweighted, in the task's order,
  0 before the end) and ``info["correct"]`` is ``task.correct`` on a final step. A state is absorbing
  after its end: callers of ``step_env`` that ignore ``done`` get the same state back, reward 0 and
  ``terminated`` True.
* :func:`decode` (host side) drops PAD and shows ``<eos>`` as ``$``; :func:`encode` is its inverse.
"""

from __future__ import annotations

import itertools
import re
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment, spaces

from purejaxrl_opt.config.errors import ConfigError
from purejaxrl_opt.envs.tasks import (ARITH_VOCAB, DIGIT0, ENV_OPTIONS, EOS, EOS_CHAR, EQUALS, PAD,  # noqa: F401
                                      PLUS, TIMES, VOCAB, Sample, Task, _is_int, _is_real, bad_option,
                                      hash_prompt)
import purejaxrl_opt.envs.tasks as _tasks

NUM_ACTIONS = len(VOCAB) - 1  # of the 14-token vocabulary (Addition, Reverse); PAD is never emitted

LIBRARY = "tokens"  # env.id = "Addition-v0" (or "tokens/Addition-v0"), or "module:TaskClass"
TOKEN_ENVS: tuple[str, ...] = tuple(_tasks.TASKS)


def ids() -> tuple[str, ...]:
    """The built-in tasks (a task of the user's own module is named ``module:TaskClass``)."""
    return TOKEN_ENVS


def is_token_env(env_id: str) -> bool:
    """A registered task or a ``module:attribute`` task id."""
    return env_id in TOKEN_ENVS or ":" in env_id


def token_of_action(action):
    """Token written by ``action`` (``action + 1``; PAD cannot be emitted). Works on ints and arrays."""
    return action + 1


def action_of_token(token):
    """Action that writes ``token`` (``token - 1``). Works on ints and arrays."""
    return token - 1


def decode(tokens, vocab: tuple[str, ...] = ARITH_VOCAB) -> str:
    """Host-side: tokens -> string; PAD dropped, ``<eos>`` shown as ``$`` (e.g. ``"12+34=46$"``)."""
    chars = []
    for t in np.asarray(tokens).reshape(-1).tolist():
        if t == PAD:
            continue
        chars.append(EOS_CHAR if t == EOS else vocab[t])
    return "".join(chars)


def encode(text: str, vocab: tuple[str, ...] = ARITH_VOCAB) -> list[int]:
    """Host-side inverse of :func:`decode` (``$`` is ``<eos>``; single-character tokens only)."""
    table = {c: i for i, c in enumerate(vocab) if len(c) == 1} | {EOS_CHAR: EOS}
    return [table[c] for c in text]


# --------------------------------------------------------------------------- state and params
@struct.dataclass
class TokenEnvState(environment.EnvState):
    """``time`` (inherited): answer tokens generated so far."""

    tokens: jax.Array  # int32 [max_len]: prompt, generated tokens, PAD after
    length: jax.Array  # int32: tokens filled (prompt_len + time)
    prompt_len: jax.Array  # int32
    answer: jax.Array  # int32 [answer_limit]: reference answer incl. <eos>, PAD after
    answer_len: jax.Array  # int32 (incl. <eos>)
    done: jax.Array  # bool: the episode has ended (absorbing)
    data: Any = ()  # the task's Sample.data (what its rewards need)


@struct.dataclass
class TokenEnvParams(environment.EnvParams):
    """``max_steps_in_episode`` (inherited): answer limit, at most ``env.answer_limit``."""

    split: int = 0  # 0 = train prompts, 1 = test prompts
    weights: dict = struct.field(default_factory=dict)  # reward name -> weight


_REWARD_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def _task_error(task: Task, what: str) -> ConfigError:
    return ConfigError(f"task {task.name!r}: {what}")


# --------------------------------------------------------------------------- the env
class TokenEnv(environment.Environment[TokenEnvState, TokenEnvParams]):
    """A task as a gymnax env: one token per step into a fixed buffer of ``max_len`` tokens."""

    ENUMERATE_LIMIT = 2**20  # prompt spaces up to this size are checked for empty splits

    def __init__(self, task: Task, max_len: int = 0, env_id: str | None = None):
        super().__init__()
        self.task = task
        self.env_id = env_id or task.name
        self.vocab = tuple(task.vocab)
        self._check_task()
        self.answer_limit = int(task.answer_limit)
        needed = self.max_prompt_len + self.answer_limit
        if not _is_int(max_len) or max_len < 0:
            raise bad_option("max_len", max_len, f"an int >= 0 (0 = the smallest that fits: {needed})")
        if max_len and max_len < needed:
            raise bad_option("max_len", max_len, f">= {needed} (longest prompt {self.max_prompt_len} + "
                                                 f"longest answer {self.answer_limit} incl. <eos>) for "
                                                 f"task {task.name!r}")
        self.max_len = int(max_len) or needed
        self.test_fraction = task.test_fraction
        self.reward_names = tuple(r.name for r in task.rewards)
        self.num_prompts = task.num_prompts
        if self.num_prompts is not None and self.num_prompts <= self.ENUMERATE_LIMIT:
            self._check_splits_non_empty()

    # ---------------------------------------------------------------- checks (traced, not compiled)
    def _check_task(self) -> None:
        task = self.task
        if not isinstance(task.name, str) or not task.name:
            raise ConfigError(f"task {task!r}: name must be a non-empty string")
        if len(self.vocab) < 3 or self.vocab[PAD] != "<pad>" or self.vocab[EOS] != "<eos>":
            raise _task_error(task, f"vocab = {list(self.vocab)[:4]}... must start with '<pad>', '<eos>' "
                                    "and have at least one more token")
        if not _is_int(task.answer_limit) or task.answer_limit < 1:
            raise _task_error(task, f"answer_limit = {task.answer_limit!r} must be an int >= 1 (answer "
                                    "tokens incl. <eos>)")
        if not task.rewards:
            raise _task_error(task, "defines no reward functions (rewards = [Reward(name, fn, weight)])")
        names = [r.name for r in task.rewards]
        for r in task.rewards:
            if not isinstance(r.name, str) or not _REWARD_NAME.match(r.name):
                raise _task_error(task, f"reward name {r.name!r} must be letters, digits, '_', '.', '-' "
                                        "(it names a metrics column, reward/<name>)")
            if not _is_real(r.weight):
                raise _task_error(task, f"reward {r.name!r} has weight {r.weight!r}: must be a finite number")
        if len(set(names)) != len(names):
            raise _task_error(task, f"reward names {names} must be distinct")
        try:
            sample = jax.eval_shape(task.sample, jax.random.PRNGKey(0))
        except Exception as error:  # a user's sampler: say whose it is
            raise _task_error(task, f"sample(key) fails when traced: {type(error).__name__}: {error}") from error
        if not isinstance(sample, Sample):
            raise _task_error(task, f"sample(key) returns {type(sample).__name__}; must return a "
                                    "purejaxrl_opt.envs.tasks.Sample")

        def want(field, shape, kinds="i"):
            value = getattr(sample, field)
            if value.shape != shape or value.dtype.kind not in kinds:
                raise _task_error(task, f"sample(key).{field} has shape {value.shape} and dtype "
                                        f"{value.dtype}; must have shape {shape} and an integer dtype")

        if sample.prompt.ndim != 1:
            raise _task_error(task, f"sample(key).prompt has shape {sample.prompt.shape}; must be 1-D "
                                    "[max_prompt_len] (PAD-padded)")
        self.max_prompt_len = int(sample.prompt.shape[0])
        want("prompt", (self.max_prompt_len,))
        want("prompt_len", ())
        want("answer", (task.answer_limit,))
        want("answer_len", ())
        generated = jax.ShapeDtypeStruct((task.answer_limit,), jnp.int32)
        length = jax.ShapeDtypeStruct((), jnp.int32)
        for name, fn in [(f"reward {r.name!r}", r.fn) for r in task.rewards] + [("correct", task.correct)]:
            try:
                out = jax.eval_shape(fn, sample, generated, length)
            except Exception as error:
                raise _task_error(task, f"{name} fails when traced on (sample, generated "
                                        f"int32[{task.answer_limit}], length int32[]): "
                                        f"{type(error).__name__}: {error}") from error
            if not hasattr(out, "shape") or out.shape != () or out.dtype.kind not in "biuf":
                shape = getattr(out, "shape", type(out).__name__)
                raise _task_error(task, f"{name} returns {shape} {getattr(out, 'dtype', '')}; must "
                                        "return one number per answer (a scalar, shape ())")
        prompt = jax.ShapeDtypeStruct((self.max_prompt_len,), jnp.int32)
        out = jax.eval_shape(task.is_test, prompt)
        if out.shape != ():
            raise _task_error(task, f"is_test(prompt) returns shape {out.shape}; must return a scalar bool")

    def _check_splits_non_empty(self) -> None:
        seen = [False, False]
        prompts = self.task.prompt_strings()
        if prompts is None:
            return
        while not all(seen):
            chunk = list(itertools.islice(prompts, 4096))
            if not chunk:
                break
            buf = np.zeros((len(chunk), self.max_prompt_len), np.int32)
            for i, s in enumerate(chunk):
                t = encode(s, self.vocab)
                buf[i, :len(t)] = t
            test = self.is_test_prompt(buf)
            seen[1] |= bool(test.any())
            seen[0] |= bool((~test).any())
        if not all(seen):
            empty = "test" if not seen[1] else "train"
            what = self.task.describe() if hasattr(self.task, "describe") else self.task.name
            raise bad_option("test_fraction", self.test_fraction,
                             f"such that both splits are non-empty: the {empty} split of the "
                             f"{self.num_prompts} prompts of {what} is empty")

    # ---------------------------------------------------------------- split
    def prompt_strings(self):
        """Host side: every prompt of the task (e.g. ``"12+34="``), or None if the task cannot list them."""
        return self.task.prompt_strings()

    def is_test_prompt(self, tokens) -> np.ndarray:
        """Host side: is the prompt in ``tokens`` (``[..., L]``, e.g. observations; everything after the
        first ``=`` is ignored) a test prompt? Returns a bool array of shape ``[...]``."""
        tokens = np.asarray(tokens, dtype=np.int64)
        before_eq = np.cumsum(tokens == EQUALS, axis=-1) - (tokens == EQUALS) == 0
        prompt = np.where(before_eq, tokens, PAD)
        p = self.max_prompt_len
        if prompt.shape[-1] < p:
            pad = [(0, 0)] * (prompt.ndim - 1) + [(0, p - prompt.shape[-1])]
            prompt = np.pad(prompt, pad, constant_values=PAD)
        prompt = prompt[..., :p].astype(np.int32)
        flags = jax.jit(jax.vmap(self.task.is_test))(jnp.asarray(prompt.reshape(-1, p)))
        return np.asarray(flags, bool).reshape(prompt.shape[:-1])

    # ---------------------------------------------------------------- gymnax interface
    @property
    def name(self) -> str:
        return self.env_id

    @property
    def num_actions(self) -> int:
        return len(self.vocab) - 1

    @property
    def default_params(self) -> TokenEnvParams:
        return TokenEnvParams(max_steps_in_episode=self.answer_limit, split=0,
                              weights={r.name: float(r.weight) for r in self.task.rewards})

    def action_space(self, params: TokenEnvParams | None = None) -> spaces.Discrete:
        return spaces.Discrete(self.num_actions)

    def observation_space(self, params: TokenEnvParams | None = None) -> spaces.Box:
        return spaces.Box(0, len(self.vocab) - 1, (self.max_len,), jnp.int32)

    def get_obs(self, state: TokenEnvState, params=None, key=None) -> jax.Array:
        return state.tokens

    def is_terminal(self, state: TokenEnvState, params: TokenEnvParams) -> jax.Array:
        return state.done

    def is_terminated(self, state: TokenEnvState, params: TokenEnvParams) -> jax.Array:
        return state.done

    def is_truncated(self, state: TokenEnvState, params: TokenEnvParams) -> jax.Array:
        return jnp.zeros((), bool)

    def reset_env(self, key: jax.Array, params: TokenEnvParams):
        want_test = jnp.asarray(params.split) == 1

        def draw(k):
            k, sub = jax.random.split(k)
            sample = self.task.sample(sub)
            return k, sample, self.task.is_test(sample.prompt) == want_test

        def body(carry):
            k, _, _ = carry
            return draw(k)

        _, sample, _ = jax.lax.while_loop(lambda c: ~c[2], body, draw(key))
        tokens = jnp.full((self.max_len,), PAD, jnp.int32).at[:self.max_prompt_len].set(
            sample.prompt.astype(jnp.int32))
        i32 = lambda x: jnp.asarray(x, jnp.int32)  # noqa: E731
        state = TokenEnvState(time=i32(0), tokens=tokens, length=i32(sample.prompt_len),
                              prompt_len=i32(sample.prompt_len), answer=sample.answer.astype(jnp.int32),
                              answer_len=i32(sample.answer_len), done=jnp.zeros((), bool),
                              data=sample.data)
        return self.get_obs(state), state

    def _sample_of(self, state: TokenEnvState) -> Sample:
        """The reset's Sample, rebuilt from the state (the prompt is the buffer's first tokens)."""
        ar = jnp.arange(self.max_prompt_len)
        prompt = jnp.where(ar < state.prompt_len, state.tokens[:self.max_prompt_len], PAD)
        return Sample(prompt, state.prompt_len, state.answer, state.answer_len, state.data)

    def step_env(self, key: jax.Array, state: TokenEnvState, action, params: TokenEnvParams):
        token = token_of_action(jnp.clip(jnp.asarray(action, jnp.int32), 0, self.num_actions - 1))
        active = ~state.done
        tokens = jnp.where(active, state.tokens.at[state.length].set(token, mode="drop"), state.tokens)
        time = state.time + active.astype(jnp.int32)
        length = state.length + active.astype(jnp.int32)
        limit = jnp.minimum(jnp.asarray(params.max_steps_in_episode, jnp.int32), self.answer_limit)
        ended = active & ((token == EOS) | (time >= limit))

        ar = jnp.arange(self.answer_limit)
        generated = tokens[jnp.minimum(state.prompt_len + ar, self.max_len - 1)]
        generated = jnp.where(ar < time, generated, PAD)
        sample = self._sample_of(state)
        terms = [jnp.asarray(r.fn(sample, generated, time)).astype(jnp.float32) for r in self.task.rewards]
        total = terms[0] * jnp.asarray(params.weights[self.task.rewards[0].name], jnp.float32)
        for r, term in zip(self.task.rewards[1:], terms[1:]):
            total = total + term * jnp.asarray(params.weights[r.name], jnp.float32)
        reward = jnp.where(ended, total, 0.0)
        correct = jnp.asarray(self.task.correct(sample, generated, time)).astype(bool)
        state = state.replace(tokens=tokens, time=time, length=length, done=state.done | ended)
        info = {"correct": ended & correct, "reward_terms": jnp.where(ended, jnp.stack(terms), 0.0)}
        return self.get_obs(state), state, reward.astype(jnp.float32), state.done, info


# --------------------------------------------------------------------------- construction
PARAM_OPTIONS: tuple[str, ...] = ("split", "max_steps_in_episode", "reward_weights")


def make(env_id: str, options: Mapping[str, Any] | None = None) -> tuple[TokenEnv, TokenEnvParams]:
    """Build a token env and its params from ``env.params`` options: the env's own
    (:data:`purejaxrl_opt.envs.tasks.ENV_OPTIONS`) and the task's constructor options.

    Every bad key or value raises :class:`ConfigError` naming ``env.params.<key>`` (or the task),
    before compiling.
    """
    options = dict(options or {})
    task = _tasks.load(env_id, {k: v for k, v in options.items() if k not in ENV_OPTIONS})
    env = TokenEnv(task, options.get("max_len", 0), env_id=env_id)
    params = env.default_params
    if "split" in options:
        split = options["split"]
        if not _is_int(split) or split not in (0, 1):
            raise bad_option("split", split, "0 (train prompts) or 1 (test prompts)")
        params = params.replace(split=int(split))
    if "reward_weights" in options:
        weights = options["reward_weights"]
        if not isinstance(weights, Mapping) or not set(weights) <= set(env.reward_names) or not all(
                _is_real(w) for w in weights.values()):
            raise bad_option("reward_weights", weights, f"a mapping of reward names {list(env.reward_names)} "
                                                        "to finite numbers")
        params = params.replace(weights={**params.weights, **{k: float(v) for k, v in weights.items()}})
    if "max_steps_in_episode" in options:
        m = options["max_steps_in_episode"]
        if not _is_int(m) or not 1 <= m <= env.answer_limit:
            raise bad_option("max_steps_in_episode", m, f"an int in [1, {env.answer_limit}] (the longest "
                                                        f"answer incl. <eos>)")
        params = params.replace(max_steps_in_episode=int(m))
    return env, params


def reward_metric_names(env) -> tuple[str, ...]:
    """Metric names of a token env's reward functions (``reward/<name>``); () for other envs."""
    return tuple(f"reward/{name}" for name in getattr(env, "reward_names", ()))


def reward_metrics(env, reward_terms: jnp.ndarray) -> dict:
    """Mean of every reward function over the episodes: ``reward_terms [B, R]`` -> ``{reward/<name>}``."""
    means = reward_terms.mean(axis=0)
    return {name: means[i] for i, name in enumerate(reward_metric_names(env))}


def format_answers(prompts, actions, lengths, correct, limit: int,
                   vocab: tuple[str, ...] = ARITH_VOCAB) -> list[str]:
    """Host-side lines ``"<prompt> <answer>  [correct|wrong]"`` for the first ``limit`` episodes:
    ``prompts [E, L]`` token buffers, ``actions [E, T]``, ``lengths [E]`` (answer tokens generated),
    ``correct [E]``."""
    prompts, actions, lengths, correct = map(np.asarray, (prompts, actions, lengths, correct))
    return [f"{decode(prompts[i], vocab)} {decode(token_of_action(actions[i, :int(lengths[i])]), vocab)}  "
            f"[{'correct' if correct[i] else 'wrong'}]" for i in range(min(limit, len(prompts)))]
