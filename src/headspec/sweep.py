"""Sweeps over grids of configs on dask.distributed: resumable, loss-free, one combined dataset.

A sweep spec (TOML) names a base config (``simulate`` or ``theory``), the axes to vary, the seeds
and the output folder::

    [sweep]
    kind = "simulate"              # or "theory"
    base = "two_phase.toml"        # optional base config, relative to this file
    out = "sweeps/phase"           # output folder (relative to the current directory)
    seeds = 8                      # seeds per grid point (default: the base config's)
    seeds_per_task = 8             # seeds batched with vmap in one task (default: all)

    [config]                       # optional overrides of the base config
    train.T = 40.0

    [axes]                         # the grid is the product of the axes, in this order
    "task.latent.scale" = {start = 0.5, stop = 3.0, num = 6}
    "model.H" = [2, 4]
    "model.activation" = ["softmax", "softmax1"]

Each task (a grid point, or a block of its seeds) runs on a Dask worker; the driver writes each
finished task atomically to ``OUT/points/<config hash>.nc`` and records it in ``OUT/manifest.json``
(the spec, its hash, and per task its status, file checksum and error). Re-running the same sweep
skips the tasks whose file is intact (checksum, or config hash read from the file) and runs the
rest; a changed spec is refused unless forced. :func:`collect` combines the points into one
dataset with the swept parameters as coordinates (``OUT/sweep.nc``).

Example:
    >>> spec = SweepSpec.model_validate({"sweep": {"kind": "theory", "out": "/tmp/x"},
    ...                                  "axes": {"model.H": [2, 3]}})
    >>> sw = resolve(spec)
    >>> [p.params for p in sw.points]
    [{'H': 2}, {'H': 3}]
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field, Strict, ValidationError, field_validator, model_validator

from headspec.config import (
    ConfigError,
    SimulateConfig,
    StrictModel,
    TheoryConfig,
    format_validation_error,
    merge,
    read_toml,
    set_key,
)
from headspec.results import write_json_atomic

MANIFEST = "manifest.json"
TOKEN = ".token"  # a random string per run: a worker that reads it shares the driver's folder
COLLECTED = "sweep.nc"
MANIFEST_VERSION = 1
MODELS = {"simulate": SimulateConfig, "theory": TheoryConfig}
_RESERVED_DIMS = frozenset({"seed", "t", "t_index", "head", "head2", "feature", "atom"})
_Seed = Annotated[int, Strict(), Field(ge=0, le=2**31 - 1)]


class SweepError(ValueError):
    """A sweep cannot start or be collected; the message names the cause and the fix."""


# ----------------------------------------------------------------------------- the spec
class Range(StrictModel):
    """``num`` values from ``start`` to ``stop`` inclusive, evenly or log-spaced.

    Integer ``start`` and ``stop`` give integers (rounded; repeats are refused).
    """

    start: float | int
    stop: float | int
    num: Annotated[int, Strict(), Field(ge=1, le=100_000)]
    spacing: Literal["linear", "log"] = "linear"

    @model_validator(mode="after")
    def _check(self):
        if self.spacing == "log" and (self.start <= 0 or self.stop <= 0):
            raise ValueError("a log range needs start > 0 and stop > 0; fix: use spacing='linear'")
        return self

    def values(self) -> list:
        fn = np.geomspace if self.spacing == "log" else np.linspace
        v = fn(self.start, self.stop, self.num)
        if isinstance(self.start, int) and isinstance(self.stop, int):
            return [int(x) for x in np.round(v)]
        return [float(x) for x in v]


class SweepSection(StrictModel):
    """The ``[sweep]`` table."""

    kind: Literal["simulate", "theory"] = Field(description="what each grid point runs")
    base: str | None = Field(None, description="base config TOML, relative to the spec file")
    out: str = Field("sweep", min_length=1, description="output folder")
    seeds: Annotated[int, Strict(), Field(ge=1)] | None = Field(
        None, description="seeds per grid point (default: the base config's)"
    )
    seed: _Seed | None = Field(None, description="first seed (default: the base config's)")
    seeds_per_task: Annotated[int, Strict(), Field(ge=1)] | None = Field(
        None, description="seeds batched with vmap in one Dask task (default: all of a point)"
    )


class SweepSpec(StrictModel):
    """A whole sweep spec file: ``[sweep]``, optional ``[config]``, ``[axes]``."""

    sweep: SweepSection
    config: dict[str, Any] = Field(default_factory=dict, description="overrides of the base")
    axes: dict[str, list[Any] | Range] = Field(
        description="dotted config key → list of values or range table"
    )

    @field_validator("axes", mode="before")
    @classmethod
    def _axes(cls, axes):
        if not isinstance(axes, dict) or not axes:
            raise ValueError('no axes; fix: add at least one, e.g. "model.H" = [2, 4]')
        out = {}
        for key, vals in axes.items():
            parts = key.split(".")
            if not all(p.strip() for p in parts):
                raise ValueError(f"axis {key!r} has an empty key part; fix: write a.b.c")
            if parts[0] in ("seed", "seeds"):
                raise ValueError(
                    f"axis {key!r}: seeds are not an axis; fix: set sweep.seeds and sweep.seed"
                )
            if isinstance(vals, dict):
                try:
                    vals = Range.model_validate(vals)
                except ValidationError as e:
                    raise ValueError(
                        f"axis {key!r}: bad range ({format_validation_error(e, Range)}); fix: "
                        'write {start = …, stop = …, num = …} (spacing = "log" optional)'
                    ) from None
            elif not isinstance(vals, list) or not vals:
                raise ValueError(
                    f"axis {key!r} needs a non-empty list of values or a range table; fix: "
                    "write [v1, v2, …] or {start = …, stop = …, num = …}"
                )
            values = vals.values() if isinstance(vals, Range) else vals
            canon = [json.dumps(v, sort_keys=True) for v in values]
            if len(set(canon)) != len(canon):
                raise ValueError(f"axis {key!r} repeats a value; fix: list each value once")
            out[key] = vals
        return out


def spec_from_dict(data: dict, where: str = "sweep spec") -> SweepSpec:
    """Validate a sweep spec given as a dict; errors become :class:`ConfigError` naming the key."""
    try:
        return SweepSpec.model_validate(data)
    except ValidationError as e:
        raise ConfigError(f"{where}: " + format_validation_error(e, SweepSpec)) from None


# ----------------------------------------------------------------------------- resolved sweep
@dataclass(frozen=True)
class Axis:
    key: str  # dotted config key
    name: str  # dimension name in the collected dataset
    values: list


@dataclass(frozen=True)
class Task:
    """One unit of work: a grid point's config restricted to a block of seeds."""

    point: int  # index of the grid point
    index: tuple[int, ...]  # position on the grid
    params: dict  # axis name → value
    config: Any  # validated SimulateConfig | TheoryConfig
    hash: str  # sha256 of kind + resolved config

    @property
    def file(self) -> str:
        return f"points/{self.hash[:24]}.nc"


