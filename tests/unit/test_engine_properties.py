"""Properties of the engine on any incident, whatever its members say: `decide` never raises, names a member
or no one, keeps its confidence in [0, 1], and does not depend on the order members are listed in.

"A member" includes one that never reported: when the present members only timed out waiting, the engine
looks for the hang where nobody answered, and a member that never reported is named by the pod name the
present members' names imply (`Verdict.missing_pods`). That is a suspicion, never an assertion: it is
worded as "likely" (below LOW_CONFIDENCE) and only ever for a hang."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from support.properties import examples

from podmortem.core import engine
from podmortem.core.errorfile import exception_type_of
from podmortem.core.model import LOW_CONFIDENCE, Condition, ErrorRecord, Incident, JobRef, Member, Termination

LINES = [
    "RuntimeError: [../gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.11]:4455",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "[rank3]:[E ProcessGroupNCCL.cpp:563] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7)",
    "Root Cause (first observed failure):",
    "  exitcode  : -11 (pid: 4242)",
    "  rank      : 1 (local_rank: 1)",
    "E1121 15:06:10.123456 140 torch/distributed/elastic/multiprocessing/api.py:832] failed (exitcode: 1)",
    "kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.",
    "ValueError: bad label 7 in batch 1234",
    "Killed",
]
numbers = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True), st.integers(-(2**40), 2**40).map(float))
ints = st.one_of(st.none(), st.integers(-(2**40), 2**40))
text = st.lists(st.one_of(st.sampled_from(LINES), st.text(max_size=80)), max_size=6).map("\n".join)


@st.composite
def members(draw: st.DrawFn, i: int) -> Member:
    message = draw(text)
    error = draw(
        st.one_of(
            st.none(),
            st.builds(
                ErrorRecord,
                message=st.just(message),
                exception_type=st.just(exception_type_of(message)),
                traceback=text,
                timestamp=ints,
                error_code=ints,
                parse_error=st.sampled_from(["", "broken"]),
            ),
        )
    )
    termination = draw(
        st.one_of(
            st.none(),
            st.builds(
                Termination,
                exit_code=ints,
                signal=ints,
                reason=st.sampled_from(["Error", "OOMKilled", "Completed", "ContainerStatusUnknown", ""]),
                message=text,
                started_at=numbers,
                finished_at=numbers,
                restart_count=st.integers(0, 5),
            ),
        )
    )
    reason = st.sampled_from(["PreemptionByScheduler", "DeletionByTaintManager", "EvictionByEvictionAPI", "x"])
    conditions = draw(st.lists(st.builds(Condition, st.just("DisruptionTarget"), st.just("True"), reason), max_size=1))
    return Member(
        pod=f"p-{i}",
        namespace="ns",
        node=f"n-{draw(st.integers(0, 3))}",
        rank=draw(ints),
        pod_ip=f"10.0.0.{draw(st.integers(0, 300))}",
        phase=draw(st.sampled_from(["", "Running", "Failed", "Succeeded", "Unknown"])),
        phase_reason=draw(st.sampled_from(["", "NodeLost", "Deleted"])),
        running=draw(st.booleans()),
        error=error,
        termination=termination,
        conditions=tuple(conditions),
        deleted_at=draw(numbers),
        log_tail=draw(text),
        error_observed_at=draw(numbers),
        termination_observed_at=draw(numbers),
        clock_offset=draw(numbers),
        clock_round_trip=draw(numbers),
    )


@st.composite
def incidents(draw: st.DrawFn) -> Incident:
    n = draw(st.integers(1, 5))
    return Incident(
        job=JobRef("ns", "job"),
        world_size=draw(st.integers(0, 8)),
        members=tuple(draw(members(i)) for i in range(n)),
    )


# Found by a random draw: the only member that reported timed out waiting, so the hang is looked for in the
# member that never reported, named by the pod name its peer's implies.
NEVER_REPORTED = Incident(
    job=JobRef("ns", "job"),
    world_size=2,
    members=(
        Member(
            pod="p-0",
            rank=0,
            phase="Failed",
            log_tail=LINES[2],  # "Watchdog caught collective operation timeout"
            termination=Termination(exit_code=1),
        ),
    ),
)


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(incidents())
@example(NEVER_REPORTED)
def test_decide_never_raises_and_stays_in_range(incident: Incident) -> None:
    verdict = engine.decide(incident)
    present = {m.pod for m in incident.members}
    assert verdict.pod is None or verdict.pod in present or verdict.pod in verdict.missing_pods
    if verdict.pod is not None and verdict.pod not in present:  # a member that never reported
        assert verdict.category in ("hang", None) and verdict.confidence < LOW_CONFIDENCE
    assert 0.0 <= verdict.confidence <= 1.0
    assert verdict.failed_at is None or not math.isnan(verdict.failed_at)


@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(incidents(), st.randoms(use_true_random=False))
def test_the_verdict_does_not_depend_on_the_order_of_members(incident: Incident, rnd: object) -> None:
    shuffled = list(incident.members)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    a = engine.decide(incident)
    b = engine.decide(Incident(incident.job, incident.world_size, tuple(shuffled)))
    assert (a.pod, a.category, a.retryable) == (b.pod, b.category, b.retryable)


def test_a_member_that_never_reported_is_named_only_as_a_likely_hang() -> None:
    verdict = engine.decide(NEVER_REPORTED)
    assert (verdict.pod, verdict.category) == ("p-1", "hang") and verdict.missing_pods == ("p-1",)
    assert verdict.uncertain and verdict.runner_up_pod == "p-0"
