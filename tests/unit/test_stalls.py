"""The stall desk: capture requests when every member is quiet or a member times out first, the
provisional verdict, its withdrawal on progress, and the bounds (timers on the fake loop clock)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from prometheus_client import CollectorRegistry

from podmortem.aggregator.decisions import Decision
from podmortem.aggregator.incidents import IncidentBook, MemberKey, Restored
from podmortem.aggregator.metrics import Metrics
from podmortem.aggregator.running import make_decide
from podmortem.aggregator.stalls import StallDesk
from podmortem.core.model import ErrorRecord, JobRef, Termination, Verdict
from podmortem.protocol.v1 import collector_pb2 as pb
from podmortem.protocol.wire import (
    activity_to_pb,
    capture_to_pb,
    error_to_pb,
    make_event,
    termination_to_pb,
    worker_capture_to_pb,
)

JOB = pb.JobRef(namespace="ml", name="llm", kind="PyTorchJob")
T0 = 1_800_000_000.0
TIMEOUT = (
    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 6000ms "
    "for recv operation to complete"
)


class Desk:
    """A book, a stall desk and one recording stream per member (what the server pushes on)."""

    def __init__(
        self,
        pods: int = 3,
        capturing: int | None = None,
        offload_members: int = 256,
        clock: Callable[[], float] = time.time,
        **options: float,
    ) -> None:
        self.decisions: list[Decision] = []
        self.metrics = Metrics(CollectorRegistry())
        self.book = IncidentBook(
            make_decide(),
            self._publish,
            quorum_timeout=60,
            default_world_size=pods,
            metrics=self.metrics,
            offload_members=offload_members,
            clock=clock,
        )
        self.desk = StallDesk(self.book, self.metrics, **options)  # type: ignore[arg-type]
        self.keys: list[MemberKey] = []
        self.pushed: dict[str, list[pb.CaptureRequest]] = {}
        for i in range(pods):
            reg = pb.Register(job=JOB, pod=f"llm-worker-{i}", rank=i, attempt="0", captures=True)
            key = self.book.register(reg)
            self.keys.append(key)
            self.pushed[key.pod] = []
            if capturing is None or i < capturing:
                self.desk.opened(key, self._recorder(key.pod))

    def _publish(self, decision: Decision) -> None:  # the publish queue's log and metrics publishers
        self.decisions.append(decision)
        self.metrics.observe_decision(decision)

    def _recorder(self, pod: str):  # type: ignore[no-untyped-def]
        def push(message: pb.AggregatorMessage) -> None:
            assert message.WhichOneof("body") == "capture_request"
            self.pushed[pod].append(message.capture_request)

        return push

    def send(self, i: int, event: pb.Event) -> None:
        """As the server does: the book takes the event, then the desk hears of it."""
        self.book.ingest(self.keys[i], event, from_sidecar=True)
        self.desk.ingested(self.keys[i], event)

    def quiet(self, i: int, quiet: bool = True, at: float = T0) -> None:
        self.send(i, make_event(activity_to_pb(quiet, 30.0 if quiet else 0.0, at - 30), wall=at))

    def answer(self, i: int, request: pb.CaptureRequest, stack: str = "", fr: str = "") -> None:
        worker = worker_capture_to_pb("control_plane", local_rank=0, global_rank=i, stack=stack, flight_recorder=fr)
        self.send(i, make_event(capture_to_pb(request.request_id, request.trigger, [worker]), wall=T0 + 40))

    def stall_answered(self) -> None:
        """Every member quiet, and every member answers the request that brings."""
        for i in range(len(self.keys)):
            self.quiet(i)
        for i, key in enumerate(self.keys):
            self.answer(i, self.pushed[key.pod][-1])

    def sample(self, name: str, labels: dict[str, str] | None = None) -> float | None:
        return self.metrics.registry.get_sample_value(name, labels or {})


STACK = 'Thread 0x01 (most recent call first):\n  File "/w/train.py", line 12 in load_batch\n'


@pytest.mark.looptime
async def test_a_job_is_stalled_only_when_every_member_is_quiet() -> None:
    d = Desk(pods=3)
    d.quiet(0)
    d.quiet(1)
    assert all(not asked for asked in d.pushed.values())
    d.quiet(2)
    requests = [asked[0] for asked in d.pushed.values()]
    assert {r.trigger for r in requests} == {"stall"} and len({r.request_id for r in requests}) == 1
    assert requests[0].request_id == "ml:llm:0/stall/1" and requests[0].timeout_seconds > 0
    assert d.sample("podmortem_capture_requests_total", {"trigger": "stall"}) == 3
    assert d.decisions == []  # the captures come first
    for i in range(3):
        d.answer(i, requests[i], STACK if i == 1 else "")
    [provisional] = d.decisions
    assert provisional.closed_by == "stall" and provisional.provisional and not provisional.final
    assert provisional.incident.provisional and provisional.incident.opened_at is None
    assert provisional.to_dict()["provisional"] is True and provisional.to_dict()["final"] is False
    captured = {m.pod: m.captures for m in provisional.incident.members}
    assert [c.stack for c in captured["llm-worker-1"]] == [STACK]
    assert captured["llm-worker-1"][0].trigger == "stall"
    category = provisional.verdict.category or "none"
    assert d.sample("podmortem_provisional_verdicts_total", {"category": category}) == 1
    assert d.sample("podmortem_verdicts_total", {"category": category}) == 0  # not a verdict on a failure
    assert d.book.open_incidents() == []  # nothing failed: no incident opened


@pytest.mark.looptime
async def test_members_that_do_not_answer_are_waited_for_at_most_the_capture_wait() -> None:
    d = Desk(pods=3, capture_wait=8.0)
    for i in range(3):
        d.quiet(i)
    d.answer(0, d.pushed["llm-worker-0"][0])
    await asyncio.sleep(7.9)
    assert d.decisions == []
    await asyncio.sleep(0.2)
    assert [x.closed_by for x in d.decisions] == ["stall"]


@pytest.mark.looptime
async def test_only_sidecars_that_answer_captures_are_asked() -> None:
    d = Desk(pods=3, capturing=2)
    for i in range(3):
        d.quiet(i)
    assert [len(asked) for asked in d.pushed.values()] == [1, 1, 0]
    d.answer(0, d.pushed["llm-worker-0"][0])
    d.answer(1, d.pushed["llm-worker-1"][0])
    assert [x.closed_by for x in d.decisions] == ["stall"]  # nobody else to wait for


@pytest.mark.looptime
async def test_progress_after_a_stall_withdraws_the_provisional_verdict_and_counts_a_false_alarm() -> None:
    d = Desk(pods=2, resume_grace=10.0)
    d.stall_answered()
    assert [x.closed_by for x in d.decisions] == ["stall"]
    d.quiet(1, quiet=False, at=T0 + 50)
    await asyncio.sleep(9.9)
    assert len(d.decisions) == 1 and d.sample("podmortem_stall_false_alarms_total") == 0
    await asyncio.sleep(0.2)
    assert [x.closed_by for x in d.decisions] == ["stall", "resumed"]
    withdrawn = d.decisions[1]
    assert (
        withdrawn.provisional and withdrawn.verdict.pod is None and "made progress again" in withdrawn.verdict.summary
    )
    assert withdrawn.revision == 2
    assert d.decisions[0].incident.stalled_at is not None and withdrawn.incident.stalled_at is None
    assert d.sample("podmortem_stall_false_alarms_total") == 1


@pytest.mark.looptime
async def test_a_failure_within_the_grace_makes_the_stall_real_not_a_false_alarm() -> None:
    # The first output after a stall is often the timeout itself: progress, then the error file.
    d = Desk(pods=2, resume_grace=10.0)
    d.stall_answered()
    d.quiet(0, quiet=False, at=T0 + 50)
    await asyncio.sleep(2)
    d.send(0, make_event(error_to_pb(ErrorRecord(message=TIMEOUT, timestamp=int(T0) + 51)), wall=T0 + 51))
    await asyncio.sleep(20)
    assert [x.closed_by for x in d.decisions] == ["stall"]
    assert d.sample("podmortem_stall_false_alarms_total") == 0
    for i in range(2):  # both end: the verdict on the failure still says when the job stalled (the page draws it)
        end = Termination(exit_code=1, reason="Error", finished_at=T0 + 52)
        d.send(i, make_event(termination_to_pb(end), f"end-{i}", wall=T0 + 52))
    await asyncio.sleep(1)
    stall, final = d.decisions
    assert final.closed_by == "quorum" and final.incident.stalled_at == stall.incident.stalled_at is not None


@pytest.mark.looptime
async def test_an_older_activity_resent_after_a_reconnect_does_not_undo_a_newer_one() -> None:
    d = Desk(pods=2)
    d.quiet(0, at=T0 + 10)
    d.quiet(0, quiet=False, at=T0 + 5)  # sent before the quiet one, resent late
    d.quiet(1, at=T0 + 10)
    assert [len(asked) for asked in d.pushed.values()] == [1, 1]


@pytest.mark.looptime
async def test_a_member_that_times_out_first_makes_every_member_capture_and_quorum_waits_for_them() -> None:
    d = Desk(pods=3, capture_wait=8.0)
    d.send(0, make_event(error_to_pb(ErrorRecord(message=TIMEOUT, timestamp=int(T0))), wall=T0))
    requests = {pod: asked for pod, asked in d.pushed.items()}
    assert all(len(asked) == 1 and asked[0].trigger == "first_timeout" for asked in requests.values())
    assert d.sample("podmortem_capture_requests_total", {"trigger": "first_timeout"}) == 3
    for i in range(3):
        end = Termination(exit_code=1, reason="Error", finished_at=T0 + 1 + i)
        d.send(i, make_event(termination_to_pb(end), f"end-{i}", wall=T0 + 1 + i))
    assert d.decisions == []  # every member reported, but the captures are still out
    d.answer(1, requests["llm-worker-1"][0], STACK)
    d.answer(2, requests["llm-worker-2"][0])
    assert d.decisions == []
    await asyncio.sleep(8.1)  # llm-worker-0 never answers
    [verdict] = d.decisions
    assert verdict.closed_by == "quorum" and verdict.final and not verdict.provisional
    assert [c.stack for m in verdict.incident.members for c in m.captures] == [STACK, ""]


@pytest.mark.looptime
async def test_a_first_failure_that_is_not_a_timeout_asks_for_nothing() -> None:
    d = Desk(pods=2)
    d.send(0, make_event(error_to_pb(ErrorRecord(message="ValueError: bad label", timestamp=int(T0))), wall=T0))
    assert all(not asked for asked in d.pushed.values())


@pytest.mark.looptime
async def test_capture_rounds_are_bounded_per_job_attempt() -> None:
    d = Desk(pods=2, max_rounds=2, resume_grace=1.0)
    for round_ in range(3):
        at = T0 + 100 * round_
        d.quiet(0, at=at)
        d.quiet(1, at=at)
        await asyncio.sleep(20)  # the capture wait passes, unanswered
        d.quiet(0, quiet=False, at=at + 50)
        await asyncio.sleep(2)  # the grace passes: a false alarm
    assert [len(asked) for asked in d.pushed.values()] == [2, 2]
    assert d.sample("podmortem_stall_false_alarms_total") == 3


@pytest.mark.looptime
async def test_a_flight_recorder_summary_that_does_not_read_is_a_note_and_the_stack_is_kept() -> None:
    d = Desk(pods=2)
    d.quiet(0)
    d.quiet(1)
    d.answer(0, d.pushed["llm-worker-0"][0], STACK, fr='{"version": 1, "rank": "not a rank"')
    member = d.book.member(d.keys[0])
    assert member is not None
    [capture] = member.captures
    assert capture.stack == STACK and capture.flight_recorder is None
    assert "flight recorder summary unreadable" in capture.note


@pytest.mark.looptime
async def test_a_capture_outside_the_proto_bounds_is_kept_as_a_refusal_note() -> None:
    d = Desk(pods=2)
    bad = pb.Capture(request_id="r", trigger="stall", workers=[pb.WorkerCapture(path="gdb", stack="x")])
    d.send(0, make_event(bad, "bad-capture", wall=T0))
    member = d.book.member(d.keys[0])
    assert member is not None and member.captures == ()
    kept = d.book.kept_event(d.keys[0], make_event(bad, "bad-capture", wall=T0))
    assert kept.capture.request_id == "r" and not kept.capture.workers
    assert "refused by the aggregator" in kept.capture.note and "gdb" in kept.capture.note
    nan = make_event(pb.Activity(quiet=True, quiet_seconds=float("nan")), "nan", wall=T0)
    d.send(1, nan)
    assert not d.book.stalled(d.keys[0].job)


@pytest.mark.looptime
async def test_a_stall_replayed_after_a_restart_is_asked_again_once_the_sidecars_are_back() -> None:
    d = Desk(pods=2, capturing=0, rejoin_delay=3.0)
    for key in d.keys:  # the state file replayed into the book: quiet members, no streams yet
        d.book.ingest(key, make_event(activity_to_pb(True, 30.0), wall=T0), from_sidecar=True)
    assert d.book.stalled(d.keys[0].job)
    for i, key in enumerate(d.keys):
        d.desk.opened(key, d._recorder(key.pod))
        await asyncio.sleep(1.0 * i)
    assert all(not asked for asked in d.pushed.values())
    await asyncio.sleep(2.5)
    assert [[r.trigger for r in asked] for asked in d.pushed.values()] == [["stall"], ["stall"]]


def restored_stall(d: Desk) -> None:
    """The state file replayed into the book: the stall's verdict out (its moment T0), every member quiet."""
    verdict = Verdict(pod="llm-worker-1", category="hang", retryable=True, summary="")
    pods = tuple(k.pod for k in d.keys)
    d.book.restore_decision(
        JobRef("ml", "llm", "PyTorchJob"), "0", Restored(verdict, 1, "stall", None, pods, False, T0)
    )
    for key in d.keys:
        d.book.disconnected(key)  # replayed without its stream, until its sidecar is back
        d.book.ingest(key, make_event(activity_to_pb(True, 30.0), wall=T0), from_sidecar=True)


