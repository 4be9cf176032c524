"""The sidecar process: its entry points, and the root task with its one stop path.

`podmortem sidecar` (podmortem/cli.py) builds its subparser with `build_parser` and calls `run`;
`main` does both for a standalone run. `serve` is the root task: it starts the error-file watcher,
the pod reporter and the gRPC stream, all feeding one outbox, and then waits for one of two things —
the stop event (SIGTERM/SIGINT only set it) or a task ending on its own (a bug, or the aggregator
rejecting our registration).

On stop the sidecar does what must not be skipped when a pod dies: one more look at the error file
(an unparsable one is reported as such now) and at the pod. A native sidecar gets its SIGTERM as soon
as the training container exits, while the pod status that shows that exit reaches the API (and us) a
moment later: so when the pod's end is not known yet, it keeps watching the pod (and the error file)
until it is, at most `flush_timeout` — the termination (exit code, signal, OOMKilled) and the log tail
are what the verdict needs. Then a flush — it waits, at most
`flush_timeout`, until the aggregator has acknowledged every event (the watchers keep running
meanwhile, so a file written during the flush still goes out). Then the hold (`_hold`): when the
training container did not end cleanly and the pod is not being deleted, the sidecar asks the aggregator
to confirm this pod's condition (`podmortem.io/Victim`, `PermanentFailure`, `RetryableFailure`, or none)
and waits for the answer, until `hold_timeout` after the SIGTERM (the flush included: an unreachable
aggregator keeps a held pod no longer than that) and never past its pod's grace period (less a margin
for the rest of the stop path): the kubelet does not make the pod terminal while its native sidecar runs,
so the Job controller sees the condition when it sees the failure. An aggregator that does not hold
(older) or does not answer in time lets the pod fall back to Kubernetes' defaults. Then everything is
cancelled and awaited, and the failure of any task is re-raised. Exit code 0 after a stop (SIGTERM
included), 2 for a configuration error (bad settings, or INVALID_ARGUMENT from the aggregator).

Hangs: each `capture_request` of the aggregator is answered by `capture.Capturer` in a task of its own
(the stream keeps reading meanwhile), its `Capture` event put in the outbox. With a stall-after, an
`activity.ActivityDetector` reports the training container quiet or active. On stop, before the flush,
the Flight Recorder files the workers left (NCCL writes them on a collective timeout) go out in a capture
of the sidecar's own (trigger `teardown`), unless the aggregator said it takes none (an aggregator from
before captures that is not registered yet gets it, and ignores it).

Memory: the library pages that only starting touched are given back (`residency.release`) once the
imports are done, again SETTLED seconds after the stream has registered, and after each capture; at rest the sidecar
keeps resident only what it uses (`bench/sidecar_rss.py` measures it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import sys
from collections.abc import Coroutine
from typing import Any

import podmortem
from podmortem.core import podstatus
from podmortem.core.podstatus import PodSnapshot
from podmortem.k8s.backoff import Backoff
from podmortem.k8s.workloads import attempt_from, attempt_of, workload_from_labels
from podmortem.protocol.v1 import collector_pb2 as pb
from podmortem.settings import HelpFormatter
from podmortem.sidecar import config, residency
from podmortem.sidecar.activity import ActivityDetector, LastOutput, file_output
from podmortem.sidecar.capture import Capturer
from podmortem.sidecar.config import ConfigError, Settings
from podmortem.sidecar.outbox import Outbox
from podmortem.sidecar.podsource import PodReporter, PodSource, make_pod_source
from podmortem.sidecar.stream import RegistrationRejected, StreamClient
from podmortem.sidecar.watcher import ErrorFileWatcher

logger = logging.getLogger("podmortem.sidecar")
IDENTITY_WAIT = 10.0  # seconds to read our own pod for the job's identity at start
# Kubernetes' default terminationGracePeriodSeconds, when the pod's own is not known.
DEFAULT_GRACE = 30.0
# Of the grace period the SIGTERM started, what the hold leaves for the rest of the stop path and the exit.
GRACE_MARGIN = 2.0

# Of the stop path, the most the teardown capture (Flight Recorder files) may take.
TEARDOWN_CAPTURE = 5.0

# Seconds after the registration when starting is over (the clock-probe burst takes 4 x 0.2 s): then the
# memory only starting needed is given back (`residency.release`).
SETTLED = 2.0

EXIT_OK = 0
EXIT_CONFIG = 2


def build_parser(parser: argparse.ArgumentParser) -> None:
    """Add the sidecar's flags (one per setting; see `podmortem.sidecar.config`) to a (sub)parser."""
    parser.description = parser.description or "Watch this pod's TorchElastic error file and status; report them."
    config.add_arguments(parser)


