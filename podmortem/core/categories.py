"""The root-cause categories, described once: everything podmortem says about a category lives here.

A category answers "why did the root pod fail" at the level an owner acts on. Each entry carries its
human name, whether a plain retry is expected to help (rules may override it per failure), the advice
the verdict gives, and the reason written into the job's `PodmortemRootCause` condition. The engine,
the rules, the report, the Kubernetes publishers and the metrics all read this table, so adding a
category is one entry here (and the `Category` literal below, which keeps mypy exhaustive).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Category = Literal[
    "user_code",
    "gpu_oom",
    "host_oom",
    "hardware",
    "network",
    "hang",
    "preemption",
    "node_lost",
    "crash",
    "infra",
]


@dataclass(frozen=True)
class CategoryInfo:
    name: Category
    title: str  # a few words for people (report, dashboard legends)
    retryable: bool  # is a plain retry expected to succeed?
    advice: str  # what to do, one or two sentences
    reason: str  # CamelCase condition reason (^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$)


_ALL = (
    CategoryInfo(
        "user_code",
        "bug in the training code, data or config",
        False,
        "Fix the training code, its input data or its configuration; a retry as is will fail the same way.",
        "UserCode",
    ),
    CategoryInfo(
        "gpu_oom",
        "GPU out of memory",
        False,
        "Reduce the per-GPU memory (batch size, sequence length, activation checkpointing); "
        "a retry as is will fail the same way.",
        "GpuOom",
    ),
    CategoryInfo(
        "host_oom",
        "host (container) out of memory",
        False,
        "Raise the container memory limit or cut host memory use (DataLoader workers, prefetch, "
        "pinned buffers); a retry as is will fail the same way.",
        "HostOom",
    ),
    CategoryInfo(
        "hardware",
        "GPU or host hardware fault",
        True,
        "A device or driver fault: cordon the node and have it checked; the job can be retried elsewhere.",
        "Hardware",
    ),
    CategoryInfo(
        "network",
        "interconnect / network failure",
        True,
        "An interconnect failure (NCCL/IB/NIC): check the node's network; a retry is likely to succeed.",
        "Network",
    ),
    CategoryInfo(
        "hang",
        "a rank stopped making progress",
        True,
        "This rank stopped making progress and its peers timed out; retry, and if it recurs take stack "
        "dumps (py-spy dump) of that rank before the collective timeout.",
        "Hang",
    ),
    CategoryInfo(
        "preemption",
        "preempted or evicted",
        True,
        "The pod was preempted or evicted from outside; retry (consider a PriorityClass or a PodDisruptionBudget).",
        "Preemption",
    ),
    CategoryInfo(
        "node_lost",
        "node lost",
        True,
        "The node stopped reporting; retry on other nodes and check the node's health.",
        "NodeLost",
    ),
    CategoryInfo(
        "crash",
        "native crash (signal)",
        False,
        "A native crash of the training process; read the pod's log for the faulting library "
        "(a retry as is will likely crash again).",
        "Crash",
    ),
    CategoryInfo(
        "infra",
        "environment: storage, mounts, drivers, permissions",
        True,
        "The environment is at fault (mount, file, permission, storage, scheduling); fix it, then retry.",
        "Infra",
    ),
)

REGISTRY: dict[Category, CategoryInfo] = {c.name: c for c in _ALL}
CATEGORIES: tuple[Category, ...] = tuple(REGISTRY)
# Retryable by category (the default; a rule may override it for one failure).
RETRYABLE: dict[Category, bool] = {c.name: c.retryable for c in _ALL}
ADVICE: dict[Category, str] = {c.name: c.advice for c in _ALL}
NO_FAILURE_REASON = "NoFailure"


def condition_reason(category: str | None) -> str:
    """The job condition's reason for a verdict's category ('NoFailure' when nothing failed)."""
    if not category:
        return NO_FAILURE_REASON
    info = REGISTRY.get(category)  # type: ignore[call-overload]
    return info.reason if info is not None else "Unknown"