@pytest.mark.looptime
async def test_a_stall_published_before_a_restart_is_not_asked_again_and_is_withdrawn_once_it_moves() -> None:
    d = Desk(pods=2, capturing=0, rejoin_delay=3.0, resume_grace=10.0)
    job = d.keys[0].job
    restored_stall(d)
    assert d.book.stalled(job) and d.book.stall_published(job) and not d.book.failed(job)
    d.desk.restored()
    for key in d.keys:
        d.desk.opened(key, d._recorder(key.pod))
    await asyncio.sleep(4)
    assert all(not asked for asked in d.pushed.values()) and d.decisions == []  # its captures were kept too
    d.quiet(0, quiet=False, at=T0 + 50)
    await asyncio.sleep(11)
    [withdrawn] = d.decisions
    assert (withdrawn.closed_by, withdrawn.revision, withdrawn.incident.stalled_at) == ("resumed", 2, None)
    assert not d.book.stall_published(job)
    assert d.sample("podmortem_stall_false_alarms_total") == 1


@pytest.mark.looptime
async def test_a_restored_stall_whose_sidecars_answer_no_captures_is_withdrawn_once_it_moves() -> None:
    # Its sidecars are back, none of them answering captures: nothing opens a capture stream, and the
    # stall still ends as a live one does, on the activity any sidecar sends.
    d = Desk(pods=2, capturing=0, resume_grace=10.0)
    restored_stall(d)
    d.desk.restored()
    for key in d.keys:
        d.book.register(pb.Register(job=JOB, pod=key.pod, attempt="0"))  # its stream, captures=false
    d.quiet(1, quiet=False, at=T0 + 50)
    await asyncio.sleep(10.1)
    assert [(x.closed_by, x.incident.stalled_at) for x in d.decisions] == [("resumed", None)]
    assert "made progress again" in d.decisions[0].verdict.summary


