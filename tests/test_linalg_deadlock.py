"""Batched matrix roots that XLA runs at once must not deadlock on a small machine.

jaxlib 0.10.2's batched LAPACK eigh on CPU splits its batch over XLA's intra-op thread pool and
waits for the pieces on a pool thread; independent batched eighs running at once (XLA runs
independent operations concurrently) can take every pool thread and wait forever. It hung the
default suite on this 2-core machine (in test_diffusion's vmapped increment_moments, with two
increment_moments per seed). ``psd_root`` therefore batches its eigh by a loop
(``headspec.core.linalg._eigh``: ``jax.custom_batching.sequential_vmap``).

The check runs in a child process pinned to two cores (two pool threads, as on the CI machine)
with a time limit: eight independent vmapped roots of 200 matrices per call, 100 calls. With
the plain batched eigh the same program hung within the first three calls in 4 of 4 tries
(``test_the_plain_batched_eigh_still_deadlocks``, slow); with the looped eigh it finishes in
≈ 5 s. (``psd_root``'s own program overlaps its eighs less often: with the plain eigh it hung
in one of three 30-s tries, too rarely for a test; a structural check covers it.)
"""

from __future__ import annotations

import subprocess
import sys

import pytest

CHILD = r"""
import os, sys
os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:2])  # two cores: two pool threads
import jax, jax.numpy as jnp
jax.config.update("jax_enable_x64", True)
from headspec.core.linalg import _eigh

eigh = jnp.linalg.eigh if sys.argv[1] == "plain" else _eigh

def root(S):
    w, V = eigh(S)  # (n,), (n, n)
    return (V * jnp.sqrt(jnp.maximum(w, 0.0))) @ V.T  # (n, n)

@jax.jit
def roots(k):  # eight independent batched roots: XLA may run them at once
    X = jax.random.normal(k, (8, 200, 13, 13))  # (branch, batch, n, n)
    return sum(jax.vmap(root)(x @ x.mT).sum() for x in X)

for i in range(int(sys.argv[2])):
    float(roots(jax.random.key(i)))
print("finished")
"""


