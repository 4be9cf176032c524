"""Everything at once against the Kubernetes API emulator: real sidecars, real aggregator, real kubectl.

A PyTorchJob with its pods pre-populated. One real sidecar per pod (in-process, watching its own pod
through the emulator with raw HTTP, as in a cluster) streams to a real aggregator over gRPC on
127.0.0.1; the aggregator runs with Kubernetes enabled (pod watch + publishers). The pods' failures
are applied to the emulator as the kubelet would report them; the verdict must land as annotations,
a job condition next to the controller's own, and Warning Events — and `kubectl` must read it.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from support.api_sidecars import api_sidecars
from support.common import GLOO_PEER, eventually
from support.kube_emulator import PODS, PYTORCHJOBS, EmulatorHandle
from support.kube_objects import CONTROLLER_CONDITIONS, JOB, NS, seed_pytorchjob, terminated

from podmortem.aggregator.config import AggregatorConfig, KubeSettings
from podmortem.aggregator.running import Aggregator

ROOT = "mixtral-cpt-worker-1"


def error_doc(message: str, ts: int) -> str:
    return json.dumps(
        {"message": {"message": message, "extraInfo": {"py_callstack": "tb", "timestamp": str(ts)}, "errorCode": 1}}
    )


async def test_verdict_lands_on_kubernetes_objects(kube_api: EmulatorHandle, tmp_path: Path) -> None:
    job, pods = seed_pytorchjob(kube_api, workers=3)
    settings = KubeSettings(
        enabled=True, kubeconfig=str(kube_api.kubeconfig(tmp_path / "kubeconfig", NS)), namespaces=(NS,),
        reporting_instance="podmortem-aggregator-0",
    )  # fmt: skip
    agg = Aggregator(
        AggregatorConfig(listen="127.0.0.1:0", metrics_listen="", verdict_dir="", quorum_timeout=600),
        registry=CollectorRegistry(), kube_settings=settings,
    )  # fmt: skip
    await agg.start()
    try:
        job_env = {"PODMORTEM_JOB_NAME": JOB, "PODMORTEM_JOB_KIND": "PyTorchJob"}
        async with api_sidecars(kube_api, pods, agg.port, tmp_path, env=job_env):
            await eventually(lambda: agg.metrics.connected._value.get() == 3, "three sidecars registered")
            # The root raises; its error file is written, then its container exits 1.
            (tmp_path / ROOT).mkdir(exist_ok=True)
            (tmp_path / ROOT / "error.json").write_text(error_doc("ValueError: label 7 out of range", 1795300000))
            kube_api.change(PODS, NS, ROOT, terminated(1))
            # Its peers die of it: gloo "connection closed by peer" a second later (on their clocks).
            for pod in pods:
                if pod != ROOT:
                    (tmp_path / pod).mkdir(exist_ok=True)
                    (tmp_path / pod / "error.json").write_text(error_doc(GLOO_PEER, 1795300001))
                    kube_api.change(PODS, NS, pod, terminated(1))
            await eventually(
                lambda: (
                    "podmortem.io/verdict"
                    in (kube_api.get(PYTORCHJOBS, NS, JOB) or {})["metadata"].get("annotations", {})
                ),
                "the verdict annotation on the job",
                within=30,
            )
    finally:
        await agg.stop(grace=2)

    stored = kube_api.get(PYTORCHJOBS, NS, JOB)
    assert stored is not None
    verdict = json.loads(stored["metadata"]["annotations"]["podmortem.io/verdict"])
    assert (verdict["pod"], verdict["category"], verdict["retryable"]) == (ROOT, "user_code", False)
    assert verdict["exceptionType"] == "ValueError"
    assert verdict["revision"] == 1  # right the first time: quorum waited for the sidecars' own reports
    root_pod = kube_api.get(PODS, NS, ROOT)
    assert root_pod is not None and "podmortem.io/summary" in root_pod["metadata"]["annotations"]
    conditions = stored["status"]["conditions"]
    assert conditions[: len(CONTROLLER_CONDITIONS)] == CONTROLLER_CONDITIONS  # the controller's, intact
    ours = [c for c in conditions if c["type"] == "PodmortemRootCause"]
    assert len(ours) == 1 and ours[0]["status"] == "True" and ROOT in ours[0]["message"]
    warnings = [e for e in kube_api.list("v1/events", NS) if e["type"] == "Warning"]
    assert {e["involvedObject"]["kind"] for e in warnings} == {"PyTorchJob", "Pod"}
    assert stored["spec"] == job["spec"]

    if shutil.which("kubectl") is None:
        pytest.fail("kubectl is not on PATH")
    kube_api.emulator.token = None  # kubectl sends no bearer token over plain http
    out = await asyncio.to_thread(
        subprocess.run,
        ["kubectl", "--kubeconfig", str(tmp_path / "kubeconfig"), "get", "pod", ROOT, "-n", NS,
         "-o", "jsonpath={.metadata.annotations.podmortem\\.io/verdict}"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["pod"] == ROOT
