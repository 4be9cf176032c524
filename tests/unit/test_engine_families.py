"""Failure families, on hand-written incidents: a stack dump of the stuck rank, victims that name the
culprit, a device fault after a generic exception, words whose meaning depends on their context, and timeouts
that cannot be told apart. The texts are written for these tests in the formats the tools print."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from podmortem.core.assess import assess
from podmortem.core.engine import DEVICE_REPORT_LAG_SECONDS, decide
from podmortem.core.errorfile import exception_type_of
from podmortem.core.model import LOW_CONFIDENCE, ErrorRecord, Incident, JobRef, Member, Termination
from podmortem.core.rules import DEFAULT_RULES

T0 = 1_800_000_000.0
NCCL_TIMEOUT = (
    "[Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=812, OpType=ALLREDUCE, "
    "NumelIn=4096, NumelOut=4096, Timeout(ms)=600000) ran for 600311 milliseconds before timing out."
)


def pod(
    name: str,
    rank: int,
    *,
    msg: str | None = None,
    ts: float | None = None,
    log: str = "",
    exit_code: int | None = 1,
    ip: str = "",
    running: bool = False,
) -> Member:
    error = None
    if msg is not None:
        error = ErrorRecord(message=msg, exception_type=exception_type_of(msg), timestamp=int(ts or T0))
    term = Termination(exit_code=exit_code, reason="Error", finished_at=(ts or T0) + 1) if exit_code else None
    return Member(
        pod=name,
        rank=rank,
        pod_ip=ip,
        node=f"node-{rank}",
        phase="Running" if running else "Failed",
        running=running,
        error=error,
        termination=term,
        log_tail=log,
    )


def job(*members: Member, world_size: int | None = None) -> Incident:
    return Incident(JobRef("ml", "llm"), world_size or len(members), members)


def timed_out(name: str, rank: int, ts: float = T0 + 600) -> Member:
    return pod(name, rank, msg=f"torch.distributed.DistBackendError: {NCCL_TIMEOUT.format(rank=rank)}", ts=ts)


# --- a stack dump with no exception is the stuck rank ----------------------------------------------------------

PY_SPY = """Process 311: python -u train.py --config big.yaml
Python v3.11.9 (/usr/bin/python3.11)

Thread 311 (idle): "MainThread"
    wait (torch/cuda/streams.py:231)
    all_reduce (torch/distributed/distributed_c10d.py:2501)
    step (trainer/loop.py:144)
Thread 377 (active): "pin_memory"
    _pin_memory_loop (torch/utils/data/_utils/pin_memory.py:59)
"""
FAULTHANDLER = """Timeout (0:30:00)!
Thread 0x00007f3a2b1c0740 (most recent call first):
  File "/opt/app/trainer/loop.py", line 144 in step
  File "/opt/app/train.py", line 61 in main
"""
GDB = """(gdb) thread apply all bt
Thread 1 (Thread 0x7f1e2d3c4740 (LWP 311) "python"):
#0  0x00007f1e2d3c4b5a in __futex_abstimed_wait_common () from /lib/x86_64-linux-gnu/libc.so.6
#1  0x00007f1e0a1b2c3d in ncclGroupEnd () from /usr/lib/libnccl.so.2
"""


@pytest.mark.parametrize("dump", [PY_SPY, FAULTHANDLER, GDB], ids=["py-spy", "faulthandler", "gdb"])
def test_a_stack_dump_without_an_exception_is_the_stuck_rank(dump: str) -> None:
    stuck = pod("llm-worker-2", 2, log=dump, ts=T0 + 1790)
    v = decide(job(timed_out("llm-master-0", 0), timed_out("llm-worker-1", 1), stuck))
    assert (v.pod, v.category, v.retryable) == ("llm-worker-2", "hang", True), v.evidence
    assert assess(stuck).rule is not None and assess(stuck).rule.id == "log.stack-dump"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "log",
    [FAULTHANDLER, "[PG 0 Rank 2] Heartbeat monitor timed out! Process will be terminated after dumping debug info."],
    ids=["dump", "stuck-watchdog"],
)
def test_the_stuck_rank_s_own_record_among_known_echoes_reaches_the_permanent_threshold(log: str) -> None:
    """Nobody else failed on their own and every other member is a known echo: the stuck rank is the cause (a hang,
    retryable, so it never writes PermanentFailure)."""
    stuck = pod("llm-worker-2", 2, log=log, ts=T0 + 1790)
    v = decide(job(timed_out("llm-master-0", 0), timed_out("llm-worker-1", 1), stuck))
    assert (v.pod, v.category, v.retryable) == ("llm-worker-2", "hang", True), v.evidence
    assert v.confidence >= 0.9
    # A member that exited without words may be the one the others waited for: no longer alone.
    v = decide(job(timed_out("llm-master-0", 0), pod("llm-worker-1", 1, ts=T0 + 1700), stuck))
    assert v.confidence < 0.9
    # A member that never reported may be it too.
    v = decide(job(timed_out("llm-master-0", 0), stuck, world_size=3))
    assert v.confidence < 0.9


def test_the_stuck_rank_s_record_goes_before_carrier_exceptions_in_words_no_rule_knows() -> None:
    """Ranks that waited for the stuck one raise in an unknown runtime's words (a carrier class): within the timing
    uncertainty the stuck rank's own record goes first — below the threshold, as the order is a judgement."""
    carrier = 'Traceback (most recent call last):\n  File "g.py", line 2, in wait\nmeshrt.MeshError: member left (17)\n'
    stuck = pod("w-2", 2, log=FAULTHANDLER, ts=T0)
    v = decide(job(pod("w-0", 0, log=carrier, ts=T0), pod("w-1", 1, log=carrier, ts=T0), stuck))
    assert (v.pod, v.category) == ("w-2", "hang") and v.confidence <= 0.7, v.evidence


