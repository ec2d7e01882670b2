"""E8 — softmax-1's advantage grows with the signal (the paper: softmax-1's error goes to 0 as the
signal grows, softmax keeps a floor), on a flipped spike θ = ±a over a grid of amplitudes a.

Softmax averages its heads, and one head puts its mass on the signal token for at most one sign of
θ on average, so every softmax predictor has R ≥ L / (8 (L − 1)) on a flipped spike, whatever a
(the derivation is in ``e8_signal.toml``). Softmax-1's heads can go silent, so its risk can follow
R_B → 0. For every a, softmax and softmax-1 (H = 2) are simulated on the exact reduced engine beside
the ODE from each seed's initial state; the final risks of one a are measured on common samples
with R_B (:func:`final_risks`), so every tolerance is a multiple of a standard error.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from headspec.apps.experiments.base import Context, Run, finite_mean_se, ode_beside
from headspec.apps.experiments.claims import Claim, Tolerance
from headspec.apps.experiments.params import Count, Positive, RecipeParams
from headspec.apps.experiments.registry import recipe

ACTS = ("softmax", "softmax1")
KINDS = ("sim", "ode")


class Params(RecipeParams):
    """E8's parameters (``[experiment]`` of ``e8_signal.toml``)."""

    amplitudes: list[Positive] = Field(min_length=2, description="a of θ = ±a, rising")
    seeds: Count = Field(description="seeds per run")
    risk_samples: Count = Field(description="common samples of the final risks at each a")


def floor(L: int) -> float:
    """The least risk of any softmax predictor on a flipped spike: L / (8 (L − 1)).

    >>> round(floor(10), 4)
    0.1389
    """
    return L / (8 * (L - 1))


def _sims(p: Params) -> list[Run]:
    return [Run(f"a{a:g}_{act}", "simulate", {"seeds": p.seeds, "model.activation": act},
                {"task": {"latent": {"kind": "flipped_spike", "a": [a]}}})
            for a in p.amplitudes for act in ACTS]  # fmt: skip


def plan(ctx: Context) -> list[Run]:
    return ctx.paired_plan(_sims(ctx.params))


@recipe("E8", "e8_signal.toml", Params, plan=plan)
def run(ctx: Context):
    """Final risks of softmax and softmax-1 over a (simulation beside the ODE), R_B, the floor."""
    p = ctx.params
    if list(p.amplitudes) != sorted(set(p.amplitudes)):
        raise ValueError(f"E8 amplitudes must rise strictly, got {list(p.amplitudes)}")
    L = ctx.base.task.L
    pairs = ctx.paired(_sims(p))
    # R[a][kind][act]: final risk (mean, se, per-sample seed-mean losses); R[a]["bayes"]: R_B
    R = {a: final_risks({(k, act): pairs[f"a{a:g}_{act}"][i] for i, k in enumerate(KINDS)
                         for act in ACTS}, p.risk_samples)
         for a in p.amplitudes}  # fmt: skip
    _claims(ctx, R, floor(L))
    _splits(ctx, pairs, p.amplitudes)
    ode_beside(ctx, "E8.ode_beside", f"D = {ctx.base.task.D}",
               max(v[2]["risk"]["max_dev"] for v in pairs.values()),
               "per run: " + "; ".join(f"{k}: {100 * v[2]['risk']['max_dev']:.1f} %"
                                       for k, v in pairs.items())
               + ". The largest deviations sit at the drops, whose times fluctuate between SGD "
               "and ODE",
               measure=", largest over the runs")  # fmt: skip
    ctx.outcome.table_header = ("a", "R_B", "softmax (sim)", "softmax (ODE)", "softmax-1 (sim)",
                                "softmax-1 (ODE)")  # fmt: skip
    ctx.outcome.table = [
        (f"{a:g}", f"{R[a]['bayes']['mean']:.4f}",
         *(f"{R[a][(k, act)]['mean']:.4f} ± {R[a][(k, act)]['se']:.4f}" for act in ACTS
           for k in KINDS))
        for a in p.amplitudes
    ]  # fmt: skip
    _figure(ctx, R, floor(L))


