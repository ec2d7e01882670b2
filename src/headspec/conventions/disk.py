"""Failed writes: one error for a file that could not be written (a full disk, a vanished
folder, an I/O error), and the free-space check made before a write of known size.

Used by :func:`headspec.conventions.io.atomic_path`, through which every file headspec writes
goes; the command line turns a :class:`WriteError` into one line and exit code 1.

Example:
    >>> import errno
    >>> e = write_error("out/x.nc", OSError(errno.ENOSPC, "No space left on device"))
    >>> str(e).split(";")[0]
    "could not write 'out/x.nc': the disk is full"
"""

from __future__ import annotations

import errno
import os
from pathlib import Path


class WriteError(OSError):
    """A file that could not be written although its path was checked: a full disk or quota, a
    folder removed or unmounted during the run, an I/O error. The message is one line that names
    the file, the cause and the fix; nothing is left under the file's name (the temporary file
    is removed), and what was written before stays. Commands exit 1 with it."""


# each cause: why it happened, and what to do about it
WRITE_CAUSES = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.EFBIG: "the file is larger than the file system allows",
    errno.ENOENT: "its folder was removed during the run",
    errno.ENOTDIR: "its folder was replaced during the run",
    errno.EROFS: "the file system became read-only",
    errno.EIO: "the disk reported an I/O error",
}
_WORDS = ((errno.ENOSPC, "No space left"), (errno.EDQUOT, "quota"), (errno.ENOENT, "No such file"),
          (errno.EIO, "Input/output"))  # fmt: skip
HEADROOM = 1 << 20  # bytes a write keeps free beyond its own size (the file system's metadata)


def write_error(path, e: BaseException | None = None, why: str | None = None) -> WriteError:
    """One WriteError for a failed write of ``path``: the cause from ``e``'s errno (or, for a
    library that wraps it, from its message), or ``why``."""
    if why is None:
        code = getattr(e, "errno", None)
        text = str(e)
        if code is None:  # h5py and Pillow wrap the OS error in their own message
            for c, words in _WORDS:
                if words in text:
                    code = c
                    break
        plain = getattr(e, "strerror", None) or text or type(e).__name__
        why = WRITE_CAUSES.get(code) or plain.splitlines()[0]
    return WriteError(
        f"could not write {str(path)!r}: {why}; fix: free space on that disk or write elsewhere"
    )


def free_bytes(folder: str | Path) -> int | None:
    """Bytes an unprivileged user may still write under ``folder`` (None if it cannot be told)."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def check_room(path: str | Path, size: int) -> None:
    """Raise :class:`WriteError` unless ``path``'s folder has room for ``size`` bytes and
    :data:`HEADROOM`. HDF5 (h5py 3.x) does not always return ENOSPC to its caller: a full disk
    can crash the process inside the library, so a write of a known size is checked first."""
    folder = Path(os.path.realpath(path)).parent
    if not folder.is_dir():
        raise write_error(path, why="its folder no longer exists (removed during the run?)")
    free = free_bytes(folder)
    if free is not None and free < size + HEADROOM:
        raise write_error(
            path, why=f"the disk is full ({free / 2**20:.1f} MiB free, {size / 2**20:.1f} MiB "
            f"needed and {HEADROOM >> 20} MiB kept free)"
        )  # fmt: skip