def _run(which: str, calls: int, limit: float) -> str | None:
    """The child's output, or None when it ran past ``limit`` seconds (a deadlock)."""
    try:
        r = subprocess.run(
            [sys.executable, "-c", CHILD, which, str(calls)],
            capture_output=True, text=True, timeout=limit, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return None
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


@pytest.mark.slow  # test tier: a stress test of XLA's thread pool in a child process (~12 s)
def test_batched_eighs_running_at_once_finish():
    out = _run("loop", 100, limit=180.0)
    assert out is not None, "the batched eigh deadlocked (see this file's docstring)"
    assert "finished" in out


def test_psd_root_under_vmap_and_jacfwd_calls_eigh_one_matrix_at_a_time():
    """psd_root goes through the looped eigh: no batched eigh in its program under vmap (with
    and without a derivative), the shape that can deadlock."""
    import jax
    import jax.numpy as jnp

    from headspec.core.linalg import psd_root

    S = jnp.broadcast_to(jnp.eye(3) * 2.0, (5, 3, 3))  # (batch, n, n)
    for f in (jax.vmap(psd_root), jax.vmap(jax.jacfwd(psd_root))):
        shapes = _eigh_operand_shapes(jax.make_jaxpr(f)(S).jaxpr)
        assert shapes and all(len(s) == 2 for s in shapes), shapes


def _eigh_operand_shapes(jaxpr) -> list[tuple]:
    """The operand shapes of every eigh in ``jaxpr``, sub-programs (loops, jvp rules) included."""
    return [s for name, s in _lapack_operand_shapes(jaxpr) if name == "eigh"]


# every primitive that jaxlib 0.10 runs on CPU as a LAPACK kernel taking XLA's thread pool (the
# kernels of jaxlib/cpu/_lapack.so whose signature has an ffi::ThreadPool: all of them)
LAPACK = {
    "eigh", "eig", "cholesky", "cholesky_update", "lu", "qr", "geqrf", "geqp3",
    "householder_product", "ormqr", "svd", "triangular_solve", "schur", "hessenberg",
    "tridiagonal", "tridiagonal_solve",
}  # fmt: skip


def _lapack_operand_shapes(jaxpr) -> list[tuple[str, tuple]]:
    """(primitive, first operand's shape) of every LAPACK call in ``jaxpr``, sub-programs (loops,
    jit calls, custom rules) included."""
    from jax.extend.core import jaxprs_in_params

    out = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in LAPACK:
            out.append((eqn.primitive.name, tuple(eqn.invars[0].aval.shape)))
        for sub in jaxprs_in_params(eqn.params):
            out += _lapack_operand_shapes(sub)
    return out


ENGINE_CASES = {  # name: overrides of a SimulateConfig (engines × drift; every default path)
    "full": ["train.engine='full'", "task.D=64"],
    "reduced": ["train.engine='reduced'", "task.D=1000"],
    "diffusion, exact drift (default)": ["train.engine='diffusion'", "task.D=1000",
                                         "diffusion.n=64", "diffusion.eta2_n=64"],
    "diffusion, sampled drift": ["train.engine='diffusion'", "task.D=1000", "diffusion.n=64",
                                 "diffusion.drift='sampled'"],
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(ENGINE_CASES))
def test_every_engine_calls_lapack_one_matrix_at_a_time(case):
    """The class of the deadlock, not its example: the program of every engine's step and
    observation, over several seeds (vmap) and H = 3 heads on a two-atom law, contains no
    batched LAPACK call (an operand with more than two axes). The diffusion engine's default
    exact drift hung with 16 seeds on a batched LU (its control-variate solve) before
    ``headspec.core.linalg.solve`` looped it; with the plain ``jnp.linalg.solve`` this test
    lists that call."""
    import jax
    import jax.numpy as jnp

    from headspec.conventions import build
    from headspec.conventions.config import SimulateConfig, load_config
    from headspec.dynamics.engines.full import seed_keys

    over = [*ENGINE_CASES[case], "model.H=3", "seeds=3",
            "task.latent={kind='discrete', atoms=[[3.0, 0.0], [0.0, 3.0]], probs=[0.7, 0.3]}",
            ]  # fmt: skip
    cfg = load_config(SimulateConfig, overrides=over)
    engine = build.engine(cfg)
    keys = seed_keys(range(3))
    state = build.start(cfg, engine, keys, jnp.float64)
    base = build.risk_base(cfg.record, engine.law, cfg.task.L, cfg.model.H, n=64)

    def step_and_observe(state, train):
        new = engine.advance(state, train, jnp.int64(0), jnp.int64(4))
        return engine.observe(new, base)

    calls = _lapack_operand_shapes(jax.make_jaxpr(step_and_observe)(state, keys["train"]).jaxpr)
    batched = [(name, shape) for name, shape in calls if len(shape) > 2]
    assert not batched, f"batched LAPACK calls (can deadlock XLA's pool): {batched}"


@pytest.mark.slow
@pytest.mark.exhaustive  # a sentinel of jaxlib's bug, not of headspec: run it when jaxlib changes
def test_the_plain_batched_eigh_still_deadlocks():
    """The reason for the loop. When this fails (a jaxlib that no longer deadlocks here),
    ``headspec.core.linalg._eigh`` can go back to a plain ``jnp.linalg.eigh``.

    Not in CI: whether the plain eigh deadlocks depends on what else the machine runs. It did
    in 60 s with the slow tier run one test at a time, and finished (no deadlock: this test
    failed) with the slow tier on two xdist workers (fresh clone, 2026-12-02). What headspec
    relies on — the looped eigh finishes — is `test_batched_eighs_running_at_once_finish`."""
    assert _run("plain", 100, limit=60.0) is None


def test_no_module_calls_lapack_outside_core_linalg():
    """Every LAPACK decomposition of the package goes through :mod:`headspec.core.linalg`'s
    one-matrix-a-call wrappers (the structural half of the test above: a new module that calls
    ``jnp.linalg.solve`` directly fails here before it can hang a user's run)."""
    import re
    from pathlib import Path

    src = Path(__file__).resolve().parents[1] / "src" / "headspec"
    allowed = {"norm", "block_diag", "matrix_rank_tol"}  # no LAPACK (norm of vectors only)
    pattern = re.compile(
        r"\b(?:jnp\.linalg|jax\.scipy\.linalg|jax\.lax\.linalg|lax\.linalg)\.(\w+)"
    )
    found = []
    for path in src.rglob("*.py"):
        if path.relative_to(src).as_posix() == "core/linalg.py":
            continue
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            found += [f"{path.relative_to(src)}:{i}: {m}" for m in pattern.findall(line)
                      if m not in allowed]  # fmt: skip
    assert not found, f"LAPACK calls outside core/linalg.py (use its wrappers): {found}"


HANG_CHILD = r"""
import os, sys
os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:2])  # two cores, as CI's machine
from headspec.apps.cli import main
sys.argv = ["headspec", "simulate", *sys.argv[1:]]
main()
"""

LOAD = "import os, time\nos.fork()\nt = time.time()\nwhile time.time() - t < 600: pass\n"


@pytest.mark.slow  # test tier: runs the CLI as a user does, beside a busy process (~2-4 min)
@pytest.mark.parametrize("engine", ["diffusion", "reduced"])
def test_default_engines_finish_with_many_seeds_beside_a_busy_process(engine, tmp_path):
    """The hang detector of issue 51: the user's reproducer (discrete law, H = 4, η = 2, the
    engine's default drift) with 1 and 64 seeds finishes, in a child pinned to two cores while
    another process keeps both busy. Before the LU was looped the diffusion engine's default
    hung at t = 0 with 16 seeds (4 of 4 tries)."""
    load = subprocess.Popen([sys.executable, "-c", LOAD])
    try:
        for seeds in (1, 64):
            out = tmp_path / f"{engine}-{seeds}.nc"
            args = ["--set", 'task.latent={kind="discrete", atoms=[[3.0,0.0],[0.0,3.0]], '
                    'probs=[0.7,0.3]}', "--H", "4", "--T", "1", "--lr", "2", "--seeds",
                    str(seeds), "--D", "1000", "--engine", engine, "--set", "record.points=4",
                    "--set", 'record.grid="linear"', "-o", str(out)]  # fmt: skip
            try:
                r = subprocess.run([sys.executable, "-c", HANG_CHILD, *args], capture_output=True,
                                   text=True, timeout=400, stdin=subprocess.DEVNULL)  # fmt: skip
            except subprocess.TimeoutExpired:
                pytest.fail(f"{engine} with {seeds} seeds did not finish in 400 s (a deadlock?)")
            assert r.returncode == 0, r.stderr[-2000:]
            assert out.is_file()
    finally:
        load.kill()
        subprocess.run(["pkill", "-f", "while time.time"], check=False)
