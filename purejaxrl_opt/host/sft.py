"""Supervised warm start on a token env, the run: draw the examples, train through the chunked driver
(:mod:`purejaxrl_opt.host.chunks`), evaluate and write the run dir.

The examples are ``sft.num_examples`` distinct training-split prompts (operand/string lengths in
``[sft.min_digits, sft.max_digits]``, default: the env's) with their correct answers. Training is
:func:`purejaxrl_opt.core.algos.sft.make_sft_train` (Adam, ``sft.steps`` minibatch steps, the loss
only on answer tokens). The run dir gets ``checkpoint/`` (:mod:`purejaxrl_opt.core.models.pretrained`:
the policy, and a manifest with network, vocabulary, buffer length and leaf digests),
``summary.json`` (loss; greedy accuracy on the training examples, an exact match with their reference
answers, work included where the task writes work before its answer; greedy accuracy on held-out
prompts by the task's own ``correct``), ``metrics.csv`` and ``examples.txt``. RL runs start from it
with ``init_from=<run dir>``.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from purejaxrl_opt.config.errors import ConfigError
from purejaxrl_opt.config.schema import EnvConfig, NetworkConfig
from purejaxrl_opt.core.algos.sft import SFTConfig, make_sft_train
from purejaxrl_opt.core.models.pretrained import CHECKPOINT_KIND, NETWORK_KEYS, save_checkpoint
from purejaxrl_opt.host.chunks import chunk_stops, compile_chunked, run_chunks


# --------------------------------------------------------------------------- data
def example_env_options(env_cfg: EnvConfig, cfg: SFTConfig) -> dict:
    """Env options for drawing examples: the RL env's, with the SFT digit range (same buffer)."""
    options = dict(env_cfg.params)
    if cfg.min_digits:
        options["min_digits"] = cfg.min_digits
    if cfg.max_digits:
        options["max_digits"] = cfg.max_digits
    return options


def make_dataset(env_cfg: EnvConfig, cfg: SFTConfig, seed: int):
    """``(prompts [N, L] int32, answers [N, T] actions, answer_len [N])`` of distinct training prompts.

    Prompts come from the training split of the env (with the SFT digit range); answers are the
    correct answer tokens (incl. ``<eos>``) as actions, ``T`` = the RL env's answer limit.
    """
    import jax
    import jax.numpy as jnp
    import numpy as np

    from purejaxrl_opt import envs

    _, _, rl_spec = envs.make(env_cfg.id, dict(env_cfg.params))
    options = example_env_options(env_cfg, cfg)
    options.setdefault("max_len", rl_spec.obs_shape[0])
    if options["max_len"] == 0:
        options["max_len"] = rl_spec.obs_shape[0]
    try:
        env, env_params, spec = envs.make(env_cfg.id, options)
    except ConfigError as error:
        raise ConfigError(f"sft.min_digits/max_digits do not fit the env's token buffer: {error}") from None
    if spec.obs_shape != rl_spec.obs_shape or spec.max_steps > rl_spec.max_steps:
        raise ConfigError(
            f"config keys 'sft.min_digits'/'sft.max_digits' = {cfg.min_digits}/{cfg.max_digits}: "
            f"examples need a buffer {spec.obs_shape} and {spec.max_steps} answer steps; the env "
            f"{env_cfg.id} has {rl_spec.obs_shape} and {rl_spec.max_steps}: stay within the env's digits")
    chosen: dict[bytes, int] = {}
    prompts, answers, lengths = [], [], []
    key = jax.random.PRNGKey(seed)
    reset = jax.jit(lambda keys, params: envs.reset_batch(env, params, keys))
    for _ in range(50):  # draw until num_examples distinct prompts (or the split runs out)
        key, sub = jax.random.split(key)
        _, state = reset(jax.random.split(sub, 4 * cfg.num_examples), env_params)
        tokens, answer, answer_len = (np.asarray(state.tokens), np.asarray(state.answer),
                                      np.asarray(state.answer_len))
        for i in range(tokens.shape[0]):
            row = tokens[i].tobytes()
            if row in chosen:
                continue
            chosen[row] = len(prompts)
            prompts.append(tokens[i])
            answers.append(answer[i])
            lengths.append(answer_len[i])
            if len(prompts) == cfg.num_examples:
                break
        if len(prompts) == cfg.num_examples:
            break
    if len(prompts) < cfg.num_examples:
        raise ConfigError(f"config key 'sft.num_examples' = {cfg.num_examples} is invalid: the "
                          f"training split of {env_cfg.id} with these digits has only about "
                          f"{len(prompts)} distinct prompts")
    answers = np.stack(answers)
    limit = rl_spec.max_steps
    padded = np.zeros((len(answers), limit), np.int32)  # action 0 = <eos> pads (masked anyway)
    padded[:, :answers.shape[1]] = np.maximum(answers[:, :limit] - 1, 0)
    return (jnp.asarray(np.stack(prompts), jnp.int32), jnp.asarray(padded),
            jnp.asarray(np.asarray(lengths), jnp.int32))


