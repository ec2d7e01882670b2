"""SGD from a given state (``init = {kind = "given", M, Q, b, noise}`` of a SimulateConfig).

Without noise every seed starts at exactly the given overlaps, in each engine's own
representation (full: keys in D dimensions; reduced: coordinates on span(K*, K); diffusion: the
overlaps themselves), and the seeds then differ by their SGD noise only; with key noise the
overlaps move by its exact law, the same in all three engines. The default random start stays
out of the config's dump, so hashes of configs written before ``init`` existed do not change."""

import numpy as np
import pytest

from headspec.apps.sweep.plan import config_hash
from headspec.conventions.config import ConfigError, SimulateConfig, load_config
from headspec.conventions.runs import simulate

# a state whose keys' parts off the features are nearly parallel (Q − MMᵀ nearly of rank one)
M = [[0.9, 0.1], [0.2, -0.7]]
C = np.outer([0.3, 0.4], [0.3, 0.4]) + 0.01 * np.eye(2)
Q = (np.asarray(M) @ np.asarray(M).T + C).tolist()
B = [0.5, -0.25]


def _cfg(engine: str, **extra) -> SimulateConfig:
    init = f"init={{kind='given', M={M}, Q={Q}, b={B}}}".replace("'", '"')
    over = ["model.H=2", "task.L=4", "task.D=100", "train.T=0.5", "record.points=2",
            "record.n_mc=64", "seeds=3", f"train.engine={engine}", init]  # fmt: skip
    over += [f"{k}={v}" for k, v in extra.items()]
    return load_config(SimulateConfig, overrides=over)


# the reduced engine (the one prepared runs use) in the fast tiers; the full and diffusion
# engines compile their own programs (~15 s each on 2 cores): slow tier
@pytest.mark.parametrize(
    "engine",
    [
        pytest.param("full", marks=pytest.mark.slow),
        "reduced",
        pytest.param("diffusion", marks=pytest.mark.slow),
    ],
)
def test_every_seed_starts_at_the_given_overlaps_and_then_moves_by_its_own_noise(engine):
    ds = simulate(_cfg(engine, **({"diffusion.n": 256} if engine == "diffusion" else {})))
    first = ds.isel(t=0)
    # float32 keys of norm √D·|M_h| ~ 9: the overlaps k·k/D come back to ~1e-7 relative
    tol = 1e-12 if engine == "diffusion" else 2e-6
    for s in range(3):
        np.testing.assert_allclose(first.M.values[s], M, atol=tol)
        np.testing.assert_allclose(first.Q.values[s], Q, atol=tol)
        np.testing.assert_allclose(first.b.values[s], B, atol=tol)
    last = ds.isel(t=-1).M.values  # (S, H, F)
    assert not np.allclose(last[0], last[1]) and not np.allclose(last[1], last[2])
    assert not ds.failed.values.any()


def test_the_default_random_start_keeps_the_old_hash_and_dump():
    cfg = SimulateConfig()
    assert "init" not in cfg.model_dump() and '"init"' not in cfg.model_dump_json()
    # the hash of the default config before `init` existed (2026-12-03, commit 80dc2db)
    assert config_hash("simulate", cfg) == (
        "ac544580c12e9e4d4fae3ce42027d277ca75a57514bbee812f8c84589b6f788a"
    )
    given = _cfg("reduced")
    back = SimulateConfig.model_validate_json(given.model_dump_json())
    assert back == given and back.init.kind == "given"


@pytest.mark.parametrize(
    "init, expect",
    [
        ("{kind='given', M=[[1.0, 0.0]], Q=[[1.0]]}", r"init.M must be 2×2.*fix"),
        ("{kind='given', M=[[1.0, 0.0], [0.0, 1.0]], Q=[[0.5, 0.0], [0.0, 1.5]]}",
         r"init: Q − MMᵀ is not positive semi-definite.*fix"),
        ("{kind='given', M=[[1.0, 0.0], [0.0, 1.0]], Q=[[2.0, 0.1], [0.0, 2.0]]}",
         r"init.Q is not symmetric.*fix"),
        ("{kind='sideways'}", "init"),
    ],
)  # fmt: skip
def test_a_bad_given_start_is_refused_naming_the_field(init, expect):
    with pytest.raises(ConfigError, match=expect):
        load_config(SimulateConfig, overrides=["model.H=2", "init=" + init.replace("'", '"')])


@pytest.mark.parametrize("engine", ["full", "reduced", "diffusion"])
def test_key_noise_moves_the_overlaps_by_its_exact_law(engine):
    """k_h + ν·g_h, g_h ~ N(0, I_D): E[M'] = M with Var M'_hf = ν²/D, E[Q'_hh'] = Q_hh' + ν² δ_hh'.
    Three routes to the same law — the full engine's literal D-dimensional keys, the reduced
    engine's coordinates (noise inside the keys' span plus a Bartlett factor outside it), the
    diffusion engine's overlaps of those coordinates — each on 400 seeds; tolerances 4 s.e."""
    from headspec.conventions import build
    from headspec.dynamics.engines import seed_keys
    from headspec.dynamics.engines.reduced import overlaps

    nu, S, D = 0.3, 400, 60
    cfg = _cfg(engine, **{"task.D": D, "seeds": S, "init.noise": nu})
    eng = build.engine(cfg)
    st = build.start(cfg, eng, seed_keys(np.arange(S)), np.float64)
    if engine == "diffusion":
        Ms, Qs = np.asarray(st.M), np.asarray(st.Q)
    elif engine == "reduced":
        Ms, Qs = (np.asarray(x) for x in overlaps(st, D))
    else:  # keys (S, H, D), frame U (S, D, F): M = K U/√D, Q = K Kᵀ/D
        K, U = np.asarray(st.keys), np.asarray(st.frame)
        Ms, Qs = K @ U / np.sqrt(D), K @ np.swapaxes(K, 1, 2) / D
    dM, dQ = Ms - np.asarray(M), Qs - np.asarray(Q)  # (S, H, F), (S, H, H)
    se_M = nu / np.sqrt(D) / np.sqrt(S)
    assert np.abs(dM.mean(0)).max() < 4 * se_M
    np.testing.assert_allclose(dM.var(0), nu**2 / D, rtol=4 * np.sqrt(2 / S))
    want = nu**2 * np.eye(2)
    se_Q = dQ.std(0) / np.sqrt(S)
    assert (np.abs(dQ.mean(0) - want) < 4 * se_Q + 1e-12).all(), (dQ.mean(0), se_Q)


def test_identical_heads_without_noise_are_refused_for_the_reduced_engine():
    same = "init={kind='given', M=[[1.0, 0.0], [1.0, 0.0]], Q=[[1.5, 1.5], [1.5, 1.5]]}"
    over = ["model.H=2", "train.engine=reduced", "task.D=200", same.replace("'", '"')]
    with pytest.raises(ConfigError, match=r"Q − MMᵀ is singular.*fix: give init.noise > 0"):
        load_config(SimulateConfig, overrides=over)
    ok = load_config(SimulateConfig, overrides=[*over, "init.noise=0.1"])
    assert ok.init.noise == 0.1