def test_a_dump_printed_on_a_signal_does_not_go_before_the_exception_that_caused_the_teardown() -> None:
    """faulthandler registered on SIGTERM prints every rank's stack at the teardown, with no header of its own: not a
    record of being stuck, so the exception that caused the teardown stays the root."""
    root = pod(
        "w-0", 0, log='Traceback (most recent call last):\n  File "t.py", line 9\nRuntimeError: shard table corrupt\n'
    )
    signal_dump = FAULTHANDLER.split("\n", 1)[1]
    v = decide(job(root, pod("w-1", 1, log=signal_dump), pod("w-2", 2, log=signal_dump)))
    assert (v.pod, v.category) == ("w-0", "user_code"), v.evidence


def test_a_dump_after_a_native_crash_is_the_crash_and_beside_a_timeout_it_is_the_echo() -> None:
    crashed = pod("w-0", 0, log="Fatal Python error: Segmentation fault\n\n" + FAULTHANDLER.split("\n", 1)[1])
    assert assess(crashed).category == "crash"
    waiting = pod("w-1", 1, log=f"[rank1]:[E ProcessGroupNCCL.cpp:632] {NCCL_TIMEOUT.format(rank=1)}\n" + PY_SPY)
    assert assess(waiting).secondary == "timeout"


# --- words that change meaning with their context --------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "category"),
    [
        ("node7:311:402 [2] NCCL WARN NET/IB : ibv_reg_mr failed: Cannot allocate memory", "network"),
        (
            "libfabric:311:17::efa:mr:efa_mr_reg_impl():517<warn> Unable to register MR: Cannot allocate memory",
            "network",
        ),
        ("UCX  ERROR mlx5_1: ibv_create_qp() failed: Cannot allocate memory", "network"),
        ("ERROR: Cannot allocate memory; set max locked memory (ulimit -l) to unlimited", "network"),
        ("OSError: [Errno 12] Cannot allocate memory", "host_oom"),
        ("RuntimeError: DataLoader worker (pid 99) exited: Cannot allocate memory", "host_oom"),
    ],
)
def test_enomem_from_the_interconnect_is_the_network_not_host_memory(text: str, category: str) -> None:
    by_message = DEFAULT_RULES.classify_message(text, exception_type_of(text))
    by_log = DEFAULT_RULES.first_log_rule(f"step 88\n{text}\n")
    assert by_message is not None and by_message.category == category, by_message
    assert by_log is not None and by_log.category == category, by_log


def test_ray_saying_the_actor_s_node_was_preempted_is_a_preemption() -> None:
    log = (
        "(TrainController pid=41) The actor died because its node has died. Node Id: 6a1f\n"
        "(TrainController pid=41) \tthe actor's node was preempted: spot capacity reclaimed\n"
    )
    assert assess(pod("ray-head-0", 0, log=log)).category == "preemption"
    # Ray listing preemption among the possible causes of a node it marked dead says no such thing.
    maybe = (
        "The node with node id: 6a1f has been marked dead because the detector has missed too many heartbeats "
        "(OOM, preempted node, etc.)"
    )
    assert assess(pod("ray-head-0", 0, log=maybe)).category == "node_lost"


