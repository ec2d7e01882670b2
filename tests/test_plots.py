"""Figures of results: files written, axes and lines as documented, NaN and edge cases."""

from __future__ import annotations

import numpy as np
import pytest

from headspec.apps.plots import plot_head_similarity, plot_overlaps, plot_risk, save_figures

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def fake_result(
    *,
    S=3,
    T=12,
    H=3,
    F=2,
    L=5,
    kind="simulation",
    diverge=(),
    fail_after=1.0,
    test=True,
    seed0=0,
    rng=0,
):
    """A result of the real schema with learning-like curves (tests/results.py; no simulation):
    F one-hot atoms of signal 2, the risk decaying from ½ to R_B = 0.2 on a log grid up to t = 20.

    ``diverge``: indices of seeds marked failed at ``fail_after`` (NaN after it).
    """
    from results import made_result

    rng = np.random.default_rng(rng)
    t = np.concatenate([[0.0], np.geomspace(0.05, 20.0, T - 1)])
    decay = np.exp(-t / 5.0)[None, :]
    risk = 0.2 + 0.3 * decay + 0.01 * rng.standard_normal((S, T))
    M = rng.uniform(-0.2, 1.0, (S, T, H, F)) * (1 - decay)[..., None, None]
    K = rng.standard_normal((S, T, H, 6))
    Q = np.einsum("sthd,stgd->sthg", K, K) / 6 + 0.5
    b = 0.01 * rng.standard_normal((S, T, H))
    test_risk = risk + 0.02 + 0.005 * rng.standard_normal((S, T)) if test else np.nan
    atoms = (2.0 * np.eye(F)).tolist()
    overrides = ["task.D=200", f"task.L={L}", f"model.H={H}", f"seed={seed0}", "train.T=20.0",
                 f"task.latent={{kind='discrete', atoms={atoms}}}"]  # fmt: skip
    return made_result(kind, *overrides, seeds=S, t=t, M=M, Q=Q, b=b, risk=risk,
                       test_risk=test_risk, test_risk_se=3e-3, failed=diverge,
                       fail_t=fail_after)  # fmt: skip


@pytest.fixture(scope="module")
def simulated():
    """The one real simulation of this file (the tiny config of conventions.runs' docstring)."""
    from headspec.conventions.config import SimulateConfig, load_config
    from headspec.conventions.runs import simulate

    cfg = load_config(
        SimulateConfig,
        overrides=[
            "task.D=50",
            "task.L=4",
            "model.H=2",
            "train.T=1.0",
            "seeds=2",
            "record.points=3",
        ],
    )
    return simulate(cfg)


def the_axes(fig):
    return fig.axes[0]


def line_by_gid(ax, gid):
    found = [ln for ln in ax.lines if ln.get_gid() == gid]
    assert len(found) == 1, [ln.get_gid() for ln in ax.lines]
    return found[0]


def test_save_figures_simulated_png(simulated, tmp_path):
    paths = save_figures(simulated, tmp_path / "new" / "dir", prefix="run_")
    names = sorted(p.name for p in paths)
    assert names == ["run_head_similarity.png", "run_overlaps.png", "run_risk.png"]
    for p in paths:
        data = p.read_bytes()
        assert len(data) > 1000
        assert data[:8] == PNG_MAGIC


def test_save_figures_formats(tmp_path):
    ds = fake_result()
    paths = save_figures(ds, tmp_path, formats=("png", "pdf", "svg"))
    assert len(paths) == 9
    assert {p.suffix for p in paths} == {".png", ".pdf", ".svg"}
    assert {p.name for p in paths if p.suffix == ".png"} == {
        "risk.png",
        "overlaps.png",
        "head_similarity.png",
    }
    for p in paths:
        data = p.read_bytes()
        assert p.exists() and len(data) > 0
        if p.suffix == ".pdf":
            assert data.startswith(b"%PDF")
        elif p.suffix == ".svg":
            assert b"<svg" in data[:2000]
        else:
            assert data[:8] == PNG_MAGIC


def test_save_figures_rejects_unknown_format(tmp_path):
    with pytest.raises(ValueError, match="not supported"):
        save_figures(fake_result(), tmp_path, formats=("bogus",))


def test_risk_axes_lines():
    ds = fake_result(L=5)
    ax = the_axes(plot_risk(ds))
    assert ax.get_xscale() == "log"
    assert ax.get_xlabel() == "training time t = samples / D"
    assert ax.get_ylabel() == "risk"
    flat = [np.asarray(ln.get_ydata(), dtype=float) for ln in ax.lines]
    rb = ds.attrs["bayes_risk"]
    assert any(y.size == 2 and np.allclose(y, rb) for y in flat)  # Bayes risk line
    assert any(y.size == 2 and np.allclose(y, 0.5 * (1 - 1 / 5)) for y in flat)  # uniform ref
    labels = ax.get_legend_handles_labels()[1]
    assert any("Bayes risk R_B" in lab for lab in labels)
    for key in ("softmax", "H = 3", "L = 5", "D = 200", "discrete", "simulation"):
        assert key in ax.get_title()


