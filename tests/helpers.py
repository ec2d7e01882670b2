"""Helpers shared by test files (imported as ``helpers``: pytest puts tests/ on ``sys.path``)."""

from __future__ import annotations

import contextlib
import signal
import threading

import numpy as np


@contextlib.contextmanager
def sigint_not_ignored():
    """A child inherits an ignored SIGINT (pytest-xdist workers ignore it) and headspec keeps an
    inherited "ignore" (nohup's meaning), while a handler is reset to the default by exec: set
    Python's handler around the spawn. Only off the main thread (where signal handlers cannot be
    set) a ``preexec_fn`` resets it in the child — that forces a fork of a multithreaded JAX
    process, which Python warns may deadlock, so it is the fallback, not the rule."""
    old = signal.getsignal(signal.SIGINT)
    if old is not signal.SIG_IGN:
        yield None
    elif threading.current_thread() is not threading.main_thread():
        yield lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)
    else:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            yield None
        finally:
            signal.signal(signal.SIGINT, old)


def cli_output(result) -> str:
    """A typer/click test result's stdout and stderr together (click ≥ 8.2 interleaves both in
    ``output``; older click has no separate stderr)."""
    text = result.output
    try:
        stderr = result.stderr
    except (ValueError, AttributeError):
        stderr = ""
    return text if stderr in text else text + stderr


def claims_by_id(outcome) -> dict:
    """An outcome's claims by id (each id once)."""
    ids = [c.id for c in outcome.claims]
    assert len(set(ids)) == len(ids), ids
    return {c.id: c for c in outcome.claims}


def assert_reasoned(claim) -> None:
    """A claim with a verdict is decided by a tolerance that says why (itself or, for a claim
    with parts, every part with a verdict); a measured-only claim has neither."""
    if claim.all_of:
        assert claim.tolerance is None, claim.id
        for part in claim.all_of:
            assert_reasoned(part)
        return
    if claim.tolerance is None:
        assert claim.verdict is None, claim.id
    else:
        assert claim.verdict is not None and len(claim.tolerance.why) > 20, claim.id
        assert claim.reason, claim.id  # the check, as text


# ----------------------------------------------------------------------------- split maps
def synthetic_split(sizes, kind, rate, risk, H, F=2):
    """A synthetic classified split (no solve): its state is a recognisable constant."""
    from headspec.dynamics.problem import OrderParameters
    from headspec.dynamics.splitmap import SplitPoint
    from headspec.dynamics.splits import split_name

    found = kind != "no fixed point"
    nan = float("nan")
    labels = np.repeat(np.arange(len(sizes)), sizes)
    state = OrderParameters(np.full((H, F), rate), np.eye(H), np.zeros(H)) if found else None
    return SplitPoint(tuple(sizes), split_name(labels, J=2), found, kind,
                      risk if found else nan, rate if found else nan, 1e-4 if found else nan,
                      int(kind == "saddle"), int(kind == "marginal"), "common" if found else "",
                      1.0 if found else nan, state)  # fmt: skip


def synthetic_splits(cfg):
    """Every split of cfg's H over two directions, with kinds that depend on the amplitude: the
    concentrated splits are saddles below a = 2.5, minima from it on; the balanced one a minimum."""
    from headspec.dynamics.splitmap import is_balanced, splits_of

    H, a = cfg.model.H, cfg.task.latent.scale
    pts = []
    for sizes in splits_of(H, 2):
        if len(sizes) == 1:  # all heads on one direction: no fixed point
            pts.append(synthetic_split(sizes, "no fixed point", 0, 0, H))
        elif is_balanced(sizes, 2):
            pts.append(synthetic_split(sizes, "minimum", -0.002, 0.10, H))
        else:
            kind = "minimum" if a >= 2.5 else "saddle"
            pts.append(synthetic_split(sizes, kind, -0.001 if a >= 2.5 else 0.004, 0.12, H))
    return pts, np.array([[a, 0.0], [0.0, a]])


def softmax_engine(cls, law, L: int, D, H: int, lr, **given):
    """An engine of class ``cls`` (FullEngine, ReducedEngine, DiffusionEngine) for softmax heads:
    batch 1, η = η_b = ``lr``, constant schedule; ``given`` adds the class's own fields."""
    import jax.numpy as jnp

    from headspec.core.attention import Softmax
    from headspec.core.model import Model
    from headspec.core.schedules import Constant

    lr = jnp.asarray(lr)
    return cls(model=Model(Softmax(), law, L), D=D, H=H, B=1, lr=lr, lr_b=lr,
               schedule=Constant(), **given)  # fmt: skip


def covering(xs, ys, *, ids=None):
    """The pairs of ``xs`` × ``ys`` as pytest parameters (each pair a tuple ``x, y``, ``x`` a
    tuple itself where the test takes several arguments from it): a subset that covers every x
    and every y — the i-th x with the (i mod |ys|)-th y, or the j-th y with the (j mod |xs|)-th x
    where ys are more — stays in the README tier, the other pairs are marked slow (CI runs
    them). ``ids(x, y)``: the pair's test id."""
    import pytest

    xs, ys = list(xs), list(ys)
    out = []
    for i, x in enumerate(xs):
        for j, y in enumerate(ys):
            first = j == i % len(ys) if len(xs) >= len(ys) else i == j % len(xs)
            values = (*x, y) if isinstance(x, tuple) else (x, y)
            out.append(pytest.param(*values, marks=() if first else pytest.mark.slow,
                                    id=None if ids is None else ids(x, y)))  # fmt: skip
    return out
