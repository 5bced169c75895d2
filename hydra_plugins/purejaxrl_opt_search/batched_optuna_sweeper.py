"""The Hydra plugin class of ``hydra/sweeper=optuna`` (conf/hydra/sweeper/search.yaml).

Hydra instantiates sweepers only from the ``hydra_plugins`` namespace and imports every module in it
when any app starts, so this module stays light: the search itself (Optuna's ask/tell, batches of
suggestions per compiled job) is :class:`purejaxrl_opt.host.search.BatchedOptunaSweeperImpl`, imported
when the sweeper is built.
"""

from __future__ import annotations

from typing import Any, List

from hydra.core.config_search_path import ConfigSearchPath
from hydra.core.config_store import ConfigStore
from hydra.plugins.search_path_plugin import SearchPathPlugin
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class OptunaNameIsTheSearchSweeper(SearchPathPlugin):
    """Makes ``hydra/sweeper=optuna`` select conf/hydra/sweeper/search.yaml (this project's sweeper).

    hydra-optuna-sweeper stores its own ``hydra/sweeper/optuna`` node when its module is imported,
    and Hydra refuses a config file of the same name (schema matching); Hydra re-imports every
    plugin module at start-up, in path order, so a node stored at import time could be overwritten
    again. Search path plugins are called after that, before any config is loaded: the node stored
    here is the one in force.
    """

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        ConfigStore.instance().store(group="hydra/sweeper", name="optuna", node={"defaults": ["search"]},
                                     provider="purejaxrl_opt")


class BatchedOptunaSweeper(Sweeper):
    """Optuna search over the run's hyperparameters; ``sweep.batch=K`` trains K suggestions per job."""

    def __init__(self, **settings: Any) -> None:
        try:
            from purejaxrl_opt.host.search import BatchedOptunaSweeperImpl
        except ImportError as error:  # the search extra is not installed
            raise ImportError(f"hydra/sweeper=optuna needs Optuna and its Hydra sweeper: "
                              f"pip install -e '.[search]' ({error})") from error
        self.sweeper = BatchedOptunaSweeperImpl(**settings)

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction,
              config: DictConfig) -> None:
        self.sweeper.setup(hydra_context=hydra_context, task_function=task_function, config=config)

    def sweep(self, arguments: List[str]) -> None:
        return self.sweeper.sweep(arguments)
