"""The CLI's default XLA flags (purejaxrl_opt/host/xla_flags.py): set only on CPU-only installs, never
over a user's own flags."""

from __future__ import annotations

import pytest

from purejaxrl_opt.host import xla_flags


@pytest.fixture
def cpu_host(monkeypatch):
    """A CPU-only install with 4 usable cores and no XLA_FLAGS."""
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    monkeypatch.delenv("JAX_PLATFORMS", raising=False)  # tests/conftest.py sets it to cpu
    monkeypatch.setattr(xla_flags.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(xla_flags, "usable_cores", lambda: 4)
    return monkeypatch


def test_cpu_host_gets_one_device_per_core_and_opt_level_1(cpu_host):
    xla_flags.set_default_xla_flags()
    flags = xla_flags.os.environ["XLA_FLAGS"].split()
    assert flags == ["--xla_backend_optimization_level=1", "--xla_force_host_platform_device_count=4"]


def test_user_flags_win(cpu_host):
    cpu_host.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=1 --xla_backend_optimization_level=3")
    xla_flags.set_default_xla_flags()
    assert xla_flags.os.environ["XLA_FLAGS"] == ("--xla_force_host_platform_device_count=1 "
                                                 "--xla_backend_optimization_level=3")


def test_one_core_gets_no_device_count(cpu_host):
    cpu_host.setattr(xla_flags, "usable_cores", lambda: 1)
    xla_flags.set_default_xla_flags()
    assert xla_flags.os.environ["XLA_FLAGS"] == "--xla_backend_optimization_level=1"


def test_accelerator_installs_are_left_alone(cpu_host):
    cpu_host.setattr(xla_flags.importlib.util, "find_spec",
                     lambda name: object() if name == "jax_cuda12_plugin" else None)
    xla_flags.set_default_xla_flags()
    assert "XLA_FLAGS" not in xla_flags.os.environ


def test_usable_cores_is_positive():
    assert xla_flags.usable_cores() >= 1


def test_jax_platforms_decides_over_installed_plugins(cpu_host):
    """JAX_PLATFORMS' first entry is the backend JAX will compute on: cpu gets the CPU flags even
    with a GPU plugin installed; a GPU/TPU platform gets none even where no plugin is found."""
    cpu_host.setattr(xla_flags.importlib.util, "find_spec",
                     lambda name: object() if name == "jax_cuda12_plugin" else None)
    cpu_host.setenv("JAX_PLATFORMS", "cpu")
    assert xla_flags.runs_on_cpu()
    xla_flags.set_default_xla_flags()
    assert "--xla_force_host_platform_device_count=4" in xla_flags.os.environ["XLA_FLAGS"]
    cpu_host.delenv("XLA_FLAGS")
    cpu_host.setattr(xla_flags.importlib.util, "find_spec", lambda name: None)
    for platforms in ("cuda", "tpu", "cuda,cpu"):
        cpu_host.setenv("JAX_PLATFORMS", platforms)
        assert not xla_flags.runs_on_cpu()
        xla_flags.set_default_xla_flags()
        assert "XLA_FLAGS" not in xla_flags.os.environ


def test_language_model_entry_points_add_ynnpack_fusions_unless_the_user_chose(cpu_host):
    xla_flags.set_default_xla_flags(language_model=True)
    assert xla_flags.os.environ["XLA_FLAGS"].split() == [
        "--xla_backend_optimization_level=1", "--xla_force_host_platform_device_count=4",
        "--xla_cpu_experimental_ynn_fusion_type=dot,eltwise,reduce"]
    cpu_host.setenv("XLA_FLAGS", "--xla_cpu_experimental_ynn_fusion_type=reduce")
    xla_flags.set_default_xla_flags(language_model=True)
    assert "--xla_cpu_experimental_ynn_fusion_type=reduce" in xla_flags.os.environ["XLA_FLAGS"]
    assert "dot,eltwise,reduce" not in xla_flags.os.environ["XLA_FLAGS"]


def _draws():
    """A fresh jitted function (no cached lowering) of the draws a rollout makes, and its optimised HLO."""
    import jax
    import jax.numpy as jnp

    def draws(key):
        a, b = jax.random.split(key)
        return (jax.random.key_data(jax.random.split(a, 7)), jax.random.normal(jax.random.fold_in(b, 3), (5, 3)),
                jax.random.categorical(a, jnp.zeros((4, 6))), jax.random.uniform(b, (9,)))

    fn = jax.jit(lambda key: draws(key))
    key = jax.random.PRNGKey(2024)
    return fn(key), fn.lower(key).compile().as_text()


def test_unrolled_threefry_draws_the_same_bits_without_a_loop():
    """The unrolled CPU lowering of the threefry hash (every jax.random draw; opt-in) gives JAX's own
    bits; the rolled one (JAX's CPU default) runs a while loop per draw, the unrolled one none."""
    import numpy as np

    try:
        xla_flags.unroll_threefry("rolled")
        rolled, rolled_hlo = _draws()
        xla_flags.unroll_threefry("unrolled")
        unrolled, unrolled_hlo = _draws()
    finally:
        xla_flags.unroll_threefry("rolled")  # JAX's default again for the tests after this one
    for a, b in zip(rolled, unrolled):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
    assert " while(" in rolled_hlo and " while(" not in unrolled_hlo


def test_threefry_is_jaxs_own_unless_asked(cpu_host):
    calls = []
    cpu_host.setattr(xla_flags, "unroll_threefry", calls.append)
    xla_flags.set_default_xla_flags()
    cpu_host.setenv(xla_flags.THREEFRY_ENV, "unrolled")
    xla_flags.set_default_xla_flags()
    assert calls == ["unrolled"]


def test_threefry_choice_is_checked(cpu_host):
    cpu_host.setenv(xla_flags.THREEFRY_ENV, "fast")
    with pytest.raises(ValueError, match=r"PUREJAXRL_OPT_THREEFRY='fast' is invalid; allowed: \['unrolled', "
                                         r"'rolled'\]"):
        xla_flags.set_default_xla_flags()


def test_cli_programs_get_ynnpack_products_per_compile_and_fall_back_where_xla_cannot(monkeypatch):
    """chunks.compile_lowered (every program the runner compiles): on the CPU, products go to YNNPACK
    (xla_flags.cpu_compile_options); a program XLA:CPU cannot compile that way (a product inside a
    small loop) is compiled without them; a user's XLA_FLAGS choice wins."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from purejaxrl_opt.host.chunks import compile_lowered

    monkeypatch.delenv("XLA_FLAGS", raising=False)
    x, w = jnp.ones((8, 4)), jnp.arange(16.0).reshape(4, 4) / 16
    product = jax.jit(lambda x, w: jnp.tanh(x @ w)).lower(x, w)
    compiled = compile_lowered(product)
    assert "ynn_fusion" in compiled.as_text()
    np.testing.assert_allclose(compiled(x, w), product.compile()(x, w), rtol=1e-6)

    looped = jax.jit(lambda x, w: jax.lax.scan(lambda c, _: (c @ w, None), x, None, length=3)[0]).lower(x, w)
    with pytest.raises(jax.errors.JaxRuntimeError, match=xla_flags.YNN_UNSUPPORTED):
        looped.compile(compiler_options=xla_flags.YNN_PRODUCTS)
    fallback = compile_lowered(looped)
    assert "ynn_fusion" not in fallback.as_text()
    np.testing.assert_array_equal(fallback(x, w), looped.compile()(x, w))

    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_experimental_ynn_fusion_type=reduce")
    assert xla_flags.cpu_compile_options() == {}
    assert "ynn_fusion" not in compile_lowered(product).as_text()
