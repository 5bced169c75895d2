"""Language-model tasks, prompt data and reward functions (purejaxrl_opt/host/lm/tasks.py, data.py,
rewards.py): hand-made cases, an independent solver for Countdown and a re-reading of the word
problems. Plain Python: nothing is compiled."""

from __future__ import annotations

import itertools
import json
import re
from fractions import Fraction

import numpy as np
import pytest

from purejaxrl_opt.config.errors import ConfigError
from purejaxrl_opt.host.lm import data, rewards, tasks
from purejaxrl_opt.host.lm.tasks import ExpressionError, countdown_check, parse_expression


@pytest.mark.parametrize("text,value,numbers", [
    ("(1 + 2) * 3", 9, [1, 2, 3]),
    ("2 + 3 * 4", 14, [2, 3, 4]),
    ("2 * 3 + 4", 10, [2, 3, 4]),
    ("20 - 4 - 6", 10, [20, 4, 6]),  # left to right
    ("8 / 3", Fraction(8, 3), [8, 3]),
    ("((7))", 7, [7]),
    ("12/(5-3)*4", 24, [12, 5, 3, 4]),
])
def test_parser_by_hand(text, value, numbers):
    assert parse_expression(text) == (value, numbers)


@pytest.mark.parametrize("text", ["", "2 ** 3", "-3 + 5", "3.5 + 1", "(1 + 2", "1 + 2)", "4 / (2 - 2)",
                                  "__import__('os').system('x')", "1 2", "abs(3)", "1" * 250])
def test_parser_refuses(text):
    with pytest.raises(ExpressionError):
        parse_expression(text)


def test_countdown_check_numbers_at_most_once():
    assert countdown_check("3 + 5", [3, 5, 7], 8)
    assert countdown_check("5 + 3", [3, 5, 7], 8)  # any order, a subset
    assert not countdown_check("3 + 3 + 2", [3, 5, 7], 8)  # 3 twice, 2 not given
    assert countdown_check("3 + 3 + 2", [3, 3, 2], 8)  # a repeated number given twice
    assert not countdown_check("7 + 1", [3, 5, 7], 8)
    assert not countdown_check("3 + 5", [3, 5, 7], 9)
    assert not countdown_check("3 +", [3, 5, 7], 8)


def test_reward_functions_by_hand():
    completions = ["I think <answer>(3 + 5) * 2</answer>", "<answer>3+5*2</answer>", "16", "<answer></answer>",
                   "<answer>1</answer> then <answer>16</answer>"]
    numbers, target = [[3, 5, 2]] * 5, [16] * 5
    assert tasks.answer_format(None, completions) == [1.0, 1.0, 0.0, 0.0, 1.0]
    assert tasks.countdown_correct(None, completions, numbers=numbers, target=target) == [1.0, 0.0, 0.0, 0.0, 0.0]
    answers = ["<answer>1,234</answer>", "<answer> $12. </answer>", "<answer>5.0</answer>", "<answer>5 apples</answer>",
               "<answer>-3</answer>"]
    assert tasks.number_correct(None, answers, answer=[1234, 12, 5, 5, -3]) == [1.0, 1.0, 1.0, 0.0, 1.0]


def _solvable(numbers, target) -> bool:
    """Brute force over every subset, order and operator tree (an independent solver)."""
    def values(nums):
        if len(nums) == 1:
            yield Fraction(nums[0])
            return
        for split in range(1, len(nums)):
            for a in values(nums[:split]):
                for b in values(nums[split:]):
                    yield from (a + b, a - b, a * b)
                    if b:
                        yield a / b
    return any(v == target for r in range(1, len(numbers) + 1)
               for subset in itertools.permutations(numbers, r) for v in values(list(subset)))


def test_countdown_problems_are_reachable_distinct_and_seeded():
    rows = tasks.countdown(40, seed=3, num_numbers=3, max_number=12)
    assert all(_solvable(r["numbers"], r["target"]) for r in rows)
    assert len({(tuple(r["numbers"]), r["target"]) for r in rows}) == 40
    assert all(str(r["numbers"]) in r["prompt"] and str(r["target"]) in r["prompt"] for r in rows)
    assert rows == tasks.countdown(40, seed=3, num_numbers=3, max_number=12)
    assert rows != tasks.countdown(40, seed=4, num_numbers=3, max_number=12)


def test_word_problem_answers_recomputed_from_the_text():
    for row in tasks.arithmetic(60, seed=1, steps=2):
        total = int(re.search(r"has (\d+)", row["prompt"]).group(1))
        for kind, n in re.findall(r"(gets|gives away|becomes) (\d+)", row["prompt"]):
            total = {"gets": total + int(n), "gives away": total - int(n), "becomes": total * int(n)}[kind]
        assert total == row["answer"] and total > 0


