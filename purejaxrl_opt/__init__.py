"""purejaxrl_opt: PPO, TRPO and GRPO as single jit-compiled JAX training functions."""

__version__ = "0.1.0"
