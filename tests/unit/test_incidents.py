"""The incident book: open on the first failure, close on quorum or timeout, dedupe, revise late."""

from __future__ import annotations

import asyncio
import threading

import pytest
from prometheus_client import CollectorRegistry

from podmortem.aggregator.decisions import Decision
from podmortem.aggregator.incidents import IncidentBook, MemberKey
from podmortem.aggregator.metrics import Metrics
from podmortem.aggregator.running import make_decide
from podmortem.core.model import ErrorRecord, Incident, JobRef, Member, Termination, Verdict
from podmortem.protocol.v1 import collector_pb2 as pb
from podmortem.protocol.wire import error_to_pb, make_event, termination_to_pb

JOB = pb.JobRef(namespace="ml", name="llm", kind="PyTorchJob")
T0 = 1_800_000_000.0


def register(book: IncidentBook, pod: str, rank: int, world: int | None = None) -> MemberKey:
    reg = pb.Register(job=JOB, pod=pod, node=f"node-{rank}", rank=rank, attempt="0")
    if world is not None:
        reg.world_size_hint = world
    return book.register(reg)


def error(message: str, ts: int, event_id: str | None = None, wall: float | None = None) -> pb.Event:
    rec = ErrorRecord(message=message, exception_type=message.split(":")[0], timestamp=ts)
    return make_event(error_to_pb(rec), event_id, wall=wall if wall is not None else ts + 0.5)


def ended(code: int, at: float, signal: int | None = None, event_id: str | None = None) -> pb.Event:
    term = Termination(exit_code=code, signal=signal, reason="Error", started_at=T0 - 60, finished_at=at)
    return make_event(termination_to_pb(term), event_id, wall=at + 0.2)


class Recorder:
    def __init__(self) -> None:
        self.decisions: list[Decision] = []

    def __call__(self, decision: Decision) -> None:
        self.decisions.append(decision)


def make_book(world: int | None = None, timeout: float = 30.0) -> tuple[IncidentBook, Recorder, Metrics]:
    rec = Recorder()
    metrics = Metrics(CollectorRegistry())
    book = IncidentBook(make_decide(), rec, quorum_timeout=timeout, default_world_size=world, metrics=metrics)
    return book, rec, metrics


async def test_quorum_closes_as_soon_as_last_member_reports() -> None:
    book, rec, _ = make_book()
    keys = [register(book, f"job-worker-{i}", i, world=3) for i in range(3)]
    book.ingest(keys[1], error("ValueError: bad label", int(T0)), from_sidecar=True)
    book.ingest(keys[1], ended(1, T0 + 1), from_sidecar=True)
    peer_gone = "RuntimeError: Connection closed by peer [10.0.0.2]:2900"
    book.ingest(keys[0], error(peer_gone, int(T0) + 1), from_sidecar=True)
    book.ingest(keys[0], ended(1, T0 + 2), from_sidecar=True)
    assert rec.decisions == []  # one member still silent
    book.ingest(keys[2], ended(143, T0 + 3, signal=15), from_sidecar=True)
    assert len(rec.decisions) == 1
    d = rec.decisions[0]
    assert d.closed_by == "quorum" and d.final and d.revision == 1
    assert d.verdict.pod == "job-worker-1"
    assert d.incident.world_size == 3


@pytest.mark.looptime
async def test_timeout_closes_when_a_member_never_reports() -> None:
    book, rec, metrics = make_book(timeout=45)
    keys = [register(book, f"p-{i}", i, world=3) for i in range(3)]
    book.ingest(keys[0], error("ValueError: x", int(T0)), from_sidecar=True)
    book.ingest(keys[0], ended(1, T0 + 1), from_sidecar=True)
    book.ingest(keys[1], ended(143, T0 + 2, signal=15), from_sidecar=True)
    await asyncio.sleep(44)
    assert rec.decisions == []
    assert metrics.open_incidents._value.get() == 1
    await asyncio.sleep(2)
    assert len(rec.decisions) == 1
    assert rec.decisions[0].closed_by == "timeout"
    assert not rec.decisions[0].final
    assert rec.decisions[0].reported == 2
    assert metrics.open_incidents._value.get() == 0


