"""The `headspec` command line: one command per job, over the same functions as the Python API.

Every command takes ``--config FILE.toml`` and repeatable ``--set key.path=value`` overrides;
bad input gives a message that names the field and the fix, exit code 2 and no output file.

Modules: ``common`` (the app, consoles, errors, option types, progress bars), ``figures``
(figure formats and files), ``interrupts`` (Ctrl-C and SIGTERM: one line, exit 130 or 143), and
one per command group, each registering its commands on ``app``
when imported here: ``run`` (bayes, simulate, theory), ``analyse`` (compare, prune, plot),
``saddles``, ``reproduce``, ``study`` (the studies of headspec.apps.studies), ``sweep`` (the
sweep sub-commands).
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

# Before equinox is first imported (it reads the variable once): in headspec's own processes a
# failed runtime check inside a compiled program (equinox's `error_if`, used by diffrax, e.g.
# "VirtualBrownianTree evaluated outside its range") returns NaN — which the engines already
# mark as a failed seed, with its check — instead of raising through a host callback. JAX never
# writes a program with a host callback to its persistent compilation cache, so with "raise" the
# diffusion engine's step program (27 s to compile at -O0) was compiled again by every command.
# A value of your own for EQX_ON_ERROR is kept. The Python API leaves it to the caller.
os.environ.setdefault("EQX_ON_ERROR", "nan")

import typer

from headspec.apps.cli.common import app, out
from headspec.conventions.disk import WRITE_CAUSES, WriteError, write_error

# Importing a command module registers its commands on `app`; the import order is the order of
# the commands in `headspec --help`.
# isort: split
from headspec.apps.cli import run  # noqa: F401

# isort: split
from headspec.apps.cli import analyse, reproduce, saddles, study, sweep  # noqa: F401

__all__ = ["app", "main"]


def version_callback(value: bool):
    if value:
        from headspec.conventions.provenance import version_line

        out.print(version_line(), markup=False, highlight=False)
        raise typer.Exit()


EXIT_CODES = (
    "Exit codes: 0 success; 1 part of the work failed, the rest done (reproduce, sweep); "
    "2 bad input, refused before any work, nothing written; 3 diverged or NaN (simulate, theory, "
    "bayes, sweep); 130 interrupted by Ctrl-C (SIGINT), 143 by SIGTERM: finished work is kept."
)


@app.callback(epilog=EXIT_CODES)
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=version_callback,
            is_eager=True,
            help="Show the version (and the git commit, in a checkout).",
        ),
    ] = False,
):
    """headspec: how attention heads specialise, in simulation and theory."""


HELP_WORDS = frozenset({"-h", "--help", "--version"})


def _only_help(args: list[str]) -> bool:
    """Whether the command line only asks for help or the version (nothing is computed): no
    arguments, or -h/--help/--version before any ``--`` (JAX takes ~2 s to load, the rest of a
    help screen ~0.5 s)."""
    words = args[: args.index("--")] if "--" in args else args
    return not words or not HELP_WORDS.isdisjoint(words)


PATH_OPTIONS = ("-o", "--out", "--out-dir", "--json", "-c", "--config", "--init-from", "--from")


def _empty_path(args: list[str]) -> str | None:
    """The first path option given an empty value (``--out ''`` or ``--out=``): Click reads it
    as the current folder, and a command would write there."""
    for i, a in enumerate(args[: args.index("--")] if "--" in args else args):
        name, eq, value = a.partition("=")
        if name in PATH_OPTIONS and (
            (eq and not value.strip()) or (not eq and i + 1 < len(args) and not args[i + 1].strip())
        ):
            return name
    return None


def main() -> None:
    """Console entry point. The command line is a process of its own, so it simply runs JAX in
    64-bit mode throughout (the library's entry points choose it locally either way). Ctrl-C and
    SIGTERM: see headspec.apps.cli.interrupts."""
    from headspec.apps.cli import interrupts

    interrupts.install()
    empty = _empty_path(sys.argv[1:])
    if empty is not None:
        from headspec.apps.cli.common import err

        err.print(f"error: {empty} is empty; fix: give a path (a file or folder name)",
                  markup=False, highlight=False, style="red")  # fmt: skip
        sys.exit(2)
    try:
        if not _only_help(sys.argv[1:]):  # help and --version answer without loading JAX
            import jax

            from headspec.conventions.provenance import enable_compilation_cache
            from headspec.core.compiles import collect_less

            jax.config.update("jax_enable_x64", True)
            enable_compilation_cache()
            collect_less()
        app()  # exits through SystemExit (Typer's standalone mode)
        code = 0
    except SystemExit as e:
        code = e.code
    except OSError as e:  # a full disk, a vanished folder: one line (finished work is kept)
        if not isinstance(e, WriteError):
            if e.errno not in WRITE_CAUSES:
                raise
            e = write_error(e.filename or "a file", e)
        from headspec.apps.cli.common import err

        err.print(f"error: {e}", markup=False, highlight=False, soft_wrap=True, style="red")
        code = 1
    except KeyboardInterrupt:  # before the command started (importing JAX)
        code = 130
    sys.exit(interrupts.finish(code))