@pytest.mark.looptime
async def test_a_restored_stall_that_moved_before_the_restart_is_withdrawn_after_the_grace() -> None:
    d = Desk(pods=2, capturing=0, resume_grace=10.0)
    restored_stall(d)
    d.book.ingest(d.keys[0], make_event(activity_to_pb(False, 0.0), "moved", wall=T0 + 5), from_sidecar=True)
    d.desk.restored()  # the replayed activity says it moved: no sidecar needs to come back for that
    await asyncio.sleep(10.1)
    assert [x.closed_by for x in d.decisions] == ["resumed"]


@pytest.mark.looptime
async def test_a_restored_stall_of_which_nothing_is_heard_is_withdrawn_unconfirmed() -> None:
    d = Desk(pods=2, capturing=0, rejoin_wait=60.0)
    job = d.keys[0].job
    restored_stall(d)
    d.desk.restored()
    await asyncio.sleep(59.9)
    assert d.decisions == []
    await asyncio.sleep(0.2)
    [withdrawn] = d.decisions
    assert (withdrawn.closed_by, withdrawn.revision, withdrawn.incident.stalled_at) == ("resumed", 2, None)
    assert "nothing of the job was heard" in withdrawn.verdict.summary and "unconfirmed" in withdrawn.verdict.summary
    assert d.sample("podmortem_stall_false_alarms_total") == 0  # nothing moved
    assert not d.book.stall_published(job)


