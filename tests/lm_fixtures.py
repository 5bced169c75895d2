"""Prompt generators and reward functions named by the language-model tests as ``module:function``."""

from __future__ import annotations

CALLS = {"flaky": 0, "flaky_fails_after": 2}


def digit_prompts(count: int = 40):
    """Rows asking for a digit; the column ``wanted`` is what the seven reward looks for."""
    return [{"prompt": f"Say a digit ({i}):", "wanted": "7"} for i in range(count)]


def sevens(prompts, completions, wanted, **columns):
    """The share of a completion's characters that are the wanted one ("always answer 7")."""
    return [c.count(w) / max(len(c), 1) for c, w in zip(completions, wanted)]


def exact_seven(prompts, completions, **columns):
    return [float(c.strip() == "7") for c in completions]


def raises(prompts, completions, **columns):
    raise KeyError("no such column")


def nan_reward(prompts, completions, **columns):
    return [float("nan")] + [0.0] * (len(completions) - 1)


def short_reward(prompts, completions, **columns):
    return [0.0] * (len(completions) - 1)


def flaky(prompts, completions, **columns):
    """Fine on its first ``flaky_fails_after`` calls (a run's first held-out evaluation and update), then
    raises: a failure in the middle of a run."""
    CALLS["flaky"] += 1
    if CALLS["flaky"] > CALLS["flaky_fails_after"]:
        raise RuntimeError("reward server went away")
    return [0.0] * len(completions)


def digits(prompts, completions, **columns):
    """The share of a completion's characters that are digits: a dense signal on the tiny model (about
    one character in ten from the start)."""
    return [sum(ch.isdigit() for ch in c) / max(len(c), 1) for c in completions]
