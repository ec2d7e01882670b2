"""The pruning figure: risk vs heads kept, greedy and random removal orders."""

from __future__ import annotations

from matplotlib.figure import Figure

from headspec.apps.plots.common import SIM_COLOR


def plot_prune(out: dict, title: str = "", bayes_risk: float | None = None) -> Figure:
    """Risk vs heads kept: the greedy (fewest-harm-first) path bold, random orders thin."""
    fig = Figure(figsize=(6.4, 4.0), layout="constrained")
    ax = fig.subplots()
    n = out["n_heads"]
    for k, path in enumerate(out["random"]):
        ax.plot(n, path["risk"], color="0.5", lw=0.8, alpha=0.6,
                label="random order" if k == 0 else None)  # fmt: skip
    ax.plot(n, out["greedy"]["risk"], color=SIM_COLOR, lw=2.2, marker="o", label="greedy")
    if bayes_risk is not None:
        ax.axhline(bayes_risk, color="k", ls="--", lw=1.0, label="Bayes risk R_B")
    ax.axhline(0.5, color="0.6", ls=":", lw=1.0, label="no head (ŷ = 0)")
    ax.set_xlabel("heads kept")
    ax.set_ylabel("risk (D → ∞)")
    ax.invert_xaxis()
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    ax.set_title(title or "pruning", fontsize="medium")
    return fig
