"""A claim of the paper as data: what is measured, its value ± s.e., and the tolerance that
decides it. The verdict is computed here, never passed in.

A :class:`Tolerance` is a rule on one number: a ``kind`` (the comparison), a ``bound``, a multiple
``k`` of the value's standard error, an optional absolute ``floor`` of that allowance, and
``why`` (the reason, in words). The kinds, with the allowance ``a = max(k·se, floor)``:

=============  =========================  =================================================
kind           holds when                 reads as
=============  =========================  =================================================
``above``      value > bound + a          clearly above: the s.e. counts against the claim
``below``      value < bound − a          clearly below
``at_least``   value ≥ bound − a          not clearly below: the s.e. counts for the claim
``at_most``    value ≤ bound + a          not clearly above
``within``     abs(value) ≤ bound + a     a difference consistent with 0
=============  =========================  =================================================

So "a difference exceeds 3 s.e." is ``above`` with bound 0 and k = 3, "the increase is at most
0.1 (+ 3 s.e.)" is ``at_most`` with bound 0.1 and k = 3, and a count ("in every seed",
"in at least one") is ``at_least`` with k = 0 and se = 0. A value that is not a number (nothing
was measured) never holds: its verdict is NO, with the reason. ``k·se`` is only formed when
k > 0, so a tolerance without an s.e. multiple ignores a missing s.e.; one with k > 0 and an s.e.
that is not finite is NO (the allowance is unknown).

Where one verdict combines several measurements (the same claim in the simulation and in the ODE;
an effect that must be significant and consistent with a prediction), the claim keeps one line
and lists them in ``all_of``: sub-claims, each with its own value, s.e. and tolerance, whose ids
extend the claim's (``E3.discrete.stalls.sim``, ``.ode``). Its verdict is NO when any part's is,
— when no part has a verdict, and yes otherwise (a part only measured does not count). One claim per
statement of the paper (rather than one per measurement) keeps the table as long as the list of
findings, each row decided by its parts, which the report lists under it. A claim with ``all_of``
has no value or tolerance of its own.

A claim with tolerance None is measured only (verdict None, shown as —).

Example:
    >>> t = Tolerance("above", 0.0, k=3, why="a difference beyond noise")
    >>> Claim("E9.gap", "A beats B", "R_B − R_A", 0.031, 0.004, t).verdict
    True
    >>> Claim("E9.gap", "A beats B", "R_B − R_A", 0.031, 0.011, t).verdict
    False
    >>> Claim("E9.gap", "A beats B", "R_B − R_A", float("nan"), 0.0, t).reason
    'the value is not a number (nothing measured)'
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

KINDS: dict[str, str] = {
    "above": ">",
    "below": "<",
    "at_least": "≥",
    "at_most": "≤",
    "within": "≤",  # |value| ≤ bound + a
}


def number(x: float, unit: str = "", digits: int = 3) -> str:
    """``x`` as text in its unit: "%" shows a fraction in per cent, other units follow the number.

    >>> number(0.03125, "%"), number(12.0, "of 16 seeds"), number(float("nan"))
    ('3.12 %', '12 of 16 seeds', 'n/a')
    """
    if math.isnan(x):
        return "n/a"
    if unit == "%":
        return f"{100 * x:.{digits}g} %"
    return f"{x:.{digits}g}" + (f" {unit}" if unit else "")


def value_se(value: float, se: float) -> str:
    """'value ± se' with the s.e. to two significant digits and the value to the same decimal
    place (3 significant digits each where that would be long or the s.e. is not finite).

    >>> value_se(0.18969, 0.00078), value_se(150.3, 12), value_se(2.0, float("inf"))
    ('0.18969 ± 0.00078', '150 ± 12', '2 ± inf')
    """
    if not (math.isfinite(se) and se > 0 and math.isfinite(value)):
        return f"{value:.3g} ± {se:.2g}"
    d = max(0, 1 - math.floor(math.log10(se)))
    if d > 6 or abs(value) >= 1e6:
        return f"{value:.3g} ± {se:.2g}"
    return f"{value:.{d}f} ± {se:.{d}f}"


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """The rule that decides a claim: ``kind`` (see the module's table), ``bound``, ``k`` standard
    errors, an absolute ``floor`` of the allowance k·se, ``why`` in words, and
    ``set_after_data``: True where the bound was chosen after seeing a run's result."""

    kind: str
    bound: float
    k: float = 0.0
    floor: float = 0.0
    why: str = ""
    set_after_data: bool = False

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"tolerance kind {self.kind!r}: one of {', '.join(KINDS)}")
        for name in ("bound", "k", "floor"):
            object.__setattr__(self, name, float(getattr(self, name)))  # NumPy scalars
        if self.k < 0 or self.floor < 0:
            raise ValueError("a tolerance's k and floor are ≥ 0")

    def allowance(self, se: float) -> float:
        """max(k·se, floor); the floor alone when k = 0 (the s.e. then plays no part)."""
        return max(self.k * se, self.floor) if self.k > 0 else self.floor

    def check(self, value: float, se: float, unit: str = "") -> tuple[bool, str]:
        """(holds, the comparison as text) for ``value`` ± ``se``.

        >>> Tolerance("at_most", 0.1, k=3).check(0.15, 0.02)
        (True, '0.15 ≤ 0.1 + 3 × 0.02 = 0.16')
        >>> Tolerance("at_least", 4).check(3.0, 0.0)
        (False, '3 ≥ 4 fails')
        """
        if math.isnan(value):
            return False, "the value is not a number (nothing measured)"
        if self.k > 0 and not math.isfinite(se):
            return False, f"the s.e. is {se}: the allowance {self.k:g} × s.e. is unknown"
        if math.isnan(self.bound):
            return False, "the bound is not a number"
        a = self.allowance(se)
        lo, hi = self.bound - a, self.bound + a
        holds = {
            "above": value > hi,
            "below": value < lo,
            "at_least": value >= lo,
            "at_most": value <= hi,
            "within": abs(value) <= hi,
        }[self.kind]
        return holds, self._text(value, se, a, unit) + ("" if holds else " fails")

    def _text(self, value: float, se: float, a: float, unit: str) -> str:
        v = number(value, unit, 4)
        v = f"|{v}|" if self.kind == "within" else v
        rule = f"{v} {KINDS[self.kind]} {number(self.bound, unit, 4)}"
        if a == 0:
            return rule
        sign = "−" if self.kind in ("below", "at_least") else "+"
        if self.k > 0 and a == self.k * se:
            part = f"{self.k:g} × {number(se, unit, 2)}"
        else:
            part = f"floor {number(self.floor, unit, 2)}"
        lim = self.bound - a if sign == "−" else self.bound + a
        return f"{rule} {sign} {part} = {number(lim, unit, 4)}"

    def rule(self, unit: str = "") -> str:
        """The rule in words: 'value > 0 + 3 s.e.'."""
        lhs = "|value|" if self.kind == "within" else "value"
        out = f"{lhs} {KINDS[self.kind]} {number(self.bound, unit, 4)}"
        sign = "−" if self.kind in ("below", "at_least") else "+"
        if self.k > 0:
            out += f" {sign} {self.k:g} s.e."
        if self.floor > 0:
            out += f" (allowance at least {number(self.floor, unit, 2)})"
        return out

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Claim:
    """One claim: ``id`` ("E3.discrete.stalls"), the ``statement`` of the paper it tests, the
    ``measure`` (what the number is), ``value`` ± ``se`` in ``unit`` ("%": a fraction shown in
    per cent), the ``tolerance`` that decides it (None: measured only), ``detail`` (further
    numbers, in words) and ``all_of`` (sub-claims that decide it together, see the module)."""

    id: str
    statement: str
    measure: str
    value: float = math.nan
    se: float = 0.0
    tolerance: Tolerance | None = None
    unit: str = ""
    detail: str = ""
    all_of: tuple[Claim, ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "value", float(self.value))  # NumPy scalars → float
        object.__setattr__(self, "se", float(self.se))
        object.__setattr__(self, "all_of", tuple(self.all_of))
        if self.all_of and self.tolerance is not None:
            raise ValueError(f"claim {self.id}: all_of decides it; it has no tolerance of its own")
        for part in self.all_of:
            if not part.id.startswith(self.id + "."):
                raise ValueError(f"claim {self.id}: part {part.id} must extend its id")

    @property
    def verdict(self) -> bool | None:
        """True (yes), False (NO) or None (measured only), from the data."""
        if self.all_of:
            vs = [p.verdict for p in self.all_of]
            if any(v is False for v in vs):
                return False
            return None if all(v is None for v in vs) else True
        if self.tolerance is None:
            return None
        return self.tolerance.check(self.value, self.se, self.unit)[0]

    @property
    def reason(self) -> str:
        """The check that decided the verdict, as text ('' when measured only)."""
        if self.all_of:
            return "; ".join(f"{self.label(p)}: {p.reason}" for p in self.all_of if p.reason)
        if self.tolerance is None:
            return ""
        return self.tolerance.check(self.value, self.se, self.unit)[1]

    def label(self, part: Claim) -> str:
        """A part's name within this claim: its id without this claim's ('sim', 'ode.keep')."""
        return part.id.removeprefix(self.id + ".")

    def value_text(self, unit: bool = True) -> str:
        """'3.12 ± 0.41 %' (``unit`` False: without the unit); for a claim with parts
        'sim … · ode …', their common unit once at the end.

        >>> Claim("E9.x", "s", "m", 0.0312, 0.0041, unit="%").value_text()
        '3.12 ± 0.41 %'
        """
        if self.all_of:
            units = {p.unit for p in self.all_of if not p.all_of}
            one = len(units) == 1 and not any(p.all_of for p in self.all_of)
            text = " · ".join(f"{self.label(p)} {p.value_text(not one)}" for p in self.all_of)
            return text + (f" {units.pop()}" if one and unit and units != {""} else "")
        if math.isnan(self.value):
            return "n/a"
        scale = 100 if self.unit == "%" else 1
        text = f"{scale * self.value:.3g}" if self.se == 0 else value_se(
            scale * self.value, scale * self.se)  # fmt: skip
        return text + (f" {self.unit}" if unit and self.unit else "")

    def as_dict(self) -> dict:
        """Plain JSON data, the verdict and its check included (NaN as null, ±∞ as text)."""
        return {
            "id": self.id,
            "statement": self.statement,
            "measure": self.measure,
            "value": json_number(self.value),
            "se": json_number(self.se),
            "unit": self.unit,
            "verdict": self.verdict,
            "check": self.reason,
            "tolerance": None if self.tolerance is None else self.tolerance.as_dict(),
            "detail": self.detail,
            "all_of": [p.as_dict() for p in self.all_of],
        }

    @classmethod
    def from_dict(cls, d: dict) -> Claim:
        """The claim of :meth:`as_dict`'s data (its verdict recomputed from the data).

        >>> c = Claim("E9.n", "every seed", "seeds", 3, tolerance=Tolerance("at_least", 3))
        >>> Claim.from_dict(c.as_dict()) == c
        True
        """
        tol = d.get("tolerance")
        return cls(
            d["id"], d["statement"], d["measure"], _from_json(d["value"]), _from_json(d["se"]),
            None if tol is None else Tolerance(**tol), d.get("unit", ""), d.get("detail", ""),
            tuple(cls.from_dict(p) for p in d.get("all_of", ())),
        )  # fmt: skip


def verdict_text(v: bool | None) -> str:
    return "yes" if v is True else ("NO" if v is False else "—")


def json_number(x: float) -> Any:
    """A float for plain JSON: NaN as null, ±∞ as the text "inf" / "-inf" (JSON holds neither).

    >>> json_number(float("nan")), json_number(float("-inf")), json_number(2.5)
    (None, '-inf', 2.5)
    """
    if math.isnan(x):
        return None
    return x if math.isfinite(x) else ("inf" if x > 0 else "-inf")


def _from_json(x: Any) -> float:
    return math.nan if x is None else float(x)