# --- victims that name the culprit -----------------------------------------------------------------------------

BARRIER = (
    "RuntimeError: Rank {me} successfully reached monitoredBarrier, but received errors while waiting for send/recv "
    "from rank {culprit}. Please check rank {culprit} logs for faulty rank."
)


def test_victims_naming_a_rank_count_for_the_pod_that_hosts_it() -> None:
    # Two pods exited without a word of their own; the monitored barrier's victims point at rank 3.
    victims = [
        pod(f"w-{r}", r, msg=BARRIER.format(me=r, culprit=3), log=f"[rank{r}]: step 40 loss 2.1\n", ts=T0 + 2)
        for r in (0, 1)
    ]
    quiet = [pod("w-2", 2, ts=T0), pod("w-3", 3, ts=T0)]
    v = decide(job(*victims, *quiet))
    assert v.pod == "w-3", v.evidence
    assert all(assess(m).secondary == "timeout" for m in victims)  # the barrier's words are an echo


def test_the_launcher_naming_a_worker_s_host_counts_for_that_worker() -> None:
    launcher = pod(
        "mpi-launcher",
        0,
        log="mpirun noticed that process rank 5 with PID 88 on node mpi-worker-1 exited on signal 9 (Killed).\n",
    )
    silent = [pod("mpi-worker-0", 1, exit_code=None), pod("mpi-worker-1", 2, exit_code=None)]
    v = decide(job(launcher, *silent))
    assert assess(launcher).secondary == "peer"
    assert v.pod == "mpi-worker-1", v.evidence


@pytest.mark.parametrize(
    "report",
    [
        "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n=   RANK 5 PID 88 RUNNING AT mpi-worker-1\n"
        "=   KILLED BY SIGNAL: 9 (Killed)\n",
        "mpirun has exited due to process rank 5 with PID 88 on node mpi-worker-1 exiting improperly.\n",
    ],
    ids=["mpich", "mpirun-exited"],
)
def test_other_mpi_launchers_naming_a_worker_count_for_that_worker(report: str) -> None:
    launcher = pod("mpi-launcher", 0, log=report)
    silent = [pod("mpi-worker-0", 1, exit_code=None), pod("mpi-worker-1", 2, exit_code=None)]
    v = decide(job(launcher, *silent))
    assert assess(launcher).secondary == "peer"
    assert v.pod == "mpi-worker-1", v.evidence


def test_nccl_naming_the_peer_s_address_counts_for_that_pod() -> None:
    line = "w0:311:402 [0] misc/socket.cc:538 NCCL WARN Net : Call to recv from 10.4.0.12<40211> failed : Broken pipe"
    victim = pod("w-0", 0, log=line, ip="10.4.0.11")
    others = [pod("w-1", 1, exit_code=None, ip="10.4.0.13"), pod("w-2", 2, exit_code=None, ip="10.4.0.12")]
    assert decide(job(victim, *others)).pod == "w-2"


# --- a strong device fault beats an earlier generic exception --------------------------------------------------


def test_a_device_fault_beats_an_earlier_generic_exception() -> None:
    echo = pod("w-0", 0, msg="RuntimeError: step aborted by collective helper (see peer)", ts=T0)
    device = pod("w-1", 1, msg="RuntimeError: CUDA error: uncorrectable ECC error encountered", ts=T0 + 1)
    v = decide(job(echo, device, timed_out("w-2", 2, ts=T0 + 1800)))
    assert (v.pod, v.category, v.retryable) == ("w-1", "hardware", True), v.evidence
    assert v.runner_up_pod == "w-0" or v.confidence >= LOW_CONFIDENCE


def test_a_generic_exception_long_before_a_device_fault_still_comes_first() -> None:
    first = pod("w-0", 0, msg="RuntimeError: step aborted by collective helper (see peer)", ts=T0)
    later = pod(
        "w-1",
        1,
        msg="RuntimeError: CUDA error: uncorrectable ECC error encountered",
        ts=T0 + 2 * DEVICE_REPORT_LAG_SECONDS,
    )
    assert decide(job(first, later)).pod == "w-0"


# --- timeouts that cannot be told apart ------------------------------------------------------------------------


