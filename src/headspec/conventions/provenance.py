"""Provenance recorded next to every result: package version, git revision, platform, and the
CPU target XLA compiles for (bit-identical float results are only expected on the same one);
and the line ``headspec --version`` prints."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

from headspec._version import __version__

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # src/headspec (or site-packages/headspec)


def _git(*args: str) -> str | None:
    """The output of ``git ARGS`` run in the package's folder, or None if it fails."""
    try:
        res = subprocess.run(
            ["git", *args], cwd=PACKAGE_DIR, capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout.strip() if res.returncode == 0 else None


def git_state(short: bool = False) -> tuple[str, bool] | None:
    """(commit, dirty) of the git checkout headspec's own source files are tracked in, or None
    when they are not: an installed package, even one inside some repository's ignored folder
    (a virtual environment in a checkout) is not a checkout of headspec. ``dirty``: a tracked
    file of the checkout differs from the commit (untracked files do not count)."""
    if _git("ls-files", "--error-unmatch", "__init__.py") is None:
        return None
    rev = _git("rev-parse", *(["--short"] if short else []), "HEAD")
    if not rev:
        return None
    status = _git("status", "--porcelain", "--untracked-files=no")
    return rev, bool(status)


def git_revision() -> str:
    """The git commit of the headspec source tree (with ``-dirty`` if modified), or ``unknown``."""
    state = git_state()
    if state is None:
        return "unknown"
    rev, dirty = state
    return rev + ("-dirty" if dirty else "")


def version_line() -> str:
    """What ``headspec --version`` prints: the version and, run from a git checkout, its short
    commit with ``+dirty`` when tracked files have changes, e.g. ``headspec 0.1.0 (git
    d308e26+dirty)``; installed from a wheel, ``headspec 0.1.0``.

    Example:
        >>> version_line().startswith(f"headspec {__version__}")
        True
    """
    state = git_state(short=True)
    if state is None:
        return f"headspec {__version__}"
    rev, dirty = state
    return f"headspec {__version__} (git {rev}{'+dirty' if dirty else ''})"


# CPU features that change the code XLA generates for a CPU (vector width, fused multiply-add):
# two machines that differ in these may give float results that differ in the last bits.
CODEGEN_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512dq",
                 "avx512vl", "avx512_bf16", "avx512fp16", "amx_tile", "asimd", "sve")  # fmt: skip


def cpu_target() -> str:
    """The CPU that XLA compiles for, as one line: vendor, family/model and the code-generation
    features of :data:`CODEGEN_FLAGS` that it has (from /proc/cpuinfo; ``platform.processor()``
    elsewhere), plus XLA_FLAGS when set. Float results are bit-reproducible across runs on one
    target; across targets they may differ in the last bits (vector width, FMA contraction).

    Example:
        >>> cpu_target().startswith(("cpu ", "unknown"))
        True
    """
    info: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            k, _, v = line.partition(":")
            k = k.strip()
            if k and k not in info:
                info[k] = v.strip()
    except OSError:
        pass
    flags = set((info.get("flags") or info.get("Features") or "").split())
    vendor = info.get("vendor_id") or info.get("CPU implementer") or platform.processor()
    family = info.get("cpu family") or info.get("CPU architecture") or ""
    model = info.get("model") or info.get("CPU part") or ""
    if not (vendor or family or model):
        return "unknown " + platform.machine()
    feats = " ".join(f for f in CODEGEN_FLAGS if f in flags)
    out = f"cpu {platform.machine()} {vendor} family {family} model {model} [{feats}]"
    xla = os.environ.get("XLA_FLAGS", "").strip()
    return out + (f" XLA_FLAGS={xla}" if xla else "")


def run_metadata() -> dict[str, str]:
    """Version, git revision and environment of this run, as plain strings (JSON-ready)."""
    import jax

    return {
        "headspec_version": __version__,
        "git_revision": git_revision(),
        "python": platform.python_version(),
        "jax_version": jax.__version__,
        "jax_backend": jax.default_backend(),
        "platform": platform.platform(),
        "cpu_target": cpu_target(),
    }


CACHE_MAX_BYTES = 2 * 2**30  # the persistent compilation cache's size bound (LRU eviction)


def user_cache_folder(name: str) -> Path:
    """``$XDG_CACHE_HOME/headspec/NAME``, default ``~/.cache/headspec/NAME`` (a home that cannot
    be resolved gives a folder under the system's temporary directory)."""
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = str(Path.home() / ".cache")
        except (KeyError, RuntimeError):  # no HOME and no passwd entry
            import tempfile

            base = str(Path(tempfile.gettempdir()) / f"headspec-cache-{os.getuid()}")
    return Path(base) / "headspec" / name


def writable_folder(folder: str | os.PathLike) -> bool:
    """Whether FOLDER exists or can be created, and a file can be written in it (checked by
    writing and removing a probe: a read-only home or a full mount answers False)."""
    import tempfile

    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".probe-"):
            pass
    except OSError:
        return False
    return True


