"""Values that would work, for an error about a constraint between fields.

A derived constraint (perm_size divides both blocks, the targets fit them, the batch splits
over the mesh) fails on whichever field the user changed; the error names, for each field
involved, its nearest values that satisfy every check with the other fields as they are.
The checks themselves are the judges, so the advice cannot drift from them.
"""

import dataclasses
import math
from collections.abc import Callable

from xlnet_jax.config.declare import INT32_MAX
from xlnet_jax.objective.plm import NUM_FUNCTIONAL, PLMConfig, validate_plm_config

PLM_FIELDS = ("seq_len", "reuse_len", "perm_size", "num_predict")
# Values scanned on each side of the current one: the advice stays instant for any input.
MAX_SCAN = 2048


def nearest(ok: Callable[[int], bool], current: int, low: int, high: int) -> list[int]:
    """The working value nearest below `current` and the one nearest above, within [low, high]."""
    anchor = min(max(current, low), high)  # a current value out of range scans from its edge
    below = range(min(current - 1, high), max(low, anchor - MAX_SCAN) - 1, -1)
    above = range(max(current + 1, low), min(high, anchor + MAX_SCAN) + 1)
    below, above = (next((v for v in scan if ok(v)), None) for scan in (below, above))
    return [v for v in (below, above) if v is not None]


def plm_works(cfg: PLMConfig) -> bool:
    """Whether the objective's fields pass every check."""
    try:
        validate_plm_config(cfg)
    except ValueError:
        return False
    return True


def _one_field(cfg: PLMConfig, field: str) -> list[int]:
    def ok(value: int) -> bool:
        return plm_works(dataclasses.replace(cfg, **{field: value}))

    high = min(4 * cfg.seq_len, INT32_MAX) if field == "seq_len" else cfg.seq_len
    return nearest(ok, getattr(cfg, field), NUM_FUNCTIONAL + 1 if field == "seq_len" else 0, high)


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)})


def _block_pair(cfg: PLMConfig) -> tuple[int, int] | None:
    """The (reuse_len, perm_size) pair nearest the current one (in ratio) that works with
    this seq_len and num_predict."""

    def distance(pair: tuple[int, int]) -> float:
        reuse, perm = pair
        return abs(math.log((reuse + 1) / (cfg.reuse_len + 1))) + abs(
            math.log(perm / max(cfg.perm_size, 1))
        )

    if not NUM_FUNCTIONAL < cfg.seq_len <= MAX_SCAN:
        return None
    pairs = [
        (reuse, perm)
        for reuse in range(cfg.seq_len - NUM_FUNCTIONAL)
        for perm in _divisors(cfg.seq_len - reuse)
        if reuse % perm == 0
        and plm_works(dataclasses.replace(cfg, reuse_len=reuse, perm_size=perm))
    ]  # fmt: skip
    return min(pairs, key=distance, default=None)


def plm_advice(cfg: PLMConfig) -> str:
    """'; values that would work ...' for a PLM config that fails a check, or ''."""
    single = [
        f"{field}={' or '.join(map(str, values))}"
        for field in PLM_FIELDS
        if (values := _one_field(cfg, field))
    ]
    advice = ""
    if single:
        advice = f"; values that would work, one field changed: {', '.join(single)}"
    pair = _block_pair(cfg)
    if pair is not None and pair[0] != cfg.reuse_len and pair[1] != cfg.perm_size:
        advice += f"; or with seq_len={cfg.seq_len}: reuse_len={pair[0]} and perm_size={pair[1]}"
    return advice


def batch_advice(ok: Callable[[int], bool], batch_size: int) -> str:
    """'; batch_size=... would work' for a batch that does not split over the mesh, or ''."""
    values = nearest(ok, batch_size, 1, 4 * batch_size)
    return f"; batch_size={' or '.join(map(str, values))} would work" if values else ""


def range_advice(streams: int, data_ranges: int) -> str:
    """'; data_ranges=... would work' for ranges that do not divide the batch's streams."""
    values = nearest(lambda r: streams % r == 0, data_ranges, 1, max(streams, 1))
    return f"; data_ranges={' or '.join(map(str, values))} would work" if values else ""
