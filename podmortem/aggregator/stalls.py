"""Stalls: ask every member's sidecar for its workers' stacks while a hung job's pods still run.

A hang ends in a cascade of collective timeouts, and by the time the first one reaches the aggregator
the rank that stopped is usually gone with its stack (its agent tore it down). So evidence is asked for
before that, in two moments:

* **a stall** — every expected member's sidecar has said `Activity(quiet=true)` (its training log, and
  where the worker control plane says, its completed collectives, silent for the job's stall-after),
  none active since, and nothing has failed. The desk sends a `CaptureRequest` (trigger `stall`) to
  every member over the stream it already has, waits for the answers (at most `capture_wait`), and has
  the book publish a provisional verdict (`IncidentBook.provisional`): nothing has failed, so no
  condition is written, only annotations (`final: false`), an Event, the verdict file and a metric.
  If a member then makes progress again and the job has not failed within `resume_grace` (its first
  log lines after a stall may be the timeout's own), the stall was a false alarm: the provisional
  verdict is withdrawn and `podmortem_stall_false_alarms_total` counts it. A job that moves and is quiet
  again within the grace is the same stall going on: it is asked again (the earlier stacks may be stale:
  a slow start-up is silent too), and its moment stays the one first seen (`IncidentBook.stalling`: the
  moment every provisional verdict on it says). A new stall, with a moment of its own, begins only
  after progress that outlasted the grace. A provisional verdict does not outlive its job: once every
  member ended with nothing failed (`IncidentBook.finished`: its sidecar's word or the pod watch's, which
  alone hears a quiet job whose sidecars say nothing more), the stall is over and withdrawn at once; all
  of them successful, the job completed, so it was not hung (a hang ends in a timeout, a failure): a
  false alarm, counted. A failure instead opens the incident, and its verdict replaces the stall's.
* **the first timeout** — among the first failures of a job attempt (`FIRST_FAILURES`), one the engine
  judges a hang (a collective or watchdog timeout: `core.assess`, not text matched here) makes the desk
  send a `CaptureRequest` (trigger `first_timeout`) to every member at once, the reporter included (its
  pod's other workers may be the stuck ones). Best effort: the stuck rank may already be gone. Quorum
  waits for the answers, at most `capture_wait`, so that the first verdict has them.

Requests are bounded per job attempt (`max_rounds`), and only sidecars that said they answer them
(`Register.captures`) get one. Answers are ordinary events: the book keeps them on their members
(`Member.captures`), the state file stores them, and the engine reads them. This module keeps only
in-memory round state: after an aggregator restart, a job the replayed book holds as stalled is asked
again once its sidecars reconnected, its moment the one its last member went quiet at (the replayed
activity: `IncidentBook.quiet_since`) — unless its provisional verdict was already published (the state
file kept it, its moment and the captures behind it). Such a stall is taken up at start-up
(`restored`) as stalled and published, and asks nothing; it ends as a live one does: withdrawn once the
job moved (the replayed activity, or any sidecar's, capturing or not) and did not fail within the
grace, or replaced by the verdict on a failure. One end only a restart needs: when nothing of the job
is heard within `rejoin_wait` (no sidecar reconnected, no pod of it seen running by the pod watch), its
pods ended or were deleted while the aggregator was down, and nobody can tell it is still stalled: the
provisional verdict is withdrawn, saying so (not counted as a false alarm: nothing moved).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from podmortem.aggregator.incidents import IncidentBook, JobKey, MemberKey
from podmortem.aggregator.intake import is_end, is_failure
from podmortem.aggregator.metrics import Metrics
from podmortem.core.assess import assess
from podmortem.core.rules import DEFAULT_RULES, RuleSet
from podmortem.protocol.v1 import collector_pb2 as pb
from podmortem.protocol.wire import capture_request_to_pb

log = logging.getLogger(__name__)

Push = Callable[[pb.AggregatorMessage], None]

# Seconds a sidecar may take for one whole capture (each worker is cut off at 2 s by the sidecar, and
# its workers are captured side by side).
CAPTURE_TIMEOUT = 5.0
# Seconds the desk waits for every member's answer before deciding without the missing ones.
CAPTURE_WAIT = 8.0
# Seconds after a member moved again in which a failure still makes the stall a real one (the timeout's
# own log lines are the first output after a stall), before it counts as a false alarm.
RESUME_GRACE = 10.0
# Capture rounds per job attempt: the stall, the first timeout, and a few stalls that were false alarms
# (a silent start-up); within the sidecar's own limit (`sidecar.capture.MAX_CAPTURES`, 8).
MAX_ROUNDS = 6
# The first failures of a job attempt looked at for a timeout (each is judged by the engine's assess).
FIRST_FAILURES = 4
# Seconds a stalled job's sidecars get to reconnect to a restarted aggregator before they are asked.
REJOIN_DELAY = 3.0
# Seconds after a restart within which something of a job whose stall verdict the state file kept must be
# heard (a sidecar reconnected, or its pod seen running), or the verdict is withdrawn. Above a sidecar's
# longest wait between two streams (`k8s.backoff.Backoff`: 30 s, +20 % jitter).
REJOIN_WAIT = 60.0
# Job attempts watched before those the book has forgotten are let go too.
MAX_WATCHES = 10_000


@dataclass
class _Round:
    request_id: str
    trigger: str
    waiting: set[str]  # pods asked that have not answered
    timer: asyncio.TimerHandle | None = None


@dataclass
class _Watch:
    """One job attempt as the desk sees it."""

    rounds: int = 0
    round: _Round | None = None
    stalled: bool = False  # a stall round was sent and the job has not moved since
    published: bool = False  # a provisional verdict is out (and not withdrawn)
    first_timeout: bool = False  # a first_timeout round was sent
    failures_judged: int = 0
    resume_timer: asyncio.TimerHandle | None = None
    rejoining: bool = False  # stalled in the book before this desk saw it: looked at after `rejoin_delay`
    unheard_timer: asyncio.TimerHandle | None = None  # restored stall: anything of the job heard by then?

    @property
    def waiting(self) -> bool:
        """A round or a timer of it is out."""
        return self.round is not None or self.resume_timer is not None or self.unheard_timer is not None


class StallDesk:
    def __init__(
        self,
        book: IncidentBook,
        metrics: Metrics | None = None,
        *,
        rules: RuleSet = DEFAULT_RULES,
        capture_timeout: float = CAPTURE_TIMEOUT,
        capture_wait: float = CAPTURE_WAIT,
        resume_grace: float = RESUME_GRACE,
        max_rounds: int = MAX_ROUNDS,
        first_timeout: bool = True,
        rejoin_delay: float = REJOIN_DELAY,
        rejoin_wait: float = REJOIN_WAIT,
    ) -> None:
        self.rejoin_delay = rejoin_delay
        self.rejoin_wait = rejoin_wait
        self.book = book
        self.metrics = metrics
        self.rules = rules
        self.capture_timeout = capture_timeout
        self.capture_wait = capture_wait
        self.resume_grace = resume_grace
        self.max_rounds = max_rounds
        self.first_timeout = first_timeout
        self._streams: dict[MemberKey, Push] = {}
        self._watches: dict[JobKey, _Watch] = {}
        self.sent = 0  # capture requests sent (all jobs)

    # -- streams (the server) ------------------------------------------------------------------

    def restored(self) -> None:
        """After the state file was replayed into the book (a restart), once this process may hear sidecars
        (it leads): every stall whose provisional verdict was out is taken up as stalled and published, with
        nothing asked (its captures were kept).
        A job that moved meanwhile has it withdrawn after the grace, as a live one; a job of which nothing
        is heard within `rejoin_wait` has it withdrawn then (`_unheard`)."""
        loop = asyncio.get_running_loop()
        for job in self.book.published_stalls():
            watch = self._watch(job)
            if watch.published:
                continue
            watch.stalled = watch.published = True
            if self.book.finished(job):  # the state file says every member ended: it is over already
                self._over(job, watch)
                continue
            watch.unheard_timer = loop.call_later(self.rejoin_wait, self._unheard, job)
            log.info(
                "incident %s: its stall's provisional verdict was out before the restart; watching it",
                self.book.incident_id(job),
            )
            self._activity(job)

    def _unheard(self, job: JobKey) -> None:
        watch = self._watch(job)
        watch.unheard_timer = None
        if not watch.published or self.book.failed(job) or self.book.heard(job):
            return  # withdrawn, or failed, already; or its sidecars are back: it ends as a live stall
        log.warning(
            "incident %s: nothing of the job heard within %.0f s of the restart (no sidecar back, no pod seen "
            "running): its stall's provisional verdict is withdrawn",
            self.book.incident_id(job),
            self.rejoin_wait,
        )
        if watch.resume_timer is not None:
            watch.resume_timer.cancel()
            watch.resume_timer = None
        watch.stalled = False
        self._withdraw(
            job,
            watch,
            f"nothing of the job was heard within {self.rejoin_wait:.0f} s of an aggregator restart (no sidecar "
            "reconnected, no pod of it seen running): its pods ended or were deleted meanwhile, and the provisional "
            "hang verdict is withdrawn, unconfirmed",
        )

    def opened(self, key: MemberKey, push: Push) -> None:
        """A registered stream whose sidecar answers capture requests; the newest one of a member wins. A
        job the book holds as stalled that this desk has not seen (the state file replayed it after a
        restart, before its stall's verdict was out) is asked once its sidecars had `rejoin_delay` to
        reconnect."""
        self._streams[key] = push
        watch = self._watch(key.job)
        if watch.stalled or watch.rejoining:
            return
        if self.book.stalled(key.job):
            watch.rejoining = True
            asyncio.get_running_loop().call_later(self.rejoin_delay, self._rejoined, key.job)

    def _rejoined(self, job: JobKey) -> None:
        self._watch(job).rejoining = False
        if self.book.stalled(job):  # seen before the restart (its round may have been out): that moment
            self.book.stalling(job, True, since=self.book.quiet_since(job))
        self._activity(job)

    def close(self) -> None:
        """The aggregator stops: every timer cancelled (a round's wait, a grace, a restored stall's wait),
        so that nothing is asked or published past the stop. A stall verdict out stays as published."""
        for watch in self._watches.values():
            for timer in (watch.round.timer if watch.round else None, watch.resume_timer, watch.unheard_timer):
                if timer is not None:
                    timer.cancel()
            watch.round = watch.resume_timer = watch.unheard_timer = None

    def closed(self, key: MemberKey, push: Push) -> None:
        if self._streams.get(key) is push:
            del self._streams[key]

    # -- events (the server, after the book took them) -----------------------------------------

    def ingested(self, key: MemberKey, event: pb.Event) -> None:
        kind = event.WhichOneof("payload")
        if kind == "activity":
            self._activity(key.job)
        elif kind == "capture":
            self._answered(key, event.capture)
        else:
            if is_failure(event):
                self._failure(key)
            if is_end(event):
                self.ended(key)

    def ended(self, key: MemberKey) -> None:
        """A member's end was taken by the book: its termination or deletion, from its sidecar (`ingested`)
        or from the pod watch (`kube.podwatch`, which alone sees a pod whose sidecar says nothing more).
        Once every member ended with nothing failed the job is over, and a stall of it with it (`_over`)."""
        watch = self._watches.get(key.job)
        if watch is not None and self.book.finished(key.job):
            self._over(key.job, watch)

    def _over(self, job: JobKey, watch: _Watch) -> None:
        """The job is over and nothing failed (`IncidentBook.finished`): a stall of it (seen, published, or
        moving within the grace) ends now, its round and timers dropped and its provisional verdict
        withdrawn. Every member ended successfully: the job completed, so it was not hung (a hang ends in a
        timeout, a failure) and the stall was a false alarm, counted as one. Otherwise (a pod deleted before
        it ran, a container's end unknown) nothing shows it moved: withdrawn unconfirmed, not counted."""
        if not (watch.stalled or watch.published or watch.resume_timer is not None):
            return
        if watch.round is not None and watch.round.trigger == "stall":
            self._end_round(job, watch, decide=False)
        for timer in (watch.resume_timer, watch.unheard_timer):
            if timer is not None:
                timer.cancel()
        watch.resume_timer = watch.unheard_timer = None
        watch.stalled = False
        if self.book.succeeded(job):
            if self.metrics is not None:
                self.metrics.false_alarms.inc()
            log.warning(
                "incident %s: every member ended successfully after a stall (a false alarm)", self.book.incident_id(job)
            )
            note = (
                "every member of the job ended successfully after it had gone quiet: it was not hung, and the "
                "provisional hang verdict is withdrawn (a false alarm of stall detection)"
            )
        else:
            log.warning("incident %s: every member ended, none failed, after a stall", self.book.incident_id(job))
            note = (
                "every member of the job ended with nothing failed, not all of them known to have succeeded (a pod "
                "deleted before it ran, a container whose end is unknown): nobody can confirm the stall, and the "
                "provisional hang verdict is withdrawn, unconfirmed"
            )
        self._withdraw(job, watch, note)

    def _watch(self, job: JobKey) -> _Watch:
        watch = self._watches.get(job)
        if watch is None:
            if len(self._watches) >= MAX_WATCHES:  # the book forgets decided jobs: so does the desk
                for old in [k for k, w in self._watches.items() if not w.waiting]:
                    if not self.book.pods(old):
                        del self._watches[old]
            watch = self._watches[job] = _Watch()
        return watch

    def _activity(self, job: JobKey) -> None:
        watch = self._watch(job)
        stalled = self.book.stalled(job)
        if stalled and not watch.stalled:
            watch.stalled = True
            if watch.resume_timer is not None:  # quiet again within the grace: the same stall, asked again
                watch.resume_timer.cancel()
                watch.resume_timer = None
            self.book.stalling(job, True)
            log.warning(
                "incident %s: every member is quiet (stalled); asking their sidecars for captures",
                self.book.incident_id(job),
            )
            self._send(job, watch, "stall")
        elif not stalled and watch.stalled and not self.book.failed(job):
            watch.stalled = False
            if watch.resume_timer is None:
                loop = asyncio.get_running_loop()
                watch.resume_timer = loop.call_later(self.resume_grace, self._resumed, job)

    def _resumed(self, job: JobKey) -> None:
        watch = self._watch(job)
        watch.resume_timer = None
        if watch.stalled or self.book.failed(job):
            return  # quiet again, or it failed after all: the stall was real
        if watch.round is not None and watch.round.trigger == "stall":
            self._end_round(job, watch, decide=False)
        if self.metrics is not None:
            self.metrics.false_alarms.inc()
        log.warning("incident %s: progress again after a stall (a false alarm)", self.book.incident_id(job))
        self._withdraw(
            job,
            watch,
            "the job made progress again after every member had gone quiet: the provisional hang verdict is "
            "withdrawn (a false alarm of stall detection)",
        )

    def _withdraw(self, job: JobKey, watch: _Watch, note: str) -> None:
        """The stall is over and nothing failed: its provisional verdict, if out, is withdrawn (`note` says
        why), and the next stall is a new one."""
        if watch.published:
            watch.published = False
            self.book.provisional(job, "resumed", note)
        self.book.stalling(job, False)

    def _failure(self, key: MemberKey) -> None:
        watch = self._watch(key.job)
        if watch.resume_timer is not None:  # it moved, then failed: the stall was real
            watch.resume_timer.cancel()
            watch.resume_timer = None
        if not self.first_timeout or watch.first_timeout or watch.failures_judged >= FIRST_FAILURES:
            return
        watch.failures_judged += 1
        member = self.book.member(key)
        if member is None:
            return
        finding = assess(member, self.rules)
        if finding.category == "hang" or finding.secondary == "timeout":
            watch.first_timeout = True
            log.warning(
                "incident %s: %s timed out first (%s); asking every member's sidecar for captures",
                self.book.incident_id(key.job),
                key.pod,
                finding.rule.id if finding.rule is not None else "",
            )
            self._send(key.job, watch, "first_timeout")

    # -- rounds --------------------------------------------------------------------------------

    def _send(self, job: JobKey, watch: _Watch, trigger: str) -> None:
        if watch.rounds >= self.max_rounds:
            log.info(
                "incident %s: %d capture rounds sent (the limit); no more", self.book.incident_id(job), watch.rounds
            )
            if trigger == "stall":
                self._decide(job, watch)
            return
        if watch.round is not None:
            self._end_round(job, watch, decide=False)
        watch.rounds += 1
        request_id = f"{self.book.incident_id(job)}/{trigger}/{watch.rounds}"
        request = pb.AggregatorMessage(capture_request=capture_request_to_pb(request_id, trigger, self.capture_timeout))
        asked: set[str] = set()
        for pod in self.book.pods(job):
            push = self._streams.get(MemberKey(job, pod))
            if push is not None:
                push(request)
                asked.add(pod)
        self.sent += len(asked)
        if self.metrics is not None:
            self.metrics.capture_requests.labels(trigger=trigger).inc(len(asked))
        log.info("incident %s: capture %s sent to %d member(s)", self.book.incident_id(job), request_id, len(asked))
        round_ = _Round(request_id, trigger, asked)
        watch.round = round_
        if not asked:
            self._end_round(job, watch, decide=trigger == "stall")
            return
        self.book.capturing(job, True)
        loop = asyncio.get_running_loop()
        round_.timer = loop.call_later(self.capture_wait, self._timed_out, job, request_id)

    def _answered(self, key: MemberKey, capture: pb.Capture) -> None:
        request_id = capture.request_id
        stacks = sorted({w.global_rank for w in capture.workers if w.stack and w.HasField("global_rank")})
        log.info(
            "incident %s: capture %s (%s) from %s: %d worker(s), stacks of rank(s) %s%s",
            self.book.incident_id(key.job),
            request_id or "-",
            capture.trigger,
            key.pod,
            len(capture.workers),
            stacks,
            f"; {capture.note}" if capture.note else "",
        )
        watch = self._watches.get(key.job)
        if watch is None or watch.round is None or watch.round.request_id != request_id:
            return  # the sidecar's own capture, or a late answer: kept on the member all the same
        watch.round.waiting.discard(key.pod)
        if not watch.round.waiting:
            self._end_round(key.job, watch, decide=watch.round.trigger == "stall")

    def _timed_out(self, job: JobKey, request_id: str) -> None:
        watch = self._watches.get(job)
        if watch is None or watch.round is None or watch.round.request_id != request_id:
            return
        log.info(
            "incident %s: %d member(s) did not answer capture %s within %.1f s: deciding without them",
            self.book.incident_id(job),
            len(watch.round.waiting),
            request_id,
            self.capture_wait,
        )
        watch.round.timer = None
        self._end_round(job, watch, decide=watch.round.trigger == "stall")

    def _end_round(self, job: JobKey, watch: _Watch, *, decide: bool) -> None:
        round_, watch.round = watch.round, None
        if round_ is not None and round_.timer is not None:
            round_.timer.cancel()
        self.book.capturing(job, False)
        if decide:
            self._decide(job, watch)

    def _decide(self, job: JobKey, watch: _Watch) -> None:
        if not watch.stalled:
            return  # moved again meanwhile
        if self.book.provisional(job, "stall"):
            watch.published = True
