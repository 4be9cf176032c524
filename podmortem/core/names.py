"""Every name podmortem writes to or reads from the cluster: condition types, annotations, labels, the
taint, Event reasons and the component that reports them.

Renaming a key is one edit here. The names live in the core because the core reads pods
(`podstatus`) and decides pod conditions (`conditions`), and every room above it (k8s, the aggregator,
the sidecar, the webhook, `kubectl podmortem`, the incident page) may import the core.
"""

from __future__ import annotations

from typing import Literal

PREFIX = "podmortem.io/"

# A member pod's condition (status.conditions), written by the aggregator while the pod's sidecar holds it.
ConditionType = Literal[
    "podmortem.io/Victim",
    "podmortem.io/PermanentFailure",
    "podmortem.io/RetryableFailure",
]
VICTIM: ConditionType = "podmortem.io/Victim"
PERMANENT: ConditionType = "podmortem.io/PermanentFailure"
RETRYABLE: ConditionType = "podmortem.io/RetryableFailure"
CONDITION_TYPES: tuple[ConditionType, ...] = (VICTIM, PERMANENT, RETRYABLE)
VICTIM_REASON = "Victim"
REPEATED_REASON = "RepeatedFailure"  # PermanentFailure's reason when the same failure repeats

# Kubernetes' own pod condition (preemption, eviction, taint manager, pod GC of a lost node) and the
# reasons of it that say the pod's node is gone.
DISRUPTION_TARGET = "DisruptionTarget"
NODE_LOST_REASONS = frozenset({"DeletionByPodGC", "DeletionByTaintManager"})

# On the job (and the root-cause pod): the verdict, for people and for tools.
SUMMARY_ANNOTATION = PREFIX + "summary"
VERDICT_ANNOTATION = PREFIX + "verdict"
PUBLISHED_ANNOTATION = PREFIX + "published"  # `<incident id>#<revision>`, the idempotency key
ROOT_CAUSE_CONDITION = "PodmortemRootCause"
ROOT_CAUSE_EVENT = "PodmortemRootCause"
STALL_EVENT = "PodmortemStall"  # a provisional verdict's Event (the job stalled, pods still running)
STALL_CLEARED_EVENT = "PodmortemStallCleared"  # its withdrawal's (the job moved again)
REPEATED_FAILURE_EVENT = "PodmortemRepeatedFailure"

# On the job, set by its owner.
WORLD_SIZE_ANNOTATION = PREFIX + "world-size"
REPEAT_LIMIT_ANNOTATION = PREFIX + "repeat-limit"
RETRY_POLICY_LABEL = PREFIX + "retry-policy"
RETRY_POLICY_ENABLED = "enabled"
RETRY_POLICY_ADDED_ANNOTATION = PREFIX + "retry-policy-added"  # set by the webhook: "<version>"

# On a node: its hardware-fault record and the suspect mark.
HARDWARE_FAULTS_ANNOTATION = PREFIX + "hardware-faults"
SUSPECT_HARDWARE_CONDITION = PREFIX + "SuspectHardware"
SUSPECT_HARDWARE_REASON = "RepeatedHardwareFaults"
SUSPECT_HARDWARE_TAINT = PREFIX + "suspect-hardware"
SUSPECT_HARDWARE_EVENT = "SuspectHardware"

# On a training pod, read (and the last one written) by the injection webhook.
INJECT_ANNOTATION = PREFIX + "inject"
INJECTED_ANNOTATION = PREFIX + "injected"
CONTAINER_ANNOTATION = PREFIX + "container"
STALL_AFTER_ANNOTATION = PREFIX + "stall-after"
PYTHON_HOOK_ANNOTATION = PREFIX + "python-hook"

# Where the webhook mounts the sidecar's projected token (audience `podmortem`), as `token` in it.
TOKEN_DIR = "/var/run/secrets/podmortem.io/serviceaccount"
TOKEN_FILE = "token"

# The environment variable the webhook gives the sidecar: a container with it is a podmortem sidecar.
AGGREGATOR_ENV = "PODMORTEM_AGGREGATOR"

# Who writes: the Events' source component and reporting controller.
COMPONENT = "podmortem-aggregator"
REPORTING_COMPONENT = PREFIX + "aggregator"

# Labels that carry a pod's job and position in it, by workload kind (set by their controllers).
KUBEFLOW_JOB = "training.kubeflow.org/job-name"
KUBEFLOW_REPLICA_TYPE = "training.kubeflow.org/replica-type"
KUBEFLOW_REPLICA_INDEX = "training.kubeflow.org/replica-index"
BATCH_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
BATCH_JOB_NAME = "batch.kubernetes.io/job-name"
LEGACY_JOB_NAME = "job-name"  # Kubernetes < 1.27 labels Job pods with this only
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
JOBSET_GLOBAL_INDEX = "jobset.sigs.k8s.io/job-global-index"
JOBSET_RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
