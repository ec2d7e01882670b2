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
import errno
import json
import math
import os
import secrets
import socket
import stat
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

from headspec.conventions.disk import WriteError, check_room, write_error

_SUFFIX = ".tmp"
STALE_AFTER_S = 24 * 3600.0  # a leftover of another machine is removed after this long
_HOST = f"{zlib.crc32(socket.gethostname().encode()):08x}"
_LIVE: set[str] = set()  # names of this process's temporary files being written


@contextlib.contextmanager
def atomic_path(path: str | Path, size: int = 0) -> Iterator[Path]:
    """A temporary path to write to; on success it is fsync'ed and renamed over ``path`` (a
    symlink is followed: its target is replaced), then the folder is fsync'ed. On any error (or
    interrupt) the temporary file is removed and ``path`` is left as it was; an OS error of the
    write (a full disk, a vanished folder) becomes one :class:`WriteError`. ``size`` (bytes, if
    known) is checked against the free space first (:func:`check_room`)."""
    real = Path(os.path.realpath(path))
    check_room(real, size)
    try:
        _remove_leftovers(real)
        tmp = _create_temp(real)
    except OSError as e:
        raise write_error(path, e) from e
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
    except WriteError:
        tmp.unlink(missing_ok=True)
        raise
    except (OSError, RuntimeError) as e:  # h5py raises RuntimeError for some failed writes
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        if isinstance(e, RuntimeError) and "write" not in str(e).lower():
            raise
        raise write_error(path, e) from e
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise
    finally:
        _LIVE.discard(tmp.name)
    _fsync_dir(real.parent)


def write_atomic(path: str | Path, write: Callable[[Path], object], size: int = 0) -> Path:
    """Call ``write(tmp_path)`` and move the result to ``path`` atomically (see the module's
    docstring). ``tmp_path`` ends in ``.tmp``: writers that infer a format from the file name
    (matplotlib's ``savefig``) must be given it (``format=``). ``size``: the bytes it will
    take, when known (checked against the free space first). Returns ``path`` as given."""
    with atomic_path(path, size) as tmp:
        write(tmp)
    return Path(path)


def write_json_atomic(path: str | Path, data: dict) -> None:
    """Write JSON (indented, UTF-8) atomically."""

    def write(tmp: Path) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, ensure_ascii=False)
            f.write("\n")

    write_atomic(path, write)