def test_timeouts_that_cannot_be_told_apart_are_a_low_confidence_hang_with_a_runner_up() -> None:
    v = decide(job(timed_out("w-0", 0, ts=T0 + 600), timed_out("w-1", 1, ts=T0 + 601)))
    assert (v.category, v.retryable) == ("hang", True)
    assert v.confidence < LOW_CONFIDENCE and v.runner_up_pod is not None and v.runner_up_pod != v.pod
    assert "Runner-up" in v.summary


# --- what is not an exception line -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "exception_type"),
    [
        ("Net : Connection closed by remote peer w-1.llm.svc<29400>", ""),  # NCCL's words, a space before ':'
        ("Steps:   3%|▎         | 120/4000 [02:01<1:05:12,  1.01s/it, loss=2.3]", ""),  # a progress bar
        ("Epoch: 3/10 loss 0.41", ""),  # a metric
        ("KeyError: 0", "KeyError"),  # named like an exception: a number is its message
        ("TrainerAbort: collective failed", "TrainerAbort"),
    ],
)
def test_metric_lines_and_foreign_formats_are_not_exceptions(line: str, exception_type: str) -> None:
    assert exception_type_of(line) == exception_type


def test_a_victim_whose_log_shows_a_progress_bar_and_nccl_s_words_stays_a_victim() -> None:
    root = pod("w-0", 0, log="[rank0]: OSError: [Errno 28] No space left on device: '/ckpt/step_400.pt'\n")
    victim_log = (
        "Steps:   3%|▎         | 120/4000 [02:01<1:05:12,  1.01s/it, loss=2.3]\n"
        "w1:88:91 [0] NCCL INFO misc/socket.cc:538 -> 6\n"
        "ncclInternalError: Internal check failed.\nLast error:\n"
        "Net : Connection closed by remote peer w-0.llm.svc<29400>\n"
    )
    victim = pod("w-1", 1, log=victim_log)
    assert assess(victim).role == "secondary"
    v = decide(job(root, victim))
    assert (v.pod, v.category) == ("w-0", "infra"), v.evidence


# --- confidence that can drive a retry decision ----------------------------------------------------------------

PERMANENT = 0.9  # the aggregator's --permanent-confidence default
GLOO_CLOSED = "RuntimeError: [pair.cc:553] Connection closed by peer [10.4.0.{n}]:4455"


def _clear_case(root_message: str, named: bool = False) -> Incident:
    """w-0 raised; three peers lost their connection to it (naming its address 10.4.0.9 when `named`)."""
    root = pod("w-0", 0, msg=root_message, ts=T0, ip="10.4.0.9")
    echoes = [pod(f"w-{n}", n, msg=GLOO_CLOSED.format(n=9 if named else 20 + n), ts=T0) for n in (1, 2, 3)]
    return job(root, *echoes)


@pytest.mark.parametrize(
    "message", ["ValueError: learning rate must be positive, got -0.1", "KeyError: 'decoder.layers.31.mlp'"]
)
def test_a_program_error_of_its_own_among_plain_echoes_reaches_the_permanent_threshold(message: str) -> None:
    v = decide(_clear_case(message))
    assert (v.pod, v.category, v.retryable) == ("w-0", "user_code", False)
    assert v.confidence >= PERMANENT, v.evidence


@pytest.mark.parametrize(
    "message",
    [
        "RuntimeError: shard server answered 503",  # a carrier class: it may carry a system failure
        "CheckpointStoreError: bucket unavailable",  # a custom class: the same
    ],
)
def test_a_carrier_exception_stays_below_the_permanent_threshold_even_when_victims_name_it(message: str) -> None:
    for incident in (_clear_case(message), _clear_case(message, named=True)):
        v = decide(incident)
        assert v.pod == "w-0" and v.confidence < PERMANENT, v.evidence


def test_an_own_program_error_beside_another_failure_of_its_own_is_not_a_clear_case() -> None:
    inc = _clear_case("ValueError: learning rate must be positive, got -0.1")
    oom = pod("w-3", 3, msg="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", ts=T0 + 5)
    v = decide(dataclasses.replace(inc, members=(*inc.members[:3], oom)))
    assert v.pod == "w-0" and v.confidence < PERMANENT


# --- the silent member ------------------------------------------------------------------------------------


