"""Identity on the gRPC port: with --kube and --auth tokenreview, a stream speaks only for the pod its
projected token is bound to (TokenReview against the API emulator), over TLS (certificates from trustme).

Each refused case is counted by reason; a refused stream changes nothing in the incident book."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
import trustme
from prometheus_client import CollectorRegistry
from support.common import eventually
from support.kube_emulator import EmulatorHandle
from support.kube_objects import NS

from podmortem.aggregator.config import AggregatorConfig
from podmortem.aggregator.kube.client import KubeSettings
from podmortem.aggregator.running import Aggregator
from podmortem.core.model import ErrorRecord
from podmortem.k8s.backoff import Backoff
from podmortem.protocol.v1 import collector_pb2 as pb
from podmortem.protocol.v1 import collector_pb2_grpc as pb_grpc
from podmortem.protocol.wire import error_to_pb, make_event
from podmortem.sidecar import config, running

POD = "mixtral-cpt-worker-1"


def jwt(exp: float) -> str:
    """A token shaped like the kubelet's (only `exp` is read by the aggregator, to bound its cache)."""

    def part(doc: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(doc).encode()).decode().rstrip("=")

    return f"{part({'alg': 'RS256'})}.{part({'exp': int(exp), 'aud': ['podmortem']})}.c2lnbmF0dXJl"


@pytest.fixture
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
async def aggregator(kube_api: EmulatorHandle, tmp_path: Path, ca: trustme.CA) -> AsyncIterator[Aggregator]:
    cert = ca.issue_cert("127.0.0.1")
    cert.private_key_pem.write_to_path(str(tmp_path / "tls.key"))
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "tls.crt"))
    settings = KubeSettings(
        enabled=True,
        kubeconfig=str(kube_api.kubeconfig(tmp_path / "kubeconfig", NS)),
        namespaces=(NS,),
        publish=frozenset(),
    )
    config = AggregatorConfig(
        listen="127.0.0.1:0",
        metrics_listen="",
        verdict_dir="",
        auth="tokenreview",
        tls_cert=str(tmp_path / "tls.crt"),
        tls_key=str(tmp_path / "tls.key"),
    )
    agg = Aggregator(config, registry=CollectorRegistry(), kube_settings=settings)
    await agg.start()
    try:
        yield agg
    finally:
        await agg.stop(grace=1)


async def report(agg: Aggregator, ca: trustme.CA, token: str | None, namespace: str = NS, pod: str = POD) -> str:
    """Register as namespace/pod and send one event; "OK" or the status code's name."""
    creds = grpc.ssl_channel_credentials(root_certificates=ca.cert_pem.bytes())
    metadata = (("authorization", f"Bearer {token}"),) if token else ()
    async with grpc.aio.secure_channel(f"127.0.0.1:{agg.port}", creds) as channel:
        call = pb_grpc.CollectorStub(channel).Report(metadata=metadata)  # type: ignore[no-untyped-call]
        try:
            reg = pb.Register(job=pb.JobRef(namespace=namespace, name="mixtral-cpt"), pod=pod, attempt="0")
            await call.write(pb.SidecarMessage(register=reg))
            await call.read()
            event = make_event(error_to_pb(ErrorRecord(message="ValueError: forged", timestamp=5)), "e-1")
            await call.write(pb.SidecarMessage(event=event))
            await call.read()
            await call.done_writing()
            return "OK"
        except grpc.aio.AioRpcError as exc:
            return str(exc.code().name)


def rejected(agg: Aggregator, reason: str) -> float:
    return agg.metrics.registry.get_sample_value("podmortem_streams_rejected_total", {"reason": reason}) or 0.0


async def test_a_pods_own_token_lets_it_speak_for_itself(
    aggregator: Aggregator, kube_api: EmulatorHandle, ca: trustme.CA
) -> None:
    token = jwt(time.time() + 3600)
    kube_api.bind_token(token, NS, POD)
    assert await report(aggregator, ca, token) == "OK"
    incident = aggregator.book.incident((NS, "mixtral-cpt", "0"))
    assert incident is not None and [m.pod for m in incident.members] == [POD]
    # A reconnect is served from the cache: one TokenReview for the token, not one per stream.
    assert await report(aggregator, ca, token) == "OK"
    reviews = [p for m, p in kube_api.requests() if m == "POST" and "tokenreviews" in p]
    assert len(reviews) == 1


