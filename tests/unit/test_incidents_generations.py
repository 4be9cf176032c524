"""Pods a job controller recreates after a final verdict (new names, no attempt to tell the runs apart)
start a new incident of the job, not a revision of the decided one."""

from __future__ import annotations

from podmortem.aggregator.decisions import Decision
from podmortem.aggregator.incidents import IncidentBook, MemberKey
from podmortem.aggregator.running import make_decide
from podmortem.core.model import ErrorRecord, Termination
from podmortem.protocol.v1 import collector_pb2 as pb
from podmortem.protocol.wire import error_to_pb, make_event, termination_to_pb

JOB = pb.JobRef(namespace="ml", name="ddp", kind="Job")
T0 = 1_800_000_000.0


def register(book: IncidentBook, pod: str) -> MemberKey:
    return book.register(pb.Register(job=JOB, pod=pod, world_size_hint=2))


def fail(book: IncidentBook, key: MemberKey, message: str, at: float) -> None:
    rec = ErrorRecord(message=message, exception_type=message.split(":")[0], timestamp=int(at))
    book.ingest(key, make_event(error_to_pb(rec), f"{key.pod}/error", wall=at), from_sidecar=True)
    end = Termination(exit_code=1, reason="Error", finished_at=at + 1)
    book.ingest(key, make_event(termination_to_pb(end), f"{key.pod}/end", wall=at + 1), from_sidecar=True)


def stop(book: IncidentBook, key: MemberKey, at: float) -> None:
    end = Termination(exit_code=143, reason="Error", finished_at=at)
    book.ingest(key, make_event(termination_to_pb(end), f"{key.pod}/end", wall=at), from_sidecar=True)


async def test_recreated_pods_after_a_final_verdict_are_a_new_incident() -> None:
    decisions: list[Decision] = []
    book = IncidentBook(make_decide(), decisions.append, quorum_timeout=3600)
    a, b = register(book, "ddp-0-aaaaa"), register(book, "ddp-1-bbbbb")
    fail(book, a, "KeyError: 'label'", T0)
    stop(book, b, T0 + 5)
    assert [d.incident.incident_id for d in decisions] == ["ml:ddp"] and decisions[0].final
    # The job controller recreates both pods; one fails with a CUDA OOM.
    c, d = register(book, "ddp-0-ccccc"), register(book, "ddp-1-ddddd")
    assert c.job == d.job == ("ml", "ddp", "g2")
    assert register(book, "ddp-0-aaaaa").job == a.job  # a member of the decided run reconnecting stays
    fail(book, d, "torch.OutOfMemoryError: CUDA out of memory", T0 + 100)
    stop(book, c, T0 + 105)
    assert [x.incident.incident_id for x in decisions] == ["ml:ddp", "ml:ddp:g2"]
    first, second = decisions
    assert first.verdict.pod == "ddp-0-aaaaa" and first.verdict.category == "user_code"
    assert second.verdict.pod == "ddp-1-ddddd" and second.verdict.category == "gpu_oom"
    assert {m.pod for m in second.incident.members} == {"ddp-0-ccccc", "ddp-1-ddddd"}


async def test_a_late_member_before_the_verdict_is_final_joins_the_same_incident() -> None:
    decisions: list[Decision] = []
    book = IncidentBook(make_decide(), decisions.append, quorum_timeout=3600)
    a = register(book, "ddp-0-aaaaa")
    fail(book, a, "KeyError: 'label'", T0)
    assert decisions == []  # 1 of 2 reported: open
    b = register(book, "ddp-1-bbbbb")
    assert b.job == a.job
