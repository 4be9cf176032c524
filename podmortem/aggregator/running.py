"""The aggregator daemon: wires server, incident book, engine and publishers; one stop path.

`Aggregator` is started and stopped by `serve` (the `podmortem aggregator` command) and directly by
tests. It has root tasks — the publish worker, the Kubernetes pod watch (with `--kube`), and any the
caller adds — and `serve` is supervised as kopf's `run_tasks` is: it ends on the first of {the stop
signal, any root task ending}. A signal only sets the stop event. Whatever ended it, stopping runs in
one order: health NOT_SERVING through `enter_graceful_shutdown()` (so load balancers stop sending new
streams), `server.stop(grace)` (open streams end; sidecars reconnect elsewhere and resend what is
unacknowledged), every still-open incident decided now rather than lost, the publish queue drained
with the remaining grace, then the root tasks cancelled and awaited — and a root task's failure is
re-raised at the end, so a crashed pod watch or publish worker stops the process (exit 1) when it
dies, not at the next shutdown.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import signal
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from wsgiref.simple_server import WSGIServer

import grpc
from grpc_health.v1 import health
from prometheus_client import CollectorRegistry, start_http_server

from podmortem.aggregator import config as config_mod
from podmortem.aggregator.config import AggregatorConfig, KubeSettings, add_kube_arguments, load_kube_settings
from podmortem.aggregator.deciding import Decide
from podmortem.aggregator.holding import HoldDesk
from podmortem.aggregator.incidents import IncidentBook
from podmortem.aggregator.kube.client import Kube, client_for
from podmortem.aggregator.metrics import Metrics, MetricsPublisher
from podmortem.aggregator.publishing import JsonFilePublisher, LogPublisher, Publisher, PublishQueue
from podmortem.aggregator.server import CollectorService, create_server, set_serving
from podmortem.aggregator.stalls import StallDesk
from podmortem.aggregator.state import StateError, StateStore
from podmortem.core import engine, rules
from podmortem.core.model import Incident, Verdict

if TYPE_CHECKING:
    from podmortem.aggregator.kube.leader import LeaderElector
    from podmortem.aggregator.kube.membership import MembershipVerifier

log = logging.getLogger(__name__)


def make_decide(rules_path: str = "") -> Decide:
    """The engine with the built-in rules, extended by the operator's rules file when given."""
    return _decide_with(rules.load_rules(rules_path) if rules_path else rules.DEFAULT_RULES)


def _decide_with(ruleset: rules.RuleSet) -> Decide:
    def decide(incident: Incident) -> Verdict:
        return engine.decide(incident, ruleset)

    return decide