def json_number(x) -> float | None:
    """A number for plain JSON: a float, or None (JSON null) where it is NaN or infinite (which
    JSON cannot hold)."""
    x = float(x)
    return x if math.isfinite(x) else None


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write a text file (UTF-8) atomically."""
    write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


# ----------------------------------------------------------------------------- output checks
NAME_MAX = 255  # bytes in one file name (POSIX file systems; os.pathconf may say less)
PATH_MAX = 4096  # bytes in a whole path (Linux)


class PathError(ValueError):
    """An output that cannot be written, or must not be: the message names it and the fix."""


Labelled = tuple[str, "str | Path | None"]  # (what the user calls it: "--out", path)


def check_outputs(
    outputs: list[Labelled],
    inputs: list[Labelled] = (),  # type: ignore[assignment]
    managed: list[Labelled] = (),  # type: ignore[assignment]
    make_folders: bool = False,
) -> list[Path]:
    """Check, before any work, that every output can be written and that writing it destroys
    nothing of the user's; returns the outputs' real paths. Raises :class:`PathError`.

    ``outputs``, ``inputs`` and ``managed`` are ``(label, path)`` pairs (a None path is
    skipped): ``label`` names the path in messages (``"--out"``, ``"the figure"``). Refused:

    - an output that resolves to the same file as an input or as another output — compared after
      resolving symlinks, ``.``/``..`` and hard links (device and inode of existing files);
    - an output or input at or under a ``managed`` path (a file or folder the command keeps for
      itself, e.g. a sweep's ``manifest.json`` and ``points/``);
    - an output that cannot be resolved: a symlink loop, a name longer than the file system's
      ``NAME_MAX`` (255 bytes) or a path longer than ``PATH_MAX``, a symlink into a missing
      folder, a missing folder (unless ``make_folders``: then its nearest existing ancestor must
      be a writable folder), a folder, a device, pipe or socket, a folder where a file cannot be
      created;
    - an existing output whose permission bits forbid writing it (:func:`write_protected`): the
      atomic rename would replace it although its owner made it read-only.
    """
    outs = [(lab, p) for lab, p in outputs if p is not None]
    ins = [(lab, p) for lab, p in inputs if p is not None]
    keep = [(lab, os.path.realpath(p)) for lab, p in managed if p is not None]
    reals: list[Path] = []
    seen: dict[object, tuple[str, str, bool]] = {}  # identity → (label, path, is an input)
    for lab, p in ins:
        key = _identity(p)
        if key is not None:
            seen.setdefault(key, (lab, str(p), True))
        _not_managed(lab, p, keep, is_input=True)
    for lab, p in outs:
        real = _resolve_output(lab, p, make_folders)
        _not_managed(lab, p, keep, is_input=False)
        key = _identity(p) or ("path", real)
        if key in seen:
            other, q, is_input = seen[key]
            harm = (
                "writing it would destroy that input"
                if is_input
                else "one would overwrite the other"
            )
            raise PathError(
                f"{lab} {str(p)!r} is the same file as {other} {q!r}: {harm}; "
                f"fix: give {lab} another name"
            )
        seen[key] = (lab, str(p), False)
        reals.append(Path(real))
    return reals


def write_protected(st: os.stat_result, euid: int | None = None, groups=None) -> bool:
    """Whether the permission bits of ``st`` forbid the caller to write the file: the owner's,
    group's or others' write bit, whichever class the caller is in — and for root (who may
    write anything) a file without any write bit, which its owner made read-only on purpose.
    Decided from the mode bits, not ``os.access``, so that it holds for root too."""
    if euid is None and not hasattr(os, "geteuid"):  # not POSIX: the owner's bit
        return not st.st_mode & stat.S_IWUSR
    euid = os.geteuid() if euid is None else euid
    groups = set(os.getgroups()) | {os.getegid()} if groups is None else set(groups)
    mode = st.st_mode
    if euid == 0:
        return not mode & 0o222
    if st.st_uid == euid:
        return not mode & stat.S_IWUSR
    if st.st_gid in groups:
        return not mode & stat.S_IWGRP
    return not mode & stat.S_IWOTH


def _identity(p) -> tuple | None:
    """(device, inode) of an existing file (through symlinks), else None."""
    try:
        st = os.stat(p)
    except (OSError, ValueError):
        return None
    return ("inode", st.st_dev, st.st_ino)


def _not_managed(lab: str, p, keep: list[tuple[str, str]], is_input: bool) -> None:
    """Refuse a path at or under one that the command keeps for itself."""
    real, key = os.path.realpath(p), _identity(p)
    for mlab, m in keep:
        same = real == m or (key is not None and key == _identity(m))
        if same or real.startswith(m.rstrip(os.sep) + os.sep):
            harm = "the command writes there" if is_input else "writing it would destroy that"
            raise PathError(
                f"{lab} {str(p)!r} is {'' if same else 'inside '}{mlab} {m!r}, which the command "
                f"keeps for itself: {harm}; fix: give {lab} a path outside it"
            )


def _too_long(lab: str, p: str, real: str) -> None:
    folder = os.path.dirname(real) or "."
    while not os.path.isdir(folder) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
    try:
        name_max = min(NAME_MAX, os.pathconf(folder, "PC_NAME_MAX"))
    except (OSError, ValueError):
        name_max = NAME_MAX
    for part in (*Path(p).parts, *Path(real).parts):
        n = len(os.fsencode(part))
        if n > name_max:
            raise PathError(
                f"{lab} {p!r}: the name {part[:40]!r}… is {n} bytes, over the file system's limit "
                f"of {name_max} bytes per name; fix: give a shorter name"
            )
    if len(os.fsencode(real)) >= PATH_MAX:
        raise PathError(
            f"{lab} {p!r} is {len(os.fsencode(real))} bytes long, over the limit of {PATH_MAX} "
            "bytes per path; fix: give a shorter path"
        )


def _resolve_output(lab: str, path, make_folders: bool) -> str:
    """The real path ``path`` will be written to, checked (see :func:`check_outputs`)."""
    p = os.fspath(path)
    if p.strip() in ("-", ""):
        raise PathError(f"{lab} {p!r} is not a file name (headspec writes no result to standard "
                        "output); fix: give a file name, e.g. run.nc")  # fmt: skip
    _too_long(lab, p, os.path.abspath(p))
    try:
        real = os.path.realpath(p, strict=True)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise PathError(
                f"{lab} {p!r} is a symlink loop (it points back to itself, directly or through "
                "other links); fix: remove the link, or give another name"
            ) from None
        if e.errno == errno.ENOTDIR:
            raise PathError(
                f"{lab} {p!r}: a part of the path is a file, not a folder; fix: give a path "
                "whose folders are folders"
            ) from None
        if e.errno not in (errno.ENOENT,):
            raise PathError(f"{lab} {p!r} cannot be resolved ({e.strerror}); fix: give "
                            "another path") from None  # fmt: skip
        real = os.path.realpath(p)
    _too_long(lab, p, real)
    try:
        st = os.stat(real)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise PathError(f"{lab} {p!r} cannot be read ({e.strerror}); fix: give another "
                        "path") from None  # fmt: skip
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise PathError(f"{lab} {p!r} is a folder; fix: give a file name")
        if not stat.S_ISREG(st.st_mode):
            raise PathError(
                f"{lab} {p!r} is not a regular file (a device, pipe or socket) and would be "
                "replaced by one; fix: give a file name"
            )
        if write_protected(st):
            raise PathError(
                f"{lab} {p!r} is write-protected (mode {stat.filemode(st.st_mode)}), and "
                f"writing it would replace it; fix: give another name, or make it writable "
                f"first (chmod u+w {p})"
            )
    folder = os.path.dirname(real)
    if not os.path.isdir(folder):
        if os.path.islink(p):
            raise PathError(
                f"{lab} {p!r} is a symlink to {real!r}, whose folder does not exist; fix: create "
                "that folder first, or remove the link"
            )
        if not make_folders:
            raise PathError(
                f"the folder of output {lab} {p!r} does not exist; fix: create it first"
            )
        while not os.path.exists(folder):
            folder = os.path.dirname(folder)
        if not os.path.isdir(folder):
            raise PathError(f"{lab} {p!r}: {folder!r} is a file, not a folder; fix: give a "
                            "path whose folders are folders")  # fmt: skip
    if not can_create_in(folder):
        raise PathError(
            f"{lab} {p!r}: cannot write in the folder {folder!r}; fix: choose a writable folder"
        )
    return real


def can_create_in(folder: str) -> bool:
    """Whether a file can really be created in ``folder`` (tried: permissions alone do not tell,
    e.g. for root in a read-only or virtual file system such as /proc)."""
    try:
        fd, name = tempfile.mkstemp(dir=folder, prefix=".headspec-probe-")
    except OSError:
        return False
    os.close(fd)
    os.unlink(name)
    return True


# ----------------------------------------------------------------------------- internals
# HOST (8) . PID (pid_max is at most 2**22: 7 digits) . RANDOM (8) .tmp
_TEMP_TAIL = 8 + 1 + 7 + 1 + 8 + len(_SUFFIX)


def _temp_prefix(name: str) -> str:
    """``.NAME.`` — or, where the temporary name would pass the file system's limit of 255 bytes
    (a long but legal target name), ``.SHORTENED~CRC.``: every legal name can be written."""
    prefix = f".{name}."
    if len(os.fsencode(prefix)) + _TEMP_TAIL <= NAME_MAX:
        return prefix
    keep = NAME_MAX - _TEMP_TAIL - len(".~12345678.")
    short = os.fsencode(name)[:keep].decode("utf-8", errors="ignore")
    return f".{short}~{zlib.crc32(os.fsencode(name)):08x}."


def _create_temp(real: Path) -> Path:
    """A new, empty ``.NAME.HOST.PID.RANDOM.tmp`` beside ``real``.

    Created with ``os.open(..., 0o666)``, so the kernel applies the umask (and a default ACL)
    exactly as for any ``open()`` — unlike ``tempfile.mkstemp``, which makes every file 0600."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    prefix = _temp_prefix(real.name)
    for _ in range(100):
        tmp = real.parent / f"{prefix}{_HOST}.{os.getpid()}.{secrets.token_hex(4)}{_SUFFIX}"
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
    prefix = _temp_prefix(real.name)
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