def _pytorchjob(*pods: tuple[str, int], log: str = "") -> list[Member]:
    """Members of a PyTorchJob named as the training operator names them, each with a collective timeout."""
    out = []
    for name, rank in pods:
        kind, index = name.rsplit("-", 2)[-2:]
        m = timed_out(name, rank)
        out.append(dataclasses.replace(m, replica_type=kind.capitalize(), replica_index=int(index), log_tail=log))
    return out


def test_a_member_that_never_reported_is_named_and_weighed_in_a_hang() -> None:
    present = _pytorchjob(("llm-c-master-0", 0), ("llm-c-worker-0", 1), ("llm-c-worker-1", 2))
    inc = job(*present, world_size=4)
    v = decide(inc)
    assert (v.missing_ranks, v.missing_pods, v.members_missing) == ((3,), ("llm-c-worker-2",), 1)
    assert (v.pod, v.category, v.retryable) == ("llm-c-worker-2", "hang", True), v.evidence
    assert v.confidence < LOW_CONFIDENCE and v.runner_up_pod in {m.pod for m in present}
    assert "llm-c-worker-2 (node rank 3)" in v.summary and "Runner-up" in v.summary
    from podmortem.offline import report

    text = report.render(inc, v)
    assert "have not reported: llm-c-worker-2 (node rank 3)" in text


def test_a_visibly_stuck_member_still_beats_one_that_never_reported() -> None:
    present = _pytorchjob(("llm-c-master-0", 0), ("llm-c-worker-0", 1))
    stuck = dataclasses.replace(pod("llm-c-worker-1", 2, exit_code=None, running=True), replica_type="Worker")
    v = decide(job(*present, stuck, world_size=4))
    assert v.pod == "llm-c-worker-1" and v.missing_pods == ("llm-c-worker-2",)
    assert "Not reported: llm-c-worker-2 (node rank 3); if the job hung, look there first." in v.summary


@pytest.mark.parametrize(
    ("pods", "world", "ranks", "names"),
    [
        ([("j-worker-0", 1), ("j-worker-1", 2)], 3, (0,), ("j-master-0",)),  # the master is the silent one
        ([("j-master-0", 0), ("j-worker-1", 2)], 4, (1, 3), ("j-worker-0", "j-worker-2")),
        ([("train-0", 0), ("train-2", 2)], 3, (1,), ("train-1",)),  # <name>-<rank>
        ([("a-x7f", 0), ("b-q2", 1)], 3, (2,), ()),  # no pattern: the rank only
    ],
)
def test_the_missing_members_are_named_when_the_present_ones_show_how(
    pods: list[tuple[str, int]], world: int, ranks: tuple[int, ...], names: tuple[str, ...]
) -> None:
    members = []
    for name, rank in pods:
        m = pod(name, rank)
        if "-master-" in name or "-worker-" in name:
            kind, index = name.rsplit("-", 2)[-2:]
            m = dataclasses.replace(m, replica_type=kind, replica_index=int(index))
        members.append(m)
    from podmortem.core.engine import missing_members

    assert missing_members(job(*members, world_size=world)) == (ranks, names)


@pytest.mark.parametrize(
    ("line", "category"),
    [
        ("[node3:88:0:88] ib_mlx5_log.c:139  Transport retry count exceeded on mlx5_2:1/IB (synd 0x15)", "network"),
        ("2024-01-02T03:04:05Z /container_01: PermissionError: [Errno 13] Permission denied: '/ckpt/run7'", "infra"),
    ],
)
def test_the_environment_s_own_words_in_a_log_tail(line: str, category: str) -> None:
    found = DEFAULT_RULES.first_log_rule(f"step 12 loss 3.1\n{line}\n")
    assert found is not None and found.category == category, found


def test_clear_cases_of_the_development_corpus_reach_the_permanent_threshold() -> None:
    """Real torchrun runs: a worker raised a program error of its own while the others only lost it. Each such
    verdict must be able to write PermanentFailure; one with another own failure beside it must not."""
    from bench.common import bundles, corpus_dir
    from podmortem.core.assess import PROGRAM_ERRORS
    from podmortem.offline.bundle import load_bundle

    clear = mixed = 0
    for bundle in bundles(corpus_dir()):
        truth = json.loads((bundle / "truth.json").read_text())
        v = decide(load_bundle(bundle))
        if v.exception_type.rsplit(".", 1)[-1] not in PROGRAM_ERRORS or v.pod != truth["root_pod"]:
            continue
        if truth["scenario"] == "multi_error":
            mixed += 1
            assert v.confidence < PERMANENT, bundle.name
        else:
            clear += 1
            assert v.confidence >= PERMANENT and v.retryable is False, (bundle.name, v.confidence)
    assert clear >= 5 and mixed >= 1, (clear, mixed)


