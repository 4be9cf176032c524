"""Which verdicts may reach the PermanentFailure threshold (0.9), on hand-written incidents: words that a failure of
another family prints too stay below it (a rule's `max_confidence`), a scheduler's or launcher's own words and a
device named inside a generic exception reach it, and so does a program error the worker printed itself when torch's
summary shows `exitcode: 1` with no error file. The texts are written for these tests in the formats the tools
print."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support.members import member

from podmortem.core.assess import assess
from podmortem.core.engine import decide
from podmortem.core.model import Incident, JobRef
from podmortem.core.rules import DEFAULT_RULES, RulesError, load_rules, rule_from_dict

PERMANENT = 0.9
# A plain victim: torch's agent stopping the worker after a peer's failure.
TORN_DOWN = "W1127 06:40:02.118000 41 torch/distributed/elastic/agent/server/api.py:723] Received 15 death signal"
STORE_LOST = (
    "[rank3]:[W1127 06:40:01.904113 TCPStore.cpp:125] [c10d] recvValue failed on SocketImpl(fd=9, "
    "addr=[trainer-1]:51122, remote=[trainer-0]:29500): Connection reset by peer"
)


def incident(root_log: str, exit_code: int = 1) -> Incident:
    """The root's log tail beside two victims that end in the same second (times give no help)."""
    return Incident(
        JobRef("ml", "llm"),
        3,
        (
            member("llm-worker-0", 0, STORE_LOST, exit_code=1),
            member("llm-worker-1", 1, root_log, exit_code=exit_code),
            member("llm-worker-2", 2, TORN_DOWN, exit_code=143),
        ),
    )


def summary(code: int, signal: str = "") -> str:
    tb = signal or "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
    return (
        "Root Cause (first observed failure):\n[0]:\n  time      : 2026-11-27_06:40:00\n  host      : llm-worker-1\n"
        f"  rank      : 4 (local_rank: 0)\n  exitcode  : {code} (pid: 812)\n  error_file: <N/A>\n  traceback : {tb}\n"
    )


# --- ProcessGroupNCCL's heartbeat monitor is this rank's hang, not a lost node --------------------------------

HEARTBEAT_MONITOR = (
    "[rank4]:[E1127 06:39:58.001 ProcessGroupNCCL.cpp:1413] [PG 0 Rank 4] Heartbeat monitor timed out! Process will "
    "be terminated after dumping debug info. workMetaList_.size()=7\n"
    "[rank4]:[F1127 06:49:58.002 ProcessGroupNCCL.cpp:1224] [PG 0 Rank 4] ProcessGroupNCCL's watchdog got stuck for "
    "600 seconds without making progress in monitoring enqueued collectives."
)


def test_the_nccl_heartbeat_monitor_is_a_hang_of_that_rank_not_a_lost_node() -> None:
    v = decide(incident(HEARTBEAT_MONITOR, exit_code=134))
    assert (v.pod, v.category, v.retryable) == ("llm-worker-1", "hang", True)
    assert v.rule != "log.node-lost"


@pytest.mark.parametrize(
    "hccl",
    ["NCCL", "HCCL"],
)
def test_the_monitor_ending_the_process_for_its_stuck_watchdog_is_a_hang_of_that_rank(hccl: str) -> None:
    """The monitor's exit line alone, its reason the watchdog's hang (not a collective timeout: a peer's echo)."""
    line = (
        f"[rank4]:[F1127 06:49:58.002 ProcessGroup{hccl}.cpp:1557] [PG ID 0 PG GUID 0(default_pg) Rank 4] Terminating "
        f"the process after attempting to dump debug info, due to ProcessGroup{hccl} watchdog hang."
    )
    v = decide(incident(line, exit_code=134))
    assert (v.pod, v.category, v.retryable) == ("llm-worker-1", "hang", True)


@pytest.mark.parametrize(
    "line",
    [
        "2026-11-27 06:40:00,001\tWARNING worker.py:2049 -- The node with node id: 5be1 and address: 10.1.4.7 has "
        "been marked dead because the detector has missed too many heartbeats from it.",
    ],
)
def test_a_node_s_missed_heartbeats_are_a_lost_node(line: str) -> None:
    v = decide(incident(line))
    assert (v.pod, v.category) == ("llm-worker-1", "node_lost")
    assert v.confidence >= PERMANENT


