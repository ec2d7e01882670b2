"""Writing files so that a crash never leaves a half-written one: one atomic write for all.

Every file headspec writes (results, sweep manifests and points, figures, the reproduce report,
JSON summaries) goes through :func:`atomic_path`:

1. the output path is resolved (``os.path.realpath``): a symlinked output is written *through*,
   the link stays and its target gets the new content;
2. the content goes to a temporary file ``.NAME.HOST.PID.RANDOM.tmp`` beside the real target,
   created like :func:`open` creates a file: mode ``0o666`` less the umask (and any default ACL
   of the folder), or, when the target already exists, the target's permission bits;
3. the temporary file is fsync'ed, renamed over the target (atomic on POSIX), and the folder is
   fsync'ed so the rename itself survives a power loss.

A reader therefore sees the old file or the whole new one, never an empty or partial file under
the target's name — also after ``kill -9`` or a power cut. A process killed between writing and
renaming leaves its temporary file behind (hidden, clearly temporary, never read by headspec).
The next write of the same target deletes such leftovers: those of a process of this machine
(HOST is a hash of the host name) that no longer runs, and any older than a day;
``headspec sweep`` also deletes those of its point files when it ends.

Example:
    >>> import json, pathlib, tempfile
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "a.json"
    >>> write_json_atomic(p, {"x": 1})
    >>> json.loads(p.read_text())
    {'x': 1}
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import stat
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

_SUFFIX = ".tmp"
STALE_AFTER_S = 24 * 3600.0  # a leftover of another machine is removed after this long
_HOST = f"{zlib.crc32(socket.gethostname().encode()):08x}"
_LIVE: set[str] = set()  # names of this process's temporary files being written


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path to write to; on success it is fsync'ed and renamed over ``path`` (a
    symlink is followed: its target is replaced), then the folder is fsync'ed. On any error (or
    interrupt) the temporary file is removed and ``path`` is left as it was."""
    real = Path(os.path.realpath(path))
    _remove_leftovers(real)
    tmp = _create_temp(real)
    _LIVE.add(tmp.name)
    try:
        yield tmp
        _copy_mode(real, tmp)
        # by name: the writer used (and closed) its own handles; fsync flushes the file's data
        fd = os.open(tmp, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, real)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        _LIVE.discard(tmp.name)
    _fsync_dir(real.parent)


def write_atomic(path: str | Path, write: Callable[[Path], object]) -> Path:
    """Call ``write(tmp_path)`` and move the result to ``path`` atomically (see the module's
    docstring). ``tmp_path`` ends in ``.tmp``: writers that infer a format from the file name
    (matplotlib's ``savefig``) must be given it (``format=``). Returns ``path`` as given."""
    with atomic_path(path) as tmp:
        write(tmp)
    return Path(path)


def write_json_atomic(path: str | Path, data: dict) -> None:
    """Write JSON (indented, UTF-8) atomically."""

    def write(tmp: Path) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, ensure_ascii=False)
            f.write("\n")

    write_atomic(path, write)


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write a text file (UTF-8) atomically."""
    write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


# ----------------------------------------------------------------------------- internals
def _create_temp(real: Path) -> Path:
    """A new, empty ``.NAME.HOST.PID.RANDOM.tmp`` beside ``real``.

    Created with ``os.open(..., 0o666)``, so the kernel applies the umask (and a default ACL)
    exactly as for any ``open()`` — unlike ``tempfile.mkstemp``, which makes every file 0600."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        tmp = real.parent / f".{real.name}.{_HOST}.{os.getpid()}.{secrets.token_hex(4)}{_SUFFIX}"
        try:
            os.close(os.open(tmp, flags, 0o666))
        except FileExistsError:
            continue
        return tmp
    raise FileExistsError(f"no free temporary name beside {real}")  # pragma: no cover


def _copy_mode(real: Path, tmp: Path) -> None:
    """An existing target keeps its permission bits, as when ``open()`` overwrites a file (set
    after writing, so that a read-only target can still be replaced)."""
    try:
        st = os.stat(real)
    except FileNotFoundError:
        return
    if stat.S_ISREG(st.st_mode):
        os.chmod(tmp, stat.S_IMODE(st.st_mode) & 0o777)


def _leftover_owner(name: str, prefix: str) -> tuple[str, int] | None:
    """(host hash, pid) of a temporary file of this module for the target ``prefix`` names."""
    if not (name.startswith(prefix) and name.endswith(_SUFFIX)):
        return None
    parts = name[len(prefix) : -len(_SUFFIX)].split(".")
    hexdigits = set("0123456789abcdef")
    if (
        len(parts) != 3
        or len(parts[0]) != 8
        or not set(parts[0]) <= hexdigits
        or not parts[1].isdigit()
        or len(parts[2]) != 8
        or not set(parts[2]) <= hexdigits
    ):
        return None
    return parts[0], int(parts[1])


def _is_dead(name: str, host: str, pid: int, mtime: float) -> bool:
    """The writer of a temporary file is gone: it is older than a day, or its process (of this
    machine) has ended — this process's own files count as gone unless being written now."""
    if time.time() - mtime > STALE_AFTER_S:
        return True
    if host != _HOST or os.name != "posix":  # os.kill(pid, 0) would kill on Windows
        return False
    if pid == os.getpid():
        return name not in _LIVE
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # PermissionError: alive, another user's
        return False
    return False


def _remove_leftovers(real: Path) -> None:
    """Delete temporary files of earlier writes of ``real`` whose writer died between creating
    and renaming them. Best effort, never raises."""
    prefix = f".{real.name}."
    try:
        with os.scandir(real.parent) as it:
            found = [(e, o) for e in it if (o := _leftover_owner(e.name, prefix))]
    except OSError:
        return
    for entry, owner in found:
        try:
            if _is_dead(entry.name, *owner, entry.stat(follow_symlinks=False).st_mtime):
                os.unlink(entry.path)
        except OSError:
            pass


def _fsync_dir(folder: Path) -> None:
    """fsync a folder so that a rename in it is durable; file systems that cannot (and
    platforms without directory descriptors) are skipped."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
