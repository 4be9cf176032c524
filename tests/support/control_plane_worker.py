"""A training worker that cooperates with podmortem's capture, then stops in user code (run in tests).

It runs under torch's `worker_main()` (so `TORCH_WORKER_SERVER_SOCKET` makes it serve the control plane),
joins a one-rank gloo group (`MASTER_ADDR`/`MASTER_PORT`, `RANK`, `WORLD_SIZE` from the environment),
completes `CP_COLLECTIVES` all_reduces (default 2), prints "ready" and sleeps in `stuck_in_user_code` until
killed.
"""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist
from torch.distributed.elastic.control_plane import worker_main


def stuck_in_user_code() -> None:
    while True:
        time.sleep(3600)


def main() -> None:
    dist.init_process_group("gloo")
    t = torch.ones(4)
    for _ in range(int(os.environ.get("CP_COLLECTIVES", "2"))):
        dist.all_reduce(t)
    print("ready", flush=True)
    stuck_in_user_code()


if __name__ == "__main__":
    with worker_main():  # type: ignore[union-attr]  # torch types its `record` wrapper as maybe None
        main()