async def test_duplicates_are_ignored_but_counted() -> None:
    book, rec, metrics = make_book(world=2)
    a, b = register(book, "a", 0), register(book, "b", 1)
    ev = error("ValueError: x", int(T0), event_id="a/error/1")
    assert book.ingest(a, ev) is True
    assert book.ingest(a, ev) is False
    assert metrics.duplicates._value.get() == 1
    assert metrics.registry.get_sample_value("podmortem_events_received_total", {"kind": "error_file"}) == 1
    book.ingest(a, ended(1, T0 + 1), from_sidecar=True)
    book.ingest(b, ended(1, T0 + 2), from_sidecar=True)
    assert len(rec.decisions) == 1


@pytest.mark.looptime
async def test_late_report_revises_the_verdict() -> None:
    book, rec, _ = make_book(world=2, timeout=5)
    a, b = register(book, "a", 0), register(book, "b", 1)
    # Only the victim's story is known at first...
    peer_gone = "RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer [1.2.3.4]:1"
    book.ingest(a, error(peer_gone, 100), from_sidecar=True)
    book.ingest(a, ended(1, 101), from_sidecar=True)
    book.close_all()
    assert rec.decisions[-1].revision == 1
    # ... then the real root reports: an OOM kill with no error file.
    oom = Termination(exit_code=137, signal=9, reason="OOMKilled", finished_at=99.0)
    book.ingest(b, make_event(termination_to_pb(oom)), from_sidecar=True)
    assert len(rec.decisions) == 1  # revisions wait for the burst of late events to end...
    await asyncio.sleep(book.revise_delay)
    assert len(rec.decisions) == 2  # ...then one revision
    assert rec.decisions[-1].revision == 2 and rec.decisions[-1].closed_by == "revision"
    assert rec.decisions[-1].verdict.pod == "b"
    assert rec.decisions[-1].verdict.category == "host_oom"


async def test_no_incident_when_every_member_succeeds() -> None:
    book, rec, _ = make_book(world=2)
    a, b = register(book, "a", 0), register(book, "b", 1)
    book.ingest(a, ended(0, T0), from_sidecar=True)
    book.ingest(b, ended(0, T0), from_sidecar=True)
    assert rec.decisions == []
    assert book.open_incidents() == []


async def test_events_from_unregistered_members_are_refused() -> None:
    book, _, _ = make_book()
    with pytest.raises(KeyError):
        book.ingest(MemberKey(("ml", "llm", "0"), "ghost"), error("ValueError: x", 1))


async def test_clock_offset_measured_later_still_corrects_observation_times() -> None:
    book, _, _ = make_book(world=2)
    a = register(book, "a", 0)
    book.ingest(a, error("ValueError: x", 100, wall=100.25), from_sidecar=True)
    book.set_clock(a, offset=-3.0, round_trip=0.004)
    book.set_clock(a, offset=+9.0, round_trip=0.5)  # a worse sample is not kept
    incident = book.incident(a.job)
    assert incident is not None
    member = next(m for m in incident.members if m.pod == "a")
    assert member.clock_offset == -3.0
    assert member.error_observed_at == pytest.approx(97.25)


async def test_a_connected_sidecar_is_waited_for_even_when_the_pod_watch_saw_the_exit() -> None:
    book, rec, _ = make_book(world=2)
    a, b = register(book, "a", 0), register(book, "b", 1)
    # The aggregator's pod watch sees both containers end before b's sidecar has said anything.
    book.ingest(a, error("RuntimeError: Connection closed by peer [10.0.0.2]:29500", 100), from_sidecar=True)
    book.ingest(a, ended(1, 101.0, event_id="a/termination/0"), from_sidecar=True)
    book.ingest(b, ended(1, 100.5, event_id="b/termination/0"))  # from the pod watch
    assert rec.decisions == []  # b's sidecar is connected and may still be sending its error file
    book.ingest(b, error("ValueError: the real root cause", 99), from_sidecar=True)
    book.ingest(b, ended(1, 100.5, event_id="b/termination/0"), from_sidecar=True)  # its own report
    assert len(rec.decisions) == 1 and rec.decisions[0].closed_by == "quorum"
    assert rec.decisions[0].verdict.pod == "b"