def final_risks(runs: dict, n: int, key: int = 8) -> dict:
    """Final seed-mean risks of ``runs`` (label → result, all of one law and L) and R_B, on the
    same ``n`` samples: label → {"mean", "se", "loss"}, with "bayes" → R_B.

    "loss" (n,) is the seed mean's loss on each sample, for paired differences (:func:`diff`);
    "se" combines the seeds' spread and the Monte-Carlo error of the seed mean (the samples are
    shared by all seeds, so that part does not average out). A diverged seed is left out."""
    import jax

    from headspec.apps.experiments.annealed import final_heads
    from headspec.conventions.runs import config_model, law_of
    from headspec.dynamics.bayes import Posterior, estimate_risks

    first = next(iter(runs.values()))
    law, L = law_of(first), config_model(first).task.L
    preds, kept = {"bayes": Posterior(law)}, {}
    for label, ds in runs.items():
        heads = final_heads(ds)
        kept[label] = list(heads)
        preds |= {(label, s): h for s, h in heads.items()}
    names = {k: f"p{i}" for i, k in enumerate(preds)}  # estimate_risks wants text names
    est, smp = estimate_risks(jax.random.key(key), law, L, {names[k]: v for k, v in preds.items()},
                              n=n, return_samples=True)  # fmt: skip
    b = names["bayes"]
    out = {"bayes": {"mean": float(est[b].mean), "se": float(est[b].se), "loss": smp[b]}}
    for label, ok in kept.items():
        m, se_seed = finite_mean_se([est[names[(label, s)]].mean for s in ok])
        loss = np.mean([smp[names[(label, s)]] for s in ok], axis=0)  # (n,)
        out[label] = {"mean": m, "se": float(np.hypot(se_seed, loss.std(ddof=1) / np.sqrt(n))),
                      "se_seed": se_seed, "loss": loss}  # fmt: skip
    return out


def diff(x: dict, y: dict) -> tuple[float, float]:
    """x − y of two entries of one :func:`final_risks` call (paired samples): (value, s.e.)."""
    d = x["loss"] - y["loss"]
    se = np.sqrt(x["se_seed"] ** 2 + y["se_seed"] ** 2 + d.var(ddof=1) / d.size)
    return x["mean"] - y["mean"], float(se)


def _claims(ctx: Context, R: dict, fl: float) -> None:
    """The floor, softmax-1 toward 0, its falling share of softmax's risk: each in simulation
    and ODE, each judged where it is closest to failing (the a or the step of a)."""
    a = list(R)
    L = ctx.base.task.L

    def part(cid, k, value, se, tol):
        return Claim(f"{cid}.{k}", k, f"{tol[0]} ({k})", value, se, tol[1], unit="")

    floor_parts, zero_parts, grow_parts = [], [], []
    for k in KINDS:
        sm = [R[x][(k, "softmax")] for x in a]
        s1 = [R[x][(k, "softmax1")] for x in a]
        i = int(np.argmin([r["mean"] + 3 * r["se"] for r in sm]))  # the a closest to failing
        floor_parts.append(part("E8.floor", k, sm[i]["mean"] - fl, sm[i]["se"], (
            f"final softmax risk minus L/(8(L−1)) = {fl:.4f}, at the a closest to failing "
            f"(a = {a[i]:g})",
            Tolerance("at_least", 0.0, k=3, why="no softmax predictor is below the floor: not "
                      "clearly below it (3 s.e.)"))))  # fmt: skip
        steps = [(s1[j + 1]["mean"] - s1[j]["mean"], float(np.hypot(s1[j + 1]["se"], s1[j]["se"])))
                 for j in range(len(a) - 1)]  # fmt: skip
        j = int(np.argmax([v + 3 * se for v, se in steps]))  # the step closest to failing
        zero_parts.append(part("E8.to_zero.falls", k, *steps[j], (
            f"change of softmax-1's final risk between neighbouring a, at the step closest to "
            f"failing (a = {a[j]:g} → {a[j + 1]:g})",
            Tolerance("below", 0.0, k=3, why="every larger a lowers softmax-1's risk by more "
                      "than 3 s.e."))))  # fmt: skip
        zero_parts.append(part("E8.to_zero.under_floor", k, s1[-1]["mean"] - fl, s1[-1]["se"], (
            f"softmax-1's final risk at a = {a[-1]:g} minus the softmax floor {fl:.4f}",
            Tolerance("below", 0.0, k=3, why="softmax-1 goes below what any softmax predictor "
                      "can reach, by more than 3 s.e."))))  # fmt: skip
        ratio = [_ratio(R[x][(k, "softmax1")], R[x][(k, "softmax")]) for x in a]
        rsteps = [(ratio[j + 1][0] - ratio[j][0], float(np.hypot(ratio[j + 1][1], ratio[j][1])))
                  for j in range(len(a) - 1)]  # fmt: skip
        j = int(np.argmax([v + 3 * se for v, se in rsteps]))
        grow_parts.append(part("E8.grows", k, *rsteps[j], (
            f"change of the ratio R_softmax-1 / R_softmax between neighbouring a, at the step "
            f"closest to failing (a = {a[j]:g} → {a[j + 1]:g})",
            Tolerance("below", 0.0, k=3, why="softmax-1's share of softmax's risk falls at every "
                      "larger a by more than 3 s.e."))))  # fmt: skip
    text = lambda k, act: ", ".join(f"{R[x][(k, act)]['mean']:.3f}" for x in a)  # noqa: E731
    rho = lambda k, x: _ratio(R[x][(k, "softmax1")], R[x][(k, "softmax")])[0]  # noqa: E731
    ratios = "; ".join(f"{k} " + ", ".join(f"{rho(k, x):.3f}" for x in a) for k in KINDS)
    grid = f"a = {', '.join(f'{x:g}' for x in a)}"
    ctx.claim(Claim("E8.floor", "Softmax keeps a floor: its final risk is not below L/(8(L−1)) at "
                    "any signal strength", f"final risks against the floor {fl:.4f} (L = {L})",
                    detail=f"softmax at {grid}: simulation {text('sim', 'softmax')}; ODE "
                    f"{text('ode', 'softmax')}", all_of=tuple(floor_parts)))  # fmt: skip
    ctx.claim(Claim("E8.to_zero", "Softmax-1's risk falls toward 0 as the signal grows, below the "
                    "softmax floor", "final softmax-1 risks over a",
                    detail=f"softmax-1 at {grid}: simulation {text('sim', 'softmax1')}; ODE "
                    f"{text('ode', 'softmax1')}; R_B "
                    + ", ".join(f"{R[x]['bayes']['mean']:.3f}" for x in a),
                    all_of=tuple(zero_parts)))  # fmt: skip
    ctx.claim(Claim("E8.grows", "Softmax-1's advantage over softmax grows with the signal "
                    "strength", "the ratio R_softmax-1 / R_softmax over a",
                    detail=f"ratio at {grid}: {ratios}", all_of=tuple(grow_parts)))  # fmt: skip


