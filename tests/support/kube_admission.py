"""The API server's admission chain for batch Jobs, as the emulator (`support.kube_emulator`) applies it.

A create request goes, in the API server, through: decode and default (the `SetDefaults_*` functions run
when the body is decoded into the versioned type), mutating admission (each webhook receives the
*defaulted* object), validation, then storage. podmortem's webhook mutates Jobs and JobSets, so what it
receives and whether what it returns is valid are both the API server's business; this module models the
parts of it that podmortem's writes touch, each from its source (kubernetes/kubernetes as of 1.29 and later,
where the JobPodReplacementPolicy gate is on by default):

- `default_job`: `SetDefaults_Job` (`pkg/apis/batch/v1/defaults.go`): `completions`/`parallelism` 1 when
  both are unset, `parallelism` 1, `backoffLimit` 6 (MaxInt32 with `backoffLimitPerIndex`),
  `completionMode: NonIndexed`, `suspend: false`, `manualSelector: false`, an `onPodConditions` pattern's
  `status: "True"` (`SetDefaults_PodFailurePolicyOnPodConditionsPattern` in later releases), and, with the
  `JobPodReplacementPolicy` feature gate (beta and on by default from 1.29, GA and locked on from 1.34),
  `podReplacementPolicy: Failed` when the Job has a `podFailurePolicy` and `TerminatingOrFailed` when it
  has none. The pod template gets `SetDefaults_PodSpec`'s
  `restartPolicy: Always` when unset (`pkg/apis/core/v1/defaults.go`).
- `validate_job`: `validateJobSpec` and its helpers (`pkg/apis/batch/validation/validation.go`) for the
  fields podmortem writes or depends on: `restartPolicy` must be `OnFailure` or `Never`, and `Never` with
  a `podFailurePolicy`; with a `podFailurePolicy`, `podReplacementPolicy` must be `Failed`
  (`validatePodReplacementPolicy`); the rules (`validatePodFailurePolicyRule`: at most 20, a known action,
  `FailIndex` only with `backoffLimitPerIndex`, exactly one of `onExitCodes`/`onPodConditions`, patterns
  with a qualified-name type and a status of True/False/Unknown, exit codes sorted, unique, non-empty, not
  0 under `In`, a `containerName` that names a container).
- `jobset_defaults`: JobSet's own mutating webhook (kubernetes-sigs/jobset `pkg/webhooks/jobset_webhook.go`,
  `Default`, v0.12.0), installed as the MutatingWebhookConfiguration `jobset-mutating-webhook-configuration`:
  `successPolicy` All, `startupPolicy` AnyOrder, each replicatedJob's `completionMode: Indexed` and, when
  unset, its pod `restartPolicy: OnFailure`, `network.enableDNSHostnames` and `publishNotReadyAddresses`
  true, and unnamed failure policy rules named `failurePolicyRule<i>`. The API server calls mutating
  webhooks in the order of their configurations' names (`mergeMutatingWebhookConfigurations` sorts them
  `ByName` in `k8s.io/apiserver/pkg/admission/configuration/mutating_webhook_manager.go`), so JobSet's runs
  before a configuration named `podmortem-webhook`, and podmortem's webhook sees its defaults.
- `child_job`: the Job the JobSet controller creates for a replicatedJob (kubernetes-sigs/jobset
  `constructJob` in `pkg/controllers/jobset_controller.go`): the template's Job spec as written, with the
  JobSet's labels. The JobSet CRD's schema defaults none of the fields above, so a replicatedJob's
  template is defaulted and validated only when its child Job is created: a JobSet whose template the
  Job API refuses is stored, and then never gets its Jobs.

Errors read as the API server writes them (`field.Error` strings): `spec.x: Unsupported value: "v":
supported values: "w"`, so a test can assert the field and the reason.
"""

from __future__ import annotations

import copy
import re
from typing import Any

JSON = dict[str, Any]

MAX_RULES = 20
MAX_PATTERNS = 20
MAX_EXIT_CODES = 255
ACTIONS = ("Count", "FailIndex", "FailJob", "Ignore")
STATUSES = ("False", "True", "Unknown")
OPERATORS = ("In", "NotIn")
REPLACEMENT_POLICIES = ("Failed", "TerminatingOrFailed")
INT32_MAX = 2**31 - 1
_QUALIFIED = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)

JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
JOBSET_REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
JOBSET_JOB_INDEX = "jobset.sigs.k8s.io/job-index"
JOBSET_RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"


def _dict(parent: JSON, key: str) -> JSON:
    value = parent.get(key)
    if not isinstance(value, dict):
        value = parent[key] = {}
    return value


