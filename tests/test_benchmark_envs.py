"""The envs tier of the benchmark (conf/benchmark/envs.yaml): one PPO entry per env library beyond
gymnax, each composing through the training CLI's path and validating (no training, no compile), on a
report seed block, with a random-policy reference and the library's own baseline as references."""

from __future__ import annotations

from purejaxrl_opt.host import suites

LIBRARIES = ("playground", "craftax", "navix", "xminigrid", "jumanji")


def test_envs_suite_composes_and_validates_one_entry_per_library():
    suite = suites.load_suite("envs")
    libraries = []
    for entry in suite.entries:
        cfg = suites.compose_entry(entry)
        suites.check_entry(entry, cfg)  # every key and value as the CLI checks them
        library = cfg.env.id.split("/", 1)[0]
        libraries.append(library)
        assert entry.algo == "ppo" and entry.name == f"ppo_{library}_{cfg.env.id.split('/', 1)[1]}"
        # a report block (experiments/SEEDS.md), never used for choosing anything: 2100-2103; the
        # Playground entry 2104-2107 (2100-2103 were seen for it under its earlier, stale settings)
        assert entry.seeds == ([2104, 2105, 2106, 2107] if library == "playground" else [2100, 2101, 2102, 2103])
        # the random policy first, then the library's own baseline where one was measured or published
        assert entry.references and "random" in entry.references[0].what, entry.name
        # a library baseline measured on this machine for Playground (Brax PPO), Craftax
        # (Craftax_Baselines' ppo.py) and Jumanji (jumanji.training's A2C); none for navix and xminigrid
        # (their papers' figures were not available here)
        assert len(entry.references) >= (2 if library in ("playground", "craftax", "jumanji") else 1), entry.name
        for ref in entry.references:
            assert ref.source and ref.what and "PLACEHOLDER" not in ref.what, (entry.name, ref)
    assert sorted(libraries) == sorted(LIBRARIES)
    # the entries with a file of their own get their tuned values through the CLI's composition
    by_name = {e.name: e for e in suite.entries}
    cartpole = suites.compose_entry(by_name["ppo_playground_CartpoleBalance"])
    assert cartpole.algo.num_steps == 480 and cartpole.algo.lr == 1e-3  # conf/tuned/ppo_playground/
    snake = suites.compose_entry(by_name["ppo_jumanji_Snake-v1"])
    assert list(snake.network.hidden_sizes) == [256, 256] and snake.algo.num_envs == 64
    assert snake.eval_deterministic is False  # an argmax Snake policy can circle until the time limit
    text = suites.dry_run_text(suite)
    total = sum(e.total_timesteps * e.num_seeds for e in suite.entries)
    assert f"total budget trained here: {total:,} env steps" in text