@pytest.mark.parametrize(
    ("case", "code", "reason"),
    [
        ("no token", "UNAUTHENTICATED", "no_token"),
        ("unknown token", "UNAUTHENTICATED", "rejected"),
        # Its claims are read (for the expiry) before the review: json recursed once per level and
        # RecursionError ended the stream as UNKNOWN, neither refused nor counted.
        ("a token whose claims nest 2,000 deep", "UNAUTHENTICATED", "rejected"),
        ("expired token", "UNAUTHENTICATED", "expired"),
        ("another pod's token", "PERMISSION_DENIED", "other_pod"),
        ("a pod outside the watched namespaces", "PERMISSION_DENIED", "namespace"),
    ],
)
async def test_streams_that_may_not_speak_are_refused_and_counted(
    aggregator: Aggregator, kube_api: EmulatorHandle, ca: trustme.CA, case: str, code: str, reason: str
) -> None:
    token: str | None = jwt(time.time() + 3600)
    namespace, pod = NS, POD
    if case == "no token":
        token = None
    elif case == "a token whose claims nest 2,000 deep":
        token = "eyJhbGciOiJSUzI1NiJ9." + base64.urlsafe_b64encode(b"[" * 2000).decode().rstrip("=") + ".c2ln"
    elif case == "expired token":
        assert token is not None
        kube_api.bind_token(token := jwt(time.time() - 60), NS, POD)
    elif case == "another pod's token":
        assert token is not None
        kube_api.bind_token(token, NS, "mixtral-cpt-worker-2")  # bound to worker-2, registering as worker-1
    elif case == "a pod outside the watched namespaces":
        assert token is not None
        kube_api.bind_token(token, "kube-system", "coredns-0")
        namespace, pod = "kube-system", "coredns-0"
    assert await report(aggregator, ca, token, namespace, pod) == code
    assert rejected(aggregator, reason) == 1
    assert aggregator.book.open_incidents() == [] and aggregator.book.incident((namespace, "mixtral-cpt", "0")) is None


@pytest.mark.parametrize("ca_as", ["file", "pem"])
async def test_a_real_sidecar_presents_its_token_over_tls(
    aggregator: Aggregator, kube_api: EmulatorHandle, ca: trustme.CA, tmp_path: Path, ca_as: str
) -> None:
    token = jwt(time.time() + 3600)
    kube_api.bind_token(token, NS, POD)
    (tmp_path / "token").write_text(token + "\n")
    ca.cert_pem.write_to_path(str(tmp_path / "ca.crt"))
    env = {
        "POD_NAME": POD, "POD_NAMESPACE": NS, "TORCHELASTIC_ERROR_FILE": str(tmp_path / "run" / "error.json"),
        "PODMORTEM_AGGREGATOR": f"127.0.0.1:{aggregator.port}", "PODMORTEM_JOB_NAME": "mixtral-cpt",
        "PODMORTEM_POD_SOURCE": "none", "PODMORTEM_TOKEN_FILE": str(tmp_path / "token"),
    }  # fmt: skip
    if ca_as == "file":
        env["PODMORTEM_TLS_CA"] = str(tmp_path / "ca.crt")
    else:  # as the webhook injects it
        env["PODMORTEM_TLS_CA_PEM"] = ca.cert_pem.bytes().decode()
    stop = asyncio.Event()
    task = asyncio.create_task(
        running.serve(
            config.from_env_and_args(env), stop=stop, backoff=Backoff(0.01, 0.1), install_signal_handlers=False
        )
    )
    try:
        await eventually(lambda: aggregator.metrics.connected._value.get() == 1, "the sidecar registered")
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
    assert rejected(aggregator, "no_token") == 0 and rejected(aggregator, "other_pod") == 0
