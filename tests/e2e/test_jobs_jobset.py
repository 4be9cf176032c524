"""A JobSet with two replicated Jobs (one child Job of `leader`, two of `workers`) and two pods per
child Job: real sidecars (told no job name) and the aggregator's pod watch must file the failure as ONE
incident — the JobSet's, attempt "0" — with the right global ranks (which only the JobSet's spec gives:
2 pods per child Job, replicated Jobs in spec order), and name the root although the kubelets report
the victims first, a second earlier, with error files of the same second."""

from __future__ import annotations

import json
from pathlib import Path

from prometheus_client import CollectorRegistry
from support.api_sidecars import api_sidecars
from support.common import GLOO_PEER, eventually
from support.kube_emulator import PODS, EmulatorHandle
from support.kube_objects import NS, seed_jobset, terminated

from podmortem.aggregator.config import AggregatorConfig, KubeSettings
from podmortem.aggregator.running import Aggregator


def error_doc(message: str, ts: int) -> str:
    return json.dumps({"message": {"message": message, "extraInfo": {"py_callstack": "tb", "timestamp": str(ts)}}})


async def test_sidecars_and_the_pod_watch_file_one_incident_with_global_ranks(
    kube_api: EmulatorHandle, tmp_path: Path
) -> None:
    _, seeded = seed_jobset(kube_api, "llm", [("leader", 1, 2), ("workers", 2, 2)])
    # In global rank order: leader-0 pods 0-1, workers-0 pods 0-1, workers-1 pods 0-1.
    pods = [p["metadata"]["name"] for p in seeded]
    # workers-1 (job-global-index 2, job-index 1), completion index 0: global rank 4 — not 0 (its
    # completion index), 1 (its job index) or 2 (its child Job's global index).
    root = pods[4]
    settings = KubeSettings(
        enabled=True, kubeconfig=str(kube_api.kubeconfig(tmp_path / "kubeconfig", NS)), namespaces=(NS,),
        publish=frozenset(),
    )  # fmt: skip
    verdicts = tmp_path / "verdicts"
    agg = Aggregator(
        AggregatorConfig(listen="127.0.0.1:0", metrics_listen="", verdict_dir=str(verdicts), quorum_timeout=600),
        registry=CollectorRegistry(), kube_settings=settings,
    )  # fmt: skip
    await agg.start()
    try:
        # no PODMORTEM_JOB_NAME: the sidecar reads its identity from its own pod
        async with api_sidecars(kube_api, pods, agg.port, tmp_path, stop_within=60):
            await eventually(lambda: agg.metrics.connected._value.get() == 6, "six sidecars registered", within=60)
            # Adversarial kubelet timing: the victims' ends are reported first and read a second earlier.
            for pod in pods:
                if pod != root:
                    (tmp_path / pod).mkdir(exist_ok=True)
                    (tmp_path / pod / "error.json").write_text(error_doc(GLOO_PEER, 1795300000))
                    kube_api.change(PODS, NS, pod, terminated(1, finished="2026-11-21T15:06:09Z"))
            (tmp_path / root).mkdir(exist_ok=True)
            (tmp_path / root / "error.json").write_text(error_doc("ValueError: label 7 out of range", 1795300000))
            kube_api.change(PODS, NS, root, terminated(1, finished="2026-11-21T15:06:10Z"))
            await eventually(lambda: any(verdicts.glob("*.json")), "a verdict", within=60)
            keys = list(agg.book._jobs)
            incident = agg.book.incident((NS, "llm", "0"))
    finally:
        await agg.stop(grace=2)
    assert keys == [(NS, "llm", "0")]  # one incident: sidecars and pod watch agree on the job and attempt
    assert incident is not None
    assert {m.pod: m.rank for m in incident.members} == {pod: rank for rank, pod in enumerate(pods)}
    [verdict_file] = list(verdicts.glob("*.json"))
    assert json.loads(verdict_file.read_text())["verdict"]["pod"] == root
