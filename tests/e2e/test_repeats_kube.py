"""A failure that repeats stops the retries: attempts of one job on the Kubernetes emulator, pods failing in
the kubelet's order with real sidecar processes and the real aggregator (tests/support/kubelet_order.py).

A JobSet whose root fails with the same NCCL network error on attempts 0 and 1: attempt 0's root gets
`RetryableFailure`, attempt 1's `PermanentFailure` with reason `RepeatedFailure`, and the generated policy,
applied to the pods as they stood when their sidecars exited (tests/support/job_controllers.py, the
documented Job and JobSet controller semantics), fails the JobSet after the second attempt instead of
restarting it up to `maxRestarts`. With `--repeat-limit 0` the same run is restarted again (the contrast
each case asserts). Also: a different error on attempt 1 (retried), an aggregator restart between the
attempts (the history read back from the JobSet's annotation without `--state-dir`, from the state file
with it), an indexed Job whose pods are recreated (`g2`), a PyTorchJob whose containers restart in place
(`r1`, real sidecars across the restart: the verdict says it repeats), and a stream that invents
attempts (never counted).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from support.common import eventually, report
from support.job_controllers import JobModel, JobSetModel
from support.kube_emulator import EVENTS, JOBS, JOBSETS, PODS, PYTORCHJOBS, EmulatorHandle
from support.kube_objects import NS, indexed_job, indexed_pod, seed_jobset, seed_pytorchjob
from support.kubelet_order import (
    GLOO_PEER,
    GUARD,
    Kubelet,
    Sidecar,
    error_doc,
    kill_remaining,
    our_condition,
    start_sidecar,
    with_sidecar,
)
from support.repeated import NCCL_IB, NCCL_SOCKET, fail_attempt, restart_jobset

from podmortem.aggregator.config import AggregatorConfig, KubeSettings
from podmortem.aggregator.running import Aggregator
from podmortem.aggregator.state import FILE_NAME
from podmortem.core.model import ErrorRecord, Termination
from podmortem.k8s import policy
from podmortem.protocol import wire
from podmortem.protocol.v1 import collector_pb2 as pb

LIMIT = "podmortem.io/repeat-limit"
REPEATED = ("podmortem.io/PermanentFailure", "RepeatedFailure")
RETRYABLE = ("podmortem.io/RetryableFailure", "Network")


@contextlib.asynccontextmanager
async def aggregator(
    api: EmulatorHandle, tmp_path: Path, *, limit: int = 2, state_dir: str = "", publish: frozenset[str] | None = None
) -> AsyncIterator[Aggregator]:
    settings = KubeSettings(enabled=True, kubeconfig=str(api.kubeconfig(tmp_path / "kubeconfig", NS)), namespaces=(NS,))
    if publish is not None:
        settings = dataclasses.replace(settings, publish=publish)
    config = AggregatorConfig(
        listen="127.0.0.1:0", metrics_listen="", verdict_dir=str(tmp_path / "verdicts"), quorum_timeout=600,
        repeat_limit=limit, state_dir=state_dir,
    )  # fmt: skip
    agg = Aggregator(config, registry=CollectorRegistry(), kube_settings=settings)
    await agg.start()
    try:
        yield agg
    finally:
        await agg.stop(grace=2)


def condition_of(api: EmulatorHandle, pod: str) -> tuple[str, str] | None:
    c = our_condition(api.get(PODS, NS, pod))
    return None if c is None else (c["type"], c["reason"])


def verdict_file(tmp_path: Path, attempt: str, job: str = "llm") -> dict[str, Any] | None:
    path = tmp_path / "verdicts" / (f"{NS}_{job}_{attempt}.json" if attempt else f"{NS}_{job}.json")
    return json.loads(path.read_text()) if path.exists() else None


def decided(tmp_path: Path, attempt: str, job: str) -> bool:
    return bool((verdict_file(tmp_path, attempt, job) or {}).get("final"))


def stored_attempts(state: Path) -> int:
    with contextlib.closing(sqlite3.connect(state / FILE_NAME)) as db:
        return int(db.execute("SELECT count(*) FROM attempts").fetchone()[0])


def annotated_attempts(api: EmulatorHandle, resource: str, name: str) -> list[str]:
    obj = api.get(resource, NS, name) or {}
    doc = json.loads(((obj.get("metadata") or {}).get("annotations") or {}).get("podmortem.io/verdict", "{}"))
    return [a["attempt"] for a in doc.get("attemptHistory") or []]


def at_exit(api: EmulatorHandle, sidecars: list[Sidecar]) -> list[dict[str, Any]]:
    """Each pod as stored by the write that marked its sidecar's exit (phase Failed), in exit order."""
    history = {(rv, obj["metadata"]["name"]): obj for rv, res, _, obj in api.emulator.history if res.plural == "pods"}
    return [history[(s.exit_version, s.pod)] for s in sorted(sidecars, key=lambda s: s.exit_version)]


