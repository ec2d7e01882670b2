"""Runs from configs: simulate, solve the ODE, Bayes risks, pruning of a saved result.

Each function turns its config into objects (:mod:`headspec.conventions.build`), calls the
numerical code of :mod:`headspec.dynamics` and assembles the result in the shared schema
(:mod:`headspec.conventions.results`) with the resolved config and provenance.

Example:
    >>> from headspec.conventions.config import SimulateConfig, load_config
    >>> cfg = load_config(SimulateConfig, overrides=[
    ...     "task.D=50", "task.L=4", "model.H=2", "train.T=1.0", "seeds=2", "record.points=3"])
    >>> ds = simulate(cfg)
    >>> ds.risk.dims, ds.M.shape
    (('seed', 't'), (2, 4, 2, 2))
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from headspec.conventions import build, results
from headspec.conventions.timegrid import time_grid
from headspec.core.compiles import release_if_crowded
from headspec.core.observables import Observation
from headspec.core.precision import float64
from headspec.core.stats import MCEstimate
from headspec.dynamics import ode
from headspec.dynamics.bayes import (
    bayes_risk,
    estimate_risks,
    exact_risk_of,
    reference_predictors,
)
from headspec.dynamics.engines import run, seed_keys
from headspec.dynamics.prune import prune_path


def _grid(cfg):
    r = cfg.record
    return time_grid(r.grid, r.points, r.t_min, cfg.train.T, cfg.task.D, cfg.train.batch)


@float64
def simulate(cfg, progress: Callable[[int, int], None] | None = None, schedule=None,
             checkpoint: str | Path | None = None):  # fmt: skip
    """Run a :class:`~headspec.conventions.config.SimulateConfig`; returns the result dataset.

    ``progress(steps_done, steps_total)`` is called after every chunk; ``schedule`` (a hashable
    pure function t ↦ η(t)/η) overrides the config's schedule. ``checkpoint``: a file where
    the run so far is kept every few minutes and from which an interrupted run of the same
    config resumes (:mod:`headspec.conventions.checkpoint`; the caller removes it once the
    result is written); not with ``schedule``, which no config records.
    """
    release_if_crowded()  # a long-lived process (reproduce, a sweep worker) compiles many programs
    dtype = jnp.float32 if cfg.train.dtype == "float32" else jnp.float64
    engine = build.engine(cfg, schedule)
    law = engine.law
    seed_ids = np.arange(cfg.seed, cfg.seed + cfg.seeds)
    keys = seed_keys(seed_ids)
    base = build.risk_base(cfg.record, law, cfg.task.L, cfg.model.H)
    state = build.start(cfg, engine, keys, dtype)
    test, n_test = engine.test_set(keys["test"], state, cfg.record.n_test)
    steps, ts = _grid(cfg)
    done, at, after, ckpt, piece = None, None, None, None, None
    if checkpoint is not None and schedule is None:
        from headspec.conventions.checkpoint import PIECES, Checkpoint

        ckpt = Checkpoint(checkpoint, cfg.model_dump_json())
        resumed = ckpt.load(state)
        if resumed is not None:
            done, state, at = resumed
            at = int(steps[len(done) - 1]) if at is None else int(at)
        # checkpoints inside a grid interval too, where that changes no number
        piece = max(1, int(steps[-1]) // PIECES) if engine.any_chunking else None

        def after(obs, state, at):
            if len(obs) < len(steps):  # the finished run is the result itself
                ckpt.save(obs, state, at)

    obs, state = run(engine, state, keys["train"], steps, base, test=test, progress=progress,
                     done=done, at=at, after=after, piece=piece)  # fmt: skip
    fail_step = np.asarray(state.fail_step)
    ds = assemble(
        "simulation",
        cfg,
        law,
        ts,
        steps,
        seed_ids,
        obs,
        fail_step,
        np.where(fail_step >= 0, fail_step * cfg.train.batch / cfg.task.D, np.nan),
        {
            "engine": cfg.train.engine,
            "n_test": n_test,
            "dtype": cfg.train.dtype,
            **_engine_attrs(cfg, engine),
        },
    )
    if hasattr(state, "fail_check"):  # the diffusion engine says which check a seed failed
        from headspec.dynamics.engines.diffusion import CHECKS

        why = [CHECKS.get(int(c), "") for c in np.asarray(state.fail_check)]
        ds["fail_reason"] = ("seed", np.asarray(why, dtype=object))
    if at is not None:  # resumed from a checkpoint at step ``at``
        from headspec.conventions.checkpoint import EARLIER_CPU_SECONDS, EARLIER_SECONDS

        ds.attrs[EARLIER_SECONDS], ds.attrs[EARLIER_CPU_SECONDS] = ckpt.earlier
        ds.attrs["resumed_at_step"] = at
    return ds


def _engine_attrs(cfg, engine) -> dict:
    """What a result records about its engine beyond the config (the diffusion engine's base
    samples: their number and whether they are head-cyclic)."""
    if cfg.train.engine != "diffusion":
        return {}
    cyclic = build.diffusion_head_cyclic(cfg)
    n = engine.base.n // (cfg.model.H if cyclic else 1)
    return {
        "n_drift": int(n),
        "head_cyclic": int(cyclic),
        "dt": float(cfg.diffusion.dt),
        "resample": int(cfg.diffusion.resample),
    }


@float64
def solve(cfg, progress: Callable[[float, float], None] | None = None, schedule=None):
    """Integrate the ODE of SPEC §5 for a :class:`~headspec.conventions.config.TheoryConfig`.

    Returns a dataset of the shared result schema (kind "theory") on the same time grid as
    ``simulate`` with the same task/train/record options; its risk uses the simulator's base
    samples (``record.mc_seed``, ``record.n_mc``). ``progress(t_done, T)`` at every grid point.
    """
    release_if_crowded()
    law = cfg.task.latent.build()
    H, L = cfg.model.H, cfg.task.L
    init = build.initial_state(cfg)
    problem = build.drift_problem(cfg, law, init)
    steps, ts = _grid(cfg)
    y0, seed_ids = init.states(H, law.F, np.arange(cfg.seed, cfg.seed + cfg.seeds))
    run = ode.integrate(
        y0,
        ts,
        problem,
        build.risk_base(cfg.record, law, L, H),
        schedule or build.schedule(cfg.train.schedule),
        solver=ode.Solver(cfg.theory.rtol, cfg.theory.atol, cfg.theory.max_steps),
        progress=progress,
        certify=cfg.theory.certify,
    )
    obs, fail_t, n_steps = run.obs, run.fail_t, run.n_steps
    failed = np.isfinite(fail_t)
    fail_step = np.where(failed, np.round(np.nan_to_num(fail_t) * cfg.task.D), -1).astype(int)
    extra = {
        "engine": "ode",
        "init": cfg.theory.init.kind,
        "method": problem.method.name,
        "n_drift": int(problem.base.n),
        "head_cyclic": int(build.theory_head_cyclic(cfg)),
        "solver_steps": n_steps,
        **_beyond_reach(problem, ts, obs),
        **_quadrature_errors(run),
    }
    return assemble("theory", cfg, law, ts, steps, seed_ids, obs, fail_step, fail_t, extra)


def _beyond_reach(problem, ts, obs) -> dict:
    """For the exact drift: its reach in Q_hh and the first grid time at which a seed's state
    was beyond it (NaN: never), where the drift fell back to sampling (``Exact.in_reach``)."""
    if not hasattr(problem.method, "reach_of"):
        return {}
    reach = problem.method.reach_of(problem.activation)
    qmax = np.array([np.max(np.diagonal(o.Q, axis1=-2, axis2=-1)) for o in obs])  # (T,)
    beyond = np.flatnonzero(qmax > reach)
    return {"exact_reach": float(reach),
            "sampled_from_t": float(ts[beyond[0]]) if beyond.size else float("nan")}  # fmt: skip


def _quadrature_errors(run: ode.Integration) -> dict:
    """For the exact drift: the largest error bound of the vector field met between its solves
    (over seeds and times) and of the path (∫ of it over t, largest over seeds): the trajectory's
    quadrature error when no unstable direction amplifies it."""
    if run.drift_err.shape[1] == 0:
        return {}
    ok = np.isfinite(run.drift_err)
    return {"quadrature_drift_err": float(np.max(run.drift_err, initial=0.0, where=ok)),
            "quadrature_path_err": float(np.nanmax(run.path_err()))}  # fmt: skip


_BAYES_MEMO: dict[tuple, MCEstimate] = {}


def reference_bayes_risk(seed: int, law, L: int, n: int = 100_000) -> MCEstimate:
    """R_B on n Monte-Carlo sequences from key(seed): the reference every result records.
    Remembered per process (a reproduction or sweep records it for many runs of one law)."""
    memo_key = (seed, type(law).__name__, L, n,
                tuple(np.asarray(x).tobytes() for x in jax.tree.leaves(law)))  # fmt: skip
    if memo_key not in _BAYES_MEMO:
        if len(_BAYES_MEMO) > 256:
            _BAYES_MEMO.clear()
        _BAYES_MEMO[memo_key] = bayes_risk(jax.random.key(seed), law, L, n=n)
    return _BAYES_MEMO[memo_key]


def assemble(kind, cfg, law, ts, steps, seed_ids, obs, fail_step, fail_t, extra):
    """The result dataset from per-grid-point observations (shared by simulation and theory):
    stacks them to (seed, t, …) and records the Bayes risk (10^5 sequences) as a reference."""
    stacked = Observation(*[np.stack(x, axis=1) for x in zip(*obs, strict=True)])  # (S, T, …)
    rb = reference_bayes_risk(cfg.seed, law, cfg.task.L)
    return results.from_observations(
        kind=kind,
        t=ts,
        steps=steps,
        seeds=seed_ids,
        obs=stacked,
        fail_step=fail_step,
        fail_t=fail_t,
        config=cfg,
        extra_attrs={"bayes_risk": rb.mean, "bayes_risk_se": rb.se, **extra},
        atoms=law.atoms_or_none(),
    )


def divergence_message(ds, seed_index: int) -> str:
    """Human explanation of a diverged seed: where, and the likely cause — settings far beyond
    the usual ones (:func:`~headspec.conventions.config.schema.unusual_settings`) first, then the
    learning rate."""
    from headspec.conventions.config.schema import unusual_settings

    lr = ds.attrs.get("lr", "?")
    step = int(ds.fail_step[seed_index])
    t = float(ds.fail_t[seed_index])
    try:
        causes = unusual_settings(config_model(ds))
    except (ValueError, KeyError, TypeError):  # a result without a readable config
        causes = []
    cause = (
        f"likely cause: {'; '.join(causes)} — bring it back to the usual size; otherwise the "
        f"learning rate (train.lr = {lr}) is too large — lower train.lr (or train.lr_b)"
        if causes
        else f"the learning rate (train.lr = {lr}) is likely too large — lower train.lr (or "
        f"train.lr_b)"
    )
    reason = str(ds["fail_reason"].values[seed_index]) if "fail_reason" in ds else ""
    if reason.startswith("Q − MMᵀ"):  # the diffusion engine's realisability check
        return (
            f"seed {int(ds.seed[seed_index])} failed at step {step} (t = {t:.4g}): {reason}, "
            f"checked after every solver step; the diffusion engine's SDE is outside its domain "
            f"of validity here (docs/engine-diffusion.md); fix: a smaller diffusion.dt, a "
            f"smaller train.lr or task.latent.scale, or train.engine = reduced; its results "
            f"stop at t = {t:.4g}"
        )
    return (
        f"seed {int(ds.seed[seed_index])} diverged at step {step} (t = {t:.4g}): the loss, "
        f"biases or key norms became non-finite; {cause}; its results stop at t = {t:.4g}"
    )


@float64
def run_bayes(cfg, progress: Callable[[int, int], None] | None = None) -> dict:
    """Bayes risk and reference risks for a :class:`~headspec.conventions.config.BayesRunConfig`.

    Returns a JSON-ready dict: resolved config, seed, provenance and one row per predictor
    (risk, standard error, and excess risk over R_B with its paired standard error; in the
    D → ∞ route also ``exact``, the risk without sampling by :func:`~headspec.dynamics.bayes.
    exact_risk_of`, or None where there is no exact route, and ``exact_err``, its error bound).
    ``progress(sequences_done, samples)`` is called after each Monte-Carlo chunk.
    """
    from headspec.conventions.provenance import run_metadata

    law = cfg.task.latent.build()
    refs = reference_predictors(law, cfg.task.L)
    est, samples = estimate_risks(
        jax.random.key(cfg.seed),
        law,
        cfg.task.L,
        {k: p for k, (p, _) in refs.items()},
        n=cfg.bayes.samples,
        route=cfg.bayes.route,
        D=cfg.task.D,
        frame=cfg.task.frame,
        return_samples=True,
        progress=progress,
    )
    exact: dict[str, tuple[float, float] | None] = {}  # (risk, its error bound)
    if cfg.bayes.route == "projected":  # the finite route differs from D → ∞ by O(1/D)
        if "bayes_softmax" in refs:  # the posterior of a discrete law is this predictor
            exact["bayes"] = exact["bayes_softmax"] = exact_risk_of(
                refs["bayes_softmax"][0], law, cfg.task.L, certify=True
            )
        for name, (pred, _) in refs.items():
            if name not in exact:
                exact[name] = exact_risk_of(pred, law, cfg.task.L, certify=True)
    value = lambda name: None if exact.get(name) is None else exact[name][0]  # noqa: E731
    error = lambda name: None if exact.get(name) is None else exact[name][1]  # noqa: E731
    rows = []
    for name, (pred, desc) in refs.items():
        excess = MCEstimate.of(samples[name] - samples["bayes"])
        rows.append(
            {
                "predictor": name,
                "description": desc,
                "heads": pred.n_heads,
                "risk": est[name].mean,
                "se": est[name].se,
                "excess_over_bayes": excess.mean,
                "excess_se": excess.se,
                "exact": value(name),
                "exact_err": error(name),
            }
        )
    return {
        "command": "bayes",
        "config": cfg.model_dump(mode="json"),
        "seed": cfg.seed,
        "metadata": run_metadata(),
        "bayes_risk": {
            "mean": est["bayes"].mean,
            "se": est["bayes"].se,
            "n": est["bayes"].n,
            "exact": value("bayes"),
            "exact_err": error("bayes"),
        },
        "results": rows,
    }


KINDS = ("simulate", "theory", "splitmap")  # what :func:`compute` runs


def compute(kind: str, cfg, checkpoint: str | Path | None = None):
    """Run the config of a run ``kind``: "simulate" (:func:`simulate`, resuming from and
    writing to ``checkpoint``), "theory" (:func:`solve`) or "splitmap" (one setting of the map
    of uneven splits, :func:`headspec.conventions.splitmap.classify_setting`); returns its
    dataset."""
    if kind == "splitmap":
        from headspec.conventions.splitmap import classify_setting

        return classify_setting(cfg)
    if kind not in KINDS:
        raise ValueError(f"run kind {kind!r} is not one of {', '.join(KINDS)}")
    return simulate(cfg, checkpoint=checkpoint) if kind == "simulate" else solve(cfg)


def config_model(ds):
    """The validated config a result was made with (SimulateConfig, TheoryConfig or, for a
    setting of the map of uneven splits, SplitMapConfig)."""
    from headspec.conventions.config import SimulateConfig, SplitMapConfig, TheoryConfig

    raw = results.config_of(ds)
    if ds.attrs.get("kind") == "splitmap":
        return SplitMapConfig.model_validate(raw)
    return (TheoryConfig if "theory" in raw else SimulateConfig).model_validate(raw)


@float64
def law_of(ds):
    """The latent law a result was made with (built from its recorded config)."""
    return config_model(ds).task.latent.build()


def prune_result(ds, seed_index: int = 0, t_index: int = -1, n: int = 16384, random_orders=8):
    """Greedy and random pruning paths of one seed of a result (its state at one time).

    Returns {"greedy": path, "random": [paths…], "n_heads": [...]}; risks are D → ∞ risks on
    ``n`` base samples (seeded from the result's record.mc_seed); random order k uses key 1000 + k.
    """
    cfg = config_model(ds)
    law = cfg.task.latent.build()
    act = build.activation(cfg.model)
    st = ds.isel(seed=seed_index, t=t_index)
    M, Q, b = (np.asarray(st[v].values) for v in ("M", "Q", "b"))
    base = build.risk_base(cfg.record, law, cfg.task.L, M.shape[0], n)
    greedy = prune_path(M, Q, b, act, law, base, order="greedy")
    rand = [
        prune_path(M, Q, b, act, law, base, order="random", key=jax.random.key(1000 + k))
        for k in range(random_orders)
    ]
    return {"greedy": greedy, "random": rand, "n_heads": greedy["n_heads"]}
