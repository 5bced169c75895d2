"""Stages the algorithms share, all jitted: rollout and GAE, the actor-critic batch, losses, natural
gradients, optimisers, evaluation, collectives, GRPO's objective, the language-model policy side."""
