"""Pod conditions in the kubelet's order: real sidecar processes hold their failed pods, the real aggregator
writes each pod's `podmortem.io/*` condition on the Kubernetes emulator before that sidecar exits.

The kubelet's order with native sidecars is played per failing pod by tests/support/kubelet_order.py:
the training container writes its error file and exits; the kubelet SIGTERMs the native sidecar at once;
the pod status that shows the container's end reaches the API up to a second later (0.5 s here), the pod
still Running (its sidecar runs); only once the sidecar has exited does the pod turn Failed, the moment a
Job controller acts on it. The order is proved on the emulator's logical clock (resourceVersion): the
write that added the condition comes before the write the test makes as it sees the sidecar exit. Times
of both are printed.

Cover: an indexed Job and a JobSet (two replicated Jobs) failing in user code (the root PermanentFailure,
every victim Victim), a PyTorchJob whose root was preempted by its kubelet (RetryableFailure), an older
sidecar that does not hold (its condition comes at its end), and an aggregator the sidecars cannot reach
(each exits at its hold timeout, and no condition is written late).
"""

from __future__ import annotations

import asyncio
import time
from functools import partial
from pathlib import Path
from typing import Any

from support.common import eventually
from support.kube_emulator import JOBS, PODS, EmulatorHandle
from support.kube_objects import NS, indexed_job, indexed_pod, seed_jobset, seed_pytorchjob
from support.kubelet_order import (
    GLOO_PEER,
    GUARD,
    ROOT_ERROR,
    Kubelet,
    Sidecar,
    aggregator,
    condition_version,
    free_port,
    our_condition,
    run_incident,
    says,
    start_sidecar,
    with_sidecar,
)

from podmortem.aggregator.incidents import MemberKey
from podmortem.aggregator.running import Aggregator


def check_order(api: EmulatorHandle, sidecars: list[Sidecar]) -> dict[str, dict[str, Any]]:
    """Each pod's condition, proved written before its sidecar exited; prints both times."""
    out = {}
    for s in sidecars:
        assert s.code == 0, "\n".join(s.lines)
        condition = our_condition(api.get(PODS, NS, s.pod))
        assert condition is not None, (s.pod, "\n".join(s.lines))
        version = condition_version(api, s.pod)
        assert version is not None and version < s.exit_version, (s.pod, version, s.exit_version)
        print(
            f"{s.pod}: {condition['type']} at resourceVersion {version} ({condition['lastTransitionTime']}); "
            f"sidecar exited {s.exited_at - s.sigterm_at:.2f}s after its SIGTERM, marked at {s.exit_version}"
        )
        out[s.pod] = condition
    return out


async def test_indexed_job_user_code_root_is_permanent_and_victims_are_victims(
    kube_api: EmulatorHandle, tmp_path: Path
) -> None:
    job = kube_api.put(JOBS, indexed_job("train", 3))
    pods = [kube_api.put(PODS, indexed_pod(job, i)) for i in range(3)]
    agg, sidecars = await run_incident(kube_api, tmp_path, pods, root=1)
    conditions = check_order(kube_api, sidecars)
    root = sidecars[1].pod
    assert conditions[root]["type"] == "podmortem.io/PermanentFailure"
    assert conditions[root]["reason"] == "UserCode" and root in conditions[root]["message"]
    for s in sidecars:
        if s.pod != root:
            assert conditions[s.pod]["type"] == "podmortem.io/Victim"
            assert conditions[s.pod]["reason"] == "Victim"
            assert f"root pod {root}" in conditions[s.pod]["message"] and "user_code" in conditions[s.pod]["message"]
    assert agg.metrics.retry_budget_saved._value.get() == 2
    assert agg.metrics.pod_conditions.labels(type="PermanentFailure")._value.get() == 1


async def test_jobset_of_two_replicated_jobs(kube_api: EmulatorHandle, tmp_path: Path) -> None:
    _, pods = seed_jobset(kube_api, "llm", [("leader", 1, 1), ("workers", 1, 2)])
    _, sidecars = await run_incident(kube_api, tmp_path, pods, root=2)
    conditions = check_order(kube_api, sidecars)
    assert [conditions[s.pod]["type"].rsplit("/", 1)[1] for s in sidecars] == ["Victim", "Victim", "PermanentFailure"]