def test_a_missing_member_whose_pod_cannot_be_named_is_named_by_its_rank() -> None:
    v = decide(job(timed_out("a-x7f", 0), timed_out("b-q2", 1), world_size=3))
    assert (v.missing_ranks, v.missing_pods) == ((2,), ())
    assert v.pod in ("a-x7f", "b-q2") and "Not reported: node rank 2" in v.summary


def test_every_uncertain_verdict_names_a_runner_up() -> None:
    """Below LOW_CONFIDENCE a verdict is worded as 'likely' and must say where else to look (README)."""
    from podmortem.offline.corpus import compose, load

    corpus = Path(__file__).resolve().parents[1] / "corpus-realworld" / "excerpts.jsonl"
    uncertain = [v for c in compose(load(corpus), "train", 0) if (v := decide(c.incident)).uncertain]
    assert uncertain and all(v.runner_up_pod not in (None, v.pod) for v in uncertain), [v.rule for v in uncertain]
    lone = decide(job(pod("w-0", 0), pod("w-1", 1, msg=GLOO_CLOSED.format(n=1))))  # a bare exit 1, an echo
    assert lone.uncertain and lone.runner_up_pod == "w-1" and "Runner-up: w-1" in lone.summary


OOM_LINE = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "79.15 GiB of which 1.02 GiB is free."
)


@pytest.mark.parametrize(
    ("victim_log", "kind"),
    [
        # The store's host went away before this pod got in: its connect attempts time out (ETIMEDOUT).
        (
            "[W socket.cpp:601] [c10d] The client socket has failed to connect to [trainer-0.ml.svc]:29400 "
            "(errno: 110 - Connection timed out).\n" * 3,
            "store",
        ),
        # The elastic agent died inside the rendezvous backend's state exchange, its exception line cut off.
        (
            '  File "/usr/lib/python3/site-packages/torch/distributed/elastic/rendezvous/dynamic_rendezvous.py", '
            "line 420, in sync\n    get_response = self._backend.get_state()\n"
            '  File "/usr/lib/python3/site-packages/torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py", '
            "line 75, in get_state\n    base64_state: bytes = self._call_store(",
            "store",
        ),
        # absl's failure-signal handler in a Ray worker that was told to stop.
        (
            "[2026-11-27 08:00:00,001 E 411 902] logging.cc:440: *** SIGTERM received at time=1795766400 on cpu 3 ***\n"
            "[2026-11-27 08:00:00,001 E 411 902] logging.cc:440: PC: @     0x7f3a2c1e2f3e  (unknown)  epoll_wait",
            "teardown",
        ),
    ],
)
def test_a_victim_that_only_waited_for_the_store_or_was_told_to_stop_leaves_the_root_clear(
    victim_log: str, kind: str
) -> None:
    root = pod("w-0", 0, msg=OOM_LINE, ts=T0)
    victim = pod("w-1", 1, log=victim_log, ts=T0 + 0.5)
    v = decide(job(root, victim))
    assert (v.pod, v.category, v.confidence) == ("w-0", "gpu_oom", 0.9)
    assert assess(victim, DEFAULT_RULES).secondary == kind


def test_a_refused_store_connection_is_what_a_healthy_start_prints_and_is_no_echo() -> None:
    # errno 111: the store is not listening yet; torch retries, so the line alone says nothing.
    f = assess(
        pod(
            "w-1",
            1,
            log="[W socket.cpp:601] [c10d] The client socket has failed to connect to [trainer-0]:29400 "
            "(errno: 111 - Connection refused).",
        ),
        DEFAULT_RULES,
    )
    assert f.secondary is None


