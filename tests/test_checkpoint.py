"""An interrupted simulation resumes from its checkpoint and gives, bit for bit, the result of a
run never stopped (headspec.conventions.checkpoint): for every engine, the SGD engines also from
inside a grid interval; a checkpoint of another config, or a damaged one, is ignored; the
compute time of both parts is counted."""

import json

import numpy as np
import pytest

from headspec.conventions import checkpoint as ck
from headspec.conventions.config import SimulateConfig, load_config
from headspec.conventions.runs import simulate
from headspec.conventions.timing import stamp_compute

VARS = ("M", "Q", "b", "risk", "risk_se", "test_risk", "cos", "fail_step")


def _cfg(engine: str, *more: str) -> SimulateConfig:
    return load_config(SimulateConfig, overrides=[
        f'train.engine="{engine}"', "task.D=400", "task.L=4", "model.H=2", "seeds=2",
        "train.T=2.0", "record.points=8", "record.n_mc=128", "record.n_test=8",
        'train.dtype="float64"', "diffusion.n=256", "diffusion.dt=0.05", *more,
    ])  # fmt: skip


class Stop(Exception):
    """Raised by the progress callback: the run stops as on an interrupt."""


def _interrupted(cfg, path, after_calls: int) -> int:
    """Run ``cfg`` with a checkpoint at every advance (EVERY_S = 0) and stop it at the progress
    call after ``after_calls``: returns the step of the last checkpoint written (the progress
    call before; a checkpoint follows each call)."""
    seen = []

    def progress(done, total):
        seen.append(done)
        if len(seen) > after_calls:
            raise Stop

    with pytest.raises(Stop):
        simulate(cfg, progress=progress, checkpoint=path)
    return seen[-2]


@pytest.mark.parametrize(
    "engine",
    ["reduced", pytest.param("full", marks=pytest.mark.slow),
     pytest.param("diffusion", marks=pytest.mark.slow)],
)  # fmt: skip
def test_a_resumed_run_equals_one_never_stopped(engine, tmp_path, monkeypatch):
    monkeypatch.setattr(ck, "EVERY_S", 0.0)  # a checkpoint at every grid point
    cfg = _cfg(engine)
    whole = simulate(cfg)
    path = tmp_path / "run.nc.partial.npz"
    kept = _interrupted(cfg, path, after_calls=8)
    assert path.is_file()
    resumed = simulate(cfg, checkpoint=path)
    assert resumed.attrs["resumed_at_step"] == kept
    # the SGD engines are checkpointed inside grid intervals too (pieces of 1/64 of the run)
    assert (kept in whole.step.values) == (engine == "diffusion"), kept
    for v in VARS:
        np.testing.assert_array_equal(resumed[v].values, whole[v].values, err_msg=v)
    # the compute time of the first part is added to the second's, and the note removed
    earlier = resumed.attrs[ck.EARLIER_SECONDS]
    assert earlier > 0
    wall, _ = stamp_compute(resumed, 0.0, 0.0)
    assert ck.EARLIER_SECONDS not in resumed.attrs and wall >= earlier


def test_a_checkpoint_of_another_config_or_a_damaged_one_is_not_used(tmp_path, monkeypatch):
    monkeypatch.setattr(ck, "EVERY_S", 0.0)
    path = tmp_path / "run.nc.partial.npz"
    _interrupted(_cfg("reduced"), path, after_calls=4)
    other = _cfg("reduced", "train.lr=0.9")
    fresh = simulate(other, checkpoint=path)
    assert "resumed_at_step" not in fresh.attrs
    np.testing.assert_array_equal(fresh.M.values, simulate(other).M.values)
    path.write_bytes(b"not a checkpoint")
    again = simulate(_cfg("reduced"), checkpoint=path)
    assert "resumed_at_step" not in again.attrs


def test_no_checkpoint_is_written_before_its_interval(tmp_path):
    """Short runs (under EVERY_S = 300 s of wall time) leave no file behind."""
    path = tmp_path / "run.nc.partial.npz"
    simulate(_cfg("reduced"), checkpoint=path)
    assert not path.exists()


def test_an_interrupted_reproduction_counts_the_simulations_kept_half_way(tmp_path):
    from headspec.apps.cli.reproduce import _kept

    (tmp_path / "E1_a.nc").write_bytes(b"")
    assert "half-way" not in _kept(tmp_path)
    ck.path_for(tmp_path / "E1_b.nc").write_bytes(b"")
    said = _kept(tmp_path)
    assert said.startswith(f"1 run finished and kept in {tmp_path}, 1 simulation half-way in a ")


def test_a_checkpoint_without_its_step_resumes_at_its_last_grid_point(tmp_path, monkeypatch):
    """The first checkpoints (written before they recorded their step) came only at grid
    points: such a file resumes at the last observation's grid point."""
    import json

    monkeypatch.setattr(ck, "EVERY_S", 0.0)
    monkeypatch.setattr(ck, "PIECES", 1)  # whole grid intervals, as those checkpoints were
    cfg = _cfg("reduced")
    path = tmp_path / "run.nc.partial.npz"
    kept = _interrupted(cfg, path, after_calls=4)
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    head = json.loads(str(arrays.pop("header")))
    assert head.pop("at") == kept
    np.savez(path, header=np.asarray(json.dumps(head)), **arrays)
    resumed = simulate(cfg, checkpoint=path)
    assert resumed.attrs["resumed_at_step"] == kept
    np.testing.assert_array_equal(resumed.M.values, simulate(cfg).M.values)


def test_a_reproduction_in_this_process_resumes_its_half_way_simulation(tmp_path, monkeypatch):
    """Runs of a recipe in this process (--workers 1, the smoke scale) keep a checkpoint beside
    their file, as a worker does: a simulation interrupted half-way resumes where it stopped,
    gives the result of a run never stopped, and its checkpoint is removed once it is written."""
    from headspec.apps.experiments.base import Context, Run

    monkeypatch.setattr(ck, "EVERY_S", 0.0)
    cfg = _cfg("reduced")
    spec = {"config": json.loads(cfg.model_dump_json())}
    ctx = Context("E9", spec, "quick", tmp_path)
    kept = ck.path_for(ctx.path("sim"))
    at = _interrupted(ctx.cfg(SimulateConfig, "sim"), kept, after_calls=8)
    ds = ctx.runs([Run("sim", "simulate")])["sim"]
    assert ds.attrs["resumed_at_step"] == at and not kept.exists()
    whole = simulate(cfg)
    for v in VARS:
        np.testing.assert_array_equal(ds[v].values, whole[v].values, err_msg=v)
