"""The host side that drives the jitted core: the runner (lanes, compile, chunks, checkpoints),
run directories, loggers, artifacts, devices and meshes, sweeps, the Optuna search, statistics and
reports, and ``lm/`` (pretrained language models from files: loaders, tokenizers, prompts, rewards,
the language-model GRPO driver). Host code imports the core; the core never imports it."""
