"""The gRPC face of the aggregator: the Collector service, health, and deliberate server options.

One `Report` stream per sidecar: `register` first (else INVALID_ARGUMENT), then events — each taken
into the incident book and acknowledged by id, duplicates included (the sidecar resends whatever was
not acknowledged after a reconnect) — and NTP-style clock probes answered with receive and send
times of this server's clock. With a hold desk (`aggregator.holding`: pod conditions are written), the
server says so in `Registered.holds` and answers each sidecar's `hold` with its pod's condition.
`create_server(address)` returns `(server, port)` so tests bind port 0. A sidecar that answers capture
requests (`Register.captures`) gets a stream the aggregator can also write to on its own: the stall desk
(`aggregator.stalls`) pushes a `CaptureRequest` onto it, beside the answers to what the sidecar sent.

Server options are set on purpose: receive size bounded (the sidecar truncates payloads far below
it), keepalive policy that admits the sidecar's pings, and pending-request limits above the largest
burst expected — every pod of a 10k-pod job reconnecting at once after an aggregator restart — where
gRPC's defaults start refusing calls at ~1-3k simultaneous streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Collection

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from podmortem.aggregator.auth import Identity, TokenReviewer, authorize, bearer
from podmortem.aggregator.holding import HoldDesk
from podmortem.aggregator.incidents import IncidentBook, MemberKey
from podmortem.aggregator.intake import LimitExceeded
from podmortem.aggregator.metrics import Metrics
from podmortem.aggregator.refusals import Exhausted, StreamRefused, TooSlow, Unavailable
from podmortem.aggregator.stalls import StallDesk
from podmortem.aggregator.state import StateError, StateStore
from podmortem.protocol.v1 import collector_pb2 as pb
from podmortem.protocol.v1 import collector_pb2_grpc as pb_grpc
from podmortem.protocol.wire import clock_estimate, to_ts

log = logging.getLogger(__name__)

SERVICE_NAME = "podmortem.v1.Collector"
MAX_RECEIVE_BYTES = 4 << 20
# A stream must register within this many seconds: silent streams would otherwise be held for ever,
# each with its memory (an open stream's RSS: bench/stream_rss.py).
REGISTER_DEADLINE = 30.0
REFUSAL_LOG_INTERVAL = 10.0
EXPECTED_BURST = 20_000

SERVER_OPTIONS: list[tuple[str, int]] = [
    # gRPC binds with SO_REUSEPORT by default: a second aggregator on a taken port would then serve beside
    # the first, and the kernel would split the sidecars (and so each job's incident) between the two.
    ("grpc.so_reuseport", 0),
    ("grpc.max_receive_message_length", MAX_RECEIVE_BYTES),
    # Sidecars ping every 20 s, also with no call in flight; allow down to 10 s without strikes.
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 10_000),
    ("grpc.http2.max_ping_strikes", 3),
    # The server pings idle connections too, to find dead sidecars (a lost node never sends FIN).
    ("grpc.keepalive_time_ms", 60_000),
    ("grpc.keepalive_timeout_ms", 20_000),
    ("grpc.max_concurrent_streams", 2 * EXPECTED_BURST),
    ("grpc.server.max_pending_requests", 2 * EXPECTED_BURST),
    ("grpc.server.max_pending_requests_hard_limit", 4 * EXPECTED_BURST),
    # A stream the event loop has not taken up within this long is cancelled (gRPC's default: 30 s). In a
    # burst past one process's ceiling (bench/ceiling.py) streams queue longer; cancelled, each sidecar
    # would reconnect (a new TLS handshake and token check) and send everything again, adding load.
    # Below the ceiling the limit costs no CPU (bench/burst.py --echo).
    ("grpc.server_max_unrequested_time_in_server", 300),
]


def _required(reg: pb.Register) -> list[str]:
    missing = [name for name, value in (("pod", reg.pod), ("job.name", reg.job.name)) if not value]
    if not reg.job.namespace:
        missing.append("job.namespace")
    return missing


# A sidecar sends a handful of events per pod run (error-file versions, a log tail, the end); a stream
# far beyond this is a bug or an attack, and is ended rather than allowed to starve the others.
EVENT_RATE = 50.0  # events per second, sustained, per stream
EVENT_BURST = 500


class _TokenBucket:
    def __init__(self, rate: float, burst: int) -> None:
        self.rate, self.burst = rate, float(burst)
        self.tokens, self.at = float(burst), time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True


# Messages read ahead of the one being handled, per stream that may also be written to: the reader waits
# beyond this (gRPC's flow control then holds the sidecar back), as a plain `async for` would.
READ_AHEAD = 8
# Messages the aggregator may have queued on one stream of its own accord (capture requests: a few per
# incident); beyond this the oldest are dropped (logged), since a sidecar that reads none is gone.
MAX_PUSHED = 16
_WAKE = object()  # put in the inbox to wake the handler for a pushed message


class _End:
    """The sidecar's side of the stream ended: normally (`error` None) or with an error to re-raise."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error


