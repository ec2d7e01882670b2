"""What a result's numbers must mean, beyond its schema: checked when a result is read
(:func:`headspec.conventions.results.load`), so that no command plots, compares or restarts from
an impossible state.

A simulation or theory result is refused (:func:`meaning_problem` returns one line) when

- M, Q or b is not finite in a seed not marked failed (``failed = 0``) at any time, or in a failed
  seed before its ``fail_t`` (its values after ``fail_t`` are NaN by design);
- Q is not symmetric, or Q − MMᵀ is not positive semi-definite, i.e. no keys k_h have these
  overlaps (Q − MMᵀ is the Gram matrix of the keys' parts outside span(K*), divided by D): its
  smallest eigenvalue is below −tol with

      tol = 64 · H · ε · max(1, max |Q|),

  ε the machine epsilon of the precision the overlaps were computed in (float32: 1.2e-7 for
  simulations of the full or reduced engine with ``train.dtype = "float32"``; float64: 2.2e-16
  otherwise — theory, the diffusion engine, float64 runs). Each overlap carries a relative
  round-off of a few ε, and the H eigenvalues of an H × H difference of two such matrices a few
  H·ε more; 64 leaves room for sums over D terms (measured on the recipes' results: the smallest
  eigenvalue is ≥ 0 for every seed and time of the smoke reproduction, and exactly singular
  states such as identical heads give −O(ε·|Q|));
- the ``step`` coordinate is not t·D/B (task.D, train.batch of its ``config_json``) at every grid
  point, or is not a strictly increasing sequence of whole steps from 0.

Example:
    >>> import numpy as np
    >>> realisable_tolerance(np.float64, H=2, Q=np.eye(2) * 4.0)  # 64 · 2 · 2.2e-16 · 4
    1.1368683772161603e-13
"""

from __future__ import annotations

import json

import numpy as np
import xarray as xr

ROUNDOFF_FACTOR = 64  # tol = ROUNDOFF_FACTOR · H · ε · max(1, max |Q|)


def realisable_tolerance(dtype, H: int, Q) -> float:
    """How far below 0 the smallest eigenvalue of Q − MMᵀ may lie by round-off alone."""
    eps = float(np.finfo(dtype).eps)
    return ROUNDOFF_FACTOR * H * eps * max(1.0, float(np.nanmax(np.abs(Q), initial=0.0)))


def _precision(ds: xr.Dataset, cfg: dict):
    """The dtype the overlaps of a result were computed in."""
    train = cfg.get("train", {})
    sgd = ds.attrs.get("kind") == "simulation" and train.get("engine", "full") != "diffusion"
    return np.float32 if sgd and train.get("dtype") == "float32" else np.float64