def jobset_acts(api: EmulatorHandle, jobset: JobSetModel, sidecars: list[Sidecar]) -> str:
    """The child Job (backoffLimit 0, the generated podFailurePolicy) and the JobSet act on the attempt's pods."""
    child = JobModel("llm-workers-0", policy.pod_failure_policy(), 0, "workers")
    pods = at_exit(api, sidecars)
    for step, pod in enumerate(pods, start=1):
        child.observe(pod)
        child.settle(step, pods_still_running=step < len(pods))
    return str(jobset.reconcile([child]))


async def two_attempts(
    kube_api: EmulatorHandle, tmp_path: Path, second: str, *, limit: int = 2, restart: str = "", own_limit: str = ""
) -> tuple[list[Sidecar], list[Sidecar], JobSetModel, Aggregator]:
    """A JobSet's attempts 0 and 1 (root pod index 1, then 2), the policy applied after each. `restart`:
    "memory" or "state" to restart the aggregator between them (without, or with, `--state-dir`)."""
    jobset, pods = seed_jobset(kube_api, "llm", [("workers", 1, 3)])
    if own_limit:
        jobset = kube_api.change(JOBSETS, NS, "llm", {"metadata": {"annotations": {LIMIT: own_limit}}})
    model = JobSetModel(policy.jobset_failure_policy(max_restarts=3))
    state = str(tmp_path / "state") if restart == "state" else ""
    publish = frozenset({"condition", "events", "pod-conditions"}) if restart == "state" else None
    async with aggregator(kube_api, tmp_path, limit=limit, state_dir=state, publish=publish) as first:
        one = await fail_attempt(kube_api, first, tmp_path, pods, 1, NCCL_IB.format(peer=12))
        await eventually(lambda: (verdict_file(tmp_path, "0") or {}).get("final"), "attempt 0's verdict", within=GUARD)
        if publish is None:
            await eventually(lambda: annotated_attempts(kube_api, JOBSETS, "llm") == ["0"], "the annotation")
        if state:
            await eventually(partial(stored_attempts, Path(state)), "the state file's attempt")
        assert jobset_acts(kube_api, model, one) == "Restarted"
        if not restart:
            pods = restart_jobset(kube_api, jobset, pods, 1)
            two = await fail_attempt(kube_api, first, tmp_path, pods, 2, second)
            await eventually(lambda: (verdict_file(tmp_path, "1") or {}).get("final"), "attempt 1's verdict")
            jobset_acts(kube_api, model, two)
            return one, two, model, first
    pods = restart_jobset(kube_api, jobset, pods, 1)
    async with aggregator(kube_api, tmp_path, limit=limit, state_dir=state, publish=publish) as again:
        two = await fail_attempt(kube_api, again, tmp_path, pods, 2, second)
        await eventually(lambda: (verdict_file(tmp_path, "1") or {}).get("final"), "attempt 1's verdict")
    jobset_acts(kube_api, model, two)
    return one, two, model, again


