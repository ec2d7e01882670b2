"""The sweep folder's bookkeeping: ``manifest.json``, point file checksums, the folder lock.

The manifest holds the spec, its hash, and per task its status, file checksum and error.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from headspec.apps.sweep.errors import SweepError
from headspec.apps.sweep.plan import SweepTask, config_hash
from headspec.apps.sweep.spec import MODELS

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1


def read_manifest(folder: str | Path) -> dict:
    """The manifest of a sweep folder, checked to be one (a JSON object of this version with a
    spec and a list of tasks, each with a status); else :class:`SweepError` naming the file."""
    path = Path(folder) / MANIFEST
    if not path.is_file():
        raise SweepError(
            f"{str(folder)!r} has no {MANIFEST}; fix: give the output folder of a headspec sweep"
        )
    try:
        data = json.loads(path.read_text())
        _check_manifest(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise SweepError(
            f"{path} is not a readable sweep manifest ({e}); fix: give the output folder of a "
            "headspec sweep, or, if this sweep's manifest was damaged, re-run the sweep with "
            "--force (finished point files are kept and re-used)"
        ) from None
    return data


def _check_manifest(data) -> None:
    """ValueError unless ``data`` has the manifest's shape (what status, collect and resume
    read): a JSON list, a number or an entry without a status is not a manifest."""
    if not isinstance(data, dict):
        raise ValueError(f"a JSON {type(data).__name__}, not an object")
    if data.get("manifest_version") != MANIFEST_VERSION or "tasks" not in data:
        raise ValueError("not a headspec sweep manifest")
    spec, tasks = data.get("spec"), data["tasks"]
    if not isinstance(spec, dict) or not isinstance(spec.get("axes", []), list):
        raise ValueError("its spec is not a table")
    if not isinstance(tasks, list):
        raise ValueError("its tasks are not a list")
    for k, e in enumerate(tasks):
        if not (isinstance(e, dict) and isinstance(e.get("status"), str)):
            raise ValueError(f"task {k} has no status")
        if not isinstance(e.get("point"), int) or not isinstance(e.get("file", ""), str):
            raise ValueError(f"task {k} has no grid point or a file name that is not text")


def is_sweep_manifest(path: Path) -> bool:
    """Whether ``path`` is a manifest written by a headspec sweep (readable or not): a JSON
    object with its ``manifest_version`` — a file a sweep may replace."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return False
    return isinstance(data, dict) and "manifest_version" in data and "spec_hash" in data


def status_counts(manifest: dict) -> dict[str, int]:
    """Number of tasks per status ("done", "diverged", "failed", "pending")."""
    out: dict[str, int] = {}
    for e in manifest["tasks"]:
        out[e["status"]] = out.get(e["status"], 0) + 1
    return out


def spec_differences(old: dict, new: dict) -> list[str]:
    """Human list of what changed between two :meth:`Sweep.record` dicts."""
    diffs = []
    for k in ("kind", "seeds", "seed", "seeds_per_task"):
        if old.get(k) != new.get(k):
            diffs.append(f"sweep.{k}: {old.get(k)!r} → {new.get(k)!r}")
    oa = {a["key"]: a["values"] for a in old.get("axes", [])}
    na = {a["key"]: a["values"] for a in new.get("axes", [])}
    for k in oa.keys() - na.keys():
        diffs.append(f"axis {k} removed (was {oa[k]})")
    for k in na.keys() - oa.keys():
        diffs.append(f"axis {k} added: {na[k]}")
    for k in oa.keys() & na.keys():
        if oa[k] != na[k]:
            diffs.append(f"axis {k}: {oa[k]} → {na[k]}")
    if list(oa) != list(na) and oa.keys() == na.keys():
        diffs.append(f"axis order: {list(oa)} → {list(na)}")
    fo, fn = _flatten(old.get("base", {})), _flatten(new.get("base", {}))
    for k in sorted(fo.keys() | fn.keys()):
        if fo.get(k) != fn.get(k):
            diffs.append(f"base config {k}: {fo.get(k)!r} → {fn.get(k)!r}")
    return diffs


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


# ----------------------------------------------------------------------------- point files
def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def task_is_intact(folder: Path, task: SweepTask, entry: dict | None) -> bool:
    """A finished task's file is present and whole: its checksum matches the manifest's, or
    (written but not yet recorded) it loads and its config hashes to the task's hash."""
    path = folder / task.file
    if not path.is_file():
        return False
    if entry and entry.get("sha256") and entry.get("hash") == task.hash:
        return file_sha256(path) == entry["sha256"]
    return stored_config_hash(path) == task.hash


def stored_config_hash(path: Path) -> str | None:
    """The task hash of the config stored in a point file, validated by today's models (so
    fields added since take their defaults); None if the file does not load as a task's."""
    from headspec.conventions import results

    try:
        ds = results.load(path, kinds=results.TASK_KINDS)
        cfg = MODELS[_kind_of(ds)].model_validate(results.config_of(ds))
    except Exception:
        return None
    return config_hash(_kind_of(ds), cfg)


def _kind_of(ds) -> str:
    return {"simulation": "simulate", "splitmap": "splitmap"}.get(ds.attrs["kind"], "theory")


def file_status(path: Path) -> dict:
    """The manifest fields read from a point file: ``status`` ("diverged" if some seed failed,
    else "done") and ``diverged_seeds``."""
    import xarray as xr

    with xr.open_dataset(path, engine="h5netcdf") as ds:
        if "failed" not in ds:  # a split map's setting: nothing diverges
            return {"status": "done", "diverged_seeds": []}
        failed = np.asarray(ds.failed, dtype=bool)
        seeds = [int(s) for s in np.asarray(ds.seed)[failed]]
    return {"status": "diverged" if seeds else "done", "diverged_seeds": seeds}


# ----------------------------------------------------------------------------- folder lock
@contextlib.contextmanager
def folder_lock(folder: Path, what: str = "headspec sweep") -> Iterator[None]:
    """An exclusive lock on ``folder/.lock`` for this process (released by the OS if it dies);
    the file is deleted when the lock is released, so that no run leaves it behind. ``what``
    names the command in the refusal (a sweep, ``reproduce`` and ``study`` use it)."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock
        yield
        return
    path = folder / ".lock"
    while True:
        f = path.open("a")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            raise SweepError(
                f"another {what} is running in {folder}; fix: wait for it to finish, or "
                "give another output folder (--out)"
            ) from None
        try:  # the holder before us may have deleted the file we opened: lock the new one
            same = os.fstat(f.fileno()).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        f.close()
    try:
        yield
    finally:
        path.unlink(missing_ok=True)  # while still holding it (see the check above)
        fcntl.flock(f, fcntl.LOCK_UN)
        f.close()
