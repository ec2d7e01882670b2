"""Helpers shared by test files (imported as ``helpers``: pytest puts tests/ on ``sys.path``)."""

from __future__ import annotations

import contextlib
import signal
import threading


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