class Aggregator:
    def __init__(
        self,
        config: AggregatorConfig,
        *,
        decide: Decide | None = None,
        publishers: Sequence[Publisher] = (),
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.time,
        kube_settings: KubeSettings | None = None,
        tasks: Sequence[Callable[[], Awaitable[None]]] = (),
    ) -> None:
        self.config = config
        self.metrics = Metrics(registry)
        chain: list[Publisher] = [LogPublisher(), MetricsPublisher(self.metrics)]
        self.verdict_files = (
            JsonFilePublisher(config.verdict_dir, mode=config.verdict_file_mode) if config.verdict_dir else None
        )
        if self.verdict_files is not None:
            chain.append(self.verdict_files)
        self.kube_settings = kube_settings if kube_settings is not None and kube_settings.enabled else None
        self._kube: Kube | None = None
        self._condition_kube: Kube | None = None
        if self.kube_settings is not None:
            from podmortem.aggregator.kube.publish import kube_publishers

            # One client for the pod watch and the publishers, so they share one rate limit.
            self._kube = client_for(self.kube_settings, "api")
            chain.extend(
                kube_publishers(
                    self.kube_settings,
                    self._kube,
                    on_suspects=self.metrics.suspect_nodes.set,
                    on_node_refused=self.metrics.node_fault_refused,
                )
            )
        chain.extend(publishers)
        self.store = StateStore(config.state_dir, clock=clock) if config.state_dir else None
        if self.store is not None:
            chain.append(self.store)  # last: a job is forgotten once its final verdict went everywhere
        self.queue = PublishQueue(
            [self.metrics.counting(p) for p in chain], on_fenced=lambda _: self.metrics.fenced.inc()
        )
        ruleset = rules.load_rules(config.rules) if config.rules else rules.DEFAULT_RULES
        decide = decide or _decide_with(ruleset)
        self.book = IncidentBook(
            decide,
            self.queue.submit,
            quorum_timeout=config.quorum_timeout,
            default_world_size=config.world_size,
            clock=clock,
            metrics=self.metrics,
            max_open_per_job=config.max_open_per_job,
            max_open_per_namespace=config.max_open_per_namespace,
        )
        # Pod conditions (podmortem.io/Victim, ...): decided while each sidecar holds its pod, written by the
        # Lease holder only (its fence, set in `start`). Without Kubernetes there is nothing to write:
        # sidecars do not hold.
        self.holds: HoldDesk | None = None
        self._elector: LeaderElector | None = None
        if self._kube is not None and self.kube_settings is not None and "pod-conditions" in self.kube_settings.publish:
            from podmortem.aggregator.kube.podconditions import WORKERS, PodConditionWriter
            from podmortem.aggregator.kube.repeats import JobHistoryReader, RepeatEventWriter

            # A client of their own (rate limit, threads): a large job's conditions never hold up the
            # verdict's publishers or the pod watch on the shared client.
            self._condition_kube = client_for(self.kube_settings, "conditions", WORKERS)
            self.condition_writer = PodConditionWriter(self._condition_kube, clock)
            # A repeated failure is looked up and told on the conditions' client: within the hold.
            self.job_history = JobHistoryReader(self._condition_kube)
            self.repeat_events = RepeatEventWriter(self._condition_kube, self.kube_settings.reporting_instance)
            self.holds = HoldDesk(
                self.book,
                decide,
                self.condition_writer.write,
                rules=ruleset,
                permanent_confidence=config.permanent_confidence,
                peer_wait=config.peer_wait,
                repeat_limit=config.repeat_limit,
                lookup=self.job_history.read,
                # The Event only where Events are published (and so allowed by the chart's RBAC).
                on_repeat=self.repeat_events.post if "events" in self.kube_settings.publish else None,
                clock=clock,
                metrics=self.metrics,
                verified=self.book.is_verified,  # the pod watch's members and streams verified against the API
            )
        # Capture requests to the sidecars of a stalled job, or at a job's first timeout; a provisional verdict.
        self.stalls = StallDesk(self.book, self.metrics, rules=ruleset)
        authenticator = None
        self._review_kube: Kube | None = None
        self.membership: MembershipVerifier | None = None
        if config.auth == "tokenreview" and self.kube_settings is not None:
            from podmortem.aggregator.auth import MAX_REVIEWS, TokenReviewer
            from podmortem.aggregator.kube.membership import MembershipVerifier

            # Token reviews and the pod reads that verify membership have a client of their own (rate
            # limit, threads, one quick retry): a flood of streams never delays the publishers' writes.
            self._review_kube = client_for(self.kube_settings, "reviews", 2 * MAX_REVIEWS + 1)
            self.membership = MembershipVerifier(self._review_kube)
            authenticator = TokenReviewer(self._review_kube, clock, known_pod=self.membership.index.knows)
        namespaces = self.kube_settings.namespaces if self.kube_settings is not None else ()
        self.service = CollectorService(
            self.book,
            self.metrics,
            clock,
            authenticator=authenticator,
            namespaces=namespaces or (),
            store=self.store,
            membership=self.membership.verify if self.membership is not None else None,
            holds=self.holds,
            stalls=self.stalls,
        )
        self.port = 0
        self.metrics_port = 0
        self._server: grpc.aio.Server | None = None
        self._health: health.aio.HealthServicer | None = None
        self._httpd: WSGIServer | None = None
        self._worker: asyncio.Task[None] | None = None
        self._kube_stop = asyncio.Event()
        self._kube_task: asyncio.Task[None] | None = None
        self._extra = list(tasks)
        self._roots: list[asyncio.Task[None]] = []  # every root task; one ending early ends `run_until`

    async def start(self, elector: LeaderElector | None = None, stop: asyncio.Event | None = None) -> bool:
        """Open the port and start the root tasks. With an `elector`, first stand by — alive (the
        process's health SERVING) but not Ready (the Collector's NOT_SERVING, streams refused) — until
        this replica holds the Lease; False when `stop` came first (nothing else was started)."""
        self._elector = elector
        if self.store is not None:
            self.store.replay(self.book)  # before the port opens: what was acked before a restart comes first
        credentials = None
        if self.config.tls_cert:
            cert, key = await asyncio.to_thread(_read_pair, self.config.tls_cert, self.config.tls_key)
            credentials = grpc.ssl_server_credentials([(key, cert)])
        try:
            server, self.port, health_servicer = create_server(self.config.listen, self.service, credentials)
        except OSError as exc:
            raise BindError(_setting_name("listen"), self.config.listen, exc) from None
        self._server, self._health = server, health_servicer
        await server.start()
        if elector is not None:
            self.service.standby = True
            await set_serving(health_servicer, False, alive=True)
            if not await elector.acquire(stop):
                return False
            self.service.standby = False
            self._extra.append(elector.hold)
            # One fence for every writer: nothing is published outside a confirmed term (the queue fences
            # each publisher's turn, node marks included), and pod conditions are written only while the
            # last renewal is within the renew deadline.
            self.queue.fence = elector
            if self.holds is not None:
                self.holds.fence = elector
        # The stalls whose provisional verdict the state file kept are watched until they end, from the moment
        # this process may hear their sidecars (not while it stands by: no stream comes, nothing is heard).
        self.stalls.restored()
        await set_serving(health_servicer, True)
        self._worker = asyncio.create_task(self.queue.run(), name="publish-queue")
        self._roots.append(self._worker)
        if self.verdict_files is not None:
            self._roots.append(asyncio.create_task(self.verdict_files.retry_forever(), name="verdict-file-retry"))
        if self.kube_settings is not None:
            from podmortem.aggregator.kube.podwatch import run_kubernetes

            self._kube_task = asyncio.create_task(
                run_kubernetes(
                    self.book,
                    self.kube_settings,
                    self._kube_stop,
                    self._kube,
                    index=self.membership.index if self.membership is not None else None,
                    holds=self.holds,
                    stalls=self.stalls,
                ),
                name="pod-watch",
            )
            self._roots.append(self._kube_task)
        for i, factory in enumerate(self._extra):
            self._roots.append(asyncio.create_task(_awaited(factory), name=f"task-{i}"))
        if self.config.metrics_listen:
            host, port = config_mod.split_address(self.config.metrics_listen)
            try:
                self._httpd, _ = start_http_server(port, host, registry=self.metrics.registry)
            except OSError as exc:
                raise BindError(_setting_name("metrics_listen"), self.config.metrics_listen, exc) from None
            self.metrics_port = self._httpd.server_port
        host = config_mod.split_address(self.config.listen)[0]
        address = f"{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{self.port}"
        log.info("aggregator serving gRPC on %s (metrics %s)", address, self.metrics_port or "off")
        if self.config.ready_file:
            await asyncio.to_thread(_write_atomically, Path(self.config.ready_file), address + "\n")
        return True

    async def run_until(self, stop: asyncio.Event) -> asyncio.Task[None] | None:
        """Wait for the stop event or the first root task to end; the task that ended, else None."""
        stopper = asyncio.create_task(stop.wait(), name="stop-signal")
        try:
            done, _ = await asyncio.wait([stopper, *self._roots], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
        ended = next((task for task in self._roots if task in done), None)
        if ended is not None:
            log.error("root task %s ended while serving: stopping", ended.get_name())
        return ended

    async def stop(
        self,
        grace: float | None = None,
        *,
        decide_open: bool = True,
        handover: Callable[[float], Awaitable[bool]] | None = None,
    ) -> None:
        """The one stop path. Re-raises the failure of a root task that ended (first one) at its end.

        `decide_open=False` (leadership lost: another replica decides now) leaves open incidents
        undecided instead of publishing them early beside the new leader. `handover(limit)` (a leader
        stopping under leader election) is called once no stream is open: it gives the Lease up and says
        whether another replica took it within `limit` seconds; if one did, open incidents are left to
        it too (the sidecars give it every event again), so that an incident gets one verdict, not an
        early one from here and another from the new leader; if none did, they are decided here."""
        grace = self.config.shutdown_grace if grace is None else grace
        deadline = asyncio.get_running_loop().time() + grace
        ended_early = {task for task in self._roots if task.done()}  # before anyone asked them to
        if self._server is not None and self._health is not None:
            await self._health.enter_graceful_shutdown()
            await self._server.stop(grace / 2)
        self._kube_stop.set()
        if self._kube_task is not None:
            await asyncio.wait([self._kube_task], timeout=max(deadline - asyncio.get_running_loop().time(), 0.1))
        self.stalls.close()  # no stream is left to ask or to hear from: its timers would publish past the stop
        await self.book.settle()  # decisions running in worker threads land first
        if decide_open and handover is not None:
            if self._worker is not None and not self._worker.done():
                # What is decided is published while the Lease is still held: once released, the
                # fence refuses it.
                await self.queue.drain(max(deadline - asyncio.get_running_loop().time(), 0.1) / 2)
            limit = max(deadline - asyncio.get_running_loop().time(), 0.0) / 2
            if await handover(limit):
                decide_open = False
                if self.book.open_incidents():
                    log.info("%d open incident(s) left to the new leader", len(self.book.open_incidents()))
        if decide_open:
            self.book.close_all()
        if self._worker is not None and not self._worker.done():
            await self.queue.drain(max(deadline - asyncio.get_running_loop().time(), 0.1))
        if self.verdict_files is not None and self.verdict_files.unwritten:
            try:
                await self.verdict_files.flush()
            except OSError as exc:
                log.error(
                    "shutdown: %d verdict file(s) could not be written: %s", len(self.verdict_files.unwritten), exc
                )
        failures: list[BaseException] = []
        for task in self._roots:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            elif not task.cancelled():
                error = task.exception()
                if error is None and task in ended_early:
                    error = RuntimeError(f"root task {task.get_name()} ended on its own")
                if error is not None:
                    log.error("root task %s failed", task.get_name(), exc_info=error)
                    failures.append(error)
        for client in (self._kube, self._condition_kube, self._review_kube):
            if client is not None:
                client.close()
        if self.store is not None:
            self.store.close()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        log.info("aggregator stopped")
        if failures:
            raise failures[0]


# The cyclic garbage collector's young generation, in allocations: a burst allocates a few Python objects
# per message (gRPC's and protobuf's, the book's), nearly all freed by reference counting, and at
# CPython's default (700) the collector runs every few messages (`bench/burst.py`'s aggregator CPU).
GC_YOUNG_THRESHOLD = 5_000


def settle_gc() -> None:
    """The aggregator process's: what it holds once set up (modules, the rules) goes to the collector's
    permanent generation, which no collection walks again, and young collections run less often."""
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])


