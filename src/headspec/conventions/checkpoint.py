"""Checkpoints of a long simulation, so that an interrupted run resumes where it was.

A simulation advances every seed from one grid point to the next
(:func:`headspec.dynamics.engines.base.run`); the random numbers of a step depend only on the
run's keys and the step's index, so the state at a grid point and the observations before it
are all a run needs to go on — and a resumed run gives, bit for bit, the result of one that was
never stopped (tested in tests/test_checkpoint.py).

:class:`Checkpoint` writes them, at most every ``every`` seconds of wall time, to one NumPy
``.npz`` file next to the result (``<result>.partial.npz``; plain arrays and a JSON header, no
pickle), atomically (a crash while writing leaves the last good checkpoint). A checkpoint of
another config, another shape or one that cannot be read is ignored (the run starts afresh) and
replaced. Its wall and CPU seconds so far are added to the finished result's compute time.
"""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import numpy as np

from headspec.conventions.io import write_atomic
from headspec.core.observables import Observation

EVERY_S = 300.0  # wall seconds between checkpoints (a run shorter than this writes none)
#: an SGD engine's run is advanced in at least this many pieces, so that a checkpoint can come
#: inside a long grid interval (at most 1/PIECES of the run is lost); the diffusion engine's
#: come at grid points only (its solver steps end on each piece's end, which would move it)
PIECES = 64
SUFFIX = ".partial.npz"
EARLIER_SECONDS = "earlier_elapsed_s"  # attributes a resumed result carries until stamped
EARLIER_CPU_SECONDS = "earlier_cpu_s"


def path_for(result: str | Path) -> Path:
    """The checkpoint file of the result file ``result``."""
    return Path(f"{result}{SUFFIX}")


class Checkpoint:
    """The checkpoint of one simulation (config ``config_json``) in file ``path``."""

    def __init__(self, path: str | Path, config_json: str, every: float | None = None):
        self.path = Path(path)
        self.config_json = config_json
        self.every = float(EVERY_S if every is None else every)
        self._saved = time.monotonic()
        self._t0, self._c0 = time.perf_counter(), time.process_time()
        self.earlier = (0.0, 0.0)  # wall and CPU seconds of the runs before this one

    def load(self, state) -> tuple[list[Observation], object, int | None] | None:
        """(observations so far, state, its step: None for the last observation's grid point)
        from the file, if it holds this config's run with ``state``'s structure, shapes and
        dtypes; else None."""
        import jax
        import jax.numpy as jnp

        if not self.path.is_file():
            return None
        leaves, tree = jax.tree.flatten(state)
        try:
            with np.load(self.path, allow_pickle=False) as z:
                head = json.loads(str(z["header"]))
                if head["config"] != self.config_json or head["leaves"] != len(leaves):
                    return None
                got = [z[f"state_{i}"] for i in range(len(leaves))]
                fields = {f: z[f"obs_{f}"] for f in Observation._fields}
                earlier = (float(head["elapsed_s"]), float(head["cpu_s"]))
        except Exception:  # damaged, foreign or from another headspec: start afresh
            return None
        for new, old in zip(got, leaves, strict=True):
            if new.shape != old.shape or new.dtype != np.dtype(old.dtype):
                return None
        k = int(head["points"])
        obs = [Observation(**{f: a[i] for f, a in fields.items()}) for i in range(k)]
        at = head.get("at")  # absent in the first checkpoints (2026-12-07): a grid point
        self.earlier = earlier
        return obs, jax.tree.unflatten(tree, [jnp.asarray(a) for a in got]), at

    def save(self, obs: list[Observation], state, at: int, force: bool = False) -> bool:
        """Write the run so far (``state`` at step ``at``) if ``every`` seconds have passed
        since the last write (or ``force``); returns whether it wrote."""
        import jax

        if not force and time.monotonic() - self._saved < self.every:
            return False
        leaves = jax.tree.leaves(state)
        head = {
            "config": self.config_json,
            "leaves": len(leaves),
            "points": len(obs),
            "at": int(at),
            "elapsed_s": self.earlier[0] + time.perf_counter() - self._t0,
            "cpu_s": self.earlier[1] + time.process_time() - self._c0,
        }
        arrays = {f"state_{i}": np.asarray(x) for i, x in enumerate(leaves)}
        for f in Observation._fields:
            arrays[f"obs_{f}"] = np.stack([np.asarray(getattr(o, f)) for o in obs])
        buf = io.BytesIO()
        np.savez(buf, header=np.asarray(json.dumps(head)), **arrays)
        data = buf.getvalue()
        try:
            write_atomic(self.path, lambda tmp: tmp.write_bytes(data), size=len(data))
        except OSError:  # a full disk or a vanished folder: the run goes on without checkpoints
            self.every = float("inf")
            return False
        self._saved = time.monotonic()
        return True

    def remove(self) -> None:
        """Delete the file (the finished result is written)."""
        self.path.unlink(missing_ok=True)
