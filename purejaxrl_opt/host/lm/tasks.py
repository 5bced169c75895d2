"""Built-in verifiable tasks for GRPO on a language model, generated offline from a seed (nothing is
downloaded), and their reward functions (TRL's shape, :mod:`purejaxrl_opt.host.lm.rewards`).

* ``countdown`` (TinyZero's task): reach ``target`` with some of ``numbers`` and ``+ - * /``, each
  number at most once. Rows ``{"prompt", "numbers", "target"}``; every target is reachable (it is the
  value of a random expression over the numbers).
* ``arithmetic``: word problems with a whole-number answer (one or two operations on small numbers).
  Rows ``{"prompt", "answer"}``.

Both ask for the answer inside ``<answer>...</answer>`` and have two rewards: ``format`` (1 when the
completion holds an answer tag) and ``correct`` (1 when the tagged answer is right: the number equals
``answer``; the expression is well formed, uses each given number at most once and equals ``target``,
checked by :func:`parse_expression`, a small parser over exact fractions; nothing is ``eval``-ed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable, Mapping

import numpy as np

ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def extract_answer(completion: str) -> str | None:
    """The text inside the last ``<answer>...</answer>`` of ``completion`` (stripped), else None."""
    found = ANSWER.findall(completion)
    return found[-1].strip() if found else None


# --------------------------------------------------------------------------- the expression parser
class ExpressionError(ValueError):
    """Not an arithmetic expression of whole numbers, + - * / and parentheses (or a division by 0)."""


_TOKEN = re.compile(r"\s*(?:(\d+)|(.))")


def _tokens(text: str) -> list:
    tokens = []
    for number, symbol in _TOKEN.findall(text):
        if number:
            tokens.append(int(number))
        elif symbol.strip():
            if symbol not in "+-*/()":
                raise ExpressionError(f"unexpected character {symbol!r}")
            tokens.append(symbol)
    return tokens


def parse_expression(text: str) -> tuple[Fraction, list[int]]:
    """``(value, numbers used)`` of an expression of non-negative integers, binary ``+ - * /`` (the usual
    precedence, left to right) and parentheses; exact (fractions). ExpressionError for anything else:
    other characters, unary signs, decimals, empty input, a division by zero."""
    if len(text) > 200:
        raise ExpressionError("expression longer than 200 characters")
    tokens = _tokens(text)
    position = 0
    numbers: list[int] = []

    def peek():
        return tokens[position] if position < len(tokens) else None

    def take():
        nonlocal position
        position += 1
        return tokens[position - 1]

    def atom() -> Fraction:
        token = peek()
        if isinstance(token, int):
            take()
            numbers.append(token)
            return Fraction(token)
        if token == "(":
            take()
            value = sum_()
            if peek() != ")":
                raise ExpressionError("unbalanced parenthesis")
            take()
            return value
        raise ExpressionError(f"expected a number or '(', found {token!r}")

    def product() -> Fraction:
        value = atom()
        while peek() in ("*", "/"):
            operator, right = take(), atom()
            if operator == "*":
                value *= right
            elif right == 0:
                raise ExpressionError("division by zero")
            else:
                value /= right
        return value

    def sum_() -> Fraction:
        value = product()
        while peek() in ("+", "-"):
            operator, right = take(), product()
            value = value + right if operator == "+" else value - right
        return value

    value = sum_()
    if position != len(tokens):
        raise ExpressionError(f"unexpected {tokens[position]!r} after a complete expression")
    return value, numbers


def countdown_check(expression: str, numbers, target) -> bool:
    """Whether ``expression`` uses each of ``numbers`` at most once (as a multiset) and equals ``target``."""
    try:
        value, used = parse_expression(expression)
    except ExpressionError:
        return False
    available = list(numbers)
    for number in used:
        if number not in available:
            return False
        available.remove(number)
    return value == target


# --------------------------------------------------------------------------- reward functions
def answer_format(prompts, completions, **columns) -> list[float]:
    """1 when the completion holds an ``<answer>...</answer>`` with something inside, else 0."""
    return [float(bool(extract_answer(c))) for c in completions]


def countdown_correct(prompts, completions, numbers, target, **columns) -> list[float]:
    """1 when the tagged expression is a valid solution (:func:`countdown_check`), else 0."""
    return [float(extract_answer(c) is not None and countdown_check(extract_answer(c), n, t))
            for c, n, t in zip(completions, numbers, target)]


def _number(text: str) -> Fraction | None:
    match = re.fullmatch(r"\s*\$?\s*(-?\d[\d,]*(?:\.\d+)?)\s*\.?\s*", text)
    return Fraction(match.group(1).replace(",", "")) if match else None


def number_correct(prompts, completions, answer, **columns) -> list[float]:
    """1 when the tagged answer is a number (commas and a leading ``$`` allowed) equal to ``answer``."""
    out = []
    for completion, expected in zip(completions, answer):
        tagged = extract_answer(completion)
        value = _number(tagged) if tagged is not None else None
        out.append(float(value is not None and value == Fraction(str(expected))))
    return out


# --------------------------------------------------------------------------- generators
COUNTDOWN_PROMPT = ("Using the numbers {numbers}, create an equation that equals {target}. You can use "
                    "+, -, * and / and each number at most once. Give the equation inside "
                    "<answer></answer> tags, for example <answer>(1 + 2) * 3</answer>.")


def _random_expression(numbers: list[int], rng: np.random.Generator) -> tuple[str, Fraction]:
    """A random expression using every one of ``numbers`` once (in the given order), and its value."""
    parts = [(str(n), Fraction(n)) for n in numbers]
    while len(parts) > 1:
        i = int(rng.integers(len(parts) - 1))
        (left, a), (right, b) = parts[i], parts[i + 1]
        operator = "+-*/"[int(rng.integers(4))]
        if operator == "/" and (b == 0 or (a / b).denominator != 1):
            operator = "+"
        value = {"+": a + b, "-": a - b, "*": a * b, "/": a / b if b else a}[operator]
        parts[i:i + 2] = [(f"({left} {operator} {right})", value)]
    return parts[0]


def countdown(num_problems: int, seed: int, num_numbers: int = 3, max_number: int = 20,
              max_target: int = 100) -> list[dict]:
    """``num_problems`` distinct Countdown problems: ``num_numbers`` numbers in ``[1, max_number]`` and
    a reachable target in ``[1, max_target]``."""
    rng = np.random.default_rng(seed)
    rows, seen = [], set()
    for _ in range(200 * num_problems):
        if len(rows) == num_problems:
            break
        numbers = [int(n) for n in rng.integers(1, max_number + 1, num_numbers)]
        expression, value = _random_expression(list(rng.permutation(numbers)), rng)
        if value.denominator != 1 or not 1 <= value <= max_target:
            continue
        problem = (tuple(numbers), int(value))
        if problem in seen:
            continue
        seen.add(problem)
        # the expression the target came from: the reference answer of the SFT warm start
        solution = expression[1:-1] if num_numbers > 1 else expression
        rows.append({"prompt": COUNTDOWN_PROMPT.format(numbers=numbers, target=int(value)),
                     "numbers": numbers, "target": int(value), "solution": solution})
    if len(rows) < num_problems:
        raise ValueError(f"only {len(rows)} distinct countdown problems of {num_numbers} numbers up to "
                         f"{max_number}; ask for fewer or widen the ranges")
    return rows


_NAMES = ("Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Goran", "Hana", "Ivan", "Jia")
_ITEMS = ("apples", "books", "coins", "marbles", "pencils", "stamps", "shells", "cards")
ARITHMETIC_SUFFIX = " Give the final number inside <answer></answer> tags, for example <answer>42</answer>."


def _word_problem(rng: np.random.Generator, max_number: int, steps: int) -> tuple[str, int]:
    name, item = _NAMES[int(rng.integers(len(_NAMES)))], _ITEMS[int(rng.integers(len(_ITEMS)))]
    total = int(rng.integers(2, max_number + 1))
    text = f"{name} has {total} {item}."
    for _ in range(steps):
        kind = int(rng.integers(3))
        if kind == 0:
            n = int(rng.integers(1, max_number + 1))
            text += f" Then {name} gets {n} more {item}."
            total += n
        elif kind == 1 and total > 1:
            n = int(rng.integers(1, total))
            text += f" Then {name} gives away {n} {item}."
            total -= n
        else:
            n = int(rng.integers(2, 5))
            text += f" Then the number of {item} {name} has becomes {n} times as large."
            total *= n
    return text + f" How many {item} does {name} have now?", total


def arithmetic(num_problems: int, seed: int, max_number: int = 20, steps: int = 1) -> list[dict]:
    """``num_problems`` distinct word problems of ``steps`` operations on numbers up to ``max_number``."""
    rng = np.random.default_rng(seed)
    rows, seen = [], set()
    for _ in range(200 * num_problems):
        if len(rows) == num_problems:
            break
        text, answer = _word_problem(rng, max_number, steps)
        if text in seen:
            continue
        seen.add(text)
        rows.append({"prompt": text + ARITHMETIC_SUFFIX, "answer": answer})
    if len(rows) < num_problems:
        raise ValueError(f"only {len(rows)} distinct arithmetic problems with max_number={max_number}, "
                         f"steps={steps}; ask for fewer or widen the range")
    return rows


@dataclass(frozen=True)
class BuiltinTask:
    generate: Callable[..., list[dict]]  # (num_problems, seed, **options) -> rows
    rewards: Mapping[str, Callable]  # the task's reward functions by name
    options: Mapping[str, type] = field(default_factory=dict)  # the generator's options and their types
    default_rewards: tuple[str, ...] = ("format", "correct")
    default_weights: tuple[float, ...] = (0.1, 1.0)
    accuracy_reward: str = "correct"  # a completion is correct when this reward is 1
    # row -> a correct completion (the SFT warm start's target), or None
    reference: Callable[[dict], str] | None = None


def tagged(text) -> str:
    return f"<answer>{text}</answer>"


TASKS: dict[str, BuiltinTask] = {
    "countdown": BuiltinTask(countdown, {"format": answer_format, "correct": countdown_correct},
                             {"num_numbers": int, "max_number": int, "max_target": int},
                             reference=lambda row: tagged(row["solution"])),
    "arithmetic": BuiltinTask(arithmetic, {"format": answer_format, "correct": number_correct},
                              {"max_number": int, "steps": int}, reference=lambda row: tagged(row["answer"])),
}
# reward functions any task may name (a JSONL file of problems with an `answer` column, say)
GENERIC_REWARDS: dict[str, Callable] = {"answer_format": answer_format, "number_correct": number_correct,
                                        "countdown_correct": countdown_correct}
