"""Identity on the gRPC port: with --kube and --auth tokenreview, a stream speaks only for the pod its
projected token is bound to (TokenReview against the API emulator), over TLS (certificates from trustme),
and only as the member of the job the pod object says it belongs to, at the position it states.

Each refused case is counted by reason; a refused stream changes nothing in the incident book."""

from __future__ import annotations

import asyncio
import base64
import collections
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
import trustme
from support.aggregators import secure_aggregator
from support.common import eventually, jwt
from support.kube_emulator import PODS, EmulatorHandle
from support.kube_objects import NS, seed_pytorchjob

from podmortem.aggregator.auth import TokenReviewer
from podmortem.aggregator.incidents import MemberKey
from podmortem.aggregator.refusals import AuthRefused
from podmortem.aggregator.running import Aggregator
from podmortem.core.model import ErrorRecord
from podmortem.k8s.backoff import Backoff
from podmortem.protocol.v1 import collector_pb2 as pb
from podmortem.protocol.v1 import collector_pb2_grpc as pb_grpc
from podmortem.protocol.wire import error_to_pb, make_event
from podmortem.sidecar import config, running

POD_NS = NS
POD = "mixtral-cpt-worker-1"  # rank 1 of the PyTorchJob mixtral-cpt (three workers, no master)


@pytest.fixture
def ca() -> trustme.CA:
    return trustme.CA()


def bind(kube_api: EmulatorHandle, token: str, pod: str, namespace: str = NS) -> None:
    """`token` bound to the pod as stored in the emulator (its uid), or to a pod that is not there."""
    stored = kube_api.get(PODS, namespace, pod)
    kube_api.bind_token(token, namespace, pod, uid=str((stored or {}).get("metadata", {}).get("uid") or ""))


@pytest.fixture
async def aggregator(kube_api: EmulatorHandle, tmp_path: Path, ca: trustme.CA) -> AsyncIterator[Aggregator]:
    seed_pytorchjob(kube_api, workers=3)  # the job mixtral-cpt: pods mixtral-cpt-worker-0..2
    async with secure_aggregator(kube_api, tmp_path, ca) as agg:
        yield agg


async def report(
    agg: Aggregator,
    ca: trustme.CA,
    token: str | None,
    namespace: str = NS,
    pod: str = POD,
    job: str = "mixtral-cpt",
    **claims: int | str | None,
) -> str:
    """Register as namespace/pod of `job` (with `claims`: rank, replica_index, world_size_hint, attempt) and send
    one event; "OK" or the status code's name."""
    creds = grpc.ssl_channel_credentials(root_certificates=ca.cert_pem.bytes())
    metadata = (("authorization", f"Bearer {token}"),) if token else ()
    async with grpc.aio.secure_channel(f"127.0.0.1:{agg.port}", creds) as channel:
        call = pb_grpc.CollectorStub(channel).Report(metadata=metadata)  # type: ignore[no-untyped-call]
        try:
            reg = pb.Register(job=pb.JobRef(namespace=namespace, name=job), pod=pod)
            for field, value in claims.items():
                setattr(reg, field, value)
            await call.write(pb.SidecarMessage(register=reg))
            await call.read()
            event = make_event(error_to_pb(ErrorRecord(message="ValueError: forged", timestamp=5)), "e-1")
            await call.write(pb.SidecarMessage(event=event))
            await call.read()
            await call.done_writing()
            return "OK"
        except grpc.aio.AioRpcError as exc:
            return str(exc.code().name)


def forged(agg: Aggregator, namespace: str = NS) -> bool:
    """Did the stream's event reach the job's incident (the pod watch knows the job's pods regardless)?"""
    incident = agg.book.incident((namespace, "mixtral-cpt", ""))
    return incident is not None and any(m.error is not None for m in incident.members)


def rejected(agg: Aggregator, reason: str) -> float:
    return agg.metrics.registry.get_sample_value("podmortem_streams_rejected_total", {"reason": reason}) or 0.0


async def test_a_pods_own_token_lets_it_speak_for_itself(
    aggregator: Aggregator, kube_api: EmulatorHandle, ca: trustme.CA
) -> None:
    token = jwt(time.time() + 3600)
    bind(kube_api, token, POD)
    assert await report(aggregator, ca, token) == "OK"
    incident = aggregator.book.incident((NS, "mixtral-cpt", ""))
    assert incident is not None and [m.error.message for m in incident.members if m.error] == ["ValueError: forged"]
    assert [m.pod for m in incident.members if m.error] == [POD]  # beside its peers, which the pod watch knows
    # A reconnect is served from the cache: one TokenReview for the token, not one per stream.
    assert await report(aggregator, ca, token) == "OK"
    reviews = [p for m, p in kube_api.requests() if m == "POST" and "tokenreviews" in p]
    assert len(reviews) == 1


def reviews(kube_api: EmulatorHandle) -> int:
    return sum(1 for m, p in kube_api.requests() if m == "POST" and "tokenreviews" in p)


