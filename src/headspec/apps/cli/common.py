"""What every command shares: the Typer app, the two consoles, error exits, option types, bars.

Messages for the user go to ``err`` (stderr), results to ``out`` (stdout). Bad input ends with
``fail``: ``error: …`` on stderr and exit code 2, before any output file is written.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

app = typer.Typer(
    name="headspec",
    help="Multi-head attention on the high-dimensional single-location model "
    "(Sagitova, Duranthon, Zdeborová 2026): simulation, theory, Bayes-optimal risk.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_enable=False,
    add_completion=True,
    rich_markup_mode="markdown",  # docstring paragraphs are re-flowed, not broken mid-sentence
)
out = Console()
err = Console(stderr=True)


def _flags_without_type() -> None:
    """Show flags (``--plot/--no-plot``, ``--force``, ``--help``) in ``--help`` without a type.

    Recent Typer versions print ``<bool>`` beside every flag, which reads as if it took a value
    (``--plot true``, which is then refused); a flag takes none. Applied once, to Typer's option
    class (there is no per-app setting); a Typer without that method is left as it is.
    """
    from typer.core import TyperOption

    shown = getattr(TyperOption, "display_type_rich", None)
    if shown is None or getattr(shown, "_flags_without_type", False):
        return

    def display_type_rich(self, ctx):
        return None if self.is_flag else shown(self, ctx)

    display_type_rich._flags_without_type = True
    TyperOption.display_type_rich = display_type_rich


_flags_without_type()


#: settings a refusal from headspec.conventions names, and the option of the running command
#: that sets them: a config key keeps its name with the option beside it ("task.D (--D)"); a
#: command's own setting (not in any config: ``prune.n``) becomes its option ("--n")
FLAGS = {"task.D": "--D", "task.L": "--L", "train.engine": "--engine", "bayes.samples": "--samples",
         "bayes.route": "--route", "prune.n": "--n",
         "prune.random_orders": "--random-orders", "saddles.n": "--n"}  # fmt: skip
_OWN = ("prune.", "saddles.")
_COMMANDS = {"SimulateConfig": "simulate", "TheoryConfig": "theory", "BayesRunConfig": "bayes"}


def with_flags(message: str, command: str) -> str:
    """``message`` with each setting of :data:`FLAGS` that ``command`` (``"simulate"``) has an
    option for shown with (or, for a command's own setting, as) that option."""
    import re

    cmd = typer.main.get_command(app).commands.get(command)
    opts = {o for p in getattr(cmd, "params", ()) for o in getattr(p, "opts", ())}
    for name, flag in FLAGS.items():
        if flag in opts:
            new = flag if name.startswith(_OWN) else f"{name} ({flag})"
            message = re.sub(rf"(?<![\w.]){re.escape(name)}(?![\w.]| \()", new, message)
    return message


def fail(message: str, code: int = 2):
    """Print ``error: …`` on stderr and exit with ``code`` (2: bad input)."""
    err.print("error: " + message, markup=False, highlight=False, soft_wrap=True, style="red")
    raise typer.Exit(code)


def _writable(folder: Path) -> bool:
    """Whether a file can really be created in ``folder`` (tried: permissions alone do not tell,
    e.g. for root in a read-only or virtual file system such as /proc)."""
    from headspec.conventions.io import can_create_in

    return can_create_in(str(folder))


def check_paths(outputs, inputs=(), managed=(), make_folders: bool = False) -> None:
    """Refuse, before any work, an output that cannot be written or would destroy a file of the
    user's: an input, another output, a file the command keeps for itself (``managed``), a
    write-protected file, a symlink loop or one into a missing folder, a name over the file
    system's limit (headspec.conventions.io.check_outputs). Arguments are ``(label, path)``."""
    from headspec.conventions.io import PathError, check_outputs

    try:
        check_outputs(list(outputs), list(inputs), list(managed), make_folders)
    except PathError as e:
        fail(str(e))
    _check_free_space([p for _, p in outputs if p is not None])


def _check_free_space(paths) -> None:
    """Refuse, before any work, an output on a disk that is already (nearly) full: less than
    headspec.conventions.disk.HEADROOM free where it would be written."""
    from headspec.conventions.disk import HEADROOM, free_bytes

    for path in paths:
        folder = Path(os.path.realpath(path)).parent
        while not folder.is_dir() and folder != folder.parent:
            folder = folder.parent  # a folder the command will create: the disk it will be on
        free = free_bytes(folder)
        if free is not None and free < HEADROOM:
            fail(
                f"the disk of {str(path)!r} is full ({free / 2**20:.2f} MiB free, at least "
                f"{HEADROOM >> 20} MiB needed); fix: free space on it or write elsewhere"
            )


def figure_paths(folder: Path, stem: str, names, fmts) -> list[tuple[str, Path]]:
    """``(label, path)`` of the figures ``folder/{stem}_{name}.{fmt}`` a command will write."""
    return [("the figure", folder / f"{stem}_{n}.{f}") for n in names for f in fmts]


def check_output_path(path: Path | None, option: str = "--out", inputs=(), also=()) -> None:
    """Refuse an output path whose folder is missing or not writable, or that is a folder, or
    any of check_paths' refusals against ``inputs`` and the command's other outputs ``also`` —
    before any work, so that no computation is lost to a late error."""
    if path is None:
        return
    check_paths([(option, path), *also], inputs)


def check_output_dir(folder: Path | None, option: str = "--out-dir") -> None:
    """Refuse an output folder that is a file, or that cannot be created or written in."""
    if folder is None:
        return
    if folder.exists() and not folder.is_dir():
        fail(f"{option} {str(folder)!r} is a file; fix: give a folder")
    probe = folder
    while not probe.exists():  # the nearest existing ancestor is where it will be created
        probe = probe.parent
    if not probe.is_dir() or not _writable(probe):
        fail(f"cannot write in {option} {str(folder)!r}; fix: choose a writable folder")
    _check_free_space([folder / "-"])


def load_or_fail(
    model,
    config: Path | None,
    overrides: list[str],
    out_path: Path | None,
    base: dict | None = None,
    option: str = "--out",
    inputs=(),
    also=(),
    command: str | None = None,
):
    """The validated config, or exit 2 with its message; then refuse a run that cannot fit in
    memory or never ends (headspec.conventions.budget) and a bad output path (``option``, and
    the command's other outputs ``also``) — one that would overwrite the config, ``inputs`` or
    the file theory.init.path reads — all before any work. ``command``: whose options the
    refusal names (default: simulate, theory or bayes, by ``model``)."""
    from headspec.conventions.budget import check_budget
    from headspec.conventions.config import ConfigError, load_config

    try:
        cfg = load_config(model, config, overrides, base=base)
    except ConfigError as e:
        fail(str(e))
    try:
        check_budget(cfg)
    except ConfigError as e:
        fail(with_flags(str(e), command or _COMMANDS.get(model.__name__, "")))
    init = getattr(getattr(cfg, "theory", None), "init", None)
    init_path = getattr(init, "path", None)
    inputs = [("--config", config), *inputs]
    if init_path is not None:
        inputs.append(("theory.init.path", Path(init_path)))
    check_output_path(out_path, option, inputs, also)
    return cfg


def load_result_seed(path: Path, seed: int | None, trained: bool = False):
    """A result file and the index of ``--seed`` in it (the first seed by default), or exit 2.
    ``trained``: the command analyses the seed's trained state (prune, saddles), so a seed that
    diverged is refused with exit 3, naming the time and the seeds that did not."""
    import numpy as np

    from headspec.conventions import results

    try:
        ds = results.load(path)
    except results.ResultError as e:
        fail(str(e))
    seeds = [int(s) for s in ds.seed.values]
    if seed is not None and seed not in seeds:
        fail(f"--seed {seed} is not in {path}; fix: use one of {seeds}")
    i = 0 if seed is None else seeds.index(seed)
    failed = np.asarray(ds.failed.values, dtype=bool)
    if trained and failed[i]:
        ok = [s for s, f in zip(seeds, failed, strict=True) if not f]
        fix = f"--seed {ok[0]} (seeds that did not: {ok})" if ok else "rerun at a lower train.lr"
        fail(f"seed {seeds[i]} of {path} diverged at t = {float(ds.fail_t.values[i]):g}: it has "
             f"no trained state to analyse; fix: {fix}", code=3)  # fmt: skip
    return ds, i


def collect_overrides(
    set_: list[str] | None,
    pairs: Iterable[tuple[str, object]],
    strings: Iterable[tuple[str, str | None]] = (),
    latent: str | None = None,
) -> list[str]:
    """Turn shortcut options into dotted overrides (numbers as-is, strings TOML-quoted).

    Order: the ``--set`` overrides, then ``latent`` (a TOML inline table that replaces the whole
    task.latent), then the shortcuts, so that e.g. ``--scale`` applies to the new ``--latent``.
    """
    overrides = list(set_ or [])
    if latent is not None:
        overrides.append(f"task.latent={latent}")
    for key, val in pairs:
        if val is not None:
            overrides.append(f"{key}={val}")
    for key, val in strings:
        if val is not None:
            overrides.append(f"{key}={json.dumps(val)}")
    return overrides


def progress_bar(count_text: str, eta: bool = True) -> Progress:
    """A progress bar on stderr: description, bar, ``count_text``, time elapsed (and left).

    ``count_text`` is a rich ``TextColumn`` format over ``task``, e.g. ``counted("steps")`` or
    ``"t = {task.completed:.3g} / {task.total:.3g}"``; ``eta`` adds the estimated time left.
    """
    columns: list[ProgressColumn] = [
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        TextColumn(count_text),
        TimeElapsedColumn(),
    ]
    if eta:
        columns.append(TimeRemainingColumn())
    return Progress(*columns, console=err)


def plural(n: int, word: str) -> str:
    """``1 seed``, ``2 seeds`` (English plural by an s)."""
    return f"{n} {word}" + ("" if n == 1 else "s")


def banner(head: str, parts: Iterable[str]) -> None:
    """Print ``head: part, part, …`` on stderr, wrapped between parts — never inside one, so that
    ``η = 0.5`` or ``D = 1000`` stay whole — to the width of the terminal."""
    from rich.cells import cell_len

    parts = list(parts)
    lines, line = [], f"{head}:"
    for i, part in enumerate(parts):
        piece = part + ("," if i < len(parts) - 1 else "")
        if cell_len(line) + 1 + cell_len(piece) > err.width and line.strip():
            lines.append(line)
            line = " " + piece
        else:
            line += " " + piece
    lines.append(line)
    err.print("\n".join(lines), markup=False, highlight=False, soft_wrap=True)


def counted(unit: str) -> str:
    """The ``count_text`` of a bar that counts whole things: ``1,200/5,000 steps``."""
    return "{task.completed:,}/{task.total:,} " + unit


# ----------------------------------------------------------------------------- option types
# Only options whose flag and help text are the same in every command that takes them; the
# default value stays in each command's signature.
ConfigOpt = Annotated[
    Path | None, typer.Option("--config", "-c", help="TOML config file (see experiments/).")
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        "-s",
        help="Override a config key, repeatable: --set task.L=20 "
        "--set 'task.latent={kind=\"spike\", a=[3.0]}'. Values are TOML values (a bare word "
        "such as softmax1 only where the key takes text).",
    ),
]
HOpt = Annotated[int | None, typer.Option("--H", help="Heads (model.H).")]
LOpt = Annotated[int | None, typer.Option("--L", help="Tokens per sequence (task.L).")]
ActivationOpt = Annotated[
    str | None, typer.Option("--activation", "-a", help="softmax | softmax1 | bayes_softmax.")
]
ResultOutOpt = Annotated[Path, typer.Option("--out", "-o", help="Result file (netCDF).")]
ResultArg = Annotated[Path, typer.Argument(help="A result file written by simulate or theory.")]
LatentOpt = Annotated[
    str | None,
    typer.Option(
        "--latent",
        help="Latent law as a TOML inline table (replaces task.latent). Kinds: spike (a), "
        "flipped_spike (a: ±a with probability ½), discrete (atoms, probs), gaussian (mean, var or "
        "cov); e.g. '{kind=\"flipped_spike\", a=[2.0]}'.",
    ),
]
ScaleOpt = Annotated[
    float | None, typer.Option("--scale", help="Signal strength c: θ → cθ (task.latent.scale).")
]


