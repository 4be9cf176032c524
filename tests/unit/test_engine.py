"""The decision engine on small hand-made incidents, one failure family per test.

Members are built directly (no bundle files) so that each test states exactly the evidence it gives
the engine — including partial evidence, as the aggregator sees it before every member has reported.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from podmortem.core.assess import TIE_SECONDS, assess
from podmortem.core.categories import CATEGORIES
from podmortem.core.engine import decide
from podmortem.core.errorfile import exception_type_of
from podmortem.core.logtail import parse_log
from podmortem.core.model import Condition, ErrorRecord, Incident, JobRef, Member, Termination, Verdict
from podmortem.core.rules import load_rules
from podmortem.offline import report

T0 = 1_800_000_000.0  # a whole second
JOB = JobRef("ns", "job", "PyTorchJob")

GLOO_CLOSED = (
    "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
    "[{ip}]:4455. This is typically caused by a remote worker crashing."
)
GLOO_TIMEOUT = (
    "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting "
    "{ms}ms for recv operation to complete"
)
SIGTERM = "SignalException: Process 4242 got signal: 15"


def member(
    pod: str,
    *,
    rank: int | None = None,
    ip: str = "",
    msg: str | None = None,
    ts: float | None = None,
    exit_code: int | None = None,
    signal: int | None = None,
    reason: str = "Error",
    finished: float | None = None,
    log: str = "",
    conditions: tuple[Condition, ...] = (),
    phase: str = "",
    phase_reason: str = "",
    running: bool = False,
    offset: float | None = None,
    observed: float | None = None,
    node: str = "",
) -> Member:
    error = None
    if msg is not None:
        error = ErrorRecord(
            message=msg, exception_type=exception_type_of(msg), timestamp=int(ts) if ts is not None else None
        )
    term = None
    if exit_code is not None:
        term = Termination(exit_code=exit_code, signal=signal, reason=reason, finished_at=finished)
    return Member(
        pod=pod,
        rank=rank,
        pod_ip=ip,
        node=node or f"node-{pod}",
        error=error,
        termination=term,
        conditions=conditions,
        phase=phase or ("Failed" if exit_code else ""),
        phase_reason=phase_reason,
        running=running,
        log_tail=log,
        clock_offset=offset,
        error_observed_at=observed,
    )


def incident(*members: Member, world_size: int | None = None) -> Incident:
    return Incident(job=JOB, world_size=world_size or len(members), members=members)


def check(v: Verdict, pod: str | None, category: str | None, retryable: bool | None) -> None:
    assert (v.pod, v.category, v.retryable) == (pod, category, retryable), (v.summary, v.evidence)
    assert v.category is None or v.category in CATEGORIES
    assert 0.0 <= v.confidence <= 1.0


def cascade(root: Member, n: int = 4, start: float = T0, ip_of_root: str = "10.0.0.1") -> tuple[Member, ...]:
    """The root and n-1 peers that die of it: two name it, one is torn down by the cleanup."""
    peers: list[Member] = []
    for i in range(1, n):
        pod = f"w-{i}"
        if i == n - 1:
            peers.append(member(pod, rank=i, ip=f"10.0.0.{i + 1}", msg=SIGTERM, ts=start + 2, exit_code=1))
        else:
            addr = ip_of_root if i % 2 else "127.0.0.1"
            peers.append(
                member(
                    pod,
                    rank=i,
                    ip=f"10.0.0.{i + 1}",
                    msg=GLOO_CLOSED.format(ip=addr),
                    ts=start,
                    exit_code=143,
                    signal=15,
                )
            )
    return (root, *peers)


# --- primary failures of each family --------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "category", "retryable"),
    [
        ("RuntimeError: CUDA error: uncorrectable ECC error encountered", "hardware", True),
        ("RuntimeError: CUDA error: an illegal memory access was encountered", "hardware", True),
        ("RuntimeError: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.", "hardware", True),
        (
            "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1333, unhandled system error "
            "(run with NCCL_DEBUG=INFO for details), NCCL version 2.18.1",
            "network",
            True,
        ),
        ("FileNotFoundError: [Errno 2] No such file or directory: '/mnt/data/train-00017.parquet'", "infra", True),
        ("OSError: [Errno 28] No space left on device: '/ckpt/step-900'", "infra", True),
        ("ValueError: loss is nan at step 812", "user_code", False),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB.", "gpu_oom", False),
        ("RuntimeError: DataLoader worker (pid 311) is killed by signal: Killed. ", "host_oom", False),
    ],
)
def test_root_is_the_member_with_its_own_failure(message: str, category: str, retryable: bool) -> None:
    # The root wrote its file a second *after* two of its victims (same-second races and skew are normal).
    root = member("w-0", rank=0, ip="10.0.0.1", msg=message, ts=T0 + 1, exit_code=1)
    v = decide(incident(*cascade(root)))
    check(v, "w-0", category, retryable)
    assert v.rank == 0 and v.node == "node-w-0"
    assert {s.pod for s in v.secondary} == {"w-1", "w-2", "w-3"}
    assert v.summary.count("\n") <= 1 and "w-0" in v.summary
    assert v.message and v.rule


def test_secondaries_say_why() -> None:
    root = member("w-0", rank=0, ip="10.0.0.1", msg="KeyError: 'lr'", ts=T0, exit_code=1)
    v = decide(incident(*cascade(root)))
    why = {s.pod: s.reason for s in v.secondary}
    assert "connection closed by peer" in why["w-1"] and "10.0.0.1 is w-0" in why["w-1"]
    assert "torn down" in why["w-3"]
    assert v.exception_type == "KeyError"


def test_sigterm_teardown_is_never_the_root_when_someone_failed() -> None:
    root = member("w-2", rank=2, msg="IndexError: Target 9 is out of bounds.", ts=T0 + 3, exit_code=1)
    torn = [member(f"w-{i}", rank=i, msg=SIGTERM, ts=T0, exit_code=1) for i in (0, 1)]
    v = decide(incident(*torn, root, member("w-3", rank=3, exit_code=143, signal=15, finished=T0)))
    check(v, "w-2", "user_code", False)


def test_oomkilled_container_without_error_file() -> None:
    root = member("w-1", rank=1, ip="10.0.0.2", exit_code=137, signal=9, reason="OOMKilled", finished=T0 + 1)
    peer = member("w-0", rank=0, msg=GLOO_CLOSED.format(ip="10.0.0.2"), ts=T0, exit_code=1)
    v = decide(incident(peer, root))
    check(v, "w-1", "host_oom", False)
    assert v.rule == "k8s.oomkilled"


def test_oomkilled_overrides_a_secondary_error_file() -> None:
    # One worker of the pod was OOM-killed; its sibling saw the peer go and its file is the one copied.
    root = member("w-1", rank=1, msg=GLOO_CLOSED.format(ip="127.0.0.1"), ts=T0, exit_code=1, reason="OOMKilled")
    peer = member("w-0", rank=0, msg=GLOO_CLOSED.format(ip="127.0.0.1"), ts=T0, exit_code=1)
    check(decide(incident(peer, root)), "w-1", "host_oom", False)


@pytest.mark.parametrize("code", [139, 134])
def test_native_crash_exit_code(code: int) -> None:
    root = member("w-0", rank=0, exit_code=code, signal=code - 128, finished=T0 + 2)
    v = decide(incident(*cascade(root)))
    check(v, "w-0", "crash", False)


def test_a_sigbus_is_the_environment_not_a_native_crash() -> None:
    """SIGBUS is a mapped page with no backing (a full /dev/shm, a mapped file gone): infra, retryable —
    whether the container itself died of it (exit 135) or torchrun saw a worker die of it (exitcode: -7)."""
    root = member("w-0", rank=0, exit_code=135, signal=7, finished=T0 + 2)
    check(decide(incident(*cascade(root))), "w-0", "infra", True)
    log = "E1124 10:00:00.100000 77 api.py:900] failed (exitcode: -7) local_rank: 1 (pid: 78) of binary: python\n"
    f = assess(member("w-1", rank=1, exit_code=1, finished=T0, log=log))
    assert (f.role, f.category) == ("primary", "infra")


def test_exit_code_128_is_a_container_that_could_not_start() -> None:
    """The kubelet reports 128 when the runtime could not start the container (a mount, the GPU hook)."""
    f = assess(member("w-0", rank=0, exit_code=128, finished=T0))
    assert (f.role, f.category, f.rule.is_retryable if f.rule else None) == ("primary", "infra", True)


SEGV_LOG = """\
[rank1] step 10 loss 1.2 acc 0.5 (0.2 s/step)
Fatal Python error: Segmentation fault
E1121 14:58:15.596000 21520 site-packages/torch/distributed/elastic/multiprocessing/api.py:1002] failed \
(exitcode: -11) local_rank: 0 (pid: 21525) of binary: /usr/bin/python3
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
Root Cause (first observed failure):
[0]:
  time      : 2026-11-21_14:58:15
  host      : w-1.job.ns.svc.cluster.local
  rank      : 1 (local_rank: 0)
  exitcode  : -11 (pid: 21525)  (SIGSEGV)
  error_file: <N/A>
  traceback : Signal 11 (SIGSEGV) received by PID 21525