class _Duplex:
    """One registered stream that the aggregator may write to unprompted: its messages are read by one
    task into a short queue, and the handler takes from it either the next message or a message pushed
    (`push`, from the stall desk), whichever comes first. The handler alone writes to the stream, so
    answers and pushes never interleave inside a message."""

    def __init__(self, requests: AsyncIterator[pb.SidecarMessage]) -> None:
        self._inbox: asyncio.Queue[object] = asyncio.Queue(maxsize=READ_AHEAD)
        self._pushed: deque[pb.AggregatorMessage] = deque()
        self._reader = asyncio.get_running_loop().create_task(self._read(requests), name="stream-reader")

    async def _read(self, requests: AsyncIterator[pb.SidecarMessage]) -> None:
        end = _End()
        try:
            async for msg in requests:
                await self._inbox.put(msg)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a broken stream: the handler re-raises it, as `async for` would
            end = _End(exc)
        await self._inbox.put(end)

    def push(self, message: pb.AggregatorMessage) -> None:
        """Queue `message` to be written on this stream (from the loop's thread)."""
        if len(self._pushed) >= MAX_PUSHED:
            dropped = self._pushed.popleft()
            log.warning("a stream reads nothing: dropped a queued %s", dropped.WhichOneof("body"))
        self._pushed.append(message)
        if not self._inbox.full():  # else the handler is busy and looks at `_pushed` before its next read
            self._inbox.put_nowait(_WAKE)

    async def messages(self) -> AsyncIterator[pb.SidecarMessage | pb.AggregatorMessage]:
        """The sidecar's messages, and among them the pushed ones (AggregatorMessage), until the end."""
        try:
            while True:
                while self._pushed:
                    yield self._pushed.popleft()
                item = await self._inbox.get()
                if isinstance(item, _End):
                    while self._pushed:
                        yield self._pushed.popleft()
                    if item.error is not None:
                        raise item.error
                    return
                if isinstance(item, pb.SidecarMessage):
                    yield item
        finally:
            self.close()

    def close(self) -> None:
        self._reader.cancel()


# Membership: the registration as the API states it, or AuthRefused (aggregator.kube.membership).
VerifyMembership = Callable[[Identity, pb.Register], Awaitable[pb.Register]]


