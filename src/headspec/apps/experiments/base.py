"""What every recipe shares: the outcome of an experiment, its context, small helpers.

A recipe (``e1.py`` … ``e8.py``) is a function ``run(ctx: Context)`` that records claims
(:class:`~headspec.apps.experiments.claims.Claim`: value, s.e. and tolerance; the verdict is
computed from them), figures and configs on ``ctx.outcome``. :class:`Context` resolves the
recipe's TOML (``[experiment]`` parameters, ``[config]`` base config, ``[scale.<name>]``
overrides) and runs theory and simulation with every resolved config kept for the report.

Every run goes through :meth:`Context.runs`: its result file ``data/<id>_<name>.nc`` is reused
when it holds the same resolved config (so an interrupted reproduction resumes and recomputes
nothing finished), and the runs of one call are independent, so with a Dask client (``--scheduler``
or a local cluster) they run in parallel through the sweep's worker function.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from headspec.apps.experiments.claims import Claim
from headspec.apps.experiments.params import (
    CONFIG_SECTIONS,
    RecipeParams,
    resolve,
    split_spec,
)
from headspec.apps.sweep.spec import MODELS  # run kind → config model
from headspec.conventions import results
from headspec.conventions.config import SimulateConfig, SplitMapConfig, load_config, merge
from headspec.core.stats import mean_se

__all__ = ["CONFIG_SECTIONS", "Context", "Outcome", "Run", "Sets", "Stopped", "ode_beside"]


@dataclasses.dataclass
class Outcome:
    id: str
    title: str
    claims: list[Claim] = dataclasses.field(default_factory=list)
    figures: list[Path] = dataclasses.field(default_factory=list)
    configs: dict[str, dict] = dataclasses.field(default_factory=dict)
    seconds: float = 0.0
    error: str | None = None
    reused: int = 0  # runs read back from an earlier invocation's files, not computed again
    reused_seconds: float = 0.0  # what they took to compute then (their files' elapsed_s)
    table: list[tuple] | None = None  # per-seed rows shown under the figures (E6)
    table_header: tuple[str, ...] | None = None  # the table's column names


#: typed changes to a config by dotted key, e.g. ``{"model.H": 8}`` (see :class:`Run`)
Sets = Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class Run:
    """One run of a recipe: ``kind`` "simulate", "theory" or "splitmap" (one setting of the map
    of uneven splits: the base config's task and model, and a ``map`` table), ``sets``: typed
    changes to the recipe's base config by dotted key (``{"model.H": 8, "seeds": 16}``; a table
    value replaces the base's table whole, as ``--set`` does), and an ``extra`` config table
    merged into the base config first."""

    name: str
    kind: str
    sets: Sets = dataclasses.field(default_factory=dict)
    extra: dict | None = None


class Stopped(KeyboardInterrupt):
    """Raised in a recipe's thread once the reproduction is interrupted (``Context.stop`` set):
    a KeyboardInterrupt, so that it is no error of the recipe."""


class Context:
    """What a recipe needs: its parameters (``params``: an instance of the recipe's model,
    validated), base config, output folders, and run helpers.

    ``client``: a ``distributed.Client`` that runs the independent runs of one :meth:`runs` call
    in parallel (None: in this process, one after the other); ``log``: called with a line of
    text per finished or reused run; ``stop``: an event set when the reproduction is
    interrupted — the recipe then stops (:class:`Stopped`) at its next run or finished run, and
    logs nothing more; ``dry``: the context only plans (:meth:`planned`) and writes nothing."""

    def __init__(
        self,
        exp_id: str,
        spec: dict,
        scale: str,
        outdir: Path,
        client: Any = None,
        log: Callable[[str], None] | None = None,
        stop: threading.Event | None = None,
        params: type[RecipeParams] = RecipeParams,
        file: str = "recipe",
        dry: bool = False,
    ):
        self.id = exp_id
        self.scale, self.outdir, self.client, self.log = scale, Path(outdir), client, log
        self.stop = stop
        _, config, _ = split_spec(spec, scale)
        self.params = resolve(spec, scale, params, file)
        self.config, self.spec = config, spec
        self.figdir = outdir / "figures"
        self.datadir = outdir / "data"
        if not dry:  # a dry context only plans (its runs' configs): nothing is written
            self.figdir.mkdir(parents=True, exist_ok=True)
            self.datadir.mkdir(parents=True, exist_ok=True)
        self.outcome = Outcome(exp_id, self.params.title or exp_id)
        self._stage = 0  # batches sent to the cluster so far (their priority there)

    @functools.cached_property
    def base(self) -> SimulateConfig:
        """The recipe's base config at this scale as a validated simulation config (typed reads
        such as ``ctx.base.task.D``; the defaults where the TOML is silent)."""
        return load_config(SimulateConfig, base={k: v for k, v in self.config.items()
                                                 if k != "theory"})  # fmt: skip

    def cfg(self, model, name: str, sets: Sets | None = None, extra: dict | None = None):
        """The resolved config of run ``name`` (kept for the report): the recipe's base config,
        ``extra`` merged into it (a table with a ``kind``, e.g. a latent law, replaces the
        base's whole table), then ``sets`` (see :class:`Run`)."""
        base = merge(self.config, extra or {})
        if model is SplitMapConfig:  # a setting of the map: the task and the model only
            base = {k: v for k, v in base.items() if k in ("task", "model")}
        other = "theory" if model is SimulateConfig else "diffusion"  # the other kind's section
        base = {k: v for k, v in base.items() if k != other}
        c = load_config(model, base=base, sets=sets)
        self.outcome.configs[name] = json.loads(c.model_dump_json())
        return c

    def path(self, name: str) -> Path:
        """The result file of run ``name``."""
        return self.datadir / f"{self.id}_{name}.nc"

    def runs(self, batch: list[Run]) -> dict[str, Any]:
        """Run independent runs (in parallel with a client); returns name → dataset.

        A run whose file already holds the same resolved config is loaded, not recomputed."""
        from headspec.conventions.budget import check_budget

        self._check_stop()
        todo, done = [], {}
        for r, c in self.planned(batch):
            ds = reusable_result(self.path(r.name), c)
            if ds is not None:
                done[r.name] = ds
                self.outcome.reused += 1
                self.outcome.reused_seconds += float(ds.attrs.get(results.COMPUTE_SECONDS, 0.0))
                self._log(f"{self.id} {r.name}: reused")
            else:
                check_budget(c)  # only what will run: a finished run needs no memory
                todo.append((r, c))
        if self.client is not None and len(todo) > 0:
            done.update(self._run_dask(todo))
        else:
            for r, c in todo:
                done[r.name] = self._run_here(r, c)
        return {r.name: done[r.name] for r in batch}

    def _check_stop(self) -> None:
        if self.stop is not None and self.stop.is_set():
            raise Stopped(self.id)

    def progress(self, text: str) -> None:
        """A line in the reproduction's log (the recipe's own long work: what it did, how long)."""
        self._log(f"{self.id} {text}")

    def _log(self, text: str) -> None:
        if self.log is not None and not (self.stop is not None and self.stop.is_set()):
            self.log(text)

    def _run_here(self, r: Run, c) -> Any:
        import time

        from headspec.conventions.checkpoint import path_for
        from headspec.conventions.runs import compute

        t0, c0 = time.perf_counter(), time.process_time()
        # a long simulation keeps its state beside its file, as on a worker: an interrupted
        # reproduction (--workers 1, smoke scale) resumes it instead of starting it again
        kept = path_for(self.path(r.name))
        ds = compute(r.kind, c, checkpoint=kept)
        took, _ = results.stamp_compute(ds, t0, c0)
        results.save(ds, self.path(r.name))
        kept.unlink(missing_ok=True)
        self._log(f"{self.id} {r.name}: {took:.0f} s")
        return ds

    def _run_dask(self, todo: list) -> dict[str, Any]:
        """The runs as tasks of the sweep's worker function (the worker writes the file itself
        when it shares this folder, else this process writes what it returns)."""
        import secrets

        from distributed import as_completed

        from headspec.apps.sweep.worker import TOKEN, run_task
        from headspec.conventions.io import write_text_atomic

        token_file = self.outdir / TOKEN
        if not token_file.exists():
            write_text_atomic(token_file, secrets.token_hex(16))
        token = token_file.read_text()
        # a recipe's later batches (the ODEs beside its simulations, runs chosen from results)
        # go before other recipes' first ones: chains finish early and their analysis, in this
        # process, overlaps the runs still on the cluster instead of piling up at the end
        self._stage += 1
        futures = {
            self.client.submit(
                run_task, r.kind, c.model_dump_json(), str(self.path(r.name)), token,
                pure=False, priority=self._stage,
            ): r
            for r, c in todo
        }  # fmt: skip
        out = {}
        for fut in as_completed(futures):
            self._check_stop()  # interrupted: the cluster is closing, its results are not read
            r, res = futures[fut], fut.result()
            if res["status"] == "failed":
                raise RuntimeError(f"run {r.name} failed on a worker: {res['error']}")
            if not res.get("written"):
                results.save(res["dataset"], self.path(r.name))
            out[r.name] = results.load(self.path(r.name), kinds=results.TASK_KINDS)
            took, cpu = res["elapsed_s"], res["cpu_s"]
            self._log(f"{self.id} {r.name}: {took:.0f} s on a worker (CPU {cpu:.0f} s)")
        return out

    def theory(self, name: str, sets: Sets | None = None, extra: dict | None = None):
        return self.runs([Run(name, "theory", dict(sets or {}), extra)])[name]

    def simulate(self, name: str, sets: Sets | None = None, extra: dict | None = None):
        ds = self.runs([Run(name, "simulate", dict(sets or {}), extra)])[name]
        return ds, self.path(name)

    def theory_of(self, sim: Run, sets: Sets | None = None) -> Run:
        """The ODE run (named ``<sim>_ode``) of simulation ``sim``'s config, started from each of
        its seeds' exact initial state (its result file), with ``sets`` on top; ``diffusion.*``
        settings are dropped."""
        init = {"kind": "simulation", "path": self.path(sim.name).as_posix()}
        own = {k: v for k, v in sim.sets.items() if not k.startswith("diffusion.")}
        extra = {k: v for k, v in (sim.extra or {}).items() if k != "diffusion"}
        return Run(f"{sim.name}_ode", "theory", {**own, "theory.init": init, **(sets or {})},
                   extra or None)  # fmt: skip

    def paired_plan(self, batch: list[Run], theory_sets: Sets | None = None) -> list[Run]:
        """The runs of :meth:`paired`: the simulations, then the ODE beside each."""
        return [*batch, *(self.theory_of(r, theory_sets) for r in batch)]

    def planned(self, batch: list[Run]) -> list[tuple[Run, Any]]:
        """Each run of ``batch`` with its resolved config, as :meth:`runs` would run it."""
        return [(r, self.cfg(MODELS[r.kind], r.name, r.sets, extra=r.extra)) for r in batch]

    def paired(self, batch: list[Run], theory_sets: Sets | None = None) -> dict:
        """Simulations and, beside each, the ODE from each of its seeds' exact initial state.

        Returns name → (simulation, theory, deviations) with the deviations of
        :func:`headspec.conventions.comparison.compare` over the whole run."""
        from headspec.conventions.comparison import compare

        sims = self.runs(batch)
        ths = self.runs([self.theory_of(r, theory_sets) for r in batch])
        return {
            r.name: (sims[r.name], ths[f"{r.name}_ode"],
                     compare(sims[r.name], ths[f"{r.name}_ode"]))
            for r in batch
        }  # fmt: skip

    def figure(self, fig, name: str):
        from headspec.apps.plots import write_figure

        path = self.figdir / f"{self.id}_{name}.png"
        write_figure(fig, path, dpi=130)
        fig.clear()
        self.outcome.figures.append(path)

    def claim(self, claim: Claim) -> Claim:
        """Record ``claim``: its id is this experiment's id, a dot, then its own name, and no
        other claim of the outcome has it."""
        if not claim.id.startswith(f"{self.id}."):
            raise ValueError(f"claim id {claim.id!r} must start with {self.id + '.'!r}")
        if any(c.id == claim.id for c in self.outcome.claims):
            raise ValueError(f"claim id {claim.id!r} recorded twice")
        self.outcome.claims.append(claim)
        return claim


def ode_beside(ctx: Context, cid: str, where: str, value: float, detail: str, label: str = "",
               measure: str = "") -> None:  # fmt: skip
    """The measured-only claim "``label``ODE beside the simulation (``where``)": the largest
    relative deviation of the seed-mean risk (``measure`` adds to its description)."""
    ctx.claim(Claim(cid, f"{label}ODE beside the simulation ({where})", "largest relative "
                    f"deviation of the seed-mean risk, ODE from simulation, over the run{measure}",
                    value, unit="%", detail=detail))  # fmt: skip


def reusable_result(path: Path, cfg) -> Any:
    """The dataset in ``path`` when it is a valid result of exactly this resolved config, or of
    an ODE started from a simulation's file that has since moved (the report folder copied or
    renamed) whose seeds' initial (M, Q, b) equal, bit for bit, those in the file now named."""
    if not path.exists():
        return None
    try:
        ds = results.load(path, kinds=results.TASK_KINDS)
    except Exception:  # a damaged or foreign file is recomputed (and overwritten)
        return None
    try:  # the stored config read by today's model: fields added since take their defaults
        stored = type(cfg).model_validate(results.config_of(ds))
    except Exception:  # a field since removed or renamed: recomputed
        return None
    if stored.model_dump_json() == cfg.model_dump_json():
        return ds
    return ds if _moved_start(stored, cfg) and _same_start(ds, cfg.theory.init.path) else None


def _moved_start(stored, cfg) -> bool:
    """Whether ``stored`` is ``cfg`` but for the folder of its initial state's simulation file."""
    init = getattr(getattr(cfg, "theory", None), "init", None)
    if getattr(init, "kind", None) != "simulation" or stored.theory.init.kind != "simulation":
        return False
    if Path(stored.theory.init.path).name != Path(init.path).name:
        return False
    old = stored.model_dump(mode="json")
    old["theory"]["init"]["path"] = init.path
    return old == cfg.model_dump(mode="json")


def _same_start(ds, sim_path: str) -> bool:
    """Whether every seed of the ODE result ``ds`` starts where that seed does in ``sim_path``."""
    try:
        sim = results.load(Path(sim_path), kinds=results.TASK_KINDS)
        sim = sim.sel(seed=ds.seed.values)
        return all(np.array_equal(ds[v].isel(t=0).values, sim[v].isel(t=0).values) for v in "MQb")
    except Exception:  # the file or one of the seeds is missing: not the same start
        return False


def fmt(x, digits=3) -> str:
    """``x`` to ``digits`` significant digits (the recipes' notes and claims)."""
    return f"{x:.{digits}g}"


def finite_mean_se(x):
    """Mean ± s.e. of the finite values (s.e. 0 for a single value: nothing to spread)."""
    m, se = mean_se(np.ravel(x))
    return float(m), float(se) if np.isfinite(se) or not np.isfinite(m) else 0.0


def first_crossing(t, x, level) -> float:
    """The first time t where ``x`` ≥ ``level`` (NaN if never)."""
    idx = np.flatnonzero(x >= level)
    return float(t[idx[0]]) if idx.size else float("nan")