def _ratio(x: dict, y: dict) -> tuple[float, float]:
    """x / y of two final risks and its s.e. (first order; their covariance, positive on common
    samples, left out: the s.e. errs on the large side)."""
    r = x["mean"] / y["mean"]
    return r, float(abs(r) * np.hypot(x["se"] / x["mean"], y["se"] / y["mean"]))


def _splits(ctx: Context, pairs: dict, amplitudes) -> None:
    """The measured-only claim: softmax seeds whose two heads end on one sign of θ (2:0)."""
    from headspec.dynamics.splits import head_labels, is_uneven, split_name

    per = {}
    for a in amplitudes:
        atoms = np.array([[a], [-a]])
        for i, k in enumerate(KINDS):
            ds = pairs[f"a{a:g}_softmax"][i].isel(t=-1)
            M, Q = np.asarray(ds.M.values, float), np.asarray(ds.Q.values, float)  # (S, H, F)
            names = [split_name(head_labels(M[s], Q[s], atoms)) for s in range(M.shape[0])]
            per[a, k] = (sum(is_uneven(n) for n in names), len(names))
    ctx.claim(Claim("E8.splits", "Softmax seeds whose two heads end on one sign of θ (2:0)",
                    "seeds with an uneven final split, simulation, summed over a", float(sum(
                        per[a, "sim"][0] for a in amplitudes)), unit="seeds",
                    detail="; ".join(f"a = {a:g}: simulation {per[a, 'sim'][0]} of "
                                     f"{per[a, 'sim'][1]}, ODE {per[a, 'ode'][0]} of "
                                     f"{per[a, 'ode'][1]}" for a in amplitudes)
                    + ". An uneven split leaves one sign of θ unseen, so its risk is above the "
                    "even split's: the seed spread of softmax's risk (E6 studies such splits)",
                    ))  # fmt: skip


def _figure(ctx: Context, R: dict, fl: float) -> None:
    """Final risk against a: both activations (simulation ± s.e., ODE), R_B and the floor."""
    from matplotlib.figure import Figure

    a = np.array(list(R))
    task, train = ctx.base.task, ctx.base.train
    fig = Figure(figsize=(6.4, 4.4), layout="constrained")
    ax = fig.subplots()
    for j, act in enumerate(ACTS):
        m, se = (np.array([R[x][("sim", act)][q] for x in a]) for q in ("mean", "se"))
        ax.errorbar(a, m, 2 * se, color=f"C{j}", marker="o", ls="none", capsize=3,
                    label=f"{act} (sim, ± 2 s.e.)")  # fmt: skip
        ax.plot(a, [R[x][("ode", act)]["mean"] for x in a], color=f"C{j}", ls="--",
                label=f"{act} (ODE)")  # fmt: skip
    ax.plot(a, [R[x]["bayes"]["mean"] for x in a], "k:", label="Bayes risk R_B")
    ax.axhline(fl, color="grey", lw=1, label="softmax floor L/(8(L−1))")
    ax.set_xlabel("signal amplitude a (θ = ±a)")
    ax.set_ylabel("final risk")
    ax.set_yscale("log")
    ax.set_title(f"flipped spike, H = {ctx.base.model.H}, D = {task.D}, η = "
                 f"{train.lr:g}, T = {train.T:g}", fontsize="medium")  # fmt: skip
    ax.legend(fontsize="x-small")
    ctx.figure(fig, "signal")
