"""The jitted core: everything here runs inside ``jax.jit`` (or builds what does).

``algos/``: one file per algorithm, the loop they share (``base``) and the registry (``__init__``).
``stages/``: the pieces algorithms share: rollouts, advantages, losses, optimisers, evaluation.
``models/``: networks, distributions, the token transformer, pretrained causal LMs and their sampler.
Nothing in ``core/`` imports ``host/`` or a command-line module (tests/test_imports.py).
"""
