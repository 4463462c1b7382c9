"""A scripted server's random faults: which share of requests get one, of which kinds, drawn how."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FAULT_KINDS", "FaultPlan"]

FAULT_KINDS = ("reset", "cut", "stall", "garbage", "html")


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """Random faults for a whole script: each request, with probability `rate`, gets one of `kinds` instead
    of its turn, which stays for the retry.

    Kinds: an HTTP error status (`"429"`, `"500"`, `"503"`, ...); `"reset"` (an RST mid-reply); `"cut"` (the
    reply ends cleanly in the middle of a tool call's arguments, or of its text); `"stall"` (the reply stops
    there for `stall_seconds`, then ends: a client whose read timeout is shorter gives up first, any other
    sees a cut); `"garbage"` (a stream event that is not JSON spliced in mid-reply, as a broken proxy sends;
    a non-streamed reply is cut instead); `"html"` (status 200 with an HTML page, a captive portal's or a
    proxy's, which no retry turns into a reply). The same `seed` gives the same sequence of draws.
    `max_in_a_row` caps consecutive faults (per server), e.g. at a client's retry budget, so that a test does
    not hang on the luck of the draw: at rate 0.3, nine faults in a row (what exhausts the default 8 retries)
    come once in ~50,000 requests.
    """

    rate: float = 0.3
    kinds: tuple[str, ...] = ("429", "500", "503", "reset", "cut", "stall")
    seed: int | None = None
    stall_seconds: float = 1.0
    max_in_a_row: int | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.rate <= 1:
            raise ValueError(f"fault rate must be between 0 and 1, not {self.rate}")
        if not self.kinds:
            raise ValueError("a fault plan needs at least one kind")
        for kind in self.kinds:
            if kind not in FAULT_KINDS and not (kind.isdigit() and 400 <= int(kind) <= 599):
                raise ValueError(f"unknown fault kind {kind!r}: use an HTTP error status or one of "
                                 f"{', '.join(map(repr, FAULT_KINDS))}")
        if self.stall_seconds < 0:
            raise ValueError("stall_seconds must not be negative")
        if self.max_in_a_row is not None and self.max_in_a_row < 0:
            raise ValueError("max_in_a_row must not be negative")
