"""The driver of a sweep: checks the folder against the spec, submits the unfinished tasks to
Dask, records each finished one in the manifest and collects the points at the end."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from headspec.apps.sweep.cluster import dask_client
from headspec.apps.sweep.collect import COLLECTED, collect, figure_name, save_collected
from headspec.apps.sweep.errors import SweepError
from headspec.apps.sweep.manifest import (
    MANIFEST,
    MANIFEST_VERSION,
    file_sha256,
    file_status,
    folder_lock,
    is_sweep_manifest,
    read_manifest,
    spec_differences,
    stored_config_hash,
    task_is_intact,
)
from headspec.apps.sweep.plan import Sweep, SweepTask
from headspec.apps.sweep.worker import TOKEN, run_task
from headspec.conventions.io import write_json_atomic


@dataclass
class Report:
    """What a call of :func:`run` did."""

    total: int
    skipped: int  # finished before (file intact)
    done: int  # finished now
    diverged: int  # finished now, some seeds diverged
    failed: list[tuple[dict, str]]  # (params, error) of tasks that raised or were killed
    dataset_path: Path | None
    # (params, diverged seeds) of every task of the sweep whose result diverged, now or before
    diverged_tasks: list[tuple[dict, list[int]]] = field(default_factory=list)


def check_folder(sweep: Sweep, force: bool = False) -> dict | None:
    """Refuse, before anything is made or run, an output folder this sweep must not write in;
    returns its old manifest (None for a new folder). Only reads.

    Refused (:class:`SweepError`): a folder holding another spec's sweep unless ``force`` (which
    re-uses the points whose config is unchanged); and, even with ``force``, files a sweep
    would overwrite that no sweep wrote — a ``manifest.json`` that is not a sweep's (nor an
    unreadable one beside a ``points/`` folder), a ``sweep.nc`` that is not a collected sweep,
    and the sweep's figure (``sweep_final_risk.png``, ``sweep_split_map.png``) in a folder
    that holds no sweep yet.
    """
    folder = sweep.out
    path = folder / MANIFEST
    old = None
    if path.exists() or path.is_symlink():
        try:
            old = read_manifest(folder)
        except SweepError:
            owned = is_sweep_manifest(path) or (folder / "points").is_dir()
            if not owned:
                raise SweepError(
                    f"{path} is not a headspec sweep manifest and {folder} holds no points/: "
                    "the file is not a sweep's, and running would replace it; fix: give another "
                    "output folder (--out), or move that file away"
                ) from None
            if not force:
                raise
    if old is not None and old.get("spec_hash") != sweep.spec_hash and not force:
        diffs = spec_differences(old.get("spec", {}), sweep.record())
        if not diffs and "spec" in old:  # only fields added since, at their None default
            return old
        diffs = diffs or ["(unreadable spec)"]
        raise SweepError(
            f"{folder} holds a sweep with another spec: "
            + "; ".join(diffs)
            + ". fix: give another output folder (--out), or --force to run the new "
            "spec there (points whose config is unchanged are re-used)"
        )
    collected = folder / COLLECTED
    if collected.exists() and not _is_collected(collected):
        raise SweepError(
            f"{collected} is not a collected sweep, and running would replace it with one; fix: "
            "give another output folder (--out), or move that file away"
        )
    figure = folder / figure_name(sweep.kind)
    if old is None and not path.exists() and (figure.exists() or figure.is_symlink()):
        raise SweepError(
            f"{figure} was not written by a sweep of this folder (it holds no {MANIFEST}), and "
            "running would replace it; fix: give another output folder (--out), or move that "
            "file away"
        )
    return old


def _is_collected(path: Path) -> bool:
    """Whether a netCDF file is a collected sweep (its ``kind`` attribute); False if unreadable."""
    import h5py

    try:
        with h5py.File(path, "r") as f:
            kind = f.attrs.get("kind")
    except Exception:  # not HDF5, unreadable: not ours
        return False
    return (kind.decode() if isinstance(kind, bytes) else str(kind)) == "sweep"


def prepare(sweep: Sweep, force: bool = False) -> tuple[dict, list[SweepTask]]:
    """Check the folder against the spec (:func:`check_folder`); returns the manifest to write
    and the tasks to run.

    A folder holding another spec's manifest is refused (SweepError naming what differs)
    unless ``force``; finished files of tasks whose config is unchanged are kept either way.
    """
    folder = sweep.out
    old = check_folder(sweep, force)
    (folder / "points").mkdir(parents=True, exist_ok=True)
    for tmp in (folder / "points").glob(".*.tmp"):  # left by a driver killed mid-write
        tmp.unlink(missing_ok=True)
    record = sweep.record()
    old_entries: dict[str, dict] = {}
    created = None
    path = folder / MANIFEST
    if old is not None:
        old_entries = {e["hash"]: e for e in old.get("tasks", []) if "hash" in e}
        created = old.get("created")
    from headspec.conventions.provenance import run_metadata

    manifest = {
        "manifest_version": MANIFEST_VERSION,
        "spec": record,
        "spec_hash": sweep.spec_hash,
        "axes": [{"key": a.key, "name": a.name} for a in sweep.axes],
        "created": created or time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **run_metadata(),
        "tasks": [],
    }
    todo = []
    renamed = _older_points(folder, old_entries, {t.hash for t in sweep.tasks})
    for t in sweep.tasks:
        entry = {
            "point": t.point,
            "index": list(t.index),
            "params": t.params,
            "seed": t.config.seed,
            "seeds": t.config.seeds,
            "hash": t.hash,
            "file": t.file,
            "status": "pending",
        }
        prev = old_entries.get(t.hash)
        if prev is None and t.hash in renamed:  # written by an older headspec: same config
            older = renamed[t.hash]
            (folder / older["file"]).replace(folder / t.file)
            prev = {**older, "hash": t.hash, "file": t.file}  # its record (time, checksum) kept
        if task_is_intact(folder, t, prev):
            if prev and prev.get("sha256"):
                keep = ("status", "sha256", "elapsed_s", "diverged_seeds")
                entry.update({k: prev[k] for k in keep if k in prev})
            else:  # written before the driver could record it
                entry.update(**file_status(folder / t.file), sha256=file_sha256(folder / t.file))
        else:
            (folder / t.file).unlink(missing_ok=True)  # corrupt or truncated: recompute
            todo.append(t)
        manifest["tasks"].append(entry)
    write_json_atomic(path, manifest)
    return manifest, todo


def _older_points(folder: Path, old_entries: dict, hashes: set[str]) -> dict[str, dict]:
    """The old manifest's entries whose point file is named by a hash no task has now, by the
    hash its stored config has today (fields added since take their defaults): a sweep resumed
    by a newer headspec re-uses them instead of recomputing (``task_is_intact`` still checks
    them)."""
    found = {}
    for h, e in old_entries.items():
        if h in hashes or not e.get("file") or not (folder / e["file"]).is_file():
            continue
        now = stored_config_hash(folder / e["file"])
        if now in hashes and now not in found:
            found[now] = e
    return found


def run(
    sweep: Sweep,
    *,
    scheduler: str | None = None,
    workers: int | None = None,
    client: Any = None,
    force: bool = False,
    collect_after: bool = True,
    on_start: Callable[[Any, int, int], None] | None = None,
    on_result: Callable[[SweepTask, dict], None] | None = None,
    security: Any = None,
    timeout: float | None = None,
) -> Report:
    """Run the tasks of a sweep that are not finished; write points, manifest, combined dataset.

    Tasks go to ``client`` (a ``distributed.Client``) if given, else to the scheduler at
    ``scheduler`` (reached first, within ``timeout`` seconds and with ``security``, before the
    output folder is made: see :func:`~headspec.apps.sweep.cluster.dask_client`), else to a local
    cluster of ``workers`` processes started for this call.
    ``on_start(client, n_todo, n_total)`` is called once the cluster is up; ``on_result(task,
    entry)`` after each finished task. Interruption (KeyboardInterrupt) keeps every finished
    point; calling :func:`run` again resumes. Two runs on one folder at once are refused.
    """
    if client is None and scheduler is not None:  # an unreachable scheduler leaves no folder
        with dask_client(scheduler, security=security, timeout=timeout) as remote:
            return run(sweep, client=remote, force=force, collect_after=collect_after,
                       on_start=on_start, on_result=on_result)  # fmt: skip
    check_folder(sweep, force)  # a refused folder is left as it was: nothing made, no lock
    sweep.out.mkdir(parents=True, exist_ok=True)
    with folder_lock(sweep.out):
        return _run(sweep, scheduler, workers, client, force, collect_after, on_start, on_result)


def _record(folder: Path, task: SweepTask, entry: dict, res: dict) -> None:
    """Write a finished task's file (unless its worker did) and record it in its manifest entry."""
    from headspec.conventions import results

    path = folder / task.file
    if res["status"] != "failed":
        if "dataset" in res:
            results.save(res["dataset"], path)
        if not path.is_file():  # a worker wrote it elsewhere: not past the token check
            error = "the point file a worker wrote is not visible here"
            res = {"status": "failed", "error": error}
    for k in ("error", "traceback", "sha256", "elapsed_s", "diverged_seeds"):
        entry.pop(k, None)
    entry["status"] = res["status"]
    if res["status"] == "failed":
        entry["error"] = res["error"]
        if "traceback" in res:
            entry["traceback"] = res["traceback"]
    else:
        entry.update(
            sha256=file_sha256(path),
            elapsed_s=round(res["elapsed_s"], 3),
            diverged_seeds=res["diverged_seeds"],
        )


