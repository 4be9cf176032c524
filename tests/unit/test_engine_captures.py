"""The engine deciding a hang from captured evidence: who stopped, and where — and nothing else changed.

Members are built by hand with the evidence each test states: sidecar captures (`Member.captures`) and
log tails holding a worker's faulthandler dump at SIGTERM. Without captures the engine decides as before
(tests/unit/test_accuracy.py and test_realworld_accuracy.py hold the corpora).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from podmortem.core.engine import decide
from podmortem.core.flightrecorder import summarize_pickle
from podmortem.core.model import ErrorRecord, Incident, JobRef, Member, Termination, WorkerCapture
from podmortem.offline import report

JOB = JobRef("ns", "llm", "PyTorchJob")
FIXTURES = Path(__file__).parents[1] / "fixtures" / "flightrecorder"
TIMEOUT = (
    "RuntimeError: [../gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 6000ms for recv operation to complete"
)
LOADING = """\
Current thread 0x00007f69e4431b80 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 327 in wait
  File "/usr/lib/python3.11/threading.py", line 629 in wait
  File "/app/train.py", line 211 in load_batch
  File "/app/train.py", line 273 in train
  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/elastic/multiprocessing/errors/__init__.py", \
line 367 in wrapper
  File "/app/train.py", line 474 in <module>
