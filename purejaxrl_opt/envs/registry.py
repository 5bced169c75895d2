"""Env ids -> adapter modules: ``env.id = "<library>/<name>"`` (``navix/Navix-DoorKey-8x8-v0``).

Adapters are named here as strings and imported with ``importlib`` only when an id of their library
is named, so a library that is not installed costs nothing until a run asks for it, and then is a
:class:`ConfigError` saying which extra installs it. Adding a library is one adapter file
(``purejaxrl_opt/envs/<library>.py``, see protocol.py and the adapter contract below) and one line
in :data:`LIBRARIES`.

Ids without a prefix are gymnax's (``CartPole-v1``) and the token envs' (``Addition-v0``), as before
the registry existed; ``module:Class`` (a task of the user's own module) is a token env.

An adapter module exposes ``LIBRARY`` (its prefix), ``ids()`` (every name it can make, without the
prefix) and ``make(name, options) -> (env, env_params)`` (``options`` = the run's ``env.params``;
unknown keys and bad values are ConfigErrors naming ``env.params.<key>``). One module may serve
several prefixes (Playground and ``brax.envs``): it lists them in ``PREFIXES`` and takes the prefix
as an argument, ``ids(prefix)`` and ``make(name, options, prefix=prefix)``.

A leaf as far as imports go (it imports only ``errors``): ``config.EnvConfig.validate`` checks ids
through it, importing the named adapter at validation time (before anything is compiled).
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from types import ModuleType

from purejaxrl_opt.config.errors import ConfigError


@dataclass(frozen=True)
class Library:
    module: str  # the adapter module's import path
    extra: str | None  # pip extra of this project that installs the library; None = a core dependency


LIBRARIES: dict[str, Library] = {
    "gymnax": Library("purejaxrl_opt.envs.gymnax", None),
    "tokens": Library("purejaxrl_opt.envs.tokens", None),
    "navix": Library("purejaxrl_opt.envs.navix", "navix"),
    "xminigrid": Library("purejaxrl_opt.envs.xminigrid", "xminigrid"),
    "jumanji": Library("purejaxrl_opt.envs.jumanji", "jumanji"),
    "craftax": Library("purejaxrl_opt.envs.craftax", "craftax"),
    "playground": Library("purejaxrl_opt.envs.playground", "playground"),
    "brax": Library("purejaxrl_opt.envs.playground", "playground"),
}
# libraries whose ids may be named without the prefix (in this order)
UNPREFIXED: tuple[str, ...] = ("gymnax", "tokens")


def _bad_id(key: str, env_id: str, allowed: str) -> ConfigError:
    return ConfigError(f"config key '{key}' = {env_id!r} is invalid: {allowed}")


def close_names(name: str, names, n: int = 5) -> list[str]:
    """Up to ``n`` of ``names`` closest to ``name`` (difflib's similarity, case ignored), best first."""
    import difflib

    lowered = {candidate.lower(): candidate for candidate in names}
    return [lowered[c] for c in difflib.get_close_matches(name.lower(), list(lowered), n=n, cutoff=0.6)]


def load(library: str) -> ModuleType:
    """The adapter module of ``library`` (imported now). Not installed: a ConfigError naming the
    extra to install (``pip install -e '.[<extra>]'``)."""
    if library not in LIBRARIES:
        raise ConfigError(f"unknown env library {library!r}; libraries: {sorted(LIBRARIES)}")
    entry = LIBRARIES[library]
    try:
        found = importlib.util.find_spec(entry.module) is not None
    except ModuleNotFoundError:  # a package above the module is missing
        found = False
    if not found:
        raise ConfigError(f"env library {library!r}: its adapter module {entry.module} is not part of "
                          "this installation of purejaxrl_opt")
    try:
        return importlib.import_module(entry.module)
    except ModuleNotFoundError as error:
        install = (f"pip install -e '.[{entry.extra}]'" if entry.extra else
                   "pip install -e . (a core dependency)")
        raise ConfigError(f"env library {library!r} is not installed (no module {error.name!r}): "
                          f"{install}") from None


def ids(library: str) -> tuple[str, ...]:
    """Every name ``library`` can make, without the prefix (imports its adapter)."""
    module = load(library)
    if library in getattr(module, "PREFIXES", ()):  # one module, several prefixes: asked per prefix
        return tuple(module.ids(library))
    names = tuple(module.ids())
    if library == getattr(module, "LIBRARY", library):
        return tuple(n for n in names if "/" not in n)
    return tuple(n.split("/", 1)[1] for n in names if n.startswith(library + "/"))


def split_id(env_id: str, key: str = "env.id") -> tuple[str, str]:
    """``(library, name)`` of an env id; an unknown prefix or an unknown id is a ConfigError listing
    what is allowed, a library that is not installed one naming its extra."""
    if not isinstance(env_id, str) or not env_id:
        raise _bad_id(key, env_id, "must be a non-empty string")
    if "/" in env_id:
        library, name = env_id.split("/", 1)
        if library not in LIBRARIES:
            raise _bad_id(key, env_id, f"unknown library {library!r}: must be '<library>/<id>' with a "
                                       f"library among {sorted(LIBRARIES)}, or an id of "
                                       f"{list(UNPREFIXED)} without a prefix")
        if library == "tokens" and ":" in name:
            return library, name
        try:
            known = ids(library)
        except ConfigError as error:  # not installed
            raise _bad_id(key, env_id, str(error)) from None
        if name not in known:
            raise _bad_id(key, env_id, f"{library} has no env {name!r}; closest: {close_names(name, known)}; "
                                       f"its ids: {list(known)}")
        return library, name
    if ":" in env_id:  # a task of the user's own module (module:Class), resolved by envs/tokens.py
        return "tokens", env_id
    for library in UNPREFIXED:
        if env_id in ids(library):
            return library, env_id
    known = [i for library in UNPREFIXED for i in ids(library)]
    raise _bad_id(key, env_id, f"must be one of {known}, 'module:TaskClass' for a task defined outside "
                               "the package (purejaxrl_opt/envs/tasks.py), or '<library>/<id>' with a "
                               f"library among {sorted(LIBRARIES)}")


def make(env_id: str, options: dict):
    """``(library, env, env_params)`` of an env id, built by its adapter with ``options``."""
    library, name = split_id(env_id)
    module = load(library)
    if library in getattr(module, "PREFIXES", ()):
        env, env_params = module.make(name, dict(options), prefix=library)
        return library, env, env_params
    if library != getattr(module, "LIBRARY", library):
        name = f"{library}/{name}"
    env, env_params = module.make(name, dict(options))
    return library, env, env_params