def meaning_problem(ds: xr.Dataset) -> str | None:
    """What makes a simulation or theory result impossible, naming the variable, the seed and
    the time; None if nothing."""
    cfg = json.loads(ds.attrs["config_json"])
    problem = _step_problem(ds, cfg) or _value_problem(ds)
    if problem is not None:
        return problem
    t = np.asarray(ds.t.values, float)
    seeds = [int(s) for s in ds.seed.values]
    failed = np.asarray(ds.failed.values, bool)
    fail_t = np.asarray(ds.fail_t.values, float)
    dtype = _precision(ds, cfg)
    M, Q, b = (np.asarray(ds[v].values, float) for v in ("M", "Q", "b"))
    H = Q.shape[-1]
    for i, seed in enumerate(seeds):
        live = t < fail_t[i] if failed[i] and np.isfinite(fail_t[i]) else np.ones(t.size, bool)
        if failed[i] and not np.isfinite(fail_t[i]):
            live = np.zeros(t.size, bool)  # a failed seed without a time: nothing to check
        for name, x in (("M", M[i]), ("Q", Q[i]), ("b", b[i])):
            bad = ~np.isfinite(x.reshape(t.size, -1)).all(axis=1) & live
            if bad.any():
                k = int(np.argmax(bad))
                mark = "is marked failed only from" if failed[i] else "is not marked failed"
                when = f" t = {fail_t[i]:.4g}" if failed[i] else ""
                return (
                    f"variable {name!r} of seed {seed} is not finite at t = {t[k]:.4g} (step "
                    f"{int(ds.step.values[k])}) though the seed {mark}{when}"
                )
        if not live.any():
            continue
        q, m = Q[i][live], M[i][live]  # (n, H, H), (n, H, F)
        scale = np.maximum(1.0, np.abs(q).max(axis=(1, 2)))  # (n,)
        tols = realisable_tolerance(dtype, H, 1.0) * scale  # (n,)
        asym = np.abs(q - np.swapaxes(q, 1, 2)).max(axis=(1, 2)) > tols
        w = np.linalg.eigvalsh(0.5 * (q + np.swapaxes(q, 1, 2)) - m @ np.swapaxes(m, 1, 2))[:, 0]
        for j, k in enumerate(np.flatnonzero(live)):
            tol = float(tols[j])
            if asym[j]:
                return f"variable 'Q' of seed {seed} is not symmetric at t = {t[k]:.4g}"
            if w[j] < -tol:
                q = Q[i, k]
                return (
                    f"variables 'Q' and 'M' of seed {seed} at t = {t[k]:.4g} (step "
                    f"{int(ds.step.values[k])}) are no keys' overlaps: Q − MMᵀ has eigenvalue "
                    f"{w[j]:.4g}, below −{tol:.2g} (the round-off of {np.dtype(dtype).name} at "
                    f"max |Q| = {np.abs(q).max():.4g}), so it is not positive semi-definite"
                )
    return None


def _step_problem(ds: xr.Dataset, cfg: dict) -> str | None:
    """The ``step`` coordinate against t = step·B/D."""
    try:
        D, B = int(cfg["task"]["D"]), int(cfg.get("train", {}).get("batch", 1))
    except (KeyError, TypeError, ValueError):
        return None  # the config's own check names this
    step = np.asarray(ds.step.values)
    t = np.asarray(ds.t.values, float)
    if not np.all(np.isfinite(step)) or np.any(step != np.round(step)):
        return "coordinate 'step' holds numbers that are not whole steps"
    step = step.astype(np.int64)
    if step[0] != 0 or np.any(np.diff(step) <= 0):
        return "coordinate 'step' does not start at 0 and increase"
    expect = step * B / D
    bad = ~np.isclose(t, expect, rtol=1e-12, atol=1e-300)
    if bad.any():
        k = int(np.argmax(bad))
        return (
            f"coordinate 'step' is {int(step[k])} at t = {t[k]:.6g}, but t = step·B/D = "
            f"{int(step[k])}·{B}/{D} = {expect[k]:.6g} with the file's task.D = {D} and "
            f"train.batch = {B}"
        )
    return None


def _value_problem(ds: xr.Dataset) -> str | None:
    """Risks and standard errors below 0, cosines beyond ±1, and divergence marks that contradict
    each other (``failed`` against ``fail_t``)."""
    for name in ("risk", "risk_se", "test_risk", "test_risk_se", "risk_by_atom"):
        if name in ds and np.any(np.asarray(ds[name].values, float) < 0):
            return f"variable {name!r} is negative (a risk and its s.e. are ≥ 0)"
    if "cos" in ds and np.any(np.abs(np.asarray(ds.cos.values, float)) > 1 + 1e-6):
        return "variable 'cos' is beyond ±1 (a cosine overlap M_hf/√Q_hh)"
    failed = np.asarray(ds.failed.values, bool)
    fail_t = np.asarray(ds.fail_t.values, float)
    t = np.asarray(ds.t.values, float)
    M = np.asarray(ds.M.values, float)
    for i, seed in enumerate(int(s) for s in ds.seed.values):
        if not failed[i] and np.isfinite(fail_t[i]):
            return f"seed {seed} has fail_t = {fail_t[i]:g} but is not marked failed"
        after = t > fail_t[i] if failed[i] and np.isfinite(fail_t[i]) else np.zeros(t.size, bool)
        if np.isfinite(M[i][after]).any():  # a failed seed's values after fail_t are NaN
            return (f"seed {seed} is marked failed at t = {fail_t[i]:g} but has finite "
                    "overlaps after it")  # fmt: skip
    return None