class BindError(OSError):
    """A port the aggregator cannot listen on; the message names the setting and the address."""

    def __init__(self, setting: str, address: str, cause: OSError) -> None:
        reason = cause.strerror or str(cause)
        super().__init__(cause.errno, f"{setting} = {address}: cannot listen: {reason}")

    def __str__(self) -> str:
        return str(self.strerror)


def _setting_name(dest: str) -> str:
    return next(s for s in config_mod.SETTINGS if s.dest == dest).name


async def _awaited(factory: Callable[[], Awaitable[None]]) -> None:
    await factory()


def _read_pair(cert: str, key: str) -> tuple[bytes, bytes]:
    return Path(cert).read_bytes(), Path(key).read_bytes()


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


async def serve(
    config: AggregatorConfig, kube_settings: KubeSettings | None = None, stop: asyncio.Event | None = None
) -> None:
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    elector = None
    if kube_settings is not None and kube_settings.enabled and kube_settings.leader.enabled:
        elector = _elector(kube_settings)
    aggregator = Aggregator(config, kube_settings=kube_settings)
    ended = None
    try:
        if await aggregator.start(elector, stop):
            ended = await aggregator.run_until(stop)
        if ended is None:
            log.info("stop requested: draining")
    finally:
        lost = ended is not None and not ended.cancelled() and _is_leadership_lost(ended.exception())
        handover = None
        if elector is not None and not lost:

            async def handover(limit: float) -> bool:
                assert elector is not None
                if not elector.is_leader:
                    return False
                await elector.release()
                if await elector.taken_over(min(limit, 3 * elector.timings.retry_period)):
                    return True
                # Nobody took over: hold the Lease again to decide what is open (the fence needs a term).
                await elector.reacquire()
                return False

        try:
            # Re-raises a root task's failure after the stop path.
            await aggregator.stop(decide_open=not lost, handover=handover)
        finally:
            if elector is not None:
                await elector.release()
                elector.kube.close()


