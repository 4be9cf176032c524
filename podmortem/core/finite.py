"""Numbers that come from outside — the wire, a flag, the environment — checked before anything keeps them.

A float that is NaN or infinite compares false with everything: taken as a deadline it sits in the event
loop's timer heap, whose order then no longer holds, and every timer of the process (quorum timeouts,
holds, lease renewals) can fire late. So every number that enters from outside passes `finite` (a flag:
refused with an error naming it) or `finite_or_none` (a wire field: dropped and counted by the caller).
Timestamps are bounded to what protobuf's `Timestamp` may hold (0001-01-01 to 9999-12-31), so a time
from the wire always fits a datetime.
"""

from __future__ import annotations

import math

# google.protobuf.Timestamp's documented range: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999999Z.
MIN_TIMESTAMP = -62_135_596_800
MAX_TIMESTAMP = 253_402_300_799


def finite_or_none(value: object) -> float | None:
    """`value` as a float when it is a finite number (bools are not numbers here); None otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int beyond a double
        return None
    return number if math.isfinite(number) else None


def finite(value: object, what: str) -> float:
    """`value` as a finite float, or ValueError naming `what` (a flag, a field)."""
    number = finite_or_none(value)
    if number is None:
        raise ValueError(f"{what} = {value!r} is not a finite number")
    return number


def valid_timestamp(seconds: int, nanos: int = 0) -> bool:
    """Is (seconds, nanos) a time protobuf's `Timestamp` may hold?"""
    return MIN_TIMESTAMP <= seconds <= MAX_TIMESTAMP and 0 <= nanos <= 999_999_999
