"""Writing files so that a crash never leaves a half-written one: one atomic write for all.

The content goes to a temporary file in the target's folder, is flushed and fsync'ed, and then
renamed over the target (atomic on POSIX): a reader sees the old file or the whole new one.

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
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path to write to; on success it is fsync'ed and renamed to ``path``, on any
    error (or interrupt) it is removed and ``path`` is left as it was."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a result is as readable as any file
    try:
        yield Path(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path: str | Path, write: Callable[[Path], object]) -> Path:
    """Call ``write(tmp_path)`` and move the result to ``path`` atomically."""
    with atomic_path(path) as tmp:
        write(tmp)
    return Path(path)


def write_json_atomic(path: str | Path, data: dict) -> None:
    """Write JSON (indented, UTF-8) atomically."""

    def write(tmp: Path) -> None:
        with open(tmp, "w") as f:
            json.dump(data, f, indent=2, ensure_ascii=False)
            f.write("\n")

    write_atomic(path, write)
