"""Who is on the other end of a sidecar stream: the pod its projected ServiceAccount token is bound to.

Anyone who reaches the aggregator's port could otherwise add phantom members, forge terminations or
hold a verdict — and, with `--kube`, make the aggregator annotate any pod it can write. So with
`--auth tokenreview` (the default with `--kube`) every stream presents the pod's projected token
(audience `podmortem`, mounted into the sidecar by the injection webhook) as `authorization: Bearer`,
and the aggregator asks the API server who it is (`TokenReview`, through the one Kubernetes door,
`aggregator.kube.client`). A token is accepted only when it is authenticated for our audience and
bound to a pod; the stream may then speak only for that pod, in that namespace, and only in the
namespaces the aggregator watches. Results are cached per token until its own expiry (at most
`MAX_CACHE_SECONDS`), so a reconnect storm costs one review per token, not one per stream.

Errors map onto gRPC codes: no or invalid token -> UNAUTHENTICATED; a valid token for another pod or
a namespace not watched -> PERMISSION_DENIED. Each rejection is counted by reason.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from podmortem.aggregator.refusals import AuthRefused
from podmortem.k8s.errors import KubeError
from podmortem.protocol.v1 import collector_pb2 as pb

AUDIENCE = "podmortem"
POD_NAME = "authentication.kubernetes.io/pod-name"
POD_UID = "authentication.kubernetes.io/pod-uid"
MAX_CACHE_SECONDS = 600.0
MAX_CACHED_TOKENS = 100_000
SA_PREFIX = "system:serviceaccount:"

if TYPE_CHECKING:  # the Kubernetes client is imported only by the process that runs with --kube
    from podmortem.aggregator.kube.client import Kube


@dataclass(frozen=True)
class Identity:
    namespace: str
    pod: str
    pod_uid: str
    expires_at: float


def bearer(metadata: Collection[tuple[str, Any]]) -> str | None:
    """The token of an `authorization: Bearer <token>` header, or None."""
    for key, value in metadata:
        if key.lower() == "authorization" and isinstance(value, str) and value.lower().startswith("bearer "):
            return value[7:].strip() or None
    return None


def _expiry(token: str) -> float | None:
    """The JWT's `exp` claim, read only to bound the cache (the signature is the API server's business)."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        exp = claims.get("exp") if isinstance(claims, dict) else None
        return float(exp) if isinstance(exp, int | float) else None
    except (IndexError, ValueError, binascii.Error, UnicodeDecodeError, RecursionError):
        return None  # not ours to judge: the TokenReview refuses what is not a token


class TokenReviewer:
    def __init__(self, kube: Kube, clock: Callable[[], float] = time.time) -> None:
        self.kube = kube
        self.clock = clock
        self._cache: dict[str, Identity | AuthRefused] = {}
        self._until: dict[str, float] = {}

    async def identify(self, token: str | None) -> Identity:
        if not token:
            raise AuthRefused(
                "no_token", code="UNAUTHENTICATED", message="no bearer token: the sidecar must present its pod's token"
            )
        now = self.clock()
        hit = self._cache.get(token)
        if hit is not None and self._until.get(token, 0.0) > now:
            if isinstance(hit, AuthRefused):
                raise hit
            return hit
        result: Identity | AuthRefused
        try:
            result = await self._review(token, now)
        except AuthRefused as exc:
            result = exc
        if len(self._cache) >= MAX_CACHED_TOKENS:
            self._cache.clear()
            self._until.clear()
        self._cache[token] = result
        exp = _expiry(token)
        self._until[token] = min(now + MAX_CACHE_SECONDS, exp if exp is not None else now + MAX_CACHE_SECONDS)
        if isinstance(result, AuthRefused):
            raise result
        return result

    async def _review(self, token: str, now: float) -> Identity:
        exp = _expiry(token)
        if exp is not None and exp <= now:
            raise AuthRefused("expired", code="UNAUTHENTICATED", message="the token has expired")
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token, "audiences": [AUDIENCE]},
        }
        try:
            review = await self.kube.request("POST", "/apis/authentication.k8s.io/v1/tokenreviews", body=body)
        except KubeError as exc:  # the API server could not say: refuse now, the sidecar retries
            raise AuthRefused("review_failed", code="UNAVAILABLE", message=f"cannot review the token: {exc}") from None
        status = review.get("status") or {}
        if not status.get("authenticated"):
            raise AuthRefused(
                "rejected",
                code="UNAUTHENTICATED",
                message=f"token rejected: {status.get('error') or 'not authenticated'}",
            )
        user = status.get("user") or {}
        username = str(user.get("username") or "")
        extra = user.get("extra") or {}
        pods, uids = extra.get(POD_NAME) or [], extra.get(POD_UID) or []
        if not username.startswith(SA_PREFIX) or not pods:
            raise AuthRefused(
                "not_pod_bound",
                code="PERMISSION_DENIED",
                message="the token is not a service-account token bound to a pod",
            )
        namespace = username[len(SA_PREFIX) :].split(":", 1)[0]
        return Identity(namespace, str(pods[0]), str(uids[0]) if uids else "", exp or now + MAX_CACHE_SECONDS)


def authorize(identity: Identity, reg: pb.Register, namespaces: Collection[str] = ()) -> None:
    """May this identity speak for the pod it registers? Raises AuthRefused (PERMISSION_DENIED) if not."""
    if reg.job.namespace != identity.namespace or reg.pod != identity.pod:
        raise AuthRefused(
            "other_pod",
            code="PERMISSION_DENIED",
            message=f"the token is bound to {identity.namespace}/{identity.pod}, not {reg.job.namespace}/{reg.pod}",
        )
    if namespaces and identity.namespace not in namespaces:
        raise AuthRefused(
            "namespace", code="PERMISSION_DENIED", message=f"namespace {identity.namespace} is not watched"
        )