============================================================
"""


def test_segfault_found_in_the_log_tail() -> None:
    # The agent exits 1 and writes no error file: only torch's failure summary in the log says SIGSEGV.
    t = 1795273095.0  # 2026-11-21T14:58:15Z
    root = member("w-1", rank=1, ip="10.0.0.2", exit_code=1, finished=t + 1, log=SEGV_LOG)
    peer = member(
        "w-0",
        rank=0,
        msg="RuntimeError: [gloo/transport/tcp/pair.cc:537] Read error [10.0.0.2]:50065: Connection reset by peer.",
        ts=t,
        exit_code=1,
    )
    v = decide(incident(peer, root))
    check(v, "w-1", "crash", False)
    assert v.global_rank == 1
    assert v.failed_at == pytest.approx(1795273095.1, abs=0.5)  # the sub-second glog line


# torchrun's summary when two workers of one pod failed in the same second and the agent polled the
# victim first (seen in CI: torch's 2.13 agent): the root cause it names, and the error file it copies,
# are the victim's "Connection closed by peer"; the worker that raised is under "Failures:".
TWO_WORKERS_LOG = """\
[rank3]: ValueError: learning rate must be positive, got -0.0031 at step 8
[rank2]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by \
peer [10.0.0.1]:61615. This is typically caused by a remote worker crashing.
E1124 16:25:17.635000 25686 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) \
local_rank: 0 (pid: 25688) of binary: /usr/bin/python
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-24_16:25:16
  host      : localhost
  rank      : 3 (local_rank: 1)
  exitcode  : 1 (pid: 25690)
  error_file: /tmp/torchelastic_fr71xj2k/none_jly7gfkm/attempt_0/1/error.json
  traceback : Traceback (most recent call last):
    File "/app/train.py", line 145, in inject
      raise ValueError(f"learning rate must be positive, got -0.0031 at step {step}")
  ValueError: learning rate must be positive, got -0.0031 at step 8
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-24_16:25:16
  host      : localhost
  rank      : 2 (local_rank: 0)
  exitcode  : 1 (pid: 25688)
  error_file: /tmp/torchelastic_fr71xj2k/none_jly7gfkm/attempt_0/0/error.json
  traceback : Traceback (most recent call last):
    File "/app/train.py", line 202, in collective
      pg.allreduce([t]).wait()
  RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer \
[10.0.0.1]:61615. This is typically caused by a remote worker crashing.
============================================================
"""


def test_worker_that_raised_wins_over_the_sibling_torch_listed_first() -> None:
    t = 1795537516.0  # 2026-11-24T16:25:16Z
    gloo = GLOO_CLOSED.format(ip="10.0.0.2")
    root = member(
        "w-1", rank=1, ip="10.0.0.2", msg=gloo.replace("10.0.0.2", "10.0.0.1"), ts=t, exit_code=1, log=TWO_WORKERS_LOG
    )
    peer = member("w-0", rank=0, ip="10.0.0.1", msg=gloo, ts=t, exit_code=1)
    v = decide(incident(peer, root))
    check(v, "w-1", "user_code", False)
    assert (v.exception_type, v.global_rank) == ("ValueError", 3)
    # The premise: the same pod without the summary's other failures is only an echo.
    only_root_cause = TWO_WORKERS_LOG.replace(
        TWO_WORKERS_LOG[TWO_WORKERS_LOG.index("Failures:") : TWO_WORKERS_LOG.index("Root Cause")],
        "Failures:\n  <NO_OTHER_FAILURES>\n------\n",
    )
    only_root_cause = only_root_cause.replace(
        "[rank3]: ValueError: learning rate must be positive, got -0.0031 at step 8\n", ""
    )
    assert assess(dataclasses.replace(root, log_tail=only_root_cause)).role == "secondary"


def test_sys_exit_without_exception_from_the_log() -> None:
    log = (
        SEGV_LOG.replace("-11 (pid: 21525)  (SIGSEGV)", "2 (pid: 21525)")
        .replace("Signal 11 (SIGSEGV) received by PID 21525", "To enable traceback see: https://pytorch.org/docs/")
        .replace("Fatal Python error: Segmentation fault\n", "")
        .replace("(exitcode: -11)", "(exitcode: 2)")
    )
    assert "Segmentation" not in log and "SIGSEGV" not in log
    root = member("w-1", rank=1, exit_code=1, finished=T0, log=log)
    peers = [member(f"w-{i}", rank=i, msg=GLOO_CLOSED.format(ip="127.0.0.1"), ts=T0 - 1, exit_code=1) for i in (0, 2)]
    v = decide(incident(peers[0], root, peers[1]))
    check(v, "w-1", "user_code", False)
    assert v.rule == "exit.code-2"


def test_exit_1_without_any_message_is_a_weak_root() -> None:
    root = member("w-3", rank=3, exit_code=1, finished=T0 + 1)
    peers = [member(f"w-{i}", rank=i, msg=GLOO_CLOSED.format(ip="127.0.0.1"), ts=T0, exit_code=1) for i in range(3)]
    v = decide(incident(*peers, root))
    check(v, "w-3", "user_code", False)
    assert v.confidence <= 0.7


# --- preemption, node lost, hang ---------------------------------------------------------------------


def test_preemption_by_disruption_target() -> None:
    cond = Condition("DisruptionTarget", "True", "PreemptionByScheduler", "preempting", last_transition_time=T0)
    root = member("w-2", rank=2, ip="10.0.0.3", msg=SIGTERM, ts=T0, exit_code=1, conditions=(cond,))
    others = [
        member("w-0", rank=0, msg=SIGTERM, ts=T0 + 4, exit_code=1),  # cleanup SIGTERM later
        member("w-1", rank=1, msg=GLOO_CLOSED.format(ip="10.0.0.3"), ts=T0 + 1, exit_code=143, signal=15),
    ]
    v = decide(incident(*others, root))
    check(v, "w-2", "preemption", True)
    assert v.rule == "k8s.preempted"


@pytest.mark.parametrize(
    "lost",
    [
        member("w-1", rank=1, exit_code=137, reason="ContainerStatusUnknown"),
        member("w-1", rank=1, phase="Unknown", phase_reason="NodeLost", running=True),
        member(
            "w-1",
            rank=1,
            exit_code=137,
            reason="Error",
            conditions=(
                Condition("DisruptionTarget", "True", "DeletionByTaintManager", "", last_transition_time=T0 + 60),
            ),
        ),
    ],
    ids=["container-status-unknown", "phase-unknown-nodelost", "deletion-by-taint-manager"],
)
def test_node_lost(lost: Member) -> None:
    peers = [member(f"w-{i}", rank=i, msg=GLOO_TIMEOUT.format(ms=12000), ts=T0 + 20, exit_code=1) for i in (0, 2, 3)]
    v = decide(incident(peers[0], lost, *peers[1:]))
    check(v, "w-1", "node_lost", True)
    assert v.failed_at == pytest.approx(T0 + 20 + 0.5 - 12, abs=1.0)  # when the peers began waiting


def test_hang_root_is_the_member_that_did_not_time_out() -> None:
    peers = [member(f"w-{i}", rank=i, msg=GLOO_TIMEOUT.format(ms=15000), ts=T0, exit_code=1) for i in range(5)]
    hung = member("w-5", rank=5, msg=SIGTERM, ts=T0 + 3, exit_code=1)  # torn down by the cleanup
    v = decide(incident(*peers, hung))
    check(v, "w-5", "hang", True)
    assert len(v.secondary) == 5 and all("timed out" in s.reason for s in v.secondary)


def test_hang_root_still_running() -> None:
    peers = [member(f"w-{i}", rank=i, msg=GLOO_TIMEOUT.format(ms=10000), ts=T0, exit_code=1) for i in (0, 1)]
    hung = member("w-2", rank=2, running=True, phase="Running")
    check(decide(incident(*peers, hung)), "w-2", "hang", True)


HANG_LOG_SILENT = """\
[2026-11-21 15:08:11,494][train][INFO] - rank 2: starting: world_size=4 local_rank=0
[2026-11-21 15:08:11,622][train][INFO] - rank 3: starting: world_size=4 local_rank=1
[2026-11-21 15:08:15,770][train][INFO] - rank 3: step 0 loss 1.3420
[2026-11-21 15:08:15,772][train][INFO] - rank 2: step 0 loss 1.3277
[rank2]: Traceback (most recent call last):
[rank2]:   File "/opt/app/train.py", line 310, in main
[rank2]: RuntimeError: [gloo/tcp/unbound_buffer.cc:78] Timed out waiting 10000ms for recv operation to complete
"""
HANG_LOG_BOTH = """\
[2026-11-21 15:08:16,770][train][INFO] - rank 1: step 0 loss 1.4583
[2026-11-21 15:08:16,771][train][INFO] - rank 0: step 0 loss 1.4024
[rank1]: RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:16522.
[rank0]: RuntimeError: [gloo/tcp/unbound_buffer.cc:129] Timed out waiting 10000ms for send operation to complete
"""


def test_hang_inside_a_pod_with_a_silent_rank() -> None:
    # Two workers per pod; rank 3 hangs, its sibling rank 2 times out, the other pod's ranks fail too.
    a = member("w-0", rank=0, msg=GLOO_CLOSED.format(ip="127.0.0.1"), ts=T0 + 1, exit_code=1, log=HANG_LOG_BOTH)
    b = member("w-1", rank=1, msg=GLOO_TIMEOUT.format(ms=10000), ts=T0, exit_code=1, log=HANG_LOG_SILENT)
    v = decide(incident(a, b))
    check(v, "w-1", "hang", True)
    assert any("rank(s) 3 never raised" in e for e in v.evidence)


def test_hang_without_a_visible_stuck_member_is_still_a_hang() -> None:
    # Without logs nobody stands out; the pod that waited first is the best guess, with low confidence.
    a = member("w-0", rank=0, msg=GLOO_CLOSED.format(ip="127.0.0.1"), ts=T0 + 1, exit_code=1)
    b = member("w-1", rank=1, msg=GLOO_TIMEOUT.format(ms=10000), ts=T0, exit_code=1)
    v = decide(incident(a, b))
    check(v, "w-1", "hang", True)
    assert v.confidence <= 0.35 and v.rule == "engine.hang-unlocated"


def test_network_error_among_watchdog_timeouts() -> None:
    watchdog = (
        "RuntimeError: [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=80, "
        "OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600013 milliseconds before timing out."
    )
    peers = [member(f"w-{i}", rank=i, msg=watchdog.format(r=i), ts=T0 + 600, exit_code=1) for i in (0, 2, 3)]
    remote = member(
        "w-1",
        rank=1,
        msg="torch.distributed.DistBackendError: NCCL error in: x.cpp:1, remote process "
        "exited or there was a network error\nncclRemoteError: socketProgress: Connection reset",
        ts=T0,
        exit_code=1,
    )
    check(decide(incident(peers[0], remote, *peers[1:])), "w-1", "network", True)


def test_slow_exception_handler_still_wins_over_earlier_timeouts() -> None:
    # The root spends 16 s in an emergency-checkpoint handler; its peers time out (10 s) and write first.
    root = member("w-1", rank=1, msg="KeyError: 'cosine_restarts'", ts=T0 + 16, exit_code=1)
    peers = [member(f"w-{i}", rank=i, msg=GLOO_TIMEOUT.format(ms=10000), ts=T0 + 10, exit_code=1) for i in (0, 2, 3)]
    v = decide(incident(peers[0], root, *peers[1:]))
    check(v, "w-1", "user_code", False)
    assert any("before it wrote its error" in e for e in v.evidence)


# --- ordering: clocks, sub-second times, ties -------------------------------------------------------------


def test_skewed_clocks_do_not_make_a_victim_the_root() -> None:
    # The victims' clocks run 8 s behind: their files look 7 s older than the root's.
    root = member("w-4", rank=4, ip="10.0.0.5", msg="ValueError: invalid literal for int()", ts=T0 + 8, exit_code=1)
    peers = [
        member(f"w-{i}", rank=i, msg=GLOO_CLOSED.format(ip="10.0.0.5"), ts=T0 + 1, exit_code=143, signal=15)
        for i in range(4)
    ]
    check(decide(incident(*peers, root)), "w-4", "user_code", False)


def test_two_independent_failures_earliest_wins() -> None:
    first = member("w-0", rank=0, msg="IndexError: Target 6 is out of bounds.", ts=T0, exit_code=1)
    second = member("w-1", rank=1, msg="ValueError: learning rate must be positive", ts=T0 + 2, exit_code=1)
    v = decide(incident(second, first))
    check(v, "w-0", "user_code", False)
    assert "also failed on its own" in {s.pod: s.reason for s in v.secondary}["w-1"]


def test_measured_clock_offsets_reorder_independent_failures() -> None:
    # On its own clock w-0 wrote first, but its clock is 5 s slow (measured): w-1 failed first.
    a = member("w-0", rank=0, msg="IndexError: boom", ts=T0, exit_code=1, offset=5.0)
    b = member("w-1", rank=1, msg="torch.OutOfMemoryError: CUDA out of memory.", ts=T0 + 2, exit_code=1, offset=0.0)
    check(decide(incident(a, b)), "w-1", "gpu_oom", False)
    # Without the measurement, the file timestamps decide.
    a2 = member("w-0", rank=0, msg="IndexError: boom", ts=T0, exit_code=1)
    b2 = member("w-1", rank=1, msg="torch.OutOfMemoryError: CUDA out of memory.", ts=T0 + 2, exit_code=1)
    check(decide(incident(a2, b2)), "w-0", "user_code", False)


def test_sub_second_observation_breaks_a_same_second_tie() -> None:
    a = member("w-0", rank=0, msg="IndexError: boom", ts=T0, exit_code=1, observed=T0 + 0.80)
    b = member("w-1", rank=1, msg="torch.OutOfMemoryError: CUDA out of memory.", ts=T0, exit_code=1, observed=T0 + 0.15)
    v = decide(incident(a, b))
    check(v, "w-1", "gpu_oom", False)
    assert v.confidence < 0.9  # 0.65 s apart: not a confident order


def test_weak_primary_needs_a_clear_margin() -> None:
    nccl = (
        "torch.distributed.DistBackendError: NCCL error in: x.cpp:1, remote process exited or there was a "
        "network error\nncclRemoteError: ..."
    )
    weak = member("w-0", rank=0, msg=nccl, ts=T0, exit_code=1)
    strong = member(
        "w-1", rank=1, msg="RuntimeError: CUDA error: an illegal memory access was encountered", ts=T0 + 1, exit_code=1
    )
    check(decide(incident(weak, strong)), "w-1", "hardware", True)
    early = member("w-0", rank=0, msg=nccl, ts=T0 - 30, exit_code=1)
    check(decide(incident(early, strong)), "w-0", "network", True)


# --- partial information (the aggregator before everyone reported) ---------------------------------------


def test_nothing_failed_is_a_clean_verdict() -> None:
    v = decide(incident(*(member(f"w-{i}", rank=i, exit_code=0, reason="Completed") for i in range(3))))
    check(v, None, None, None)
    assert "No failure" in v.summary and v.secondary == ()


def test_empty_and_pending_incidents() -> None:
    check(decide(Incident(job=JOB, world_size=4, members=())), None, None, None)
    v = decide(incident(member("w-0", running=True, phase="Running"), world_size=2))
    check(v, None, None, None)
    assert "yet" in v.summary


def test_only_a_termination_so_far() -> None:
    v = decide(
        incident(member("w-0", rank=0, exit_code=139, signal=11), member("w-1", rank=1, phase="Running", running=True))
    )
    check(v, "w-0", "crash", False)


def test_only_a_condition_so_far() -> None:
    cond = Condition("DisruptionTarget", "True", "EvictionByEvictionAPI", "", last_transition_time=T0)
    v = decide(incident(member("w-0", rank=0, conditions=(cond,)), member("w-1", rank=1)))
    check(v, "w-0", "preemption", True)


def test_only_an_error_record_so_far() -> None:
    v = decide(incident(member("w-0", msg="torch.OutOfMemoryError: CUDA out of memory."), member("w-1")))
    check(v, "w-0", "gpu_oom", False)


def test_only_victims_reported_blames_the_named_peer() -> None:
    peers = [member(f"w-{i}", rank=i, msg=GLOO_CLOSED.format(ip="10.0.0.9"), ts=T0, exit_code=1) for i in (0, 1)]
    silent = Member(pod="w-2", rank=2, pod_ip="10.0.0.9")
    v = decide(incident(*peers, silent))
    assert v.pod == "w-2" and v.category is None and v.confidence < 0.5


def test_only_victims_and_nobody_named() -> None:
    peers = [member(f"w-{i}", rank=i, msg=GLOO_CLOSED.format(ip="127.0.0.1"), ts=T0, exit_code=1) for i in (0, 1)]
    v = decide(incident(*peers, Member(pod="w-2", rank=2)))
    assert v.pod == "w-2" and v.category is None and v.confidence <= 0.2
    v2 = decide(incident(*peers, world_size=3))
    assert v2.pod in ("w-0", "w-1") and v2.category is None and v2.members_missing == 1


def test_sigterm_everywhere_is_an_outside_termination() -> None:
    first = member("w-1", rank=1, msg=SIGTERM, ts=T0, exit_code=1)
    later = member("w-0", rank=0, msg=SIGTERM, ts=T0 + 3, exit_code=1)
    v = decide(incident(later, first))
    check(v, "w-1", "preemption", True)
    assert v.confidence <= 0.5


def test_unreadable_error_file_falls_back_to_other_evidence() -> None:
    broken = Member(
        pod="w-0",
        rank=0,
        error=ErrorRecord(message="", parse_error="not valid JSON"),
        termination=Termination(exit_code=139, signal=11),
    )
    check(decide(incident(broken, member("w-1", rank=1, exit_code=143, signal=15))), "w-0", "crash", False)


# --- rules files -------------------------------------------------------------------------------------


def test_operator_rule_changes_the_verdict(tmp_path: Path) -> None:
    root = member("w-0", rank=0, ip="10.0.0.1", msg="ValueError: tokenizer shard checksum mismatch", ts=T0, exit_code=1)
    inc = incident(*cascade(root))
    check(decide(inc), "w-0", "user_code", False)
    path = tmp_path / "rules.json"
    path.write_text(
        json.dumps(
            {
                "rules": [
                    {
                        "id": "site.checksum",
                        "message": "checksum mismatch",
                        "category": "infra",
                        "advice": "Re-sync the tokenizer cache.",
                    }
                ]
            }
        )
    )
    v = decide(inc, load_rules(path))
    check(v, "w-0", "infra", True)
    assert v.rule == "site.checksum" and "Re-sync the tokenizer cache." in v.summary


def test_operator_can_declare_a_message_secondary(tmp_path: Path) -> None:
    # Seconds apart: within the timing uncertainty a program error would go before the carrier class anyway.
    wrapper = member("w-0", rank=0, msg="TrainerAbort: collective failed, aborting", ts=T0, exit_code=1)
    real = member("w-1", rank=1, msg="IndexError: shard 12 out of range", ts=T0 + 5, exit_code=1)
    check(decide(incident(wrapper, real)), "w-0", "user_code", False)
    path = tmp_path / "rules.json"
    path.write_text(
        json.dumps({"rules": [{"id": "site.abort", "exception_type": "TrainerAbort", "secondary": "peer"}]})
    )
    check(decide(incident(wrapper, real), load_rules(path)), "w-1", "user_code", False)


# --- logs, purity, speed -----------------------------------------------------------------------------------


def test_parse_log_reads_torch_summary_and_glog() -> None:
    facts = parse_log(SEGV_LOG, 1795273095.0)
    assert facts.summary_rank == 1 and facts.summary_exitcode == -11 and not facts.summary_has_error_file
    assert facts.first_failure_at == pytest.approx(1795273095.596)
    assert facts.summary_time == 1795273095.0
    assert 1 in facts.ranks_seen
    assert parse_log(SEGV_LOG, None).first_failure_at is None  # no year to place glog lines


def test_assess_is_deterministic_and_pure() -> None:
    root = member("w-0", rank=0, msg="KeyError: 'x'", ts=T0, exit_code=1)
    inc = incident(*cascade(root))
    assert decide(inc) == decide(inc)
    assert assess(root).role == "primary"


def _cascade(n: int) -> Incident:
    members = [
        member(
            f"w-{i}",
            rank=i,
            ip=f"10.{i // 250}.{i % 250}.1",
            msg=GLOO_CLOSED.format(ip="10.0.0.1"),
            ts=T0 + (i % 3),
            exit_code=143,
            signal=15,
        )
        for i in range(1, n)
    ]
    root = member("w-0", rank=0, ip="10.0.0.1", msg="KeyError: 'x'", ts=T0 + 2, exit_code=1)
    return incident(root, *members)


def test_ten_thousand_members_are_decided() -> None:
    v = decide(_cascade(10_000))
    check(v, "w-0", "user_code", False)
    assert len(v.secondary) == 10_000 - 1


def _python_calls(inc: Incident) -> int:
    calls = 0

    def count(frame: object, event: str, arg: object) -> None:
        nonlocal calls
        if event in ("call", "c_call"):
            calls += 1

    sys.setprofile(count)
    try:
        decide(inc)
    finally:
        sys.setprofile(None)
    return calls


def test_the_work_grows_linearly_with_members() -> None:
    # Deterministic (function calls, not seconds; bench/engine_speed.py reports the time): four times the
    # members must cost about four times the calls, where a quadratic step would cost sixteen.
    small, large = _python_calls(_cascade(500)), _python_calls(_cascade(2_000))
    assert large / small < 6, (small, large)


def test_tie_window_constant_is_sane() -> None:
    assert 0.5 <= TIE_SECONDS <= 2.0


@pytest.mark.timeout(10)  # a hang guard, not a timing goal: before the fix this input took ~40 s
def test_a_hostile_log_line_cannot_stall_the_engine() -> None:
    # 120 KB of the shape that made the peer-address pattern backtrack quadratically ("[a:a:a:...").
    line = "RuntimeError: Connection closed by peer [" + "a:" * 60_000
    member = Member(
        pod="w-0",
        error=ErrorRecord(message=line, exception_type="RuntimeError"),
        termination=Termination(exit_code=1, finished_at=T0),
        log_tail=line,
    )
    v = decide(Incident(JobRef("ml", "j"), 1, (member,)))
    assert v.pod == "w-0"


def test_a_timeout_whose_full_log_shows_its_own_failure_is_decided_not_a_crash() -> None:
    # Found by bench/fuzz.py (bundle target): the only member that failed timed out in gloo by its error
    # file, and reading its log in full (to look for a hung rank) turned it into a primary failure — no
    # timeout was left for the hang attribution, and min() of nothing raised ValueError.
    gloo_timeout = (
        "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] "
        "Timed out waiting 12000ms for recv operation to complete"
    )
    log = "\n".join(
        [
            "Traceback (most recent call last):",
            '  File "/opt/app/train.py", line 310, in main',
            "ValueError: bad label 7 in batch 1234",
            "E1121 14:59:20.123456 140 torch/distributed/elastic/multiprocessing/api.py:832] failed (exitcode: 1)",
            "  " + gloo_timeout,
        ]
    )
    member = Member(
        pod="w-0",
        rank=0,
        error=ErrorRecord(message=gloo_timeout, exception_type="RuntimeError", timestamp=int(T0)),
        termination=Termination(exit_code=1, reason="Error", finished_at=T0 + 1),
        log_tail=log,
    )
    assert assess(member).secondary == "timeout" and assess(member, full_log=True).role == "primary"
    alone = decide(Incident(JobRef("ml", "j"), 1, (member,)))  # raised ValueError
    assert (alone.pod, alone.category) == ("w-0", "user_code")
    # A peer still running is no hung rank to blame once the only member that waited failed on its own.
    v = decide(Incident(JobRef("ml", "j"), 2, (member, Member(pod="w-1", rank=1, running=True))))
    assert (v.pod, v.category) == ("w-0", "user_code")


def test_an_uncertain_verdict_says_likely_and_names_the_runner_up() -> None:
    # Two own failures 0.3 s apart on unmeasured clocks: the order is a guess, and the verdict says so.
    def failed(pod: str, rank: int, message: str, end: float) -> Member:
        return Member(
            pod=pod,
            rank=rank,
            error=ErrorRecord(message=message, exception_type=message.split(":")[0], timestamp=int(T0)),
            termination=Termination(exit_code=1, finished_at=end),
            error_observed_at=end,
        )

    members = (failed("w-0", 0, "ValueError: bad label", T0 + 0.4), failed("w-1", 1, "KeyError: 'x'", T0 + 0.7))
    v = decide(Incident(JobRef("ml", "j"), 2, members))
    assert v.uncertain and v.confidence < 0.7
    assert v.runner_up_pod == ("w-1" if v.pod == "w-0" else "w-0") and v.runner_up_category == "user_code"
    assert v.summary.startswith("Likely") and f"Runner-up: {v.runner_up_pod}" in v.summary
    text = report.render(Incident(JobRef("ml", "j"), 2, members), v)
    assert "LOW: read as likely" in text and f"runner-up    {v.runner_up_pod}" in text


def test_a_clear_verdict_is_not_hedged() -> None:
    member = Member(
        pod="w-0",
        error=ErrorRecord(message="ValueError: bad label", exception_type="ValueError", timestamp=int(T0)),
        termination=Termination(exit_code=1, finished_at=T0 + 1),
    )
    v = decide(Incident(JobRef("ml", "j"), 1, (member,)))
    assert not v.uncertain and not v.summary.startswith("Likely")


# --- launchers' own words (session 5: failures from outside our harness) -----------------------------


def test_a_launcher_stopping_its_workers_is_a_teardown_unless_one_of_its_own_failed() -> None:
    """torchrun's agent, DeepSpeed's launcher, mp.spawn and srun all log that they stop workers; on a pod
    that is only being torn down that is an echo, not a failure of its own (exit 1 alone would be)."""
    teardowns = [
        "W1124 18:02:11.120000 4410 torch/distributed/elastic/multiprocessing/api.py:908] "
        "Sending process 4411 closing signal SIGTERM",
        "WARNING: torch.distributed.elastic.agent.server.api:Received 15 death signal, shutting down workers",
        "[2026-11-24 18:02:11,148] [INFO] [launch.py:131:sigkill_handler] Killing subprocess 250621",
        "W1124 18:02:11.168000 1315 torch/multiprocessing/spawn.py:145] Terminating process 25364 via signal SIGTERM",
        "srun: error: node-7: task 3: Terminated",
    ]
    for i, line in enumerate(teardowns):
        f = assess(member(f"w-{i}", rank=i, exit_code=1, finished=T0, log=line))
        assert (f.role, f.secondary) == ("secondary", "teardown"), line
    # The root: exit 1 and nothing else, a second *later* than every victim.
    victims = [member(f"w-{i}", rank=i, exit_code=1, finished=T0, log=line) for i, line in enumerate(teardowns)]
    root = member("w-9", rank=9, exit_code=1, finished=T0 + 1)
    check(decide(incident(*victims, root)), "w-9", "user_code", False)
    # The agent stopping the siblings of a worker of its own that exited 1: that exit is the failure.
    own = (
        teardowns[0]
        + "\nE1124 18:02:11.300000 4410 torch/distributed/elastic/multiprocessing/api.py:882] "
        + ("failed (exitcode: 1) local_rank: 0 (pid: 4412) of binary: /usr/bin/python")
    )
    assert assess(member("w-0", rank=0, exit_code=1, finished=T0, log=own)).role == "primary"


@pytest.mark.parametrize(
    ("line", "code", "category"),
    [
        (
            "[ERROR] [launch.py:434:sigkill_handler] ['python', '-u', 'train.py'] exits with return code = -9",
            -9,
            "host_oom",
        ),
        (
            "subprocess.CalledProcessError: Command '['python', 'train.py']' died with <Signals.SIGSEGV: 11>.",
            -11,
            "crash",
        ),
        ("subprocess.CalledProcessError: Command 'python train.py' returned non-zero exit status -7.", -7, "infra"),
        (
            "torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with signal SIGKILL",
            -9,
            "host_oom",
        ),
    ],
)
def test_other_launchers_words_for_a_worker_killed_by_a_signal(line: str, code: int, category: str) -> None:
    assert parse_log(line, near=T0).agent_exitcode == code
    f = assess(member("w-0", rank=0, exit_code=1, finished=T0, log=line))
    assert (f.role, f.category) == ("primary", category)


def test_waiting_in_the_c10d_store_for_rank_0_is_an_echo() -> None:
    line = (
        "[rank2]: torch.distributed.DistBackendError: [2] is setting up NCCL communicator and retrieving "
        "ncclUniqueId from [0] via c10d key-value store by key '0', but store->get('0') got error: wait timeout "
        "after 1800000ms, keys: /default_pg/0//1//cuda//0"
    )
    f = assess(member("w-2", rank=2, exit_code=1, finished=T0, log=line))
    assert (f.role, f.secondary) == ("secondary", "store")
    f = assess(member("w-2", rank=2, msg=line.removeprefix("[rank2]: "), ts=T0, exit_code=1))
    assert (f.role, f.secondary) == ("secondary", "store")


def test_a_node_marked_dead_is_lost_even_where_preemption_is_named_as_a_possible_cause() -> None:
    dead = (
        "WARNING worker.py:1462 -- The node with node id: 8f20 and address: 10.0.3.9 has been marked dead because "
        "the detector has missed too many heartbeats from it. This can happen when a (1) raylet crashes "
        "unexpectedly (OOM, preempted node, etc.) (2) raylet has lagging heartbeats."
    )
    assert assess(member("w-0", rank=0, exit_code=1, finished=T0, log=dead)).category == "node_lost"
    # A scheduler's own statement still names the preemption, even with the node gone as well.
    slurm = "slurmstepd: error: *** STEP 41.0 ON node-7 CANCELLED AT 2026-11-24T18:02:11 DUE TO PREEMPTION ***\n"
    assert assess(member("w-0", rank=0, exit_code=1, finished=T0, log=slurm + dead)).category == "preemption"


@pytest.mark.parametrize(
    ("reason", "message", "category"),
    [
        (
            "TerminationByKubelet",
            "The node was low on resource: memory. Threshold quantity: 100Mi, available: 62Mi. Container "
            "pytorch was using 61Gi, request is 32Gi, has larger consumption of memory.",
            "host_oom",
        ),
        ("TerminationByKubelet", "The node was low on resource: ephemeral-storage. Threshold quantity: 10%.", "infra"),
        ("TerminationByKubelet", "", "preemption"),
        (
            "PreemptionByScheduler",
            "Kubernetes default scheduler: preempting to accommodate a higher priority pod",
            "preemption",
        ),
    ],
)
def test_a_node_pressure_eviction_names_the_resource_it_ran_short_of(reason: str, message: str, category: str) -> None:
    """The kubelet's DisruptionTarget message says which resource the node lacked: memory is the host running
    out of memory (not retryable as is), disk the storage; other disruptions stay preemptions."""
    at = T0 + 5
    evicted = member(
        "w-1",
        rank=1,
        exit_code=137,
        finished=at + 1,
        conditions=(Condition("DisruptionTarget", "True", reason, message, at),),
    )
    peers = [
        member(f"w-{i}", rank=i, msg=GLOO_CLOSED.format(ip="10.0.0.2"), ts=int(at) + 2, exit_code=1) for i in (0, 2)
    ]
    v = decide(incident(peers[0], evicted, peers[1]))
    assert (v.pod, v.category) == ("w-1", category), v.evidence


@pytest.mark.parametrize(
    "prefix",
    ["gpu004: ", "10.1.2.3: ", "trainer/0 [1]:", "[2026-01-02T03:04:05.123456Z] 0a1b2c3d || "],
)
def test_launcher_host_prefixes_are_unwrapped(prefix: str) -> None:
    """pdsh (DeepSpeed multi-node), TorchX and Determined prefix every line; the exception under the prefix
    is still the member's own failure, not a bare exit code 1."""
    tail = "\n".join(
        f"{prefix}{line}"
        for line in (
            "Traceback (most recent call last):",
            '  File "train.py", line 3, in <module>',
            "KeyError: 'labels'",
        )
    )
    facts = parse_log(tail, None)
    assert facts.loose_exceptions == ("KeyError: 'labels'",)
    f = assess(member("w0", exit_code=1, finished=T0, log=tail))
    assert f.role == "primary" and f.category == "user_code" and not f.weak


