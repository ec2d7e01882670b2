"""E6 (SPEC §7): classify uneven splits of H = 4 heads with the ODE's fixed points.

For each activation (softmax, softmax1, bayes_softmax) × latent law (flipped spike θ = ±2.5; two
orthogonal features 2.5·e₁, 2.5·e₂ with probability ½ each) × split of the four heads between
the two directions (2+2, 3+1, 4+0), this script

1. searches fixed points of the D → ∞ order-parameter ODE (SPEC §5, η = 2, full drift with the
   η² term; for softmax also the η-linear drift) with the heads grouped as the split says
   (``headspec.dynamics.fixed_points.find_fixed_point``, guesses at 0.5 and 1 times the atoms),
   keeps the distinct solutions where the solver converged, the drift vanishes within 3 s.e.
   and the heads sit on the split's directions (cosine ≥ 0.8),
2. classifies each one with the eigenmodes of the drift's Jacobian
   (``headspec.dynamics.jacobian``): *stable minimum* (every non-symmetry mode has Re λ < −3 s.e.),
   *saddle* (some mode has Re λ > 3 s.e.), *marginal* (no unstable mode, but some |Re λ| ≤ 3 s.e.),
   or *no fixed point* (no guess converged to a fixed point with that split),
3. for a saddle integrates the ODE from the fixed point plus 10⁻³ (largest entry) along the
   leading unstable mode (both signs) and reports where it ends (split, risk, time of change),
4. escapes with symmetry-breaking noise (stage ``escapes``) and, for 'marginal' points, the
   Jacobian again on independent samples (stage ``checks``),
5. summarises simulations (reduced engine, D = 1000, 16 seeds, T = 600, η = 2, the E6 recipe's
   L = 10, H = 4): the split right after the heads chose directions and at the end, and how
   many seeds rearranged from an uneven to the even split.

Outputs: ``studies/out/e6_classification.json`` (everything) and
``studies/out/e6_classification.md`` (the table); the simulations are cached as
``studies/out/e6_sim_<activation>_<law>.nc``.

Cost (measured 2026-11-30, wall clock on 2 CPU cores shared with other jobs, load ≈ 7, so an
idle machine is faster): simulations 156–271 s per activation × law (≈ 20 min for the six);
fixed points + Jacobians + escapes along the mode ≈ 52 min for the 27 cases (≈ 1.5–3 min each,
≈ 25 s of it the Jacobian's compilation per activation × law); escapes with noise ≈ 10 min;
checks ≈ 1 min. Stages are cached (``studies/out/e6_*.json``, ``*.nc``): a rerun of ``table``
alone takes seconds. Base samples: scrambled Sobol, n = 1024 made head-cyclic (4096 samples,
so identical heads stay exactly identical), exact over the atoms.

Usage:
    .venv/bin/python studies/e6_classification.py                 # everything (cached parts kept)
    .venv/bin/python studies/e6_classification.py --stages sims   # only the simulations
    .venv/bin/python studies/e6_classification.py --stages fixed --only "softmax|"  # a subset
    .venv/bin/python studies/e6_classification.py --stages table         # table from the caches
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from headspec.core.attention import BayesSoftmax, Softmax, Softmax1  # noqa: E402
from headspec.core.latent import Discrete, FlippedSpike  # noqa: E402
from headspec.core.observables import BaseSamples  # noqa: E402
from headspec.core.schedules import Constant  # noqa: E402
from headspec.dynamics.fixed_points import find_fixed_point  # noqa: E402
from headspec.dynamics.jacobian import drift_jacobian, modes  # noqa: E402
from headspec.dynamics.ode import DriftProblem, OrderParameters, integrate  # noqa: E402
from headspec.dynamics.splits import (  # noqa: E402
    group_projection,
    head_labels,
    split_name,
    stability,
)

OUT = Path(__file__).resolve().parent / "out"
A = 2.5
H, L, LR = 4, 10, 2.0
N_BASE = 1024  # Sobol points before head-cyclic closure (× H)
ACTIVATIONS = {"softmax": Softmax(), "softmax1": Softmax1(), "bayes_softmax": BayesSoftmax()}
LAWS = {
    "flipped_spike": (FlippedSpike([A]), 'task.latent={kind="flipped_spike", a=[2.5]}'),
    "orthogonal": (
        Discrete([[A, 0.0], [0.0, A]], [0.5, 0.5]),
        'task.latent={kind="discrete", atoms=[[2.5, 0.0], [0.0, 2.5]], probs=[0.5, 0.5]}',
    ),
}
SPLITS = {"2+2": (2, 2), "3+1": (3, 1), "4+0": (4,)}
SCALES = (0.5, 1.0)  # guess: M_g = scale × the group's atom
# a head sits on a direction when its cosine with the atom reaches MIN_COS; 0.8 (not the recipe's
# 0.5) so that a head on the mean direction of the two orthogonal atoms (cosine 0.71 with both)
# counts as on none, not as on a random one of them
MIN_COS = 0.8
IDLE_Q = 0.25  # |k|/√D < 0.5 (the atoms have norm 2.5)
SIM = {"D": 1000, "seeds": 16, "T": 600.0, "points": 60}


# ============================================================================ helpers
def head_states(M, Q, atoms) -> np.ndarray:
    """Per head (..., H): the atom it sits on (cosine ≥ MIN_COS), −1 undecided, −2 idle (squared
    key norm Q_hh < IDLE_Q: a key that shrank toward 0, e.g. a silent softmax-1 head); the labels
    of :func:`headspec.dynamics.splits.head_labels`."""
    return head_labels(np.asarray(M), np.asarray(Q), np.asarray(atoms), MIN_COS, 0.0, IDLE_Q)


def sim_end_states(act_name: str, law_name: str, per_label: int = 1):
    """End states (M, Q, b) of the simulation seeds, one per distinct end split label."""
    import xarray as xr

    f = OUT / f"e6_sim_{act_name}_{law_name}.nc"
    if not f.exists():
        return []
    ds = xr.load_dataset(f).isel(t=-1)
    atoms = np.asarray(LAWS[law_name][0].atoms)
    out, seen = [], {}
    for k in range(ds.sizes["seed"]):
        M, Q, b = (np.asarray(ds[v].values[k], float) for v in ("M", "Q", "b"))
        lab = split_of(M, Q, atoms)
        if seen.get(lab, 0) >= per_label:
            continue
        seen[lab] = seen.get(lab, 0) + 1
        out.append((k, OrderParameters(jnp.asarray(M), jnp.asarray(Q), jnp.asarray(b))))
    return out


def split_of(M, Q, atoms) -> str:
    """The split label of one state M (H, F), Q (H, H): '2+2', '3+1 +1 idle', …"""
    return split_name(head_states(M, Q, atoms), sep="+")


def guess_state(law_name: str, sizes, scale: float, act_name: str = "softmax") -> OrderParameters:
    """One row per group: group 0 on atom 0, group 1 on atom 1; Q = MMᵀ + 0.1 I. Biases: 0 for
    softmax (no effect); for softmax-1 −scale·|a|² − log(group size) (the hidden token's score
    scale·|a|² then gives the group a mass of order 1); for Bayes-softmax the constructed optimum's
    log(½) − |scale·a|²/2, less log(group size) (identical heads share one atom's prior)."""
    if law_name == "flipped_spike":
        dirs = np.array([[A], [-A]])
    else:
        dirs = np.array([[A, 0.0], [0.0, A]])
    M = jnp.asarray(scale * dirs[: len(sizes)])
    G = len(sizes)
    n = np.log(np.asarray(sizes, float))
    if act_name == "softmax1":
        b = -scale * A**2 - n
    elif act_name == "bayes_softmax":
        b = np.log(0.5) - (scale * A) ** 2 / 2 - n
    else:
        b = np.zeros(G)
    return OrderParameters(M, M @ M.T + 0.1 * jnp.eye(G), jnp.asarray(b))


def describe_mode(m, sizes, F: int, law_name: str) -> dict:
    """Numbers and words for one eigenmode."""
    v = np.asarray(m.vector)
    gp = group_projection(v, sizes, F)
    grp = float(gp @ gp)  # share keeping the split's symmetry (includes the common part)
    dM = v[: H * F].reshape(H, F)
    m_share = float((dM**2).sum())
    b_share = float((v[-H:] ** 2).sum())
    feat = np.asarray(m.feature_weights)
    if m.common > 0.9:
        kind = "common (all heads alike)"
    elif all(x == 1 for x in sizes):
        w = (dM**2).sum(1) + (v[H * F : H * F + H * H].reshape(H, H) ** 2).sum(1)
        top = np.argsort(-w)[:2]
        kind = f"head difference, mostly heads {top[0]} and {top[1]}"
    elif grp > 0.9:
        kind = "groups move as wholes (" + ("lone head vs group of 3" if sizes == (3, 1)
                                           else "group vs group") + ")"  # fmt: skip
    elif grp < 0.1:
        big = [g for g, s in enumerate(sizes) if s > 1]
        idx = np.repeat(np.arange(len(sizes)), sizes)
        within = v - gp
        share = [float((within[: H * F].reshape(H, F)[idx == g] ** 2).sum()) for g in big]
        qpart = within[H * F : H * F + H * H].reshape(H, H)
        share_q = [float((qpart[np.ix_(idx == g, idx == g)] ** 2).sum()) for g in big]
        gbig = big[int(np.argmax(np.add(share, share_q)))] if big else 0
        kind = f"head difference inside the group of {sizes[gbig]} (group {gbig})"
    else:
        kind = f"mixed (split-symmetric share {grp:.2f})"
    parts = []
    if m_share > 0.05:
        fw = ", ".join(f"f{f + 1} {feat[f]:.2f}" for f in range(F)) if F > 1 else "±a axis"
        parts.append(f"M {m_share:.2f} ({fw})")
    parts.append(f"Q {1 - m_share - b_share:.2f}")
    if b_share > 0.05:
        parts.append(f"b {b_share:.2f}")
    return {
        "eigenvalue": float(m.eigenvalue.real),
        "eigenvalue_imag": float(m.eigenvalue.imag),
        "se": float(m.se),
        "common_share": float(m.common),
        "split_symmetric_share": grp,
        "M_share": m_share,
        "b_share": b_share,
        "feature_weights": feat.tolist(),
        "dM": dM.tolist(),
        "words": f"{kind}; moves " + ", ".join(parts),
    }


def perturbed(state: OrderParameters, v: np.ndarray, eps: float, F: int) -> OrderParameters:
    """state + eps·v/max|v| with Q − MMᵀ projected back to PSD."""
    v = v / np.abs(v).max()
    M = np.asarray(state.M) + eps * v[: H * F].reshape(H, F)
    Q = np.asarray(state.Q) + eps * v[H * F : H * F + H * H].reshape(H, H)
    b = np.asarray(state.b) + eps * v[H * F + H * H :]
    C = Q - M @ M.T
    C = 0.5 * (C + C.T)
    w, U = np.linalg.eigh(C)
    C = (U * np.clip(w, 0.0, None)) @ U.T
    return OrderParameters(jnp.asarray(M), jnp.asarray(M @ M.T + C), jnp.asarray(b))


# ============================================================================ fixed points
def escape(fp_state, mode, act, law, law_name, base, risk_base, rate: float, eta2: bool,
           noise: float = 0.0, T_end: float | None = None) -> dict:  # fmt: skip
    """Integrate the ODE from the fixed point ± 10⁻³ along the mode; where does it end?
    ``noise`` > 0 adds noise·N(0, 1) to every entry of M (the same draw for both signs), which
    breaks the symmetries the mode keeps, so the run can leave later saddles too."""
    F = law.F
    if T_end is None:
        T_end = float(np.clip(25.0 / max(rate, 1e-6), 200.0, 4000.0))
    ts = np.concatenate([[0.0], np.geomspace(1.0, T_end, 40)])
    y = [perturbed(fp_state, np.asarray(mode["vector"]), s * 1e-3, F) for s in (1.0, -1.0)]
    if noise > 0:
        dM = noise * np.random.default_rng(0).standard_normal((H, F))
        y = [OrderParameters(s.M + dM, s.Q - s.M @ s.M.T + (s.M + dM) @ (s.M + dM).T, s.b)
             for s in y]  # fmt: skip
    y0 = OrderParameters(*(jnp.stack([getattr(s, k) for s in y]) for k in ("M", "Q", "b")))
    t0 = time.time()
    problem = DriftProblem.sampled(act, law, base, LR)
    obs, fail_t, _steps = integrate(y0, ts, problem, risk_base, Constant(), 1e-6, 1e-8)
    atoms = np.asarray(law.atoms)
    out = []
    for s in range(2):
        splits = [split_of(o.M[s], o.Q[s], atoms) for o in obs]
        risks = [float(o.risk[s]) for o in obs]
        start = splits[0]
        changed = next((float(ts[k]) for k in range(len(ts)) if splits[k] != start), None)
        out.append({
            "sign": [1, -1][s],
            "end_split": splits[-1],
            "end_risk": risks[-1],
            "start_risk": risks[0],
            "max_risk": max(risks),
            "t_split_change": changed,
            "T": T_end,
            "end_M": obs[-1].M[s].tolist(),
            "end_Q_diag": np.diag(obs[-1].Q[s]).tolist(),
            "end_b": obs[-1].b[s].tolist(),
            "failed_at": None if np.isnan(fail_t[s]) else float(fail_t[s]),
            "splits": splits,
            "risks": risks,
        })  # fmt: skip
    return {"wall_s": time.time() - t0, "ts": ts.tolist(), "runs": out}


def classify_case(act_name, law_name, split, eta2, bases, jac_fns) -> dict:
    act = ACTIVATIONS[act_name]
    law = LAWS[law_name][0]
    base, risk_base = bases[law_name]
    F = law.F
    atoms = np.asarray(law.atoms)
    t0 = time.time()
    tried, sols = [], []
    if split == "sim end":  # the simulations' end states, every head its own group
        sizes = (1, 1, 1, 1)
        guesses = [(f"seed {k}", g) for k, g in sim_end_states(act_name, law_name)]
    else:
        sizes = SPLITS[split]
        guesses = [(sc, guess_state(law_name, sizes, sc, act_name)) for sc in SCALES]
    for sc, guess in guesses:
        fp = find_fixed_point(guess, sizes, DriftProblem.sampled(act, law, base, LR, eta2=eta2))
        got = split_of(fp.state.M, fp.state.Q, atoms)
        rec = {
            "guess_scale": sc,
            "converged": fp.converged,
            "max_z": fp.max_z,
            "is_fixed": fp.is_fixed,
            "risk": fp.risk,
            "steps": fp.steps,
            "split": got,
            "M": np.asarray(fp.state.M).tolist(),
            "Q": np.asarray(fp.state.Q).tolist(),
            "b": np.asarray(fp.state.b).tolist(),
        }
        tried.append(rec)
        if not (fp.converged and fp.is_fixed) or (got != split and split != "sim end"):
            continue
        if any(np.allclose(np.asarray(fp.state.M), np.asarray(s[0].state.M), atol=1e-3)
               and np.allclose(np.asarray(fp.state.Q), np.asarray(s[0].state.Q), atol=1e-3)
               for s in sols):  # fmt: skip
            continue
        sols.append((fp, rec))
    solutions = []
    for fp, rec in sols:
        key = (act_name, law_name, eta2)
        jac = jac_fns[key](*fp.state)
        ms = modes(jac, H, F)
        nonzero = [m for m in ms if not m.zero]
        st = stability(ms)  # the rule of headspec.dynamics.splits
        unstable, marginal = st.unstable, st.marginal
        lead = nonzero[0]
        verdict = "stable minimum" if st.kind == "minimum" else st.kind
        d = describe_mode(lead, sizes, F, law_name)
        d["vector"] = np.asarray(lead.vector).tolist()
        sol = dict(rec)
        sol.update({
            "verdict": verdict,
            "n_unstable": len(unstable),
            "n_marginal": len(marginal),
            "n_zero": len(ms) - len(nonzero),
            "leading": d,
            "next_modes": [describe_mode(m, sizes, F, law_name) for m in nonzero[1:4]],
        })  # fmt: skip
        if unstable and eta2:
            sol["escape"] = escape(fp.state, d, act, law, law_name, base, risk_base,
                                   float(lead.eigenvalue.real), eta2)  # fmt: skip
        solutions.append(sol)
    return {
        "activation": act_name,
        "law": law_name,
        "split": split,
        "eta2": eta2,
        "tried": tried,
        "solutions": solutions,
        "verdict": solutions[0]["verdict"] if solutions else "no fixed point",
        "wall_s": time.time() - t0,
    }


def make_bases():
    bases = {}
    for name, (law, _) in LAWS.items():
        base = BaseSamples.sobol(0, law, L, H, N_BASE).head_cyclic()
        risk_base = BaseSamples.sobol(1, law, L, H, 1024)
        bases[name] = (base, risk_base)
    return bases


def make_jacobian(act_name, law_name, eta2, bases):
    act, law = ACTIVATIONS[act_name], LAWS[law_name][0]
    base = bases[law_name][0]

    @jax.jit
    def jac(M, Q, b):
        problem = DriftProblem.sampled(act, law, base, LR, eta2=eta2)
        return drift_jacobian(problem, OrderParameters(M, Q, b), keep_samples=True)

    return jac


def run_fixed(fresh: bool, cases) -> dict:
    path = OUT / "e6_fixed_points.json"
    done = {} if fresh or not path.exists() else json.loads(path.read_text())
    bases = make_bases()
    jac_fns = {}
    for act_name, law_name, split, eta2 in cases:
        key = f"{act_name}|{law_name}|{split}|{'eta2' if eta2 else 'linear'}"
        if key in done:
            continue
        jk = (act_name, law_name, eta2)
        if jk not in jac_fns:
            jac_fns[jk] = make_jacobian(act_name, law_name, eta2, bases)
        res = classify_case(act_name, law_name, split, eta2, bases, jac_fns)
        done[key] = res
        print(f"{key}: {res['verdict']} ({res['wall_s']:.0f} s)", flush=True)
        path.write_text(json.dumps(done, indent=1))
    return done


def run_generic_escapes(fresh: bool, only: str = "") -> dict:
    """For every saddle (full drift): the escape with symmetry-breaking noise 10⁻⁵ on M, to
    T = 3000 (the eventual end point, not only the next saddle)."""
    fixed = json.loads((OUT / "e6_fixed_points.json").read_text())
    path = OUT / "e6_escapes.json"
    done = {} if fresh or not path.exists() else json.loads(path.read_text())
    bases = make_bases()
    for key, res in fixed.items():
        if not key.endswith("eta2") or not key.startswith(only):
            continue
        for i, sol in enumerate(res["solutions"]):
            k = f"{key}|{i}"
            if sol["verdict"] != "saddle" or not sol["converged"] or k in done:
                continue
            act, law = ACTIVATIONS[res["activation"]], LAWS[res["law"]][0]
            state = OrderParameters(*(jnp.asarray(sol[v]) for v in ("M", "Q", "b")))
            done[k] = escape(
                state,
                sol["leading"],
                act,
                law,
                res["law"],
                *bases[res["law"]],
                sol["leading"]["eigenvalue"],
                True,
                noise=1e-5,
                T_end=3000.0,
            )
            print(f"generic escape {k}: {done[k]['wall_s']:.0f} s", flush=True)
            path.write_text(json.dumps(done, indent=1))
    return done


def run_checks(fresh: bool, only: str = "") -> dict:
    """For every 'marginal' fixed point: the Jacobian again on independent base samples (Sobol
    seed 1) twice as many (n = 2048, head-cyclic 8192): do the near-zero modes keep their sign?"""
    fixed = json.loads((OUT / "e6_fixed_points.json").read_text())
    path = OUT / "e6_checks.json"
    done = {} if fresh or not path.exists() else json.loads(path.read_text())
    for key, res in fixed.items():
        if not key.startswith(only):
            continue
        for i, sol in enumerate(res["solutions"]):
            k = f"{key}|{i}"
            if sol["verdict"] != "marginal" or k in done:
                continue
            t0 = time.time()
            act, law = ACTIVATIONS[res["activation"]], LAWS[res["law"]][0]
            base = BaseSamples.sobol(1, law, L, H, 2 * N_BASE).head_cyclic()
            state = OrderParameters(*(jnp.asarray(sol[v]) for v in ("M", "Q", "b")))
            problem = DriftProblem.sampled(act, law, base, LR, eta2=res["eta2"])
            jac = drift_jacobian(problem, state, keep_samples=True)
            ms = [m for m in modes(jac, H, law.F) if not m.zero]
            sizes = SPLITS.get(res["split"], (1, 1, 1, 1))
            st = stability(ms)
            done[k] = {
                "modes": [describe_mode(m, sizes, law.F, res["law"]) for m in ms[:6]],
                "n_unstable": len(st.unstable),
                "n_marginal": len(st.marginal),
                "wall_s": time.time() - t0,
            }
            print(f"check {k}: {done[k]['wall_s']:.0f} s", flush=True)
            path.write_text(json.dumps(done, indent=1))
    return done


# ============================================================================ simulations
def run_sims() -> None:
    import headspec as hs

    for act_name in ACTIVATIONS:
        for law_name, (_, override) in LAWS.items():
            f = OUT / f"e6_sim_{act_name}_{law_name}.nc"
            if f.exists():
                continue
            t0 = time.time()
            cfg = hs.load_config(hs.SimulateConfig, overrides=[
                "train.engine='reduced'", f"task.D={SIM['D']}", f"seeds={SIM['seeds']}",
                f"model.H={H}", f"task.L={L}", f"model.activation='{act_name}'",
                f"train.lr={LR}", f"train.T={SIM['T']}", override,
                f"record.points={SIM['points']}", "record.n_mc=512"])  # fmt: skip
            ds = hs.simulate(cfg)
            ds.attrs["wall_s"] = time.time() - t0
            hs.save(ds, f)
            print(f"simulated {act_name} {law_name}: {time.time() - t0:.0f} s", flush=True)


def analyse_sim(act_name: str, law_name: str) -> dict | None:
    import xarray as xr

    f = OUT / f"e6_sim_{act_name}_{law_name}.nc"
    if not f.exists():
        return None
    ds = xr.load_dataset(f)
    atoms = np.asarray(LAWS[law_name][0].atoms)
    t = ds.t.values
    M, Q, R = ds.M.values, ds.Q.values, ds.risk.values  # (S, T, H, F), (S, T, H, H), (S, T)
    states = head_states(M, Q, atoms)  # (S, T, H)
    seeds = []
    for s in range(M.shape[0]):
        names = [split_name(x, sep="+") for x in states[s]]
        on = (states[s] >= 0).sum(-1)  # heads on a direction (T,)
        full = np.flatnonzero(on == H)  # first time every head is on a direction, else the
        if full.size == 0:  # first time none is undecided and two are on directions
            full = np.flatnonzero((on >= 2) & ((states[s] == -1).sum(-1) == 0))
        if full.size == 0:
            seeds.append({"first": None, "t_first": None, "end": names[-1], "moves": []})
            continue
        k0 = int(full[0])
        moves = [(float(t[k]), names[k - 1], names[k]) for k in range(k0 + 1, len(t))
                 if names[k] != names[k - 1]]  # fmt: skip
        seeds.append({
            "first": names[k0],
            "t_first": float(t[k0]),
            "end": names[-1],
            "end_risk": float(R[s, -1]),
            "moves": moves,
            "largest_risk_rise_after_first": float(
                np.max(R[s, k0:] - np.minimum.accumulate(R[s, k0:]))),
        })  # fmt: skip
    first = [x["first"] for x in seeds]
    end = [x["end"] for x in seeds]

    def hist(xs):
        out: dict[str, int] = {}
        for x in xs:
            out[str(x)] = out.get(str(x), 0) + 1
        return dict(sorted(out.items()))

    k50 = int(np.argmin(np.abs(t - 50.0)))
    at50 = [split_name(states[s, k50], sep="+") for s in range(M.shape[0])]
    rearranged = sum(1 for x in seeds if x["first"] not in (None, "2+2") and x["end"] == "2+2")
    left_even = sum(1 for x in seeds if x["first"] == "2+2" and x["end"] != "2+2")
    return {
        "first_split": hist(first),
        "end_split": hist(end),
        "split_at_t50": hist(at50),
        "both_directions_at_end": sum(
            1 for x in seeds if not x["end"].startswith(("4+0", "3+0", "2+0", "1+0"))
        ),
        "rearranged_uneven_to_even": rearranged,
        "left_even": left_even,
        "median_t_first": float(np.median([x["t_first"] for x in seeds if x["t_first"]]))
        if any(x["t_first"] for x in seeds)
        else None,
        "end_risk_by_split": {
            k: float(np.mean([x["end_risk"] for x in seeds if x["end"] == k and "end_risk" in x]))
            for k in hist(end)
        },
        "seeds": seeds,
        "wall_s": float(ds.attrs.get("wall_s", np.nan)),
        "T": float(t[-1]),
        "D": SIM["D"],
    }


# ============================================================================ table
def fmt_rate(d) -> str:
    return f"{d['eigenvalue']:+.4f} ± {d['se']:.4f}"


def fmt_escape(esc: dict, law: str) -> str:
    """'+: → label, R, t' for both signs of one escape run."""
    atoms = np.asarray(LAWS[law][0].atoms)
    parts = []
    for r in esc["runs"]:
        end = split_of(np.asarray(r["end_M"]), np.diag(r["end_Q_diag"]), atoms)
        tc = r["t_split_change"]
        when = f"left at t≈{tc:.0f}" if tc is not None else "split kept"
        cos = ""
        if law == "orthogonal":  # heads' cosines with the two features: mixtures show here
            M, q = np.asarray(r["end_M"]), np.sqrt(np.asarray(r["end_Q_diag"]))
            c = M / q[:, None]
            cos = " cos " + " ".join(f"({x[0]:.2f},{x[1]:.2f})" for x in c)
        parts.append(f"{'+' if r['sign'] > 0 else '−'}: {when} → {end}, "
                     f"R {r['start_risk']:.4f}→{r['end_risk']:.4f} "
                     f"(t={r['T']:.0f}){cos}")  # fmt: skip
    return "; ".join(parts)


def write_table(fixed: dict, escapes: dict, checks: dict, sims: dict) -> str:
    lines = [
        "# E6: splits of H = 4 heads at the fixed points of the D → ∞ ODE (η = 2)",
        "",
        "Verdict from the Jacobian's non-symmetry eigenmodes (Re λ against 3 s.e.; 'marginal': no "
        "mode significantly unstable but some within 3 s.e. of 0). Rate: leading non-zero "
        "eigenvalue ± s.e. (per unit t). Escape (mode): ODE from the fixed point ± 10⁻³ along the "
        "leading mode, exact group symmetry otherwise kept. Escape (noise): the same plus 10⁻⁵ "
        "noise on every M entry, to t = 3000. Escape risks 'R start→end' are on separate "
        "risk samples (1024 Sobol points, seed 1): compare end with start, not with the risk "
        "column (drift samples, common to all splits of a law). Labels: heads per direction "
        "(cosine ≥ "
        f"{MIN_COS}), '+k idle' = keys shrunk (Q_hh < {IDLE_Q}), '+k undecided' = on no "
        "direction (e.g. a mixture of the two features). 'sim end' rows: the simulations' end "
        "states polished as fixed points with every head its own group.",
        "",
        "| activation | law | drift | split | verdict | risk | rate ± s.e. | leading mode | "
        "escape (mode) | escape (noise) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, res in fixed.items():
        act, law, split, drift = key.split("|")
        if not res["solutions"]:
            tried = "; ".join(f"guess {r['guess_scale']}: {r['split']}, max z={r['max_z']:.1f}, "
                              f"R={r['risk']:.4f}" for r in res["tried"])  # fmt: skip
            verdict = "not polished" if split == "sim end" else "no fixed point"
            lines.append(f"| {act} | {law} | {drift} | {split} | {verdict} | – | – | "
                         f"solver ended at: {tried} | – | – |")  # fmt: skip
            continue
        for i, sol in enumerate(res["solutions"]):
            esc = fmt_escape(sol["escape"], law) if "escape" in sol else "–"
            gen = escapes.get(f"{key}|{i}")
            gen = fmt_escape(gen, law) if gen else "–"
            lead = sol["leading"]
            chk = checks.get(f"{key}|{i}")
            if chk:  # independent samples, n doubled: the leading three modes
                rates = ", ".join(fmt_rate(m) for m in chk["modes"][:3])
                esc = f"(check, Sobol seed 1, 2n: {rates}; {chk['n_unstable']} unstable) " + esc
            name = split
            if split == "sim end":
                name = f"sim end ({sol['guess_scale']}: {sol['split']})"
            if law == "orthogonal":  # the heads' cosines with (f1, f2)
                M, Q = np.asarray(sol["M"]), np.asarray(sol["Q"])
                c = M / np.sqrt(np.diag(Q))[:, None]
                name += " cos " + " ".join(f"({x[0]:.2f},{x[1]:.2f})" for x in c)
            lines.append(
                f"| {act} | {law} | {drift} | {name} | {sol['verdict']} "
                f"({sol['n_unstable']} unstable, {sol['n_marginal']} marginal, "
                f"{sol['n_zero']} zero) | {sol['risk']:.4f} | {fmt_rate(lead)} | "
                f"{lead['words']} | {esc} | {gen} |"
            )
    lines += ["", "## Simulations (reduced engine)", "",
              f"D = {SIM['D']}, {SIM['seeds']} seeds, T = {SIM['T']:.0f}, η = {LR}. First split: "
              "the first grid time at which every head is on a direction (else: none undecided "
              "and two on directions). Rearranged: first split uneven (3+1 or 4+0), end 2+2.",
              "",
              "| activation | law | first split | split at t≈50 | end split | rearranged "
              "uneven→even | left 2+2 | mean end risk by end split | wall s |",
              "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for k, s in sims.items():
        if s is None:
            continue
        act, law = k.split("|")
        er = ", ".join(f"{a}: {b:.4f}" for a, b in s["end_risk_by_split"].items())
        lines.append(f"| {act} | {law} | {s['first_split']} | {s['split_at_t50']} | "
                     f"{s['end_split']} | {s['rearranged_uneven_to_even']} | {s['left_even']} | "
                     f"{er} | {s['wall_s']:.0f} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--stages", nargs="+", default=["sims", "fixed", "escapes", "checks", "table"],
                   choices=["sims", "fixed", "escapes", "checks", "table"])  # fmt: skip
    p.add_argument("--fresh", action="store_true", help="recompute the fixed points")
    p.add_argument("--only", default="", help="fixed-point cases whose key contains this")
    p.add_argument("--no-linear", action="store_true", help="skip softmax's η-linear drift")
    args = p.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    cases = [(a, law, s, True) for a in ACTIVATIONS for law in LAWS for s in SPLITS]
    cases += [(a, law, "sim end", True) for a in ACTIVATIONS for law in LAWS]
    if not args.no_linear:
        cases += [("softmax", law, s, False) for law in LAWS for s in SPLITS]
    cases = [c for c in cases if "|".join(map(str, c[:3])).startswith(args.only)]
    if "sims" in args.stages:
        run_sims()
    fixed = {}
    if "fixed" in args.stages:
        fixed = run_fixed(args.fresh, cases)
    if "escapes" in args.stages:
        run_generic_escapes(args.fresh, args.only)
    if "checks" in args.stages:
        run_checks(args.fresh, args.only)
    if "table" in args.stages:
        path = OUT / "e6_fixed_points.json"
        fixed = fixed or (json.loads(path.read_text()) if path.exists() else {})
        epath = OUT / "e6_escapes.json"
        escapes = json.loads(epath.read_text()) if epath.exists() else {}
        cpath = OUT / "e6_checks.json"
        checks = json.loads(cpath.read_text()) if cpath.exists() else {}
        sims = {f"{a}|{law}": analyse_sim(a, law) for a in ACTIVATIONS for law in LAWS}
        (OUT / "e6_classification.json").write_text(
            json.dumps({"fixed_points": fixed, "escapes": escapes, "checks": checks,
                        "simulations": sims,
                        "settings": {"A": A, "H": H, "L": L, "lr": LR, "n_base": N_BASE,
                                     "sim": SIM}}, indent=1))  # fmt: skip
        (OUT / "e6_classification.md").write_text(write_table(fixed, escapes, checks, sims))
        print((OUT / "e6_classification.md").read_text())


if __name__ == "__main__":
    main()
