"""The one builder of made-up result files for tests (imported as ``results``-the-test-module:
``from results import made_result, write_result, write_unchecked``; pytest puts tests/ on
``sys.path``). No computation: observations are chosen, the schema, config and provenance are the
real ones (``headspec.conventions.results.from_observations``), so what is written loads like a
file that ``simulate`` or ``theory`` wrote.

- ``made_result(kind, *overrides, …)``: a valid dataset (simulation or theory), small by default
  (D = 40, L = 4, H = 2, two seeds, t = 0, 0.5, 1); every observation can be given.
- ``write_result(path, …)``: the same, saved with the project's checked writer.
- ``write_unchecked(ds, path)``: a dataset written as any program could (no checks): how tests
  make deliberately invalid files from a valid one they then edit.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import xarray as xr

SMALL = ("task.D=40", "task.L=4", "model.H=2", "train.T=1.0")


def made_result(
    kind: str = "simulation",
    *overrides: str,
    seeds: int = 2,
    t=(0.0, 0.5, 1.0),
    config=None,
    M=None,
    Q=None,
    b=None,
    risk=0.3,
    risk_se=1e-3,
    test_risk=np.nan,
    test_risk_se=None,
    failed=(),
    fail_t: float = 0.5,
    bayes_risk: float = 0.2,
    extra: dict | None = None,
    rng: int = 0,
) -> xr.Dataset:
    """A result of the real schema with chosen observations.

    ``overrides`` go to the config after ``SMALL`` and ``seeds=…`` (or give a built ``config``);
    ``M`` (S, T, H, F) defaults to 0.3·N(0, 1), ``Q`` to MMᵀ + 0.02·I (so Q − MMᵀ ⪰ 0, as a loaded
    file must), ``b`` to 0; ``risk``, ``risk_se``, ``test_risk`` (NaN: none) and ``test_risk_se``
    (its value, or risk_se) are scalars or (S, T) arrays, the per-atom risks repeat them; seeds
    in ``failed`` are marked diverged at ``fail_t`` (their values NaN after it). Steps are t·D/B
    as a loaded file must have them; the attributes are ``bayes_risk`` ± 10⁻³, the init and the
    engine or solver steps of the kind, updated by ``extra``.
    """
    from headspec.conventions import results
    from headspec.conventions.config import SimulateConfig, TheoryConfig, load_config
    from headspec.core.observables import Observation

    assert kind in ("simulation", "theory"), f"kind {kind!r}: simulation or theory"
    model = SimulateConfig if kind == "simulation" else TheoryConfig
    cfg = config or load_config(model, overrides=[*SMALL, f"seeds={seeds}", *overrides])
    atoms = cfg.task.latent.build().atoms_or_none()
    t = np.asarray(t, dtype=np.float64)
    S, T, H, F = cfg.seeds, len(t), cfg.model.H, cfg.task.latent.F
    J = 1 if atoms is None else len(atoms)
    if M is None:
        M = 0.3 * np.random.default_rng(rng).normal(size=(S, T, H, F))
    M = np.broadcast_to(M, (S, T, H, F)).astype(np.float64)
    if Q is None:
        Q = M @ M.swapaxes(-1, -2) + 0.02 * np.eye(H)
    full = {
        name: np.broadcast_to(np.asarray(value, dtype=np.float64), (S, T)).copy()
        for name, value in (("risk", risk), ("risk_se", risk_se), ("test_risk", test_risk),
                            ("test_risk_se", risk_se if test_risk_se is None else test_risk_se))
    }  # fmt: skip
    if np.isnan(full["test_risk"]).all():
        full["test_risk_se"][:] = np.nan
    obs = Observation(
        M=M,
        Q=np.broadcast_to(Q, (S, T, H, H)).astype(np.float64),
        b=np.zeros((S, T, H)) if b is None else np.broadcast_to(b, (S, T, H)).astype(np.float64),
        risk_by_atom=np.repeat(full["risk"][..., None], J, -1),
        test_risk_by_atom=np.repeat(full["test_risk"][..., None], J, -1),
        **full,
    )
    fail_step, fail_ts = np.full(S, -1), np.full(S, np.nan)
    for s in failed:
        fail_step[s], fail_ts[s] = round(fail_t * cfg.task.D / cfg.train.batch), fail_t
    attrs = {"bayes_risk": bayes_risk, "bayes_risk_se": 1e-3, "init": "perturbed"}
    attrs |= {"solver_steps": 10} if kind == "theory" else {"engine": "full"}
    return results.from_observations(
        kind=kind, t=t, steps=np.round(t * cfg.task.D / cfg.train.batch).astype(int),
        seeds=np.arange(cfg.seed, cfg.seed + S), obs=obs, fail_step=fail_step, fail_t=fail_ts,
        config=cfg, extra_attrs=attrs | (extra or {}), atoms=atoms,
    )  # fmt: skip


def write_result(path, kind: str = "simulation", *overrides: str, **given) -> Path:
    """``made_result(kind, *overrides, **given)`` saved at ``path`` by the checked writer."""
    from headspec.conventions import results

    return results.save(made_result(kind, *overrides, **given), path)


def write_unchecked(ds: xr.Dataset, path) -> str:
    """Write ``ds`` as any program could (no checks): for deliberately invalid files."""
    ds.to_netcdf(path, engine="h5netcdf")
    return str(path)