@pytest.mark.parametrize("limit", [2, 0], ids=["repeat-limit-2", "off"])
async def test_a_jobset_failing_twice_the_same_way_fails_after_the_second_attempt(
    kube_api: EmulatorHandle, tmp_path: Path, limit: int
) -> None:
    one, two, jobset, agg = await two_attempts(kube_api, tmp_path, NCCL_IB.format(peer=13), limit=limit)
    assert condition_of(kube_api, one[1].pod) is None  # removed with its attempt; the model read it at its exit
    assert our_condition(at_exit(kube_api, one)[0]) is not None
    root = our_condition(next(p for p in at_exit(kube_api, two) if p["metadata"]["name"] == two[2].pod))
    assert root is not None
    second = verdict_file(tmp_path, "1")
    assert second is not None
    assert [a["attempt"] for a in second["attempt_history"]] == ["0"]
    assert second["repeats"] == 2 and second["signature"] == second["attempt_history"][0]["signature"]
    repeated = agg.metrics.repeated_failures.labels(category="network")._value.get()
    events = [e for e in kube_api.list(EVENTS, NS) if e["reason"] == "PodmortemRepeatedFailure"]
    if limit == 0:  # off: retried again, as before
        assert (root["type"], root["reason"]) == RETRYABLE
        assert (jobset.outcome, jobset.restarts) == ("Restarted", 2)
        assert (repeated, events) == (0, [])
        return
    assert (root["type"], root["reason"]) == REPEATED
    assert "attempt 0, attempt 1" in root["message"] and second["signature"] in root["message"]
    assert (jobset.outcome, jobset.matched_rule, jobset.restarts) == ("Failed", "PodmortemPermanentFailure", 1)
    assert repeated == 1
    [event] = events
    assert (event["involvedObject"]["kind"], event["involvedObject"]["name"], event["type"]) == (
        "JobSet", "llm", "Warning"
    )  # fmt: skip
    # `kubectl podmortem explain` through the real kubectl binary (client-go sends no token over plain http).
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "kubectl-podmortem").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m podmortem.kubectl_plugin "$@"\n')
    (bindir / "kubectl-podmortem").chmod(0o755)
    kube_api.emulator.token = None
    env = dict(
        os.environ, PATH=f"{bindir}:{os.environ['PATH']}", KUBECONFIG=str(kube_api.kubeconfig(tmp_path / "kc", NS))
    )
    out = subprocess.run(["kubectl", "podmortem", "explain", "jobset/llm", "-n", NS], capture_output=True, text=True,
                         timeout=120, env=env)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert f"Repeats:        same failure on 2 attempts in a row (signature {second['signature']})" in out.stdout
    assert f"  1         network     {second['signature']}" in out.stdout
    assert f"  0         network     {second['signature']}" in out.stdout


async def test_a_different_error_on_the_second_attempt_is_retried(kube_api: EmulatorHandle, tmp_path: Path) -> None:
    _, two, jobset, agg = await two_attempts(kube_api, tmp_path, NCCL_SOCKET)
    root = our_condition(next(p for p in at_exit(kube_api, two) if p["metadata"]["name"] == two[2].pod))
    assert root is not None and (root["type"], root["reason"]) == RETRYABLE
    assert (jobset.outcome, jobset.restarts) == ("Restarted", 2)
    assert agg.metrics.repeated_failures.labels(category="network")._value.get() == 0
    assert (verdict_file(tmp_path, "1") or {}).get("repeats") == 1


@pytest.mark.parametrize(("flag", "own", "expected"), [(2, "0", RETRYABLE), (0, "2", REPEATED)])
async def test_the_jobs_annotation_overrides_the_flag(
    kube_api: EmulatorHandle, tmp_path: Path, flag: int, own: str, expected: tuple[str, str]
) -> None:
    _, two, _, _ = await two_attempts(kube_api, tmp_path, NCCL_IB.format(peer=13), limit=flag, own_limit=own)
    root = our_condition(next(p for p in at_exit(kube_api, two) if p["metadata"]["name"] == two[2].pod))
    assert root is not None and (root["type"], root["reason"]) == expected


