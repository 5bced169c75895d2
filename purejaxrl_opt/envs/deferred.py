"""Modules that env libraries import at import time but use only to draw: loaded on first use.

gymnax's Pong imports ``seaborn`` at module level for one colour palette in its ``render``; seaborn
brings pandas and scipy.stats with it, ~1.2 s of every process that imports gymnax (a training run, an
evaluation, a refused command), although nothing here draws with seaborn. :func:`defer` puts a
stand-in module under the name: an ``import`` of it binds the stand-in, and the first attribute read
(``sns.color_palette``) imports the real module and answers from it from then on.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types

DEFERRED = ("seaborn",)


class _Deferred(types.ModuleType):
    """Stands in for the module ``name`` until an attribute of it is read."""

    def __init__(self, name: str, spec):
        super().__init__(name)
        self.__spec__ = spec  # the real one, so that the import system and find_spec see a module
        self.__file__ = getattr(spec, "origin", None)

    def __getattr__(self, attr: str):
        name = self.__name__
        if sys.modules.get(name) is self:
            del sys.modules[name]
        real = importlib.import_module(name)
        self.__dict__.update(real.__dict__)  # every later read is a plain lookup
        return getattr(real, attr)


def defer(names: tuple[str, ...] = DEFERRED) -> None:
    """Put a stand-in under each installed, not yet imported module of ``names``."""
    for name in names:
        if name in sys.modules:
            continue
        spec = importlib.util.find_spec(name)
        if spec is not None:
            sys.modules[name] = _Deferred(name, spec)