"""


def _timed_out(pod: str, rank: int, ranks: tuple[int, ...]) -> Member:
    log = "".join(f"[rank{r}]: {TIMEOUT}\n" for r in ranks)
    return Member(
        pod=pod,
        rank=rank,
        error=ErrorRecord(TIMEOUT, "RuntimeError", timestamp=1_800_000_010),
        termination=Termination(exit_code=1, reason="Error", finished_at=1_800_000_011.0),
        log_tail=log,
        phase="Failed",
    )


def _stuck_pod_log(silent: int, sibling: int) -> str:
    """The pod of the stuck rank: its sibling timed out, the agent tore the stuck one down (faulthandler)."""
    return (
        f"[rank{silent}] training\n[rank{sibling}] training\n[rank{sibling}]: {TIMEOUT}\n"
        "W1127 06:30:03.476000 6114 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 6240 "
        "closing signal SIGTERM\n" + LOADING
    )


def _hang_incident() -> Incident:
    stuck = dataclasses.replace(_timed_out("llm-worker-0", 1, (3,)), log_tail=_stuck_pod_log(2, 3))
    return Incident(JOB, 3, (_timed_out("llm-master-0", 0, (0, 1)), stuck, _timed_out("llm-worker-1", 2, (4, 5))))


def test_sigterm_stack_in_the_log_names_rank_pod_and_line() -> None:
    incident = _hang_incident()
    v = decide(incident)
    assert (v.pod, v.global_rank, v.category, v.retryable) == ("llm-worker-0", 2, "hang", True)
    assert v.confidence >= 0.9 and v.rule == "hang.behind-stacks"
    assert v.decided_by == "captured evidence: stacks (sigterm_stack)"
    assert v.hang is not None and v.hang.frame is not None
    assert (v.hang.frame.file, v.hang.frame.line, v.hang.frame.function) == ("/app/train.py", 211, "load_batch")
    line = (
        "rank 2 (pod llm-worker-0) was not in a collective while its peers waited in one; "
        "it was at train.py:211 in load_batch"
    )
    assert line in v.summary.splitlines()[0]
    assert line in report.render(incident, v)
    assert v.to_dict()["hang"]["stuck_ranks"] == [2]


def test_without_the_stack_todays_verdict_stands() -> None:
    incident = _hang_incident()
    plain = Incident(
        JOB,
        3,
        tuple(dataclasses.replace(m, log_tail=m.log_tail.replace(LOADING, "")) for m in incident.members),
    )
    v = decide(plain)
    assert v.hang is None and v.rule.startswith("engine.hang") and v.confidence < 0.9


def _fr_capture(rank: int, **kw: object) -> WorkerCapture:
    summary = summarize_pickle((FIXTURES / f"fr-{rank}.pkl").read_bytes(), rank=rank)
    return WorkerCapture("control_plane", global_rank=rank, flight_recorder=summary, trigger="stall", **kw)  # type: ignore[arg-type]


def test_provisional_stall_flight_recorder_mismatch_is_user_code() -> None:
    # Pods still running, nothing failed; the captures of the stall hold torch's dumps (group 1 mismatched).
    members = tuple(
        Member(pod=f"p-{r}", rank=r, running=True, phase="Running", captures=(_fr_capture(r),)) for r in range(3)
    )
    v = decide(Incident(JOB, 3, members, provisional=True))
    assert (v.pod, v.global_rank, v.category, v.retryable) == ("p-1", 1, "user_code", False)
    assert v.hang is not None and (v.hang.finding, v.hang.seq, v.hang.op) == ("mismatch", 1, "broadcast")
    assert v.confidence >= 0.9 and v.decided_by == "captured evidence: flight recorder (control_plane)"


def test_provisional_stall_behind_with_stack_is_certain() -> None:
    members = []
    for r in range(3):
        s = _fr_capture(r).flight_recorder
        assert s is not None
        s = dataclasses.replace(
            s, entries=tuple(e for e in s.entries if e.pg_id == "0"), pg_status={"0": s.pg_status["0"]}
        )
        caps = (WorkerCapture("control_plane", global_rank=r, flight_recorder=s, stack=LOADING if r == 2 else ""),)
        members.append(Member(pod=f"p-{r}", rank=r, running=True, phase="Running", captures=caps))
    v = decide(Incident(JOB, 3, tuple(members), provisional=True))
    assert (v.pod, v.global_rank, v.category) == ("p-2", 2, "hang")
    assert v.confidence == 0.95
    assert v.summary.splitlines()[0].endswith(
        "rank 2 (pod p-2) never entered all_reduce #4; it was at train.py:211 in load_batch."
    )


def test_an_own_failure_is_not_overruled_by_captures() -> None:
    incident = _hang_incident()
    boom = Member(
        pod="llm-master-0",
        rank=0,
        error=ErrorRecord("ValueError: bad label", "ValueError", timestamp=1_800_000_005),
        termination=Termination(exit_code=1, reason="Error", finished_at=1_800_000_006.0),
        phase="Failed",
    )
    v = decide(dataclasses.replace(incident, members=(boom, *incident.members[1:])))
    assert v.pod == "llm-master-0" and v.category == "user_code" and v.hang is None


def test_a_stall_the_captures_cannot_place_says_so_without_blaming() -> None:
    members = tuple(Member(pod=f"p-{r}", rank=r, running=True, phase="Running") for r in range(2))
    v = decide(Incident(JOB, 2, members, provisional=True))
    assert v.pod is None and v.hang is None


def test_one_worker_per_pod_the_torn_down_pods_stack_is_placed_by_its_log() -> None:
    # 4 pods x 1 worker: the stuck pod times out nowhere; the job controller deletes it and its agent passes
    # SIGTERM on (error file: the agent's SignalException, an echo the engine reads no further).
    sigterm = "SignalException: Process 26140 got signal: 15"
    stuck = Member(
        pod="llm-worker-1",
        rank=2,
        error=ErrorRecord(sigterm, "SignalException", timestamp=1_800_000_012),
        termination=Termination(exit_code=1, reason="Error", finished_at=1_800_000_013.0),
        log_tail="2026-11-27 06:36:50 [rank2] training: world size 4\n" + LOADING,
        phase="Failed",
    )
    others = [_timed_out(p, n, (n,)) for p, n in (("llm-master-0", 0), ("llm-worker-0", 1), ("llm-worker-2", 3))]
    v = decide(Incident(JOB, 4, (others[0], others[1], stuck, others[2])))
    assert (v.pod, v.global_rank, v.category) == ("llm-worker-1", 2, "hang")
    assert v.confidence >= 0.9 and v.hang is not None and v.hang.path == "sigterm_stack"


def _timeout_traceback(rank: int, line: int, function: str) -> str:
    return "".join(
        f"[rank{rank}]: {text}\n"
        for text in (
            "Traceback (most recent call last):",
            '  File "/app/train.py", line 474, in <module>',
            f'  File "/app/train.py", line {line}, in {function}',
            '  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", '
            "line 3252, in all_reduce",
            "    work.wait()",
            TIMEOUT,
        )
    )


def test_desync_from_the_timeout_tracebacks_alone() -> None:
    # Every rank timed out; rank 2 in the metrics all_reduce (line 299), the others in the gradients' (line 257).
    members = []
    for pod, node, ranks in (("llm-master-0", 0, (0, 1)), ("llm-worker-0", 1, (2, 3)), ("llm-worker-1", 2, (4, 5))):
        m = _timed_out(pod, node, ranks)
        log = "".join(_timeout_traceback(r, 299 if r == 2 else 257, "train" if r == 2 else "collective") for r in ranks)
        members.append(dataclasses.replace(m, log_tail=log))
    v = decide(Incident(JOB, 3, tuple(members)))
    assert (v.pod, v.global_rank, v.category, v.retryable) == ("llm-worker-0", 2, "user_code", False)
    assert (
        v.rule == "hang.mismatch-log"
        and v.confidence == 0.8
        and v.decided_by == "captured evidence: timeout tracebacks"
    )
    assert "out of step" in v.summary.splitlines()[0]
    # Everyone at the same place: the tracebacks say nothing, today's verdict stands.
    same = [
        dataclasses.replace(m, log_tail=m.log_tail.replace("line 299, in train", "line 257, in collective"))
        for m in members
    ]
    assert decide(Incident(JOB, 3, tuple(same))).hang is None


def test_a_refused_dump_is_said_and_the_verdict_still_comes() -> None:
    note = "refused: the pickle calls or imports posix.system (REDUCE)"
    refused = WorkerCapture("fr_file", global_rank=4, note=note)
    incident = _hang_incident()
    members = (*incident.members[:2], dataclasses.replace(incident.members[2], captures=(refused,)))
    v = decide(dataclasses.replace(incident, members=members))
    assert v.pod == "llm-worker-0" and v.global_rank == 2  # decided from the other evidence
    assert (
        f"llm-worker-1: capture of rank 4 (fr_file) failed, and nothing else shows where it was: {note}" in v.evidence
    )


REFUSED = "control-plane socket: [Errno 111] Connection refused"


def _noisy_incident() -> Incident:
    """The hang of `_hang_incident`, its ranks asked at the first timeout (captured at T+12): llm-master-0
    (ranks 0, 1) and llm-worker-1 (ranks 4, 5) had exited at T+11, so their sockets refused; llm-worker-0's
    rank 3 refused too, but py-spy got its stack; rank 2's stack is in its pod's log (SIGTERM)."""
    at = 1_800_000_012.0
    refused = {
        "llm-master-0": (0, 1),
        "llm-worker-0": (2, 3),
        "llm-worker-1": (4, 5),
    }
    incident = _hang_incident()
    members = []
    for m in incident.members:
        caps = [WorkerCapture("control_plane", global_rank=r, note=REFUSED, captured_at=at) for r in refused[m.pod]]
        if m.pod == "llm-worker-0":
            caps.append(WorkerCapture("py_spy", global_rank=3, stack=LOADING, captured_at=at))
        members.append(dataclasses.replace(m, captures=tuple(caps)))
    return dataclasses.replace(incident, members=tuple(members))


def test_captures_asked_after_their_rank_exited_are_counted_not_listed() -> None:
    v = decide(_noisy_incident())
    assert (v.pod, v.global_rank) == ("llm-worker-0", 2)
    assert not [e for e in v.evidence if REFUSED in e]  # each failed capture came late, or its rank has a stack
    assert "capture notes not listed: 4 asked after the rank had exited, 2 for ranks captured another way" in v.evidence
    assert REFUSED not in report.render(_noisy_incident(), v)


def test_a_failed_capture_of_a_rank_still_running_with_nothing_else_is_listed() -> None:
    incident = _noisy_incident()
    # llm-worker-1 still ran when asked (no end known yet): its ranks' failures are the gap in the evidence
    members = list(incident.members)
    members[2] = dataclasses.replace(members[2], termination=None, error=None, log_tail="", phase="Running")
    v = decide(dataclasses.replace(incident, members=tuple(members)))
    listed = [e for e in v.evidence if REFUSED in e]
    assert listed == [
        f"llm-worker-1: capture of rank {r} (control_plane) failed, and nothing else shows where it was: {REFUSED}"
        for r in (4, 5)
    ]
    assert "capture notes not listed: 2 asked after the rank had exited, 2 for ranks captured another way" in v.evidence