# --- words another family prints too stay below the threshold ----------------------------------------------------


@pytest.mark.parametrize(
    ("root_log", "exit_code", "category"),
    [
        # A bare SIGABRT: a crash, or the NCCL watchdog taking down a rank whose collective timed out.
        (summary(-6, "Signal 6 (SIGABRT) received by PID 812"), 1, "crash"),
        ("trainer.sh: line 12:   812 Aborted                 (core dumped) python train.py", 134, "crash"),
        # A kernel that faulted without naming the device: a kernel bug as often as the GPU.
        ("RuntimeError: CUDA error: an illegal memory access was encountered", 1, "hardware"),
        ("RuntimeError: CUDA error: unspecified launch failure", 1, "hardware"),
        # Any CUDA call failing under NCCL: the node's runtime or driver, or a kernel that faulted.
        (
            "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda error",
            1,
            "infra",
        ),
        # A missing path: a mount the platform owes, or the job's own config naming it wrong.
        ("FileNotFoundError: [Errno 2] No such file or directory: '/data/shards/train-00017.bin'", 1, "infra"),
    ],
)
def test_words_another_family_prints_too_stay_below_the_permanent_threshold(
    root_log: str, exit_code: int, category: str
) -> None:
    v = decide(incident(root_log, exit_code=exit_code))
    assert (v.pod, v.category) == ("llm-worker-1", category)
    assert v.confidence < PERMANENT


def test_an_abort_that_says_why_is_a_crash_at_the_threshold() -> None:
    log = "free(): invalid pointer\n" + summary(-6, "Signal 6 (SIGABRT) received by PID 812")
    v = decide(incident(log))
    assert (v.pod, v.category, v.retryable) == ("llm-worker-1", "crash", False)
    assert v.confidence >= PERMANENT


def test_a_segfault_summary_stays_at_the_threshold() -> None:
    v = decide(incident(summary(-11, "Signal 11 (SIGSEGV) received by PID 812")))
    assert (v.category, v.rule) == ("crash", "signal.crash")
    assert v.confidence >= PERMANENT


# --- a scheduler's or launcher's own words reach it ------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        "submitit WARNING (2026-11-27 06:40:00,118) - Caught signal SIGUSR2 on gpu-node-3: this job is timed-out.",
        "submitit INFO (2026-11-27 06:40:00,120) - Job has timed out. Ran 1438 minutes out of requested 1440 minutes.",
        "submitit WARNING (2026-11-27 06:40:00,118) - Caught signal SIGUSR2 on gpu-node-3: this job is preempted.",
        "submitit INFO (2026-11-27 06:40:00,140) - Requeued job 40117 (2 remaining timeouts)",
        "slurmstepd: error: *** STEP 40117.0 ON gpu-node-3 CANCELLED AT 2026-11-27T06:40:00 DUE TO TIME LIMIT ***",
        "    message: 1/4 workers are evicted\n    reason: MPIJobEvicted\n    type: Failed",
        "  Normal  PodEvicted  12s  vc-controller-manager  Start to execute action RestartJob",
        # Karpenter's event for the spot interruption notice of the node's instance, by its reason alone
        "  Warning  SpotInterrupted  90s  karpenter  node/ip-10-0-7-12.ec2.internal",
        "Events: Warning SpotInterrupted node/ip-10-0-7-12 Instance i-0f3a is spot interrupted",
    ],
)
def test_a_scheduler_s_own_words_are_a_preemption_at_the_threshold(line: str) -> None:
    v = decide(incident(line))
    assert (v.pod, v.category, v.retryable) == ("llm-worker-1", "preemption", True)
    assert v.confidence >= PERMANENT