async def test_pytorchjob_preempted_root_is_retryable(kube_api: EmulatorHandle, tmp_path: Path) -> None:
    # The kubelet preempts the pod to admit a critical one: DisruptionTarget, SIGTERM (exit 143), no deletion.
    _, names = seed_pytorchjob(kube_api, workers=3)
    pods = [kube_api.get(PODS, NS, n) or {} for n in names]
    preempted = {
        "conditions": [
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "TerminationByKubelet",
                "message": "Preempted in order to admit critical pod",
                "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
        ]
    }
    _, sidecars = await run_incident(
        kube_api, tmp_path, pods, root=0, root_extra=preempted, root_message=None, root_exit=143
    )
    conditions = check_order(kube_api, sidecars)
    assert conditions[sidecars[0].pod]["type"] == "podmortem.io/RetryableFailure"
    assert conditions[sidecars[0].pod]["reason"] == "Preemption"
    assert {conditions[s.pod]["type"] for s in sidecars[1:]} == {"podmortem.io/Victim"}


async def test_an_older_sidecar_that_does_not_hold_gets_its_condition_at_its_end(
    kube_api: EmulatorHandle, tmp_path: Path
) -> None:
    # A sidecar that does not hold registers as one from before the hold did: Register.holds false.
    job = kube_api.put(JOBS, indexed_job("train", 2))
    pods = [kube_api.put(PODS, indexed_pod(job, i)) for i in range(2)]
    _, sidecars = await run_incident(kube_api, tmp_path, pods, root=0, hold_timeouts={1: "0"})
    old = sidecars[1]
    assert old.code == 0
    assert not any("holding the pod" in line for line in old.lines)
    await eventually(lambda: our_condition(kube_api.get(PODS, NS, old.pod)) is not None, "its condition", within=GUARD)
    assert (our_condition(kube_api.get(PODS, NS, old.pod)) or {})["type"] == "podmortem.io/Victim"
    check_order(kube_api, sidecars[:1])  # the one that held: before its exit, as ever


async def test_unreachable_aggregator_no_condition_is_written_late(kube_api: EmulatorHandle, tmp_path: Path) -> None:
    # The sidecars cannot reach the aggregator (a port nobody listens on); the aggregator itself watches the
    # pods, whose termination messages say enough to decide (a ValueError, a peer closed): it could write.
    job = kube_api.put(JOBS, indexed_job("train", 2))
    pods = [kube_api.put(PODS, indexed_pod(job, i)) for i in range(2)]
    names = [with_sidecar(kube_api, pod, i) for i, pod in enumerate(pods)]
    async with aggregator(kube_api, tmp_path) as agg:
        nobody = f"127.0.0.1:{free_port()}"
        sidecars = [
            await start_sidecar(kube_api, tmp_path, kube_api.get(PODS, NS, n) or {}, nobody, "2") for n in names
        ]
        for s in sidecars:  # started (signal handlers in place) and trying to reach the aggregator
            await eventually(partial(says, s.log, "opening stream 1"), f"{s.pod} started", within=GUARD)
        kubelet = Kubelet(kube_api)
        kubelet.fail(sidecars[1], ROOT_ERROR)
        await asyncio.sleep(1.0)
        kubelet.fail(sidecars[0], GLOO_PEER.format(ip="10.1.0.11"))
        await kubelet.done()
        # The pods are terminal now; the aggregator sees them end without a hold: never a condition.
        holds = agg.holds
        assert holds is not None
        await eventually(
            lambda: all((p := holds._pods.get(k)) is not None and p.outcome is not None for k in _keys(agg, names)),
            "the aggregator saw both pods end",
            within=GUARD,
        )
        # Both outcomes are settled (no write): nothing can write a condition on them any more.
    for s in sidecars:
        assert s.code == 0, "\n".join(s.lines)
        # No aggregator ever registered it, so none could answer a hold: not held, gone after its flush.
        assert any("not holding the pod: no aggregator was reached" in line for line in s.lines), "\n".join(s.lines)
        assert any("event(s) the aggregator never acknowledged" in line for line in s.lines)
        assert our_condition(kube_api.get(PODS, NS, s.pod)) is None
    assert agg.metrics.pod_conditions.labels(type="Victim")._value.get() == 0


def _keys(agg: Aggregator, names: list[str]) -> list[MemberKey]:
    return [MemberKey((NS, "train", ""), n) for n in names]