async def test_a_closed_stream_stops_the_wait_for_its_sidecar() -> None:
    book, rec, _ = make_book(world=2)
    a, b = register(book, "a", 0), register(book, "b", 1)
    book.ingest(a, error("ValueError: x", 100), from_sidecar=True)
    book.ingest(a, ended(1, 101.0), from_sidecar=True)
    book.ingest(b, ended(143, 102.0, signal=15))  # pod watch only
    assert rec.decisions == []
    book.disconnected(b)
    assert len(rec.decisions) == 1 and rec.decisions[0].verdict.pod == "a"


class CountingDecide:
    """The real engine, counting its calls and the threads it ran on."""

    def __init__(self, fail_on: str = "") -> None:
        self.calls = 0
        self.threads: set[int] = set()
        self.fail_on = fail_on
        self.engine = make_decide()

    def __call__(self, incident: Incident) -> Verdict:
        self.calls += 1
        self.threads.add(threading.get_ident())
        if self.fail_on and any(m.pod == self.fail_on for m in incident.members):
            raise OverflowError(f"{self.fail_on}: timestamp out of range")  # as a hostile error file did
        return self.engine(incident)


@pytest.mark.looptime
async def test_a_burst_of_late_events_makes_one_revision_not_one_decision_each() -> None:
    decide = CountingDecide()
    rec = Recorder()
    book = IncidentBook(decide, rec, quorum_timeout=5, default_world_size=3)
    keys = [register(book, f"w-{i}", i) for i in range(3)]
    peer_gone = "RuntimeError: Connection closed by peer [1.2.3.4]:1"
    book.ingest(keys[0], error(peer_gone, 100), from_sidecar=True)
    await asyncio.sleep(6)  # quorum timeout: first verdict
    assert len(rec.decisions) == 1 and decide.calls == 1
    for i in range(500):  # 500 distinct late events from a chatty member
        book.ingest(keys[1], error(f"ValueError: late {i}", 101 + i, event_id=f"late-{i}"), from_sidecar=True)
    assert decide.calls == 1  # nothing decided on the ingest path
    await asyncio.sleep(book.revise_delay + 0.1)
    assert decide.calls == 2  # one decision for the whole burst
    assert len(rec.decisions) == 2 and rec.decisions[-1].verdict.pod == "w-1"


async def test_a_large_incident_is_decided_off_the_event_loop() -> None:
    decide = CountingDecide()
    rec = Recorder()
    book = IncidentBook(decide, rec, quorum_timeout=600, default_world_size=4, offload_members=4)
    keys = [register(book, f"w-{i}", i) for i in range(4)]
    book.ingest(keys[2], error("ValueError: bad label", 100), from_sidecar=True)
    for i, key in enumerate(keys):
        book.ingest(key, ended(1, 101 + i), from_sidecar=True)  # the last one makes quorum
    assert rec.decisions == []  # the decision runs in a worker thread; the ingest returned at once
    await book.settle()
    assert len(rec.decisions) == 1 and rec.decisions[0].verdict.pod == "w-2"
    assert threading.get_ident() not in decide.threads


async def test_a_member_that_makes_the_engine_fail_is_set_aside_and_the_incident_still_decided() -> None:
    rec = Recorder()
    book = IncidentBook(CountingDecide(fail_on="w-0"), rec, quorum_timeout=600, default_world_size=3)
    keys = [register(book, f"w-{i}", i) for i in range(3)]
    book.ingest(keys[0], error("RuntimeError: Connection closed by peer [1.2.3.4]:1", 100), from_sidecar=True)
    book.ingest(keys[1], error("ValueError: bad label", 99), from_sidecar=True)
    for i, key in enumerate(keys):
        book.ingest(key, ended(1, 101 + i), from_sidecar=True)
    assert len(rec.decisions) == 1
    verdict = rec.decisions[0].verdict
    assert verdict.pod == "w-1" and verdict.category == "user_code"
    assert any("set aside" in e and "w-0" in e for e in verdict.evidence)