@pytest.mark.parametrize(
    ("case", "code", "reason", "reviewed"),
    [
        # Refused on what the token says of itself, without asking the API server (a flood of these
        # used the publishers' API budget before: 1,004 reviews for 2,000 streams).
        ("no token", "UNAUTHENTICATED", "no_token", 0),
        ("not a JWT", "UNAUTHENTICATED", "not_jwt", 0),
        # json recursed once per level and RecursionError ended the stream as UNKNOWN, uncounted.
        ("a token whose claims nest 2,000 deep", "UNAUTHENTICATED", "not_jwt", 0),
        ("a token for another audience", "UNAUTHENTICATED", "audience", 0),
        ("expired token", "UNAUTHENTICATED", "expired", 0),
        # Only the API server can say.
        ("unknown token", "UNAUTHENTICATED", "rejected", 1),
        ("another pod's token", "PERMISSION_DENIED", "other_pod", 1),
        ("a pod outside the watched namespaces", "PERMISSION_DENIED", "namespace", 1),
    ],
)
async def test_streams_that_may_not_speak_are_refused_and_counted(
    aggregator: Aggregator,
    kube_api: EmulatorHandle,
    ca: trustme.CA,
    case: str,
    code: str,
    reason: str,
    reviewed: int,
) -> None:
    token: str | None = jwt(time.time() + 3600)
    namespace, pod = NS, POD
    if case == "no token":
        token = None
    elif case == "not a JWT":
        token = "a-random-string-of-garbage"
    elif case == "a token whose claims nest 2,000 deep":
        token = "eyJhbGciOiJSUzI1NiJ9." + base64.urlsafe_b64encode(b"[" * 2000).decode().rstrip("=") + ".c2ln"
    elif case == "a token for another audience":
        bind(kube_api, token := jwt(time.time() + 3600, aud="kubernetes"), POD)
    elif case == "expired token":
        bind(kube_api, token := jwt(time.time() - 60), POD)
    elif case == "another pod's token":
        assert token is not None
        bind(kube_api, token, "mixtral-cpt-worker-2")  # bound to worker-2, registering as worker-1
    elif case == "a pod outside the watched namespaces":
        assert token is not None
        kube_api.bind_token(token, "kube-system", "coredns-0")
        namespace, pod = "kube-system", "coredns-0"
    assert await report(aggregator, ca, token, namespace, pod) == code
    assert rejected(aggregator, reason) == 1
    assert reviews(kube_api) == reviewed
    assert aggregator.book.open_incidents() == [] and not forged(aggregator, namespace)


async def test_a_refused_token_is_reviewed_once_however_many_streams_present_it(
    aggregator: Aggregator, kube_api: EmulatorHandle, ca: trustme.CA, caplog: pytest.LogCaptureFixture
) -> None:
    token = jwt(time.time() + 3600)  # well formed and ours, unknown to the API server
    codes = await asyncio.gather(*(report(aggregator, ca, token) for _ in range(20)))  # at once: one review
    codes.append(await report(aggregator, ca, token))  # later: the cached refusal
    assert codes == ["UNAUTHENTICATED"] * 21
    assert rejected(aggregator, "rejected") == 21
    assert reviews(kube_api) == 1
    # Counted each, logged once (a flood must not write a line per stream).
    assert caplog.text.count("stream refused (rejected)") == 1


async def test_token_reviews_wait_in_a_bounded_queue_on_a_client_of_their_own(
    aggregator: Aggregator, kube_api: EmulatorHandle
) -> None:
    reviewer = aggregator.service.authenticator
    assert reviewer is not None and aggregator._kube is not None
    # The publishers' client is not the reviews' one: no review spends its rate limit or its threads.
    assert reviewer.kube is not aggregator._kube and reviewer.kube._executor is not None
    review_calls = reviewer.kube.calls
    # One review in flight and two waiting in a lane: of ten distinct unknown tokens at once, seven are
    # refused at once (UNAVAILABLE, the sidecar retries), without a review.
    small = TokenReviewer(reviewer.kube, max_reviews=1, max_waiting=2)
    tokens = [jwt(time.time() + 3600, jti=i) for i in range(10)]
    outcomes = await asyncio.gather(*(small.identify(t) for t in tokens), return_exceptions=True)
    reasons = [o.reason if isinstance(o, AuthRefused) else repr(o) for o in outcomes]
    assert sorted(reasons) == ["rejected"] * 3 + ["review_busy"] * 7
    assert [o.code for o in outcomes if isinstance(o, AuthRefused) and o.reason == "review_busy"] == [
        "RESOURCE_EXHAUSTED"
    ] * 7
    assert small.reviews == 3 == reviews(kube_api)
    assert reviewer.kube.calls - review_calls == 3  # every review went through the reviews' own client


@pytest.mark.parametrize("ca_as", ["file", "pem"])
async def test_a_real_sidecar_presents_its_token_over_tls(
    aggregator: Aggregator, kube_api: EmulatorHandle, ca: trustme.CA, tmp_path: Path, ca_as: str
) -> None:
    token = jwt(time.time() + 3600)
    bind(kube_api, token, POD)
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