def test_split_is_seeded_disjoint_and_train_rows_cover_each_pass():
    rows = [{"prompt": f"p{i}"} for i in range(20)]
    train, held = data.split(rows, 5, seed=7)
    assert (train, held) == data.split(rows, 5, seed=7)
    assert len(held) == 5 and {r["prompt"] for r in train} | {r["prompt"] for r in held} == {f"p{i}" for i in range(20)}
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in held}
    task = data.TaskData("t", train, held, (), None, "auto", None, seed=7)
    first_pass = [r["prompt"] for u in range(5) for r in data.train_rows(task, u, 3)]
    assert sorted(first_pass) == sorted(r["prompt"] for r in train)  # 15 rows = one pass
    assert data.train_rows(task, 6, 3) == data.train_rows(task, 6, 3)
    with pytest.raises(ConfigError, match=r"env\.params\.num_eval"):
        data.split(rows, 20, seed=0)


def test_jsonl_rows_columns_and_errors(tmp_path):
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"prompt": "2+2?", "answer": 4}) + "\n\n"
                    + json.dumps({"messages": [{"role": "user", "content": "3+3?"}], "answer": 6}) + "\n")
    rows = data.read_jsonl(good)
    prompts, columns = data.prompts_and_columns(rows, repeat=2)
    messages = [{"role": "user", "content": "3+3?"}]
    assert prompts == ["2+2?", "2+2?", messages, messages]
    assert columns == {"answer": [4, 4, 6, 6]}
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "ok"}) + "\n{not json\n")
    with pytest.raises(ConfigError, match=r"bad\.jsonl:2: not valid JSON"):
        data.read_jsonl(bad)
    bad.write_text(json.dumps({"question": "no prompt"}) + "\n")
    with pytest.raises(ConfigError, match=r"bad\.jsonl:1: a row needs exactly one of 'prompt' and 'messages'"):
        data.read_jsonl(bad)
    bad.write_text(json.dumps({"messages": [{"role": "user"}]}) + "\n")
    with pytest.raises(ConfigError, match="'messages' must be"):
        data.read_jsonl(bad)
    with pytest.raises(ConfigError, match="no such file"):
        data.read_jsonl(tmp_path / "missing.jsonl")


def test_load_task_generator_rewards_and_bad_keys():
    task = data.load_task("lm/prompts", {"generator": "tests.lm_fixtures:digit_prompts",
                                         "generator_args": {"count": 12}, "num_eval": 4,
                                         "rewards": ["tests.lm_fixtures:sevens", "answer_format"],
                                         "reward_weights": [1.0, 0.5]})
    assert len(task.train) == 8 and len(task.held_out) == 4
    assert [(r.name, r.weight) for r in task.rewards] == [("sevens", 1.0), ("answer_format", 0.5)]
    with pytest.raises(ConfigError, match=r"env\.params\.num_problems"):
        data.load_task("lm/countdown", {"num_problems": 3})
    with pytest.raises(ConfigError, match=r"env\.params\.reward_weights"):
        data.load_task("lm/countdown", {"rewards": ["format", "correct"], "reward_weights": [1.0]})
    with pytest.raises(ConfigError, match=r"env\.params\.rewards\[0\].*'nope'"):
        data.load_task("lm/countdown", {"rewards": ["nope"]})
    with pytest.raises(ConfigError, match=r"env\.params\.generator.*raised"):
        data.load_task("lm/prompts", {"generator": "tests.lm_fixtures:raises", "rewards": ["answer_format"]})
    with pytest.raises(ConfigError, match=r"env\.params\.accuracy_reward"):
        data.load_task("lm/countdown", {"accuracy_reward": "sevens"})
    with pytest.raises(ConfigError, match=r"env\.id.*lm/countdown"):
        data.load_task("lm/chess", {})


def test_rewards_weighted_logged_apart_and_none_skipped():
    def half(prompts, completions, **columns):
        return [0.5 if c else None for c in completions]

    reward_set = (rewards.Reward("half", half, 2.0), rewards.Reward("length", lambda p, c, **k: [len(x) for x in c], 1.0))
    total, per_name = rewards.compute(reward_set, ["a", "b", "c"], ["xy", "", "z"], {"col": [1, 2, 3]})
    np.testing.assert_allclose(total, [2 * 0.5 + 2, 0 + 0, 2 * 0.5 + 1])
    assert rewards.means(per_name) == {"reward/half": 0.5, "reward/length": 1.0}


@pytest.mark.parametrize("fn,message", [
    ("raises", r"reward function 'raises' raised KeyError"),
    ("nan_reward", r"reward function 'nan_reward' returned nan for completion 0"),
    ("short_reward", r"reward function 'short_reward' returned 2 values for 3 completions"),
])
def test_reward_function_errors_name_the_function(fn, message):
    from tests import lm_fixtures

    reward_set = (rewards.Reward(fn, getattr(lm_fixtures, fn)),)
    with pytest.raises(rewards.RewardError, match=message):
        rewards.compute(reward_set, ["p"] * 3, ["a", "b", "c"], {})
    with pytest.raises(rewards.RewardError, match="'text' .*not a list"):
        rewards.compute((rewards.Reward("text", lambda p, c, **k: "1.0"),), ["p"], ["a"], {})
