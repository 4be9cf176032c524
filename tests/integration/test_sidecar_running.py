"""The sidecar's root task and process: one stop path, a last look, a bounded flush, exit codes.

Runs `serve` in-process and `python -m podmortem.sidecar.running` as a real process, both against the
test servicer of test_stream.py on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from support.common import HANG_GUARD, eventually
from support.fake_collector import FakeCollector, serving

from podmortem.k8s.backoff import Backoff
from podmortem.protocol.v1 import collector_pb2 as pb
from podmortem.sidecar import config, running
from podmortem.sidecar.config import Settings
from podmortem.sidecar.outbox import Outbox

ERROR = {"message": {"message": "ValueError: bad label", "extraInfo": {"py_callstack": "tb", "timestamp": "17"}}}
POD = {
    "metadata": {"name": "job-worker-0", "namespace": "ns", "uid": "u0"},
    "status": {
        "phase": "Failed",
        "containerStatuses": [{"name": "pytorch", "restartCount": 0, "state": {"terminated": {"exitCode": 1}}}],
    },
}
FAST = Backoff(initial=0.01, maximum=0.05)
SETTINGS = Settings(pod_name="p", namespace="ns", error_file=Path("e"), aggregator="127.0.0.1:1")


# What the sidecar logs once SIGTERM came before the pod's end: it waits for that end (a positive signal).
WATCHING_FOR_THE_END = "stopping before the pod's end is known: watching the pod for it"


def settings_for(tmp_path: Path, target: str, **extra: str) -> Settings:
    env = {
        "POD_NAME": "job-worker-0",
        "POD_NAMESPACE": "ns",
        "POD_UID": "u0",
        "TORCHELASTIC_ERROR_FILE": str(tmp_path / "err" / "error.json"),
        "PODMORTEM_AGGREGATOR": target,
        "PODMORTEM_POD_STATUS_FILE": str(tmp_path / "pod.json"),
        "PODMORTEM_SETTLE_SECONDS": "3600",  # only the last look reports an unparsable file
        **extra,
    }
    return config.from_env_and_args(env)


@contextlib.asynccontextmanager
async def serve_task(settings: Settings, outbox: Outbox) -> AsyncIterator[tuple[asyncio.Event, asyncio.Task[int]]]:
    stop = asyncio.Event()
    task = asyncio.create_task(
        running.serve(settings, stop=stop, outbox=outbox, backoff=FAST, install_signal_handlers=False)
    )
    try:
        yield stop, task
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def test_events_flow_and_stop_flushes_the_last_look(tmp_path: Path) -> None:
    outbox = Outbox()
    async with serving(FakeCollector()) as served:
        settings = settings_for(tmp_path, served.target)
        async with serve_task(settings, outbox) as (stop, task):
            fake = served.collector
            settings.error_file.parent.mkdir()
            settings.error_file.write_text(json.dumps(ERROR))
            await eventually(lambda: len(fake.events) == 1)
            assert fake.events[0].error_file.message == "ValueError: bad label"
            # Just before the stop: the agent's file is rewritten with garbage (never settles in time),
            # and the pod status shows the termination.
            settings.error_file.write_bytes(b"{\x00 half")
            assert settings.pod_status_file is not None
            settings.pod_status_file.write_text(json.dumps(POD))
            stop.set()
            assert await asyncio.wait_for(task, HANG_GUARD) == 0
        kinds = [e.WhichOneof("payload") for e in fake.events]
        assert sorted(kinds) == ["error_file", "error_file", "termination"]
        assert any(e.error_file.parse_error for e in fake.events)
        assert len(outbox) == 0  # everything acknowledged before exit


async def test_flush_waits_for_an_aggregator_that_comes_back(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="podmortem.sidecar")
    outbox = Outbox()
    async with serving(FakeCollector(ack=False)) as served:
        settings = settings_for(tmp_path, served.target, PODMORTEM_FLUSH_TIMEOUT="60")
        async with serve_task(settings, outbox) as (stop, task):
            settings.error_file.parent.mkdir()
            settings.error_file.write_text(json.dumps(ERROR))
            await eventually(lambda: len(served.collector.events) == 1)
            stop.set()
            await eventually(lambda: "flushing 1 unacknowledged event(s)" in caplog.text, "the flush waiting")
            assert not task.done() and len(outbox) == 1  # flushing: waiting for the ack
            await served.stop()
            await served.start(FakeCollector())  # the aggregator restarts and acks the resent event
            assert await asyncio.wait_for(task, HANG_GUARD) == 0
        assert len(outbox) == 0


async def test_flush_gives_up_after_its_timeout(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    outbox = Outbox()
    async with serving(FakeCollector(ack=False)) as served:
        settings = settings_for(tmp_path, served.target, PODMORTEM_FLUSH_TIMEOUT="0.2")
        async with serve_task(settings, outbox) as (stop, task):
            settings.error_file.parent.mkdir()
            settings.error_file.write_text(json.dumps(ERROR))
            await eventually(lambda: len(served.collector.events) == 1)
            stop.set()
            assert await asyncio.wait_for(task, HANG_GUARD) == 0
        assert len(outbox) == 1
        assert "never acknowledged" in caplog.text and outbox.pending()[0].id in caplog.text


async def test_rejected_registration_is_exit_code_2(tmp_path: Path) -> None:
    async with serving(FakeCollector(reject="unknown job")) as served:
        settings = settings_for(tmp_path, served.target)
        async with serve_task(settings, Outbox()) as (_, task):
            assert await asyncio.wait_for(task, HANG_GUARD) == running.EXIT_CONFIG


def test_main_with_missing_settings_is_exit_code_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("POD_NAME", "POD_NAMESPACE", "TORCHELASTIC_ERROR_FILE", "PODMORTEM_AGGREGATOR"):
        monkeypatch.delenv(name, raising=False)
    assert running.main(["--pod-name", "p"]) == 2
    err = capsys.readouterr().err
    assert "POD_NAMESPACE (or --namespace) is required" in err
    assert "POD_NAME" not in err.replace("POD_NAMESPACE", "")


def test_build_parser_and_run_are_the_cli_contract() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    running.build_parser(sub.add_parser("sidecar"))
    ns = parser.parse_args(["sidecar", "--pod-name", "p", "--rank", "3"])
    assert (ns.command, ns.pod_name, ns.rank) == ("sidecar", "p", "3")


def test_register_carries_the_identity(tmp_path: Path) -> None:
    settings = settings_for(
        tmp_path,
        "h:1",
        PODMORTEM_JOB_NAME="job",
        PODMORTEM_JOB_KIND="PyTorchJob",
        PET_NODE_RANK="0",
        PET_NNODES="2",
        PODMORTEM_REPLICA_INDEX="0",
        PODMORTEM_ATTEMPT="1",
    )
    reg = running.build_register(settings, "sess")
    assert (reg.job.namespace, reg.job.name, reg.job.kind, reg.pod, reg.pod_uid) == (
        "ns",
        "job",
        "PyTorchJob",
        "job-worker-0",
        "u0",
    )
    assert (reg.rank, reg.world_size_hint, reg.replica_index, reg.attempt, reg.session_id) == (0, 2, 0, "1", "sess")
    assert not running.build_register(settings_for(tmp_path, "h:1"), "s").HasField("rank")


def process_env(error_file: Path, target: str) -> dict[str, str]:
    """The environment of a real sidecar process with no pod source."""
    return {
        **os.environ,
        "POD_NAME": "job-worker-1",
        "POD_NAMESPACE": "ns",
        "TORCHELASTIC_ERROR_FILE": str(error_file),
        "PODMORTEM_AGGREGATOR": target,
        "PODMORTEM_POD_SOURCE": "none",  # also when the tests themselves run in a pod
    }


async def test_real_process_sigterm_flushes_and_exits_0(tmp_path: Path) -> None:
    async with serving(FakeCollector()) as served:
        fake = served.collector
        error_file = tmp_path / "error.json"
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "podmortem.sidecar.running",
            "--flush-timeout",
            "5",
            env=process_env(error_file, served.target),
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            await eventually(lambda: len(fake.registers) == 1)
            assert fake.registers[0].pod == "job-worker-1"
            error_file.write_text(json.dumps(ERROR))
            await eventually(lambda: len(fake.events) == 1)
            proc.send_signal(signal.SIGTERM)
            async with asyncio.timeout(HANG_GUARD):
                _, stderr = await proc.communicate()
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        log = stderr.decode()
        assert proc.returncode == 0, log
        assert "received SIGTERM" in log
        assert "observed error file 'ValueError: bad label'" in log
        assert "sent error file" in log and "acked error file" in log


RUNNING_POD = {
    **POD,
    "status": {"phase": "Running", "containerStatuses": [{"name": "pytorch", "state": {"running": {}}}]},
}


@pytest.mark.parametrize("status_first", [True, False])
async def test_the_pods_end_is_sent_whichever_comes_first_sigterm_or_status(
    tmp_path: Path, status_first: bool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="podmortem.sidecar")
    # A native sidecar gets SIGTERM as soon as the training container exits; the pod status that shows the
    # exit reaches the API a moment later (0.3 s here). Either order, the termination goes out before exit.
    outbox = Outbox()
    async with serving(FakeCollector()) as served:
        settings = settings_for(tmp_path, served.target, PODMORTEM_FLUSH_TIMEOUT="30")
        assert settings.pod_status_file is not None
        settings.pod_status_file.write_text(json.dumps(RUNNING_POD))
        async with serve_task(settings, outbox) as (stop, task):
            settings.error_file.parent.mkdir()
            settings.error_file.write_text(json.dumps(ERROR))
            await eventually(lambda: len(served.collector.events) == 1)
            if status_first:
                settings.pod_status_file.write_text(json.dumps(POD))
                await eventually(lambda: len(served.collector.events) == 2)
                stop.set()
            else:
                stop.set()
                await eventually(lambda: WATCHING_FOR_THE_END in caplog.text, "watching for the pod's end")
                assert not task.done()  # still watching for the pod's end
                settings.pod_status_file.write_text(json.dumps(POD))
            assert await asyncio.wait_for(task, HANG_GUARD) == 0
        kinds = [e.WhichOneof("payload") for e in served.collector.events]
        assert kinds == ["error_file", "termination"]
        assert len(outbox) == 0


DELETED_RUNNING_POD = {
    **RUNNING_POD,
    "metadata": {"name": "job-worker-0", "namespace": "ns", "uid": "u0", "deletionTimestamp": "2026-11-21T15:06:10Z"},
}
DELETED_ENDED_POD = {**POD, "metadata": DELETED_RUNNING_POD["metadata"]}


async def test_a_deleted_pods_termination_is_still_awaited(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="podmortem.sidecar")
    # The controller deletes a victim pod: the sidecar sees the deletion while the training container
    # still runs; the kubelet SIGTERMs the container, then the sidecar, and only then does the status show
    # the container's end (exit 143). A deletion is not the end: the termination must still go out.
    outbox = Outbox()
    async with serving(FakeCollector()) as served:
        settings = settings_for(tmp_path, served.target, PODMORTEM_FLUSH_TIMEOUT="30")
        assert settings.pod_status_file is not None
        settings.pod_status_file.write_text(json.dumps(RUNNING_POD))
        async with serve_task(settings, outbox) as (stop, task):
            settings.pod_status_file.write_text(json.dumps(DELETED_RUNNING_POD))
            await eventually(lambda: len(served.collector.events) == 1)
            stop.set()
            await eventually(lambda: WATCHING_FOR_THE_END in caplog.text, "watching for the container's end")
            assert not task.done()  # still watching for the container's end
            settings.pod_status_file.write_text(json.dumps(DELETED_ENDED_POD))
            assert await asyncio.wait_for(task, HANG_GUARD) == 0
        kinds = [e.WhichOneof("payload") for e in served.collector.events]
        assert kinds[0] == "deletion" and "termination" in kinds, kinds


async def test_a_pod_end_that_never_shows_is_waited_for_at_most_the_flush_timeout(tmp_path: Path) -> None:
    outbox = Outbox()
    async with serving(FakeCollector()) as served:
        settings = settings_for(tmp_path, served.target, PODMORTEM_FLUSH_TIMEOUT="0.5")
        assert settings.pod_status_file is not None
        settings.pod_status_file.write_text(json.dumps(RUNNING_POD))
        async with serve_task(settings, outbox) as (stop, task):
            stop.set()
            assert await asyncio.wait_for(task, HANG_GUARD) == 0
        assert [e.WhichOneof("payload") for e in served.collector.events] == []


async def test_without_a_job_name_a_jobset_pod_registers_under_its_jobset(tmp_path: Path) -> None:
    # The aggregator's pod watch files a JobSet pod under the JobSet and its restart attempt; a sidecar
    # told no job name must derive the same identity from the pod itself, not its child batch Job.
    pod = {
        "metadata": {
            "name": "llm-workers-1-0",
            "namespace": "ns",
            "uid": "u0",
            "labels": {
                "jobset.sigs.k8s.io/jobset-name": "llm",
                "jobset.sigs.k8s.io/restart-attempt": "2",
                "batch.kubernetes.io/job-name": "llm-workers-1",
                "batch.kubernetes.io/job-completion-index": "0",
            },
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "llm-workers-1", "controller": True}],
        },
        "status": {"phase": "Running"},
    }
    async with serving(FakeCollector()) as served:
        settings = settings_for(tmp_path, served.target)
        assert settings.job_name == "" and settings.pod_status_file is not None
        settings.pod_status_file.write_text(json.dumps(pod))
        async with serve_task(settings, Outbox()) as (stop, task):
            await eventually(lambda: bool(served.collector.registers))
            stop.set()
            assert await asyncio.wait_for(task, HANG_GUARD) == 0
    reg = served.collector.registers[0]
    assert (reg.job.name, reg.job.kind, reg.attempt) == ("llm", "JobSet", "2")


# -- the hold: after a failed training container, wait for the aggregator to confirm the pod's condition ----

WRITTEN = pb.HoldReply(outcome=pb.HoldReply.WRITTEN, condition_type="podmortem.io/Victim")


async def _failed_and_stopped(served: Any, tmp_path: Path, pod: dict[str, Any], **extra: str) -> tuple[int, float]:
    """A sidecar whose training container failed and which is then stopped: (exit code, seconds to exit)."""
    settings = settings_for(tmp_path, served.target, **extra)
    assert settings.pod_status_file is not None
    settings.pod_status_file.write_text(json.dumps(pod))
    async with serve_task(settings, Outbox()) as (stop, task):
        await eventually(lambda: len(served.collector.events) >= 1, "the first event")
        loop = asyncio.get_running_loop()
        started = loop.time()
        stop.set()
        code = await asyncio.wait_for(task, HANG_GUARD)
        return code, loop.time() - started


async def test_hold_waits_for_the_confirmation_after_the_last_events(tmp_path: Path) -> None:
    async with serving(FakeCollector(holds=True, hold_reply=WRITTEN)) as served:
        code, _ = await _failed_and_stopped(served, tmp_path, POD, PODMORTEM_HOLD_TIMEOUT="30")
        fake = served.collector
    assert code == 0
    assert fake.registers[0].holds
    [(hold, events_before)] = fake.hold_requests
    assert events_before == len(fake.events)  # asked after every event
    assert 0 < hold.timeout_seconds <= 30 - running.GRACE_MARGIN  # within the default grace of 30 s


async def test_hold_is_asked_again_after_a_reconnect(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="podmortem.sidecar")
    fake = FakeCollector(holds=True, hold_reply=WRITTEN)
    fake.break_on_hold = 1  # the stream breaks as the first hold arrives
    async with serving(fake) as served:
        code, _ = await _failed_and_stopped(served, tmp_path, POD, PODMORTEM_HOLD_TIMEOUT="30")
    assert code == 0
    assert len(fake.registers) == 2 and len(fake.hold_requests) == 2  # registered again, asked again
    (first, _), (again, _) = fake.hold_requests
    # Asked again with what is left of the sidecar's own deadline, not a fresh one: an aggregator restarted
    # meanwhile must decide before this pod ends.
    assert again.seq == first.seq and 0 < again.timeout_seconds < first.timeout_seconds
    assert "condition podmortem.io/Victim written on this pod" in caplog.text


async def test_hold_ends_at_its_timeout_when_nobody_answers(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async with serving(FakeCollector(holds=True, hold_reply=None)) as served:
        code, _ = await _failed_and_stopped(served, tmp_path, POD, PODMORTEM_HOLD_TIMEOUT="0.5")
        assert len(served.collector.hold_requests) == 1
    assert code == 0
    assert "no confirmation within 0.5s" in caplog.text


async def test_an_older_aggregator_is_not_asked_to_hold(tmp_path: Path) -> None:
    # An aggregator from before the hold says nothing of it in Registered: the sidecar exits without waiting.
    async with serving(FakeCollector(holds=False)) as served:
        code, _ = await _failed_and_stopped(served, tmp_path, POD, PODMORTEM_HOLD_TIMEOUT="3600")
        assert served.collector.hold_requests == []
    assert code == 0


async def test_no_hold_for_a_pod_being_deleted_or_one_that_succeeded(tmp_path: Path) -> None:
    succeeded = json.loads(json.dumps(POD))
    succeeded["status"]["phase"] = "Succeeded"
    succeeded["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] = 0
    for pod in (DELETED_ENDED_POD, succeeded):
        async with serving(FakeCollector(holds=True, hold_reply=None)) as served:
            code, _ = await _failed_and_stopped(served, tmp_path, pod, PODMORTEM_HOLD_TIMEOUT="3600")
            assert served.collector.hold_requests == []
        assert code == 0


def test_the_hold_never_outlasts_the_pods_grace() -> None:
    settings = dataclasses.replace(SETTINGS, hold_timeout=15.0)
    assert running.hold_budget(settings, None, stopped_at=100.0, now=101.0) == 14.0  # counted from the SIGTERM
    assert running.hold_budget(settings, 10.0, stopped_at=100.0, now=101.0) == 10.0 - running.GRACE_MARGIN - 1.0
    assert running.hold_budget(settings, 1.0, stopped_at=100.0, now=101.0) == 0.0
    assert running.hold_budget(settings, None, stopped_at=100.0, now=120.0) == 0.0


async def test_no_hold_when_no_aggregator_was_ever_reached(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Nothing of this pod reached an aggregator, so none can answer a hold: the pod is not kept for one.
    caplog.set_level(logging.INFO, logger="podmortem.sidecar")
    settings = settings_for(
        tmp_path, "127.0.0.1:1", PODMORTEM_HOLD_TIMEOUT="3600", PODMORTEM_FLUSH_TIMEOUT="0.2"
    )  # port 1: nothing listens
    assert settings.pod_status_file is not None
    settings.pod_status_file.write_text(json.dumps(POD))
    async with serve_task(settings, Outbox()) as (stop, task):
        await asyncio.sleep(0.3)  # the pod's end is read; the stream keeps failing to connect
        stop.set()
        code = await asyncio.wait_for(task, HANG_GUARD)
    assert code == 0
    assert "not holding the pod: no aggregator was reached" in caplog.text
    assert "holding the pod until" not in caplog.text


def clean_library_kib(pid: int, name: str) -> int:
    """KiB of a shared object's file pages resident in process `pid` (its private pages left out)."""
    from podmortem.sidecar.residency import parse_smaps

    text = Path(f"/proc/{pid}/smaps").read_text()
    return sum(r.rss_kib - (r.anonymous_kib or 0) for r in parse_smaps(text) if name in r.path)


async def test_a_settled_sidecar_gives_back_the_library_pages_only_its_start_touched(tmp_path: Path) -> None:
    """Registered and settled (`running.SETTLED`), the sidecar drops its mappings of grpc's library pages
    that starting touched; it still streams the next error file (the pages come back as it runs)."""
    async with serving(FakeCollector()) as served:
        fake = served.collector
        error_file = tmp_path / "error.json"
        env = process_env(error_file, served.target)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "podmortem.sidecar.running", env=env, stderr=asyncio.subprocess.DEVNULL
        )
        try:
            await eventually(lambda: len(fake.registers) == 1)
            started = clean_library_kib(proc.pid, "cygrpc")
            # Starting (the channel, TLS, the clock-probe burst) leaves megabytes of it resident ...
            assert started >= 2048, started
            # ... and at rest the sidecar keeps well under half of that.
            await eventually(lambda: clean_library_kib(proc.pid, "cygrpc") < started / 2, "cygrpc's pages dropped")
            error_file.write_text(json.dumps(ERROR))
            await eventually(lambda: len(fake.events) == 1)
            proc.send_signal(signal.SIGTERM)
            async with asyncio.timeout(HANG_GUARD):
                assert await proc.wait() == 0
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
