"""Errors every layer may raise (a leaf: imports nothing of the package)."""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration value is unknown, of the wrong type, or out of range."""
