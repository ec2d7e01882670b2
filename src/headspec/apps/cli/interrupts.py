"""Ctrl-C (SIGINT) and SIGTERM: a command stops within seconds, says so in one line on stderr
and exits 128 + the signal's number — 130 for Ctrl-C, 143 for SIGTERM (the shell convention, so
that a batch system or a script can tell the two apart).

One mechanism for every command:

- :func:`install` (called by the console entry point, ``headspec.apps.cli.main``) makes the
  first SIGINT or SIGTERM raise :class:`Interrupted` — a ``KeyboardInterrupt`` that knows its
  signal — in the main thread. A signal inherited as ignored (``nohup``, a background job of a
  script) stays ignored.
- A command that computes wraps its work in :func:`on_interrupt`: the exception unwinds the
  work (progress bars stop, a local Dask cluster is closed, the threads of ``reproduce`` are told
  to stop, a sweep writes its manifest), then one line ``interrupted: NOTE`` is printed and the
  command exits 128 + signal. Files are written atomically (headspec.conventions.io), so an
  interrupted write leaves the old file or none, never half of one.
- A second signal while that cleanup runs, or a signal while the process exits (after the
  command's work: JAX's exit handlers take seconds), ends the process at once with the same code
  and, unless it was printed already, the same kind of line — never a traceback.
- :func:`finish` ends an interrupted command with ``os._exit``: a thread inside a computation
  (a recipe's analysis in JAX) cannot be stopped from outside, and is not waited for.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable, Iterator

import typer

from headspec.apps.cli.common import err


class Interrupted(KeyboardInterrupt):
    """The first SIGINT or SIGTERM of the command (raised by the handler of :func:`install`)."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)


class _State:
    signum: int | None = None  # the first signal received (None: not interrupted)
    reported = False  # the "interrupted: …" line is printed
    exiting = False  # the command has returned: a signal now ends the process at once


def install() -> None:
    """Handle SIGINT and SIGTERM as described in the module's docstring (main thread only)."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, _handler)
    if not getattr(sys.unraisablehook, "_headspec", False):
        sys.unraisablehook = _redeliver(sys.unraisablehook)


def _redeliver(hook):
    """``sys.unraisablehook`` that gives a swallowed interruption back to the main thread.

    The handler's exception is lost where Python cannot raise: a signal that arrives while a
    garbage-collection callback runs (JAX registers one, ``_xla_gc_callback``) raises inside it,
    Python prints "Exception ignored in …" and the command went on computing — a SIGTERM during a
    cold compile left ``headspec simulate`` running past 60 s. The signal is delivered again
    from another thread 50 ms later (``_thread.interrupt_main``; at once, the handler would run
    inside this hook, where it is swallowed too), so it raises in the main thread's own code;
    should it land in a callback again, this hook sends it once more."""
    import _thread
    import threading

    def _hook(unraisable):
        exc = unraisable.exc_value
        if isinstance(exc, Interrupted) and _State.signum == exc.signum and not _State.exiting:
            _State.signum = None  # the handler raises again instead of ending at once
            timer = threading.Timer(0.05, _thread.interrupt_main, (exc.signum,))
            timer.daemon = True  # after this hook and the callback have returned
            timer.start()
            return
        hook(unraisable)

    _hook._headspec = True
    return _hook


def _handler(signum, frame) -> None:
    if _State.signum is None and not _State.exiting:
        _State.signum = signum
        raise Interrupted(signum)
    _exit_now(_State.signum or signum)


def _by(signum: int) -> str:
    return "" if signum == signal.SIGINT else f" by {signal.Signals(signum).name}"


def exit_code(exc: BaseException) -> int:
    """128 + the signal of an interruption (130 for a plain ``KeyboardInterrupt``)."""
    return 128 + getattr(exc, "signum", signal.SIGINT)


def report(note: str, signum: int = signal.SIGINT) -> None:
    """Print the one line of an interruption: ``interrupted[ by SIGTERM]: NOTE``."""
    _State.reported = True
    text = f"interrupted{_by(signum)}" + (f": {note}" if note else "")
    err.print(text, markup=False, highlight=False, soft_wrap=True)


@contextlib.contextmanager
def on_interrupt(note: str | Callable[[], str] = "") -> Iterator[None]:
    """Turn an interruption of the work inside into one line (``note``, or what it returns when
    called after the cleanup: e.g. how many runs are kept) and exit 128 + signal."""
    try:
        yield
    except KeyboardInterrupt as e:
        report(note() if callable(note) else note, getattr(e, "signum", signal.SIGINT))
        raise typer.Exit(exit_code(e)) from None


def not_written(path, since: float) -> str:
    """The note of a command whose result file is ``path``: whether it got written (after
    ``since``, a ``time.time()``) before the interruption."""
    try:
        if os.stat(path).st_mtime >= since:
            return f"{path} was written before the interrupt"
    except OSError:
        pass
    return f"nothing written to {path}"


def finish(code) -> int:
    """The exit code of the command line, after ``app()`` returned ``code``; from now on a
    signal ends the process at once. An interrupted command ends here, with os._exit: threads
    still computing (``reproduce``'s recipes) are not waited for, and the exit handlers (JAX's
    take seconds) are skipped — the command has cleaned up what it made as it unwound."""
    _State.exiting = True
    if _State.signum is None:
        return code
    if not _State.reported:  # a command without on_interrupt
        report("", _State.signum)
    _reap_children()
    _flush()
    os._exit(128 + _State.signum)


def _reap_children() -> None:
    """Collect the exit status of child processes that have ended (a local cluster's workers,
    just stopped), so that none is left a zombie for init to find."""
    mp = sys.modules.get("multiprocessing")
    if mp is not None:
        with contextlib.suppress(Exception):
            mp.active_children()


def _exit_now(signum: int) -> None:
    if not _State.reported:
        _State.reported = True
        line = f"interrupted{_by(signum)}: stopped at once\n"
        if _State.exiting:
            line = f"interrupted{_by(signum)} while exiting, after the command's work was done\n"
        with contextlib.suppress(OSError):
            os.write(2, line.encode())
    _flush()
    os._exit(128 + signum)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