# -- job membership comes from the API, not from the stream ------------------------------------------


def notebook() -> dict[str, object]:
    """A pod of the same namespace that is no part of any job (the issue's attacker)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "notebook-0", "namespace": NS, "labels": {"app": "jupyter"}},
        "spec": {"nodeName": "node-9", "containers": [{"name": "notebook", "image": "jupyter"}]},
        "status": {"phase": "Running"},
    }


async def test_a_pod_outside_the_job_cannot_join_it(
    aggregator: Aggregator, kube_api: EmulatorHandle, ca: trustme.CA
) -> None:
    # The notebook presents its own valid projected token, registers as itself in the job and sends a
    # CUDA error dated before the job's real failure: acked and named the root before. Refused now.
    kube_api.put(PODS, notebook())
    token = jwt(time.time() + 3600)
    bind(kube_api, token, "notebook-0")
    assert await report(aggregator, ca, token, pod="notebook-0") == "PERMISSION_DENIED"
    assert rejected(aggregator, "not_member") == 1
    assert not forged(aggregator, NS)
    assert aggregator.book.open_incidents() == []


@pytest.mark.parametrize(
    "claims",
    [{"rank": 0}, {"replica_index": 2}],
    ids=["rank 0 (the pod is rank 1)", "replica index 2 (the pod's is 1)"],
)
async def test_a_member_cannot_claim_another_position_in_its_own_job(
    aggregator: Aggregator, kube_api: EmulatorHandle, ca: trustme.CA, claims: dict[str, int]
) -> None:
    token = jwt(time.time() + 3600)
    bind(kube_api, token, POD)
    assert await report(aggregator, ca, token, POD_NS, POD, "mixtral-cpt", **claims) == "PERMISSION_DENIED"
    assert rejected(aggregator, "claim_mismatch") == 1
    assert not forged(aggregator, NS)


async def test_a_members_place_comes_from_its_pod_object_and_is_marked_verified(
    aggregator: Aggregator, kube_api: EmulatorHandle, ca: trustme.CA
) -> None:
    token = jwt(time.time() + 3600)
    bind(kube_api, token, POD)
    # No rank claimed, and a world-size hint far above the job's own size (3 workers).
    assert await report(aggregator, ca, token, world_size_hint=64) == "OK"
    incident = aggregator.book.incident((NS, "mixtral-cpt", ""))
    assert incident is not None
    [member] = [m for m in incident.members if m.pod == POD]
    assert (member.rank, member.replica_index, member.replica_type, member.node) == (1, 1, "worker", "node-1")
    assert incident.world_size == 3 and incident.job.kind == "PyTorchJob"
    assert aggregator.book.is_verified(MemberKey((NS, "mixtral-cpt", ""), POD))


async def test_an_attempt_its_pod_does_not_account_for_is_the_apis(
    aggregator: Aggregator, kube_api: EmulatorHandle, ca: trustme.CA
) -> None:
    # A pod registers invented attempts to open incident after incident: each is filed under the attempt
    # its pod object states (no JobSet attempt, no restart). A restart one ahead of the object is the
    # sidecar's to see first, and is kept.
    token = jwt(time.time() + 3600)
    bind(kube_api, token, POD)
    for attempt in ("n0", "n1", "r5"):
        assert await report(aggregator, ca, token, attempt=attempt) == "OK"
    assert await report(aggregator, ca, token, attempt="r1") == "OK"
    filed = {key[2] for key in aggregator.book._jobs if key[:2] == (NS, "mixtral-cpt")}
    assert filed == {"", "r1"}


async def test_a_flood_of_unauthenticated_streams_ends_each_unauthenticated(
    aggregator: Aggregator, ca: trustme.CA
) -> None:
    # 200 streams without a token or with garbage, over real TLS sockets; a quarter of them write their
    # `register` 1.2 s after opening (a flood's client is slow to write). A stream refused before its first
    # message arrived, ended while the client's write was on its way, ended INTERNAL for that client. Each
    # is ended only after its first message is read: every client's write goes through, and every stream
    # ends UNAUTHENTICATED.
    creds = grpc.ssl_channel_credentials(root_certificates=ca.cert_pem.bytes())

    async def one(i: int) -> str:
        metadata = () if i % 2 else (("authorization", f"Bearer garbage-{i}"),)
        async with grpc.aio.secure_channel(f"127.0.0.1:{aggregator.port}", creds) as channel:
            call = pb_grpc.CollectorStub(channel).Report(metadata=metadata)  # type: ignore[no-untyped-call]
            if i % 4 == 3:
                await asyncio.sleep(1.2)
            try:
                await call.write(
                    pb.SidecarMessage(register=pb.Register(job=pb.JobRef(namespace=NS, name="j"), pod=POD))
                )
                await call.read()
            except grpc.aio.AioRpcError as exc:
                return str(exc.code().name)
            except Exception as exc:  # the write refused: the call ended under it
                return type(exc).__name__
            return "OK"

    endings = collections.Counter(await asyncio.gather(*(one(i) for i in range(200))))
    assert endings == {"UNAUTHENTICATED": 200}
