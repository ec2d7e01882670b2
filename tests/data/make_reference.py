"""How tests/data/reference_before_redesign.nc was made, at commit a6613a1 (before the
architecture redesign), with the module paths of that time. tests/test_reference.py re-runs the
same configs through the current code and checks the results are bit-identical."""
import jax, numpy as np, xarray as xr
import headspec
from headspec.config import load_config, SimulateConfig, TheoryConfig
from headspec.sgd import simulate
from headspec.theory import solve

CASES = {
    "sim_full": (SimulateConfig, ["task.D=40", "task.L=4", "model.H=2", "train.T=1.0", "seeds=2",
                                   "record.points=4", "record.n_mc=256", "record.n_test=8"]),
    "sim_reduced": (SimulateConfig, ["task.D=60", "task.L=4", "model.H=3", "train.T=0.5", "seeds=2",
                     "record.points=3", "record.n_mc=256", "train.engine=\"reduced\"",
                     "model.activation=\"softmax1\"", "train.schedule={kind=\"inverse_time\", t0=1.0}"]),
    "sim_f64_bayes": (SimulateConfig, ["task.D=30", "task.L=3", "model.H=2", "train.T=0.5", "seeds=1",
                     "record.points=3", "record.n_mc=128", "record.n_test=4", "train.dtype=\"float64\"",
                     "model.activation=\"bayes_softmax\"", "task.latent={kind=\"gaussian\", mean=[1.0, 0.0], var=[2.0, 0.5]}"]),
    "theory": (TheoryConfig, ["task.D=100", "task.L=4", "model.H=2", "train.T=2.0", "seeds=2",
                              "record.points=4", "record.n_mc=256", "theory.n=256"]),
    "theory_sym_mc": (TheoryConfig, ["task.L=4", "model.H=2", "train.T=1.0", "record.points=3",
                              "record.n_mc=128", "theory.n=128", "theory.sampler=\"mc\"",
                              "theory.init={kind=\"symmetric\"}", "model.activation=\"softmax1\""]),
}
VARS = ("risk", "risk_se", "risk_by_atom", "test_risk", "test_risk_se", "M", "Q", "b", "cos", "fail_step")
out = {}
for name, (model, ov) in CASES.items():
    cfg = load_config(model, overrides=ov)
    ds = simulate(cfg) if model is SimulateConfig else solve(cfg)
    for v in VARS:
        a = ds[v]
        out[f"{name}__{v}"] = xr.DataArray(a.values, dims=[f"{name}__{d}" for d in a.dims])
    out[f"{name}__bayes_risk"] = xr.DataArray(ds.attrs["bayes_risk"])
    out[f"{name}__overrides"] = xr.DataArray(json.dumps(ov))
ref = xr.Dataset(out)
ref.attrs["made_at_commit"] = "a6613a1"
ref.to_netcdf(sys.argv[1], engine="h5netcdf")
print(ref)
