"""Each top-level job's history of attempts: what `core.repeats` compares the current attempt with.

Keyed by the job's uid (a JobSet, Job, PyTorchJob or TrainJob: the outermost workload the pod watch
resolves), never by its name: a job deleted and created again under the same name starts a new history.
One entry per attempt (`core.repeats.Attempt`), newest first, at most `per_job` (MAX_ATTEMPTS) entries a
job and `max_jobs` jobs in all (the least recently used job is forgotten first).

Where the entries come from, and why they survive an aggregator restart:

* the incident book records each published verdict whose root the pod watch placed in that attempt
  (`IncidentBook._emit`): an attempt a stream invents is never recorded;
* with `--state-dir`, the state file keeps them (`StateStore`, table `attempts`) and a restart reads them
  back (`StateStore.replay`);
* without, the job's own verdict annotation carries them (`attemptHistory`, written by
  `kube.publish.AnnotationPublisher`), and the hold desk reads it back at the next attempt
  (`kube.repeats.JobHistoryReader`) before it decides whether a failure repeats.

In memory a job costs its uid and up to `per_job` small entries (`bench/hold_cost.py --repeats` prints
the bytes).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from podmortem.core.repeats import MAX_ATTEMPTS, Attempt, recorded

MAX_JOBS = 10_000


class AttemptHistory:
    def __init__(self, max_jobs: int = MAX_JOBS, per_job: int = MAX_ATTEMPTS) -> None:
        self.max_jobs, self.per_job = max_jobs, per_job
        self._jobs: OrderedDict[str, tuple[Attempt, ...]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._jobs)

    def get(self, uid: str) -> tuple[Attempt, ...]:
        """The job's attempts, newest first (empty when none is known)."""
        return self._jobs.get(uid, ())

    def record(self, uid: str, entry: Attempt) -> tuple[Attempt, ...]:
        """Put `entry` in its attempt's place (a revision replaces it); the job's history as now kept."""
        return self.merge(uid, (entry,))

    def merge(self, uid: str, entries: Iterable[Attempt]) -> tuple[Attempt, ...]:
        """Add entries known from elsewhere (the state file, the job's annotation): for an attempt known
        twice, the later decision is kept."""
        if not uid:
            return ()
        kept = self._jobs.pop(uid, ())
        for entry in entries:
            same = next((a for a in kept if a.attempt == entry.attempt), None)
            if same is None or entry.decided_at >= same.decided_at:
                kept = recorded(kept, entry, self.per_job)
        self._jobs[uid] = kept
        while len(self._jobs) > self.max_jobs:
            self._jobs.popitem(last=False)
        return kept
