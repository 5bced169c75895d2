"""Tasks defined outside the package, as a user would (selected with env.id=tests.task_fixtures:<Class>).

``Parity``: the prompt is ``num_bits`` digits 0/1 then ``=``; the answer is ``1`` if an odd number of
them are 1, else ``0``, then ``<eos>``. Its rewards read ``Sample.data`` (the parity), not only the
reference answer. The ``Bad*`` classes are broken definitions that must be refused before compiling.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from purejaxrl_opt.envs.tasks import DIGIT0, EOS, EQUALS, PAD, Reward, Sample, Task


def parity_correct(sample: Sample, generated, length):
    return ((length == 2) & (generated[0] == DIGIT0 + sample.data["parity"])
            & (generated[1] == EOS)).astype(jnp.float32)


def short(sample: Sample, generated, length):
    """1 for an answer of at most two tokens that ends with <eos>."""
    return ((length <= 2) & (generated[jnp.maximum(length - 1, 0)] == EOS)).astype(jnp.float32)


class Parity(Task):
    def __init__(self, num_bits: int = 3, short_reward: float = 0.5, test_fraction: float = 0.25):
        self.num_bits = num_bits
        super().__init__("Parity", answer_limit=3,
                         rewards=[Reward("correct", parity_correct, 1.0), Reward("short", short, short_reward)],
                         test_fraction=test_fraction, salt=0x50617231)

    def sample(self, key) -> Sample:
        bits = jax.random.randint(key, (self.num_bits,), 0, 2).astype(jnp.int32)
        parity = jnp.sum(bits) % 2
        prompt = jnp.concatenate([bits + DIGIT0, jnp.asarray([EQUALS], jnp.int32)])
        answer = jnp.asarray([DIGIT0, EOS, PAD], jnp.int32).at[0].set(DIGIT0 + parity)
        return Sample(prompt, jnp.int32(self.num_bits + 1), answer, jnp.int32(2), {"parity": parity})

    def prompt_strings(self):
        return (format(v, f"0{self.num_bits}b") + "=" for v in range(2**self.num_bits))

    @property
    def num_prompts(self) -> int:
        return 2**self.num_bits


class BadRewardShape(Parity):
    """A reward that returns one value per answer token instead of one per answer."""

    def __init__(self):
        super().__init__()
        self.rewards = (Reward("per_token", lambda sample, generated, length: (generated == EOS) * 1.0),)


class BadAnswerShape(Parity):
    def sample(self, key) -> Sample:
        s = super().sample(key)
        return s.replace(answer=jnp.zeros((7,), jnp.int32))


class NotATask:
    pass


# a prompt of 40 tokens: longer than any buffer a run gives it with env.params.max_len=20
class LongPrompt(Parity):
    def __init__(self):
        super().__init__(num_bits=39)

    def prompt_strings(self):
        return None

    @property
    def num_prompts(self):
        return None
