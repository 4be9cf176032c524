"""The rule that stops a retry when the failure repeats (`core.repeats`), and the job's history bounds."""

from __future__ import annotations

from podmortem.aggregator.history import AttemptHistory
from podmortem.core.conditions import PERMANENT, RETRYABLE, PodCondition
from podmortem.core.repeats import Attempt, escalate, recorded, run_length

RETRY = PodCondition("p", RETRYABLE, "Network", "root pod p failed first: network")


def at(
    attempt: str, signature: str = "network:aa", when: float = 0.0, confidence: float = 0.95, **kw: object
) -> Attempt:
    category = str(kw.pop("category", signature.split(":")[0]))
    return Attempt(attempt, category, signature, when, confidence, True, **kw)  # type: ignore[arg-type]


def go(current: Attempt, history: list[Attempt], limit: int = 2, root: bool = True) -> PodCondition:
    return escalate(RETRY, current, history, limit=limit, permanent_confidence=0.9, root=root)


def test_the_second_identical_attempt_is_permanent_and_names_the_attempts() -> None:
    out = go(at("1", when=2), [at("0", when=1)])
    assert (out.type, out.reason) == (PERMANENT, "RepeatedFailure")
    assert "attempt 0, attempt 1" in out.message and "network:aa" in out.message


def test_the_first_attempt_a_different_signature_and_off_stay_retryable() -> None:
    assert go(at("0"), []) is RETRY
    assert go(at("1", "network:bb"), [at("0")]) is RETRY
    assert go(at("1"), [at("0")], limit=0) is RETRY


def test_a_different_signature_in_between_resets_the_count() -> None:
    history = [at("2", when=3), at("1", "user_code:zz", when=2), at("0", when=1)]
    assert go(at("3", when=4), history, limit=3) is RETRY
    assert go(at("3", when=4), [at("2", when=3), at("1", when=2)], limit=3).type == PERMANENT


def test_its_own_attempt_in_the_history_is_not_a_previous_one() -> None:
    assert go(at("1"), [at("1")]) is RETRY  # a revision of the same attempt


def test_preemption_a_guess_and_a_non_root_never_escalate() -> None:
    assert go(at("1", "preemption:aa"), [at("0", "preemption:aa")]) is RETRY
    assert go(at("1", confidence=0.5), [at("0")]) is RETRY
    assert go(at("1"), [at("0", confidence=0.5)]) is RETRY  # both verdicts must be confident
    assert go(at("1"), [at("0")], root=False) is RETRY
    victim = PodCondition("p", "podmortem.io/Victim", "Victim", "m")
    assert escalate(victim, at("1"), [at("0")], limit=2, permanent_confidence=0.9, root=True) is victim


def test_node_lost_on_another_node_is_another_signature() -> None:
    """The node is part of a node_lost signature (`core.signature`): another node never repeats."""
    assert go(at("1", "node_lost:n2"), [at("0", "node_lost:n1")]) is RETRY


def test_run_length_and_recorded_keep_the_newest_per_attempt() -> None:
    history = recorded([at("0", when=1)], at("1", when=2))
    history = recorded(history, at("1", "network:bb", when=3))  # a revision replaces its attempt
    assert [a.attempt for a in history] == ["1", "0"] and history[0].signature == "network:bb"
    assert run_length(history, at("2", "network:bb", when=4)) == 2
    assert len(recorded([at(str(i), when=i) for i in range(20)], at("x", when=99), keep=8)) == 8


def test_history_is_bounded_per_job_and_in_all() -> None:
    h = AttemptHistory(max_jobs=3, per_job=2)
    for i in range(5):
        h.record("uid-a", at(str(i), when=i))
    assert [a.attempt for a in h.get("uid-a")] == ["4", "3"]
    for uid in ("b", "c", "d"):
        h.record(uid, at("0"))
    assert len(h) == 3 and h.get("uid-a") == ()
    assert h.record("", at("0")) == ()  # no uid: not a job we can tell apart


def test_an_annotation_entry_is_read_back_or_refused() -> None:
    entry = at("1", when=5.5, node="n")
    assert Attempt.from_dict(entry.to_dict()) == entry
    bad: object
    for bad in (None, [], {"attempt": "1"}, {**entry.to_dict(), "decidedAt": "x"}, {**entry.to_dict(), "signature": 3}):
        assert Attempt.from_dict(bad) is None


def test_the_jobs_own_limit_is_an_integer_0_to_8_or_ignored(caplog: object) -> None:
    from podmortem.aggregator.kube.repeats import REPEAT_LIMIT_ANNOTATION, repeat_limit

    assert repeat_limit({}, "ns/j") is None
    assert repeat_limit({REPEAT_LIMIT_ANNOTATION: " 3 "}, "ns/j") == 3
    assert repeat_limit({REPEAT_LIMIT_ANNOTATION: "0"}, "ns/j") == 0
    for bad in ("9", "-1", "two", "", "2.5"):
        assert repeat_limit({REPEAT_LIMIT_ANNOTATION: bad}, "ns/j") is None


def test_explain_says_whether_the_failure_repeats_and_lists_the_attempts() -> None:
    import json

    from podmortem.kubectl_plugin import render

    history = [at("1", when=2).to_dict(), at("0", when=1).to_dict()]

    def shown(**doc: object) -> str:
        obj = {"kind": "JobSet", "metadata": {"name": "llm", "annotations": {"podmortem.io/verdict": json.dumps(doc)}}}
        text = render(obj)
        assert text is not None
        return text

    text = shown(signature="network:aa", repeats=2, attemptHistory=history)
    assert "Repeats:        same failure on 2 attempts in a row (signature network:aa)" in text
    assert "  1         network     network:aa" in text and "  0         network     network:aa" in text
    assert "not a repeat of the attempt before" in shown(signature="network:bb", repeats=1, attemptHistory=history)
    assert "Repeats:" not in shown(summary="an older verdict, without history")


def test_the_annotation_keeps_the_jobs_attempts_across_an_aggregator_that_forgot_them() -> None:
    """An aggregator restarted without --state-dir publishes attempt 2 knowing nothing: the attempts the job's
    object already carries are kept (for this uid only), and this one is added when it is the job's own."""
    import json

    from podmortem.aggregator.decisions import Decision
    from podmortem.aggregator.kube.publish import VERDICT_ANNOTATION, earlier_attempts, verdict_document
    from podmortem.core.model import Incident, JobRef, Verdict

    stored = {"metadata": {"uid": "u1", "annotations": {VERDICT_ANNOTATION: json.dumps(
        {"attemptHistory": [at("1", when=2).to_dict(), at("0", when=1).to_dict(), {"attempt": 7}]})}}}  # fmt: skip
    earlier = earlier_attempts(stored, "u1")
    assert [a.attempt for a in earlier] == ["1", "0"]  # the malformed entry skipped
    assert earlier_attempts(stored, "u2") == ()  # another job of the same name
    assert earlier_attempts({"metadata": {"uid": "u1", "annotations": {VERDICT_ANNOTATION: "{"}}}, "u1") == ()
    incident = Incident(JobRef("ns", "llm", "JobSet", "u1"), 3, (), attempt="2", incident_id="ns:llm:2")
    verdict = Verdict(pod="p", category="network", retryable=True, summary="", confidence=0.95)

    def written(own: bool) -> list[str]:
        decision = Decision(incident, verdict, 3.0, 1, "quorum", 3, attempt=at("2", when=3), own_attempt=own)
        return [a["attempt"] for a in verdict_document(decision, earlier)["attemptHistory"]]

    assert written(own=True) == ["2", "1", "0"]
    assert written(own=False) == ["1", "0"]