@pytest.mark.looptime
async def test_a_restored_stall_whose_sidecar_is_back_and_still_quiet_stays() -> None:
    d = Desk(pods=2, capturing=0, rejoin_wait=60.0)
    restored_stall(d)
    d.desk.restored()
    d.book.register(pb.Register(job=JOB, pod="llm-worker-0", attempt="0"))  # one sidecar back, quiet
    await asyncio.sleep(120)
    assert d.decisions == [] and d.book.stall_published(d.keys[0].job)  # a stall going on, as a live one


@pytest.mark.looptime
async def test_a_job_quiet_again_within_the_grace_is_asked_again_and_keeps_the_stalls_first_moment() -> None:
    # A silent start-up looks like a stall; the real hang may come within the grace after the first output:
    # asked again (the earlier stacks may be stale), the same stall going on (its moment is the first one).
    loop = asyncio.get_running_loop()
    d = Desk(pods=2, resume_grace=10.0, clock=lambda: T0 + loop.time())
    start = T0 + loop.time()
    for i in range(2):
        d.quiet(i)
    await asyncio.sleep(2)
    for i in range(2):
        d.answer(i, d.pushed[f"llm-worker-{i}"][0])
    d.quiet(0, quiet=False, at=T0 + 50)
    await asyncio.sleep(3)
    d.quiet(0, at=T0 + 60)
    assert [[r.request_id for r in asked] for asked in d.pushed.values()] == [
        ["ml:llm:0/stall/1", "ml:llm:0/stall/2"]
    ] * 2
    await asyncio.sleep(2)
    for i in range(2):
        d.answer(i, d.pushed[f"llm-worker-{i}"][1])
    first, again = d.decisions
    assert (first.closed_by, again.closed_by, again.revision) == ("stall", "stall", 2)
    assert first.decided_at == start + 2 and again.decided_at == start + 7
    assert first.incident.stalled_at == again.incident.stalled_at == start  # first seen, not when published
    assert d.sample("podmortem_stall_false_alarms_total") == 0  # nothing was withdrawn


