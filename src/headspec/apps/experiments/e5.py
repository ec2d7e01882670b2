"""E5 — pruning (SPEC §7): softmax tolerates heavy pruning; softmax-1 and Bayes-softmax keep their
risk down to about the number of needed heads and degrade sharply below it."""

from __future__ import annotations

import numpy as np

from headspec.apps.experiments.base import Context
from headspec.conventions import results
from headspec.conventions.config import TheoryConfig


def run(ctx: Context):
    """Greedy and random pruning paths of one trained model per activation (D → ∞ risks), by
    the same function, samples and random orders as `headspec prune` (seed 0, final state)."""
    from matplotlib.figure import Figure

    from headspec.conventions.runs import prune_result

    p = ctx.params
    fig = Figure(figsize=(6.4, 4.2), layout="constrained")
    ax = fig.subplots()
    J = F = H = None
    for act in p["activations"]:
        ds = ctx.theory(act, f'model.activation="{act}"')
        cfg = TheoryConfig.model_validate(results.config_of(ds))
        law = cfg.task.latent.build()
        H, F, J = cfg.model.H, law.F, law.J
        paths = prune_result(ds, seed_index=0, n=int(p["n"]), random_orders=p["random_orders"])
        g, rnd = paths["greedy"], paths["random"]
        r = np.asarray(g["risk"])  # index k: H − k heads kept
        ax.plot(g["n_heads"], r, marker="o", lw=2, label=f"{act} (greedy)")
        for q in rnd:
            ax.plot(q["n_heads"], q["risk"], color=ax.lines[-1].get_color(), lw=0.6, alpha=0.3)
        full = r[0]
        if act == "softmax":
            kept = max(1, H // 3)
            inc = r[H - kept] / full - 1
            ctx.claim(
                "Softmax tolerates heavy pruning (redundant heads)",
                f"relative risk increase after keeping {kept} of {H} heads (greedy)",
                f"{100 * inc:+.1f} %",
                inc <= p["tolerance"],
            )
        else:
            at_j = r[H - J] / full - 1
            below = r[H - J + 1] / full - 1
            ctx.claim(
                f"{act} keeps its risk down to the number of needed heads (J = {J} atoms) and "
                "degrades sharply below",
                f"relative increase with J = {J} heads kept / with J − 1",
                f"{100 * at_j:+.1f} % / {100 * below:+.1f} %",
                at_j <= p["tolerance"] and below >= p["sharp"],
            )
    ax.axvline(J, color="0.4", ls="--", lw=1)
    ax.axvline(F, color="0.4", ls=":", lw=1)
    ax.text(J, ax.get_ylim()[1], " J atoms", va="top", fontsize="small")
    ax.text(F, ax.get_ylim()[1], " F", va="top", fontsize="small")
    ax.invert_xaxis()
    ax.set_xlabel("heads kept")
    ax.set_ylabel("risk (D → ∞)")
    ax.set_title(f"pruning from H = {H} trained heads (thin: random orders)", fontsize="medium")
    ax.legend(fontsize="small")
    ax.grid(True, alpha=0.3)
    ctx.figure(fig, "pruning")
