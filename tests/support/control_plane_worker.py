"""A training worker that cooperates with podmortem's capture, then stops in user code (run in tests).

It runs under torch's `worker_main()` (so `TORCH_WORKER_SERVER_SOCKET` makes it serve the control plane),
joins a one-rank gloo group (`MASTER_ADDR`/`MASTER_PORT`, `RANK`, `WORLD_SIZE` from the environment),
completes `CP_COLLECTIVES` all_reduces (default 2), waits until its Flight Recorder has recorded them as
completed, prints "ready" and sleeps in `stuck_in_user_code` until killed.
"""

from __future__ import annotations

import json
import os
import time

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _dump_fr_trace_json  # type: ignore[attr-defined]  # untyped in the stubs
from torch.distributed.elastic.control_plane import worker_main


def stuck_in_user_code() -> None:
    while True:
        time.sleep(3600)


def recorded_completed(n: int) -> None:
    """Wait until the Flight Recorder shows collective `n` completed: gloo's work marks its entry completed on
    gloo's own thread, which may come after `all_reduce` has returned to this one."""
    while True:
        status = json.loads(_dump_fr_trace_json())["pg_status"]
        if any(int(s["last_completed_collective"]) >= n for s in status.values()):
            return
        time.sleep(0.01)


def main() -> None:
    dist.init_process_group("gloo")
    t = torch.ones(4)
    n = int(os.environ.get("CP_COLLECTIVES", "2"))
    for _ in range(n):
        dist.all_reduce(t)
    if n:
        recorded_completed(n)
    print("ready", flush=True)
    stuck_in_user_code()


if __name__ == "__main__":
    with worker_main():  # type: ignore[union-attr]  # torch types its `record` wrapper as maybe None
        main()
