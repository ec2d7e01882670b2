"""The names the configs accept, without importing JAX: a config (and so every command's
``--help`` and its refusals of bad input) is checked before any numerical module is loaded.

Each tuple lists, in order, the keys of the registry it mirrors — :data:`ACTIVATION_NAMES` those
of :data:`headspec.core.attention.ACTIVATIONS`, :data:`ENGINE_NAMES` those of
:data:`headspec.dynamics.engines.ENGINES`; each registry checks at import that it still does.
"""

ACTIVATION_NAMES = ("softmax", "softmax1", "bayes_softmax")
ENGINE_NAMES = ("full", "reduced", "diffusion")


def reduced_fits(D: int, F: int, H: int, L: int, B: int) -> bool:
    """Whether the reduced engine can run: it needs D − (F + H) ≥ B·L (its per-step frame holds
    the F latent directions, the H keys and the B·L tokens of a batch)."""
    return D - (F + H) >= B * L


def check_registry(names: tuple[str, ...], registry: dict, what: str) -> None:
    """Raise if ``registry``'s keys are not ``names`` (a new strategy registered in one place)."""
    if tuple(registry) != names:
        raise RuntimeError(
            f"the {what} registered ({', '.join(registry)}) differ from headspec.core.names "
            f"({', '.join(names)}); fix: list the new one in both"
        )
