"""The faults a local run can inject — named once, for the CLI, the workload, the harness and the demo.

Each fault says what the failing pod does (the demo prints it) and the verdict podmortem must give for
it (the ground truth the e2e tests and `bench/fault_to_verdict.py` compare with). Importing this module
costs nothing: the `podmortem` CLI reads the names for `demo --fault` without loading the harness.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Fault:
    text: str  # what the failing pod does, completing "pod X (node rank N) ..."
    category: str  # the root-cause category the verdict must name
    retryable: bool  # and whether it must call the failure retryable


FAULTS: dict[str, Fault] = {
    "exception": Fault("raises ValueError in its training step", "user_code", False),
    "oom": Fault("raises torch.OutOfMemoryError (CUDA out of memory)", "gpu_oom", False),
    "sigkill": Fault("is OOM-killed: the container's processes get SIGKILL (exit 137, OOMKilled)", "host_oom", False),
    "segfault": Fault("segfaults in native code (SIGSEGV)", "crash", False),
    "hang": Fault("blocks forever in load_batch; its peers hit the collective timeout", "hang", True),
    "dataloader": Fault(
        "waits forever for its DataLoader worker, which blocks fetching a sample; its peers time out", "hang", True
    ),
    "desync": Fault("skips one gradient all_reduce; its collectives no longer match its peers'", "user_code", False),
    "preempt": Fault("is preempted by the scheduler (DisruptionTarget, SIGTERM)", "preemption", True),
    "multi": Fault("raises ValueError; a second pod independently raises KeyError ~1 s later", "user_code", False),
    "skew": Fault("raises ValueError while every other pod's clock runs 6 s behind", "user_code", False),
}

# The ground truth per fault, as (category, retryable).
EXPECTED_CATEGORY: dict[str, tuple[str, bool]] = {name: (f.category, f.retryable) for name, f in FAULTS.items()}