# --- a device named inside a generic exception reaches it ------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: CUDA error: uncorrectable NVLink error detected during the execution",
        "RuntimeError: CUDA error: uncorrectable ECC error encountered",
        "RuntimeError: NCCL communicator failed: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",
        "terminate called after throwing an instance of 'c10::Error'\n  what():  CUDA error: uncorrectable NVLink "
        "error detected during the execution",
        # the same error by its enum's name, as a driver-API wrapper or XLA's runtime prints it
        "RuntimeError: CUDA driver error: CUDA_ERROR_NVLINK_UNCORRECTABLE",
        "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: failed to synchronize: cudaErrorNvlinkUncorrectable",
    ],
)
def test_a_device_named_inside_a_generic_exception_is_hardware_at_the_threshold(line: str) -> None:
    v = decide(incident(line))
    assert (v.pod, v.category, v.retryable) == ("llm-worker-1", "hardware", True)
    assert v.confidence >= PERMANENT


# --- exitcode 1, no error file, the worker's own traceback in the tail ------------------------------------------

TRACEBACK = (
    '[rank4]: Traceback (most recent call last):\n[rank4]:   File "/app/train.py", line 88, in <module>\n'
    "[rank4]:     cfg = load_config(args.config)\n"
    "[rank4]: KeyError: 'warmup_steps'\n"
)


def test_a_program_error_in_the_log_with_exitcode_1_and_no_error_file_reaches_the_threshold() -> None:
    v = decide(incident(TRACEBACK + summary(1)))
    assert (v.pod, v.category, v.retryable) == ("llm-worker-1", "user_code", False)
    assert v.confidence >= PERMANENT


def test_a_carrier_exception_in_the_log_stays_below_the_threshold() -> None:
    log = TRACEBACK.replace("KeyError: 'warmup_steps'", "RuntimeError: shard reader returned 0 bytes") + summary(1)
    v = decide(incident(log))
    assert v.pod == "llm-worker-1"
    assert v.confidence < PERMANENT


def dataloader_traceback(cls: str, detail: str) -> str:
    """A DataLoader re-raising its worker's exception in the training process, then torch's summary."""
    return (
        '[rank4]: Traceback (most recent call last):\n[rank4]:   File "/app/train.py", line 140, in <module>\n'
        "[rank4]:     for batch in loader:\n"
        f"[rank4]: {cls}: Caught {cls} in DataLoader worker process 3.\n"
        "[rank4]: Original Traceback (most recent call last):\n"
        '[rank4]:   File "/app/data/shards.py", line 57, in __getitem__\n'
        f"[rank4]: {cls}: {detail}\n" + summary(1)
    )


# The worker's class is the whole story only when it is the program's own dataset code's (a key, index, type or value
# error); an AssertionError is a check that failed, not why, and an OSError or a connection's error is what the storage
# or the network did under the worker.
@pytest.mark.parametrize(
    ("cls", "detail"),
    [
        ("AssertionError", "expected 1048576 bytes from range request, got 524288"),
        ("AssertionError", ""),
        ("RuntimeError", "shard reader returned 0 bytes"),
    ],
)
def test_a_dataloader_worker_s_check_or_carrier_stays_below_the_threshold(cls: str, detail: str) -> None:
    v = decide(incident(dataloader_traceback(cls, detail)))
    assert v.pod == "llm-worker-1"
    assert v.confidence < PERMANENT


@pytest.mark.parametrize(
    ("cls", "detail"),
    [("KeyError", "'caption'"), ("IndexError", "list index out of range"), ("TypeError", "'NoneType' is not iterable")],
)
def test_a_dataloader_worker_s_program_error_reaches_the_threshold(cls: str, detail: str) -> None:
    v = decide(incident(dataloader_traceback(cls, detail)))
    assert (v.pod, v.category, v.retryable) == ("llm-worker-1", "user_code", False)
    assert v.confidence >= PERMANENT


