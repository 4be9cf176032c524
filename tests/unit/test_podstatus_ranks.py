"""Ranks from a pod's labels alone: right, or unknown — never a child Job's index taken for a rank."""

from __future__ import annotations

from podmortem.core.podstatus import rank_of


def test_an_indexed_job_pod_is_ranked_by_its_completion_index() -> None:
    assert rank_of({"batch.kubernetes.io/job-completion-index": "3"}) == ("", 3, 3)


def test_a_jobset_pod_has_no_rank_from_labels_alone() -> None:
    # Child Job 1 of a JobSet with two pods per child Job, pod 0: its rank is 2, which only the JobSet's
    # spec can tell; neither the global index (1) nor the completion index (0) is the rank.
    labels = {
        "jobset.sigs.k8s.io/job-global-index": "1",
        "batch.kubernetes.io/job-completion-index": "0",
    }
    assert rank_of(labels) == ("", 0, None)
    assert rank_of(labels, env_rank=2)[2] == 2  # torchrun's own word (PET_NODE_RANK) wins
