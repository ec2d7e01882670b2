"""Compile once: sizes that change no shape are traced, so another D, η, η_b, schedule parameter
or initial scale reuses the programs already compiled (issue "compile once"). Counted with JAX's
own compile events (:class:`headspec.core.compiles.CompileCount`, which sees programs compiled or
read back from the persistent cache; a program already in memory costs nothing).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from headspec.conventions.config import SimulateConfig, TheoryConfig, load_config
from headspec.conventions.runs import simulate, solve
from headspec.core.compiles import CompileCount, memory_maps, release_if_crowded
from headspec.core.schedules import InverseTime

TINY = ["task.L=4", "model.H=2", "seeds=2", "record.points=3", "record.n_mc=64", "record.n_test=4"]


def _programs(model, run, *overrides, fresh=False) -> int:
    """Programs ``run`` needed; ``fresh``: after dropping every program held in memory, so that
    the count cannot be 0 because another test of this process (or xdist worker) compiled the
    same shapes first — the first run then compiles or reads back from the persistent cache."""
    if fresh:
        jax.clear_caches()
    with CompileCount() as c:
        run(load_config(model, overrides=[*TINY, *overrides]))
    return c.n


def test_another_d_or_eta_compiles_nothing_new_in_the_reduced_engine():
    """The reduced engine has no shape that depends on D: after a first run, runs at another D,
    η, η_b, σ0 and schedule parameters need no program at all; the first needed some (the count
    works)."""
    first = _programs(SimulateConfig, simulate, 'train.engine="reduced"', "task.D=60",
                      "train.T=0.5", 'train.schedule={kind="inverse_time", t0=1.0}',
                      fresh=True)  # fmt: skip
    again = _programs(SimulateConfig, simulate, 'train.engine="reduced"', "task.D=200",
                      "train.T=0.2", "train.lr=0.7", "train.lr_b=0.3", "model.sigma0=0.2",
                      'train.schedule={kind="inverse_time", t0=3.0, power=0.5}')  # fmt: skip
    assert first > 0 and again == 0, (first, again)


@pytest.mark.slow  # test tier: ≥ 20 s of the README tier's cold CI run (docs/tests.md)
def test_another_eta_compiles_nothing_new_in_the_ode():
    """The ODE's programs take η, η_b and the schedule's parameters as data: a second solve with
    other values compiles nothing, for the exact and the sampled methods."""
    for method in ("exact", "qmc"):
        common = [f'theory.method="{method}"', "theory.n=256", "task.D=50", "train.T=0.5"]
        first = _programs(TheoryConfig, solve, *common, fresh=True)
        again = _programs(TheoryConfig, solve, *common, "train.lr=0.5", "task.D=80")
        assert first > 0 and again == 0, (method, first, again)


def test_schedules_are_traced_parameters():
    """Two inverse-time schedules differ in data only (same tree structure, array leaves)."""
    a, b = InverseTime(t0=1.0), InverseTime(t0=5.0, power=0.5)
    assert jax.tree.structure(a) == jax.tree.structure(b)
    assert all(isinstance(x, jnp.ndarray) for x in jax.tree.leaves(a))
    assert np.isclose(float(b(jnp.asarray(5.0))), 2**-0.5)


def test_release_if_crowded_only_under_pressure():
    """Nothing is dropped while the process holds few memory mappings; where /proc tells, the
    count is positive and below the limit."""
    n, limit = memory_maps()
    if limit:
        assert 0 < n < limit
    assert release_if_crowded(fraction=1.0) is False


def _has_host_callback(lowered) -> bool:
    """Whether a lowered program calls back into Python (JAX never writes such a program to its
    persistent compilation cache)."""
    return "callback" in lowered.as_text()


def test_the_diffusion_step_has_no_host_callback_so_it_can_be_cached():
    """Under EQX_ON_ERROR=nan (set by the command line and by conftest, as here) the diffusion
    engine's step program holds no host callback: diffrax's runtime checks (dt0's sign, the
    Brownian tree's range) were pure callbacks under equinox's default "raise", so the step
    (27 s to compile at -O0) was compiled again by every process. The detector itself finds a
    callback where there is one (the control)."""
    import os

    from headspec.core.latent import Discrete
    from headspec.core.observables import BaseSamples
    from headspec.core.precision import float64_context
    from headspec.dynamics.engines import seed_keys
    from headspec.dynamics.engines.diffusion import DiffusionEngine
    from headspec.dynamics.noise import gram_rest
    from helpers import softmax_engine

    assert os.environ.get("EQX_ON_ERROR") == "nan"
    control = jax.jit(lambda x: jax.pure_callback(np.sin, x, x)).lower(jnp.ones(2))
    assert _has_host_callback(control)

    law = Discrete(atoms=[[2.0, 0.0], [0.0, 2.0]], probs=[0.6, 0.4])
    L, H, N, D = 4, 2, 16, 100
    eng = softmax_engine(
        DiffusionEngine,
        law,
        L,
        D,
        H,
        1.0,
        base=BaseSamples.draw(jax.random.key(1), law, L=L, H=H, n=N),
        gram=gram_rest(jax.random.key(2), N, L, D, law.F + H),
        dt=0.1,
        horizon=0.5,
    )
    keys = seed_keys([0])
    with float64_context():
        state = eng.init(keys, sigma0=0.1, b0=0.0, dtype=jnp.float64)
        step = DiffusionEngine.advance.__wrapped__  # the jitted step inside the float64 wrapper
        lowered = step.lower(eng, state, keys["train"], jnp.int64(0), jnp.int64(50))
    assert not _has_host_callback(lowered)


def test_the_command_line_sets_eqx_on_error_before_equinox_reads_it():
    """A fresh process that imports the command line gets equinox's "nan" mode (equinox reads
    EQX_ON_ERROR once, when first imported). One process (~3 s); that a value of the user's own
    is kept is `os.environ.setdefault`'s contract."""
    import os
    import subprocess
    import sys

    code = "import headspec.apps.cli, equinox._config as c; print(c.EQX_ON_ERROR)"
    env = {k: v for k, v in os.environ.items() if k != "EQX_ON_ERROR"}
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)  # fmt: skip
    assert res.stdout.strip() == "nan"


