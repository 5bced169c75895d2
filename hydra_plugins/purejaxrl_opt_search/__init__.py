"""Hydra plugins of purejaxrl_opt: the search sweeper (hydra/sweeper=optuna)."""
