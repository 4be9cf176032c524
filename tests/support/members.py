"""A failed member in one line, for engine tests written in the tools' own formats.

* `T0`: the reference time the members end at.
* `member(name, rank, log, exit_code=1, finished=T0)`: a pod on node `node-<rank>` whose container ended with
  `exit_code` at `finished`, with `log` as its log tail (what a pod watch and the sidecar's tail give the engine).
"""

from __future__ import annotations

from podmortem.core.model import Member, Termination

T0 = 1_800_000_000.0


def member(name: str, rank: int, log: str, exit_code: int = 1, finished: float = T0) -> Member:
    return Member(
        pod=name,
        rank=rank,
        node=f"node-{rank}",
        phase="Failed",
        termination=Termination(exit_code=exit_code, reason="Error", finished_at=finished),
        log_tail=log,
    )