# --------------------------------------------------------------------------- the run
def run_sft(env_cfg: EnvConfig, net: NetworkConfig, cfg: SFTConfig, seed: int, out_dir: str | Path,
            log=print, progress: bool | None = None) -> dict:
    """Validate, train, evaluate and write the run dir; returns the summary. ``progress``: a bar of
    the Adam steps (done, steps/s, time left, the latest loss) -- None: on a terminal only."""
    import jax
    import numpy as np

    from purejaxrl_opt import envs
    from purejaxrl_opt.core.stages import rollout
    from purejaxrl_opt.core.models.distributions import Categorical
    from purejaxrl_opt.core.models.policies import make_policy
    from purejaxrl_opt.host.artifacts import write_json_atomic

    cfg.validate()
    env_cfg.validate("env")
    net.validate("network")
    env, env_params, spec = envs.make(env_cfg.id, dict(env_cfg.params))
    if spec.vocab is None:
        raise ConfigError(f"config key 'env.id' = {env_cfg.id!r} is invalid for SFT: must be a token env")
    if net.kind != "transformer":
        raise ConfigError(f"config key 'network.kind' = {net.kind!r} is invalid for SFT: must be "
                          "'transformer'")
    policy = make_policy(spec, net)
    prompts, actions, answer_len = make_dataset(env_cfg, cfg, seed)
    log_every = max(1, min(50, cfg.steps))
    if cfg.steps % log_every:
        raise ConfigError(f"config key 'sft.steps' = {cfg.steps} is invalid: must be a multiple of "
                          f"{log_every}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    log(f"sft | env {env_cfg.id} | {cfg.num_examples} examples | {cfg.steps} steps x batch "
        f"{cfg.batch_size} | device {jax.devices()[0].platform}")
    init, blocks = make_sft_train(policy, prompts, actions, answer_len, cfg, log_every)
    num_blocks = cfg.steps // log_every
    from purejaxrl_opt.host.progress import Bar, is_terminal

    show = is_terminal() if progress is None else progress
    bars = []  # made at the first report, its clock set to when training started (after compiling)
    key = jax.random.PRNGKey(seed)
    start = time.perf_counter()
    init_compiled, blocks_compiled, _ = compile_chunked(init, blocks, key)
    compile_s = time.perf_counter() - start
    start = time.perf_counter()

    def _after(carry, blocks_done, last):
        loss = float(np.asarray(carry[3]["loss"][blocks_done]))  # waits for this call only
        if not bars:
            bars.append(Bar(cfg.steps, unit="steps", desc=f"sft {env_cfg.id}", enabled=True,
                            started_at=time.time() - (time.perf_counter() - start)))
        bars[0].update_to(blocks_done * log_every, postfix=f"loss {loss:.4f}")

    try:
        (params, _, _, metrics), train_s = run_chunks(
            blocks_compiled, init_compiled(key), chunk_stops(num_blocks, min(num_blocks, 50) if show else 1),
            after=_after if show else None, start=start)
    finally:
        for bar in bars:
            bar.close()
    eval_params = envs.eval_params(spec, env_params)

    @jax.jit
    def held_out(params, key):
        return rollout.group_rollout(env, eval_params, spec, Categorical(), policy, params, None, key,
                                     cfg.eval_prompts, 1, spec.max_steps, False, greedy=True)

    batch = held_out(params, jax.random.PRNGKey(seed + 1))
    test_accuracy = float(np.asarray(batch.correct).mean())
    metrics = {k: np.asarray(v) for k, v in metrics.items()}
    meta = {"kind": CHECKPOINT_KIND, "env_id": env_cfg.id, "env_params": dict(env_cfg.params),
            "network": {k: getattr(net, k) for k in NETWORK_KEYS}, "vocab": list(spec.vocab),
            "max_len": spec.obs_shape[0], "num_actions": spec.num_actions,
            "sft": dataclasses.asdict(cfg), "seed": seed}
    save_checkpoint(out_dir / "checkpoint", params, meta)
    from purejaxrl_opt.envs.tokens import format_answers

    lines = format_answers(batch.obs[0], batch.action.T, batch.lengths, batch.correct, cfg.examples,
                           spec.vocab)
    (out_dir / "examples.txt").write_text("# held-out prompts, greedy answers\n" + "\n".join(lines) + "\n")
    with open(out_dir / "metrics.csv", "w") as f:
        f.write("step,loss,train_accuracy\n")
        for i in range(len(metrics["loss"])):
            f.write(f"{i * log_every},{metrics['loss'][i]:.6g},{metrics['train_accuracy'][i]:.6g}\n")
    summary = {"env": env_cfg.id, "examples": cfg.num_examples, "steps": cfg.steps,
               "final_loss": float(metrics["loss"][-1]),
               "train_accuracy": float(metrics["train_accuracy"][-1]),
               "eval_accuracy": test_accuracy, "eval_prompts": cfg.eval_prompts,
               "compile_seconds": compile_s, "train_seconds": train_s,
               "num_params": int(sum(np.size(x) for x in jax.tree_util.tree_leaves(params))),
               "checkpoint": str(out_dir / "checkpoint")}
    write_json_atomic(out_dir / "summary.json", summary)
    log(f"sft | compile {compile_s:.1f} s | train {train_s:.1f} s | loss {summary['final_loss']:.4f} | "
        f"train accuracy {summary['train_accuracy']:.3f} | held-out greedy accuracy {test_accuracy:.3f}")
    log(f"sft | checkpoint: {out_dir / 'checkpoint'}")
    return summary
