"""Supervised warm start on a token env (the command line; the run is :mod:`purejaxrl_opt.host.sft`,
the training :mod:`purejaxrl_opt.core.algos.sft`): teacher-forced cross-entropy on a limited set of
correct answers.

    python -m purejaxrl_opt.sft env=Addition-v0 sft.num_examples=256 sft.steps=600
    python -m purejaxrl_opt.train algo=grpo env=Addition-v0 init_from=<that run dir>

On a pretrained language model (``env=lm/<task> model.path=...``) it trains on the task's reference
answers and writes the model as a Hugging Face directory (:mod:`purejaxrl_opt.host.lm.sft`):

    python -m purejaxrl_opt.sft env=lm/arithmetic model.path=MODEL sft.steps=200 sft.batch_size=16 sft.lr=1e-5
    python -m purejaxrl_opt.train algo=grpo env=lm/arithmetic init_from=<that run dir>

The run dir gets ``checkpoint/`` (the policy; RL runs start from it with ``init_from=<run dir>``,
:func:`purejaxrl_opt.core.models.pretrained.load_policy` refuses one of another network, vocabulary
or buffer length before anything is compiled), ``summary.json``, ``metrics.csv`` and ``examples.txt``.
"""

from __future__ import annotations

import sys

from purejaxrl_opt.config.errors import ConfigError
from purejaxrl_opt.config.schema import EnvConfig, NetworkConfig, build_section
from purejaxrl_opt.core.algos.sft import SFTConfig
from purejaxrl_opt.host.sft import run_sft


def is_lm_task(cfg) -> bool:
    """Whether the composed config's env is a language-model task (``env=lm/<task>``)."""
    from purejaxrl_opt.host.lm.data import is_lm_task as lm_id

    env = cfg.get("env") if hasattr(cfg, "get") else None
    return env is not None and lm_id(env.get("id"))


def config_from_hydra(cfg) -> tuple[EnvConfig, NetworkConfig, SFTConfig, int]:
    from omegaconf import OmegaConf

    raw = OmegaConf.to_container(cfg, resolve=True)
    allowed = {"env", "network", "sft", "seed", "hydra"}
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise ConfigError(f"unknown config key '{unknown[0]}'; allowed top-level keys: {sorted(allowed)}")
    env_cfg = build_section(EnvConfig, raw["env"], "env")
    net = build_section(NetworkConfig, raw.get("network", {}), "network")
    sft_cfg = build_section(SFTConfig, raw.get("sft", {}), "sft")
    seed = raw.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ConfigError(f"config key 'seed' = {seed!r} is invalid: must be an int >= 0")
    return env_cfg, net, sft_cfg, seed


def _main():
    import hydra
    from hydra.core.hydra_config import HydraConfig

    @hydra.main(version_base=None, config_path="../conf", config_name="sft")
    def main(cfg) -> float:
        import logging

        logging.getLogger("jax").setLevel(logging.WARNING)
        try:
            if is_lm_task(cfg):  # env=lm/<task>: a pretrained language model
                from purejaxrl_opt.host.lm import sft as lm_sft

                return lm_sft.main(cfg, HydraConfig.get().runtime.output_dir)
            env_cfg, net, sft_cfg, seed = config_from_hydra(cfg)
            summary = run_sft(env_cfg, net, sft_cfg, seed, HydraConfig.get().runtime.output_dir)
        except ConfigError as error:
            print(f"purejaxrl_opt: configuration error: {error}", file=sys.stderr)
            sys.exit(2)
        return summary["eval_accuracy"]

    main()


if __name__ == "__main__":
    from purejaxrl_opt.host.xla_flags import set_default_xla_flags

    set_default_xla_flags()

    _main()