def test_an_exception_type_is_never_taken_for_a_host_prefix() -> None:
    facts = parse_log("torch.distributed.DistBackendError: NCCL error in: x.cpp:1, unhandled system error", None)
    assert facts.loose_exceptions and facts.loose_exceptions[0].startswith("torch.distributed.DistBackendError")


def test_a_shell_s_128_plus_n_exit_from_the_launcher_is_that_signal() -> None:
    """srun (and shell-wrapped workers) report a SIGKILLed task as exit code 137: the task was killed, as
    torchrun's 'exitcode: -9' says — not a plain exit code of the program."""
    facts = parse_log("srun: error: gpu-node-3: task 0: Exited with exit code 137\n", None)
    assert facts.agent_exitcode == -9
    f = assess(member("w0", exit_code=1, finished=T0, log="srun: error: gpu-node-3: task 0: Exited with exit code 137"))
    assert f.role == "primary" and f.category == "host_oom"
    assert parse_log("srun: error: gpu-node-3: task 1: Exited with exit code 2\n", None).agent_exitcode == 2


def _watchdog(rank: int, seq: int, op: str) -> str:
    return (
        f"[rank{rank}]:[E1125 02:00:00.000000000 ProcessGroupNCCL.cpp:600] [Rank {rank}] Watchdog caught collective "
        f"operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn=8, NumelOut=8, Timeout(ms)=600000) ran for "
        "600010 milliseconds before timing out."
    )


