"""Prompt data of a language-model run: rows from a JSONL file, a Python generator or a built-in task
(:mod:`purejaxrl_opt.host.lm.tasks`), a seeded train / held-out split, and the prompts as token ids.

A row is a dict with a ``prompt`` (a string) or a chat ``messages`` list (``[{"role", "content"}, ...]``,
the conversation so far); every other key is a *column*, handed to the reward functions
(:mod:`purejaxrl_opt.host.lm.rewards`). A task is named by ``env.id``:

* ``lm/countdown``, ``lm/arithmetic``: built-in, generated from ``env.params.seed``;
* ``lm/prompts``: ``env.params.path`` (a JSONL file, one row per line) or ``env.params.generator``
  (``module:function``, called with ``env.params.generator_args`` and returning an iterable of rows).

Every problem with the data (a missing file, a line that is not JSON, a row without a prompt, a split
that leaves no training prompt) is a ConfigError naming the file and line or the key, raised before
anything is compiled.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from purejaxrl_opt.config.errors import ConfigError
from purejaxrl_opt.host.lm import rewards as reward_lib
from purejaxrl_opt.host.lm import tasks

PREFIX = "lm/"
TASK_IDS = tuple(PREFIX + name for name in (*tasks.TASKS, "prompts"))
CHAT_MODES = ("auto", "true", "false")
# env.params keys of every task, with their defaults
COMMON_OPTIONS: dict[str, Any] = {
    "seed": 0,  # generation (built-in tasks) and train / held-out split
    "num_eval": 64,  # held-out prompts, split off before training
    "chat": "auto",  # apply the chat template: auto (when the model has one) | true | false
    "system_prompt": None,  # a system turn before each prompt (chat only); null = the template's own
    "rewards": None,  # reward names (the task's or module:function); null = the task's defaults
    "reward_weights": None,  # one weight per reward; null = the task's defaults (1 each for lm/prompts)
    "accuracy_reward": None,  # held-out accuracy = share of prompts where this reward is 1
}
BUILTIN_OPTIONS = {"num_train": 1000}
PROMPTS_OPTIONS = {"path": None, "generator": None, "generator_args": {}}


@dataclass(frozen=True)
class TaskData:
    """A task ready to train on: the split rows, the rewards and how prompts are rendered."""

    name: str
    train: list[dict]
    held_out: list[dict]
    rewards: tuple[reward_lib.Reward, ...]
    accuracy_reward: str | None
    chat: str  # one of CHAT_MODES
    system_prompt: str | None
    seed: int  # of the generation, the split and the order of training prompts
    # row -> its reference completion (a built-in task's correct answer; lm/prompts: the row's
    # `completion` column), what the SFT warm start trains on
    reference: Callable[[dict], str] | None = None


def is_lm_task(env_id: Any) -> bool:
    return isinstance(env_id, str) and env_id.startswith(PREFIX)


# --------------------------------------------------------------------------- rows
def check_row(row: Any, where: str) -> dict:
    """``row`` if it is a dict with exactly one of ``prompt`` (non-empty string) / ``messages`` (a
    non-empty list of ``{"role", "content"}`` dicts); ConfigError naming ``where`` otherwise."""
    if not isinstance(row, dict):
        raise ConfigError(f"{where}: a row must be an object, got {type(row).__name__}")
    if ("prompt" in row) == ("messages" in row):
        raise ConfigError(f"{where}: a row needs exactly one of 'prompt' and 'messages' (has "
                          f"{sorted(row)})")
    if "prompt" in row and (not isinstance(row["prompt"], str) or not row["prompt"]):
        raise ConfigError(f"{where}: 'prompt' must be a non-empty string")
    if "messages" in row:
        messages = row["messages"]
        if not isinstance(messages, list) or not messages or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                for m in messages):
            raise ConfigError(f"{where}: 'messages' must be a non-empty list of "
                              "{'role': str, 'content': str} objects")
    return row


def read_jsonl(path: str | Path) -> list[dict]:
    """The rows of a JSONL file (blank lines skipped), each checked by :func:`check_row`."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config key 'env.params.path' = {str(path)!r}: no such file")
    rows = []
    with path.open() as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise ConfigError(f"{path}:{number}: not valid JSON ({error.msg})") from None
            rows.append(check_row(row, f"{path}:{number}"))
    if not rows:
        raise ConfigError(f"{path}: no rows")
    return rows


