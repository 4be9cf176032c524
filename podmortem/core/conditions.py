"""The condition a failed member pod carries, so that Kubernetes' retry machinery follows the root cause.

A Job's `podFailurePolicy` (and through it a JobSet's `failurePolicy`) can match any pod condition. So the
aggregator writes exactly one of three onto each failed member pod, before the pod can be terminal:

* `podmortem.io/Victim` — it failed because another member failed: a plain echo (peer closed, collective
  timeout, rendezvous store lost, SIGTERM of the teardown). A policy `Ignore`s it: one bug on one rank does
  not use up the budget of every pod.
* `podmortem.io/PermanentFailure` — it failed on its own and its category says a retry as is fails the same
  way (`user_code`, `gpu_oom`, `host_oom`, `crash`, or a rule's override). A policy fails the job. Written
  only when the verdict's confidence reaches the threshold (`--permanent-confidence`): a job is never told to
  give up on a guess.
* `podmortem.io/RetryableFailure` — it failed on its own and a retry is expected to help. A policy counts it.

`decide` is pure: from the member's own evidence (`assess.assess`) and the incident's verdict as known at
that moment. It returns None — no condition, Kubernetes' default applies — for a member that did not fail,
for one whose own failure cannot be told apart from an echo (a bare exit code, a SIGKILL from outside, the
member its victims name whose own cause was never recorded), and for a guessed permanent failure. The
choices that keep a retry budget honest:

* the member the verdict names as the root is never a Victim (a hang's stuck rank often shows only the
  teardown's SIGTERM: marked Victim, every member of the incident would be ignored and the job retried for
  ever);
* a member whose every peer in the incident was already marked Victim is not one either: somebody failed
  first, and if nobody can say who, the default (counted) applies to the last one;
* a member other than the root that failed on its own is RetryableFailure when its own category is
  retryable; PermanentFailure only when the incident's verdict is itself permanent and confident (the job
  fails either way); else nothing.

The message is one line naming the incident's root pod and category (or saying the root had not reported
yet when this pod's condition was decided: a victim is marked as soon as its own echo is known).
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from podmortem.core.assess import Finding, assess
from podmortem.core.categories import condition_reason
from podmortem.core.model import Incident, Member, Verdict
from podmortem.core.names import DISRUPTION_TARGET, PERMANENT, RETRYABLE, VICTIM, VICTIM_REASON, ConditionType
from podmortem.core.rules import DEFAULT_RULES, RuleSet

# The default of `--permanent-confidence`: on fresh public logs, verdicts at or above it named the right pod
# every time (`bench/realworld.py --calibration`; figures in docs/engine.md). Not to be lowered.
PERMANENT_CONFIDENCE = 0.9
MAX_MESSAGE = 512
# A SIGKILL from outside (exit code 137, not OOMKilled) is classified as the teardown's echo, but is not a
# plain one: an OOM killer or a runtime that kills one process also leaves it.
_NOT_PLAIN = frozenset({"exit.sigkill"})


@dataclass(frozen=True)
class PodCondition:
    """One pod's condition as decided (status is always "True"; the time is the writer's)."""

    pod: str
    type: ConditionType
    reason: str
    message: str


def plain_echo(finding: Finding) -> bool:
    """Did this member fail only with the echo of someone else's failure, and show nothing of its own?

    A member that timed out with ranks of its own that never raised, or whose ranks timed out in different
    collectives, may host the stuck rank (the engine's hang attribution): not plain."""
    if finding.role != "secondary" or finding.rule is None:
        return False
    if finding.silent_ranks or finding.desync:
        return False
    return finding.rule.id not in _NOT_PLAIN


def ready(
    member: Member, incident: Incident, rules: RuleSet = DEFAULT_RULES, *, finding: Finding | None = None
) -> bool:
    """May this member's condition be decided now, without waiting for its peers' first evidence?

    Yes for a plain echo (a Victim even before the root reported) and for a member that did not fail; and
    once every expected member has shown something (a failure, or its end). A member that failed on its
    own waits otherwise: the root usually ends a second or more before its victims, and a failure that
    looks like its own may yet turn out to follow an earlier one. `finding`: the member's assessment when
    the caller has it already (else it is assessed here)."""
    finding = assess(member, rules) if finding is None else finding
    if plain_echo(finding) or not finding.failed:
        return True
    if len(incident.members) < incident.world_size:
        return False
    return all(m.pod == member.pod or shown(m) for m in incident.members)


def shown(member: Member) -> bool:
    """Has this member shown anything of a failure or its end yet? Read from the member's facts alone, not
    assessed: it is asked of every member each time a held pod looks again."""
    return (
        member.error is not None
        or member.ended
        or member.deleted_at is not None
        or any(c.type == DISRUPTION_TARGET and c.status == "True" for c in member.conditions)
    )


def decide(
    member: Member,
    incident: Incident,
    verdict: Verdict | None,
    *,
    rules: RuleSet = DEFAULT_RULES,
    permanent_confidence: float = PERMANENT_CONFIDENCE,
    victims: AbstractSet[str] = frozenset(),
    finding: Finding | None = None,
) -> PodCondition | None:
    """The condition of `member` (None: write none), given the incident and its verdict as known now.

    `victims`: the pods of this incident already marked Victim (to keep one member unmarked). O(1) in the
    number of members: it is asked of every member of a job failing at once. `finding`: the member's
    assessment when the caller has it already (else it is assessed here)."""
    finding = assess(member, rules) if finding is None else finding
    if not finding.failed:
        return None
    tag = f"incident {incident.incident_id or incident.job.key}"
    root = verdict.pod if verdict is not None else None
    if root == member.pod:
        assert verdict is not None
        return _root_condition(member.pod, finding, verdict, permanent_confidence, tag)
    if plain_echo(finding):
        others = len(incident.members) - 1
        marked = len(victims) - (member.pod in victims)
        if len(incident.members) >= incident.world_size and 0 < others <= marked:
            return None  # every other member is a victim already: this one may be the root
        assert finding.rule is not None
        why = finding.rule.describe()
        return PodCondition(member.pod, VICTIM, VICTIM_REASON, _line(f"{why}; {_root_words(verdict)} ({tag})"))
    if finding.role != "primary" or finding.weak or finding.rule is None or finding.category is None:
        return None  # its own failure cannot be told apart from an echo
    category = finding.category
    own = f"failed on its own ({category}): {finding.text.strip()[:160]}"
    if finding.rule.is_retryable:
        return PodCondition(
            member.pod, RETRYABLE, condition_reason(category), _line(f"{own}; {_root_words(verdict)} ({tag})")
        )
    if verdict is not None and verdict.retryable is False and verdict.confidence >= permanent_confidence:
        return PodCondition(
            member.pod, PERMANENT, condition_reason(category), _line(f"{own}; {_root_words(verdict)} ({tag})")
        )
    return None


def _root_condition(
    pod: str, finding: Finding, verdict: Verdict, permanent_confidence: float, tag: str
) -> PodCondition | None:
    category = verdict.category
    if category is None or verdict.retryable is None:
        return None  # the root, but its own cause was not recorded
    if finding.role == "secondary" and not (finding.silent_ranks or finding.desync):
        return None  # named the root, with nothing of its own but an echo
    if finding.role == "primary" and finding.weak and finding.source == "termination":
        return None  # a bare exit code: what any member that died of anything shows
    head = f"root pod {pod} failed first: {category}"
    detail = f" — {verdict.message}" if verdict.message else ""
    if verdict.retryable:
        text = f"{head}, retryable (confidence {verdict.confidence:.2f}){detail} ({tag})"
        return PodCondition(pod, RETRYABLE, condition_reason(category), _line(text))
    if verdict.confidence >= permanent_confidence:
        text = f"{head}, not retryable (confidence {verdict.confidence:.2f}){detail} ({tag})"
        return PodCondition(pod, PERMANENT, condition_reason(category), _line(text))
    return None  # permanent on a guess: no condition, Kubernetes' default (counted) applies


def _root_words(verdict: Verdict | None) -> str:
    if verdict is None or verdict.pod is None or verdict.category is None:
        return "the root had not reported its own failure when this was decided"
    return f"root pod {verdict.pod} failed first: {verdict.category}"


def _line(text: str) -> str:
    one = " ".join(text.split())
    return one if len(one) <= MAX_MESSAGE else one[: MAX_MESSAGE - 1] + "…"