def default_job(job: JSON, *, replacement_policy_gate: bool = True) -> JSON:
    """The Job as the API server has it after decoding: `SetDefaults_Job` and the pod template's defaults."""
    out = copy.deepcopy(job)
    spec = _dict(out, "spec")
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
        spec["parallelism"] = 1
    spec.setdefault("parallelism", 1)
    if spec.get("backoffLimit") is None:
        spec["backoffLimit"] = INT32_MAX if spec.get("backoffLimitPerIndex") is not None else 6
    template_labels = (_dict(spec, "template").get("metadata") or {}).get("labels")
    meta = _dict(out, "metadata")
    if template_labels and not meta.get("labels"):
        meta["labels"] = dict(template_labels)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    policy = spec.get("podFailurePolicy")
    if isinstance(policy, dict):
        for rule in policy.get("rules") or []:
            for pattern in (rule.get("onPodConditions") or []) if isinstance(rule, dict) else []:
                if isinstance(pattern, dict) and not pattern.get("status"):
                    pattern["status"] = "True"
    if replacement_policy_gate and spec.get("podReplacementPolicy") is None:
        spec["podReplacementPolicy"] = "Failed" if policy is not None else "TerminatingOrFailed"
    spec.setdefault("manualSelector", False)
    pod_spec = _dict(_dict(spec, "template"), "spec")
    if not pod_spec.get("restartPolicy"):
        pod_spec["restartPolicy"] = "Always"
    return out


def _values(values: tuple[str, ...]) -> str:
    return ", ".join(f'"{v}"' for v in values)


def _rule_errors(rule: Any, path: str, spec: JSON, containers: set[str]) -> list[str]:
    if not isinstance(rule, dict):
        return [f"{path}: Invalid value: a rule is an object"]
    errors = []
    action = rule.get("action") or ""
    if not action:
        errors.append(f"{path}.action: Required value: valid values: [{_values(ACTIONS)}]")
    elif action == "FailIndex" and spec.get("backoffLimitPerIndex") is None:
        errors.append(f'{path}.action: Invalid value: "FailIndex": requires the backoffLimitPerIndex to be set')
    elif action not in ACTIONS:
        errors.append(f'{path}.action: Unsupported value: "{action}": supported values: {_values(ACTIONS)}')
    codes, patterns = rule.get("onExitCodes"), rule.get("onPodConditions") or []
    if codes is not None and patterns:
        errors.append(f"{path}: Invalid value: specifying both OnExitCodes and OnPodConditions is not supported")
    if codes is None and not patterns:
        errors.append(f"{path}: Invalid value: specifying one of OnExitCodes and OnPodConditions is required")
    if len(patterns) > MAX_PATTERNS:
        errors.append(f"{path}.onPodConditions: Too many: {len(patterns)}: must have at most {MAX_PATTERNS} items")
    for j, pattern in enumerate(patterns):
        where = f"{path}.onPodConditions[{j}]"
        ptype, status = str(pattern.get("type") or ""), str(pattern.get("status") or "")
        if not _QUALIFIED.match(ptype) or len(ptype.rsplit("/", 1)[-1]) > 63:
            errors.append(f'{where}.type: Invalid value: "{ptype}": must be a qualified name')
        if not status:
            errors.append(f"{where}.status: Required value: valid values: [{_values(STATUSES)}]")
        elif status not in STATUSES:
            errors.append(f'{where}.status: Unsupported value: "{status}": supported values: {_values(STATUSES)}')
    if isinstance(codes, dict):
        where = f"{path}.onExitCodes"
        operator = codes.get("operator") or ""
        if operator not in OPERATORS:
            errors.append(f'{where}.operator: Unsupported value: "{operator}": supported values: {_values(OPERATORS)}')
        name = codes.get("containerName")
        if name is not None and name not in containers:
            errors.append(f'{where}.containerName: Invalid value: "{name}": must be one of the container or '
                          "initContainer names in the pod template")  # fmt: skip
        values = codes.get("values") or []
        if not values:
            errors.append(f"{where}.values: Invalid value: at least one value is required")
        elif len(values) > MAX_EXIT_CODES:
            errors.append(f"{where}.values: Too many: {len(values)}: must have at most {MAX_EXIT_CODES} items")
        if operator == "In" and 0 in values:
            errors.append(f"{where}.values: Invalid value: 0: must not be 0 for the In operator")
        if len(set(values)) != len(values):
            errors.append(f"{where}.values: Duplicate value")
        if list(values) != sorted(values):
            errors.append(f"{where}.values: Invalid value: must be ordered")
    return errors


