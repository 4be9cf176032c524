"""The real webhook server (`podmortem webhook`) for tests: serving certificates from a trustme CA, started on
127.0.0.1 port 0, and its registration with the Kubernetes emulator as a MutatingWebhookConfiguration would
register it (the chart's `retry-policy.podmortem.io` for Jobs and JobSets, `inject.sidecar.podmortem.io`
for pods)."""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import trustme
from prometheus_client import CollectorRegistry

from podmortem.webhook.config import WebhookConfig
from podmortem.webhook.mutation import Injection
from podmortem.webhook.server import WebhookServer
from support.kube_admission import JOBSET_WEBHOOK_CONFIGURATION, jobset_defaults
from support.kube_emulator import EmulatorHandle, Webhook

RETRY_POLICY_RESOURCES = frozenset({"batch/jobs", "jobset.x-k8s.io/jobsets"})


def write_cert(ca: trustme.CA, directory: Path, *names: str) -> tuple[Path, Path]:
    cert = ca.issue_cert(*names)
    cert_path, key_path = directory / "tls.crt", directory / "tls.key"
    cert_path.write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    key_path.write_bytes(cert.private_key_pem.bytes())
    return cert_path, key_path


def client_ssl(ca: trustme.CA) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    return ctx


@contextlib.asynccontextmanager
async def webhook_server(ca: trustme.CA, directory: Path) -> AsyncIterator[WebhookServer]:
    """The webhook serving HTTPS on 127.0.0.1 (a certificate for its Service name and the address)."""
    cert, key = write_cert(ca, directory, "podmortem-webhook.podmortem.svc", "127.0.0.1")
    config = WebhookConfig(
        tls_cert=cert,
        tls_key=key,
        listen="127.0.0.1:0",
        metrics_listen="127.0.0.1:0",
        injection=Injection(image="example.org/podmortem:1.0", aggregator="podmortem.podmortem.svc:50051"),
    )
    srv = WebhookServer(config, registry=CollectorRegistry())
    await srv.start()
    try:
        yield srv
    finally:
        await srv.stop()


def register_retry_policy(
    api: EmulatorHandle, srv: WebhookServer, ca: trustme.CA, name: str = "podmortem-webhook"
) -> None:
    """The chart's retry-policy webhook, registered with the emulator (failurePolicy Fail: what the API server
    answers when the webhook errs is part of what a test should see)."""
    api.register_webhook(Webhook(name, f"https://127.0.0.1:{srv.port}/mutate", RETRY_POLICY_RESOURCES, client_ssl(ca)))


def register_jobset_defaults(api: EmulatorHandle) -> None:
    """JobSet's own defaulting webhook, as a model of its source (support.kube_admission.jobset_defaults)."""
    jobsets = frozenset({"jobset.x-k8s.io/jobsets"})
    api.register_webhook(Webhook(JOBSET_WEBHOOK_CONFIGURATION, "", jobsets, model=jobset_defaults))