async def test_the_stop_path_decides_an_open_incident_whose_member_makes_the_engine_fail() -> None:
    # Shutdown with a member still silent: close_all decides what is open, and one member's hostile data
    # (the engine raising) must not lose the verdict there either.
    rec = Recorder()
    book = IncidentBook(CountingDecide(fail_on="w-0"), rec, quorum_timeout=600, default_world_size=3)
    keys = [register(book, f"w-{i}", i) for i in range(3)]
    book.ingest(keys[0], error("RuntimeError: Connection closed by peer [1.2.3.4]:1", 100), from_sidecar=True)
    book.ingest(keys[1], error("ValueError: bad label", 99), from_sidecar=True)
    book.ingest(keys[1], ended(1, 101), from_sidecar=True)
    assert rec.decisions == []  # 1/3 reported: still open
    book.close_all()
    [decision] = rec.decisions
    assert (decision.verdict.pod, decision.verdict.category, decision.closed_by) == ("w-1", "user_code", "timeout")
    assert any("set aside" in e and "w-0" in e for e in decision.verdict.evidence)


def test_quorum_count_follows_each_member_without_recounting() -> None:
    book, _, _ = make_book(world=3, timeout=600)
    keys = [register(book, f"w-{i}", i) for i in range(3)]
    state = book._jobs[keys[0].job]
    assert state.reported == 0
    book.ingest(keys[0], ended(0, T0), from_sidecar=True)
    assert state.reported == 1
    book.ingest(keys[0], ended(0, T0), from_sidecar=True)  # a duplicate changes nothing
    assert state.reported == 1
    register(book, "w-0", 0)  # a second stream of the same member: still reported (its sidecar saw the end)
    assert state.reported == 1
    assert state.reported == sum(1 for m in state.members.values() if m.reported())


async def test_a_world_size_hint_never_exceeds_the_jobs_own_size() -> None:
    book, rec, _ = make_book(timeout=600)
    a = register(book, "a", 0, world=2**31 - 1)  # a hostile (or broken) hint
    b = register(book, "b", 1)
    assert book.world_size(book._jobs[a.job]) == 65_536  # capped
    book.expect(pb_job(), "0", 2)  # the job object says 2
    book.ingest(a, error("ValueError: x", 100), from_sidecar=True)
    book.ingest(a, ended(1, 101), from_sidecar=True)
    book.ingest(b, ended(1, 102), from_sidecar=True)
    assert len(rec.decisions) == 1 and rec.decisions[0].closed_by == "quorum"  # not held until the timeout


def test_attempts_unknown_and_zero_are_two_incidents() -> None:
    book, _, _ = make_book()
    unknown = book.register(pb.Register(job=JOB, pod="p", attempt=""))
    zero = book.register(pb.Register(job=JOB, pod="p", attempt="0"))
    ids = {book._jobs[unknown.job].incident_id, book._jobs[zero.job].incident_id}
    assert ids == {"ml:llm", "ml:llm:0"}


def pb_job() -> JobRef:
    return JobRef(JOB.namespace, JOB.name, JOB.kind)


async def test_a_long_log_tail_is_kept_bounded_with_the_line_that_names_the_cause() -> None:
    book, rec, _ = make_book(world=1, timeout=600)
    key = register(book, "w-0", 0)
    chatter = "".join(f"[rank0]: step {i} loss 1.{i % 97:02d}\n" for i in range(4000))  # ~100 KB
    text = "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n" + chatter + "exiting\n"
    book.ingest(key, make_event(pb.LogTail(text=text.encode())), from_sidecar=True)
    book.ingest(key, ended(1, T0), from_sidecar=True)
    incident = book.incident(key.job)
    assert incident is not None
    kept = incident.members[0].log_tail
    assert len(kept) < 17_000 < len(text)
    assert kept.startswith("NVRM: Xid") and kept.endswith("exiting\n")
    assert len(rec.decisions) == 1 and rec.decisions[0].verdict.category == "hardware"


async def test_the_newest_log_tail_is_the_one_folded_and_survives_later_events() -> None:
    """The book holds a tail's text once, outside its stored event: the fold must still see the newest
    tail after later events make it fold again (and never an older one)."""
    book, rec, _ = make_book(world=1, timeout=600)
    key = register(book, "w-0", 0)
    book.ingest(key, make_event(pb.LogTail(text=b"old tail: NVRM: Xid 79\n"), "w-0/log/1", wall=T0), from_sidecar=True)
    newest = pb.LogTail(text="ValueError: newest 🏖️\n".encode())
    book.ingest(key, make_event(newest, "w-0/log/2", wall=T0 + 1), from_sidecar=True)
    book.ingest(key, error("ValueError: newest", int(T0) + 1), from_sidecar=True)  # folds again
    book.ingest(key, ended(1, T0 + 2), from_sidecar=True)
    incident = book.incident(key.job)
    assert incident is not None
    assert incident.members[0].log_tail == "ValueError: newest ?\n"
    assert len(rec.decisions) == 1 and rec.decisions[0].verdict.category == "user_code"