def validate_job(job: JSON) -> list[str]:
    """The errors `validateJobSpec` finds in the fields podmortem writes or relies on (empty: valid)."""
    spec = job.get("spec")
    if not isinstance(spec, dict):
        return ["spec: Required value"]
    errors = []
    pod_spec = ((spec.get("template") or {}).get("spec")) or {}
    containers = {str(c.get("name")) for key in ("containers", "initContainers") for c in pod_spec.get(key) or []}
    policy = spec.get("podFailurePolicy")
    if policy is not None:
        rules = policy.get("rules") if isinstance(policy, dict) else None
        if not isinstance(rules, list):
            errors.append("spec.podFailurePolicy.rules: Required value")
            rules = []
        if len(rules) > MAX_RULES:
            errors.append(f"spec.podFailurePolicy.rules: Too many: {len(rules)}: must have at most {MAX_RULES} items")
        for i, rule in enumerate(rules):
            errors += _rule_errors(rule, f"spec.podFailurePolicy.rules[{i}]", spec, containers)
    replacement = spec.get("podReplacementPolicy")
    if replacement is not None:
        if policy is not None and replacement != "Failed":
            errors.append(f'spec.podReplacementPolicy: Unsupported value: "{replacement}": supported values: "Failed"')
        elif replacement not in REPLACEMENT_POLICIES:
            errors.append(f'spec.podReplacementPolicy: Unsupported value: "{replacement}": '
                          f"supported values: {_values(REPLACEMENT_POLICIES)}")  # fmt: skip
    restart = pod_spec.get("restartPolicy") or ""
    if restart in ("", "Always"):
        errors.append('spec.template.spec.restartPolicy: Required value: valid values: "OnFailure", "Never"')
    elif restart not in ("OnFailure", "Never"):
        errors.append(f'spec.template.spec.restartPolicy: Unsupported value: "{restart}": '
                      'supported values: "OnFailure", "Never"')  # fmt: skip
    elif policy is not None and restart != "Never":
        errors.append(f'spec.template.spec.restartPolicy: Invalid value: "{restart}": '
                      'only "Never" is supported when podFailurePolicy is specified')  # fmt: skip
    return errors


def child_job(jobset: JSON, replicated_job: str, index: int, attempt: int = 0) -> JSON:
    """The Job the JobSet controller creates for `replicated_job`'s `index`-th replica (its template's spec
    as written in the JobSet: the Job API defaults and validates it on create)."""
    meta = jobset["metadata"]
    rj = next(r for r in jobset["spec"]["replicatedJobs"] if r["name"] == replicated_job)
    template = copy.deepcopy(rj.get("template") or {})
    labels = {
        **((template.get("metadata") or {}).get("labels") or {}),
        JOBSET_NAME: meta["name"],
        JOBSET_REPLICATED_JOB: replicated_job,
        JOBSET_JOB_INDEX: str(index),
        JOBSET_RESTART_ATTEMPT: str(attempt),
    }
    owner = {
        "apiVersion": jobset.get("apiVersion", "jobset.x-k8s.io/v1alpha2"),
        "kind": "JobSet",
        "name": meta["name"],
        "uid": meta.get("uid", ""),
        "controller": True,
        "blockOwnerDeletion": True,
    }
    spec = template.get("spec") or {}
    pod_meta = _dict(_dict(spec, "template"), "metadata")
    pod_meta["labels"] = {
        **(pod_meta.get("labels") or {}),
        **{k: v for k, v in labels.items() if k.startswith("jobset")},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"{meta['name']}-{replicated_job}-{index}",
            "namespace": meta.get("namespace"),
            "labels": labels,
            "ownerReferences": [owner],
        },
        "spec": spec,
    }


JOBSET_WEBHOOK_CONFIGURATION = "jobset-mutating-webhook-configuration"


def jobset_defaults(jobset: JSON) -> JSON:
    """The JobSet as JobSet's defaulting webhook leaves it (module doc)."""
    out = copy.deepcopy(jobset)
    spec = _dict(out, "spec")
    spec.setdefault("successPolicy", {"operator": "All"})
    spec.setdefault("startupPolicy", {"startupPolicyOrder": "AnyOrder"})
    for rj in spec.get("replicatedJobs") or []:
        job_spec = _dict(_dict(rj, "template"), "spec")
        job_spec.setdefault("completionMode", "Indexed")
        pod_spec = _dict(_dict(job_spec, "template"), "spec")
        if not pod_spec.get("restartPolicy"):
            pod_spec["restartPolicy"] = "OnFailure"
    network = _dict(spec, "network")
    network.setdefault("enableDNSHostnames", True)
    network.setdefault("publishNotReadyAddresses", True)
    for i, rule in enumerate((spec.get("failurePolicy") or {}).get("rules") or []):
        if isinstance(rule, dict) and not rule.get("name"):
            rule["name"] = f"failurePolicyRule{i}"
    return out
