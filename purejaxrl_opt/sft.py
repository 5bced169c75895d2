"""Supervised warm start on a token env: teacher-forced cross-entropy on a limited set of correct answers.

    python -m purejaxrl_opt.sft env=Addition-v0 sft.num_examples=256 sft.steps=600
    python -m purejaxrl_opt.train algo=grpo env=Addition-v0 init_from=<that run dir>

The examples are ``sft.num_examples`` distinct training-split prompts (operand/string lengths in
``[sft.min_digits, sft.max_digits]``, default: the env's) with their correct answers. Training is one
jitted function (Adam, ``sft.steps`` minibatch steps, the loss only on answer tokens). The run dir gets
``checkpoint/`` (orbax, the training checkpoints' format: the policy, and a manifest with network,
vocabulary, buffer length and leaf digests), ``summary.json`` (loss; greedy accuracy on the training examples, an exact match with their reference answers, work
included where the task writes work before its answer; greedy accuracy on held-out prompts by the
task's own ``correct``), ``metrics.csv``
and ``examples.txt``. RL runs start from it with ``init_from=<run dir>``: the policy and GRPO's
reference policy are these parameters; :func:`load_policy` refuses a checkpoint of another network,
vocabulary or buffer length before anything is compiled.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from purejaxrl_opt.config.schema import (ConfigError, EnvConfig, NetworkConfig, build_section, non_negative,
                                  one_of, positive)
# the checkpoint format lives with the models (RL runs load it with init_from)
from purejaxrl_opt.core.models.pretrained import CHECKPOINT_KIND, NETWORK_KEYS, load_policy, save_checkpoint  # noqa: F401

@dataclass(frozen=True)
class SFTConfig:
    num_examples: int = 256  # distinct training prompts with their correct answers
    min_digits: int = 0  # 0 = the env's min_digits
    max_digits: int = 0  # 0 = the env's max_digits
    steps: int = 600  # Adam steps
    batch_size: int = 64
    lr: float = 1e-3
    # constant: lr throughout | cosine: linear warmup over warmup_steps, then cosine decay to 0
    schedule: str = "constant"
    warmup_steps: int = 0
    eval_prompts: int = 512  # held-out prompts for the greedy accuracy in summary.json
    examples: int = 20  # generated answers written to examples.txt

    def validate(self) -> None:
        for name in ("num_examples", "steps", "batch_size", "eval_prompts"):
            positive(f"sft.{name}", getattr(self, name))
        for name in ("min_digits", "max_digits", "examples"):
            non_negative(f"sft.{name}", getattr(self, name))
        positive("sft.lr", self.lr)
        one_of("sft.schedule", self.schedule, ("constant", "cosine"))
        non_negative("sft.warmup_steps", self.warmup_steps)
        if self.schedule == "constant" and self.warmup_steps:
            raise ConfigError(f"config key 'sft.warmup_steps' = {self.warmup_steps} is invalid: must be 0 "
                              "with sft.schedule = 'constant' (warm-up is part of 'cosine')")
        if self.warmup_steps >= self.steps:
            raise ConfigError(f"config key 'sft.warmup_steps' = {self.warmup_steps} is invalid: must be "
                              f"< sft.steps = {self.steps}")

    def learning_rate(self):
        """The optimiser's learning rate: a float, or an optax schedule of the step."""
        import optax

        if self.schedule == "constant":
            return self.lr
        return optax.warmup_cosine_decay_schedule(0.0, self.lr, self.warmup_steps, self.steps)


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


# --------------------------------------------------------------------------- training (pure)
def sequence_loss(policy, params, prompts, actions, answer_len):
    """Mean cross-entropy per answer token (incl. ``<eos>``) under teacher forcing."""
    import jax
    import jax.numpy as jnp

    logits = policy.episode_apply(params, prompts[:, None, :], actions)["logits"]
    log_p = jnp.take_along_axis(jax.nn.log_softmax(logits), actions[..., None], axis=-1)[..., 0]
    mask = jnp.arange(actions.shape[1])[None, :] < answer_len[:, None]
    return -jnp.sum(jnp.where(mask, log_p, 0.0)) / jnp.maximum(mask.sum(), 1)


def greedy_answers(policy, params, prompts, num_steps: int):
    """Greedy answers to ``prompts [N, L]`` with the cached decoder: actions ``[N, T]``."""
    import jax
    import jax.numpy as jnp

    carry, dist_params = policy.start(params, prompts)

    def _step(state, _):
        carry, dist_params = state
        action = jnp.argmax(dist_params["logits"], axis=-1)
        carry, dist_params = policy.advance(params, carry, action, prompts)
        return (carry, dist_params), action

    return jax.lax.scan(_step, (carry, dist_params), None, length=num_steps)[1].T


def exact_match(actions, answers, answer_len):
    """Per row: the actions up to ``answer_len`` equal the answer (which ends with ``<eos>``)."""
    import jax.numpy as jnp

    mask = jnp.arange(actions.shape[1])[None, :] < answer_len[:, None]
    return jnp.all(jnp.where(mask, actions == answers, True), axis=1)