@pytest.mark.parametrize(
    ("header", "rule", "cap"),
    [
        ("KeyError: Caught KeyError in DataLoader worker process 0.", "dataloader.exception", 1.0),
        ("ValueError: Caught ValueError in DataLoader worker process 7.", "dataloader.exception", 1.0),
        ("AssertionError: Caught AssertionError in DataLoader worker process 23.", "dataloader.carried", 0.85),
        ("OSError: Caught OSError in DataLoader worker process 1.", "dataloader.carried", 0.85),
        ("RuntimeError: Caught RuntimeError in DataLoader worker process 2.", "dataloader.carried", 0.85),
    ],
)
def test_the_dataloader_s_header_is_read_by_its_worker_s_class(header: str, rule: str, cap: float) -> None:
    r = DEFAULT_RULES.classify_message(header, header.split(":", 1)[0])
    assert r is not None and (r.id, r.category, r.max_confidence) == (rule, "user_code", cap)


def test_a_bare_exitcode_1_with_no_traceback_stays_below_the_threshold() -> None:
    v = decide(incident(summary(1)))
    assert (v.pod, v.category) == ("llm-worker-1", "user_code")
    assert v.confidence < PERMANENT


# --- the rules file ---------------------------------------------------------------------------------------------


def test_max_confidence_from_a_rules_file_caps_the_verdict_its_rule_decides(tmp_path: Path) -> None:
    rule = "version: 1\nrules:\n- id: site.shard-store\n  log: 'shard store unreachable'\n  category: infra\n"
    (tmp_path / "plain.yaml").write_text(rule)
    (tmp_path / "capped.yaml").write_text(rule + "  max_confidence: 0.7\n")
    plain = decide(incident("shard store unreachable"), rules=load_rules(tmp_path / "plain.yaml"))
    capped = decide(incident("shard store unreachable"), rules=load_rules(tmp_path / "capped.yaml"))
    assert (capped.pod, capped.category, capped.rule) == ("llm-worker-1", "infra", "site.shard-store")
    assert (plain.confidence, capped.confidence) == (PERMANENT, 0.7)


@pytest.mark.parametrize(
    ("doc", "problem"),
    [
        ({"id": "a", "log": "x", "category": "infra", "max_confidence": 0}, "must be a number in (0, 1]"),
        ({"id": "a", "log": "x", "category": "infra", "max_confidence": 1.5}, "must be a number in (0, 1]"),
        ({"id": "a", "log": "x", "category": "infra", "max_confidence": "high"}, "must be a number in (0, 1]"),
        ({"id": "a", "log": "x", "category": "infra", "max_confidence": True}, "must be a number in (0, 1]"),
        (
            {"id": "a", "log": "x", "secondary": "peer", "max_confidence": 0.5},
            "only applies to a rule with a 'category'",
        ),
    ],
)
def test_a_bad_max_confidence_is_refused_with_the_rule_named(doc: dict[str, object], problem: str) -> None:
    with pytest.raises(RulesError, match="rule #1") as err:
        rule_from_dict(doc, source="site.json")
    assert problem in str(err.value)


def test_every_built_in_cap_sits_below_the_permanent_threshold() -> None:
    capped = [r for r in DEFAULT_RULES.rules if r.max_confidence < 1.0]
    assert capped and all(r.max_confidence < PERMANENT and r.is_primary for r in capped)


def test_the_docs_list_every_rule_that_may_reach_the_threshold_and_every_capped_one() -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "engine.md").read_text(encoding="utf-8")
    section = docs[docs.index("### Which verdicts may reach 0.9") :]
    section = section[: section.index("The values are judgements per decision path")]
    listed = set(re.findall(r"`([a-z0-9]+\.[a-z0-9.-]+)`", section))
    # a weak hang of the rank's own (its stack dump, its stuck watchdog) reaches 0.9 when it is alone among known echoes
    may_reach = {
        r.id for r in DEFAULT_RULES.rules if r.is_primary and not r.generic and (not r.weak or r.category == "hang")
    }
    assert may_reach <= listed, sorted(may_reach - listed)
    assert {r.id for r in DEFAULT_RULES.rules if r.max_confidence < PERMANENT} <= listed


# --- more words of launchers, clouds and victims -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "category"),
    [
        ('"statusReason": "Host EC2 (instance i-0f3c1a2b) terminated."', "preemption"),
        ("Worker exit type: SYSTEM_ERROR Worker exit detail: Owner's node has crashed.", "node_lost"),
    ],
)
def test_a_reclaimed_host_and_a_crashed_node_are_their_own_failures(line: str, category: str) -> None:
    v = decide(incident(line))
    assert (v.pod, v.category) == ("llm-worker-1", category)


