"""A bad day for the API server: 20% of writes fail with 409/429/500 and watches are cut, while the real
aggregator (pod watch + publishers) decides several jobs. Each incident must still be visible exactly
once: one verdict annotation naming the root, one PodmortemRootCause condition, one Warning Event per
object — no duplicate, no loss."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from prometheus_client import CollectorRegistry
from support.common import eventually
from support.kube_emulator import PODS, PYTORCHJOBS, EmulatorHandle
from support.kube_objects import CONTROLLER_CONDITIONS, NS, pytorchjob, terminated, training_pod

from podmortem.aggregator.config import AggregatorConfig, ClientBudget, KubeSettings
from podmortem.aggregator.running import Aggregator
from podmortem.core.names import PUBLISHED_ANNOTATION, ROOT_CAUSE_CONDITION, VERDICT_ANNOTATION

JOBS = [f"job-{i}" for i in range(4)]
ROOT_MESSAGE = (
    'Traceback (most recent call last):\n  File "train.py", line 9\n'
    "AttributeError: 'NoneType' object has no attribute 'loss'"
)
VICTIM_MESSAGE = "RuntimeError: [../gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.11]:4455"


def published(api: EmulatorHandle, job: str) -> bool:
    stored = api.get(PYTORCHJOBS, NS, job) or {}
    conditions = (stored.get("status") or {}).get("conditions") or []
    return PUBLISHED_ANNOTATION in (stored.get("metadata") or {}).get("annotations", {}) and any(
        c["type"] == ROOT_CAUSE_CONDITION for c in conditions
    )


async def test_every_incident_is_visible_exactly_once_through_api_faults(
    kube_api: EmulatorHandle, tmp_path: Path
) -> None:
    roots = {}
    for i, name in enumerate(JOBS):
        job = kube_api.put(PYTORCHJOBS, pytorchjob(name=name, workers=3))
        for w in range(3):
            kube_api.put(PODS, training_pod(job, w))
        roots[name] = f"{name}-worker-{i % 3}"
    # ~20% of writes fail (seeded: the same run every time): 409 Conflict where a write is against a version
    # (PUT/PATCH; a create can only conflict by already existing), 429 and 500 on any.
    kube_api.fail(409, 100_000, methods=("PUT", "PATCH"), probability=0.08)
    for status in (429, 500):
        kube_api.fail(status, 100_000, methods=("POST", "PUT", "PATCH"), probability=0.09)
    settings = KubeSettings(
        enabled=True, kubeconfig=str(kube_api.kubeconfig(tmp_path / "kubeconfig", NS)), namespaces=(NS,),
        reporting_instance="podmortem-aggregator-0", client=ClientBudget(backoff_initial=0.01, backoff_max=0.05),
    )  # fmt: skip
    agg = Aggregator(
        AggregatorConfig(listen="127.0.0.1:0", metrics_listen="", verdict_dir="", quorum_timeout=600),
        registry=CollectorRegistry(), kube_settings=settings,
    )  # fmt: skip
    await agg.start()
    try:
        await eventually(lambda: kube_api.emulator.open_watches >= 1, "watching")
        for name in JOBS:
            for w in range(3):
                pod = f"{name}-worker-{w}"
                if pod != roots[name]:  # the victims' kubelets report first, a second earlier
                    kube_api.change(
                        PODS, NS, pod, terminated(1, message=VICTIM_MESSAGE, finished="2026-11-21T15:06:09Z")
                    )
            kube_api.break_watches()  # the watch is cut mid-incident: resumed from its last version
            kube_api.change(PODS, NS, roots[name], terminated(1, message=ROOT_MESSAGE))
        await eventually(lambda: all(published(kube_api, j) for j in JOBS), "every verdict published", within=60)
    finally:
        # The stop path drains the publish queue (retries included): anything still retrying lands
        # before it returns. The grace bounds a hang; it is no timing assertion.
        await agg.stop(grace=30)

    served = sum(f.served for f in kube_api.emulator.faults)
    writes = sum(1 for method, _ in kube_api.requests() if method in ("POST", "PUT", "PATCH"))
    assert served >= 5 and 0.1 < served / writes < 0.35, (served, writes)  # the bad day happened
    events = Counter(
        (e["involvedObject"]["kind"], e["involvedObject"]["name"])
        for e in kube_api.list("v1/events", NS)
        if e["type"] == "Warning"
    )
    for name in JOBS:
        stored = kube_api.get(PYTORCHJOBS, NS, name)
        assert stored is not None
        verdict = json.loads(stored["metadata"]["annotations"][VERDICT_ANNOTATION])
        assert (verdict["pod"], verdict["category"], verdict["revision"]) == (roots[name], "user_code", 1)
        conditions = stored["status"]["conditions"]
        assert conditions[: len(CONTROLLER_CONDITIONS)] == CONTROLLER_CONDITIONS
        assert [c["type"] for c in conditions].count(ROOT_CAUSE_CONDITION) == 1
        root_pod = kube_api.get(PODS, NS, roots[name])
        assert root_pod is not None and root_pod["metadata"]["annotations"][VERDICT_ANNOTATION]
        assert events[("PyTorchJob", name)] == 1 and events[("Pod", roots[name])] == 1
    assert sum(events.values()) == 2 * len(JOBS)
