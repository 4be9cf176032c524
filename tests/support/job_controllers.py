"""A small model of how the Job and JobSet controllers act on failed pods and Jobs, for tests only.

Not a mock of podmortem: podmortem's code never calls it. It answers "what would Kubernetes do with these
pods under this policy", following the controllers' documented behaviour (docs/retries.md has the
sources), so that tests can apply the policy `podmortem policy` prints to pods as they stood when their
sidecars exited. What it models, and where each rule comes from:

Job controller (kubernetes/kubernetes `pkg/controller/job`):
- With a `podFailurePolicy`, a pod counts as failed only once its phase is `Failed` (`isPodFailed`:
  `onlyReplaceFailedPods` is true whenever a podFailurePolicy is set); a pod being deleted is not yet.
- `matchPodFailurePolicy` (`pod_failure_policy.go`): rules in order, the first that matches decides.
  `onExitCodes` looks at terminated containers with a non-zero exit code, regular containers first,
  then init containers; `containerName` narrows it, else every container is seen. `onPodConditions`
  matches a condition of the same type and status. An action it does not know skips the rule. No
  match: the failure is counted.
- `Ignore`: not counted; `Count`: counted against `backoffLimit`; `FailJob`: the Job gets
  `FailureTarget` with reason `PodFailurePolicy` and the message
  `Pod NS/NAME has condition TYPE matching FailJob rule at index N` (or, for an exit-code rule,
  `Container C for pod NS/NAME failed with exit code X matching FailJob rule at index N`).
  More counted failures than `backoffLimit`: `FailureTarget` with reason `BackoffLimitExceeded`.
- Since 1.31 the terminal `Failed` condition (same reason and message) is added only once no pod of
  the Job is still running or terminating (website: job.md, "Terminal Job conditions").

JobSet controller (kubernetes-sigs/jobset `pkg/controllers/failure_policy.go`, v0.12.0):
- A child Job counts as failed once it has `Failed=True` (`JobFinished`); `FailureTarget` alone is not.
- No `failurePolicy`: the JobSet fails on its first failed child Job.
- Otherwise rules in order; for each, every failed child Job is tried (`onJobFailureReasons`: the
  Failed condition's reason is listed, or none listed; `onJobFailureMessagePatterns`: any pattern found
  anywhere in the message, Go `regexp.MatchString`, or none listed; `targetReplicatedJobs`). The first
  rule that matches any failed child decides. No rule matches: `RestartJobSet`.
- `RestartJobSet`: restart if `restarts < maxRestarts`, else the JobSet fails;
  `RestartJobSetAndIgnoreMaxRestarts`: restart; `FailJobSet`: fail.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import re2

JSON = dict[str, Any]


def pod(
    name: str,
    *,
    exit_code: int,
    conditions: tuple[JSON, ...] = (),
    sidecar_exit: int | None = 0,
    phase: str = "Failed",
    namespace: str = "team-a",
) -> JSON:
    """A pod as it stands when its native sidecar exited: the training container terminated, the sidecar too."""
    status: JSON = {
        "phase": phase,
        "conditions": list(conditions),
        "containerStatuses": [{"name": "pytorch", "state": {"terminated": {"exitCode": exit_code}}}],
    }
    if sidecar_exit is not None:
        status["initContainerStatuses"] = [
            {"name": "podmortem-sidecar", "state": {"terminated": {"exitCode": sidecar_exit}}}
        ]
    return {"metadata": {"name": name, "namespace": namespace}, "status": status}


def condition(ctype: str, reason: str = "", status: str = "True") -> JSON:
    return {"type": ctype, "status": status, "reason": reason or ctype.rpartition("/")[2], "message": "m"}


# -- Job ---------------------------------------------------------------------------------------------


def _exit_code_match(pod_: JSON, req: JSON) -> JSON | None:
    status = pod_.get("status") or {}
    for statuses in (status.get("containerStatuses") or [], status.get("initContainerStatuses") or []):
        for cs in statuses:
            term = (cs.get("state") or {}).get("terminated")
            if term is None:
                continue
            if req.get("containerName") not in (None, cs["name"]):
                continue
            code = term.get("exitCode", 0)
            if code == 0:
                continue
            inside = code in req.get("values", [])
            if (req["operator"] == "In" and inside) or (req["operator"] == "NotIn" and not inside):
                return dict(cs)
    return None


def _condition_match(pod_: JSON, patterns: list[JSON]) -> JSON | None:
    for c in (pod_.get("status") or {}).get("conditions") or []:
        for p in patterns:
            if c.get("type") == p["type"] and c.get("status") == p.get("status", "True"):
                return dict(c)
    return None


def match_pod_failure_policy(policy: JSON | None, pod_: JSON) -> tuple[str | None, str | None]:
    """(action, FailJob message) for a failed pod; (None, None) when no rule matches (the pod is counted)."""
    if policy is None:
        return None, None
    meta = pod_["metadata"]
    for index, rule in enumerate(policy.get("rules") or []):
        action = rule["action"]
        if action not in ("Ignore", "Count", "FailJob"):
            continue  # "Clients should react to an unknown action by skipping the rule."
        if rule.get("onExitCodes") is not None:
            cs = _exit_code_match(pod_, rule["onExitCodes"])
            if cs is None:
                continue
            message = (
                f"Container {cs['name']} for pod {meta['namespace']}/{meta['name']} failed with exit code "
                f"{cs['state']['terminated']['exitCode']} matching {action} rule at index {index}"
            )
        elif rule.get("onPodConditions") is not None:
            c = _condition_match(pod_, rule["onPodConditions"])
            if c is None:
                continue
            who = f"{meta['namespace']}/{meta['name']}"
            message = f"Pod {who} has condition {c['type']} matching {action} rule at index {index}"
        else:
            continue
        return action, message if action == "FailJob" else None
    return None, None


@dataclass
class JobModel:
    """One batch Job's failure handling: feed it pods as they turn terminal, read what it decided."""

    name: str
    pod_failure_policy: JSON | None
    backoff_limit: int = 6
    replicated_job: str = ""
    failed: int = 0  # status.failed as far as backoffLimit is concerned
    ignored: int = 0
    seen: set[str] = field(default_factory=set)
    failure_target: tuple[str, str] | None = None  # (reason, message)
    failed_condition: tuple[str, str] | None = None
    failed_at: int | None = None  # the model's step at which Failed was set

    def observe(self, pod_: JSON) -> str | None:
        """The Job controller syncs with this pod in its current state; the action taken on it, if any."""
        name = pod_["metadata"]["name"]
        if name in self.seen or self.failure_target is not None:
            return None
        phase = (pod_.get("status") or {}).get("phase")
        if phase != "Failed":
            return None  # with a podFailurePolicy, a running or terminating pod is not failed yet
        self.seen.add(name)
        action, message = match_pod_failure_policy(self.pod_failure_policy, pod_)
        if action == "Ignore":
            self.ignored += 1
            return action
        if action == "FailJob":
            assert message is not None
            self.failure_target = ("PodFailurePolicy", message)
            return action
        self.failed += 1
        if self.failed > self.backoff_limit:
            self.failure_target = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
        return action or "Count"

    def settle(self, step: int, pods_still_running: bool) -> None:
        """Failed follows FailureTarget once no pod of the Job is running or terminating (1.31+)."""
        if self.failure_target is not None and self.failed_condition is None and not pods_still_running:
            self.failed_condition = self.failure_target
            self.failed_at = step


