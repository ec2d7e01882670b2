"""Task samplers (headspec.core.task): finite-D sequences, the feature frame, and the D → ∞
projected coordinates."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from headspec.core.latent import Discrete, Spike
from headspec.core.task import Task, make_frame, project, sample_batch, sample_projected


@pytest.mark.parametrize("kind", ["random", "canonical"])
def test_frame_is_orthonormal_and_kstar_scaled(kind, key):
    U = make_frame(key, 50, 3, kind)
    np.testing.assert_allclose(U.T @ U, np.eye(3), atol=1e-12)
    task = Task(law=Spike([1.0, 0.0, 0.0]), U=U, L=4)
    np.testing.assert_allclose(task.Kstar.T @ task.Kstar, 50 * np.eye(3), atol=1e-10)
    if kind == "canonical":
        np.testing.assert_array_equal(U, np.eye(50, 3))


def test_random_frames_differ_between_keys():
    a = make_frame(jax.random.key(0), 30, 2)
    b = make_frame(jax.random.key(1), 30, 2)
    assert not np.allclose(a, b)


def test_frame_needs_d_at_least_f(key):
    with pytest.raises(ValueError, match="D ≥ F"):
        make_frame(key, 2, 3)


def test_batch_places_the_spike_on_the_hidden_token(key):
    law = Discrete([[3.0, 0.0], [0.0, -2.0]], [0.5, 0.5])
    task = Task.create(key, law, L=5, D=400)
    b = sample_batch(jax.random.key(7), task, 20_000)
    nu = np.asarray(project(task, b.X))  # (n, L, F)
    eps, th = np.asarray(b.eps), np.asarray(b.theta)
    n = eps.shape[0]
    hidden = nu[np.arange(n), eps]  # (n, F)
    # hidden token: ν − θ ~ N(0, I); other tokens: ν ~ N(0, I)
    resid = hidden - th
    assert np.all(np.abs(resid.mean(0)) < 5 / np.sqrt(n))
    np.testing.assert_allclose(np.cov(resid.T), np.eye(2), atol=0.05)
    mask = np.ones(nu.shape[:2], bool)
    mask[np.arange(n), eps] = False
    noise = nu[mask]
    assert np.all(np.abs(noise.mean(0)) < 5 / np.sqrt(noise.shape[0]))
    np.testing.assert_allclose(np.cov(noise.T), np.eye(2), atol=0.03)
    # ε uniform, θ from the law, target is the hidden token
    assert np.all(np.abs(np.bincount(eps, minlength=5) / n - 0.2) < 5 * np.sqrt(0.16 / n))
    np.testing.assert_array_equal(np.asarray(b.y), np.asarray(b.X)[np.arange(n), eps])


def _joint_cov(M, Q):
    F = M.shape[1]
    return np.block([[Q, M], [M.T, np.eye(F)]])


def test_projected_noise_tokens_have_the_joint_covariance(key):
    rng = np.random.default_rng(3)
    H, F = 3, 2
    M = rng.normal(size=(H, F)) * 0.5
    A = rng.normal(size=(H, H)) * 0.4
    Q = M @ M.T + A @ A.T
    law = Spike([0.0, 0.0])  # no signal: every token is a noise token
    pb = sample_projected(key, law, L=4, n=50_000, M=M, Q=Q)
    Z = np.concatenate([np.asarray(pb.lam), np.asarray(pb.nu)], -1).reshape(-1, H + F)
    C = _joint_cov(M, Q)
    se = np.sqrt((np.diag(C)[:, None] * np.diag(C)[None, :] + C**2) / Z.shape[0])
    assert np.all(np.abs(np.cov(Z.T) - C) < 5 * se)


def test_projected_hidden_token_is_shifted_by_m_theta(key):
    M = np.array([[1.0, 0.5], [-0.5, 2.0]])
    law = Spike([2.0, -1.0])
    pb = sample_projected(key, law, L=3, n=30_000, M=M, fix_eps=True)
    assert np.all(np.asarray(pb.eps) == 0)
    lam0 = np.asarray(pb.lam)[:, 0]
    nu0 = np.asarray(pb.nu)[:, 0]
    n = lam0.shape[0]
    np.testing.assert_allclose(nu0.mean(0), [2.0, -1.0], atol=5 / np.sqrt(n))
    np.testing.assert_allclose(lam0.mean(0), M @ [2.0, -1.0], atol=5 * 2.3 / np.sqrt(n))


def test_projected_sampler_handles_singular_q(key):
    M = np.array([[1.0, 0.0], [1.0, 0.0]])  # two identical heads: Q singular
    pb = sample_projected(key, Spike([1.0, 1.0]), L=3, n=100, M=M, Q=M @ M.T)
    lam = np.asarray(pb.lam)
    assert np.all(np.isfinite(lam))
    np.testing.assert_allclose(lam[..., 0], lam[..., 1], atol=1e-12)


def test_keys_from_overlaps_realise_m_and_q(key):
    rng = np.random.default_rng(1)
    M = rng.normal(size=(3, 2))
    A = rng.normal(size=(3, 3))
    Q = M @ M.T + A @ A.T
    task = Task.create(key, Spike([1.0, 0.0]), L=3, D=60)
    K = task.keys_from_overlaps(M, Q, jax.random.key(5))  # (H, D)
    np.testing.assert_allclose(K @ task.Kstar / task.D, M, atol=1e-10)
    np.testing.assert_allclose(K @ K.T / task.D, Q, atol=1e-10)
    K0 = task.keys_from_overlaps(M)  # keys in span(K*)
    np.testing.assert_allclose(K0 @ K0.T / task.D, M @ M.T, atol=1e-10)


def test_finite_projections_have_the_projected_law(key):
    """λ computed from finite-D tokens with realised keys has the law of sample_projected."""
    M = np.array([[0.8, 0.0], [0.3, -0.6]])
    Q = M @ M.T + 0.5 * np.eye(2)
    law = Spike([0.0, 0.0])
    task = Task.create(key, law, L=2, D=300)
    K = task.keys_from_overlaps(M, Q, jax.random.key(2))
    b = sample_batch(jax.random.key(3), task, 20_000)
    lam = np.asarray(b.X @ K.T / jnp.sqrt(task.D)).reshape(-1, 2)
    nu = np.asarray(project(task, b.X)).reshape(-1, 2)
    Z = np.concatenate([lam, nu], -1)
    C = _joint_cov(M, Q)
    se = np.sqrt((np.diag(C)[:, None] * np.diag(C)[None, :] + C**2) / Z.shape[0])
    assert np.all(np.abs(np.cov(Z.T) - C) < 5 * se)