def _elector(settings: KubeSettings) -> LeaderElector:
    from podmortem.aggregator.kube.leader import LeaderElector

    identity = f"{settings.reporting_instance}_{uuid.uuid4().hex[:8]}"
    lease = settings.leader
    return LeaderElector(client_for(settings, "lease"), lease.lease_namespace, lease.lease_name, identity)


def _is_leadership_lost(error: BaseException | None) -> bool:
    from podmortem.aggregator.kube.leader import LeadershipLost

    return isinstance(error, LeadershipLost)


def build_parser(parser: argparse.ArgumentParser) -> None:
    config_mod.add_arguments(parser)
    add_kube_arguments(parser)


def run(ns: argparse.Namespace) -> int:
    try:
        kube_settings = load_kube_settings(ns)
        config = config_mod.load(ns, kube=kube_settings.enabled)
        if config.rules:
            rules.load_rules(config.rules)  # fail fast, with the file's own error
        for path in (config.tls_cert, config.tls_key):
            if path and not Path(path).is_file():
                raise ValueError(f"{path}: no such TLS file")
        for dest in ("verdict_dir", "state_dir"):
            if getattr(config, dest):
                config_mod.writable_directory(config_mod.setting_name(dest), getattr(config, dest))
    except (ValueError, rules.RulesError) as exc:
        print(f"podmortem aggregator: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=config.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if config.state_dir:
        try:
            StateStore(config.state_dir).close()  # fail fast: an unusable directory is a setting's error
        except StateError as exc:
            print(f"podmortem aggregator: {exc}", file=sys.stderr)
            return 2
    settle_gc()
    try:
        asyncio.run(serve(config, kube_settings))
    except BindError as exc:
        print(f"podmortem aggregator: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        log.critical("aggregator stopped after a failure: %s", exc)
        return 1
    return 0
