"""The sidecar's one long-lived `Collector.Report` stream to the aggregator.

Everything the sidecar knows travels on one bidirectional gRPC stream (the contract is
protos/podmortem/protocol/v1/collector.proto): `Register` first — again after every reconnect, since the
aggregator may have restarted — then every event the outbox still holds, then new events as they
come. The aggregator's `Ack`s remove events from the outbox; anything not acknowledged when the stream
breaks is sent again on the next one (the aggregator deduplicates by event id).

Failures: INVALID_ARGUMENT means our registration is wrong — a configuration bug that retrying cannot
fix — so `run` raises `RegistrationRejected` and the sidecar stops. Every other ending (UNAVAILABLE,
CANCELLED, a server that closes the stream, ...) is retried after an exponential backoff with jitter.
Connection-level retries and liveness are left to gRPC as channel options (keepalive pings every
20 s even without calls, reconnect backoff) and the call waits for the channel to be ready
(`wait_for_ready`), so a down aggregator costs no busy loop here.

Clock sync: so that the aggregator can put every pod's clock on one timeline, the client sends NTP-style
`ClockProbe`s (a burst after each connect, then one every `probe_interval`), computes for each reply
offset = ((t2 - t1) + (t3 - t4)) / 2 and round trip = (t4 - t1) - (t3 - t2), keeps the sample with
the smallest round trip (the one least disturbed by queueing) and sends a `ClockEstimate` whenever
that best sample improves (and after each registration). The wall clock, the backoff's sleep and
its randomness are injected so tests can skew and speed them.

The hold (`hold`): once the training container ended and the last events were sent, the sidecar asks the
aggregator to confirm this pod's condition (proto `Hold` / `HoldReply`). Asked only of an aggregator that
said it answers (`Registered.holds`); sent after every event still unacknowledged on its stream, and sent
again after a reconnect. `hold` returns the reply, or None when this aggregator does not hold (an older
one) or the caller's timeout passes first.

Captures: the sidecar registers with `captures` (it answers every `capture_request`); each request the
aggregator sends goes to `on_capture_request`, whose answer (a `Capture` event) travels through the outbox
like every event. A request that is not valid (`wire.check_capture_request`) is logged and dropped.
`aggregator_captures` says whether the aggregator registered with takes captures at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from podmortem.k8s.backoff import Backoff
from podmortem.protocol import wire
from podmortem.protocol.v1 import collector_pb2 as pb
from podmortem.protocol.v1 import collector_pb2_grpc as pb_grpc
from podmortem.protocol.wire import MAX_CLOCK_OFFSET, MAX_ROUND_TRIP
from podmortem.sidecar.outbox import Outbox, describe

logger = logging.getLogger(__name__)

CHANNEL_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.keepalive_time_ms", 20_000),  # the aggregator permits pings every 10 s
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.initial_reconnect_backoff_ms", 250),
    ("grpc.min_reconnect_backoff_ms", 250),
    ("grpc.max_reconnect_backoff_ms", 10_000),
    ("grpc.max_send_message_length", 4 << 20),
    ("grpc.max_receive_message_length", 4 << 20),
)


class StreamError(Exception):
    """Base of the stream's own errors."""


class RegistrationRejected(StreamError):
    """The aggregator answered INVALID_ARGUMENT: a configuration bug; retrying cannot help."""


@dataclass(frozen=True)
class ClockSample:
    offset_ns: int  # aggregator clock = pod clock + offset
    round_trip_ns: int


