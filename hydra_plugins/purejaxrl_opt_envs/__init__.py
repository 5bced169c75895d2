"""Hydra plugins of purejaxrl_opt: the config nodes that the code defines, served as if they were files.

``env=<id>``: the ``env`` config group holds files only where an env has deliberate values
(conf/env/<id>.yaml, conf/env/<library>/<id>.yaml). Every other ``env=<library>/<id>`` and every other
``env=<id>`` (a gymnax id: ``env=Breakout-MinAtar``) is served by :class:`EnvIdConfigSource`:
conf/env/any.yaml (the library's defaults) with that id, in the ``env`` package, exactly as a file of
that name holding it would be. A file of the name wins (the primary config directory is searched
first). The tuned values still come from ``optional tuned: ${algo}_${env}``, i.e.
conf/tuned/<algo>_<id>.yaml or conf/tuned/<algo>_<library>/<id>.yaml where one exists.

``env=playground/<task>`` and ``env=brax/<id>`` (MuJoCo Playground and Brax, every id): the same
node with ``normalize_obs: true``, the default Playground's and Brax's PPO users get. With ``algo=ppo``,
``tuned/ppo_playground/<task>`` is Playground's own tuned PPO config for that task
(``brax_ppo_config``) mapped onto ours by purejaxrl_opt/envs/playground_ppo.py, served for every
Playground task without a file of its own (a file states where this project deliberately differs, and
includes the mapped values as ``/playground_ppo/<task>``, the same node under another name). Its
``algo.num_steps`` is an expression of the run's ``algo.num_envs`` (config/resolvers.py, registered
here), so a ``num_envs`` given on the command line is scaled to, or refused. An unknown task gets no
node: the env id's check names the closest ids.

``algo=<name>``: the ``algo`` group is the algorithms of ``purejaxrl_opt.config.schema.ALGORITHMS``,
each node the defaults of its config class (``CONFIG`` of ``purejaxrl_opt/core/algos/<name>.py``,
where every field's meaning is written beside it): each default is written once, in the dataclass.

Nothing is imported at start-up (Hydra imports every plugin module then): the algorithm table when the
``algo`` group is first looked at, an algorithm's module when its node is loaded. Env ids are not
checked here: the id, the library prefix included, is checked by the env registry
(purejaxrl_opt/envs/registry.py) when the config is validated, before anything is compiled; an unknown
id lists the ids (a bare one: gymnax's and the token envs'; a prefixed one: that library's), an unknown
prefix the libraries.

:class:`EnvIdSearchPath` adds the source to the search path of an app whose primary config directory
is this project's (it has env/any.yaml), so other Hydra apps are not affected.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

from hydra.core.config_search_path import ConfigSearchPath
from hydra.core.object_type import ObjectType
from hydra.plugins.config_source import ConfigResult, ConfigSource
from hydra.plugins.search_path_plugin import SearchPathPlugin
from omegaconf import OmegaConf

SCHEME = "purejaxrl-env"
GROUP = "env"
DEFAULTS = "any.yaml"  # in the env group: the values of an env without a file of its own
ALGO_GROUP = "algo"
TUNED_GROUP = "tuned"
# Playground's tuned PPO config of a task: tuned/ppo_playground/<task>, and the same node as
# playground_ppo/<task> for a file of conf/tuned/ppo_playground/ to include
PLAYGROUND_TUNED = "ppo_playground"
PLAYGROUND_PPO_GROUP = "playground_ppo"
# libraries whose env node normalises observations, as their own PPO does by default
NORMALIZED_OBS_LIBRARIES = ("playground", "brax")



def _register_resolvers() -> None:
    from purejaxrl_opt.config import resolvers

    resolvers.register()


_register_resolvers()


def _playground_task(group: str, name: str) -> str | None:
    """The Playground task of a ``tuned/ppo_playground/<task>`` or ``playground_ppo/<task>`` path
    when it is one of Playground's tasks (imports Playground), else None."""
    if group == TUNED_GROUP:
        library, _, task = name.partition("/")
        if library != PLAYGROUND_TUNED:
            return None
    elif group == PLAYGROUND_PPO_GROUP:
        task = name
    else:
        return None
    if not task or "/" in task:
        return None
    from purejaxrl_opt.config.errors import ConfigError
    from purejaxrl_opt.envs import playground_ppo

    try:
        playground_ppo.family(task)
    except ConfigError:
        return None
    return task


def _playground_ppo_node(task: str):
    from purejaxrl_opt.envs import playground_ppo

    return OmegaConf.create(playground_ppo.ppo_node(task))