def test_risk_mean_line_is_nanmean_over_seeds():
    ds = fake_result(S=4, diverge=[2])
    ax = the_axes(plot_risk(ds))
    mean = line_by_gid(ax, "risk-mean")
    pos = ds.t.values > 0
    np.testing.assert_allclose(mean.get_xdata(), ds.t.values[pos])
    expected = np.nanmean(ds.risk.values, axis=0)[pos]
    np.testing.assert_allclose(mean.get_ydata(), expected)


@pytest.mark.filterwarnings("error")
def test_diverged_seed_plots(tmp_path):
    ds = fake_result(S=3, diverge=[1], fail_after=0.5)
    fig = plot_risk(ds)
    ax = the_axes(fig)
    red = line_by_gid(ax, "diverged-seed-1")
    assert red.get_linestyle() == "--"
    labels = ax.get_legend_handles_labels()[1]
    assert any("diverged" in lab for lab in labels)
    plot_overlaps(ds, seed=1)
    plot_head_similarity(ds, seed=1)
    assert len(save_figures(ds, tmp_path)) == 3


@pytest.mark.filterwarnings("error")
def test_all_seeds_diverged_early():
    ds = fake_result(S=2, diverge=[0, 1], fail_after=0.01)  # nothing finite at t > 0
    plot_risk(ds)
    plot_overlaps(ds)
    plot_head_similarity(ds)


def test_theory_overlay_adds_line():
    ds = fake_result()
    th = fake_result(S=1, kind="theory", test=False, rng=1)
    plain = the_axes(plot_risk(ds))
    over = the_axes(plot_risk(ds, theory=th))
    assert len(over.lines) == len(plain.lines) + 1
    line = line_by_gid(over, "theory-mean")
    pos = th.t.values > 0
    np.testing.assert_allclose(line.get_ydata(), th.risk.values[0, pos])


def test_plot_into_given_axes():
    from matplotlib.figure import Figure

    fig = Figure()
    ax = fig.add_subplot()
    assert plot_risk(fake_result(), ax=ax) is fig
    assert ax.get_xscale() == "log"


@pytest.mark.filterwarnings("error")
def test_single_seed_single_head_one_feature(tmp_path):
    ds = fake_result(S=1, H=1, F=1)
    ax = the_axes(plot_risk(ds))
    np.testing.assert_allclose(
        line_by_gid(ax, "risk-mean").get_ydata(), ds.risk.values[0, ds.t.values > 0]
    )
    fig = plot_overlaps(ds)
    assert len([a for a in fig.axes if a.get_visible() and a.get_label() != "<colorbar>"]) == 2
    fig = plot_head_similarity(ds)
    assert "heads separate when these drop" in the_axes(fig).get_title()
    assert len(the_axes(fig).lines) == 0
    assert len(save_figures(ds, tmp_path, prefix="x_")) == 3


def test_overlaps_panels_and_seed_choice():
    ds = fake_result(S=2, H=3, F=2, seed0=7)
    fig = plot_overlaps(ds, seed=8)
    panels = [a for a in fig.axes if a.get_xscale() == "log"]
    assert len(panels) == 2  # one per feature
    assert all(
        len([ln for ln in a.lines if ln.get_label().startswith("head")]) == 3 for a in panels
    )
    i1 = ds.isel(seed=1, t=slice(1, None))
    np.testing.assert_allclose(panels[1].lines[2].get_ydata(), i1.cos.values[:, 2, 1])
    assert "seed 8" in fig.get_suptitle()
    assert "seed 7" in plot_overlaps(ds).get_suptitle()
    with pytest.raises(ValueError, match="not in this result"):
        plot_overlaps(ds, seed=3)


def test_head_similarity_pairs():
    ds = fake_result(H=3)
    ax = the_axes(plot_head_similarity(ds))
    assert ax.get_xscale() == "log"
    pairs = [ln for ln in ax.lines if ln.get_label().startswith("heads")]
    assert len(pairs) == 3
    Q = ds.Q.values[0, ds.t.values > 0]
    expected = Q[:, 0, 2] / np.sqrt(Q[:, 0, 0] * Q[:, 2, 2])
    np.testing.assert_allclose(pairs[1].get_ydata(), expected)
    assert "heads separate when these drop" in ax.get_title()


def test_diverged_blow_up_does_not_squash_the_axes():
    ds = fake_result(S=4, diverge=[0], fail_after=2.0)
    risk = ds.risk.values.copy()
    last = np.flatnonzero(np.isfinite(risk[0]))[-1]
    risk[0, last] = 1e6  # the seed blew up just before it was marked failed
    ds["risk"] = (("seed", "t"), risk)
    ax = the_axes(plot_risk(ds))
    assert ax.get_ylim()[1] < 1.0
    assert np.isfinite(line_by_gid(ax, "risk-mean").get_ydata()).all()
    assert any("y-axis clipped" in lab for lab in ax.get_legend_handles_labels()[1])