def make_sft_train(policy, prompts, actions, answer_len, cfg: SFTConfig, log_every: int):
    """``(init, blocks)``, the two jitted pieces of SFT training.

    ``init(key) -> carry``: the untrained parameters, Adam's state, the key of every block and the
    metrics buffer ``{loss, train_accuracy}: [steps // log_every + 1]`` with row 0 measured on the
    untrained model (the whole example set). ``blocks(carry, start, stop) -> carry`` runs blocks
    ``start .. stop-1`` of ``log_every`` Adam steps each, block ``i`` writing row ``i + 1`` (loss: the
    mean over its steps). The bounds are traced, so one compiled ``blocks`` serves any split of the
    run into calls: the results are bitwise the same in one call or in many (a progress bar's)."""
    import jax
    import jax.numpy as jnp
    import optax

    optimizer = optax.adam(cfg.learning_rate())
    num = prompts.shape[0]
    batch = min(cfg.batch_size, num)
    num_steps = actions.shape[1]
    num_blocks = cfg.steps // log_every
    grad_fn = jax.value_and_grad(lambda p, idx: sequence_loss(
        policy, p, prompts[idx], actions[idx], answer_len[idx]))

    def _step(state, step_key):
        params, opt_state = state
        idx = jax.random.choice(step_key, num, (batch,), replace=False)
        loss, grads = grad_fn(params, idx)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), loss

    def _block(state, block_key):
        state, losses = jax.lax.scan(_step, state, jax.random.split(block_key, log_every))
        accuracy = exact_match(greedy_answers(policy, state[0], prompts, num_steps), actions,
                               answer_len).mean()
        return state, {"loss": losses.mean(), "train_accuracy": accuracy}

    def init(key):
        init_key, key = jax.random.split(key)
        params = policy.init(init_key)
        accuracy = exact_match(greedy_answers(policy, params, prompts, num_steps), actions,
                               answer_len).mean()
        loss = sequence_loss(policy, params, prompts, actions, answer_len)
        metrics = {name: jnp.full((num_blocks + 1,), jnp.nan, jnp.float32).at[0].set(value)
                   for name, value in (("loss", loss), ("train_accuracy", accuracy))}
        return (params, optimizer.init(params), jax.random.split(key, num_blocks), metrics)

    def blocks(carry, start, stop):
        def _one(i, carry):
            params, opt_state, keys, metrics = carry
            (params, opt_state), row = _block((params, opt_state), keys[i])
            metrics = {name: metrics[name].at[i + 1].set(row[name]) for name in metrics}
            return params, opt_state, keys, metrics

        return jax.lax.fori_loop(start, stop, _one, carry)

    return init, blocks


def train_blocks(init, blocks, key, num_blocks: int, num_chunks: int = 1, on_chunk=None):
    """Compile ``init`` and ``blocks`` (:func:`make_sft_train`), then run every block in
    ``num_chunks`` calls of the one compiled ``blocks``; ``on_chunk(carry, blocks_done, seconds)``
    after each call (seconds of training so far; it may read the metrics: that waits for this call,
    the next one is dispatched first). Returns ``(carry, compile s, train s)``."""
    import jax
    import jax.numpy as jnp

    from purejaxrl_opt.host.runner import chunk_stops

    start = time.perf_counter()
    init_compiled = jax.jit(init).lower(key).compile()
    shape = jax.eval_shape(init, key)
    blocks_compiled = jax.jit(blocks).lower(shape, jnp.int32(0), jnp.int32(1)).compile()
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    carry, done, pending = init_compiled(key), 0, None
    for stop in chunk_stops(num_blocks, num_chunks):
        carry, done = blocks_compiled(carry, jnp.int32(done), jnp.int32(stop)), stop
        if on_chunk is not None:
            if pending is not None:
                on_chunk(*pending, time.perf_counter() - start)
            pending = (carry, done)
    carry = jax.block_until_ready(carry)
    train_s = time.perf_counter() - start
    if pending is not None:
        on_chunk(*pending, train_s)
    return carry, compile_s, train_s


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

    def _on_chunk(carry, blocks_done, seconds):
        loss = float(np.asarray(carry[3]["loss"][blocks_done]))  # waits for this call only
        if not bars:
            bars.append(Bar(cfg.steps, unit="steps", desc=f"sft {env_cfg.id}", enabled=True,
                            started_at=time.time() - seconds))
        bars[0].update_to(blocks_done * log_every, postfix=f"loss {loss:.4f}")

    try:
        (params, _, _, metrics), compile_s, train_s = train_blocks(
            init, blocks, jax.random.PRNGKey(seed), num_blocks,
            num_chunks=min(num_blocks, 50) if show else 1, on_chunk=_on_chunk if show else None)
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


def config_from_hydra(cfg) -> tuple[EnvConfig, NetworkConfig, SFTConfig, int]:
    from omegaconf import OmegaConf

    raw = OmegaConf.to_container(cfg, resolve=True)
    allowed = {"env", "network", "sft", "seed", "hydra"}
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise ConfigError(f"unknown config key '{unknown[0]}'; allowed top-level keys: {sorted(allowed)}")
    env_cfg = build_section(EnvConfig, raw["env"], "env")
    net = build_section(NetworkConfig, raw.get("network", {}), "network")
    sft_cfg = build_section(SFTConfig, raw.get("sft", {}), "sft")
    seed = raw.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ConfigError(f"config key 'seed' = {seed!r} is invalid: must be an int >= 0")
    return env_cfg, net, sft_cfg, seed


def _main():
    import hydra
    from hydra.core.hydra_config import HydraConfig

    @hydra.main(version_base=None, config_path="../conf", config_name="sft")
    def main(cfg) -> float:
        import logging

        logging.getLogger("jax").setLevel(logging.WARNING)
        try:
            env_cfg, net, sft_cfg, seed = config_from_hydra(cfg)
            summary = run_sft(env_cfg, net, sft_cfg, seed, HydraConfig.get().runtime.output_dir)
        except ConfigError as error:
            print(f"purejaxrl_opt: configuration error: {error}", file=sys.stderr)
            sys.exit(2)
        return summary["eval_accuracy"]

    main()


if __name__ == "__main__":
    from purejaxrl_opt.host.xla_flags import set_default_xla_flags

    set_default_xla_flags()

    _main()
