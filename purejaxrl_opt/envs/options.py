"""The one check of an adapter's env options (the run's ``env.params``), before anything is built.

Every adapter describes the options it takes as a table ``{name: Option}`` and calls :func:`check`,
which refuses an unknown name (listing the allowed ones), a value of the wrong type, and a value out of
range, each as a :class:`ConfigError` naming ``env.params.<name>``, the value and what is allowed. The
table comes from the library where it describes its options itself (gymnax's ``EnvParams`` fields and
their defaults, Jumanji's constructor signatures, Craftax's ``EnvParams``; :meth:`Option.like`) and is
written out where the adapter defines them (navix, xminigrid, Playground).

Ranges: an int option is a count, a size, an interval or a step limit, so it must be >= 1 unless the
table says otherwise; a float must be finite (and >= ``minimum`` where one is given).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from purejaxrl_opt.config.errors import ConfigError

KINDS = ("bool", "int", "float", "str", "array", "mapping")


@dataclass(frozen=True)
class Option:
    """One option: its kind (``KINDS``) and its range.

    ``minimum``: the least allowed value of an int or float (ints: 1 unless given). ``odd``: ints only.
    ``choices``: the allowed values of a str. ``shape`` / ``dtype``: an array option (a list of numbers
    of that shape, e.g. gymnax Acrobot's ``available_torque``). A ``mapping`` is a dict of the library's
    own options, checked by the adapter (Playground's ``config``)."""

    kind: str
    minimum: float | None = None
    odd: bool = False
    choices: tuple[Any, ...] | None = None
    shape: tuple[int, ...] | None = None
    dtype: str | None = None
    why: str = ""  # the reason of a minimum, shown in the error (e.g. "a head and a fruit")

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"Option kind {self.kind!r} is not one of {KINDS}")

    @classmethod
    def like(cls, default: Any, annotation: Any = None, **range_) -> "Option":
        """The option of a library field or argument, typed by its annotation where that is ``bool``,
        ``int`` or ``float``, else by its default's type (None if neither says: not an option)."""
        if annotation in (bool, int, float):
            return cls(annotation.__name__, **range_)
        if isinstance(default, (bool, np.bool_)):
            return cls("bool", **range_)
        if isinstance(default, (int, np.integer)):
            return cls("int", **range_)
        if isinstance(default, (float, np.floating)):
            return cls("float", **range_)
        if isinstance(default, str):
            return cls("str", **range_)
        if hasattr(default, "shape") and hasattr(default, "dtype"):
            return cls("array", shape=tuple(int(d) for d in default.shape), dtype=np.dtype(default.dtype).name,
                       **range_)
        return None

    def describe(self) -> str:
        """What this option allows, as the error says it."""
        if self.kind == "bool":
            return "true or false"
        if self.kind == "str":
            return f"one of {list(self.choices)}" if self.choices is not None else "a string"
        if self.kind == "mapping":
            return "a mapping"
        if self.kind == "array":
            return f"a list of numbers of shape {list(self.shape)}"
        if self.kind == "int":
            low = 1 if self.minimum is None else int(self.minimum)
            text = f"{'an odd' if self.odd else 'an'} int >= {low}"
        else:
            text = "a finite number" + (f" >= {self.minimum}" if self.minimum is not None else "")
        return text + (f" ({self.why})" if self.why else "")

    def convert(self, value: Any) -> Any:
        """``value`` as the library takes it, or None when it is not allowed."""
        if self.kind == "bool":
            return bool(value) if isinstance(value, (bool, np.bool_)) else None
        if self.kind == "str":
            ok = isinstance(value, str) and (self.choices is None or value in self.choices)
            return value if ok else None
        if self.kind == "mapping":
            return dict(value) if isinstance(value, Mapping) else None
        if self.kind == "array":
            try:
                array = np.asarray(value)
            except (TypeError, ValueError):
                return None
            if array.shape != self.shape or array.dtype.kind not in "iuf" or not np.isfinite(array).all():
                return None
            return array.astype(self.dtype)
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
            return None
        if self.kind == "int":
            if not isinstance(value, (int, np.integer)):
                return None
            value = int(value)
            low = 1 if self.minimum is None else self.minimum
            return value if value >= low and (not self.odd or value % 2 == 1) else None
        value = float(value)
        if not math.isfinite(value) or (self.minimum is not None and value < self.minimum):
            return None
        return value


def check(env_name: str, options: Mapping[str, Any], allowed: Mapping[str, Option]) -> dict[str, Any]:
    """``options`` checked against ``allowed`` and converted (``np.integer`` to int, an int given for a
    float to float, a list for an array option to a numpy array of its dtype). An unknown name, a wrong
    type or a value out of range is a ConfigError naming ``env.params.<name>`` (``env_name``, e.g.
    ``jumanji/Snake-v1``, says which env's options)."""
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ConfigError(f"unknown config key 'env.params.{unknown[0]}' for {env_name}; allowed: "
                          f"{sorted(allowed)}")
    out = {}
    for name, value in options.items():
        option = allowed[name]
        converted = option.convert(value)
        if converted is None:
            raise ConfigError(f"config key 'env.params.{name}' = {value!r} is invalid for {env_name}: must "
                              f"be {option.describe()}")
        out[name] = converted
    return out