@pytest.mark.looptime
async def test_a_stall_seen_again_while_its_captures_are_out_keeps_its_first_moment() -> None:
    loop = asyncio.get_running_loop()
    d = Desk(pods=2, resume_grace=10.0, capture_wait=8.0, clock=lambda: T0 + loop.time())
    start = T0 + loop.time()
    for i in range(2):
        d.quiet(i)
    await asyncio.sleep(1)
    d.quiet(1, quiet=False, at=T0 + 50)  # a line of output while the first round is out ...
    d.quiet(1, at=T0 + 51)  # ... and quiet again: the first round is dropped, a second one asked
    await asyncio.sleep(8.1)  # nobody answers it
    [stall] = d.decisions
    assert stall.decided_at == start + 9 and stall.incident.stalled_at == start  # the second round timed out
    assert [len(asked) for asked in d.pushed.values()] == [2, 2]


@pytest.mark.looptime
async def test_a_stall_after_progress_that_outlasted_the_grace_is_a_new_one() -> None:
    loop = asyncio.get_running_loop()
    d = Desk(pods=2, resume_grace=10.0, clock=lambda: T0 + loop.time())
    start = T0 + loop.time()
    d.stall_answered()
    d.quiet(0, quiet=False, at=T0 + 50)
    await asyncio.sleep(10.1)  # the grace passes: withdrawn
    await asyncio.sleep(5)
    d.quiet(0, at=T0 + 70)
    for i in range(2):
        d.answer(i, d.pushed[f"llm-worker-{i}"][-1])
    stall, withdrawn, again = d.decisions
    assert (stall.closed_by, withdrawn.closed_by, again.closed_by) == ("stall", "resumed", "stall")
    assert stall.incident.stalled_at == start and again.incident.stalled_at == start + 15.1