def clock_sample(t1: int, t2: int, t3: int, t4: int) -> ClockSample:
    """NTP's offset and round trip from the four timestamps (ns): t1/t4 ours, t2/t3 the aggregator's."""
    return ClockSample(offset_ns=((t2 - t1) + (t3 - t4)) // 2, round_trip_ns=(t4 - t1) - (t3 - t2))


class ClockFilter:
    """Keeps the sample with the smallest round trip."""

    def __init__(self) -> None:
        self.best: ClockSample | None = None
        self.samples = 0

    def add(self, sample: ClockSample) -> bool:
        """True when the sample is the new best."""
        self.samples += 1
        if sample.round_trip_ns < 0:
            return False  # a clock stepped during the probe: meaningless
        if abs(sample.offset_ns) > MAX_CLOCK_OFFSET * 1e9 or sample.round_trip_ns > MAX_ROUND_TRIP * 1e9:
            return False  # an aggregator's absurd times: no estimate the aggregator would take (nor an int64)
        if self.best is None or sample.round_trip_ns < self.best.round_trip_ns:
            self.best = sample
            return True
        return False

    def estimate(self) -> pb.ClockEstimate | None:
        if self.best is None:
            return None
        return pb.ClockEstimate(
            offset_ns=self.best.offset_ns, round_trip_ns=self.best.round_trip_ns, samples=self.samples
        )


_PROBE = object()  # a control item: "send a clock probe now" (t1 is taken at the write)


class _Control:
    """Messages other than events for the one writer of a stream (a probe request or a SidecarMessage)."""

    def __init__(self) -> None:
        self._items: deque[object] = deque()
        self._ready = asyncio.Event()

    def push(self, item: object) -> None:
        self._items.append(item)
        self._ready.set()

    def push_probe(self) -> None:
        if _PROBE not in self._items:  # a late probe is better than a pile of them
            self.push(_PROBE)

    def take(self) -> list[object]:
        """Everything queued so far (items pushed later wait for the next round, after the events)."""
        items = list(self._items)
        self._items.clear()
        self._ready.clear()
        return items

    async def wait(self) -> None:
        await self._ready.wait()


class StreamClient:
    """Runs the Report stream until cancelled; raises `RegistrationRejected` on INVALID_ARGUMENT."""

    def __init__(
        self,
        target: str,
        register: pb.Register,
        outbox: Outbox,
        *,
        backoff: Backoff | None = None,
        probe_interval: float = 30.0,
        probe_burst: int = 4,
        probe_burst_interval: float = 0.2,
        wall_ns: Callable[[], int] = time.time_ns,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,  # for the backoff between streams
        rand: Callable[[], float] = random.random,
        channel_options: Sequence[tuple[str, Any]] = CHANNEL_OPTIONS,
        token_file: Path | None = None,
        tls_ca: bytes | None = None,
    ) -> None:
        self.target = target
        self.register = register
        self.outbox = outbox
        self.backoff = backoff or Backoff()
        self.probe_interval = probe_interval
        self.probe_burst = probe_burst
        self.probe_burst_interval = probe_burst_interval
        self._wall_ns = wall_ns
        self._sleep = sleep
        self._rand = rand
        self._channel_options = list(channel_options)
        self.token_file = token_file  # re-read for every stream: the kubelet rotates projected tokens
        self.tls_ca = tls_ca
        self.clock = ClockFilter()
        self.registered = asyncio.Event()  # set while a stream is registered
        self.sessions = 0  # streams opened so far
        self._probe_seq = 0
        self._probes: dict[int, int] = {}  # seq -> t1 (ns) of probes awaiting replies
        self._ever_sent: set[str] = set()  # ids sent on some stream (to log resends as such)
        self.aggregator_id: str | None = None  # of the aggregator incarnation last registered with
        self.aggregator_holds: bool | None = None  # the last aggregator registered with answers `hold`
        self.aggregator_captures: bool | None = None  # ... and may send `capture_request`
        self.on_capture_request: Callable[[pb.CaptureRequest], object] | None = None
        self._hold: pb.Hold | None = None  # asked and not answered yet
        self._hold_deadline = 0.0  # loop time the hold asked ends: a `Hold` sent again carries what is left
        self._hold_reply: asyncio.Future[pb.HoldReply | None] | None = None
        self._control: _Control | None = None  # of the registered stream, for a hold asked meanwhile
        self._call: Any = None  # the open stream
        self._switching = False  # `reregister` ended the stream: reconnect at once

    def reregister(self, register: pb.Register) -> None:
        """Speak as `register` from now on: the open stream ends and the next one registers so at once
        (a new job attempt: the training container restarted). Unacknowledged events go on the new one."""
        self.register = register
        self._switching = True
        if self._call is not None:
            self._call.cancel()

    async def run(self) -> None:
        if self.tls_ca is not None:
            credentials = grpc.ssl_channel_credentials(root_certificates=self.tls_ca)
            channel = grpc.aio.secure_channel(self.target, credentials, options=self._channel_options)
        else:
            channel = grpc.aio.insecure_channel(self.target, options=self._channel_options)
        stub = pb_grpc.CollectorStub(channel)  # type: ignore[no-untyped-call]
        attempt = 0
        try:
            while True:
                code, details, was_registered = await self._session(stub)
                if code == grpc.StatusCode.INVALID_ARGUMENT:
                    logger.error("aggregator %s rejected this sidecar: %s (a configuration bug)", self.target, details)
                    raise RegistrationRejected(details)
                if self._switching:
                    self._switching = False
                    logger.info("registering again as job attempt %r", self.register.attempt)
                    continue
                if was_registered:
                    attempt = 0
                delay = self.backoff.delay(attempt, self._rand)
                attempt += 1
                logger.warning(
                    "stream to aggregator %s ended (%s%s); %d event(s) unacknowledged; reconnecting in %.2fs",
                    self.target,
                    code.name if code is not None else "closed by server",
                    f": {details}" if details else "",
                    len(self.outbox),
                    delay,
                )
                await self._sleep(delay)
        finally:
            self.registered.clear()
            await channel.close()

    def _metadata(self) -> tuple[tuple[str, str], ...]:
        """`authorization: Bearer <this pod's projected token>` when there is one to present."""
        if self.token_file is None:
            return ()
        try:
            token = self.token_file.read_text().strip()  # small (a JWT), on a tmpfs: no need for a thread
        except OSError as exc:
            logger.warning("cannot read the pod token %s: %s", self.token_file, exc.strerror or exc)
            return ()
        return (("authorization", f"Bearer {token}"),) if token else ()

    async def _session(self, stub: Any) -> tuple[Any, str, bool]:
        """One stream, from Register to its end: (status code or None when closed OK, details, registered)."""
        self.sessions += 1
        self._switching = False  # a `reregister` before this stream is already in `self.register`
        logger.info(
            "opening stream %d to aggregator %s (waits until it is reachable); %d event(s) pending",
            self.sessions,
            self.target,
            len(self.outbox),
        )
        self._probes.clear()
        control = _Control()
        call = stub.Report(wait_for_ready=True, metadata=self._metadata())
        self._call = call
        writer = asyncio.create_task(self._write(call, control), name="podmortem-stream-writer")
        prober = asyncio.create_task(self._probe(control), name="podmortem-clock-prober")
        writer.add_done_callback(lambda t: call.cancel() if not t.cancelled() and t.exception() else None)
        was_registered = False
        code: Any = None
        details = ""
        try:
            async for msg in call:
                kind = msg.WhichOneof("body")
                if kind == "registered":
                    was_registered = True
                    new_id = msg.registered.aggregator_id
                    if self.aggregator_id is not None and new_id != self.aggregator_id:
                        # A new incarnation lost what the old one acknowledged: give it everything again.
                        again = self.outbox.redeliver()
                        logger.warning(
                            "aggregator changed (%r -> %r): re-sending %d acknowledged event(s)",
                            self.aggregator_id,
                            new_id,
                            again,
                        )
                    self.aggregator_id = new_id
                    self.aggregator_holds = msg.registered.holds
                    self.aggregator_captures = msg.registered.captures
                    self._control = control
                    self.registered.set()
                    logger.info(
                        "registered with aggregator %s (id %r) as pod %s/%s; %d event(s) pending",
                        self.target,
                        msg.registered.aggregator_id,
                        self.register.job.namespace,
                        self.register.pod,
                        len(self.outbox),
                    )
                    if (estimate := self.clock.estimate()) is not None:
                        control.push(pb.SidecarMessage(clock_estimate=estimate))
                    if self._hold is not None:
                        if msg.registered.holds:
                            control.push(pb.SidecarMessage(hold=self._hold_left()))
                        else:
                            self._answer(None)  # an aggregator that does not hold: no reason to wait
                elif kind == "hold_reply":
                    if self._hold is not None and msg.hold_reply.seq == self._hold.seq:
                        self._answer(msg.hold_reply)
                elif kind == "capture_request":
                    self._on_capture_request(msg.capture_request)
                elif kind == "ack":
                    for event in self.outbox.ack(msg.ack.event_ids):
                        logger.info("acked %s", describe(event))
                elif kind == "clock_reply":
                    self._on_clock_reply(msg.clock_reply, control)
        except grpc.aio.AioRpcError as exc:
            code, details = exc.code(), exc.details() or ""
        except asyncio.CancelledError:
            if not self._switching or asyncio.current_task().cancelling():  # type: ignore[union-attr]
                raise
            code = grpc.StatusCode.CANCELLED
        finally:
            self._call = None
            self.registered.clear()
            self._control = None
            prober.cancel()
            writer.cancel()
            results = await asyncio.gather(writer, prober, return_exceptions=True)
            call.cancel()
        for result in results:
            if isinstance(result, Exception) and not _is_stream_failure(result):
                raise result  # a bug in the writer, not a broken stream
        return code, details, was_registered

    def _on_capture_request(self, request: pb.CaptureRequest) -> None:
        try:
            wire.check_capture_request(request)
        except wire.WireError as exc:
            logger.warning("ignoring a capture request from the aggregator: %s", exc)
            return
        logger.info("the aggregator asks for a capture (%s, request %s)", request.trigger, request.request_id)
        if self.on_capture_request is not None:
            self.on_capture_request(request)

    def may_hold(self) -> bool:
        """Can a `hold` be answered? Only once an aggregator that answers it has registered this sidecar: one
        that was never reached has nothing of this pod to decide on, so holding the pod for it only delays
        Kubernetes' defaults."""
        return not self.hold_refusal()

    def hold_refusal(self) -> str:
        """Why a `hold` cannot be answered ("" when it can)."""
        if self.aggregator_holds is None:
            return "no aggregator was reached"
        if self.aggregator_holds is False:
            return "the aggregator writes no pod conditions (it runs without --kube, or is an older version)"
        return ""

    async def hold(self, timeout_seconds: float) -> pb.HoldReply | None:
        """Ask the aggregator to confirm this pod's condition; its reply, or None (an aggregator that does
        not hold, or `timeout_seconds` passed first). Events not yet acknowledged go out before it."""
        if self.registered.is_set() and self.aggregator_holds is False:
            return None
        loop = asyncio.get_running_loop()
        seq = (self._hold.seq if self._hold is not None else 0) + 1
        self._hold = pb.Hold(seq=seq, timeout_seconds=timeout_seconds)
        self._hold_deadline = loop.time() + timeout_seconds
        self._hold_reply = loop.create_future()
        if self._control is not None and self.aggregator_holds:
            self._control.push(pb.SidecarMessage(hold=self._hold))
        try:
            async with asyncio.timeout(timeout_seconds):
                return await self._hold_reply
        except TimeoutError:
            return None
        finally:
            self._hold, self._hold_reply = None, None

    def _hold_left(self) -> pb.Hold:
        """The hold asked, with what is left of its timeout: an aggregator restarted meanwhile decides within
        this sidecar's own deadline, not a fresh one (it would write a condition after the pod ended)."""
        assert self._hold is not None
        left = max(self._hold_deadline - asyncio.get_running_loop().time(), 0.0)
        return pb.Hold(seq=self._hold.seq, timeout_seconds=left)

    def _answer(self, reply: pb.HoldReply | None) -> None:
        if self._hold_reply is not None and not self._hold_reply.done():
            self._hold_reply.set_result(reply)

    async def _write(self, call: Any, control: _Control) -> None:
        await call.write(pb.SidecarMessage(register=self.register))
        sent = 0
        while True:
            holds: list[pb.SidecarMessage] = []
            for item in control.take():
                if isinstance(item, pb.SidecarMessage) and item.WhichOneof("body") == "hold":
                    holds.append(item)  # after the events below: the aggregator decides on everything sent
                elif item is _PROBE:
                    self._probe_seq += 1
                    t1 = self._wall_ns()
                    self._probes[self._probe_seq] = t1
                    probe = pb.ClockProbe(seq=self._probe_seq)
                    probe.t1.FromNanoseconds(t1)
                    await call.write(pb.SidecarMessage(clock_probe=probe))
                elif isinstance(item, pb.SidecarMessage):
                    await call.write(item)
            upto, batch = self.outbox.last_seq, self.outbox.after(sent)
            for _, event in batch:
                if event.id not in self.outbox:
                    continue  # acknowledged while we were writing (a duplicate from an earlier stream)
                await call.write(pb.SidecarMessage(event=event))
                verb = "resent" if event.id in self._ever_sent else "sent"
                self._ever_sent.add(event.id)
                logger.info("%s %s", verb, describe(event))
            sent = upto
            for item in holds:
                await call.write(item)
                logger.info("asked the aggregator to confirm this pod's condition (hold %d)", item.hold.seq)
            await _first(self.outbox.wait_beyond(sent), control.wait())

    async def _probe(self, control: _Control) -> None:
        for _ in range(self.probe_burst):
            control.push_probe()
            await asyncio.sleep(self.probe_burst_interval)
        while True:
            await asyncio.sleep(self.probe_interval)
            control.push_probe()

    def _on_clock_reply(self, reply: pb.ClockReply, control: _Control) -> None:
        t4 = self._wall_ns()
        t1 = self._probes.pop(reply.seq, None)
        if t1 is None:
            logger.debug("clock reply for unknown probe %d ignored", reply.seq)
            return
        sample = clock_sample(t1, reply.t2.ToNanoseconds(), reply.t3.ToNanoseconds(), t4)
        if self.clock.add(sample):
            logger.info(
                "clock offset to aggregator %+.3f ms (round trip %.3f ms, %d sample(s))",
                sample.offset_ns / 1e6,
                sample.round_trip_ns / 1e6,
                self.clock.samples,
            )
            estimate = self.clock.estimate()
            if estimate is not None:
                control.push(pb.SidecarMessage(clock_estimate=estimate))


def _is_stream_failure(exc: BaseException) -> bool:
    """Errors the writer gets when the call under it ended; the reader reports the real status."""
    return isinstance(exc, grpc.aio.AioRpcError | grpc.aio.UsageError | asyncio.InvalidStateError)


async def _first(*aws: Awaitable[None]) -> None:
    """Wait until the first of several awaitables completes; cancel the rest."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
    for t in done:
        t.result()