def from_generator(spec: str, kwargs: Mapping[str, Any]) -> list[dict]:
    """The rows of ``module:function`` called with ``kwargs``, each checked by :func:`check_row`."""
    key = "env.params.generator"
    module_name, _, attribute = spec.partition(":") if isinstance(spec, str) else ("", "", "")
    if not module_name or not attribute:
        raise ConfigError(f"config key '{key}' = {spec!r} is invalid: must be 'module:function'")
    try:
        fn = getattr(importlib.import_module(module_name), attribute, None)
    except ImportError as error:
        raise ConfigError(f"config key '{key}' = {spec!r}: cannot import {module_name!r} ({error})") from None
    if not callable(fn):
        raise ConfigError(f"config key '{key}' = {spec!r}: {module_name} has no function {attribute!r}")
    try:
        rows = list(fn(**dict(kwargs)))
    except Exception as error:  # noqa: BLE001 -- user code, named
        raise ConfigError(f"config key '{key}' = {spec!r}: the generator raised "
                          f"{type(error).__name__}: {error}") from error
    if not rows:
        raise ConfigError(f"config key '{key}' = {spec!r}: the generator gave no rows")
    return [check_row(row, f"{spec} row {i}") for i, row in enumerate(rows)]


def split(rows: Sequence[dict], num_eval: int, seed: int) -> tuple[list[dict], list[dict]]:
    """``(train, held_out)``: a permutation of ``rows`` drawn from ``seed``, its first ``num_eval`` rows
    held out. The same rows and seed give the same split."""
    if not 1 <= num_eval < len(rows):
        raise ConfigError(f"config key 'env.params.num_eval' = {num_eval} is invalid: must be in "
                          f"[1, {len(rows) - 1}] ({len(rows)} rows; at least one stays for training)")
    order = np.random.default_rng(seed).permutation(len(rows))
    return [rows[i] for i in order[num_eval:]], [rows[i] for i in order[:num_eval]]


def prompts_and_columns(rows: Sequence[dict], repeat: int = 1) -> tuple[list, dict[str, list]]:
    """Each row's prompt (``prompt`` or ``messages``) and the columns (every other key; a row without
    a key gives None), every entry repeated ``repeat`` times in a row (a group's completions)."""
    names = sorted({k for row in rows for k in row} - {"prompt", "messages"})
    prompts = [row.get("prompt", row.get("messages")) for row in rows for _ in range(repeat)]
    return prompts, {name: [row.get(name) for row in rows for _ in range(repeat)] for name in names}


# --------------------------------------------------------------------------- token ids
def use_chat(mode: str, tokenizer) -> bool:
    """Whether prompts go through the chat template (``mode`` auto: when the model has one)."""
    has_template = bool(getattr(tokenizer, "chat_template", None))
    if mode == "true" and not has_template:
        raise ConfigError("config key 'env.params.chat' = true is invalid: this model has no chat template")
    return has_template if mode == "auto" else mode == "true"


def encode(rows: Sequence[dict], tokenizer, chat: bool, system_prompt: str | None = None) -> list[list[int]]:
    """Prompt token ids of each row: with ``chat``, the template rendered for the row's messages (or
    one user turn of its prompt), after a system turn when ``system_prompt`` is given, with the
    assistant prompt; without, the prompt text encoded (tokenizer.json's special tokens added)."""
    out = []
    for i, row in enumerate(rows):
        if chat:
            messages = row.get("messages") or [{"role": "user", "content": row["prompt"]}]
            if system_prompt is not None and messages[0]["role"] != "system":
                messages = [{"role": "system", "content": system_prompt}] + list(messages)
            out.append(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True))
        elif "messages" in row:
            raise ConfigError(f"row {i} has chat 'messages' but env.params.chat is off (or the model has "
                              "no chat template): give a 'prompt' string or use a chat model")
        else:
            out.append(tokenizer.encode(row["prompt"]))
    return out


# --------------------------------------------------------------------------- a task from the config
def _options(params: Mapping[str, Any], allowed: Mapping[str, Any], env_id: str) -> dict:
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ConfigError(f"unknown config key 'env.params.{unknown[0]}' for {env_id}; allowed: "
                          f"{sorted(allowed)}")
    return {**allowed, **params}


def _int(options: Mapping, key: str, low: int = 0) -> int:
    value = options[key]
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ConfigError(f"config key 'env.params.{key}' = {value!r} is invalid: must be an int >= {low}")
    return value