# -- JobSet ------------------------------------------------------------------------------------------


@dataclass
class JobSetModel:
    failure_policy: JSON | None
    restarts: int = 0
    outcome: str = "Running"  # "Running", "Failed" or "Restarted"
    matched_rule: str | None = None

    def reconcile(self, jobs: list[JobModel]) -> str:
        failed = sorted((j for j in jobs if j.failed_condition is not None), key=lambda j: j.failed_at or 0)
        if not failed:
            return self.outcome
        if self.failure_policy is None:
            self.outcome = "Failed"
            return self.outcome
        action = "RestartJobSet"
        for rule in self.failure_policy.get("rules") or []:
            if any(_rule_applies(rule, j) for j in failed):
                action, self.matched_rule = rule["action"], rule.get("name")
                break
        if action == "FailJobSet":
            self.outcome = "Failed"
        elif action == "RestartJobSetAndIgnoreMaxRestarts" or (
            action == "RestartJobSet" and self.restarts < int(self.failure_policy.get("maxRestarts", 0))
        ):
            self.restarts += 1
            self.outcome = "Restarted"
        else:
            self.outcome = "Failed"
        return self.outcome


def _rule_applies(rule: JSON, job: JobModel) -> bool:
    assert job.failed_condition is not None
    reason, message = job.failed_condition
    reasons = rule.get("onJobFailureReasons") or []
    if reasons and reason not in reasons:
        return False
    patterns = rule.get("onJobFailureMessagePatterns") or []
    if patterns and not any(re2.search(p, message) for p in patterns):
        return False
    targets = rule.get("targetReplicatedJobs") or []
    return not targets or job.replicated_job in targets
