"""E6's map of uneven splits along the amplitude a: its laws, its runs (one "splitmap" run per law
and a), its claim and its figure (:mod:`headspec.conventions.splitmap` computes each setting)."""

from __future__ import annotations

from typing import Any

import numpy as np

from headspec.apps.experiments.base import Context, Run
from headspec.apps.experiments.claims import Claim, Tolerance

Params = Any  # E6's parameters (headspec.apps.experiments.e6.Params: map_laws, map_a, …)

LAWS = {  # law → (its task.latent table at amplitude a, its atoms at a)
    "spike": (lambda a: {"kind": "flipped_spike", "a": [a]}, lambda a: np.array([[a], [-a]])),
    "orth": (
        lambda a: {"kind": "discrete", "atoms": [[a, 0.0], [0.0, a]], "probs": [0.5, 0.5]},
        lambda a: np.array([[a, 0.0], [0.0, a]]),
    ),
}
LAW_NAMES = {"spike": "flipped spike ±a", "orth": "two orthogonal features"}


def law_sets(k: str, a: float) -> dict:
    """The task.latent setting of law ``k`` at amplitude ``a`` (a :class:`Run`'s ``sets``)."""
    return {"task.latent": LAWS[k][0](float(a))}


def split_map(ctx: Context, p: Params) -> dict[str, list]:
    """The map of uneven splits along a for each law of ``map_laws``: law → [(a, setting)], one
    "splitmap" run per (law, a) (reused like every run)."""
    runs = map_runs(ctx, p)
    done = ctx.runs(list(runs.values())) if runs else {}
    out: dict[str, list] = {k: [] for k in p.map_laws}
    for (k, a), r in runs.items():
        out[k].append((a, done[r.name]))
    return out


def map_runs(ctx: Context, p: Params) -> dict[tuple[str, float], Run]:
    """(law, a) → its "splitmap" run."""
    lr = p.map_lr if p.map_lr is not None else ctx.base.train.lr
    return {(k, a): Run(f"map_{k}_a{a:g}", "splitmap", {**law_sets(k, a), "map.lr": lr,
                                                        "map.n": p.map_n})
            for k in p.map_laws for a in p.map_a}  # fmt: skip


def map_claim(ctx: Context, k: str, cells: list, sim: dict | None, p: Params) -> None:
    """Law ``k``'s verdict on the paper's claim against the map: at which a every uneven split is
    a saddle (misplaced heads can leave it), at which one is a stable minimum (they stay), and
    what E6's own simulations did at its a."""
    by_kind: dict[str, list[float]] = {}
    words = []
    for a, ds in cells:
        kind, split = str(ds.uneven_kind.values), str(ds.uneven_split.values)
        by_kind.setdefault(kind, []).append(a)
        rate = (f" {float(ds.uneven_rate):+.4f} ± {float(ds.uneven_rate_se):.4f}"
                if kind != "none" else "")  # fmt: skip
        words.append(f"a = {a:g}: {split or '–'} {kind}{rate}")
    eta = float(cells[0][1].eta) if cells else float("nan")

    def at(kind):
        return ", ".join(f"{a:g}" for a in by_kind.get(kind, [])) or "none"

    here = next((ds for a, ds in cells if a == p.a), None)
    seen = ""
    if here is not None and sim is not None:
        seen = (f" At E6's a = {p.a:g} the map's most stable uneven split is "
                f"{here.uneven_split.values} ({here.uneven_kind.values}); E6's simulations: "
                f"{sim['n_moved']} of {sim['n_uneven0']} seeds with an uneven first split "
                "ended even.")  # fmt: skip
    ctx.claim(Claim(
        f"E6.{k}.map",
        f"softmax, {LAW_NAMES[k]}: misplaced heads can rearrange — where every uneven split is "
        "a saddle (the map of uneven splits)",
        f"amplitudes a of the map (η = {eta:g}) at which every uneven split that is a fixed "
        "point of the ODE is a saddle (none a stable minimum or marginal)",
        len(by_kind.get("saddle", [])), 0.0,
        Tolerance("at_least", 1, why="the claim holds somewhere in the model when, at some a, "
                  "no uneven split is a stable or marginal fixed point (Re λ of every non-zero "
                  "Jacobian mode against 3 s.e.): from each, some mode leads away. Where one is "
                  "a stable minimum, heads placed there stay (the claim fails there)"),
        unit=f"of {len(cells)} amplitudes",
        detail=f"rearrange (every uneven split a saddle) at a = {at('saddle')}; stuck (an "
        f"uneven split a stable minimum) at a = {at('minimum')}; marginal at a = "
        f"{at('marginal')}; no uneven fixed point at a = {at('none')}. "
        + "; ".join(words) + "." + seen,
    ))  # fmt: skip


def map_figure(ctx: Context, cells: dict[str, list]) -> None:
    """The map along a (one row per law) as the sweep's figure draws it."""
    import json

    import xarray as xr

    from headspec.apps.plots import plot_split_map

    laws = [k for k in cells if cells[k]]
    per_law = [xr.concat([ds.drop_attrs().expand_dims(a=[a]) for a, ds in cells[k]], dim="a",
                         join="outer", fill_value={"kind": "", "mode": ""})
               for k in laws]  # fmt: skip
    ds = xr.concat(per_law, dim=xr.DataArray([LAW_NAMES[k] for k in laws], dims="law"),
                   join="outer")  # fmt: skip
    ds["a"].attrs["config_key"] = "a"
    ds["law"].attrs["config_key"] = "law"
    ds.attrs["axes"] = json.dumps(["a", "law"])
    ctx.figure(plot_split_map(ds), "split_map")