@dataclass
class Sweep:
    kind: str
    axes: list[Axis]
    base: dict  # resolved base config (before the axes)
    seeds: int
    seed: int
    seeds_per_task: int
    out: Path
    tasks: list[Task] = field(default_factory=list)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(a.values) for a in self.axes)

    @property
    def points(self) -> list[Task]:
        """The first task of every grid point."""
        return [t for t in self.tasks if t.config.seed == self.seed]

    def record(self) -> dict:
        """What defines the results (hashed): kind, base config, axes, seeds. Not the folder."""
        return {
            "kind": self.kind,
            "base": self.base,
            "axes": [{"key": a.key, "name": a.name, "values": a.values} for a in self.axes],
            "seeds": self.seeds,
            "seed": self.seed,
            "seeds_per_task": self.seeds_per_task,
        }

    @property
    def spec_hash(self) -> str:
        return _hash(self.record())


def _hash(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


def config_hash(kind: str, cfg) -> str:
    """Identity of a task: its kind and fully resolved config (defaults included)."""
    return _hash({"kind": kind, "config": cfg.model_dump(mode="json")})


def load_spec(path: str | Path, overrides: list[str] | None = None, axes: list[str] | None = None):
    """Read and validate a sweep spec; returns the spec and the folder of the spec file.

    ``overrides`` are dotted ``key=value`` settings of the spec (``sweep.seeds=2``,
    ``config.train.T=5``); ``axes`` are ``KEY=VALUES`` items that add or replace an axis
    (``model.H=[2,4]`` or ``task.D={start=100, stop=1000, num=4, spacing="log"}``).
    """
    from headspec.config import apply_overrides, parse_override

    path = Path(path)
    data = read_toml(path)
    data = apply_overrides(data, list(overrides or []))
    for item in axes or []:
        if "=" not in item:
            raise ConfigError(f"--axis {item!r} has no '='; fix: write KEY=[v1, v2, …]")
        key, _ = item.split("=", 1)
        _, value = parse_override("v=" + item.split("=", 1)[1])
        if not isinstance(value, list | dict):
            value = [value]
        data.setdefault("axes", {})[key.strip()] = value
    return spec_from_dict(data, str(path)), path.parent


def _axis_names(keys: list[str]) -> list[str]:
    """Last key part (``model.H`` → ``H``) unless two axes share it or it names a result dim."""
    last = [k.split(".")[-1] for k in keys]
    return [
        k.replace(".", "_") if last.count(n) > 1 or n in _RESERVED_DIMS else n
        for k, n in zip(keys, last, strict=True)
    ]


def resolve(spec: SweepSpec, root: str | Path = ".", out: str | Path | None = None) -> Sweep:
    """Every task of the sweep, each config validated (the first invalid point is reported)."""
    s = spec.sweep
    model = MODELS[s.kind]
    base: dict = model.model_construct().model_dump(mode="json")
    if s.base is not None:
        base = merge(base, read_toml(Path(root) / s.base))
    base = merge(base, _expand_dotted(spec.config))
    try:  # the base itself must be valid (with the sweep's seeds)
        base_cfg = model.model_validate(base)
    except ValidationError as e:
        raise ConfigError("base config: " + format_validation_error(e, model)) from None
    base = base_cfg.model_dump(mode="json")
    seeds = s.seeds if s.seeds is not None else base_cfg.seeds
    seed = s.seed if s.seed is not None else base_cfg.seed
    per = min(s.seeds_per_task or seeds, seeds)
    keys = list(spec.axes)
    axes = [
        Axis(k, n, v.values() if isinstance(v, Range) else list(v))
        for k, n, v in zip(keys, _axis_names(keys), spec.axes.values(), strict=True)
    ]
    sweep = Sweep(s.kind, axes, base, seeds, seed, per, Path(out if out is not None else s.out))
    blocks = [(s0, min(per, seed + seeds - s0)) for s0 in range(seed, seed + seeds, per)]
    for p, index in enumerate(np.ndindex(*sweep.shape)):
        params = {a.name: a.values[i] for a, i in zip(axes, index, strict=True)}
        data = json.loads(json.dumps(base))
        for a, i in zip(axes, index, strict=True):
            data = set_key(data, a.key.split("."), a.values[i], what=f"axis {a.key!r}")
        for s0, n in blocks:
            data = dict(data, seed=s0, seeds=n)
            try:
                cfg = model.model_validate(data)
            except ValidationError as e:
                where = ", ".join(f"{a.key} = {json.dumps(v)}" for a, v in _pairs(axes, params))
                raise ConfigError(
                    f"sweep point {where}: " + format_validation_error(e, model)
                ) from None
            sweep.tasks.append(Task(p, tuple(int(i) for i in index), params, cfg, ""))
    sweep.tasks = [
        Task(t.point, t.index, t.params, t.config, config_hash(s.kind, t.config))
        for t in sweep.tasks
    ]
    return sweep


def _pairs(axes, params):
    return [(a, params[a.name]) for a in axes]


def _expand_dotted(table: dict) -> dict:
    """``{"train.T": 5}`` (a quoted dotted key) → ``{"train": {"T": 5}}``; nested tables kept."""
    out: dict = {}
    for k, v in table.items():
        out = set_key(out, k.split("."), _expand_dotted(v) if isinstance(v, dict) else v)
    return out


# ----------------------------------------------------------------------------- manifest
def read_manifest(folder: str | Path) -> dict:
    path = Path(folder) / MANIFEST
    if not path.is_file():
        raise SweepError(
            f"{str(folder)!r} has no {MANIFEST}; fix: give the output folder of a headspec sweep"
        )
    try:
        data = json.loads(path.read_text())
        if data.get("manifest_version") != MANIFEST_VERSION or "tasks" not in data:
            raise ValueError("not a headspec sweep manifest")
    except (ValueError, UnicodeDecodeError) as e:
        raise SweepError(
            f"{path} is not a readable sweep manifest ({e}); fix: re-run the sweep with --force "
            "(finished point files are kept and re-used)"
        ) from None
    return data


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


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


def task_is_intact(folder: Path, task: Task, entry: dict | None) -> bool:
    """A finished task's file is present and whole: its checksum matches the manifest's, or
    (written but not yet recorded) it loads and its config hashes to the task's hash."""
    from headspec import results

    path = folder / task.file
    if not path.is_file():
        return False
    if entry and entry.get("sha256") and entry.get("hash") == task.hash:
        return _sha256(path) == entry["sha256"]
    try:
        ds = results.load(path)
        cfg = MODELS[_kind_of(ds)].model_validate_json(ds.attrs["config_json"])
    except Exception:
        return False
    return config_hash(_kind_of(ds), cfg) == task.hash


def _kind_of(ds) -> str:
    return "simulate" if ds.attrs["kind"] == "simulation" else "theory"


# ----------------------------------------------------------------------------- worker side
_WORKER_READY = False


def run_task(kind: str, config_json: str, target: str | None = None, token: str = "") -> dict:
    """Run one task (on a worker): returns the status, the elapsed time and the dataset, or the
    error of a point that raised. Never raises for an error of the point itself.

    With ``target`` (the point file's path) and a worker that sees the sweep folder — its
    ``.token`` file holds ``token`` — the worker writes the file itself (atomically) and returns
    no dataset: the driver, which also runs the scheduler, then only records it.
    """
    global _WORKER_READY
    if not _WORKER_READY:
        _worker_setup()
        _WORKER_READY = True
    from headspec import results
    from headspec.sgd import simulate
    from headspec.theory import solve

    t0 = time.perf_counter()
    try:
        cfg = MODELS[kind].model_validate_json(config_json)
        ds = simulate(cfg) if kind == "simulate" else solve(cfg)
    except Exception as e:
        return {
            "status": "failed",
            "error": f"{type(e).__name__}: {e}",
            "traceback": traceback.format_exc(limit=20),
            "elapsed_s": time.perf_counter() - t0,
        }
    failed = [int(s) for s, f in zip(ds.seed.values, ds.failed.values, strict=True) if f]
    out = {
        "status": "diverged" if failed else "done",
        "diverged_seeds": failed,
        "elapsed_s": time.perf_counter() - t0,
    }
    if target is not None and _same_folder(Path(target).parent.parent, token):
        results.save(ds, target)
        out["written"] = True
    else:  # no shared file system: the driver writes it
        out["dataset"] = ds
    return out


def _same_folder(folder: Path, token: str) -> bool:
    try:
        return bool(token) and (folder / TOKEN).read_text() == token
    except OSError:
        return False


def _worker_setup() -> None:
    """Once per worker process: x64 (importing headspec) and the disk cache of compilations."""
    import headspec  # noqa: F401  (switches on jax_enable_x64)
    from headspec._meta import enable_compilation_cache

    enable_compilation_cache()


# ----------------------------------------------------------------------------- cluster
WORKER_ENV = {
    # one worker per core, each single-threaded: no oversubscription of the cores
    "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@contextlib.contextmanager
def dask_client(scheduler: str | None = None, workers: int | None = None) -> Iterator[Any]:
    """A ``distributed.Client``: on an existing scheduler, or on a local cluster of ``workers``
    single-threaded processes (default: one per core) on loopback, closed on exit."""
    import logging

    from distributed import Client, LocalCluster

    if scheduler is not None:
        try:
            client = Client(scheduler)  # waits distributed.comm.timeouts.connect (30 s)
        except (OSError, TimeoutError) as e:
            raise SweepError(
                f"cannot reach the Dask scheduler at {scheduler!r} ({type(e).__name__}: {e}); "
                "fix: check the address (tcp://host:port), or leave out --scheduler for a "
                "local cluster"
            ) from None
        try:
            yield client
        finally:
            client.close()
        return
    n = workers or available_cores()
    with (
        LocalCluster(
            n_workers=n,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            silence_logs=logging.CRITICAL,
            env=dict(WORKER_ENV),
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client


# ----------------------------------------------------------------------------- driver
@dataclass
class Report:
    """What a call of :func:`run` did."""

    total: int
    skipped: int  # finished before (file intact)
    done: int  # finished now
    diverged: int  # finished now, some seeds diverged
    failed: list[tuple[dict, str]]  # (params, error) of tasks that raised or were killed
    dataset_path: Path | None


def prepare(sweep: Sweep, force: bool = False) -> tuple[dict, list[Task]]:
    """Check the folder against the spec; returns the manifest to write and the tasks to run.

    A folder holding another spec's manifest is refused (SweepError naming what differs)
    unless ``force``; finished files of tasks whose config is unchanged are kept either way.
    """
    folder = sweep.out
    (folder / "points").mkdir(parents=True, exist_ok=True)
    for tmp in (folder / "points").glob(".*.tmp"):  # left by a driver killed mid-write
        tmp.unlink(missing_ok=True)
    record = sweep.record()
    old_entries: dict[str, dict] = {}
    created = None
    path = folder / MANIFEST
    if path.exists():
        try:
            old = read_manifest(folder)
        except SweepError:
            if not force:
                raise
            old = None
        if old is not None:
            if old.get("spec_hash") != sweep.spec_hash and not force:
                diffs = spec_differences(old.get("spec", {}), record) or ["(unreadable spec)"]
                raise SweepError(
                    f"{folder} holds a sweep with another spec: "
                    + "; ".join(diffs)
                    + ". fix: give another output folder (--out), or --force to run the new "
                    "spec there (points whose config is unchanged are re-used)"
                )
            old_entries = {e["hash"]: e for e in old.get("tasks", []) if "hash" in e}
            created = old.get("created")
    from headspec._meta import run_metadata

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
        if task_is_intact(folder, t, prev):
            if prev and prev.get("sha256"):
                keep = ("status", "sha256", "elapsed_s", "diverged_seeds")
                entry.update({k: prev[k] for k in keep if k in prev})
            else:  # written before the driver could record it
                entry.update(status=_file_status(folder / t.file), sha256=_sha256(folder / t.file))
        else:
            (folder / t.file).unlink(missing_ok=True)  # corrupt or truncated: recompute
            todo.append(t)
        manifest["tasks"].append(entry)
    write_json_atomic(path, manifest)
    return manifest, todo


def _file_status(path: Path) -> str:
    import xarray as xr

    with xr.open_dataset(path, engine="h5netcdf") as ds:
        return "diverged" if bool(np.asarray(ds.failed).any()) else "done"


def run(
    sweep: Sweep,
    *,
    scheduler: str | None = None,
    workers: int | None = None,
    client: Any = None,
    force: bool = False,
    collect_after: bool = True,
    on_start: Callable[[Any, int, int], None] | None = None,
    on_result: Callable[[Task, dict], None] | None = None,
) -> Report:
    """Run the tasks of a sweep that are not finished; write points, manifest, combined dataset.

    Tasks go to ``client`` (a ``distributed.Client``) if given, else to the scheduler at
    ``scheduler``, else to a local cluster of ``workers`` processes started for this call.
    ``on_start(client, n_todo, n_total)`` is called once the cluster is up; ``on_result(task,
    entry)`` after each finished task. Interruption (KeyboardInterrupt) keeps every finished
    point; calling :func:`run` again resumes. Two runs on one folder at once are refused.
    """
    sweep.out.mkdir(parents=True, exist_ok=True)
    with _folder_lock(sweep.out):
        return _run(sweep, scheduler, workers, client, force, collect_after, on_start, on_result)


@contextlib.contextmanager
def _folder_lock(folder: Path) -> Iterator[None]:
    """An exclusive lock on ``folder/.lock`` for this process (released by the OS if it dies)."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock
        yield
        return
    with (folder / ".lock").open("a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SweepError(
                f"another headspec sweep is running in {folder}; fix: wait for it to finish, or "
                "give another output folder (--out)"
            ) from None
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _record(folder: Path, task: Task, entry: dict, res: dict) -> None:
    """Write a finished task's file (unless its worker did) and record it in its manifest entry."""
    from headspec import results

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
            sha256=_sha256(path),
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
                    run_task,
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
                        res = {"status": "failed", "error": f"{type(e).__name__}: {e}"}
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
    return Report(len(sweep.tasks), skipped, counts["done"], counts["diverged"], failed, out)


# ----------------------------------------------------------------------------- collect
def collect(folder: str | Path) -> Any:
    """Combine the finished points of a sweep folder into one xarray dataset.

    Dimensions: the axes (coordinates = swept values; tables as JSON strings), then the result
    dims (seed, t, head, …). Per point: ``status`` ("done", "diverged", "failed", "pending"),
    ``bayes_risk``, ``bayes_risk_se`` and ``config_json``. Missing points are NaN. If the
    points' time grids differ (e.g. a sweep over D), ``t`` becomes a variable over
    (axes…, t_index). Raises :class:`SweepError` if no point is finished.
    """
    import xarray as xr

    from headspec import results
    from headspec._meta import run_metadata

    folder = Path(folder)
    manifest = read_manifest(folder)
    spec = manifest["spec"]
    axes = spec["axes"]
    shape = tuple(len(a["values"]) for a in axes)
    names = [a["name"] for a in axes]
    chunks: dict[int, list] = {}
    status: dict[int, list[str]] = {}
    for e in manifest["tasks"]:
        status.setdefault(e["point"], []).append(e["status"])
        if e["status"] in ("done", "diverged"):
            try:
                ds = results.load(folder / e["file"])
            except results.ResultError as err:
                raise SweepError(
                    f"point file {e['file']} is unreadable ({err}); fix: re-run the sweep "
                    "(it recomputes corrupt points)"
                ) from None
            chunks.setdefault(e["point"], []).append((e["seed"], ds))
    if not chunks:
        raise SweepError(f"{folder}: no point is finished yet; fix: run the sweep first")
    n_points = int(np.prod(shape))
    per_point = {}
    for p, items in chunks.items():
        items.sort(key=lambda x: x[0])
        if len(items) == 1:
            ds = items[0][1]
        else:
            ds = xr.concat(
                [d for _, d in items],
                dim="seed",
                data_vars="minimal",  # per-seed variables; `atoms` is shared
                coords="minimal",
                compat="override",
                join="exact",
                combine_attrs="override",  # attributes of the first block (its Bayes risk)
            )
        per_point[p] = ds
    grids = {p: (ds.t.values, ds.step.values) for p, ds in per_point.items()}
    ref = next(iter(grids.values()))
    shared = all(
        g[0].shape == ref[0].shape and np.array_equal(g[0], ref[0]) for g in grids.values()
    )
    template = next(iter(per_point.values()))

    def point_ds(p: int, index: tuple[int, ...]):
        st = status.get(p, ["pending"])  # of the point's seed blocks
        full = [s for s in st if s in ("done", "diverged")]
        if p in per_point and len(full) == len(st):
            ds = per_point[p]
            point_status = "diverged" if "diverged" in st else "done"
        else:  # missing or partly missing: NaN placeholder of the template's shape
            ds = per_point.get(p, template)
            ds = ds.copy(data={k: np.full(v.shape, np.nan) for k, v in ds.data_vars.items()})
            point_status = "failed" if "failed" in st else "pending"
        ds = _prune_point_attrs(ds.drop_encoding(), point_status)  # ints may become NaN
        if not shared:
            ds = ds.drop_indexes("t").rename_dims(t="t_index").reset_coords(["t", "step"])
        coords = {
            a["name"]: [_coord_value(a["values"][i])] for a, i in zip(axes, index, strict=True)
        }
        return ds.expand_dims(coords)

    nested: Any = np.empty(shape, dtype=object)
    for p, index in enumerate(np.ndindex(*shape)):
        nested[index] = point_ds(p, index)
    assert p == n_points - 1
    combined = xr.combine_nested(
        nested.tolist(), concat_dim=names, join="outer", combine_attrs="drop", fill_value=np.nan
    )
    for a in axes:
        combined[a["name"]].attrs["config_key"] = a["key"]
    combined.attrs = {
        "kind": "sweep",
        "sweep_kind": spec["kind"],
        "spec_json": json.dumps(spec, sort_keys=True),
        "spec_hash": manifest["spec_hash"],
        "axes": json.dumps(names),
        "points": n_points,
        "points_finished": int(np.isin(combined["status"].values, ["done", "diverged"]).sum()),
        **run_metadata(),
    }
    return combined


def _prune_point_attrs(ds, status: str):
    """Per-point attributes that vary become variables; the rest are dropped."""
    ds = ds.copy()
    ds["status"] = ((), status)
    ds["config_json"] = ((), ds.attrs.get("config_json", ""))
    for k in ("bayes_risk", "bayes_risk_se"):
        v = ds.attrs.get(k, np.nan)
        ds[k] = ((), float(v) if status in ("done", "diverged") else np.nan)
    ds.attrs = {}
    return ds


def _coord_value(v):
    """Swept values as coordinate labels: numbers and strings as they are, tables as JSON."""
    if isinstance(v, bool | int | float | str):
        return v
    return json.dumps(v, sort_keys=True)


def save_collected(ds, path: str | Path) -> Path:
    """Write the combined dataset atomically (netCDF, h5netcdf)."""
    from headspec.results import save

    return save(ds, path)


def save_figure(ds, folder: str | Path) -> Path:
    """The final-risk figure of a collected sweep, as ``folder/sweep_final_risk.png``."""
    from headspec.plots import plot_sweep

    path = Path(folder) / "sweep_final_risk.png"
    plot_sweep(ds).savefig(path, dpi=120)
    return path


def status_counts(manifest: dict) -> dict[str, int]:
    out: dict[str, int] = {}
    for e in manifest["tasks"]:
        out[e["status"]] = out.get(e["status"], 0) + 1
    return out


__all__ = [
    "Axis",
    "Range",
    "Report",
    "Sweep",
    "SweepError",
    "SweepSpec",
    "Task",
    "collect",
    "config_hash",
    "dask_client",
    "load_spec",
    "prepare",
    "read_manifest",
    "resolve",
    "run",
    "run_task",
    "save_collected",
    "save_figure",
    "spec_from_dict",
    "status_counts",
]