# A collective mismatch a checker detected, in several frameworks' words (Horovod's coordinator, TensorFlow's collective
# parameter resolver, Ascend HCCL's consistency check, NCCL's IB transport in its two wordings, torch's checker).
DETECTED_MISMATCH = [
    "w-2:812:900 [0] transport/net_ib.cc:1038 NCCL WARN NET/IB : req 0/1 tag 7 peer 10.0.0.4<41231> collective "
    "mismatch error, local size 4096 remote size 1024",
    "w-2:812:900 [0] NCCL WARN NET/IB : collective mismatch error local size 8192 remote 2048 addr 7f00 rkey 1a "
    "seq 3/3",
    "FailedPreconditionError: Mismatched allreduce tensor shapes: One rank reduced a tensor of shape [10], but another "
    "rank sent a tensor of shape [12].",
    "RuntimeError: Mismatched data types: One rank had type float32, but another rank had type float16.",
    "InvalidArgumentError: Shape mismatch in the collective instance 7. Op at device /job:worker/replica:0/task:1/"
    "device:GPU:0 expected shape [64] but another member in the group expected shape [128].",
    "EI0005: The arguments for collective communication are inconsistent between ranks: tag [AllReduce_3], parameter "
    "[count], local [512], remote [256]",
    "RuntimeError: Detected mismatch between collectives on ranks. Rank 1 is running collective: "
    "CollectiveFingerPrint(OpType=ALLREDUCE), but Rank 0 is running collective: "
    "CollectiveFingerPrint(OpType=BROADCAST).",
]
# What the mismatched transfer did to the interconnect, printed beside it: an IB completion in error, MPI's OFI layer
# failing a completion, a transport that could not be set up.
INTERCONNECT_BESIDE = [
    "w-2:812:901 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.4<41231> with error 12, opcode 0, len 0",
    "Abort(1) on node 2: OFI poll failed (ofi_events.c:1077:MPIDI_OFI_handle_cq_error:Input/output error)",
    "w-2:812:901 [0] transport/net.cc:870 NCCL WARN NET/IB : ibv_post_send failed with error Cannot allocate memory",
]


@pytest.mark.parametrize("beside", INTERCONNECT_BESIDE, ids=["ib-completion", "ofi", "ib-enomem"])
@pytest.mark.parametrize("mismatch", DETECTED_MISMATCH)
def test_a_detected_collective_mismatch_names_its_cause_over_the_interconnect_beside_it(
    mismatch: str, beside: str
) -> None:
    for log in (f"step 40\n{mismatch}\n{beside}\n", f"step 40\n{beside}\n{mismatch}\n"):
        f = assess(pod("w-2", 2, log=log), DEFAULT_RULES)
        assert (f.role, f.category) == ("primary", "user_code"), (f.rule, log)


@pytest.mark.parametrize("mismatch", DETECTED_MISMATCH[:-1])
def test_a_mismatch_in_words_no_corpus_line_has_shown_yet_stays_below_certainty(mismatch: str) -> None:
    # NCCL's IB check also fires on a NIC's relaxed ordering corrupting its FIFO; the others are unproven on the corpus
    for f in (
        assess(pod("w-2", 2, log=f"step 40\n{mismatch}\n"), DEFAULT_RULES),
        assess(pod("w-2", 2, msg=mismatch), DEFAULT_RULES),
    ):
        assert f.category == "user_code" and f.rule is not None, f.rule
        assert f.rule.max_confidence < 0.9, f.rule.id


def test_hccl_s_consistency_check_under_torch_npu_s_error_is_the_program_not_the_link() -> None:
    msg = (
        "RuntimeError: HCCL function error: HcclAllReduce(...), error code is 5\nEI0005: The arguments for collective "
        "communication are inconsistent between ranks: tag [AllReduce_3], parameter [dataType], local [1], remote [3]"
    )
    f = assess(pod("w-1", 1, msg=msg), DEFAULT_RULES)
    assert (f.role, f.category) == ("primary", "user_code"), f.rule


@pytest.mark.parametrize(
    "words",
    [
        # advice and comments that name the failure without a checker having found one
        "hint: a collective mismatch error usually means ranks called different collectives",
        "NCCL WARN NET/IB : Got completion from peer 10.0.0.4<41231> with error 12, opcode 0, len 0 (mismatched MTU?)",
    ],
)
def test_words_about_mismatches_that_no_checker_printed_are_not_a_detected_mismatch(words: str) -> None:
    f = assess(pod("w-2", 2, log=f"step 40\n{words}\n"), DEFAULT_RULES)
    assert (
        f.category != "user_code"
        or f.rule is None
        or f.rule.id
        not in {
            "log.collective-mismatch",
            "log.job-setup",
        }
    )


