"""Real sidecars, in-process, each watching its own pod through the Kubernetes API emulator with raw HTTP (as in
a cluster: `PODMORTEM_POD_SOURCE=api`) and streaming to an aggregator on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

from podmortem.k8s.backoff import Backoff
from podmortem.sidecar import config, running
from podmortem.sidecar.apiserver import ApiEndpoint, OwnPod
from support.kube_emulator import EmulatorHandle
from support.kube_objects import NS


@contextlib.asynccontextmanager
async def api_sidecars(
    api: EmulatorHandle,
    pods: list[str],
    port: int,
    tmp_path: Path,
    env: Mapping[str, str] | None = None,
    stop_within: float = 30.0,
) -> AsyncIterator[None]:
    """One sidecar per pod of `pods` (namespace NS), its error file at tmp_path/<pod>/error.json, `env` added to
    each one's environment; all stopped on exit, within `stop_within` seconds."""
    stop = asyncio.Event()
    tasks = []
    for pod in pods:
        pod_env = {
            "POD_NAME": pod,
            "POD_NAMESPACE": NS,
            "TORCHELASTIC_ERROR_FILE": str(tmp_path / pod / "error.json"),
            "PODMORTEM_AGGREGATOR": f"127.0.0.1:{port}",
            "PODMORTEM_POD_SOURCE": "api",
            **(env or {}),
        }
        source = OwnPod(ApiEndpoint(api.url, token=api.emulator.token), NS, pod)
        tasks.append(asyncio.create_task(running.serve(
            config.from_env_and_args(pod_env), stop=stop, pod_source=source, backoff=Backoff(0.01, 0.1),
            install_signal_handlers=False,
        )))  # fmt: skip
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), stop_within)
