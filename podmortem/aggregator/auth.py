"""Who is on the other end of a sidecar stream: the pod its projected ServiceAccount token is bound to.

Anyone who reaches the aggregator's port could otherwise add phantom members, forge terminations or
hold a verdict — and, with `--kube`, make the aggregator annotate any pod it can write. So with
`--auth tokenreview` (the default with `--kube`) every stream presents the pod's projected token
(audience `podmortem`, mounted into the sidecar by the injection webhook) as `authorization: Bearer`,
and the aggregator asks the API server who it is (`TokenReview`, through the one Kubernetes door,
`aggregator.kube.client`). A token is accepted only when it is authenticated for our audience and
bound to a pod; the stream may then speak only for that pod, in that namespace, and only in the
namespaces the aggregator watches (and, `aggregator.kube.membership`, only as the member of the job
its pod object belongs to).

A flood of streams with bad tokens must not starve the verdicts:

* what can be refused without the API is (`precheck`): no token, not a JWT (three base64url parts,
  a JSON header and claims), an audience that is not ours, or an expiry that has passed, read from
  the unverified claims. Only the API server's review can accept a token; these checks only refuse.
* answers are cached per token: an accepted one until its own expiry (at most `MAX_CACHE_SECONDS`),
  a refused one for `NEGATIVE_CACHE_SECONDS` (in a cache of its own, so a flood of distinct bad
  tokens cannot push the good ones out). A reconnect storm costs one review per token, and
  concurrent streams with one token share one review.
* reviews have their own API client (rate limit and threads: the publishers never wait behind them),
  at most `MAX_REVIEWS` in flight and `MAX_WAITING` waiting in each of two lanes; a stream beyond
  that is refused at once with RESOURCE_EXHAUSTED (`review_busy`: refused for load, as the proto says), and
  its sidecar retries after its backoff.
  A token whose unverified claims name a pod the aggregator's pod watch knows (`kubernetes.io.pod`:
  namespace, name and uid, as every projected token states them) is reviewed in the first lane, the
  rest in the second, so a flood of unknown tokens delays a member's review by at most the second
  lane's few requests in flight. Forged claims gain nothing but that lane: the review still decides.

Errors map onto gRPC codes: no or invalid token -> UNAUTHENTICATED; a valid token for another pod or
a namespace not watched -> PERMISSION_DENIED; the API could not say, or reviews are saturated ->
UNAVAILABLE. Each rejection is counted by reason (`refusals.AuthRefused`).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from podmortem.aggregator.refusals import AuthRefused
from podmortem.core.finite import finite_or_none
from podmortem.k8s.errors import KubeError
from podmortem.protocol.v1 import collector_pb2 as pb

AUDIENCE = "podmortem"
POD_NAME = "authentication.kubernetes.io/pod-name"
POD_UID = "authentication.kubernetes.io/pod-uid"
MAX_CACHE_SECONDS = 600.0
MAX_CACHED_TOKENS = 100_000
NEGATIVE_CACHE_SECONDS = 30.0
MAX_NEGATIVE_TOKENS = 20_000
MAX_TOKEN_BYTES = 16 << 10  # a projected token is ~1 KiB
MAX_REVIEWS = 4  # TokenReviews in flight (the review client's threads)
MAX_WAITING = 256  # streams waiting for a review slot; beyond, refused at once (review_busy)
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


def _unauthenticated(reason: str, message: str) -> AuthRefused:
    return AuthRefused(reason, message, code="UNAUTHENTICATED")


def _again(refusal: AuthRefused) -> AuthRefused:
    """A fresh copy of a remembered refusal (raising one instance again and again grows its traceback)."""
    return AuthRefused(refusal.reason, str(refusal), code=refusal.code)


def _segment(text: str) -> Any:
    return json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def claims(token: str) -> dict[str, Any]:
    """The unverified claims of a JWT; AuthRefused (`not_jwt`) for what is not one. The signature is the
    API server's business: nothing read here can accept a token, only refuse it."""
    parts = token.split(".")
    if len(token) > MAX_TOKEN_BYTES or len(parts) != 3 or not all(parts):
        raise _unauthenticated("not_jwt", "the bearer token is not a JWT")
    try:
        header, payload = _segment(parts[0]), _segment(parts[1])
    except (ValueError, binascii.Error, UnicodeDecodeError, RecursionError):
        raise _unauthenticated("not_jwt", "the bearer token is not a JWT") from None
    if not isinstance(header, dict) or not header.get("alg") or not isinstance(payload, dict):
        raise _unauthenticated("not_jwt", "the bearer token is not a JWT")
    return payload


@dataclass(frozen=True)
class Claims:
    """What a token says of itself before the API server has checked it."""

    expiry: float | None
    pod: tuple[str, str, str] | None  # namespace, name, uid of the pod it claims to be bound to


def _claimed_pod(payload: dict[str, Any]) -> tuple[str, str, str] | None:
    k8s = payload.get("kubernetes.io")
    pod = k8s.get("pod") if isinstance(k8s, dict) else None
    if not isinstance(k8s, dict) or not isinstance(pod, dict):
        return None
    fields = (k8s.get("namespace"), pod.get("name"), pod.get("uid"))
    return (fields[0], fields[1], fields[2]) if all(isinstance(f, str) and f for f in fields) else None  # type: ignore[return-value]


