"""The per-pod condition decision (podmortem.core.conditions): pure, from a member's evidence and the verdict."""

from __future__ import annotations

import dataclasses

import pytest

from podmortem.core import conditions
from podmortem.core.assess import assess
from podmortem.core.conditions import decide, plain_echo, ready
from podmortem.core.engine import decide as verdict_of
from podmortem.core.errorfile import exception_type_of
from podmortem.core.model import Condition, ErrorRecord, Incident, JobRef, Member, Termination, Verdict
from podmortem.core.names import PERMANENT, RETRYABLE, VICTIM

T0 = 1_800_000_000.0
JOB = JobRef("ns", "job", "Job")
GLOO_CLOSED = "RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer [10.0.0.1]:4455."
GLOO_TIMEOUT = "RuntimeError: [gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 30000ms for recv operation"
STORE = "torch.distributed.DistStoreError: Failed to recv, got 0 bytes. Connection was likely closed."
SIGTERM = "SignalException: Process 4242 got signal: 15"


def member(
    pod: str,
    msg: str | None = None,
    *,
    ts: float = T0,
    exit_code: int | None = 1,
    reason: str = "Error",
    running: bool = False,
    conditions_: tuple[Condition, ...] = (),
) -> Member:
    error = ErrorRecord(message=msg, exception_type=exception_type_of(msg), timestamp=int(ts)) if msg else None
    term = Termination(exit_code=exit_code, reason=reason, finished_at=ts + 1) if exit_code is not None else None
    return Member(
        pod=pod,
        namespace="ns",
        pod_ip=f"10.0.0.{pod[-1]}" if pod[-1].isdigit() else "",
        error=error,
        termination=term,
        phase="Running" if running else ("Failed" if exit_code else "Succeeded"),
        running=running,
        conditions=conditions_,
    )


def incident(*members: Member, world_size: int | None = None) -> Incident:
    return Incident(job=JOB, world_size=world_size or len(members), members=members, incident_id="ns:job:0")


def confident(v: Verdict, confidence: float = 0.95) -> Verdict:
    return dataclasses.replace(v, confidence=confidence)


def test_user_code_root_is_permanent_and_its_echoes_are_victims() -> None:
    root = member("w-1", "ValueError: label 7 out of range", ts=T0)
    peers = [member("w-0", GLOO_CLOSED, ts=T0 + 1), member("w-2", GLOO_TIMEOUT, ts=T0 + 1), member("w-3", SIGTERM)]
    inc = incident(root, *peers)
    v = confident(verdict_of(inc))
    assert v.pod == "w-1"
    got = decide(root, inc, v)
    assert got is not None and (got.type, got.reason) == (PERMANENT, "UserCode")
    assert "w-1" in got.message and "user_code" in got.message and "\n" not in got.message
    for p in peers:
        c = decide(p, inc, v)
        assert c is not None and (c.type, c.reason) == (VICTIM, "Victim"), p.pod
        assert "root pod w-1" in c.message and "user_code" in c.message


def test_permanent_only_at_the_threshold() -> None:
    root = member("w-1", "ValueError: label 7 out of range")
    inc = incident(root, member("w-0", GLOO_CLOSED, ts=T0 + 1))
    v = verdict_of(inc)
    assert decide(root, inc, dataclasses.replace(v, confidence=0.89)) is None  # never give up on a guess
    at = decide(root, inc, dataclasses.replace(v, confidence=0.9))
    assert at is not None and at.type == PERMANENT
    assert decide(root, inc, dataclasses.replace(v, confidence=0.95), permanent_confidence=0.97) is None


def test_retryable_root_whatever_the_confidence() -> None:
    preempted = member(
        "w-1",
        exit_code=143,
        conditions_=(Condition("DisruptionTarget", "True", "PreemptionByScheduler", "", T0),),
    )
    inc = incident(preempted, member("w-0", GLOO_CLOSED, ts=T0 + 2))
    v = verdict_of(inc)
    assert (v.pod, v.category) == ("w-1", "preemption")
    got = decide(preempted, inc, dataclasses.replace(v, confidence=0.5))
    assert got is not None and (got.type, got.reason) == (RETRYABLE, "Preemption")


def test_a_plain_echo_is_a_victim_before_the_root_has_reported() -> None:
    echo = member("w-0", GLOO_CLOSED)
    inc = incident(echo, member("w-1", running=True, exit_code=None), world_size=2)
    v = verdict_of(inc)
    assert v.pod != "w-0"
    got = decide(echo, inc, v)
    assert got is not None and got.type == VICTIM
    assert "had not reported" in got.message
    assert ready(echo, inc)  # decided at once: no need to wait for the peers


