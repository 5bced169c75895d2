"""Hydra plugins of purejaxrl_opt: ``env=<library>/<id>`` for every id a library registers.

The ``env`` config group holds files only where an env has deliberate values (conf/env/<id>.yaml,
conf/env/<library>/<id>.yaml). Every other ``env=<library>/<id>`` is served by
:class:`EnvIdConfigSource`: conf/env/any.yaml (the library's defaults) with ``id: <library>/<id>``,
in the ``env`` package, exactly as a file of that name holding it would be. A file of the name wins
(the primary config directory is searched first). The tuned values still come from
``optional tuned: ${algo}_${env}``, i.e. conf/tuned/<algo>_<library>/<id>.yaml where one exists.

Nothing is imported or checked here (Hydra imports every plugin module at start-up): the id, the
library prefix included, is checked by the env registry (purejaxrl_opt/envs/registry.py) when the
config is validated, before anything is compiled; an unknown id lists that library's ids, an unknown
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


def _config_dir(search_path: str) -> Optional[Path]:
    """The directory of a ``file://`` (or plain) search path, or None (``pkg://`` and others)."""
    if search_path.startswith("file://"):
        return Path(search_path[len("file://"):])
    if "://" not in search_path:
        return Path(search_path)
    return None


class EnvIdConfigSource(ConfigSource):
    """``env/<library>/<id>`` for any ``<library>/<id>``: ``<conf>/env/any.yaml`` with that id.

    ``path`` is the primary config directory. Only names with a library prefix are served (a bare name
    is a gymnax or token env, each with its file); the source has no groups and lists nothing (it
    cannot know the ids without importing every library)."""

    @staticmethod
    def scheme() -> str:
        return SCHEME

    @staticmethod
    def _env_name(config_path: str) -> Optional[str]:
        path = config_path.rstrip("/")
        if path.endswith(".yaml"):
            path = path[: -len(".yaml")]
        if not path.startswith(GROUP + "/"):
            return None
        name = path[len(GROUP) + 1:]
        if "/" not in name or not all(name.split("/")):
            return None
        return name

    def load_config(self, config_path: str) -> ConfigResult:
        name = self._env_name(config_path)
        if name is None:
            raise ValueError(f"{self.full_path()} serves only {GROUP}/<library>/<id>, not {config_path!r}")
        config = OmegaConf.load(Path(self.path) / GROUP / DEFAULTS)
        config.id = name
        return ConfigResult(provider=self.provider, path=self.full_path(), config=config,
                            header={"package": GROUP})

    def available(self) -> bool:
        return (Path(self.path) / GROUP / DEFAULTS).is_file()

    def is_group(self, config_path: str) -> bool:
        return False

    def is_config(self, config_path: str) -> bool:
        return self._env_name(config_path) is not None and self.available()

    def list(self, config_path: str, results_filter: Optional[ObjectType]) -> List[str]:
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
