"""The sidecar's own-pod watch (raw HTTP, no client library) against the API emulator."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from support.common import eventually
from support.kube_emulator import PODS, EmulatorHandle
from support.kube_objects import NS, seed_pytorchjob, terminated

from podmortem.core import podstatus
from podmortem.protocol import wire
from podmortem.sidecar.apiserver import ApiEndpoint, OwnPod
from podmortem.sidecar.podsource import PodReporter, PodSource

POD = "mixtral-cpt-worker-1"


def own_pod(api: EmulatorHandle, **kwargs: Any) -> OwnPod:
    endpoint = ApiEndpoint(api.url, token=api.emulator.token)
    options: dict[str, Any] = {"backoff_initial": 0.001, "backoff_max": 0.01, "watch_timeout": 30}
    options.update(kwargs)
    return OwnPod(endpoint, NS, POD, **options)


@contextlib.asynccontextmanager
async def collecting(watch: OwnPod) -> AsyncIterator[list[dict[str, Any]]]:
    seen: list[dict[str, Any]] = []

    async def run() -> None:
        async for pod in watch.pods():
            seen.append(pod)

    task = asyncio.create_task(run())
    try:
        yield seen
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_it_is_a_pod_source_and_sees_its_termination(kube_api: EmulatorHandle) -> None:
    seed_pytorchjob(kube_api)
    watch = own_pod(kube_api)
    assert isinstance(watch, PodSource)
    async with collecting(watch) as seen:
        await eventually(lambda: len(seen) == 1, "the pod as it is")
        assert seen[0]["metadata"]["name"] == POD and seen[0]["status"]["phase"] == "Running"
        await eventually(lambda: kube_api.emulator.open_watches == 1, "watching")
        kube_api.change(PODS, NS, "mixtral-cpt-worker-0", terminated(1))  # another pod: not ours
        kube_api.change(PODS, NS, POD, terminated(137, "OOMKilled"))
        await eventually(lambda: len(seen) == 2, "the termination")
    snap = podstatus.snapshot(seen[1])
    assert snap.name == POD and snap.termination is not None
    assert (snap.termination.exit_code, snap.termination.reason) == (137, "OOMKilled")
    events = wire.events_from_snapshot(snap, podstatus.snapshot(seen[0]))
    assert [e.WhichOneof("payload") for e in events] == ["termination"]
    # Only our pod is asked for: the selector is applied by the server.
    watches = [p for m, p in kube_api.requests() if "watch=true" in p]
    assert all("fieldSelector=metadata.name%3Dmixtral-cpt-worker-1" in p for p in watches)


async def test_restart_disruption_and_deletion_come_through(kube_api: EmulatorHandle) -> None:
    seed_pytorchjob(kube_api)
    async with collecting(own_pod(kube_api)) as seen:
        await eventually(lambda: len(seen) == 1, "the pod")
        await eventually(lambda: kube_api.emulator.open_watches == 1, "watching")
        restarted = terminated(1)["status"]["containerStatuses"][0]
        status = {"name": "pytorch", "restartCount": 1, "lastState": restarted["state"],
                  "state": {"running": {"startedAt": "2026-11-21T15:06:20Z"}}}  # fmt: skip
        kube_api.change(PODS, NS, POD, {"status": {"containerStatuses": [status]}})
        disruption = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
                      "lastTransitionTime": "2026-11-21T15:06:30Z"}  # fmt: skip
        kube_api.change(PODS, NS, POD, {"status": {"conditions": [disruption]}})
        kube_api.change(PODS, NS, POD, {"metadata": {"deletionTimestamp": "2026-11-21T15:06:31Z"}})
        kube_api.remove(PODS, NS, POD)
        await eventually(lambda: len(seen) == 5, "all five versions")
    snaps = [podstatus.snapshot(p) for p in seen]
    kinds = [
        [e.WhichOneof("payload") for e in wire.events_from_snapshot(s, prev)] for prev, s in itertools.pairwise(snaps)
    ]
    assert kinds == [["termination"], ["condition"], ["deletion"], []]
    assert snaps[1].last_termination is not None and snaps[1].last_termination.exit_code == 1


async def test_a_broken_stream_resumes_and_410_relists(kube_api: EmulatorHandle) -> None:
    seed_pytorchjob(kube_api)
    watch = own_pod(kube_api)
    async with collecting(watch) as seen:
        await eventually(lambda: len(seen) == 1 and kube_api.emulator.open_watches == 1, "watching")
        kube_api.break_watches()
        kube_api.change(PODS, NS, POD, {"metadata": {"labels": {"x": "1"}}})
        await eventually(lambda: len(seen) == 2, "the change after the break")
        assert watch.lists == 1  # resumed from the version it had
        await eventually(lambda: kube_api.emulator.open_watches == 1, "watching again")
        away = kube_api.fail(500, 1_000_000, methods=("GET",), plural="pods")
        kube_api.break_watches()
        kube_api.change(PODS, NS, POD, terminated(2))
        kube_api.compact()
        await eventually(lambda: away.served >= 2, "retrying")
        away.times = 0
        await eventually(lambda: len(seen) == 3, "the termination, from a re-list")
        assert watch.lists == 2
    assert seen[2]["status"]["phase"] == "Failed"


async def test_read_and_a_missing_pod(kube_api: EmulatorHandle) -> None:
    seed_pytorchjob(kube_api)
    pod = await own_pod(kube_api).read()
    assert pod is not None and pod["metadata"]["name"] == POD
    kube_api.remove(PODS, NS, POD)
    assert await own_pod(kube_api).read() is None


async def test_a_wrong_token_is_retried_not_fatal(kube_api: EmulatorHandle) -> None:
    seed_pytorchjob(kube_api)
    watch = OwnPod(ApiEndpoint(kube_api.url, token="wrong"), NS, POD, backoff_initial=0.001, backoff_max=0.01)
    async with collecting(watch) as seen:
        await eventually(lambda: sum(1 for _ in kube_api.requests()) >= 3, "retries")
        assert seen == []
        kube_api.emulator.token = "wrong"  # the token was rotated on the server side: now it matches
        await eventually(lambda: len(seen) == 1, "the pod once authorised")


async def test_the_token_file_is_reread(kube_api: EmulatorHandle, tmp_path: Path) -> None:
    seed_pytorchjob(kube_api)
    token = tmp_path / "token"
    token.write_text("test-token\n")
    watch = OwnPod(ApiEndpoint(kube_api.url, token_file=token), NS, POD)
    assert await watch.read() is not None
    token.write_text("rotated")
    assert await watch.read() is None  # the emulator still wants the old one: the new one was sent


def test_in_cluster_endpoint(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("t0k3n")
    endpoint = ApiEndpoint.in_cluster(
        {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}, tmp_path
    )
    assert endpoint.base_url == "https://10.96.0.1:443" and endpoint.bearer() == "t0k3n" and endpoint.ca_file is None
    with pytest.raises(ValueError):
        ApiEndpoint.in_cluster({}, tmp_path)


async def test_log_tail_is_bounded_and_ends_with_the_last_line(kube_api: EmulatorHandle) -> None:
    seed_pytorchjob(kube_api)
    lines = [f"[rank1]: step {i} " + "x" * (i % 300) for i in range(5000)] + ["ValueError: bad label"]
    kube_api.set_log(NS, POD, "pytorch", "\n".join(lines) + "\n")
    tail = await own_pod(kube_api).log_tail("pytorch", 4096)
    assert len(tail.encode()) <= 4096
    assert tail.endswith("ValueError: bad label\n") and tail.startswith("[rank1]: step ")
    assert await own_pod(kube_api).log_tail("sidecar", 4096) == ""  # no such container: "" and a log line
    asked = [p for _, p in kube_api.requests() if "/log?" in p]
    assert all("limitBytes=16384" in p for p in asked)  # never more than 4x the bound on the wire


def test_the_sidecar_does_not_import_kubernetes() -> None:
    code = "import sys, podmortem.sidecar.apiserver; print('kubernetes' in sys.modules, 'urllib3' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


async def test_after_a_restart_the_failed_runs_log_is_read_from_the_api(kube_api: EmulatorHandle) -> None:
    """The container failed and runs again: its current log is the new run's, and the failure is in
    the log the API serves with previous=true (the sidecar's real request, not a stand-in source)."""
    seed_pytorchjob(kube_api)
    kube_api.set_log(NS, POD, "pytorch", "[rank1]: step 1 loss 2.1 (the new run)\n")
    kube_api.set_log(NS, POD, "pytorch", "[rank1]: ValueError: bad label 7 (the failed run)\n", previous=True)
    failed = terminated(1)["status"]["containerStatuses"][0]
    status = {"name": "pytorch", "restartCount": 1, "lastState": failed["state"],
              "state": {"running": {"startedAt": "2026-11-21T15:06:20Z"}}}  # fmt: skip
    kube_api.change(PODS, NS, POD, {"status": {"containerStatuses": [status]}})
    source = own_pod(kube_api)
    pod = await source.read()
    assert pod is not None
    events = await PodReporter(source, lambda e: None).observe(pod)
    assert [e.WhichOneof("payload") for e in events] == ["log_tail", "termination"]
    assert events[0].log_tail.text == b"[rank1]: ValueError: bad label 7 (the failed run)\n"
    assert any("/log?" in path and "previous=true" in path for _, path in kube_api.requests())


async def test_last_output_is_the_time_of_the_logs_last_line(kube_api: EmulatorHandle) -> None:
    """The activity detector's probe: one `tailLines=1&timestamps=true` read, whatever the log's length."""
    seed_pytorchjob(kube_api)
    kube_api.set_log(NS, POD, "pytorch", "".join(f"step {i}\n" for i in range(10_000)), at=1_795_760_000.123456789)
    assert await own_pod(kube_api).last_output("pytorch") == pytest.approx(1_795_760_000.123456, abs=1e-6)
    (asked,) = [p for _, p in kube_api.requests() if "/log?" in p]
    assert "tailLines=1" in asked and "timestamps=true" in asked and "limitBytes=512" in asked
    kube_api.set_log(NS, POD, "pytorch", "")
    assert await own_pod(kube_api).last_output("pytorch") is None  # no output yet
    assert await own_pod(kube_api).last_output("sidecar") is None  # no such container: None, logged