def run(ns: argparse.Namespace) -> int:
    """Run the sidecar with parsed flags (environment for the rest) until SIGTERM; the exit code."""
    try:
        settings = config.from_env_and_args(None, ns)
    except ConfigError as exc:
        print(f"podmortem sidecar: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    logging.basicConfig(
        level=settings.log_level,
        format=f"%(asctime)s %(levelname)s [{settings.pod_name}] %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        source = make_pod_source(settings)
    except (ValueError, OSError) as exc:  # no API server to be found, an unusable kubeconfig or TLS files
        print(f"podmortem sidecar: pod source {settings.pod_source!r}: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    residency.release()  # every module is imported: what only the imports touched need not stay resident
    return asyncio.run(serve(settings, pod_source=source))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="podmortem sidecar", formatter_class=HelpFormatter)
    build_parser(parser)
    return run(parser.parse_args(argv))


def build_register(settings: Settings, session_id: str) -> pb.Register:
    register = pb.Register(
        job=pb.JobRef(
            namespace=settings.namespace, name=settings.job_name, kind=settings.job_kind, uid=settings.job_uid
        ),
        pod=settings.pod_name,
        pod_uid=settings.pod_uid,
        node=settings.node_name,
        replica_type=settings.replica_type,
        attempt=settings.attempt,
        session_id=session_id,
        sidecar_version=podmortem.__version__,
        pod_ip=settings.pod_ip,
        holds=settings.hold_timeout > 0,
        captures=True,
    )
    if settings.replica_index is not None:
        register.replica_index = settings.replica_index
    if settings.rank is not None:
        register.rank = settings.rank
    if settings.world_size is not None:
        register.world_size_hint = settings.world_size
    return register


async def serve(
    settings: Settings,
    *,
    stop: asyncio.Event | None = None,
    pod_source: PodSource | None = None,
    outbox: Outbox | None = None,
    backoff: Backoff | None = None,
    install_signal_handlers: bool = True,
) -> int:
    """The root task. Returns the exit code; re-raises the failure of any of its tasks."""
    stop = stop if stop is not None else asyncio.Event()
    outbox = outbox if outbox is not None else Outbox()
    loop = asyncio.get_running_loop()
    signals = (signal.SIGTERM, signal.SIGINT) if install_signal_handlers else ()
    for sig in signals:
        loop.add_signal_handler(sig, _on_signal, sig, stop)

    session_id = os.urandom(16).hex()  # not uuid: it imports platform, 0.3 MiB in every sidecar
    logger.info(
        "sidecar %s for pod %s/%s (session %s): error file %s, aggregator %s, pod status from %s",
        podmortem.__version__,
        settings.namespace,
        settings.pod_name,
        session_id,
        settings.error_file,
        settings.aggregator,
        settings.pod_status_file if settings.pod_source == "file" else settings.pod_source,
    )
    watcher = ErrorFileWatcher(
        settings.error_file,
        settings.pod_key,
        outbox.put,
        settle_seconds=settings.settle_seconds,
        force_polling=settings.force_polling or None,
    )
    source = pod_source if pod_source is not None else make_pod_source(settings)
    derive_attempt = not settings.attempt  # not given: JobSet's attempt and the container's restarts
    run = 0  # the training container's run the registration speaks for
    if source is not None:
        settings, first = await _identity_from_pod(settings, source, derive_attempt)
        if first is not None:
            watcher.not_before = first.started_at
            run = first.restart_count

    pod_changed = asyncio.Event()

    def emit_pod_event(event: pb.Event) -> None:
        if event.WhichOneof("payload") in ("termination", "deletion"):
            # The container has ended, so its error file is complete: send it before the end itself.
            watcher.check(force=True, final=True)
        outbox.put(event)
        pod_changed.set()

    reporter = (
        PodReporter(
            source,
            emit_pod_event,
            pod_name=settings.pod_name,
            container=settings.container,
            log_file=settings.log_file,
            log_tail_bytes=settings.log_tail_bytes,
        )
        if source is not None
        else None
    )

    async def on_snapshot(snap: PodSnapshot) -> None:
        """A new run of the training container is a new job attempt (when none is given): what the
        previous run said is flushed under its attempt, then the sidecar registers under the new one.
        Its error file, still in the shared volume, is the previous run's until rewritten."""
        nonlocal settings, run
        if snap.started_at is not None:
            watcher.not_before = snap.started_at
        attempt = attempt_from(snap.labels, snap.restart_count) if derive_attempt else settings.attempt
        node = settings.node_name or snap.node
        if (attempt, node) == (settings.attempt, settings.node_name):
            return
        if attempt != settings.attempt:
            logger.info(
                "the container restarted (run %d): job attempt %r -> %r", snap.restart_count, settings.attempt, attempt
            )
            await _flush(outbox, streamer, settings.flush_timeout)
            capturer.new_attempt()
            run = snap.restart_count
            assert reporter is not None
            reporter.min_run = run
        settings = dataclasses.replace(settings, attempt=attempt, node_name=node)
        client.reregister(build_register(settings, session_id))

    if reporter is not None:
        reporter.min_run = run
        reporter.on_snapshot = on_snapshot
    client = StreamClient(
        settings.aggregator,
        build_register(settings, session_id),
        outbox,
        backoff=backoff or Backoff(),
        probe_interval=settings.clock_probe_interval,
        token_file=settings.token_file,
        tls_ca=_tls_ca(settings),
    )

    def start(coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        return asyncio.create_task(coro, name=name)

    capturer = Capturer(settings.capture_dir, settings.pod_key, pyspy=settings.pyspy)
    capturing: set[asyncio.Task[None]] = set()

    async def answer(request: pb.CaptureRequest) -> None:
        residency.release()  # what the rest since the last release touched: the capture's peak starts lower
        try:
            event = await capturer.answer(request)
        except Exception:  # a bug in one capture must not stop the sidecar: the request goes unanswered
            logger.exception("capture %s failed", request.request_id)
            event = None
        if event is not None:
            outbox.put(event)
        residency.release()  # the dumps read and the modules loaded for them

    def on_capture_request(request: pb.CaptureRequest) -> None:
        task = start(answer(request), f"podmortem-capture-{request.request_id}")
        capturing.add(task)
        task.add_done_callback(capturing.discard)

    client.on_capture_request = on_capture_request

    observers = [start(watcher.run(), "podmortem-error-file-watcher")]
    if reporter is not None:
        observers.append(start(reporter.run(), "podmortem-pod-reporter"))
    if settings.stall_after > 0:
        detector = ActivityDetector(
            settings.stall_after,
            outbox.put,
            last_output=_last_output(settings, source, reporter),
            completed=capturer.completed if settings.capture_dir is not None else None,
            ended=lambda: reporter is not None and _pod_ended(reporter),
            pod_key=settings.pod_key,
        )
        observers.append(start(detector.run(), "podmortem-activity"))
    streamer = start(client.run(), "podmortem-stream")
    stopper = start(_wait(stop), "podmortem-stop")
    everything = [*observers, streamer, stopper]
    settling = start(_release_when_settled(client), "podmortem-release")
    try:
        await asyncio.wait(everything, return_when=asyncio.FIRST_COMPLETED)
        if stopper.done() and not streamer.done():
            logger.info("stopping: a last look at the error file and the pod, then flushing")
            stopped_at = loop.time()
            watcher.check(force=True, final=True)
            deadline = loop.time() + settings.flush_timeout
            if reporter is not None:
                await reporter.refresh()
                await _await_end(reporter, pod_changed, settings.flush_timeout)
                watcher.check(force=True, final=True)
            if client.aggregator_captures is not False:  # unknown yet (not registered): it may be
                await _teardown_capture(capturer, outbox)
            if will_hold(settings, reporter, client):
                # A held pod waits for the aggregator at most until its hold deadline, the flush included.
                grace = reporter.grace_seconds if reporter is not None else None
                deadline = min(deadline, loop.time() + hold_budget(settings, grace, stopped_at, loop.time()))
            await _flush(outbox, streamer, max(deadline - loop.time(), min(settings.flush_timeout, 1.0)))
            if not streamer.done():
                await _hold(client, reporter, settings, stopped_at)
    finally:
        for task in [*everything, *capturing, settling]:
            task.cancel()
        await asyncio.gather(*capturing, settling, return_exceptions=True)
        results = await asyncio.gather(*everything, return_exceptions=True)
        for sig in signals:
            loop.remove_signal_handler(sig)
    for result in results:
        if isinstance(result, RegistrationRejected):
            return EXIT_CONFIG
    for result in results:
        if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
            raise result
    return EXIT_OK


async def _release_when_settled(client: StreamClient) -> None:
    """Once registered and SETTLED seconds on, the sidecar has done all its starting (the channel's set-up,
    TLS, the first reads of the pod, the clock-probe burst): give back what only that needed
    (`residency.release`), then rest."""
    await client.registered.wait()
    await asyncio.sleep(SETTLED)
    residency.release()


def _last_output(settings: Settings, source: PodSource | None, reporter: PodReporter | None) -> LastOutput | None:
    """How the activity detector learns of the training container's last output: the local log file, or
    the API's log of the container (`OwnPod.last_output`), once the pod (and so the container) is known."""
    if settings.log_file is not None:
        return file_output(settings.log_file)
    probe = getattr(source, "last_output", None)
    if probe is None or reporter is None:
        return None

    async def last() -> float | None:
        snap = reporter.previous
        return await probe(snap.container) if snap is not None and snap.container else None

    return last


async def _teardown_capture(capturer: Capturer, outbox: Outbox) -> None:
    """The Flight Recorder files the workers left, in a capture of the sidecar's own (at most
    TEARDOWN_CAPTURE seconds)."""
    try:
        async with asyncio.timeout(TEARDOWN_CAPTURE):
            event = await capturer.teardown()
    except TimeoutError:
        logger.warning("the teardown capture took over %gs: left out", TEARDOWN_CAPTURE)
        return
    if event is not None:
        logger.info("found %d Flight Recorder dump file(s): sending their summaries", len(event.capture.workers))
        outbox.put(event)


async def _identity_from_pod(
    settings: Settings, source: PodSource, derive_attempt: bool
) -> tuple[Settings, PodSnapshot | None]:
    """What the settings leave out, from this pod as it is at start, by the same rules as the aggregator's
    pod watch (`podmortem.k8s.workloads`), so sidecars and the pod watch file one failure as one incident:
    the job from the pod's labels and owner (a JobSet pod registers under its JobSet, not its child batch
    Job), the attempt (JobSet's, and the training container's restarts), the node (spec.nodeName)."""
    try:
        async with asyncio.timeout(IDENTITY_WAIT):
            pod = await source.read()
    except TimeoutError:
        pod = None
    if pod is None:
        if not settings.job_name:
            logger.warning("no job name given and the pod could not be read: registering without one")
        return settings, None
    snap = podstatus.snapshot(pod, settings.container)
    if derive_attempt:
        settings = dataclasses.replace(settings, attempt=attempt_of(pod, snap.restart_count))
    if not settings.node_name and snap.node:
        settings = dataclasses.replace(settings, node_name=snap.node)
    if not settings.job_name:
        ref = workload_from_labels(pod)
        if ref is None:
            logger.warning("no job name given and none found on the pod: registering without one")
            return settings, snap
        settings = dataclasses.replace(
            settings, job_name=ref.name, job_kind=settings.job_kind or ref.kind, job_uid=settings.job_uid or ref.uid
        )
    logger.info(
        "from the pod: job %s %s/%s, attempt %r, node %r",
        settings.job_kind,
        settings.namespace,
        settings.job_name,
        settings.attempt,
        settings.node_name,
    )
    return settings, snap


def _tls_ca(settings: Settings) -> bytes | None:
    """The CA bundle that makes the stream TLS: a file (--tls-ca) or the text itself (--tls-ca-pem)."""
    if settings.tls_ca is not None:
        return settings.tls_ca.read_bytes()
    return (settings.tls_ca_pem.strip() + "\n").encode() if settings.tls_ca_pem else None


def _pod_ended(reporter: PodReporter) -> bool:
    """Is the training container's end known? A deletion is not an end: the kubelet SIGTERMs the training
    container when its pod is deleted, and its termination (exit code, signal, OOMKilled) follows in a
    later status — unless the container never ran (deleted while pending), when there is nothing to
    wait for."""
    snap = reporter.previous
    if snap is None:
        return False
    if snap.ended:
        return True
    return snap.deleted_at is not None and not snap.running and snap.restart_count == 0


async def _await_end(reporter: PodReporter, changed: asyncio.Event, limit: float) -> None:
    """Keep watching until the pod's end is known (the kubelet's status lags its SIGTERM), at most `limit`.

    Only for a pod seen at all: with no pod status ever (no source could be read) there is no end to
    expect, and the flush is all that is left to do."""
    if reporter.previous is None or _pod_ended(reporter):
        return
    logger.info("stopping before the pod's end is known: watching the pod for it (at most %gs)", limit)
    try:
        async with asyncio.timeout(limit):
            while not _pod_ended(reporter):
                changed.clear()
                await changed.wait()
    except TimeoutError:
        logger.warning("the pod's end was not seen within %gs; flushing what is known", limit)
    else:
        logger.info("the pod's end is known: flushing")


def hold_budget(settings: Settings, grace: float | None, stopped_at: float, now: float) -> float:
    """Seconds left of the hold at `now`: it ends `hold_timeout` after the SIGTERM (at `stopped_at`, loop
    clock; the flush before it counts), and never past the pod's grace period less `GRACE_MARGIN`."""
    grace_left = stopped_at + (DEFAULT_GRACE if grace is None else grace) - GRACE_MARGIN
    return max(min(stopped_at + settings.hold_timeout, grace_left) - now, 0.0)


def will_hold(settings: Settings, reporter: PodReporter | None, client: StreamClient) -> bool:
    """Is this pod to be held (as far as is known before the flush)?"""
    return settings.hold_timeout > 0 and not hold_skipped(reporter) and client.may_hold()


def hold_skipped(reporter: PodReporter | None) -> str:
    """Why this pod is not held ("" when it is): being deleted (the grace period is shared with the
    deletion, and the Job controller, a JobSet restart, a drain or a preemption is already acting), or its
    training container exited 0 (a pod that succeeded gets no condition)."""
    snap = reporter.previous if reporter is not None else None
    if snap is None:
        return ""
    if snap.deleted_at is not None:
        return "the pod is being deleted"
    t = snap.termination
    if t is not None and t.exit_code == 0 and not t.signal and snap.phase != "Failed":
        return "the training container exited 0"
    return ""


async def _hold(client: StreamClient, reporter: PodReporter | None, settings: Settings, stopped_at: float) -> None:
    """Wait for the aggregator to confirm this pod's condition (see the module docstring)."""
    if settings.hold_timeout <= 0:
        return
    if why := client.hold_refusal():
        logger.info("not holding the pod: %s; Kubernetes' defaults apply", why)
        return
    if why := hold_skipped(reporter):
        logger.info("not holding the pod: %s", why)
        return
    loop = asyncio.get_running_loop()
    grace = reporter.grace_seconds if reporter is not None else None
    budget = hold_budget(settings, grace, stopped_at, loop.time())
    if budget <= 0:
        logger.warning("no confirmation within the hold (%gs from the SIGTERM): exiting", settings.hold_timeout)
        return
    logger.info("holding the pod until the aggregator confirms its condition (at most %.1fs)", budget)
    started = loop.time()
    reply = await client.hold(budget)
    waited = loop.time() - started
    if reply is None and (why := client.hold_refusal()):
        logger.info("not holding the pod: %s; Kubernetes' defaults apply", why)
    elif reply is None:
        logger.warning("no confirmation within %.1fs: exiting; Kubernetes' defaults apply to this pod", budget)
    elif reply.outcome == pb.HoldReply.WRITTEN:
        logger.info("condition %s written on this pod (held %.2fs)", reply.condition_type, waited)
    elif reply.outcome == pb.HoldReply.NO_CONDITION:
        logger.info("the aggregator gives this pod no condition (held %.2fs)", waited)
    else:
        logger.warning("the aggregator wrote no condition: %s (held %.2fs)", reply.detail or "no reason", waited)


def _on_signal(sig: signal.Signals, stop: asyncio.Event) -> None:
    logger.info("received %s", sig.name)
    stop.set()


async def _wait(stop: asyncio.Event) -> None:
    await stop.wait()


async def _flush(outbox: Outbox, streamer: asyncio.Task[None], limit: float) -> None:
    """Wait until every event is acknowledged, the stream dies, or the timeout passes."""
    if not len(outbox):
        logger.info("nothing to flush: every event was acknowledged")
        return
    logger.info("flushing %d unacknowledged event(s) (at most %gs)", len(outbox), limit)
    empty = asyncio.ensure_future(outbox.wait_empty())
    try:
        await asyncio.wait({empty, streamer}, timeout=limit, return_when=asyncio.FIRST_COMPLETED)
    finally:
        empty.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await empty
    if len(outbox):
        logger.error(
            "exiting with %d event(s) the aggregator never acknowledged: %s",
            len(outbox),
            ", ".join(e.id for e in outbox.pending()),
        )
    else:
        logger.info("flushed: every event was acknowledged")


if __name__ == "__main__":
    sys.exit(main())