def _run(sweep, scheduler, workers, client, force, collect_after, on_start, on_result) -> Report:
    manifest, todo = prepare(sweep, force)
    by_hash = {e["hash"]: e for e in manifest["tasks"]}
    skipped = len(sweep.tasks) - len(todo)
    counts = {"done": 0, "diverged": 0}
    failed: list[tuple[dict, str]] = []
    folder = sweep.out
    mpath = folder / MANIFEST
    if todo:
        token = uuid.uuid4().hex
        (folder / TOKEN).write_text(token)
        last_write = time.monotonic()
        given = contextlib.nullcontext(client) if client is not None else None
        with given or dask_client(scheduler, workers) as client:
            if on_start is not None:
                on_start(client, len(todo), len(sweep.tasks))
            from distributed import as_completed

            futures = {
                client.submit(
                    run_task,  # by reference: workers import headspec.apps.sweep.worker
                    sweep.kind,
                    t.config.model_dump_json(),
                    str((folder / t.file).resolve()),
                    token,
                    key=f"headspec-{t.hash[:24]}",
                    pure=False,
                ): t
                for t in todo
            }
            try:
                for fut in as_completed(futures):
                    t = futures[fut]
                    try:
                        res = fut.result()
                    except Exception as e:  # KilledWorker after repeated crashes, lost worker
                        res = {"status": "failed", "error": _task_error(e)}
                    fut.release()
                    entry = by_hash[t.hash]
                    _record(folder, t, entry, res)
                    if entry["status"] == "failed":
                        failed.append((t.params, entry["error"]))
                    else:
                        counts[entry["status"]] += 1
                    if on_result is not None:
                        on_result(t, entry)
                    if time.monotonic() - last_write > 0.5:
                        write_json_atomic(mpath, manifest)
                        last_write = time.monotonic()
            finally:
                manifest["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
                write_json_atomic(mpath, manifest)
                (folder / TOKEN).unlink(missing_ok=True)
                for tmp in (folder / "points").glob(".*.tmp"):  # of workers killed mid-write
                    tmp.unlink(missing_ok=True)
    out = None
    if collect_after and any(e["status"] in ("done", "diverged") for e in manifest["tasks"]):
        out = save_collected(collect(folder), folder / COLLECTED)
    diverged = [(e["params"], e.get("diverged_seeds", [])) for e in manifest["tasks"]
                if e["status"] == "diverged"]  # fmt: skip
    n = len(sweep.tasks)
    return Report(n, skipped, counts["done"], counts["diverged"], failed, out, diverged)


def _task_error(e: Exception) -> str:
    """The manifest's error of a task whose future raised: Dask's message, and for a task whose
    workers kept dying (``KilledWorker``) the usual cause and its fix — a local worker's memory
    limit is the machine's memory over the number of workers, and Dask's nanny kills a worker
    that passes 95 % of it (a map setting at H = 5, L = 20 peaks at ~13 GB)."""
    text = f"{type(e).__name__}: {e}"
    if type(e).__name__ == "KilledWorker":
        text += (
            " — most often the task needs more memory than one worker may use (on the local "
            "cluster: the machine's memory over the number of workers); fix: re-run the same "
            "command with fewer workers (--workers 1; it resumes only the failed points), give "
            "your own scheduler's workers more memory, or make the point smaller"
        )
    return text