async def test_a_large_job_is_decided_off_the_loop_and_a_failure_meanwhile_takes_over() -> None:
    d = Desk(pods=3, offload_members=2)
    d.stall_answered()
    assert d.decisions == []  # in a worker thread: the loop goes on acknowledging
    for _ in range(200):
        await asyncio.sleep(0.01)
        if d.decisions:
            break
    assert [x.closed_by for x in d.decisions] == ["stall"]
    # A second stall, and the job fails while its verdict is decided: no provisional verdict after the failure.
    d.quiet(0, quiet=False, at=T0 + 50)
    d.quiet(0, at=T0 + 60)
    for i in range(3):
        d.answer(i, d.pushed[f"llm-worker-{i}"][-1])
    d.send(0, make_event(error_to_pb(ErrorRecord(message=TIMEOUT, timestamp=int(T0) + 70)), wall=T0 + 70))
    await asyncio.sleep(0.5)
    assert [x.closed_by for x in d.decisions] == ["stall"]


def ended(d: Desk, i: int, exit_code: int | None = 0, reason: str = "Completed") -> None:
    """Member `i`'s container ended, as the pod watch tells it: into the book, then its end to the desk
    (its sidecar says nothing more)."""
    end = Termination(exit_code=exit_code, reason=reason, finished_at=T0 + 90)
    event = make_event(termination_to_pb(end), f"watched-end-{i}", wall=T0 + 90)
    d.book.ingest(d.keys[i], event)
    d.desk.ended(d.keys[i])


@pytest.mark.looptime
async def test_a_stall_whose_members_all_end_successfully_is_withdrawn_as_a_false_alarm() -> None:
    # Quiet for the stall-after, then every pod completes (a long silent checkpoint, say) and no sidecar says
    # anything more: the job is over, and its provisional hang verdict does not outlive it.
    d = Desk(pods=2)
    job = d.keys[0].job
    d.stall_answered()
    ended(d, 0)
    assert [x.closed_by for x in d.decisions] == ["stall"]  # one member still runs: the stall may go on
    ended(d, 1)
    _, withdrawn = d.decisions
    assert (withdrawn.closed_by, withdrawn.provisional, withdrawn.revision) == ("resumed", True, 2)
    assert withdrawn.verdict.pod is None and withdrawn.incident.stalled_at is None
    assert "ended successfully" in withdrawn.verdict.summary and "false alarm" in withdrawn.verdict.summary
    assert d.sample("podmortem_stall_false_alarms_total") == 1
    assert not d.book.stall_published(job) and not d.book.stalled(job) and d.book.open_incidents() == []
    d.quiet(0, at=T0 + 95)  # a last activity, resent: an ended job is not stalled again
    await asyncio.sleep(60)
    assert len(d.decisions) == 2 and [len(asked) for asked in d.pushed.values()] == [1, 1]