class CollectorService(pb_grpc.CollectorServicer):
    def __init__(
        self,
        book: IncidentBook,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.time,
        aggregator_id: str | None = None,
        authenticator: TokenReviewer | None = None,
        namespaces: Collection[str] = (),
        register_deadline: float = REGISTER_DEADLINE,
        store: StateStore | None = None,
        event_rate: float = EVENT_RATE,
        event_burst: int = EVENT_BURST,
        membership: VerifyMembership | None = None,
        holds: HoldDesk | None = None,
        stalls: StallDesk | None = None,
    ) -> None:
        self.event_rate, self.event_burst = event_rate, event_burst
        self.stalls = stalls  # None: no capture requests (sidecars are told `Registered.captures` false)
        self.holds = holds  # None: no pod conditions written here; sidecars are told not to hold
        self.book = book
        self.store = store  # --state-dir: registrations and events committed before they are acked
        self.metrics = metrics
        self.clock = clock
        self.aggregator_id = aggregator_id or uuid.uuid4().hex
        self.authenticator = authenticator  # None: --auth none (local runs, or the operator's explicit choice)
        # With an authenticator and a membership check, a registration's job and position come from
        # the API and its member is marked verified in the book; without, members are unverified.
        self.membership = membership
        self.standby = False  # a replica without the Lease refuses streams (UNAVAILABLE) until it leads
        self.namespaces = frozenset(namespaces)
        self.register_deadline = register_deadline
        self._refusals_logged: dict[str, tuple[float, int]] = {}  # reason -> (last logged, refused since)

    async def _reject(self, context: grpc.aio.ServicerContext, error: StreamRefused) -> None:
        if self.metrics:
            self.metrics.rejected.labels(reason=error.reason).inc()
        # One line per reason and REFUSAL_LOG_INTERVAL: a flood of refused streams is counted in the
        # metric, not written out line by line.
        now = time.monotonic()
        last, unlogged = self._refusals_logged.get(error.reason, (float("-inf"), 0))
        if now - last >= REFUSAL_LOG_INTERVAL:
            more = f" ({unlogged} more refused for this reason since the last such line)" if unlogged else ""
            log.warning("stream refused (%s): %s%s", error.reason, error, more)
            self._refusals_logged[error.reason] = (now, 0)
        else:
            self._refusals_logged[error.reason] = (last, unlogged + 1)
        await context.abort(getattr(grpc.StatusCode, error.code), str(error))

    async def _admit(
        self, request_iterator: AsyncIterator[pb.SidecarMessage], context: grpc.aio.ServicerContext
    ) -> tuple[MemberKey, pb.Register] | None:
        """Identify the stream, read its registration and enter it in the book (and the state file).
        None when the stream ended before registering; StreamRefused when it may not go on."""
        identity: Identity | None = None
        try:
            if self.standby:
                # A replica that does not hold the Lease: the sidecar retries (backoff), the Service
                # sends it to the Ready replica, the leader (podmortem.aggregator.kube.leader).
                raise Unavailable("standby", "a standby replica: not the leader")
            if self.authenticator is not None:
                identity = await self.authenticator.identify(bearer(context.invocation_metadata() or ()))
        except StreamRefused:
            # Refused before its first message was read. Ended while the client's write of `register` is
            # on its way, the client sees INTERNAL ("Internal error from Core") instead of this refusal; a
            # flood's clients write late, so no grace short of the register deadline is long enough. The
            # first message is awaited as any stream's is (a silent stream is held that long anyway).
            with contextlib.suppress(TimeoutError, grpc.RpcError, StopAsyncIteration):
                async with asyncio.timeout(self.register_deadline):
                    await anext(aiter(request_iterator))
            raise
        try:
            async with asyncio.timeout(self.register_deadline):
                first = await anext(aiter(request_iterator), None)
        except TimeoutError:
            raise TooSlow("register_deadline", "no 'register' within the deadline") from None
        if first is None:
            return None
        if first.WhichOneof("body") != "register":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the first message must be 'register'")
        reg = first.register
        missing = _required(reg)
        if missing:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "register: missing " + ", ".join(missing))
        verified = False
        if identity is not None:
            authorize(identity, reg, self.namespaces)
            if self.membership is not None:
                reg = await self.membership(identity, reg)
                verified = True
        try:
            key = self.book.register(reg, verified=verified)
        except LimitExceeded as exc:
            raise Exhausted(exc.limit, str(exc)) from None
        if self.store is not None:
            try:
                await self.store.register(key, reg, verified=verified)
            except StateError as exc:
                self.book.disconnected(key)
                raise Unavailable("state_write", f"the state file refused a write: {exc}") from None
        return key, reg

    async def Report(
        self, request_iterator: AsyncIterator[pb.SidecarMessage], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.AggregatorMessage]:
        try:
            admitted = await self._admit(request_iterator, context)
        except StreamRefused as exc:
            await self._reject(context, exc)
            return
        if admitted is None:
            return
        key, reg = admitted
        log.info("sidecar %s/%s registered (session %s)", reg.job.namespace, reg.pod, reg.session_id or "-")
        if self.metrics:
            self.metrics.connected.inc()
        if self.holds is not None:
            self.holds.registered(key, reg.holds)
        duplex = _Duplex(request_iterator) if self.stalls is not None and reg.captures else None
        try:
            registered = pb.Registered(
                aggregator_id=self.aggregator_id, holds=self.holds is not None, captures=self.stalls is not None
            )
            yield pb.AggregatorMessage(registered=registered)
            if duplex is not None and self.stalls is not None:
                self.stalls.opened(key, duplex.push)
            bucket = _TokenBucket(self.event_rate, self.event_burst)
            messages = duplex.messages() if duplex is not None else request_iterator
            async for msg in messages:
                if isinstance(msg, pb.AggregatorMessage):  # pushed by the stall desk
                    yield msg
                    continue
                body = msg.WhichOneof("body")
                if body == "event":
                    if not bucket.take():
                        if self.metrics:
                            self.metrics.limit_hits.labels(limit="event_rate").inc()
                        await self._reject(
                            context,
                            Exhausted(
                                "event_rate",
                                f"over {self.event_rate:g} events/s (burst {self.event_burst}): the stream is "
                                "ended; events not acknowledged are sent again",
                            ),
                        )
                    self.book.ingest(key, msg.event, from_sidecar=True)
                    if self.store is not None:
                        try:
                            # Durable before acknowledged, as the book holds it (a tail's kept text).
                            await self.store.event(key, self.book.kept_event(key, msg.event))
                        except StateError as exc:
                            # Not acked: the sidecar keeps the event and sends it again after its backoff.
                            await self._reject(
                                context, Unavailable("state_write", f"the state file refused a write: {exc}")
                            )
                    if self.holds is not None:
                        self.holds.changed(key.job)
                    if self.stalls is not None:
                        self.stalls.ingested(key, msg.event)
                    yield pb.AggregatorMessage(ack=pb.Ack(event_ids=[msg.event.id]))
                elif body == "hold":
                    if self.holds is None:
                        answer = pb.HoldReply(
                            seq=msg.hold.seq,
                            outcome=pb.HoldReply.NOT_WRITTEN,
                            detail="this aggregator writes no pod conditions",
                        )
                    else:
                        answer = await self.holds.hold(key, msg.hold)
                    yield pb.AggregatorMessage(hold_reply=answer)
                elif body == "clock_probe":
                    t2 = self.clock()
                    reply = pb.ClockReply(seq=msg.clock_probe.seq)
                    reply.t1.CopyFrom(msg.clock_probe.t1)
                    reply.t2.CopyFrom(to_ts(t2))
                    reply.t3.CopyFrom(to_ts(self.clock()))
                    yield pb.AggregatorMessage(clock_reply=reply)
                elif body == "clock_estimate":
                    estimate = clock_estimate(msg.clock_estimate)
                    if estimate is None:  # implausible: ignored, the pod's clock is taken as it is
                        self.book.refused_value("clock_estimate")
                    else:
                        self.book.set_clock(key, *estimate)
                elif body == "register":
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "'register' may only be sent once")
        finally:
            if self.stalls is not None and duplex is not None:
                self.stalls.closed(key, duplex.push)
                duplex.close()
            self.book.disconnected(key)
            if self.metrics:
                self.metrics.connected.dec()
            log.info("sidecar %s/%s stream closed", reg.job.namespace, reg.pod)


