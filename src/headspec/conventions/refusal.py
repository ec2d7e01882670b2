"""The refusal of a run that cannot fit (:mod:`headspec.conventions.budget`): which setting is
the cause, and a value of it that fits.

An estimate's part is proportional to a product of sizes, each to a power (``Term.factors``:
seeds, record.n_mc, the law's atoms, task.L, …). The cause is the size furthest above its usual
value (:data:`USUAL`, ratio^power): 10⁵ atoms at 1 seed blames the atoms, not the seeds. The value
that fits is where that size alone brings the total within the limit, the other parts unchanged
(for a part ∝ size^p: size · (room / part)^(1/p), rounded down).

Example:
    >>> from headspec.conventions.budget import Term
    >>> part = Term(8e12, "evaluating the risk", "…", "…",
    ...             (("seeds", 1, 1), ("record.n_mc", 4096, 1), ("task.latent.atoms", 100_000, 1)))
    >>> blame(part), fit_value([part], "task.latent.atoms", 100_000, limit=8e9)
    (('task.latent.atoms', 100000), 100)
"""

from __future__ import annotations

import math
import os
import re

from headspec.conventions.config import ConfigError

SAFETY = 0.8  # share of the available memory a run may plan to use
FLOPS = 1e9  # floating-point operations a second assumed for the time estimate (2 CPU cores)
MAX_SECONDS = 86_400.0  # a run estimated beyond a day of compute is refused

# Usual sizes: a refusal blames the factor furthest above its usual size (ratio^power).
USUAL = {"seeds": 8, "record.n_mc": 4096, "task.latent.atoms": 3, "task.L": 10, "model.H": 4,
         "task.D": 1000, "theory.n": 8192, "diffusion.n": 8192, "train.batch": 1,
         "bayes.samples": 100_000, "record.n_test": 256, "prune.n": 16384,
         "saddles.n": 16384,
         "record.points": 60, "map.n": 4096}  # fmt: skip
_LOWEST = {"task.L": 2, "record.n_mc": 2, "theory.n": 2, "diffusion.n": 2, "map.n": 2}  # allowed


def size_text(*factors) -> tuple[str, tuple]:
    """('a × b = 1 × 2', factors) for factors (setting, value[, power]); the atoms of a law with
    one point (spike, Gaussian) and a first power are left out of the text."""
    fs = tuple((f[0], int(f[1]), f[2] if len(f) > 2 else 1) for f in factors)
    shown = [f for f in fs if not (f[0] == "task.latent.atoms" and f[1] <= 2)]
    names = " × ".join(k + ("²" if p == 2 else "") for k, _, p in shown)
    values = " × ".join(_n(v) + ("²" if p == 2 else "") for _, v, p in shown)
    return f"{names} = {values}", fs


def term_fix(sized: tuple[str, tuple], alt: str = "") -> tuple[str, str, tuple]:
    """(fields, fix, factors) of a Term: the fix lowers a factor above 1, or ``alt``."""
    fields, fs = sized
    lower = [k for k, v, _ in fs if v > 1 and k in USUAL]
    fix = " or ".join([f"a smaller {k}" if k != "seeds" else "fewer seeds" for k in lower[:3]])
    return fields, ", or ".join(x for x in (fix, alt) if x), fs


def check_memory(est, available: int | None = None, refit=None) -> None:
    """Refuse an estimate above ``available`` bytes (default: the machine's, × SAFETY), naming
    its largest part, the settings it grows with, and a fix."""
    limit = available if available is not None else int(available_memory() * SAFETY)
    if est.total <= limit:
        return
    big = est.largest
    raise ConfigError(
        f"{big.fields}: {est.command} needs ~{format_bytes(est.total)} of memory, mostly "
        f"{big.what} (~{format_bytes(big.bytes)}), and this machine has "
        f"{format_bytes(limit)} to spare; {refusal_fix(est.terms, big, limit, refit)} "
        f"(where the run will have more memory, say so with HEADSPEC_MEMORY, e.g. "
        f"HEADSPEC_MEMORY=64G)"
    )


def check_time(est) -> None:
    """Refuse an estimate whose fastest-growing parts alone take more than :data:`MAX_SECONDS`
    at :data:`FLOPS` (e.g. `bayes` with thousands of atoms: an eigen-factor of their heads'
    overlaps per chunk), naming the cause and a value that fits."""
    total = sum(t.bytes for t in est.time)
    if total <= MAX_SECONDS:
        return
    big = max(est.time, key=lambda t: t.bytes)
    raise ConfigError(
        f"{big.fields}: {est.command} would compute for ~{time_text(total)} (at {FLOPS:.0e} "
        f"operations a second), mostly {big.what} (~{time_text(big.bytes)}), beyond the "
        f"{time_text(MAX_SECONDS)} a run may take; "
        f"{refusal_fix(est.time, big, MAX_SECONDS)}"
    )