def test_a_pod_whose_own_ranks_timed_out_in_different_collectives_hosts_the_hang() -> None:
    """Every pod times out; on one, its two ranks wait in different collectives (another sequence number or
    kind): those ranks are out of step, so the rank that fell behind is there — not on a uniform pod."""
    uniform = "\n".join(_watchdog(r, 500, "ALLREDUCE") for r in (0, 1))
    split = "\n".join((_watchdog(2, 500, "ALLREDUCE"), _watchdog(3, 501, "BROADCAST")))
    members = (
        member("w-0", rank=0, exit_code=1, finished=T0, log=uniform),
        member("w-1", rank=1, exit_code=1, finished=T0 + 1, log=split),
        member(
            "w-2", rank=2, exit_code=1, finished=T0, log=uniform.replace("rank0", "rank4").replace("Rank 0", "Rank 4")
        ),
    )
    v = decide(incident(*members))
    check(v, "w-1", "hang", True)
    # The same collective everywhere says nothing about where the stuck rank is.
    assert parse_log(uniform, None).desync == ()
    assert [r for r, _, _ in parse_log(split, None).desync] == [2, 3]


def test_a_stuck_watchdog_of_its_own_is_a_hang_but_a_timeout_beside_it_is_the_echo() -> None:
    stuck = (
        "[rank0]:[E1125 02:00:00.000 ProcessGroupNCCL.cpp:1400] [PG 0 Rank 0] ProcessGroupNCCL's watchdog got stuck "
        "for 480 seconds without making progress in monitoring enqueued collectives."
    )
    f = assess(member("w-0", rank=0, exit_code=1, finished=T0, log=stuck))
    assert (f.role, f.category, f.weak) == ("primary", "hang", True)
    f = assess(member("w-0", rank=0, exit_code=1, finished=T0, log=_watchdog(0, 9, "ALLGATHER") + "\n" + stuck))
    assert (f.role, f.secondary) == ("secondary", "timeout")
    # Among victims that only timed out, the stuck one is the root.
    others = [member(f"w-{i}", rank=i, exit_code=1, finished=T0, log=_watchdog(i, 9, "ALLGATHER")) for i in (1, 2)]
    check(decide(incident(member("w-0", rank=0, exit_code=1, finished=T0, log=stuck), *others)), "w-0", "hang", True)