def create_server(
    address: str, service: CollectorService, credentials: grpc.ServerCredentials | None = None
) -> tuple[grpc.aio.Server, int, health.aio.HealthServicer]:
    """Build (not start) the server on `address` (TLS with `credentials`); returns it, the bound port and
    its health servicer."""
    server = grpc.aio.server(options=SERVER_OPTIONS)
    pb_grpc.add_CollectorServicer_to_server(service, server)  # type: ignore[no-untyped-call]
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    try:
        port = server.add_secure_port(address, credentials) if credentials else server.add_insecure_port(address)
    except RuntimeError as exc:  # grpc's "Failed to bind to address ..."
        raise OSError(f"cannot listen on {address} (in use, or not an address of this host): {exc}") from None
    if port == 0:
        raise OSError(f"cannot listen on {address} (in use, or not an address of this host)")
    return server, port, health_servicer


async def set_serving(health_servicer: health.aio.HealthServicer, serving: bool, *, alive: bool | None = None) -> None:
    """The Collector's health (readiness) and the process's ("": liveness, `alive`, default the same).
    A standby replica is alive but not serving."""
    status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
    live = serving if alive is None else alive
    await health_servicer.set(SERVICE_NAME, status)
    await health_servicer.set(
        "", health_pb2.HealthCheckResponse.SERVING if live else health_pb2.HealthCheckResponse.NOT_SERVING
    )