# --- a Dask scheduler to run on (reproduce, sweep): the same options, one check
_SCHEDULER_HELP = (
    "Address of an existing Dask scheduler (tcp://host:8786, or tls://host:8786 with the "
    "--tls-* options); its workers need headspec installed{extra}. The scheduler is trusted "
    "(Dask moves pickles). Default: {default}."
)


def scheduler_option(extra: str, default: str):
    """The ``--scheduler`` option, its help completed with what this command needs of the
    workers (``extra``) and what it does without the option (``default``)."""
    return typer.Option("--scheduler", help=_SCHEDULER_HELP.format(extra=extra, default=default))


TlsCaFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--tls-ca-file", help="TLS: certificate authority of the --scheduler's certificate."
    ),
]
TlsCertOpt = Annotated[
    Path | None, typer.Option("--tls-cert", help="TLS: this client's certificate (PEM).")
]
TlsKeyOpt = Annotated[
    Path | None,
    typer.Option("--tls-key", help="TLS: this client's private key (if not in --tls-cert)."),
]


def check_scheduler_options(scheduler, ca_file, cert, key, timeout=None, workers=None):
    """Refuse a --scheduler address of bad syntax, TLS options without a tls:// scheduler,
    missing TLS files, a non-positive --connect-timeout and a local cluster of more --workers
    than the machine can run at once, before anything is made; returns the
    ``distributed.security.Security`` of the TLS options (None without them)."""
    import math

    from headspec.apps import sweep as sw

    if scheduler is None and workers is not None:
        try:
            sw.check_workers(workers)
        except sw.SweepError as e:
            fail(str(e))
    tls = any(x is not None for x in (ca_file, cert, key))
    if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
        fail(f"--connect-timeout {timeout} is not a positive time; fix: give seconds, e.g. 10")
    if scheduler is None:
        if tls or timeout is not None:
            option = "--connect-timeout" if not tls else "--tls-ca-file/--tls-cert/--tls-key"
            fail(f"{option} is for a remote --scheduler; fix: add --scheduler ADDRESS, or drop "
                 f"{option} (the local cluster needs none)")  # fmt: skip
        return None
    try:
        address = sw.check_scheduler(scheduler)
        if tls and not address.startswith(("tls://", "wss://")):
            fail(f"--scheduler {scheduler!r} is not a TLS address but --tls-* options are "
                 f"given; fix: use tls://{address.split('://', 1)[1]}, or drop the --tls-* "
                 "options")  # fmt: skip
        return sw.tls_security(ca_file, cert, key) if tls else None
    except sw.SweepError as e:
        fail(str(e))