def refit(cfg, estimate):
    """(setting, value) → the estimate's total with that plain setting changed (None for a
    setting that is not one path of the config, e.g. the law's atoms)."""

    def total(key: str, value: int) -> float | None:
        data = cfg.model_dump(mode="python")
        *path, last = key.split(".")
        node = data
        for k in path:
            node = node.get(k) if isinstance(node, dict) else None
        if not isinstance(node, dict) or not isinstance(node.get(last), int):
            return None
        node[last] = value
        try:
            return estimate(type(cfg).model_validate(data)).total
        except ValueError:  # the changed value is refused by the config itself
            return float("inf")

    return total


def blame(term) -> tuple[str, int] | None:
    """(setting, its value) of the size furthest above its usual value among those ``term`` is
    proportional to; None without such factors."""
    sized = [(k, v, p) for k, v, p in term.factors if k in USUAL and v > _LOWEST.get(k, 1)]
    if not sized:
        return None
    k, v, _ = max(sized, key=lambda f: (f[1] / USUAL[f[0]]) ** f[2])
    return k, v


def fit_value(terms, key: str, value: int, limit: float, refit=None) -> int | None:
    """The largest value of setting ``key`` (now ``value``) at which the parts ``terms`` add up
    to at most ``limit``, each part scaled as key^power (its factor; parts without it stay), or
    by ``refit(key, x)`` (the whole estimate again with ``key = x``; None: not a plain setting);
    None if none down to the smallest allowed value fits."""

    def scaled(x: float) -> float:
        out = 0.0
        for t in terms:
            p = next((q for k, _, q in t.factors if k == key), 0)
            out += t.bytes * (x / value) ** p
        return out

    exact = refit is not None and refit(key, value) is not None
    total = (lambda x: refit(key, int(x))) if exact else scaled
    lo, hi = _LOWEST.get(key, 1), value
    if total(hi) <= limit:
        return hi
    if total(lo) > limit:
        return None
    while hi - lo > 1:  # total grows with the value: bisect on whole numbers
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if total(mid) <= limit else (lo, mid)
    return lo


def refusal_fix(terms, big, limit: float, refit=None) -> str:
    """'the cause is task.latent.atoms = 100,000; fix: task.latent.atoms at most 984 …'."""
    cause = blame(big)
    if cause is None:
        return f"fix: {big.fix}"
    k, v = cause
    fit = fit_value(terms, k, v, limit, refit)
    what = f"at most {fit:,}" if fit is not None else "much smaller (and other sizes too)"
    also = [f for f in big.fix.split(", or ") if k not in f]
    also = [f for f in also if not (f.startswith("fewer seeds") and _one_seed(big))]
    others = f" (or {', or '.join(also)})" if also else ""
    return f"the cause is {k} = {v:,}; fix: {k} {what}{others}"


def _one_seed(term) -> bool:
    return any(k == "seeds" and v <= 1 for k, v, _ in term.factors)


def format_bytes(b: float) -> str:
    """``1.6 GB``, ``350 MB``; beyond exabytes as a power of ten."""
    for unit, size in (("EB", 1e18), ("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if b >= size:
            if b >= 1000 * 1e18:
                return f"10^{int(math.log10(b))} bytes"
            return f"{b / size:.3g} {unit}"
    return f"{b / 1e3:.3g} kB"


def parse_bytes(text: str) -> int:
    """``"64G"``, ``"512M"``, ``"1.5T"`` or a number of bytes → bytes (binary units)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kKmMgGtT]?)i?[bB]?\s*", text)
    if not m:
        raise ConfigError(
            f"HEADSPEC_MEMORY = {text!r} is not a size; fix: give bytes or e.g. 64G, 512M"
        )
    power = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4}[m.group(2).lower()]
    return int(float(m.group(1)) * 1024**power)


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def available_memory() -> int:
    """Bytes this process may still take: ``HEADSPEC_MEMORY`` if set; else the smaller of
    MemAvailable (/proc/meminfo; physical memory where there is none) and the cgroup's limit
    less its usage."""
    env = os.environ.get("HEADSPEC_MEMORY")
    if env:
        return parse_bytes(env)
    avail = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    if avail is None:
        try:
            avail = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            avail = 8 * 2**30  # unknown platform: assume a small machine
    limit, used = (_read_int(f"/sys/fs/cgroup/memory.{k}") for k in ("max", "current"))
    if limit is not None and used is not None:
        avail = min(avail, max(0, limit - used))
    return avail


def time_text(seconds: float) -> str:
    """'3.2 h', '12 min', '45 s', '4.1 days'."""
    for unit, size in (("days", 86_400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= size:
            unit = "day" if unit == "days" and seconds < 1.5 * size else unit
            return f"{seconds / size:.2g} {unit}"
    return f"{seconds:.2g} s"


def _n(x) -> str:
    return f"{int(x):,}"
