"""Load an incident bundle — what a person copies out of a cluster by hand — into an `Incident`.

A bundle is a directory::

    incident.json                   {"job": {"namespace", "name", "kind", "uid"}, "world_size": N}
    pods/<pod>/pod.json             `kubectl get pod <pod> -o json`
    pods/<pod>/error.json           the TORCHELASTIC_ERROR_FILE (optional)
    pods/<pod>/log.txt              `kubectl logs <pod> --tail=300` (optional)
    pods/<pod>/captures.json        stacks and Flight Recorder summaries of its workers (optional; a list of
                                    {"path", "global_rank", "local_rank", "stack", "flight_recorder", "note",
                                    "trigger", "captured_at"}: docs/engine.md, "Captured evidence")

Every member is built through the same fold the aggregator uses for live events — pod JSON →
`podstatus.snapshot` → `wire.member_from_snapshot` → `wire.apply_event` over the snapshot's events,
the error file and the log tail — so `podmortem analyze` and the aggregator cannot judge the same facts
differently. A bundle has no sidecar observation times, so the fold's observation stamps are cleared:
only the times the files themselves carry are evidence.

Node ranks of Kubeflow jobs are inferred once the whole job is read (`podstatus.assign_ranks`).
Anything else in the directory (notably `truth.json` of a labelled corpus) is never read.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import stat
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from podmortem.core import errorfile, podstatus
from podmortem.core.finite import finite_or_none
from podmortem.core.flightrecorder import FlightRecorderError, FRSummary
from podmortem.core.model import MAX_WORLD_SIZE, Incident, JobRef, Member, WorkerCapture, evolve
from podmortem.core.podstatus import assign_ranks

__all__ = ["BundleError", "assign_ranks", "load_bundle", "load_member"]
from podmortem.protocol import wire

MAX_LOG_BYTES = 256 << 10  # the tail of a larger log is kept
# From this many pods on, members are read by one process per core: a 10,000-pod bundle is 30,000 files
# and the fold of each pod (the aggregator's own code) is CPU work; below it, starting processes costs more.
PARALLEL_FROM_PODS = 2000
MAX_JSON_BYTES = 8 << 20


class BundleError(ValueError):
    """A bundle that cannot be read; the message is one line naming the path and the problem."""


def _read_regular(path: str | Path, what: str, limit: int, tail: bool = False) -> bytes | None:
    """At most `limit` bytes of a regular file (its last ones with `tail`); None when it does not exist.

    A bundle is user input: a FIFO would block us for ever and a link to /dev/zero would read until
    memory runs out, so only regular files are read (opened O_NONBLOCK, checked with fstat). Read with
    os.read on the descriptor (no file object): a 10,000-pod bundle is 30,000 small files.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise BundleError(f"{path}: {what} is a directory") from None
    except OSError as exc:
        raise BundleError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise BundleError(f"{path}: {what} is a directory")
        if not stat.S_ISREG(st.st_mode):
            raise BundleError(f"{path}: {what} is not a regular file (a FIFO, device or socket)")
        if st.st_size > limit and not tail:
            raise BundleError(f"{path}: {what} is {st.st_size} bytes, more than the {limit}-byte limit")
        try:
            if st.st_size > limit:
                os.lseek(fd, st.st_size - limit, os.SEEK_SET)
            chunks = []
            left = limit
            while left > 0:
                chunk = os.read(fd, min(left, max(st.st_size, 1 << 16)))
                if not chunk:
                    break
                chunks.append(chunk)
                left -= len(chunk)
            return b"".join(chunks)
        except OSError as exc:
            raise BundleError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def _finite(text: str) -> float:
    value = finite_or_none(float(text))
    if value is None:
        raise ValueError(f"number {text[:20]} is out of range")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _read_json(path: str | Path, what: str) -> Any:
    data = _read_regular(path, what, MAX_JSON_BYTES)
    if data is None:
        raise BundleError(f"{path}: {what} not found")
    try:
        return json.loads(data.decode("utf-8", errors="replace"), parse_float=_finite, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise BundleError(f"{path}: {what} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise BundleError(f"{path}: {what} is nested too deeply to be a Kubernetes object") from None
    except ValueError as exc:  # from the number hooks
        raise BundleError(f"{path}: {what}: {exc}") from None


def _read_log(path: str) -> tuple[bytes, bool] | None:
    """The log's last MAX_LOG_BYTES as bytes (the fold decodes them: `wire.tail_text`), and whether cut."""
    data = _read_regular(path, "log", MAX_LOG_BYTES + 1, tail=True)
    if data is None:
        return None
    truncated = len(data) > MAX_LOG_BYTES
    data = data[-MAX_LOG_BYTES:]
    if truncated and b"\n" in data:
        data = data.split(b"\n", 1)[1]  # drop the partial first line
    return data, truncated


def _job_ref(doc: dict[str, Any], path: Path) -> JobRef:
    job = doc.get("job")
    if not isinstance(job, dict):
        raise BundleError(f"{path}: 'job' must be an object with namespace and name")
    name = job.get("name")
    if not isinstance(name, str) or not name:
        raise BundleError(f"{path}: 'job.name' is missing")
    return JobRef(str(job.get("namespace") or ""), name, str(job.get("kind") or ""), str(job.get("uid") or ""))


def load_member(pod_dir: str | Path) -> Member:
    """One member from pods/<pod>/ through the shared fold; BundleError when its files are not usable."""
    try:
        return _load_member(pod_dir)
    except (TypeError, ValueError, AttributeError, KeyError, OverflowError) as exc:
        if isinstance(exc, BundleError):
            raise
        # Wrong types or impossible values in a hand-copied pod.json: one line, not a traceback.
        raise BundleError(f"{pod_dir}: not a usable pod ({type(exc).__name__}: {str(exc)[:200]})") from None


def _load_member(pod_dir: str | Path) -> Member:
    pod_dir = os.fspath(pod_dir)
    pod_json = os.path.join(pod_dir, "pod.json")
    pod = _read_json(pod_json, "pod.json")
    if not isinstance(pod, dict) or not isinstance(pod.get("metadata"), dict):
        raise BundleError(f"{pod_json}: not a Pod object (no metadata)")
    snap = podstatus.snapshot(pod)
    if not snap.name:
        snap = dataclasses.replace(snap, name=os.path.basename(pod_dir))
    rec = errorfile.read_error_file(os.path.join(pod_dir, "error.json"), within=pod_dir)
    member = wire.member_from_copies(snap, rec, _read_log(os.path.join(pod_dir, "log.txt")))
    captures = _read_captures(os.path.join(pod_dir, "captures.json"))
    return evolve(member, captures=captures) if captures else member


MAX_CAPTURES = 256  # per pod: a pod runs a handful of workers, each captured a few times
MAX_STACK_CHARS = 32 * 1024  # a stack's tail is kept, as the sidecar keeps it
_CAPTURE_PATHS = frozenset({"control_plane", "py_spy", "fr_file", "sigterm_stack"})


def _read_captures(path: str) -> tuple[WorkerCapture, ...]:
    """pods/<pod>/captures.json, validated: BundleError naming the entry that is not a capture."""
    if not os.path.lexists(path):
        return ()
    doc = _read_json(path, "captures.json")
    if not isinstance(doc, list):
        raise BundleError(f"{path}: captures.json must be a list of captures")
    if len(doc) > MAX_CAPTURES:
        raise BundleError(f"{path}: {len(doc)} captures, more than the {MAX_CAPTURES} a pod may have")
    return tuple(_capture(item, f"{path}: capture {i}") for i, item in enumerate(doc))


def _capture(item: Any, where: str) -> WorkerCapture:
    if not isinstance(item, dict):
        raise BundleError(f"{where} is not an object")
    kind = item.get("path")
    if kind not in _CAPTURE_PATHS:
        raise BundleError(f"{where}: path {kind!r} is not one of {', '.join(sorted(_CAPTURE_PATHS))}")

    def rank(key: str) -> int | None:
        v = item.get(key)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 1 << 31:
            raise BundleError(f"{where}: {key} must be a rank (an integer >= 0)")
        return v

    def text(key: str) -> str:
        v = item.get(key, "")
        if not isinstance(v, str):
            raise BundleError(f"{where}: {key} must be a string")
        return v

    summary = None
    fr = item.get("flight_recorder")
    if fr not in (None, ""):
        try:
            summary = FRSummary.from_json(fr) if isinstance(fr, str) else FRSummary.from_dict(fr)
        except FlightRecorderError as exc:
            raise BundleError(f"{where}: flight_recorder: {exc}") from None
    at = item.get("captured_at")
    if at is not None and (isinstance(at, bool) or not isinstance(at, (int, float))):
        raise BundleError(f"{where}: captured_at must be a number (seconds since the epoch)")
    return WorkerCapture(
        path=kind,
        local_rank=rank("local_rank"),
        global_rank=rank("global_rank"),
        stack=text("stack")[-MAX_STACK_CHARS:],
        flight_recorder=summary,
        note=text("note")[:1000],
        trigger=text("trigger")[:32],
        captured_at=float(at) if at is not None else None,
    )


def _load_chunk(pod_dirs: Sequence[str]) -> list[Member]:
    return [load_member(d) for d in pod_dirs]


def _load_members(pod_dirs: Sequence[str], workers: int | None = None) -> list[Member]:
    """Members in the order of `pod_dirs`; in parallel processes for a large bundle (the first BundleError
    of any of them is raised, as it would be read in order)."""
    workers = workers if workers is not None else min(os.cpu_count() or 1, 8)
    if workers < 2 or len(pod_dirs) < PARALLEL_FROM_PODS or "fork" not in multiprocessing.get_all_start_methods():
        return _load_chunk(pod_dirs)
    # This process reads the first share itself while workers - 1 forked ones read the rest: it would
    # otherwise only wait, and the members it reads need no pickling back (a tenth of a member's cost).
    own = len(pod_dirs) // workers
    rest = pod_dirs[own:]
    size = -(-len(rest) // ((workers - 1) * 4))  # a few chunks per worker: an even finish
    chunks = [rest[i : i + size] for i in range(0, len(rest), size)]
    # fork: the workers start with the modules already imported (spawn would import them again).
    with ProcessPoolExecutor(workers - 1, mp_context=multiprocessing.get_context("fork")) as pool:
        results = pool.map(_load_chunk, chunks)
        try:
            members = _load_chunk(pod_dirs[:own])
        except BundleError:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        members.extend(m for chunk in results for m in chunk)
        return members


def load_bundle(path: str | Path) -> Incident:
    """Read a bundle directory into an Incident; raises BundleError (one line) when it is not one."""
    root = Path(path)
    try:
        is_dir = stat.S_ISDIR(root.stat().st_mode)
    except FileNotFoundError:
        raise BundleError(f"{root}: no such directory") from None
    except OSError as exc:  # a symbolic link loop, a name too long, no permission
        raise BundleError(f"{root}: cannot be read: {exc.strerror or exc}") from None
    if not is_dir:
        raise BundleError(f"{root}: not a directory (expected an incident bundle)")
    meta_path = root / "incident.json"
    meta = _read_json(meta_path, "incident.json")
    if not isinstance(meta, dict):
        raise BundleError(f"{meta_path}: must be a JSON object with 'job' and 'world_size'")
    job = _job_ref(meta, meta_path)
    world = meta.get("world_size")
    if world is not None and (isinstance(world, bool) or not isinstance(world, int) or world < 1):
        raise BundleError(f"{meta_path}: 'world_size' must be a positive integer, got {world!r}")
    if world is not None and world > MAX_WORLD_SIZE:
        raise BundleError(f"{meta_path}: 'world_size' {world} is over {MAX_WORLD_SIZE}, the most pods podmortem takes")
    pods_dir = root / "pods"
    if not pods_dir.is_dir():
        raise BundleError(f"{root}: no pods/ directory")
    with os.scandir(pods_dir) as entries:
        pod_dirs = sorted(e.path for e in entries if e.is_dir())
    if not pod_dirs:
        raise BundleError(f"{pods_dir}: no pod directories")
    members = assign_ranks(_load_members(pod_dirs))
    return Incident(job=job, world_size=world or len(members), members=members, incident_id=root.name)