@pytest.mark.parametrize("message", [GLOO_CLOSED, GLOO_TIMEOUT, STORE, SIGTERM])
def test_each_plain_echo(message: str) -> None:
    assert plain_echo(assess(member("w-0", message)))


def test_sigkill_from_outside_is_not_a_plain_echo() -> None:
    killed = member("w-0", exit_code=137)
    assert assess(killed).role == "secondary" and not plain_echo(assess(killed))
    inc = incident(member("w-1", "ValueError: x"), killed)
    assert decide(killed, inc, confident(verdict_of(inc))) is None


def test_the_root_is_never_a_victim() -> None:
    """A hang: the stuck rank's pod shows only the teardown's SIGTERM; the others timed out."""
    stuck = member("w-2", SIGTERM, ts=T0 + 40)
    timeouts = [member("w-0", GLOO_TIMEOUT, ts=T0 + 30), member("w-1", GLOO_TIMEOUT, ts=T0 + 30)]
    inc = incident(*timeouts, stuck)
    v = verdict_of(inc)
    assert (v.pod, v.category) == ("w-2", "hang")
    assert decide(stuck, inc, v) is None  # nothing of its own: no condition (counted), never Victim
    for t in timeouts:
        c = decide(t, inc, v)
        assert c is not None and c.type == VICTIM


def test_the_last_of_all_echoes_is_not_a_victim() -> None:
    a, b = member("w-0", GLOO_TIMEOUT), member("w-1", GLOO_TIMEOUT, ts=T0 + 1)
    inc = incident(a, b)
    v = dataclasses.replace(verdict_of(inc), pod="w-9")  # a verdict that names neither
    assert decide(b, inc, v, victims=frozenset({"w-0"})) is None
    c = decide(b, inc, v, victims=frozenset())
    assert c is not None and c.type == VICTIM


def test_no_condition_without_a_failure_of_its_own() -> None:
    clean = member("w-0", exit_code=0)
    bare = member("w-1", exit_code=1)  # a bare exit code: any member that died of anything shows it
    root = member("w-2", "ValueError: x")
    inc = incident(clean, bare, root)
    v = confident(verdict_of(inc))
    assert decide(clean, inc, v) is None
    assert decide(bare, inc, v) is None
    assert decide(member("w-3", running=True, exit_code=None), inc, v) is None


def test_a_root_named_by_its_victims_without_a_cause_of_its_own_gets_none() -> None:
    lost = member("w-1", GLOO_CLOSED.replace("10.0.0.1", "10.0.0.2"))
    inc = incident(lost, member("w-0", GLOO_CLOSED.replace("10.0.0.1", "10.0.0.1")))
    v = verdict_of(inc)
    assert (v.pod, v.category) == ("w-1", None)
    assert decide(lost, inc, v) is None


def test_another_member_failing_on_its_own() -> None:
    root = member("w-1", "ValueError: label 7", ts=T0)
    ecc = member("w-0", "RuntimeError: CUDA error: uncorrectable ECC error encountered", ts=T0 + 5)
    also = member("w-2", "KeyError: 'x'", ts=T0 + 5)
    inc = incident(root, ecc, also)
    # The verdict as given (whoever the engine would name): w-1, user_code.
    v = Verdict(pod="w-1", category="user_code", retryable=False, summary="w-1 failed first", confidence=0.95)
    c = decide(ecc, inc, v)
    assert c is not None and (c.type, c.reason) == (RETRYABLE, "Hardware")
    p = decide(also, inc, v)
    assert p is not None and p.type == PERMANENT  # the job fails on the root anyway
    assert decide(also, inc, dataclasses.replace(v, confidence=0.5)) is None
    retry_root = dataclasses.replace(v, category="network", retryable=True)
    assert decide(also, inc, retry_root) is None  # never permanent beside a retryable root


def test_a_failure_of_its_own_waits_for_the_peers_first_evidence() -> None:
    root = member("w-1", "ValueError: x")
    running = member("w-0", running=True, exit_code=None)
    assert not ready(root, incident(root, running))
    assert not ready(root, incident(root, world_size=2))  # a member not even known yet
    assert ready(root, incident(root, member("w-0", GLOO_CLOSED)))


def test_message_is_one_bounded_line() -> None:
    root = member("w-1", "ValueError: " + "x\n" * 2000)
    inc = incident(root)
    got = decide(root, inc, confident(verdict_of(inc)))
    assert got is not None and "\n" not in got.message and len(got.message) <= conditions.MAX_MESSAGE