# one program, compiled in a process whose cache folder is $HEADSPEC_JAX_CACHE; prints
# "programs cache-hits"
MOVED_CACHE_CHILD = (
    "import jax, jax.numpy as jnp\n"
    "from headspec.conventions.provenance import enable_compilation_cache\n"
    "from headspec.core.compiles import CompileCount\n"
    "enable_compilation_cache()\n"
    "with CompileCount() as c:\n"
    "    jax.jit(lambda x: jnp.sin(x) * 3.0 + 1.0)(jnp.arange(5.0)).block_until_ready()\n"
    "print(c.n, c.cache_hits)\n"
)


def test_a_copied_cache_folder_is_read_back(tmp_path):
    """A cache key must not depend on the folder's path: JAX 0.10 wrote the path of XLA's GPU
    autotuning cache (inside the folder) into the compile options it hashes, on CPU too, so a
    copied or moved folder read nothing back (the tests' whole cache compiled again after a
    copy). enable_compilation_cache turns that off. Control: the first process compiles."""
    import os
    import shutil
    import subprocess
    import sys

    def run(folder):
        env = {**os.environ, "HEADSPEC_JAX_CACHE": str(folder),
               "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}  # fmt: skip
        res = subprocess.run([sys.executable, "-c", MOVED_CACHE_CHILD], env=env,
                             capture_output=True, text=True, timeout=120)  # fmt: skip
        assert res.returncode == 0, res.stderr[-2000:]
        return tuple(int(w) for w in res.stdout.split())

    n, hits = run(tmp_path / "a")
    assert n >= 1 and hits == 0  # a fresh folder: compiled
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    assert run(tmp_path / "b") == (n, n)  # the copy: every program read back


def test_a_cache_folder_that_cannot_be_written_leaves_the_cache_off(tmp_path, monkeypatch):
    """A read-only home (as on some CI runners) must not stop a command; conftest then caches in
    the checkout's .jax_cache/ rather than running every child process without a cache. A folder
    below a plain file can never be created, root or not."""
    from headspec.conventions import provenance

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert not provenance.writable_folder(blocker / "cache")
    assert provenance.writable_folder(tmp_path / "new" / "cache")  # control: created, written
    assert (tmp_path / "new" / "cache").is_dir() and not any((tmp_path / "new/cache").iterdir())

    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    assert provenance.user_cache_folder("jax") == blocker / "headspec" / "jax"
    monkeypatch.delenv("HEADSPEC_JAX_CACHE", raising=False)
    before = jax.config.jax_compilation_cache_dir
    provenance.enable_compilation_cache()  # no exception, and the session's folder is kept
    assert jax.config.jax_compilation_cache_dir == before


def test_cache_writes_check_the_size_bound_once_per_share_not_every_time(tmp_path, monkeypatch):
    """JAX's bounded cache lists the whole folder (and reads every entry's access time) at each
    write: 0.27 s per write with ~6800 entries, which made cold runs slow (tests/test_sgd.py
    cold beside 6800 other entries: 163 s, 115 s with the check throttled; docs/tests.md).
    headspec's processes check at their first write and then once per EVICTION_EVERY bytes
    written — and the bound is still enforced then (the oldest entry goes)."""
    from jax._src.lru_cache import LRUCache

    from headspec.conventions import provenance

    assert provenance.throttle_cache_eviction(), "this JAX has no LRUCache._evict_if_needed"
    listed = []
    glob = type(tmp_path).glob

    def counting_glob(self, pattern):
        listed.append(pattern)
        return glob(self, pattern)

    monkeypatch.setattr(type(tmp_path), "glob", counting_glob)
    monkeypatch.setattr(provenance, "EVICTION_EVERY", 1000)
    cache = LRUCache(str(tmp_path), max_size=1000)
    cache.put("first", b"x" * 600)  # a process's first write checks the bound
    assert len(listed) == 1
    cache.put("second", b"x" * 600)  # 600 < 1000 bytes since the check: no listing
    assert len(listed) == 1 and cache.get("first") is not None  # over the bound for now
    cache.put("third", b"x" * 600)  # 600 + 600 ≥ 1000: checked, the least recently used go
    assert len(listed) == 2
    assert cache.get("first") is None and cache.get("third") == b"x" * 600


def test_collect_less_freezes_what_is_alive_and_collects_the_first_generation_less_often():
    """The process set-up of the command line and the test processes (core.compiles)."""
    import gc

    from headspec.core.compiles import collect_less

    before, frozen = gc.get_threshold(), gc.get_freeze_count()
    try:
        collect_less(12_345)
        assert gc.get_threshold() == (12_345, 20, 20)
        assert gc.get_freeze_count() >= max(frozen, 1)
    finally:
        gc.set_threshold(*before)


DAMAGED_CHILD = r"""
import glob, os, sys, warnings
os.environ["HEADSPEC_JAX_CACHE"] = sys.argv[1]
os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
import jax, jax.numpy as jnp
from headspec.conventions.provenance import enable_compilation_cache
from headspec.core.compiles import CompileCount
from headspec.core.model import Model
enable_compilation_cache()
f = lambda x: jnp.sin(x) @ jnp.cos(x).T + 1.0
x = jnp.ones((7, 7))

def run():
    jax.clear_caches()
    with warnings.catch_warnings(record=True) as w, CompileCount() as c:
        warnings.simplefilter("always")
        float(jax.jit(f)(x).sum())
    return c.cache_hits, len([m for m in w if "cache" in str(m.message).lower()])

print("first", *run())
for path in glob.glob(os.path.join(sys.argv[1], "*-cache")):
    data = bytearray(open(path, "rb").read())
    if sys.argv[2] == "truncate":
        data = data[: len(data) // 2]
    else:  # zeros over the middle of the machine code
        data[len(data) // 4 : len(data) // 2] = bytes(len(data) // 2 - len(data) // 4)
    open(path, "wb").write(bytes(data))
print("damaged", *run())
print("again", *run())
"""


@pytest.mark.parametrize("damage", ["truncate", "zeros"])
def test_a_damaged_cache_entry_is_skipped_and_written_anew(damage, tmp_path):
    """issue 51: an entry damaged on disk is detected by its checksum, deleted and compiled
    again — no JAX warning, no crash — and the new entry is read back by the next process
    (a hit). Without the check JAX warned at every run and never rewrote the entry; some
    damage made XLA crash (exit 139)."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", DAMAGED_CHILD, str(tmp_path), damage],
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    lines = dict((w[0], w[1:]) for w in (line.split() for line in r.stdout.splitlines()))
    assert lines["first"] == ["0", "0"]  # compiled, written
    assert lines["damaged"] == ["0", "0"]  # the damaged entry is a miss: compiled, no warning
    hits, warned = (int(x) for x in lines["again"])
    assert hits >= 1 and warned == 0  # the entries written anew are read back