@pytest.mark.parametrize(
    "victim",
    [
        # A framework guessing at a preemption somewhere else is a victim, not a preemption of its own.
        "An error was raised. This may be due to a preemption in a connected worker or parameter server.",
        "mpirun detected that one or more processes exited with non-zero status, thus causing\nthe job to be "
        "terminated.",
        "An MPI communication peer process has unexpectedly disconnected.\n  Local host: node-a\n  Peer host: node-b",
        "[1,0]<stderr>:Stalled ranks:\n[1,0]<stderr>:3: [horovod_allreduce.17]",
        "mpirun noticed that process rank 2 with PID 0 on node llm-worker-2 exited on signal 9 (Killed).",
    ],
)
def test_victims_words_do_not_make_the_victim_the_root(victim: str) -> None:
    root = "FileNotFoundError: [Errno 2] No such file or directory: '/mnt/shared/ckpt/step_1200.pt'"
    members = (
        member("llm-worker-0", 0, victim),
        member("llm-worker-1", 1, root),
        member("llm-worker-2", 2, victim),
    )
    v = decide(Incident(JobRef("ml", "llm"), 3, members))
    assert (v.pod, v.category) == ("llm-worker-1", "infra")
    assert [assess(m).role for m in (members[0], members[2])] == ["secondary", "secondary"]


def test_a_library_s_name_in_a_stack_frame_is_not_a_missing_library() -> None:
    gdb = (
        "(gdb) thread apply all bt\n"
        "#0  0x00007f3e1c2d4434 in ?? () from /lib64/libcuda.so.1\n"
        "#1  0x00007f3e1c1372af in ?? () from /lib64/libcuda.so.1\n"
        "#2  0x00007f3e3e63c2e8 in cudaStreamSynchronize () from /usr/local/cuda/lib64/libcudart.so.12\n"
    )
    v = decide(incident(gdb))
    assert (v.pod, v.category) == ("llm-worker-1", "hang")
    missing = decide(incident("ImportError: libcuda.so.1: cannot open shared object file: No such file or directory"))
    assert (missing.pod, missing.category, missing.retryable) == ("llm-worker-1", "infra", True)


# --- a bare exit status names no family; the program's usage error does ----------------------------------------


@pytest.mark.parametrize(
    ("root_log", "exit_code", "category"),
    [
        # exit 2: argparse's usage error, but also a launcher's failed exec (errno 2, ENOENT), Python unable to open
        # its script, a shell builtin misused
        ("step 40 loss 2.21", 2, "user_code"),
        (summary(2), 1, "user_code"),
        # exit 127: a command not found, or the dynamic loader missing a library the binary needs; 126: not
        # executable, also a mount without exec
        ("step 40 loss 2.21", 127, "user_code"),
        ("step 40 loss 2.21", 126, "user_code"),
        # exit 138: a process killed by SIGUSR1, also a scheduler's warning signal before the time limit
        ("step 40 loss 2.21", 138, "user_code"),
        # exit 128 without the kubelet's StartError: also git's fatal error status (an entrypoint's clone)
        ("step 40 loss 2.21", 128, "infra"),
    ],
)
def test_a_bare_exit_status_stays_below_the_permanent_threshold(root_log: str, exit_code: int, category: str) -> None:
    v = decide(incident(root_log, exit_code=exit_code))
    assert (v.pod, v.category) == ("llm-worker-1", category)
    assert v.confidence < PERMANENT


USAGE = "usage: train.py [-h] [--lr LR] [--epochs N] [--rank RANK] --data DATA\n"