def _algorithms() -> dict:
    """``algo.name -> module`` (purejaxrl_opt.config.schema.ALGORITHMS)."""
    from purejaxrl_opt.config.schema import ALGORITHMS

    return ALGORITHMS


def _algo_node(name: str):
    """The defaults of algorithm ``name``'s config class, as a plain config (no type checks: every key
    and value is checked by purejaxrl_opt.config.schema when the composed config is validated)."""
    import dataclasses

    from purejaxrl_opt.config.schema import algo_config

    defaults = algo_config(name)()
    return OmegaConf.create({f.name: _plain(getattr(defaults, f.name)) for f in dataclasses.fields(defaults)})


def _plain(value):
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _config_dir(search_path: str) -> Optional[Path]:
    """The directory of a ``file://`` (or plain) search path, or None (``pkg://`` and others)."""
    if search_path.startswith("file://"):
        return Path(search_path[len("file://"):])
    if "://" not in search_path:
        return Path(search_path)
    return None


class EnvIdConfigSource(ConfigSource):
    """``env/<id>`` and ``env/<library>/<id>`` for any id: ``<conf>/env/any.yaml`` with that id; and
    ``algo/<name>`` for every algorithm: its config class's defaults.

    ``path`` is the primary config directory. The env ids are not listed (that needs every library
    imported); the ``algo`` group lists the algorithms."""

    @staticmethod
    def scheme() -> str:
        return SCHEME

    @staticmethod
    def _split(config_path: str) -> tuple[str, str] | None:
        """``(group, name)`` of ``<group>/<name>[.yaml]``, or None."""
        path = config_path.rstrip("/")
        if path.endswith(".yaml"):
            path = path[: -len(".yaml")]
        group, _, name = path.partition("/")
        if group not in (GROUP, ALGO_GROUP, TUNED_GROUP, PLAYGROUND_PPO_GROUP) or not name \
                or not all(name.split("/")):
            return None
        return group, name

    def _served(self, config_path: str) -> tuple[str, str] | None:
        found = self._split(config_path)
        if found is None:
            return None
        group, name = found
        if group == ALGO_GROUP:
            return found if name in _algorithms() else None
        if group in (TUNED_GROUP, PLAYGROUND_PPO_GROUP):
            return found if self.available() and _playground_task(group, name) else None
        return found if self.available() else None

    def load_config(self, config_path: str) -> ConfigResult:
        found = self._served(config_path)
        if found is None:
            raise ValueError(f"{self.full_path()} serves only {GROUP}/<id>, {GROUP}/<library>/<id> and "
                             f"{ALGO_GROUP}/<name>, not {config_path!r}")
        group, name = found
        if group in (TUNED_GROUP, PLAYGROUND_PPO_GROUP):
            return ConfigResult(provider=self.provider, path=self.full_path(),
                                config=_playground_ppo_node(_playground_task(group, name)),
                                header={"package": "_global_"})
        if group == ALGO_GROUP:
            config = _algo_node(name)
        else:
            config = OmegaConf.load(Path(self.path) / GROUP / DEFAULTS)
            config.id = name
            if name.partition("/")[0] in NORMALIZED_OBS_LIBRARIES:
                config.normalize_obs = True
        return ConfigResult(provider=self.provider, path=self.full_path(), config=config,
                            header={"package": group})

    def available(self) -> bool:
        return (Path(self.path) / GROUP / DEFAULTS).is_file()

    def is_group(self, config_path: str) -> bool:
        # the root too: Hydra lists the groups of every source that has it (--help)
        path = config_path.strip("/")
        return path in ("", ALGO_GROUP, PLAYGROUND_PPO_GROUP) or path == f"{TUNED_GROUP}/{PLAYGROUND_TUNED}"

    def is_config(self, config_path: str) -> bool:
        return self._served(config_path) is not None

    def list(self, config_path: str, results_filter: Optional[ObjectType]) -> List[str]:
        path = config_path.strip("/")
        if path == "" and results_filter in (None, ObjectType.GROUP):
            return [ALGO_GROUP, PLAYGROUND_PPO_GROUP]
        if path == ALGO_GROUP and results_filter in (None, ObjectType.CONFIG):
            return sorted(_algorithms())
        return []


class EnvIdSearchPath(SearchPathPlugin):
    """Puts :class:`EnvIdConfigSource` after the primary config directory when that directory is this
    project's (it has env/any.yaml)."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        for element in search_path.get_path():
            if element.provider != "main" or element.path is None:
                continue
            conf = _config_dir(element.path)
            if conf is not None and (conf / GROUP / DEFAULTS).is_file():
                search_path.append(provider="purejaxrl_opt", path=f"{SCHEME}://{conf}")
            return
