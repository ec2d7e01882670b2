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
