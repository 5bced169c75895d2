"""Nested mappings as one level of dotted keys (a leaf: imports nothing of the package)."""

from __future__ import annotations

from typing import Any


def flatten(data: Any, prefix: str = "", keep_empty: bool = False) -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``: every non-mapping value under its dotted path.

    A mapping is anything with ``items`` (dicts, ml_collections ``ConfigDict``s); lists and other
    values are leaves, unchanged. An empty mapping has no leaves and vanishes, unless ``keep_empty``
    keeps it as ``{path: {}}`` (a config section present but empty still differs from one absent).
    """
    if not hasattr(data, "items"):
        return {prefix: data}
    out: dict[str, Any] = {}
    for key, value in data.items():
        out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key), keep_empty))
    if not out and keep_empty:
        return {prefix: {}}
    return out
