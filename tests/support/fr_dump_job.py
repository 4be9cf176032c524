"""A tiny gloo job whose ranks dump their own Flight Recorder state mid-hang (run by torchrun in tests).

Three ranks run three all_reduces. Then ranks other than the laggard (`FR_LAGGARD`, default 2) enqueue a
fourth one (async) that the laggard has not entered, and, in a subgroup of every rank, the two lowest ranks
enqueue a broadcast of different sizes (a mismatch: `FR_MISMATCH=1`). Each rank then writes
`_dump_fr_trace_json()` and `_dump_fr_trace()` (pickle) to `$FR_OUT/fr-<rank>.json|.pkl`. Only when every
dump is written does the laggard enter the fourth all_reduce, so the job ends cleanly.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist


def load_batch(t: torch.Tensor) -> torch.Tensor:
    return t * 2  # the laggard "is here" while the others wait


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    out = Path(os.environ["FR_OUT"])
    laggard = int(os.environ.get("FR_LAGGARD", "2"))
    t = torch.ones(4)
    for _ in range(3):
        dist.all_reduce(t)
    sub = dist.new_group(list(range(world)))
    pending = []
    if rank != laggard:
        pending.append(dist.all_reduce(t, async_op=True))
    if os.environ.get("FR_MISMATCH") == "1" and rank < 2:
        pending.append(dist.broadcast(torch.ones(2 + rank), 0, group=sub, async_op=True))
    c10d: Any = torch._C._distributed_c10d  # the dump functions have no type stubs
    for suffix, data in (("json", c10d._dump_fr_trace_json()), ("pkl", c10d._dump_fr_trace())):
        tmp = out / f".fr-{rank}.{suffix}"
        tmp.write_bytes(data if isinstance(data, bytes) else str(data).encode())
        tmp.rename(out / f"fr-{rank}.{suffix}")
    if rank == laggard:
        deadline = time.monotonic() + 60
        while len(list(out.glob("fr-*.pkl"))) < world and time.monotonic() < deadline:
            time.sleep(0.05)
        dist.all_reduce(load_batch(t))
    for work in pending[:1]:
        work.wait()
    # A mismatched broadcast never completes: leave without tearing the group down.
    os._exit(0)


if __name__ == "__main__":
    main()
