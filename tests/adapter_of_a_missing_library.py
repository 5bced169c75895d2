"""An env adapter (purejaxrl_opt/envs/registry.py's shape) whose library is genuinely not installed:
the registry must answer with the extra that installs it (tests/test_env_contract.py)."""

from __future__ import annotations

import purejaxrl_opt_library_that_is_not_installed  # noqa: F401  (no such distribution exists)

LIBRARY = "notinstalled"


def ids() -> tuple[str, ...]:
    return ("Anything-v0",)


def make(name: str, options: dict):
    raise AssertionError("never reached: the import above fails")