def test_an_nccl_system_error_whose_last_error_is_the_peer_closing_is_an_echo() -> None:
    """NCCL's 'unhandled system error' is a failed socket or system call: when its Last error is the peer's
    socket closing, the peer died (an echo); alone it is a weak network failure; with an interconnect token, a
    strong one. So a user bug's victims no longer out-time it as 'network'."""
    head = "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error"
    echo = head + "\nLast error:\nsocketProgress: Connection closed by remote peer w-0<41820>"
    f = assess(member("w-1", rank=1, exit_code=1, finished=T0, log=echo))
    assert (f.role, f.secondary) == ("secondary", "peer")
    f = assess(member("w-1", rank=1, exit_code=1, finished=T0, log=head))
    assert (f.role, f.category, f.weak) == ("primary", "network", True)
    f = assess(
        member(
            "w-1", rank=1, exit_code=1, finished=T0, log=head + "\nLast error:\nNET/IB : Got completion with error 12"
        )
    )
    assert (f.role, f.category, f.weak) == ("primary", "network", False)
    root = member("w-0", rank=0, exit_code=1, finished=T0, log="[rank0]: KeyError: 'labels'")
    victims = [member(f"w-{i}", rank=i, exit_code=1, finished=T0, log=echo if i == 1 else head) for i in (1, 2)]
    check(decide(incident(root, *victims)), "w-0", "user_code", False)


