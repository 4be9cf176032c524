"""A sidecar outside a pod: its `api` pod source reads a kubeconfig (no client library) and watches its pod
on the API emulator, as it would in a pod — and the kubernetes package still stays out of its imports."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.common import HANG_GUARD, eventually
from support.fake_collector import FakeCollector, serving
from support.kube_emulator import PODS, EmulatorHandle
from support.kube_objects import NS, seed_pytorchjob, terminated

from podmortem.k8s.backoff import Backoff
from podmortem.sidecar import config, running
from podmortem.sidecar.outbox import Outbox

ERROR = {"message": {"message": "ValueError: bad label", "extraInfo": {"py_callstack": "tb", "timestamp": "17"}}}


async def test_a_sidecar_given_a_kubeconfig_watches_its_pod_through_the_api(
    kube_api: EmulatorHandle, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="podmortem.sidecar")
    _, pods = seed_pytorchjob(kube_api)
    kubeconfig = kube_api.kubeconfig(tmp_path / "kubeconfig", NS)
    env = {
        "POD_NAME": pods[1],
        "POD_NAMESPACE": NS,
        "TORCHELASTIC_ERROR_FILE": str(tmp_path / "error.json"),
        "KUBECONFIG": str(kubeconfig),
        "PODMORTEM_FLUSH_TIMEOUT": "30",
    }
    async with serving(FakeCollector()) as served:
        env["PODMORTEM_AGGREGATOR"] = served.target
        settings = config.from_env_and_args(env)
        assert settings.pod_source == "api"  # auto: a kubeconfig given means the API
        stop = asyncio.Event()
        task = asyncio.create_task(
            running.serve(
                settings, stop=stop, outbox=Outbox(), backoff=Backoff(0.01, 0.05), install_signal_handlers=False
            )
        )
        (tmp_path / "error.json").write_text(json.dumps(ERROR))
        await eventually(lambda: len(served.collector.events) == 1)
        stop.set()  # SIGTERM first, as a native sidecar gets it; the status follows
        await eventually(lambda: "watching the pod for it" in caplog.text, "the sidecar waiting for the pod's end")
        assert not task.done()
        kube_api.change(PODS, NS, pods[1], terminated(1))
        assert await asyncio.wait_for(task, HANG_GUARD) == 0
    sent = [e.WhichOneof("payload") for e in served.collector.events]
    assert sent[0] == "error_file" and "termination" in sent, sent
    # The job came from the pod's own labels and owner, read through the API with the kubeconfig's token.
    assert served.collector.registers[0].job.name == "mixtral-cpt"
    assert any(pods[1] in path for _, path in kube_api.requests())


def test_a_sidecar_with_a_broken_kubeconfig_says_why_and_exits_2(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("clusters: [}")
    env = {
        "POD_NAME": "p",
        "POD_NAMESPACE": NS,
        "TORCHELASTIC_ERROR_FILE": str(tmp_path / "error.json"),
        "PODMORTEM_AGGREGATOR": "127.0.0.1:1",
        "PATH": "/usr/bin:/bin",
    }
    out = subprocess.run(
        [sys.executable, "-m", "podmortem.cli", "sidecar", "--kubeconfig", str(kubeconfig)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2, out.stderr
    assert "not valid YAML" in out.stderr and str(kubeconfig) in out.stderr


def test_reading_a_kubeconfig_does_not_import_kubernetes(kube_api: EmulatorHandle, tmp_path: Path) -> None:
    kubeconfig = kube_api.kubeconfig(tmp_path / "kubeconfig", NS)
    code = (
        "import sys\n"
        "from podmortem.sidecar.kubeconfig import from_kubeconfig\n"
        f"print(from_kubeconfig({str(kubeconfig)!r}).base_url)\n"
        "print('kubernetes' in sys.modules, 'urllib3' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == [kube_api.url, "False", "False"]


async def test_a_sidecar_reads_its_containers_last_output_from_the_api_for_stall_detection(
    kube_api: EmulatorHandle, tmp_path: Path
) -> None:
    _, pods = seed_pytorchjob(kube_api)
    kube_api.set_log(NS, pods[1], "pytorch", "step 9\n", at=time.time() - 100)  # silent for 100 s
    env = {
        "POD_NAME": pods[1],
        "POD_NAMESPACE": NS,
        "TORCHELASTIC_ERROR_FILE": str(tmp_path / "error.json"),
        "KUBECONFIG": str(kube_api.kubeconfig(tmp_path / "kubeconfig", NS)),
        "PODMORTEM_STALL_AFTER": "1",
        "PODMORTEM_HOLD_TIMEOUT": "0",
    }
    async with serving(FakeCollector(captures=True)) as served:
        env["PODMORTEM_AGGREGATOR"] = served.target
        stop = asyncio.Event()
        task = asyncio.create_task(
            running.serve(
                config.from_env_and_args(env),
                stop=stop,
                outbox=Outbox(),
                backoff=Backoff(0.01, 0.05),
                install_signal_handlers=False,
            )
        )

        def activity() -> list[bool]:
            return [e.activity.quiet for e in served.collector.events if e.WhichOneof("payload") == "activity"]

        await eventually(lambda: activity() == [True], "quiet")
        kube_api.set_log(NS, pods[1], "pytorch", "step 9\nstep 10\n")  # written now
        await eventually(lambda: activity()[:2] == [True, False], "active again")
        stop.set()
        kube_api.change(PODS, NS, pods[1], terminated(1))
        assert await asyncio.wait_for(task, HANG_GUARD) == 0
    probes = [p for _, p in kube_api.requests() if "/log?" in p and "timestamps=true" in p]
    assert probes and all("tailLines=1&" in p and "limitBytes=512" in p for p in probes)  # one line, bounded
