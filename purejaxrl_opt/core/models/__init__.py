"""Pretrained causal language models as pure JAX functions of a params pytree.

``causal_lm``: one decoder for the Llama and Qwen2/Qwen3 families (config, forward, KV-cache prefill
and decode). ``sampling``: batched generation in one jitted function, and per-token log-probs of
given completions. Loading checkpoints and tokenizers is host-side work, in :mod:`purejaxrl_opt.host.lm`.
"""