def test_the_raylet_reporting_a_worker_killed_by_the_system_is_a_weak_oom_but_its_caller_is_an_echo() -> None:
    own = "(raylet) A worker died. Worker exit type: SYSTEM_ERROR Worker exit detail: the worker exited unexpectedly"
    f = assess(member("w-0", rank=0, exit_code=1, finished=T0, log=own))
    assert (f.role, f.category, f.weak) == ("primary", "host_oom", True)
    caller = "ray.exceptions.ActorDiedError: The actor died unexpectedly. Worker exit type: SYSTEM_ERROR"
    f = assess(member("w-1", rank=1, exit_code=1, finished=T0, log=caller))
    assert (f.role, f.secondary) == ("secondary", "peer")


def test_a_rendezvous_port_already_taken_is_the_node_s_state_not_the_store_lost() -> None:
    msg = (
        "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
        "port: 29500, useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use"
    )
    f = assess(member("w-0", rank=0, exit_code=1, finished=T0, log=msg))
    assert (f.role, f.category) == ("primary", "infra")
    f = assess(member("w-0", rank=0, msg=msg, ts=T0, exit_code=1))
    assert (f.role, f.category) == ("primary", "infra")


def test_among_weak_failures_one_with_words_of_its_own_beats_a_bare_exit_code() -> None:
    """No strong failure anywhere: a member that says something of its own (NCCL's system error) is the root
    before one that only exited 1 a second earlier — any member that died of anything shows a bare exit code."""
    said = member(
        "w-1", rank=1, exit_code=1, finished=T0 + 1, log="DistBackendError: NCCL error: unhandled system error"
    )
    bare = member("w-0", rank=0, exit_code=1, finished=T0, log="step 12 loss 2.1\n")
    check(decide(incident(bare, said)), "w-1", "network", True)