def precheck(token: str | None, now: float) -> Claims:
    """Refuse, without the API, a token that cannot be a pod's projected token for us; else what it
    claims of itself (unverified)."""
    if not token:
        raise _unauthenticated("no_token", "no bearer token: the sidecar must present its pod's token")
    payload = claims(token)
    aud = payload.get("aud")
    audiences = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
    if AUDIENCE not in audiences:
        raise _unauthenticated("audience", f"the token is not for the audience {AUDIENCE!r}")
    exp = payload.get("exp")
    expiry = finite_or_none(exp)  # JSON's NaN or Infinity (Python's parser takes them) is no expiry
    if expiry is not None and expiry <= now:
        raise _unauthenticated("expired", "the token has expired")
    return Claims(expiry, _claimed_pod(payload))


class _Lane:
    def __init__(self, slots: int) -> None:
        self.slots = asyncio.Semaphore(slots)
        self.waiting = 0


class TokenReviewer:
    def __init__(
        self,
        kube: Kube,
        clock: Callable[[], float] = time.time,
        *,
        max_reviews: int = MAX_REVIEWS,
        max_waiting: int = MAX_WAITING,
        known_pod: Callable[[str, str, str], bool] | None = None,
    ) -> None:
        self.kube = kube
        self.clock = clock
        self.max_waiting = max_waiting
        # Does the pod watch know this pod (namespace, name, uid)? Its tokens go in the first lane.
        self.known_pod = known_pod
        self._lanes = (_Lane(max_reviews), _Lane(max_reviews))
        self._cache: dict[str, tuple[float, Identity]] = {}  # token -> (until, identity)
        self._refused: dict[str, tuple[float, AuthRefused]] = {}  # token -> (until, refusal)
        self._inflight: dict[str, asyncio.Future[Identity]] = {}  # one review per token at a time
        self.reviews = 0  # TokenReviews sent, for tests and the flood benchmark

    async def identify(self, token: str | None) -> Identity:
        now = self.clock()
        claimed = precheck(token, now)
        assert token is not None
        hit = self._cache.get(token)
        if hit is not None and hit[0] > now:
            return hit[1]
        refused = self._refused.get(token)
        if refused is not None and refused[0] > now:
            raise _again(refused[1])
        running = self._inflight.get(token)
        if running is not None:
            try:
                return await asyncio.shield(running)
            except AuthRefused as exc:
                raise _again(exc) from None
        known = claimed.pod is not None and self.known_pod is not None and self.known_pod(*claimed.pod)
        lane = self._lanes[0 if known else 1]
        if lane.waiting >= self.max_waiting:
            raise AuthRefused("review_busy", "too many token reviews waiting: retry later", code="RESOURCE_EXHAUSTED")
        future: asyncio.Future[Identity] = asyncio.get_running_loop().create_future()
        self._inflight[token] = future
        try:
            identity = await self._reviewed(lane, token, claimed.expiry)
        except AuthRefused as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: no "never retrieved" warning when nobody else waited
            raise
        except BaseException as exc:  # cancelled while reviewing: whoever shares it tries again
            future.set_exception(AuthRefused("review_failed", f"the review was cut short: {exc!r}", code="UNAVAILABLE"))
            future.exception()
            raise
        else:
            future.set_result(identity)
            return identity
        finally:
            del self._inflight[token]

    async def _reviewed(self, lane: _Lane, token: str, expiry: float | None) -> Identity:
        lane.waiting += 1
        try:
            await lane.slots.acquire()
        finally:
            lane.waiting -= 1
        try:
            identity = await self._review(token, expiry)
        except AuthRefused as exc:
            if exc.code != "UNAVAILABLE":  # the API could not say: ask again next time
                self._remember(self._refused, MAX_NEGATIVE_TOKENS, token, NEGATIVE_CACHE_SECONDS, exc)
            raise
        finally:
            lane.slots.release()
        now = self.clock()
        until = min(now + MAX_CACHE_SECONDS, expiry if expiry is not None else now + MAX_CACHE_SECONDS)
        self._remember(self._cache, MAX_CACHED_TOKENS, token, until - now, identity)
        return identity

    def _remember(self, cache: dict[str, tuple[float, Any]], limit: int, token: str, ttl: float, value: Any) -> None:
        if len(cache) >= limit:
            now = self.clock()
            for key in [k for k, (until, _) in cache.items() if until <= now]:
                del cache[key]
            if len(cache) >= limit:
                cache.clear()
        cache[token] = (self.clock() + ttl, value)

    async def _review(self, token: str, expiry: float | None) -> Identity:
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token, "audiences": [AUDIENCE]},
        }
        self.reviews += 1
        try:
            review = await self.kube.request("POST", "/apis/authentication.k8s.io/v1/tokenreviews", body=body)
        except KubeError as exc:  # the API server could not say: refuse now, the sidecar retries
            raise AuthRefused("review_failed", f"cannot review the token: {exc}", code="UNAVAILABLE") from None
        status = review.get("status") or {}
        if not status.get("authenticated"):
            raise _unauthenticated("rejected", f"token rejected: {status.get('error') or 'not authenticated'}")
        user = status.get("user") or {}
        username = str(user.get("username") or "")
        extra = user.get("extra") or {}
        pods, uids = extra.get(POD_NAME) or [], extra.get(POD_UID) or []
        if not username.startswith(SA_PREFIX) or not pods:
            raise AuthRefused(
                "not_pod_bound", "the token is not a service-account token bound to a pod", code="PERMISSION_DENIED"
            )
        namespace = username[len(SA_PREFIX) :].split(":", 1)[0]
        now = self.clock()
        return Identity(namespace, str(pods[0]), str(uids[0]) if uids else "", expiry or now + MAX_CACHE_SECONDS)


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
