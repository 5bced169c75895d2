"""Token-generation environments (gymnax interface) for training a small causal transformer.

The policy emits one token per env step; the observation is the whole token buffer, so a causal
transformer reads the prompt plus everything generated so far and predicts the next token.

Design
------
* **One vocabulary** for every token env (:data:`VOCAB`, 14 tokens): ``<pad>`` (0), ``<eos>`` (1),
  digits ``0``-``9`` (tokens 2-11), ``+`` (12), ``=`` (13). Checkpoints of different token envs share
  embeddings, and a run can check its vocabulary by equality. PAD is only right-padding of the buffer
  and is never emitted: the action space is ``Discrete(len(VOCAB) - 1)`` and action ``a`` writes token
  ``a + 1`` (:func:`token_of_action` / :func:`action_of_token`).
* **Tasks** (ids in :data:`TOKEN_ENVS`): ``Addition-v0`` (prompt ``a+b=``, answer the decimal digits
  of ``a + b`` then ``<eos>``) and ``Reverse-v0`` (prompt a digit string then ``=``, answer the string
  reversed then ``<eos>``).
* **Static options** (constructor kwargs ``min_digits``, ``max_digits``, ``max_len``,
  ``test_fraction``) fix array shapes and the split; :func:`make` validates them (and the
  ``EnvParams`` fields) *before* anything is compiled, raising :class:`~purejaxrl_opt.config.ConfigError`
  naming ``env.params.<key>``.
* **EnvParams** (pytree of scalars, may be traced or vmapped): ``split`` (0 train, 1 test),
  ``format_reward`` and ``max_steps_in_episode`` (the answer limit, which the library reads as the
  episode limit; it may be lowered, never raised above the buffer's answer room).
* **Train/test split, disjoint by construction**: a prompt is a test prompt iff a fixed 32-bit hash
  (murmur3 ``fmix32`` chained over the PAD-padded prompt tokens, salted per env) is below
  ``test_fraction * 2**32``. ``reset`` draws prompts from the task's distribution and rejects those of
  the other split (``lax.while_loop``), which samples *exactly* from the task distribution conditioned
  on the split; it is jit-able and vmappable (the split may be a traced/vmapped value).
  :meth:`TokenEnv.is_test_prompt` is the same hash computed host-side in numpy, for checks. For small
  prompt spaces (<= 2**20 prompts) :func:`make` enumerates them and refuses a ``test_fraction`` that
  leaves a split empty (the rejection loop would never end).
* **Episodes**: each step writes the action's token at ``state.length``. The episode terminates
  (never truncates) when ``<eos>`` is emitted or when ``time`` (answer tokens generated) reaches the
  answer limit. The reward is paid on the final step only: 1.0 if the generated tokens equal the
  answer exactly (digits then ``<eos>``), plus ``format_reward`` if the output is well formed (at least
  one digit, only digits, then ``<eos>``). ``info["correct"]`` is true only on a final step with the
  exact answer; ``info["well_formed"]`` likewise. A state is absorbing after its end: callers of
  ``step_env`` that ignore ``done`` get the same state back, reward 0 and ``terminated`` True.
* :func:`decode` (host side) drops PAD and shows ``<eos>`` as ``$``; :func:`encode` is its inverse.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Iterator, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment, spaces

from purejaxrl_opt.config import TOKEN_ENV_IDS
from purejaxrl_opt.errors import ConfigError

# --------------------------------------------------------------------------- vocabulary
VOCAB: tuple[str, ...] = ("<pad>", "<eos>", *(str(d) for d in range(10)), "+", "=")
PAD, EOS, PLUS, EQUALS = 0, 1, 12, 13
DIGIT0 = 2  # digit d is token d + DIGIT0
NUM_ACTIONS = len(VOCAB) - 1  # PAD is never emitted
EOS_CHAR = "$"  # how decode() shows <eos>

TOKEN_ENVS: tuple[str, ...] = TOKEN_ENV_IDS


def token_of_action(action):
    """Token written by ``action`` (``action + 1``; PAD cannot be emitted). Works on ints and arrays."""
    return action + 1


def action_of_token(token):
    """Action that writes ``token`` (``token - 1``). Works on ints and arrays."""
    return token - 1


def decode(tokens) -> str:
    """Host-side: tokens -> string; PAD dropped, ``<eos>`` shown as ``$`` (e.g. ``"12+34=46$"``)."""
    chars = []
    for t in np.asarray(tokens).reshape(-1).tolist():
        if t == PAD:
            continue
        chars.append(EOS_CHAR if t == EOS else VOCAB[t])
    return "".join(chars)


_CHAR_TO_TOKEN = {c: i for i, c in enumerate(VOCAB) if len(c) == 1} | {EOS_CHAR: EOS}


def encode(text: str) -> list[int]:
    """Host-side inverse of :func:`decode` (``$`` is ``<eos>``)."""
    return [_CHAR_TO_TOKEN[c] for c in text]


# --------------------------------------------------------------------------- split hash
_M1, _M2, _GOLDEN = 0x85EBCA6B, 0xC2B2AE35, 0x9E3779B1


def _fmix32(h, xp):
    """murmur3 32-bit finaliser (a bijection of uint32), for numpy or jax.numpy arrays."""
    h = h ^ (h >> 16)
    h = h * xp.uint32(_M1)
    h = h ^ (h >> 13)
    h = h * xp.uint32(_M2)
    return h ^ (h >> 16)


def _hash_prompt(prompt, salt: int, xp):
    """Hash of PAD-padded prompt tokens ``[..., P]`` -> uint32 ``[...]`` (same bits in numpy and jnp)."""
    prompt = prompt.astype(xp.uint32)
    h = xp.full(prompt.shape[:-1], salt, dtype=xp.uint32)
    for i in range(prompt.shape[-1]):
        h = _fmix32(h * xp.uint32(_GOLDEN) + prompt[..., i] + xp.uint32(1), xp)
    return h


def _place(buf, seg, seg_len, offset):
    """Write ``seg[:seg_len]`` into ``buf`` at ``offset`` (fixed shapes; entries past seg_len dropped)."""
    ar = jnp.arange(seg.shape[0])
    idx = jnp.where(ar < seg_len, offset + ar, buf.shape[0])
    return buf.at[idx].set(seg.astype(buf.dtype), mode="drop")


# --------------------------------------------------------------------------- state and params
@struct.dataclass
class TokenEnvState(environment.EnvState):
    """``time`` (inherited): answer tokens generated so far."""

    tokens: jax.Array  # int32 [max_len]: prompt, generated tokens, PAD after
    length: jax.Array  # int32: tokens filled (prompt_len + time)
    prompt_len: jax.Array  # int32
    answer: jax.Array  # int32 [answer_limit]: correct answer incl. <eos>, PAD after
    answer_len: jax.Array  # int32 (incl. <eos>)
    done: jax.Array  # bool: the episode has ended (absorbing)


@struct.dataclass
class TokenEnvParams(environment.EnvParams):
    """``max_steps_in_episode`` (inherited): answer limit, at most ``env.answer_limit``."""

    split: int = 0  # 0 = train prompts, 1 = test prompts
    format_reward: float = 0.0  # bonus for well-formed output (digits then <eos>)


# --------------------------------------------------------------------------- validation helpers
def _bad(key: str, value: Any, allowed: str) -> ConfigError:
    return ConfigError(f"config key 'env.params.{key}' = {value!r} is invalid: must be {allowed}")


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _is_real(value) -> bool:
    return _is_int(value) or (isinstance(value, (float, np.floating)) and math.isfinite(value))


# --------------------------------------------------------------------------- base env
class TokenEnv(environment.Environment[TokenEnvState, TokenEnvParams]):
    """Base class: one token per step into a fixed buffer; subclasses define the prompts and answers."""

    ENV_ID: str = ""
    SALT: int = 0
    DEFAULT_MIN_DIGITS: int = 1
    DEFAULT_MAX_DIGITS: int = 1
    MAX_DIGITS_CAP: int = 9
    MAX_DIGITS_WHY: str = ""
    MIN_SPLIT_FRACTION = 1e-4  # rarer split: < 10**4 rejection draws per reset on average
    ENUMERATE_LIMIT = 2**20  # prompt spaces up to this size are checked for empty splits

    vocab = VOCAB

    def __init__(self, min_digits: int | None = None, max_digits: int | None = None, max_len: int = 0,
                 test_fraction: float = 0.2):
        super().__init__()
        min_digits = self.DEFAULT_MIN_DIGITS if min_digits is None else min_digits
        max_digits = self.DEFAULT_MAX_DIGITS if max_digits is None else max_digits
        if not _is_int(min_digits) or min_digits < 1:
            raise _bad("min_digits", min_digits, "an int >= 1")
        if not _is_int(max_digits) or max_digits < 1:
            raise _bad("max_digits", max_digits, "an int >= 1")
        if max_digits > self.MAX_DIGITS_CAP:
            raise _bad("max_digits", max_digits, f"<= {self.MAX_DIGITS_CAP} ({self.MAX_DIGITS_WHY})")
        if min_digits > max_digits:
            raise _bad("min_digits", min_digits, f"<= env.params.max_digits = {max_digits}")
        self.min_digits, self.max_digits = int(min_digits), int(max_digits)
        self.max_prompt_len = self._longest_prompt()
        self.answer_limit = self._longest_answer()
        needed = self.max_prompt_len + self.answer_limit
        if not _is_int(max_len) or max_len < 0:
            raise _bad("max_len", max_len, f"an int >= 0 (0 = the smallest that fits: {needed})")
        if max_len and max_len < needed:
            raise _bad("max_len", max_len, f">= {needed} (longest prompt {self.max_prompt_len} + "
                                           f"longest answer {self.answer_limit} incl. <eos>)")
        self.max_len = int(max_len) or needed
        if not _is_real(test_fraction) or not 0 < test_fraction < 1:
            raise _bad("test_fraction", test_fraction, "in (0, 1)")
        if min(test_fraction, 1 - test_fraction) < self.MIN_SPLIT_FRACTION:
            raise _bad("test_fraction", test_fraction,
                       f"in [{self.MIN_SPLIT_FRACTION}, {1 - self.MIN_SPLIT_FRACTION}] (the rarer split "
                       f"is found by rejection sampling)")
        self.test_fraction = float(test_fraction)
        self._threshold = min(int(self.test_fraction * 2**32), 2**32 - 1)
        self.num_prompts = self._num_prompts()
        if self.num_prompts <= self.ENUMERATE_LIMIT:
            self._check_splits_non_empty()

    # ---------------------------------------------------------------- subclass hooks
    def _longest_prompt(self) -> int:
        raise NotImplementedError

    def _longest_answer(self) -> int:  # incl. <eos>
        raise NotImplementedError

    def _num_prompts(self) -> int:
        raise NotImplementedError

    def prompt_strings(self) -> Iterator[str]:
        """Host side: every prompt of the task (e.g. ``"12+34="``)."""
        raise NotImplementedError

    def _sample_prompt(self, key):
        """``key -> (prompt int32 [max_prompt_len] PAD-padded, prompt_len, answer int32 [answer_limit]
        PAD-padded incl. <eos>, answer_len)``, from the task distribution (no split)."""
        raise NotImplementedError

    # ---------------------------------------------------------------- split
    def _check_splits_non_empty(self) -> None:
        seen = [False, False]
        prompts = self.prompt_strings()
        while not all(seen):
            chunk = list(itertools.islice(prompts, 4096))
            if not chunk:
                break
            buf = np.zeros((len(chunk), self.max_prompt_len), np.int32)
            for i, s in enumerate(chunk):
                t = encode(s)
                buf[i, :len(t)] = t
            test = self.is_test_prompt(buf)
            seen[1] |= bool(test.any())
            seen[0] |= bool((~test).any())
        if not all(seen):
            empty = "test" if not seen[1] else "train"
            raise _bad("test_fraction", self.test_fraction,
                       f"such that both splits are non-empty: the {empty} split of the "
                       f"{self.num_prompts} prompts of {self.ENV_ID} with "
                       f"{self.min_digits}..{self.max_digits} digits is empty")

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
        prompt = prompt[..., :p].astype(np.uint32)
        with np.errstate(over="ignore"):
            h = _hash_prompt(prompt.reshape(-1, p), self.SALT, np)
        return (h < np.uint32(self._threshold)).reshape(prompt.shape[:-1])

    def _is_test_device(self, prompt):
        return _hash_prompt(prompt, self.SALT, jnp) < jnp.uint32(self._threshold)

    # ---------------------------------------------------------------- gymnax interface
    @property
    def name(self) -> str:
        return self.ENV_ID

    @property
    def num_actions(self) -> int:
        return NUM_ACTIONS

    @property
    def default_params(self) -> TokenEnvParams:
        return TokenEnvParams(max_steps_in_episode=self.answer_limit, split=0, format_reward=0.0)

    def action_space(self, params: TokenEnvParams | None = None) -> spaces.Discrete:
        return spaces.Discrete(NUM_ACTIONS)

    def observation_space(self, params: TokenEnvParams | None = None) -> spaces.Box:
        return spaces.Box(0, len(VOCAB) - 1, (self.max_len,), jnp.int32)

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
            sample = self._sample_prompt(sub)
            return k, sample, self._is_test_device(sample[0]) == want_test

        def body(carry):
            k, _, _ = carry
            return draw(k)

        _, (prompt, prompt_len, answer, answer_len), _ = jax.lax.while_loop(
            lambda c: ~c[2], body, draw(key))
        tokens = jnp.full((self.max_len,), PAD, jnp.int32).at[:self.max_prompt_len].set(prompt)
        i32 = lambda x: jnp.asarray(x, jnp.int32)  # noqa: E731
        state = TokenEnvState(time=i32(0), tokens=tokens, length=i32(prompt_len),
                              prompt_len=i32(prompt_len), answer=answer.astype(jnp.int32),
                              answer_len=i32(answer_len), done=jnp.zeros((), bool))
        return self.get_obs(state), state

    def step_env(self, key: jax.Array, state: TokenEnvState, action, params: TokenEnvParams):
        token = token_of_action(jnp.clip(jnp.asarray(action, jnp.int32), 0, NUM_ACTIONS - 1))
        active = ~state.done
        tokens = jnp.where(active, state.tokens.at[state.length].set(token, mode="drop"), state.tokens)
        time = state.time + active.astype(jnp.int32)
        length = state.length + active.astype(jnp.int32)
        limit = jnp.minimum(jnp.asarray(params.max_steps_in_episode, jnp.int32), self.answer_limit)
        ended = active & ((token == EOS) | (time >= limit))

        ar = jnp.arange(self.answer_limit)
        generated = tokens[jnp.minimum(state.prompt_len + ar, self.max_len - 1)]
        generated = jnp.where(ar < time, generated, PAD)
        exact = jnp.all(generated == state.answer)
        is_digit = (generated >= DIGIT0) & (generated < DIGIT0 + 10)
        well_formed = (token == EOS) & (time >= 2) & jnp.all(is_digit | (ar >= time - 1))
        reward = jnp.where(ended, exact.astype(jnp.float32)
                           + well_formed * jnp.asarray(params.format_reward, jnp.float32), 0.0)
        state = state.replace(tokens=tokens, time=time, length=length, done=state.done | ended)
        info = {"correct": ended & exact, "well_formed": ended & well_formed}
        return self.get_obs(state), state, reward.astype(jnp.float32), state.done, info


# --------------------------------------------------------------------------- tasks
def _digit_tokens(value, width: int):
    """Decimal digits of ``value`` (int32, < 10**width) as tokens, most significant first, no leading
    zeros, left-aligned in ``[width]`` with PAD after; and their count (>= 1)."""
    pw = jnp.asarray([10 ** (width - 1 - i) for i in range(width)], jnp.int32)
    full = (value // pw) % 10
    count = 1 + jnp.sum(value >= pw[:-1]).astype(jnp.int32)
    ar = jnp.arange(width)
    vals = full[jnp.minimum(ar + (width - count), width - 1)]
    return jnp.where(ar < count, vals + DIGIT0, PAD).astype(jnp.int32), count


class Addition(TokenEnv):
    """``a+b=`` -> digits of ``a + b`` then ``<eos>``. Each operand: digit count uniform in
    ``[min_digits, max_digits]``, then uniform among numbers with exactly that many digits (0 has 1)."""

    ENV_ID = "Addition-v0"
    SALT = 0x41646431
    DEFAULT_MIN_DIGITS = 2
    DEFAULT_MAX_DIGITS = 2
    MAX_DIGITS_CAP = 9
    MAX_DIGITS_WHY = "a + b must fit in int32"

    def _longest_prompt(self) -> int:
        return 2 * self.max_digits + 2

    def _longest_answer(self) -> int:
        return self.max_digits + 2  # up to max_digits + 1 digits of the sum, then <eos>

    def _operands(self) -> int:
        return sum(10**n - (10 ** (n - 1) if n > 1 else 0)
                   for n in range(self.min_digits, self.max_digits + 1))

    def _num_prompts(self) -> int:
        return self._operands() ** 2

    def prompt_strings(self) -> Iterator[str]:
        nums = [v for n in range(self.min_digits, self.max_digits + 1)
                for v in range(10 ** (n - 1) if n > 1 else 0, 10**n)]
        return (f"{a}+{b}=" for a in nums for b in nums)

    def _operand(self, key):
        kn, kv = jax.random.split(key)
        pow10 = jnp.asarray([10**k for k in range(self.max_digits + 1)], jnp.int32)
        n = jax.random.randint(kn, (), self.min_digits, self.max_digits + 1)
        lo = jnp.where(n == 1, 0, pow10[n - 1])
        return jax.random.randint(kv, (), lo, pow10[n]).astype(jnp.int32)

    def _sample_prompt(self, key):
        ka, kb = jax.random.split(key)
        a, b = self._operand(ka), self._operand(kb)
        da, na = _digit_tokens(a, self.max_digits)
        db, nb = _digit_tokens(b, self.max_digits)
        ds, ns = _digit_tokens(a + b, self.max_digits + 1)
        prompt = jnp.full((self.max_prompt_len,), PAD, jnp.int32)
        prompt = _place(prompt, da, na, 0).at[na].set(PLUS)
        prompt = _place(prompt, db, nb, na + 1).at[na + nb + 1].set(EQUALS)
        answer = jnp.full((self.answer_limit,), PAD, jnp.int32)
        answer = _place(answer, ds, ns, 0).at[ns].set(EOS)
        return prompt, na + nb + 2, answer, ns + 1


class Reverse(TokenEnv):
    """``d1..dn=`` -> ``dn..d1`` then ``<eos>``; n uniform in ``[min_digits, max_digits]``, digits
    uniform (leading zeros allowed)."""

    ENV_ID = "Reverse-v0"
    SALT = 0x52657631
    DEFAULT_MIN_DIGITS = 3
    DEFAULT_MAX_DIGITS = 5
    MAX_DIGITS_CAP = 64
    MAX_DIGITS_WHY = "the prompt hash is unrolled over the prompt"

    def _longest_prompt(self) -> int:
        return self.max_digits + 1

    def _longest_answer(self) -> int:
        return self.max_digits + 1

    def _num_prompts(self) -> int:
        return sum(10**n for n in range(self.min_digits, self.max_digits + 1))

    def prompt_strings(self) -> Iterator[str]:
        return (f"{v:0{n}d}=" for n in range(self.min_digits, self.max_digits + 1) for v in range(10**n))

    def _sample_prompt(self, key):
        kn, kd = jax.random.split(key)
        d = self.max_digits
        n = jax.random.randint(kn, (), self.min_digits, d + 1).astype(jnp.int32)
        digits = jax.random.randint(kd, (d,), 0, 10).astype(jnp.int32) + DIGIT0
        ar = jnp.arange(d)
        prompt = jnp.full((self.max_prompt_len,), PAD, jnp.int32)
        prompt = _place(prompt, digits, n, 0).at[n].set(EQUALS)
        reversed_digits = digits[jnp.clip(n - 1 - ar, 0, d - 1)]
        answer = jnp.full((self.answer_limit,), PAD, jnp.int32)
        answer = _place(answer, reversed_digits, n, 0).at[n].set(EOS)
        return prompt, n + 1, answer, n + 1


_CLASSES: dict[str, type[TokenEnv]] = {"Addition-v0": Addition, "Reverse-v0": Reverse}
STATIC_OPTIONS: tuple[str, ...] = ("min_digits", "max_digits", "max_len", "test_fraction")
PARAM_OPTIONS: tuple[str, ...] = ("split", "format_reward", "max_steps_in_episode")


def make(env_id: str, options: Mapping[str, Any] | None = None) -> tuple[TokenEnv, TokenEnvParams]:
    """Build a token env and its params from ``env.params`` options (static kwargs and EnvParams fields).

    Every bad key or value raises :class:`ConfigError` naming ``env.params.<key>``, before compiling.
    """
    if env_id not in _CLASSES:
        raise ConfigError(f"config key 'env.id' = {env_id!r} is invalid: must be one of {list(TOKEN_ENVS)}")
    options = dict(options or {})
    allowed = STATIC_OPTIONS + PARAM_OPTIONS
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ConfigError(f"unknown config key 'env.params.{unknown[0]}' for {env_id}; allowed: "
                          f"{sorted(allowed)}")
    env = _CLASSES[env_id](**{k: options[k] for k in STATIC_OPTIONS if k in options})
    params = env.default_params
    if "split" in options:
        split = options["split"]
        if not _is_int(split) or split not in (0, 1):
            raise _bad("split", split, "0 (train prompts) or 1 (test prompts)")
        params = params.replace(split=int(split))
    if "format_reward" in options:
        fr = options["format_reward"]
        if not _is_real(fr):
            raise _bad("format_reward", fr, "a finite number")
        params = params.replace(format_reward=float(fr))
    if "max_steps_in_episode" in options:
        m = options["max_steps_in_episode"]
        if not _is_int(m) or not 1 <= m <= env.answer_limit:
            raise _bad("max_steps_in_episode", m, f"an int in [1, {env.answer_limit}] (the longest answer "
                                                  f"incl. <eos>)")
        params = params.replace(max_steps_in_episode=int(m))
    return env, params


def format_answers(prompts, actions, lengths, correct, limit: int) -> list[str]:
    """Host-side lines ``"<prompt> <answer>  [correct|wrong]"`` for the first ``limit`` episodes:
    ``prompts [E, L]`` token buffers, ``actions [E, T]``, ``lengths [E]`` (answer tokens generated),
    ``correct [E]``."""
    prompts, actions, lengths, correct = map(np.asarray, (prompts, actions, lengths, correct))
    return [f"{decode(prompts[i])} {decode(token_of_action(actions[i, :int(lengths[i])]))}  "
            f"[{'correct' if correct[i] else 'wrong'}]" for i in range(min(limit, len(prompts)))]