@pytest.mark.parametrize(
    ("line", "category"),
    [
        # the host answered and nothing listened: its sshd not up, another port, or a firewall's reject
        ("ssh: connect to host worker-3 port 12345: Connection refused", "infra"),
        ("ssh: connect to host 10.4.0.7 port 22: Connection refused", "infra"),
        # nothing answered: the path, or a host that is down
        ("ssh: connect to host worker-3 port 22: Connection timed out", "network"),
        ("ssh: connect to host w3.cluster.local port 2222: Operation timed out", "network"),
        # ssh's own status for any of its errors, its cause not shown
        ("subprocess.CalledProcessError: Command 'ssh w-3 hostname' returned non-zero exit status 255.", "infra"),
        ("pdsh@w-0: worker-3: ssh exited with exit code 255", "infra"),
    ],
)
def test_a_launcher_s_ssh_that_two_families_can_explain_stays_below_certainty(line: str, category: str) -> None:
    f = assess(pod("launcher", 0, log=f"Launching on 2 hosts\n{line}\n"), DEFAULT_RULES)
    assert (f.role, f.category) == ("primary", category), f.rule
    assert f.rule is not None
    assert f.rule.max_confidence < 0.9, f.rule.id


@pytest.mark.parametrize(
    "line",
    ["worker-3: Permission denied (publickey,password).", "Host key verification failed."],
)
def test_a_host_refusing_the_launcher_s_key_is_its_access_set_up_at_the_threshold(line: str) -> None:
    log = f"{line}\npdsh@w-0: worker-3: ssh exited with exit code 255\n"
    f = assess(pod("launcher", 0, log=log), DEFAULT_RULES)
    assert (f.role, f.category) == ("primary", "infra") and f.rule is not None and f.rule.max_confidence == 1.0


def _frames(top: str) -> str:
    return (
        f"#0  {top}\n#1  0x00007f4b56654d7c in ?? () from /usr/lib/libnccl.so.2\n"
        "#2  0x00007f4b5662f34b in ncclCommInitRank () from /usr/lib/libnccl.so.2\n"
    )


@pytest.mark.parametrize(
    "dump",
    [
        # the innermost frame waiting: a futex, a poll, a sleep, a lock, the syscall wrapper, the CUDA driver
        _frames("0x00007f1e2d3c4b5a in __futex_abstimed_wait_common () from /lib/x86_64-linux-gnu/libc.so.6"),
        _frames("0x00007fd0b01abac1 in poll () from /lib64/libc.so.6"),
        _frames("__GI___clock_nanosleep (clockid=0, flags=0, req=0x7ffd) at nanosleep.c:48"),
        _frames("0x00007f05daa8fe8b in pthread_mutex_lock () from /lib64/libpthread.so.0"),
        _frames("0x00007f13b2a0541d in syscall () from /lib64/libc.so.6"),
        _frames("0x000015551cd02434 in ?? () from /usr/lib64/libcuda.so.1"),
        # gdb attached to the live process, whatever its innermost frame
        "Attaching to process 4411\n"
        + _frames("0x00007f4b56653000 in ncclProxyProgress () from /usr/lib/libnccl.so.2"),
    ],
)
def test_a_backtrace_of_a_live_waiting_process_is_the_stuck_rank(dump: str) -> None:
    f = assess(pod("w-2", 2, log=dump), DEFAULT_RULES)
    assert (f.role, f.category) == ("primary", "hang"), f.rule


@pytest.mark.parametrize(
    "top",
    [
        "__memset_avx2_erms () at ../sysdeps/x86_64/multiarch/memset-vec-unaligned-erms.S:151",
        "0x00007f4b5665aa10 in __memcpy_avx_unaligned () from /lib64/libc.so.6",
        "0x00007f4b56654d00 in ncclTopoCompute () from /usr/lib/libnccl.so.2",
    ],
)
def test_a_backtrace_stopped_in_code_that_does_not_wait_is_no_stuck_rank(top: str) -> None:
    for dump in (_frames(top), "(gdb) bt\n" + _frames(top)):
        f = assess(pod("w-2", 2, log=dump), DEFAULT_RULES)
        assert f.category == "crash" and f.rule is not None, f.rule
        assert f.rule.max_confidence <= LOW_CONFIDENCE, f.rule.id
    # the crash's own words decide it at once
    signalled = "Program terminated with signal SIGSEGV, Segmentation fault.\n" + _frames(top)
    f = assess(pod("w-2", 2, log=signalled), DEFAULT_RULES)
    assert f.category == "crash" and f.rule is not None and f.rule.id != "log.stack-frames", f.rule