@pytest.mark.parametrize("order", ["in order", "reversed", "mixed"])
async def test_a_member_folded_event_by_event_is_the_member_folded_at_once(order: str) -> None:
    """Ingest folds a new event onto the kept fold when it is the newest; the member must be exactly the
    fold of all its events in the pods' order (reversed or mixed arrival: redone), log tail included."""
    book, _, _ = make_book(world=1)
    key = register(book, "job-worker-0", 0)
    events = [
        error("RuntimeError: first", int(T0), wall=T0 + 0.1),
        make_event(pb.LogTail(text=f"step 1\n{'x' * 20_000}\nGLHF! 🏖️ done".encode(), truncated=True), wall=T0 + 0.2),
        error("RuntimeError: second", int(T0), wall=T0 + 0.3),
        make_event(pb.LogTail(text="newer tail 🏖️".encode(), truncated=False), wall=T0 + 0.4),
        ended(1, T0 + 0.4),  # wall T0 + 0.6
        make_event(
            pb.PodCondition(type="DisruptionTarget", status="True", reason="PreemptionByScheduler"), wall=T0 + 0.5
        ),
    ]
    if order == "reversed":
        events.reverse()
    elif order == "mixed":
        events = [events[i] for i in (0, 2, 1, 5, 3, 4)]
    book.set_clock(key, 0.25, 0.001)
    state = book._jobs[key.job].members[key.pod]
    for event in events:
        book.ingest(key, event, from_sidecar=True)
        incremental = state.member()
        state.changed()
        assert incremental == state.member()  # the same as folding every kept event again
    # The newest tail to arrive is the one kept (by arrival), compacted.
    assert state.member().log_tail == ("newer tail ?" if order != "reversed" else state.log_text)
    folded_error = state.member().error
    assert folded_error is not None and folded_error.message == "RuntimeError: second"


def test_a_stored_log_tail_event_keeps_every_field_but_its_text() -> None:
    """The book stores a log tail's event rebuilt field by field (a copy would keep the text's memory):
    a field added to Event must be added there too, or it is lost."""
    from podmortem.aggregator.intake import without_text

    assert [f.name for f in pb.Event.DESCRIPTOR.fields] == [
        "id", "wall_time", "monotonic_ns", "error_file", "termination", "condition", "deletion", "log_tail",
        "activity", "capture",  # payloads of the oneof, like log_tail: a log tail's event has none of them
    ]  # fmt: skip
    assert [f.name for f in pb.LogTail.DESCRIPTOR.fields] == ["text", "truncated"]
    event = make_event(pb.LogTail(text=b"x" * 1000, truncated=False), "id-1", wall=T0 + 0.25, monotonic_ns=7)
    stripped = without_text(event, truncated=True)
    expected = pb.Event()
    expected.CopyFrom(event)
    expected.log_tail.text = b""
    expected.log_tail.truncated = True
    assert stripped == expected


async def test_a_decision_names_the_members_verified_against_the_api() -> None:
    # What may be acted on (a pod condition): members the pod watch resolved, or whose registration was
    # checked against their pod object; a member known only from an unauthenticated stream is not.
    book, rec, _ = make_book(world=3)
    unverified = register(book, "p-0", 0)
    checked = book.register(pb.Register(job=JOB, pod="p-1", rank=1, attempt="0"), verified=True)
    watched = book.observe_member(JobRef("ml", "llm", "PyTorchJob"), "0", Member(pod="p-2", namespace="ml"))
    assert [book.is_verified(k) for k in (unverified, checked, watched)] == [False, True, True]
    assert book.is_verified(register(book, "p-1", 1)) is True  # a later unverified stream does not unset it
    for key in (unverified, checked, watched):
        book.ingest(key, ended(1, T0 + 1), from_sidecar=True)
        book.disconnected(key)
    book.disconnected(checked)
    [decision] = rec.decisions
    assert decision.verified == frozenset({"p-1", "p-2"})
