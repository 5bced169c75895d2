"""Verifiable tasks: what a token env is made of, declared in a few lines.

A :class:`Task` is

* a **prompt sampler** ``sample(key) -> Sample`` (jittable): the prompt tokens (PAD-padded to a fixed
  length), a reference answer (for the SFT warm start and exact-match correctness; may be empty) and
  ``data``, any pytree the rewards need;
* an **answer limit** (answer tokens incl. ``<eos>``);
* one or more **reward functions** (:class:`Reward`: a name, a weight, and a jittable
  ``fn(sample, generated, length) -> float`` where ``generated`` is ``int32 [answer_limit]`` (the
  answer tokens, PAD after ``length``) and ``length`` the number of tokens generated, ``<eos>``
  included); the env pays ``sum_i weight_i * fn_i`` once, on the answer's last step, and reports every
  ``fn_i`` apart (``info["reward_terms"]``, logged as ``reward/<name>``);
* a **held-out split rule** ``is_test(prompt) -> bool`` (jittable; default: a salted 32-bit hash of
  the prompt below ``test_fraction``), so train and test prompts are disjoint by construction;
* ``correct(sample, generated, length) -> bool`` (default: exact match with the reference answer),
  what accuracy and pass@k count.

:class:`purejaxrl_opt.envs.tokens.TokenEnv` turns any task into a gymnax env; a run selects one with
``env.id=<registered name>`` (:data:`TASKS`) or ``env.id=<module>:<attribute>`` for a task class
defined outside the package (its constructor takes the ``env.params`` options that are not the env's
own, see :func:`purejaxrl_opt.envs.tokens.make`). Built-ins: ``Addition-v0``, ``Reverse-v0`` and
``Multiply-v0`` (multi-digit multiplication, optionally with its work written before the answer).
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from purejaxrl_opt.config.errors import ConfigError

# --------------------------------------------------------------------------- vocabulary
VOCAB: tuple[str, ...] = ("<pad>", "<eos>", *(str(d) for d in range(10)), "+", "=")
PAD, EOS, PLUS, EQUALS = 0, 1, 12, 13
DIGIT0 = 2  # digit d is token d + DIGIT0
# arithmetic beyond addition: the same tokens (checkpoints of one task read the others' ids alike) + '*'
ARITH_VOCAB: tuple[str, ...] = VOCAB + ("*",)
TIMES = 14
EOS_CHAR = "$"  # how decode() shows <eos>


# --------------------------------------------------------------------------- split hash
_M1, _M2, _GOLDEN = 0x85EBCA6B, 0xC2B2AE35, 0x9E3779B1


def _fmix32(h, xp):
    """murmur3 32-bit finaliser (a bijection of uint32), for numpy or jax.numpy arrays."""
    h = h ^ (h >> 16)
    h = h * xp.uint32(_M1)
    h = h ^ (h >> 13)
    h = h * xp.uint32(_M2)
    return h ^ (h >> 16)


def hash_prompt(prompt, salt: int, xp=jnp):
    """Hash of PAD-padded prompt tokens ``[..., P]`` -> uint32 ``[...]`` (same bits in numpy and jnp)."""
    prompt = prompt.astype(xp.uint32)
    h = xp.full(prompt.shape[:-1], salt, dtype=xp.uint32)
    for i in range(prompt.shape[-1]):
        h = _fmix32(h * xp.uint32(_GOLDEN) + prompt[..., i] + xp.uint32(1), xp)
    return h


# --------------------------------------------------------------------------- the API
@struct.dataclass
class Sample:
    """One prompt as drawn by :meth:`Task.sample` (fixed shapes)."""

    prompt: jax.Array  # int32 [max_prompt_len]: the prompt, PAD after prompt_len
    prompt_len: jax.Array  # int32
    answer: jax.Array  # int32 [answer_limit]: a reference answer incl. <eos>, PAD after (SFT, exact match)
    answer_len: jax.Array  # int32, incl. <eos>; 0 = no reference answer
    data: Any = ()  # whatever else the rewards need (a pytree of arrays)


@dataclass(frozen=True)
class Reward:
    """A named, weighted reward function ``fn(sample, generated, length) -> float scalar`` (jittable)."""

    name: str
    fn: Callable[[Sample, jax.Array, jax.Array], jax.Array]
    weight: float = 1.0


class Task:
    """A verifiable task. Subclass it (constructor keyword arguments are the task's options, set
    through ``env.params``) or instantiate it with the parts; :class:`TokenEnv` checks every part by
    tracing it once (``jax.eval_shape``: nothing compiled) and names the task in every error."""

    MIN_SPLIT_FRACTION = 1e-4  # rarer split: < 10**4 rejection draws per reset on average

    def __init__(self, name: str, sample: Callable[[jax.Array], Sample] | None = None,
                 answer_limit: int = 0, rewards: Sequence[Reward] = (), vocab: Sequence[str] = VOCAB,
                 test_fraction: float = 0.2, salt: int = 0, correct: Callable | None = None,
                 is_test: Callable | None = None):
        self.name = name
        if sample is not None:
            self.sample = sample
        if correct is not None:
            self.correct = correct
        if is_test is not None:
            self.is_test = is_test
        self.answer_limit = answer_limit
        self.rewards = tuple(rewards)
        self.vocab = tuple(vocab)
        self.salt = int(salt)
        if not _is_real(test_fraction) or not 0 < test_fraction < 1:
            raise bad_option("test_fraction", test_fraction, "in (0, 1)")
        if min(test_fraction, 1 - test_fraction) < self.MIN_SPLIT_FRACTION:
            raise bad_option("test_fraction", test_fraction,
                             f"in [{self.MIN_SPLIT_FRACTION}, {1 - self.MIN_SPLIT_FRACTION}] (the rarer "
                             f"split is found by rejection sampling)")
        self.test_fraction = float(test_fraction)
        self._threshold = min(int(self.test_fraction * 2**32), 2**32 - 1)

    def sample(self, key: jax.Array) -> Sample:
        raise NotImplementedError(f"task {self.name!r} defines no sample(key)")

    def correct(self, sample: Sample, generated: jax.Array, length: jax.Array) -> jax.Array:
        """Exact match with the reference answer (tokens up to and incl. ``<eos>``, PAD after)."""
        return jnp.all(generated == sample.answer)

    def is_test(self, prompt: jax.Array) -> jax.Array:
        """Held-out split rule on the PAD-padded prompt ``[max_prompt_len]``: a salted hash."""
        return hash_prompt(prompt, self.salt, jnp) < jnp.uint32(self._threshold)

    def prompt_strings(self) -> Iterator[str] | None:
        """Host side: every prompt (for the empty-split check on small prompt spaces); None = unknown."""
        return None

    @property
    def num_prompts(self) -> int | None:
        return None


# --------------------------------------------------------------------------- resolving a task by id
def load(env_id: str, options: dict) -> Task:
    """The task named ``env_id`` (a key of :data:`TASKS`, or ``module:attribute``) built with the
    task ``options``; every problem is a :class:`ConfigError` naming ``env.id`` or ``env.params.<key>``."""
    import inspect

    if env_id in TASKS:
        factory = TASKS[env_id]
    elif ":" in env_id:
        module_name, _, attr = env_id.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            raise ConfigError(f"config key 'env.id' = {env_id!r} is invalid: cannot import module "
                              f"{module_name!r} ({error})") from None
        factory = module
        for part in attr.split("."):
            factory = getattr(factory, part, None)
            if factory is None:
                raise ConfigError(f"config key 'env.id' = {env_id!r} is invalid: module {module_name!r} "
                                  f"has no attribute {attr!r}")
    else:
        raise ConfigError(f"config key 'env.id' = {env_id!r} is invalid: must be one of {sorted(TASKS)} "
                          "or 'module:TaskClass' for a task defined outside the package")
    if isinstance(factory, Task):
        if options:
            raise ConfigError(f"unknown config key 'env.params.{sorted(options)[0]}' for {env_id}: "
                              "it is a Task instance and takes no options")
        return factory
    if not callable(factory):
        raise ConfigError(f"config key 'env.id' = {env_id!r} is invalid: {factory!r} is neither a Task "
                          "nor a callable returning one")
    signature = inspect.signature(factory)
    takes_any = any(p.kind == p.VAR_KEYWORD for p in signature.parameters.values())
    allowed = [n for n, p in signature.parameters.items()
               if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    unknown = sorted(set(options) - set(allowed))
    if unknown and not takes_any:
        raise ConfigError(f"unknown config key 'env.params.{unknown[0]}' for {env_id}; allowed: "
                          f"{sorted(set(allowed) | set(ENV_OPTIONS))}")
    task = factory(**options)
    if not isinstance(task, Task):
        raise ConfigError(f"config key 'env.id' = {env_id!r} is invalid: it built a "
                          f"{type(task).__name__}, not a purejaxrl_opt.envs.tasks.Task")
    return task


# options every token env takes (purejaxrl_opt/envs/tokens.py); the others go to the task's constructor
ENV_OPTIONS: tuple[str, ...] = ("max_len", "split", "max_steps_in_episode", "reward_weights")


# --------------------------------------------------------------------------- helpers for tasks
def bad_option(key: str, value: Any, allowed: str) -> ConfigError:
    return ConfigError(f"config key 'env.params.{key}' = {value!r} is invalid: must be {allowed}")


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _is_real(value) -> bool:
    return _is_int(value) or (isinstance(value, (float, np.floating)) and math.isfinite(value))


def place(buf, seg, seg_len, offset):
    """Write ``seg[:seg_len]`` into ``buf`` at ``offset`` (fixed shapes; entries past seg_len dropped)."""
    ar = jnp.arange(seg.shape[0])
    idx = jnp.where(ar < seg_len, offset + ar, buf.shape[0])
    return buf.at[idx].set(seg.astype(buf.dtype), mode="drop")


def digit_tokens(value, width: int):
    """Decimal digits of ``value`` (int32, < 10**width) as tokens, most significant first, no leading
    zeros, left-aligned in ``[width]`` with PAD after; and their count (>= 1)."""
    pw = jnp.asarray([10 ** (width - 1 - i) for i in range(width)], jnp.int32)
    full = (value // pw) % 10
    count = 1 + jnp.sum(value >= pw[:-1]).astype(jnp.int32)
    ar = jnp.arange(width)
    vals = full[jnp.minimum(ar + (width - count), width - 1)]
    return jnp.where(ar < count, vals + DIGIT0, PAD).astype(jnp.int32), count


# reward functions shared by the digit tasks: (sample, generated [A], length) -> float32 scalar
def exact_answer(sample: Sample, generated, length):
    """1 if the answer is exactly the reference (digits then ``<eos>``), else 0."""
    return jnp.all(generated == sample.answer).astype(jnp.float32)


def well_formed_digits(sample: Sample, generated, length):
    """1 for at least one digit, only digits, then ``<eos>``; else 0 (right or wrong)."""
    ar = jnp.arange(generated.shape[0])
    is_digit = (generated >= DIGIT0) & (generated < DIGIT0 + 10)
    last = generated[jnp.clip(length - 1, 0, generated.shape[0] - 1)]
    return ((last == EOS) & (length >= 2) & jnp.all(is_digit | (ar >= length - 1))).astype(jnp.float32)


def digit_match(sample: Sample, generated, length):
    """Partial credit: the fraction of the reference's positions (``<eos>`` included) that the answer
    has right; an answer longer than the reference gets 0."""
    ar = jnp.arange(generated.shape[0])
    in_ref = ar < sample.answer_len
    hits = jnp.sum((generated == sample.answer) & in_ref)
    too_long = length > sample.answer_len
    return jnp.where(too_long, 0.0, hits / jnp.maximum(sample.answer_len, 1)).astype(jnp.float32)


def final_answer(sample: Sample, generated, length):
    """1 if what follows the last ``=`` of the answer (all of it if there is none) is exactly the final
    answer ``sample.data[0]`` (digits then ``<eos>``, ``sample.data[1]`` tokens), else 0: the work
    before it is not checked."""
    final, final_len = sample.data
    ar = jnp.arange(generated.shape[0])
    start = 1 + jnp.max(jnp.where((generated == EQUALS) & (ar < length), ar, -1))
    k = jnp.arange(final.shape[0])
    got = generated[jnp.clip(start + k, 0, generated.shape[0] - 1)]
    match = jnp.all(jnp.where(k < final_len, got == final, True))
    return (match & (length == start + final_len)).astype(jnp.float32)


def well_formed_work(sample: Sample, generated, length):
    """1 for digit groups separated by ``+``, one ``=``, then at least one digit and ``<eos>`` (the
    scratchpad's shape, right or wrong), else 0."""
    ar = jnp.arange(generated.shape[0])
    inside = ar < length - 1
    is_digit = (generated >= DIGIT0) & (generated < DIGIT0 + 10)
    is_sep = (generated == PLUS) | (generated == EQUALS)
    eq_at = jnp.max(jnp.where((generated == EQUALS) & inside, ar, -1))
    prev_digit = jnp.concatenate([jnp.zeros((1,), bool), is_digit[:-1]])
    last = generated[jnp.clip(length - 1, 0, generated.shape[0] - 1)]
    ok = (jnp.all(jnp.where(inside, is_digit | (is_sep & prev_digit), True))
          & (jnp.sum((generated == EQUALS) & inside) == 1) & (eq_at < length - 2) & (last == EOS)
          & jnp.all(jnp.where(inside & (ar > eq_at), ~(generated == PLUS), True)))
    return ok.astype(jnp.float32)


# --------------------------------------------------------------------------- built-in tasks
class DigitTask(Task):
    """Shared options of the digit tasks: operand/string digit counts in ``[min_digits, max_digits]``,
    ``format_reward`` (weight of the ``format`` reward) and ``test_fraction``."""

    ENV_ID = ""
    SALT = 0
    DEFAULT_MIN_DIGITS = 1
    DEFAULT_MAX_DIGITS = 1
    MAX_DIGITS_CAP = 9
    MAX_DIGITS_WHY = ""
    VOCAB = VOCAB

    def __init__(self, min_digits: int | None = None, max_digits: int | None = None,
                 test_fraction: float = 0.2, format_reward: float = 0.0):
        min_digits = self.DEFAULT_MIN_DIGITS if min_digits is None else min_digits
        max_digits = self.DEFAULT_MAX_DIGITS if max_digits is None else max_digits
        if not _is_int(min_digits) or min_digits < 1:
            raise bad_option("min_digits", min_digits, "an int >= 1")
        if not _is_int(max_digits) or max_digits < 1:
            raise bad_option("max_digits", max_digits, "an int >= 1")
        if max_digits > self.MAX_DIGITS_CAP:
            raise bad_option("max_digits", max_digits, f"<= {self.MAX_DIGITS_CAP} ({self.MAX_DIGITS_WHY})")
        if min_digits > max_digits:
            raise bad_option("min_digits", min_digits, f"<= env.params.max_digits = {max_digits}")
        if not _is_real(format_reward):
            raise bad_option("format_reward", format_reward, "a finite number")
        self.min_digits, self.max_digits = int(min_digits), int(max_digits)
        super().__init__(self.ENV_ID, answer_limit=self._longest_answer(), rewards=self._rewards(
            float(format_reward)), vocab=self.VOCAB, test_fraction=test_fraction, salt=self.SALT)

    def _rewards(self, format_reward: float) -> tuple[Reward, ...]:
        return (Reward("correct", exact_answer, 1.0), Reward("format", well_formed_digits, format_reward))

    def _longest_answer(self) -> int:  # incl. <eos>
        raise NotImplementedError

    def describe(self) -> str:
        return f"{self.name} with {self.min_digits}..{self.max_digits} digits"

    def _numbers(self) -> list[int]:
        return [v for n in range(self.min_digits, self.max_digits + 1)
                for v in range(10 ** (n - 1) if n > 1 else 0, 10**n)]

    def _operand(self, key):
        """Digit count uniform in ``[min_digits, max_digits]``, then uniform among the numbers with
        exactly that many digits (0 has 1)."""
        kn, kv = jax.random.split(key)
        pow10 = jnp.asarray([10**k for k in range(self.max_digits + 1)], jnp.int32)
        n = jax.random.randint(kn, (), self.min_digits, self.max_digits + 1)
        lo = jnp.where(n == 1, 0, pow10[n - 1])
        return jax.random.randint(kv, (), lo, pow10[n]).astype(jnp.int32)


class Arithmetic(DigitTask):
    """``a<op>b=`` -> the decimal digits of the result then ``<eos>``; ``answer_order`` ``msd``
    (default: most significant digit first, as written) or ``lsd`` (least significant first: each
    answer digit then follows the digits its carry comes from, which small transformers learn as an
    algorithm rather than a table; Lee et al. 2023, "Teaching arithmetic to small transformers")."""

    OP_TOKEN = PLUS
    OP_CHAR = "+"
    ANSWER_ORDERS = ("msd", "lsd")

    def __init__(self, min_digits: int | None = None, max_digits: int | None = None,
                 test_fraction: float = 0.2, format_reward: float = 0.0, answer_order: str = "msd"):
        if answer_order not in self.ANSWER_ORDERS:
            raise bad_option("answer_order", answer_order, f"one of {list(self.ANSWER_ORDERS)}")
        self.answer_order = answer_order
        super().__init__(min_digits, max_digits, test_fraction, format_reward)

    def describe(self) -> str:
        return super().describe() + (", answer least significant digit first" if self.answer_order == "lsd"
                                     else "")

    def _result_digits(self) -> int:
        raise NotImplementedError

    def _apply(self, a, b):
        raise NotImplementedError

    def _longest_answer(self) -> int:
        return self._result_digits() + 1

    @property
    def max_prompt_len(self) -> int:
        return 2 * self.max_digits + 2

    @property
    def num_prompts(self) -> int:
        operands = sum(10**n - (10 ** (n - 1) if n > 1 else 0)
                       for n in range(self.min_digits, self.max_digits + 1))
        return operands**2

    def prompt_strings(self) -> Iterator[str]:
        nums = self._numbers()
        return (f"{a}{self.OP_CHAR}{b}=" for a in nums for b in nums)

    def sample(self, key) -> Sample:
        ka, kb = jax.random.split(key)
        return self._sample_of(self._operand(ka), self._operand(kb))

    def _sample_of(self, a, b) -> Sample:
        """The prompt ``a<op>b=`` and its answer."""
        da, na = digit_tokens(a, self.max_digits)
        db, nb = digit_tokens(b, self.max_digits)
        width = self._result_digits()
        ds, ns = digit_tokens(self._apply(a, b), width)
        if self.answer_order == "lsd":
            ds = ds[jnp.clip(ns - 1 - jnp.arange(width), 0, width - 1)]  # entries past ns are dropped
        prompt = jnp.full((self.max_prompt_len,), PAD, jnp.int32)
        prompt = place(prompt, da, na, 0).at[na].set(self.OP_TOKEN)
        prompt = place(prompt, db, nb, na + 1).at[na + nb + 1].set(EQUALS)
        answer = jnp.full((self.answer_limit,), PAD, jnp.int32)
        answer = place(answer, ds, ns, 0).at[ns].set(EOS)
        return Sample(prompt, na + nb + 2, answer, ns + 1)


class Addition(Arithmetic):
    """``a+b=`` -> digits of ``a + b`` then ``<eos>``."""

    ENV_ID = "Addition-v0"
    SALT = 0x41646431
    DEFAULT_MIN_DIGITS = 2
    DEFAULT_MAX_DIGITS = 2
    MAX_DIGITS_CAP = 9
    MAX_DIGITS_WHY = "a + b must fit in int32"

    def _result_digits(self) -> int:
        return self.max_digits + 1

    def _apply(self, a, b):
        return a + b


class Multiply(Arithmetic):
    """``a*b=`` -> digits of ``a * b`` then ``<eos>`` (default: 2-digit operands, so 10..99 each).
    A carry-heavy task: every answer digit depends on all operand digits. Rewards: ``correct``
    (exact answer, weight 1), ``digits`` (fraction of the reference's positions right, weight
    ``digit_reward``, default 0) and ``format`` (weight ``format_reward``, default 0).

    ``scratchpad=True``: the answer is the work, then the product. The work is the partial products
    ``a * b_j * 10**j`` for each digit ``b_j`` of ``b`` (weight ``10**j``), each at a fixed width of
    ``max_digits + 1 + j`` digits with leading zeros, joined by ``+``; then ``=``, the product and
    ``<eos>``, every number in ``answer_order``. E.g. ``78*32=`` with ``lsd``:
    ``651+0432=6942<eos>`` (156 + 2340 = 2496). Only what follows the last ``=`` is checked
    (:func:`final_answer`: ``correct``, accuracy and pass@k), as a verifier of a chain of thought
    would; ``format`` is :func:`well_formed_work` and ``digits`` credits the work's positions too.
    The prompts, and so the held-out split, are the plain task's."""

    ENV_ID = "Multiply-v0"
    SALT = 0x4D756C31
    DEFAULT_MIN_DIGITS = 2
    DEFAULT_MAX_DIGITS = 2
    MAX_DIGITS_CAP = 4
    MAX_DIGITS_WHY = "a * b must fit in int32"
    VOCAB = ARITH_VOCAB
    OP_TOKEN = TIMES
    OP_CHAR = "*"

    def __init__(self, min_digits: int | None = None, max_digits: int | None = None,
                 test_fraction: float = 0.2, format_reward: float = 0.0, digit_reward: float = 0.0,
                 answer_order: str = "msd", scratchpad: bool = False):
        if not _is_real(digit_reward):
            raise bad_option("digit_reward", digit_reward, "a finite number")
        if not isinstance(scratchpad, (bool, np.bool_)):
            raise bad_option("scratchpad", scratchpad, "true or false")
        self._digit_reward = float(digit_reward)
        self.scratchpad = bool(scratchpad)
        super().__init__(min_digits, max_digits, test_fraction, format_reward, answer_order)

    def describe(self) -> str:
        return super().describe() + (", partial products first" if self.scratchpad else "")

    def _partial_widths(self) -> list[int]:
        """Digits of partial product j, ``a * b_j * 10**j`` (b_j: b's digit of weight 10**j), written
        at a fixed width with leading zeros."""
        return [self.max_digits + 1 + j for j in range(self.max_digits)]

    def _longest_answer(self) -> int:
        if not self.scratchpad:
            return super()._longest_answer()
        # partial products, each followed by '+' (the last by '='), then the product and <eos>
        return sum(w + 1 for w in self._partial_widths()) + self._result_digits() + 1

    def _rewards(self, format_reward: float) -> tuple[Reward, ...]:
        if self.scratchpad:  # correctness is the final answer's; `digits` also credits the work
            return (Reward("correct", final_answer, 1.0), Reward("digits", digit_match, self._digit_reward),
                    Reward("format", well_formed_work, format_reward))
        return (Reward("correct", exact_answer, 1.0), Reward("digits", digit_match, self._digit_reward),
                Reward("format", well_formed_digits, format_reward))

    def correct(self, sample: Sample, generated, length):
        if self.scratchpad:
            return final_answer(sample, generated, length) > 0
        return super().correct(sample, generated, length)

    def _sample_of(self, a, b) -> Sample:
        plain = super()._sample_of(a, b)
        if not self.scratchpad:
            return plain
        # the work: a * b_j * 10**j for each digit b_j of b (as many as b has), '+' between, '=' after
        nb = 1 + jnp.sum(b >= jnp.asarray([10**j for j in range(1, self.max_digits)], jnp.int32))
        buf = jnp.full((self.answer_limit,), PAD, jnp.int32)
        offset = jnp.zeros((), jnp.int32)
        for j, width in enumerate(self._partial_widths()):
            part = a * ((b // 10**j) % 10) * 10**j
            digits = (part // jnp.asarray([10**k for k in range(width)], jnp.int32)) % 10 + DIGIT0  # lsd
            if self.answer_order == "msd":
                digits = digits[::-1]
            used = j < nb
            buf = place(buf, digits, jnp.where(used, width, 0), offset)
            buf = buf.at[jnp.where(used, offset + width, self.answer_limit)].set(
                jnp.where(j == nb - 1, EQUALS, PLUS), mode="drop")
            offset = offset + jnp.where(used, width + 1, 0)
        answer = place(buf, plain.answer, plain.answer_len, offset)
        final = plain.answer[:self._result_digits() + 1]
        return Sample(plain.prompt, plain.prompt_len, answer, offset + plain.answer_len,
                      (final, plain.answer_len))

    def _result_digits(self) -> int:
        return 2 * self.max_digits

    def _apply(self, a, b):
        return a * b


class Reverse(DigitTask):
    """``d1..dn=`` -> ``dn..d1`` then ``<eos>``; n uniform in ``[min_digits, max_digits]``, digits
    uniform (leading zeros allowed)."""

    ENV_ID = "Reverse-v0"
    SALT = 0x52657631
    DEFAULT_MIN_DIGITS = 3
    DEFAULT_MAX_DIGITS = 5
    MAX_DIGITS_CAP = 64
    MAX_DIGITS_WHY = "the prompt hash is unrolled over the prompt"

    def _longest_answer(self) -> int:
        return self.max_digits + 1

    @property
    def max_prompt_len(self) -> int:
        return self.max_digits + 1

    @property
    def num_prompts(self) -> int:
        return sum(10**n for n in range(self.min_digits, self.max_digits + 1))

    def prompt_strings(self) -> Iterator[str]:
        return (f"{v:0{n}d}=" for n in range(self.min_digits, self.max_digits + 1) for v in range(10**n))

    def sample(self, key) -> Sample:
        kn, kd = jax.random.split(key)
        d = self.max_digits
        n = jax.random.randint(kn, (), self.min_digits, d + 1).astype(jnp.int32)
        digits = jax.random.randint(kd, (d,), 0, 10).astype(jnp.int32) + DIGIT0
        ar = jnp.arange(d)
        prompt = jnp.full((self.max_prompt_len,), PAD, jnp.int32)
        prompt = place(prompt, digits, n, 0).at[n].set(EQUALS)
        reversed_digits = digits[jnp.clip(n - 1 - ar, 0, d - 1)]
        answer = jnp.full((self.answer_limit,), PAD, jnp.int32)
        answer = place(answer, reversed_digits, n, 0).at[n].set(EOS)
        return Sample(prompt, n + 1, answer, n + 1)


TASKS: dict[str, Callable[..., Task]] = {"Addition-v0": Addition, "Reverse-v0": Reverse,
                                         "Multiply-v0": Multiply}