@pytest.mark.looptime
async def test_a_stall_whose_sidecars_report_success_is_withdrawn_too() -> None:
    d = Desk(pods=2)
    d.stall_answered()
    for i in range(2):  # each sidecar's own report of its container's end (exit code 0)
        end = Termination(exit_code=0, reason="Completed", finished_at=T0 + 90)
        d.send(i, make_event(termination_to_pb(end), f"end-{i}", wall=T0 + 90))
    assert [x.closed_by for x in d.decisions] == ["stall", "resumed"]
    assert d.sample("podmortem_stall_false_alarms_total") == 1


@pytest.mark.looptime
async def test_a_job_that_ends_successfully_while_its_stall_captures_are_out_gets_no_provisional_verdict() -> None:
    d = Desk(pods=2, capture_wait=8.0)
    for i in range(2):
        d.quiet(i)
    ended(d, 0)
    ended(d, 1)
    await asyncio.sleep(20)  # the capture wait passes: nobody answered, and there is nothing to publish
    assert d.decisions == [] and not d.book.stall_published(d.keys[0].job)
    assert d.sample("podmortem_stall_false_alarms_total") == 1  # seen, and it was not a hang


async def test_a_large_job_that_ends_successfully_while_its_stall_is_decided_gets_no_provisional_verdict() -> None:
    d = Desk(pods=3, offload_members=2)
    d.stall_answered()  # decided in a worker thread
    for i in range(3):
        ended(d, i)
    for _ in range(50):
        await asyncio.sleep(0.01)
    assert d.decisions == []  # nothing was out to withdraw, and the decision that landed is dropped


@pytest.mark.looptime
async def test_a_stall_whose_members_end_with_no_known_success_is_withdrawn_unconfirmed() -> None:
    # A container's end the kubelet could not tell (no exit code, no signal): not a failure, not a success.
    d = Desk(pods=2)
    d.stall_answered()
    for i in range(2):
        ended(d, i, exit_code=None, reason="ContainerStatusUnknown")
    [_, withdrawn] = d.decisions
    assert withdrawn.closed_by == "resumed" and "unconfirmed" in withdrawn.verdict.summary
    assert d.sample("podmortem_stall_false_alarms_total") == 0


@pytest.mark.looptime
async def test_a_stall_whose_members_fail_gets_the_verdict_on_the_failure_not_a_withdrawal() -> None:
    d = Desk(pods=2)
    d.stall_answered()
    for i, key in enumerate(d.keys):
        ended(d, i, exit_code=1, reason="Error")
        d.book.disconnected(key)  # its sidecar stopped: quorum takes the pod watch's word
    await asyncio.sleep(1)
    stall, final = d.decisions
    assert (final.closed_by, final.final) == ("quorum", True)
    assert final.incident.stalled_at == stall.incident.stalled_at is not None
    assert d.sample("podmortem_stall_false_alarms_total") == 0


@pytest.mark.looptime
async def test_a_restored_stall_whose_members_ended_successfully_is_withdrawn_at_start_up() -> None:
    d = Desk(pods=2, capturing=0, rejoin_wait=60.0)
    restored_stall(d)
    for i, key in enumerate(d.keys):  # the state file replayed their ends too
        end = Termination(exit_code=0, reason="Completed", finished_at=T0 + 90)
        d.book.ingest(key, make_event(termination_to_pb(end), f"end-{i}", wall=T0 + 90), from_sidecar=True)
    d.desk.restored()
    [withdrawn] = d.decisions
    assert (withdrawn.closed_by, withdrawn.revision) == ("resumed", 2)
    assert "ended successfully" in withdrawn.verdict.summary
    await asyncio.sleep(120)
    assert len(d.decisions) == 1  # the rejoin wait was never started