@pytest.mark.parametrize(
    ("root_log", "category", "reaches"),
    [
        # the program's command-line parser refusing its arguments (argparse's error(), click's usage errors): 0.9
        (f"{USAGE}train.py: error: unrecognized arguments: --epoch 3", "user_code", True),
        (f"{USAGE}[rank0]: train.py: error: the following arguments are required: --data", "user_code", True),
        (f"{USAGE}train.py: error: argument --rank: invalid int value: ''", "user_code", True),
        (
            "Usage: train.py [OPTIONS]\nTry 'train.py --help' for help.\n\nError: No such option: --epoch",
            "user_code",
            True,
        ),
        # a program that could not be started for a missing path: the platform's, or the command's (below 0.9)
        (
            "slurmstepd: error: execve(): deepspeed: No such file or directory\n"
            "srun: error: node-7: task 3: Exited with exit code 2",
            "infra",
            False,
        ),
        (
            "/opt/conda/bin/python3: can't open file '/workspace/train.py': [Errno 2] No such file or directory",
            "infra",
            False,
        ),
    ],
)
def test_an_exit_status_2_is_read_by_the_words_beside_it(root_log: str, category: str, reaches: bool) -> None:
    v = decide(incident(root_log, exit_code=2))
    assert (v.pod, v.category, v.retryable) == ("llm-worker-1", category, category != "user_code")
    assert (v.confidence >= PERMANENT) == reaches


# --- a capped reading split by meaning: the words only one family prints reach 0.9, their neighbours stay below -------


def raised(line: str) -> str:
    """A worker's traceback ending in `line` (torch's frames, then the exception), then torch's summary."""
    return (
        '[rank4]: Traceback (most recent call last):\n[rank4]:   File "/app/train.py", line 140, in <module>\n'
        "[rank4]:     loss.backward()\n"
        '[rank4]:   File "/opt/conda/lib/python3.11/site-packages/torch/_tensor.py", line 626, in backward\n'
        f"[rank4]: {line}\n" + summary(1)
    )


@pytest.mark.parametrize(
    ("root_log", "reaches"),
    [
        # torch's own checks of the program, raised as a carrier RuntimeError: the model's structure (DDP's reducer),
        # the group the program asked for, the backend a torch build does not have — the same on every retry
        (
            raised(
                "RuntimeError: Expected to mark a variable ready only once. This error is caused by one of the "
                "following reasons: 1) Use of a module parameter outside the `forward` function."
            ),
            True,
        ),
        (
            raised("RuntimeError: The new group's rank should be within the world_size set by init_process_group"),
            True,
        ),
        # torch's own spelling in some versions ("within the the world_size")
        (
            raised("RuntimeError: The new group's rank should be within the the world_size set by init_process_group"),
            True,
        ),
        (raised("RuntimeError: Distributed package doesn't have NCCL built in"), True),
        # SageMaker model parallel's words for more processes on a node than it has GPUs (torch's "invalid device
        # ordinal" in another library)
        (
            raised("RuntimeError: The number of node-local MPI processes 8 cannot be larger than the device count 4"),
            True,
        ),
        # NCCL's check of the rank and size the launch passed to ncclCommInitRank
        (
            "trainer-1:812:812 [0] init.cc:1090 NCCL WARN Invalid rank requested : 4/4\n" + summary(1),
            True,
        ),
        ("trainer-1:812:812 [0] init.cc:1422 NCCL WARN Invalid rank requested : -1/8\n" + summary(1), True),
        # neighbours that stay below: DDP's model check compares sizes all-gathered from the peers, and a peer's
        # aborted collective (a straggler timed out) hands back zeros that read as a different model
        (
            raised(
                "RuntimeError: DDP expects same model across all ranks, but Rank 4 has 180 params, while rank 0 has "
                "inconsistent 0 params."
            ),
            False,
        ),
        # a collective's root refused by a communicator that is already destroyed (its size -1): that break's echo
        (
            "trainer-1:812:901 [0] misc/argcheck.cc:39 NCCL WARN AllReduce : invalid root 0 (root should be in the "
            "0..-1 range)\n" + summary(1),
            False,
        ),
    ],
)
def test_torch_s_and_nccl_s_checks_of_the_job_reach_the_threshold_their_neighbours_do_not(
    root_log: str, reaches: bool
) -> None:
    v = decide(incident(root_log))
    assert (v.pod, v.category, v.retryable) == ("llm-worker-1", "user_code", False)
    assert (v.confidence >= PERMANENT) == reaches