def load_task(env_id: str, params: Mapping[str, Any]) -> TaskData:
    """The task named ``env_id`` (one of :data:`TASK_IDS`) with its ``env.params``, split and with its
    rewards resolved; every bad key is a ConfigError naming ``env.params.<key>``."""
    if env_id not in TASK_IDS:
        raise ConfigError(f"config key 'env.id' = {env_id!r} is invalid: language-model tasks are "
                          f"{list(TASK_IDS)}")
    name = env_id[len(PREFIX):]
    builtin = tasks.TASKS.get(name)
    extra = ({**BUILTIN_OPTIONS, **{k: None for k in builtin.options}} if builtin is not None
             else PROMPTS_OPTIONS)
    options = _options(params, {**COMMON_OPTIONS, **extra}, env_id)
    seed, num_eval = _int(options, "seed"), _int(options, "num_eval", 1)
    if options["chat"] not in CHAT_MODES and options["chat"] not in (True, False):
        raise ConfigError(f"config key 'env.params.chat' = {options['chat']!r} is invalid: must be one "
                          f"of {list(CHAT_MODES)}")
    chat = str(options["chat"]).lower()
    system_prompt = options["system_prompt"]
    if system_prompt is not None and not isinstance(system_prompt, str):
        raise ConfigError(f"config key 'env.params.system_prompt' = {system_prompt!r} is invalid: must be "
                          "a string or null")
    if builtin is not None:
        generator_args = {k: options[k] for k in builtin.options if options[k] is not None}
        for key, kind in builtin.options.items():
            if key in generator_args and (not isinstance(generator_args[key], kind)
                                          or isinstance(generator_args[key], bool)
                                          or generator_args[key] < 1):
                raise ConfigError(f"config key 'env.params.{key}' = {generator_args[key]!r} is invalid: "
                                  f"must be an int >= 1")
        num_train = _int(options, "num_train", 1)
        try:
            rows = builtin.generate(num_train + num_eval, seed, **generator_args)
        except ValueError as error:
            raise ConfigError(f"{env_id}: {error} (env.params.num_train + num_eval = "
                              f"{num_train + num_eval})") from None
        builtins = {**tasks.GENERIC_REWARDS, **builtin.rewards}
        default_specs, default_weights = builtin.default_rewards, builtin.default_weights
        accuracy = options["accuracy_reward"] or builtin.accuracy_reward
    else:
        path, generator = options["path"], options["generator"]
        if (path is None) == (generator is None):
            raise ConfigError(f"{env_id} needs exactly one of env.params.path (a JSONL file) and "
                              "env.params.generator ('module:function')")
        if not isinstance(options["generator_args"], Mapping):
            raise ConfigError(f"config key 'env.params.generator_args' = {options['generator_args']!r} "
                              "is invalid: must be a mapping of keyword arguments")
        rows = read_jsonl(path) if path is not None else from_generator(generator, options["generator_args"])
        builtins = dict(tasks.GENERIC_REWARDS)
        default_specs, default_weights = None, None
        accuracy = options["accuracy_reward"]
        if options["rewards"] is None:
            raise ConfigError(f"config key 'env.params.rewards' is missing for {env_id}: name the reward "
                              f"functions ('module:function', or built-in {sorted(builtins)})")
    specs = list(options["rewards"]) if options["rewards"] is not None else list(default_specs)
    weights = options["reward_weights"]
    if weights is None and options["rewards"] is None:
        weights = default_weights
    rewards = reward_lib.make_rewards(specs, weights, builtins)
    if accuracy is not None and accuracy not in {r.name for r in rewards}:
        raise ConfigError(f"config key 'env.params.accuracy_reward' = {accuracy!r} is invalid: must be one "
                          f"of the run's rewards {[r.name for r in rewards]}")
    train, held_out = split(rows, num_eval, seed)
    reference = builtin.reference if builtin is not None else _completion_column
    return TaskData(name, train, held_out, rewards, accuracy, chat, system_prompt, seed, reference)


def _completion_column(row: dict) -> str:
    completion = row.get("completion")
    if not isinstance(completion, str) or not completion:
        raise ConfigError(f"a row of lm/prompts has no reference answer for SFT: it needs a 'completion' "
                          f"string (row keys: {sorted(row)})")
    return completion


def train_rows(task: TaskData, update: int, num_prompts: int) -> list[dict]:
    """The ``num_prompts`` training rows of update ``update``: passes over the training rows, each in the
    order of a permutation drawn from ``(task.seed, pass)``, so that a resumed run draws the same rows."""
    n = len(task.train)
    orders: dict[int, np.ndarray] = {}
    rows = []
    for index in range(update * num_prompts, (update + 1) * num_prompts):
        epoch, position = divmod(index, n)
        if epoch not in orders:
            orders[epoch] = np.random.default_rng([task.seed, epoch]).permutation(n)
        rows.append(task.train[orders[epoch][position]])
    return rows