def enable_compilation_cache() -> None:
    """Keep JAX's compiled programs on disk, so a repeated command skips most compile time.

    Folder: $HEADSPEC_JAX_CACHE, else $XDG_CACHE_HOME/headspec/jax (~/.cache/headspec/jax);
    HEADSPEC_JAX_CACHE=off disables it, and a folder that cannot be written leaves it off (the
    command runs, compiling every program). Used by the CLI and by every sweep worker.
    """
    import jax

    folder = os.environ.get("HEADSPEC_JAX_CACHE")
    if folder is None:
        folder = str(user_cache_folder("jax"))
    if folder.lower() in ("", "0", "off", "none") or not writable_folder(folder):
        return
    try:
        jax.config.update("jax_compilation_cache_dir", folder)
        # programs of ≥ 0.1 s: headspec's setup programs (random draws, 0.2–3 s each) too; JAX's
        # own JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS, when set, is kept (the tests set 0)
        if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in os.environ:
            jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.1)
        # a size bound turns on JAX's least-recently-used eviction, which also takes a file lock
        # for every read and write: processes sharing the folder (the CLI, sweep workers, the
        # test session's children) never see each other's half-written entries
        jax.config.update("jax_compilation_cache_max_size", CACHE_MAX_BYTES)
        # JAX (0.10) writes the path of XLA's GPU autotuning cache, a folder inside this one,
        # into the compile options it hashes into every key, on CPU too: a copied or moved cache
        # folder (or the same programs cached under another path) was never read back — the
        # tests' whole cache compiled again after a copy. Without it a key is the program, the
        # XLA flags, the versions and the device; a GPU still caches whole compiled programs.
        jax.config.update("jax_persistent_cache_enable_xla_caches", None)
    except OSError:  # read-only home: run without the cache
        return
    throttle_cache_eviction()
    guard_cache_entries()


# A compile-cache entry is machine code that XLA loads as it is: an entry damaged on disk (a
# crash while writing on another file system, a bad sector, a copy cut short) made every command
# fail (a parse error and a compile, for ever: JAX never rewrites an entry that exists) or crash
# (exit 139 with no message). headspec's processes therefore write each entry behind a magic and
# a checksum of its bytes and check both when they read it: an entry that does not match
# (damaged, truncated, or written by another program or an older headspec) is deleted and read
# as a miss, so the program compiles and the entry is written afresh. Cost: one BLAKE2b pass over
# an entry of tens of kB per read (microseconds).
_ENTRY_MAGIC = b"headspec-xla-1\n"
_ENTRY_DIGEST = 16  # bytes of the BLAKE2b digest after the magic


def guard_cache_entries() -> bool:
    """Make JAX's persistent cache (jax._src.lru_cache.LRUCache) check every entry it reads
    against the checksum headspec wrote with it (see above); returns whether it applies."""
    import hashlib

    try:
        from jax._src import lru_cache
    except ImportError:  # pragma: no cover - another JAX layout
        return False
    cls = getattr(lru_cache, "LRUCache", None)
    get, put = getattr(cls, "get", None), getattr(cls, "put", None)
    if get is None or put is None:
        return False
    if getattr(get, "_headspec_guarded", False):
        return True
    head = len(_ENTRY_MAGIC) + _ENTRY_DIGEST

    def digest(body: bytes) -> bytes:
        return hashlib.blake2b(body, digest_size=_ENTRY_DIGEST).digest()

    def checked_get(self, key: str) -> bytes | None:
        try:
            value = get(self, key)
        except Exception:  # unreadable (I/O error, lock timeout): a miss
            return None
        if value is None:
            return None
        body = value[head:]
        if value[: len(_ENTRY_MAGIC)] == _ENTRY_MAGIC and value[len(_ENTRY_MAGIC) : head] == digest(
            body
        ):
            return body
        for suffix in ("-cache", "-atime"):  # damaged: gone, so that the compile is written anew
            try:
                (self.path / f"{key}{suffix}").unlink()
            except Exception:
                pass
        return None

    def checked_put(self, key: str, value: bytes) -> None:
        put(self, key, _ENTRY_MAGIC + digest(value) + value)

    checked_get._headspec_guarded = True
    cls.get, cls.put = checked_get, checked_put
    return True


# JAX's bounded cache (jax._src.lru_cache.LRUCache, jaxlib 0.10) checks the bound at every
# write: under its file lock it lists the folder and reads every entry's access-time file. With
# the test suite's ~6800 entries one check took 0.27 s (2026-12-03, 2 cores, warm page cache),
# so a cold run, which writes thousands of programs into a growing folder, spent a large part of
# its time — and every other process waiting on the lock — re-listing the folder (measured in
# tests/test_compiles.py and docs/tests.md). headspec's processes check the bound when they
# first write and then once per EVICTION_EVERY bytes they have written: the folder can exceed
# the bound by at most that much per process writing at the same time, and entries are still
# read and written under the same lock (no torn reads between processes).
EVICTION_EVERY = CACHE_MAX_BYTES // 20


def throttle_cache_eviction() -> bool:
    """Make JAX's persistent-cache bound check run once per :data:`EVICTION_EVERY` bytes a
    process writes instead of at every write (see above); returns whether it applies (False
    where this JAX has no such method: its own behaviour is kept)."""
    try:
        from jax._src import lru_cache
    except ImportError:  # pragma: no cover - another JAX layout
        return False
    cls = getattr(lru_cache, "LRUCache", None)
    check = getattr(cls, "_evict_if_needed", None)
    if check is None:
        return False
    if getattr(check, "_headspec_throttled", False):
        return True

    def _evict_if_needed(self, *, additional_size: int = 0) -> None:
        written = getattr(self, "_headspec_written", None)  # bytes since this process's check
        if written is not None and written + additional_size < EVICTION_EVERY:
            self._headspec_written = written + additional_size
            return
        check(self, additional_size=additional_size)
        self._headspec_written = 0

    _evict_if_needed._headspec_throttled = True
    cls._evict_if_needed = _evict_if_needed
    return True