@pytest.mark.parametrize("restart", ["memory", "state"], ids=["without-state-dir", "with-state-dir"])
@pytest.mark.parametrize("limit", [2, 0], ids=["repeat-limit-2", "off"])
async def test_an_aggregator_restart_between_attempts_forgets_nothing(
    kube_api: EmulatorHandle, tmp_path: Path, restart: str, limit: int
) -> None:
    """Without `--state-dir` the history comes back from the JobSet's verdict annotation; with it, from the
    state file (the annotations are not published here, so only the file can carry it)."""
    _, two, jobset, _ = await two_attempts(kube_api, tmp_path, NCCL_IB.format(peer=13), limit=limit, restart=restart)
    root = our_condition(next(p for p in at_exit(kube_api, two) if p["metadata"]["name"] == two[2].pod))
    assert root is not None
    if limit == 0:
        assert (root["type"], root["reason"], jobset.outcome) == (*RETRYABLE, "Restarted")
        return
    assert (root["type"], root["reason"]) == REPEATED
    assert (jobset.outcome, jobset.restarts) == ("Failed", 1)


@pytest.mark.parametrize("limit", [2, 0], ids=["repeat-limit-2", "off"])
async def test_an_indexed_job_whose_pods_are_recreated_fails_on_the_second_run(
    kube_api: EmulatorHandle, tmp_path: Path, limit: int
) -> None:
    """A batch Job's failed pods are replaced under new names with no attempt to tell them apart: the book
    keeps the new run as generation `g2`, and the job's own history counts it."""
    job = kube_api.put(JOBS, indexed_job("train", 3))
    model = JobModel("train", policy.pod_failure_policy(), backoff_limit=3)
    async with aggregator(kube_api, tmp_path, limit=limit) as agg:
        pods = [kube_api.put(PODS, indexed_pod(job, i)) for i in range(3)]
        one = await fail_attempt(kube_api, agg, tmp_path, pods, 0, NCCL_IB.format(peer=12))
        await eventually(lambda: (verdict_file(tmp_path, "", "train") or {}).get("final"), "the first verdict")
        for pod in at_exit(kube_api, one):
            model.observe(pod)
        assert (model.failed, model.failure_target) == (1, None)  # one count, victims ignored
        recreated = []
        for i in range(3):
            pod = indexed_pod(job, i)
            pod["metadata"]["name"] = f"train-{i}-fghij"
            recreated.append(kube_api.put(PODS, pod))
        two = await fail_attempt(kube_api, agg, tmp_path, recreated, 0, NCCL_IB.format(peer=13))
        await eventually(lambda: (verdict_file(tmp_path, "g2", "train") or {}).get("final"), "the second verdict")
    for pod in at_exit(kube_api, two):
        model.observe(pod)
    assert [a["attempt"] for a in (verdict_file(tmp_path, "g2", "train") or {})["attempt_history"]] == [""]
    if limit == 0:
        assert (model.failed, model.failure_target) == (2, None)
        return
    assert model.failure_target is not None and model.failure_target[0] == "PodFailurePolicy"
    assert f"{two[0].pod} has condition podmortem.io/PermanentFailure" in model.failure_target[1]
    assert model.failed == 1


