"""Supervised warm start on a token env, the jitted part: teacher-forced cross-entropy on a limited
set of correct answers (Adam, the loss only on answer tokens), greedy answers with the cached
decoder, and the training program in blocks of Adam steps for the chunked driver
(:func:`purejaxrl_opt.host.chunks.run_chunks`; the run: :func:`purejaxrl_opt.host.sft.run_sft`).
"""

from __future__ import annotations

from dataclasses import dataclass

from purejaxrl_opt.config.errors import ConfigError
from purejaxrl_opt.config.schema import non_negative, one_of, positive


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