def _torch_summary(failed_at: float) -> str:
    """A pod's log ending in torch's failure summary, its "time" on the pod's clock."""
    when = datetime.fromtimestamp(failed_at, UTC).strftime("%Y-%m-%d_%H:%M:%S")
    return "\n".join(
        [
            "[rank0]: Traceback (most recent call last):",
            "[rank0]: ValueError: bad shard 12",
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
            "train.py FAILED",
            "Root Cause (first observed failure):",
            "[0]:",
            f"  time      : {when}",
            "  host      : w-0",
            "  rank      : 0 (local_rank: 0)",
            "  exitcode  : 1 (pid: 77)",
        ]
    )


@pytest.mark.parametrize(
    ("before_end", "root"),
    [
        (100, "w-0"),  # the log's time is believed: w-0 failed before w-1
        (2 * 3600 - 60, "w-0"),
        # More than 2 h (LOG_TIME_WINDOW, as documented) before its container ended: not this failure's time (a summary
        # from an earlier attempt, a year guessed wrong); w-0's end stands for it, and w-1 was first.
        (2 * 3600 + 60, "w-1"),
    ],
)
def test_a_log_time_far_from_the_containers_end_is_not_believed(before_end: float, root: str) -> None:
    end = T0 + 10
    from_log = member("w-0", rank=0, exit_code=1, finished=end, log=_torch_summary(end - before_end))
    own_file = member("w-1", rank=1, msg="KeyError: 'lr'", ts=end - 5, exit_code=1, finished=end)
    check(decide(incident(from_log, own_file)), root, "user_code", False)


@pytest.mark.parametrize("prefix", ["[default0]:", "[1,0]<stderr>:", "[1,0]<stdout>:"])
def test_a_traceback_behind_a_launchers_line_prefix_is_read(prefix: str) -> None:
    # torchrun --tee labels each worker's lines [default0]:, mpirun labels them [1,0]<stderr>:.
    lines = ["step 3 loss 2.1", "Traceback (most recent call last):", '  File "train.py", line 3, in <module>',
             "ValueError: bad label 7 in batch 1234"]  # fmt: skip
    failed = member("w-0", rank=0, exit_code=1, finished=T0, log="\n".join(prefix + line for line in lines))
    finding = assess(failed)
    assert (finding.source, finding.exception_type) == ("log", "ValueError"), finding.evidence
    assert finding.text == "ValueError: bad label 7 in batch 1234"
