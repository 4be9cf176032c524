"""The aggregator as the chart deploys it in cluster mode, for tests: `--kube --auth tokenreview` over TLS (a
certificate for 127.0.0.1 from the test's trustme CA) against the API emulator, gRPC on port 0."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import trustme
from prometheus_client import CollectorRegistry

from podmortem.aggregator.config import AggregatorConfig
from podmortem.aggregator.kube.client import KubeSettings
from podmortem.aggregator.running import Aggregator
from support.kube_emulator import EmulatorHandle
from support.kube_objects import NS


@contextlib.asynccontextmanager
async def secure_aggregator(
    api: EmulatorHandle, tmp_path: Path, ca: trustme.CA, kube: dict[str, Any] | None = None, **config: Any
) -> AsyncIterator[Aggregator]:
    """Running until the block ends. `kube`: KubeSettings fields over the defaults here (namespace NS,
    nothing published); `config`: AggregatorConfig fields."""
    cert = ca.issue_cert("127.0.0.1")
    cert.private_key_pem.write_to_path(str(tmp_path / "tls.key"))
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "tls.crt"))
    settings = KubeSettings(
        enabled=True,
        kubeconfig=str(api.kubeconfig(tmp_path / "kubeconfig", NS)),
        namespaces=(NS,),
        publish=frozenset(),
        **(kube or {}),
    )
    options: dict[str, Any] = {
        "listen": "127.0.0.1:0",
        "metrics_listen": "",
        "verdict_dir": "",
        "auth": "tokenreview",
        "tls_cert": str(tmp_path / "tls.crt"),
        "tls_key": str(tmp_path / "tls.key"),
        **config,
    }
    agg = Aggregator(AggregatorConfig(**options), registry=CollectorRegistry(), kube_settings=settings)
    await agg.start()
    try:
        yield agg
    finally:
        await agg.stop(grace=1)