async def test_a_pytorchjob_restarted_in_place_says_the_failure_repeats(
    kube_api: EmulatorHandle, tmp_path: Path
) -> None:
    """Containers restarted in place (`r1`, restartPolicy OnFailure), with real sidecars that stay up across
    the restart (they tell each run apart by the container's restart count): the second run's verdict names
    the first run in its history and says it repeats. Each run's end is not the pod's: no sidecar holds, so
    no condition is written for either run until the pod itself stops (then the last run's root is held,
    and its RetryableFailure is escalated: the same failure as the run before)."""
    job, names = seed_pytorchjob(kube_api, workers=3)
    uid, name = job["metadata"]["uid"], job["metadata"]["name"]
    for i, pod in enumerate(names):
        with_sidecar(kube_api, kube_api.get(PODS, NS, pod) or {}, i)

    def run(restarts: int, ended: bool) -> dict[str, Any]:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        state: dict[str, Any] = {"running": {"startedAt": now}}
        if ended:
            state = {"terminated": {"exitCode": 1, "reason": "Error", "startedAt": now, "finishedAt": now}}
        status: dict[str, Any] = {"name": "pytorch", "restartCount": restarts, "state": state}
        if restarts:
            status["lastState"] = {"terminated": {"exitCode": 1, "reason": "Error"}}
        return {"status": {"phase": "Running", "containerStatuses": [status]}}

    async with aggregator(kube_api, tmp_path) as agg:
        target = f"127.0.0.1:{agg.port}"
        sidecars = [await start_sidecar(kube_api, tmp_path, kube_api.get(PODS, NS, n) or {}, target) for n in names]
        try:
            await eventually(lambda: agg.metrics.connected._value.get() == 3, "every sidecar", within=GUARD)
            for attempt, restarts in (("", 0), ("r1", 1)):
                if restarts:  # the kubelet restarts each container in place
                    for pod in names:
                        kube_api.change(PODS, NS, pod, run(restarts, ended=False))
                    await asyncio.sleep(1.0)
                sidecars[1].error_file.write_text(error_doc(NCCL_IB.format(peer=12 + restarts)))
                kube_api.change(PODS, NS, names[1], run(restarts, ended=True))
                await asyncio.sleep(1.0)
                for i in (0, 2):
                    sidecars[i].error_file.write_text(error_doc(GLOO_PEER.format(ip="10.1.0.11")))
                    kube_api.change(PODS, NS, names[i], run(restarts, ended=True))
                await eventually(partial(decided, tmp_path, attempt, name), f"attempt {attempt!r}", within=GUARD)
            history = agg.book.history.get(uid)
            kubelet = Kubelet(kube_api)
            for sidecar in sidecars:  # the operator gives up on the job: the pods stop
                kubelet.tasks.append(asyncio.create_task(kubelet.exited(sidecar, 1)))
            await kubelet.done()
        finally:
            await kill_remaining(sidecars)
    second = verdict_file(tmp_path, "r1", name)
    assert second is not None and second["verdict"]["category"] == "network"
    assert [a["attempt"] for a in second["attempt_history"]] == [""] and second["repeats"] == 2
    assert [a.attempt for a in history] == ["r1", ""]
    assert annotated_attempts(kube_api, PYTORCHJOBS, name) == ["r1", ""]
    assert condition_of(kube_api, names[1]) == REPEATED


async def test_a_stream_inventing_attempts_is_never_counted(kube_api: EmulatorHandle, tmp_path: Path) -> None:
    """A stream (no authentication here) that claims attempts of the JobSet, each failing with the error its
    real attempt will fail with: its incidents are decided, but their roots are not pods the pod watch placed
    there, so they never enter the job's history, and the real first attempt is retried."""
    jobset, pods = seed_jobset(kube_api, "llm", [("workers", 1, 3)])
    uid = jobset["metadata"]["uid"]
    async with aggregator(kube_api, tmp_path) as agg:
        for n in range(3):
            await forged_attempt(agg.port, str(n + 5), uid, pods[1]["metadata"]["name"])
        await eventually(lambda: (verdict_file(tmp_path, "7") or {}).get("verdict"), "the forged verdicts")
        assert agg.book.history.get(uid) == ()
        one = await fail_attempt(kube_api, agg, tmp_path, pods, 1, NCCL_IB.format(peer=12))
        await eventually(lambda: (verdict_file(tmp_path, "0") or {}).get("final"), "attempt 0's verdict")
        assert [a.attempt for a in agg.book.history.get(uid)] == ["0"]
    root = our_condition(next(p for p in at_exit(kube_api, one) if p["metadata"]["name"] == one[1].pod))
    assert root is not None and (root["type"], root["reason"]) == RETRYABLE


async def forged_attempt(port: int, attempt: str, uid: str, pod: str) -> None:
    """A stream that registers a real pod of the job under an attempt of its own and reports it failed."""
    reg = pb.Register(
        job=pb.JobRef(namespace=NS, name="llm", kind="JobSet", uid=uid), pod=pod, attempt=attempt,
        world_size_hint=1, session_id=f"forged-{attempt}",
    )  # fmt: skip
    at = int(time.time())
    rec = ErrorRecord(message=NCCL_IB.format(peer=12), exception_type="RuntimeError", timestamp=at)
    term = Termination(exit_code=1, reason="Error", finished_at=float(at))
    events = [
        wire.make_event(wire.error_to_pb(rec), wire.error_event_id(pod, rec) + attempt),
        wire.make_event(wire.termination_to_pb(term), f"{pod}/termination/{attempt}"),
    ]
    await report(port, reg, events)
