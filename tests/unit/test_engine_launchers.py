"""What launchers and frameworks print about a failure that is not a worker's own exception: an MPI launcher's
report of another process's death (mpirun, mpiexec, Hydra), a launcher's word that a worker exited non-zero, a
framework's label lines. The texts are written for these tests in the formats the tools print; each member is read the
way a pod watch sees it (the log tail and the exit code, no error file)."""

from __future__ import annotations

import dataclasses

import pytest
from support.members import member

from podmortem.core.assess import assess
from podmortem.core.engine import decide
from podmortem.core.errorfile import exception_type_of
from podmortem.core.model import LOW_CONFIDENCE, Incident, JobRef, Member

WATCHDOG = (
    "[rank1]:[E ProcessGroupNCCL.cpp:563] [Rank 1] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=42, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600031 milliseconds "
    "before timing out.\n"
)
PEER_CLOSED = "w:1:2 [0] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer w-9<4242>\n"


def _incident(*members: Member) -> Incident:
    return Incident(job=JobRef("ml", "j", "PyTorchJob"), world_size=len(members), members=members)


def test_a_framework_s_label_line_is_no_exception() -> None:
    """TensorFlow prints the op an error happened in as "Node: 'name'"; Horovod's victims print it before their
    shutdown message. A label, not an exception of their own."""
    assert exception_type_of("Node: 'DistributedAdam_Allreduce/cond/HorovodAllreduce_grads_0'") == ""
    assert exception_type_of("KeyError: 'labels'") == "KeyError"
    log = (
        '  File "<string>", line 107, in horovod_allreduce\n'
        "Node: 'HorovodAllreduce_grads_0'\n"
        "Horovod has been shut down. This was caused by an exception on one of the ranks or an attempt to allreduce, "
        "allgather or broadcast a tensor after one of the ranks finished execution.\n"
    )
    f = assess(member("w-0", 0, log))
    assert (f.role, f.secondary) == ("secondary", "peer")


def test_a_worker_that_left_no_error_file_exited_on_its_own_while_its_peers_waited() -> None:
    """torchelastic's warning for a worker that failed without an error file names its exit code: the pod's own
    failure in words of its own, not a hang among the peers that timed out waiting for it."""
    log = (
        "CHILD PROCESS FAILED WITH NO ERROR_FILE\n"
        "Child process 48529 (local_rank 0) FAILED (exitcode 1)\n"
        "Error msg: Process failed with exitcode 1\n"
    )
    v = decide(_incident(member("w-0", 0, WATCHDOG), member("w-1", 1, log), member("w-2", 2, PEER_CLOSED)))
    assert (v.pod, v.category) == ("w-1", "user_code")


OMPI_KILLED = (
    "Primary job  terminated normally, but 1 process returned\n"
    "a non-zero exit code. Per user-direction, the job has been aborted.\n"
    "--------------------------------------------------------------------------\n"
    "mpirun noticed that process rank 3 with PID 4711 on node {host} exited on signal {sig} ({name}).\n"
    "--------------------------------------------------------------------------\n"
)
HYDRA_KILLED = (
    "===================================================================================\n"
    "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n"
    "=   RANK 2 PID 9665 RUNNING AT {host}\n"
    "=   EXIT CODE: {sig}\n"
    "=   CLEANING UP REMAINING PROCESSES\n"
    "===================================================================================\n"
)


@pytest.mark.parametrize(
    ("report", "category"),
    [
        (OMPI_KILLED.format(host="gpu-17", sig=9, name="Killed"), "host_oom"),
        (OMPI_KILLED.format(host="gpu-17", sig=11, name="Segmentation fault"), "crash"),
        (HYDRA_KILLED.format(host="gpu-17", sig=9), "host_oom"),
        (HYDRA_KILLED.format(host="gpu-17", sig=139), "crash"),
    ],
)
def test_an_mpi_launcher_s_report_of_a_death_is_that_process_s_own_failure(report: str, category: str) -> None:
    """The launcher reports the process it saw die and the signal it died of; the process itself printed nothing (a
    SIGKILL, a SIGSEGV). Its peers timed out or lost it: they are its victims, not a hang. No member hosts the reported
    process here: the member whose log carries the report. Never certain: the launcher's word is second-hand."""
    v = decide(_incident(member("w-0", 0, WATCHDOG), member("w-1", 1, PEER_CLOSED), member("w-2", 2, report)))
    assert (v.pod, v.category) == ("w-2", category)
    assert v.confidence < LOW_CONFIDENCE


def test_an_mpi_launcher_s_report_blames_the_member_that_hosts_the_rank() -> None:
    """An MPIJob's launcher prints the report; the rank ran on a worker, whose own log shows it hosts that rank (or is
    the host the report names)."""
    hosting = "[rank3]: step 88 loss 1.93\n[rank3]: step 89 loss 1.91\n"
    report = OMPI_KILLED.format(host="gpu-17", sig=9, name="Killed")
    v = decide(_incident(member("w-0", 0, report), member("w-1", 1, hosting), member("w-2", 2, PEER_CLOSED)))
    assert (v.pod, v.category) == ("w-1", "host_oom")
    by_host = OMPI_KILLED.format(host="w-2", sig=11, name="Segmentation fault")
    v = decide(_incident(member("w-0", 0, by_host), member("w-1", 1, WATCHDOG), member("w-2", 2, PEER_CLOSED)))
    assert (v.pod, v.category) == ("w-2", "crash")


def test_an_mpi_launcher_s_report_yields_to_a_failure_in_words_of_its_own() -> None:
    """A member's own exception says more than the launcher's report of the process that died of it."""
    own = "Traceback (most recent call last):\n  File \"t.py\", line 3\nKeyError: 'labels'\n"
    report = OMPI_KILLED.format(host="gpu-17", sig=9, name="Killed")
    v = decide(_incident(member("w-0", 0, report), member("w-1", 1, own), member("w-2", 2, PEER_CLOSED)))
    assert (v.pod, v.category) == ("w-1", "user_code")


@pytest.mark.parametrize(
    "warning",
    [
        "misc/argcheck.cc:39 NCCL WARN Broadcast : invalid root 4 (root should be in the 0..3 range)",
        "misc/argcheck.cc:47 NCCL WARN AllReduce : invalid type 12",
        "misc/argcheck.cc:30 NCCL WARN AllGather : recvbuff argument is NULL",
    ],
)
def test_nccl_s_argument_check_is_the_program_s_call(warning: str) -> None:
    """NCCL warns of the argument it refused before the collective returns ncclInvalidArgument; the rank then exits.
    The program's call, the same on every retry; a warning line alone stays below the threshold."""
    log = f"w1:126624:126758 [1] {warning}\nw1:126624:126758 [1] NCCL INFO enqueue.cc:1450 -> 4\n"
    v = decide(_incident(member("w-0", 0, WATCHDOG), member("w-1", 1, log), member("w-2", 2, PEER_CLOSED)))
    assert (v.pod, v.category, v.retryable) == ("w-1", "user_code", False)
    assert v.confidence < 0.9


def test_an_mpi_launcher_s_report_that_names_no_member_yields_to_one_that_exited_without_words() -> None:
    """The report names a host no member is on; a member exited non-zero without a word: it may be the process the
    report names (its words lost), so the report does not pick the member that carries it. The report still names a
    member by its address."""
    report = OMPI_KILLED.format(host="10.9.9.9", sig=9, name="Killed")
    exited = member("w-1", 1, "")
    v = decide(_incident(member("w-0", 0, report), exited, member("w-2", 2, PEER_CLOSED)))
    assert v.pod == "w-1"
    by_ip = OMPI_KILLED.format(host="10.0.0.3", sig=9, name="Killed")
    members = [member("w-0", 0, by_ip), exited, member("w-2", 2, PEER_CLOSED)]
    members = [dataclasses.replace(m, pod_ip=f"10.0.0.{m.rank + 1 if m.rank is not None else 0}") for m in members]
    v = decide(_incident(*members))
    assert (v.pod, v.category) == ("w-2", "host_oom")


@pytest.mark.parametrize(
    ("status", "category"),
    [("3221225477", "crash"), ("-1073741819", "crash"), ("3221225725", "crash"), ("3221226505", "crash")],
)
def test_a_windows_worker_s_crash_status_is_its_native_crash(status: str, category: str) -> None:
    """A Windows process that crashed exits with the exception's NTSTATUS (0xC0000005 access violation, 0xC00000FD
    stack overflow, 0xC0000409 a fail-fast abort); a subprocess launcher prints it as a number: a native crash, as
    SIGSEGV is, not an exit code of the program's own."""
    log = (
        "Traceback (most recent call last):\n"
        '  File "launch.py", line 704, in simple_launcher\n'
        "subprocess.CalledProcessError: Command '['python.exe', 'train.py']' returned non-zero exit status "
        f"{status}.\n"
    )
    v = decide(_incident(member("w-0", 0, PEER_CLOSED), member("w-1", 1, log)))
    assert (v.pod, v.category) == ("w-1", category)


def test_paddle_s_older_launcher_saying_a_trainer_aborted_is_the_pod_s_own_exit() -> None:
    """paddle's launch_utils prints "ABORT!!! ... the trainer process with rank=[N] was aborted" when a trainer it
    started returned non-zero, then exits 1: the pod's own exit in the launcher's words, as torchrun's "failed
    (exitcode: 1)" is — more than a member that exited 1 without a word."""
    log = (
        "INFO 2031-02-03 04:05:06,100 launch_utils.py:307] terminate all the procs\n"
        "ERROR 2031-02-03 04:05:06,101 launch_utils.py:545] ABORT!!! Out of all 8 trainers, the trainer process with "
        "rank=[5] was aborted. Please check its log.\n"
    )
    assert assess(member("w-2", 2, log)).source == "log"
    v = decide(_incident(member("w-0", 0, ""), member("w-1", 1, WATCHDOG), member("w-2", 2, log)))
    assert (v.pod, v.category, v.retryable) == ("w-2", "user_code", False)


STORE_CLIENTS_LEFT = (
    "[I101 09:00:01.100000000 TCPStoreLibUvBackend.cpp:120] [c10d - debug] Read callback failed. code:-4095 name:EOF "
    "desc:end of file\n"
    "[I101 09:00:01.300000000 TCPStoreLibUvBackend.cpp:120] [c10d - debug] Read callback failed. code:-104 "
    "name:ECONNRESET desc:connection reset by peer\n"
)


def test_the_store_s_debug_trace_of_clients_leaving_is_no_echo() -> None:
    """The store server traces each client connection that closes at c10d's debug level; every client closes its
    connection as its worker exits, whoever failed. Not a lost store: the launcher's word that the worker exited 1
    is what the pod says of itself."""
    assert assess(member("w-0", 0, STORE_CLIENTS_LEFT)).role != "secondary"
    own = STORE_CLIENTS_LEFT + (
        "E0101 09:00:01.400000 7 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) "
        "local_rank: 0 (pid: 42) of binary: /usr/bin/python3\n"
    )
    v = decide(_incident(member("w-0", 0, own), member("w-1", 1, ""), member("w-2", 2, WATCHDOG)))
    assert (v.pod, v.category) == ("w-0", "user_code")


def test_an_mpi_launcher_s_report_in_the_log_of_a_member_that_only_exited_is_its_own() -> None:
    """Hydra's banner without the rank: its carrier's only words are the report, so it reads as a bare exit. No other
    member exited without words (the others lost the store or timed out): the process the report names can only be
    the carrier's, and the report says how it ended."""
    hydra = (
        "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n"
        "=   PID 4242 RUNNING AT box-7\n"
        "=   EXIT CODE: 9\n"
        "=   CLEANING UP REMAINING PROCESSES\n"
    )
    store = "torch.distributed.DistStoreError: wait timeout after 600000ms, keys: /default_pg/0//cuda//0\n"
    v = decide(_incident(member("w-0", 0, store), member("w-1", 1, hydra, exit_code=9), member("w-2", 2, WATCHDOG)))
    assert (v.pod, v.category) == ("w-1", "host_oom")


def test_an_mpi_launcher_s_report_of_the_process_whose_crash_the_log_shows_is_that_crash() -> None:
    """Open MPI's signal handler in the crashing process prints "[host:pid] *** Process received signal ***"; mpirun's
    report names the same PID on the same node. One process's crash, this log's own — not a peer's death it echoes.
    A report of another PID beside the banner stays the launcher's word about another process."""
    banner = (
        "[box-3:5151] *** Process received signal ***\n"
        "[box-3:5151] Signal: Segmentation fault (11)\n"
        "[box-3:5151] Signal code: Address not mapped (1)\n"
        "[box-3:5151] *** End of error message ***\n"
    )
    noticed = (
        "mpirun noticed that process rank 1 with PID {pid} on node box-3 exited on signal 11 (Segmentation fault)\n"
    )
    own = banner + noticed.format(pid=5151)
    f = assess(member("w-1", 1, own))
    assert (f.role, f.category) == ("primary", "crash")
    v = decide(_incident(member("w-0", 0, WATCHDOG), member("w-1", 1, own), member("w-2", 2, PEER_CLOSED)))
    assert (v.pod, v.category) == ("w-1", "crash")
    other = assess(member("w-1", 1, banner + noticed.format(pid=6262)))
    assert other.role == "secondary"


MSRUN = "[WARNING] ME(77:281,MainProcess):2031-01-02-03:04:05.000.000 [process_entity/_api.py:318]"


def test_msrun_saying_a_worker_exited_is_the_pod_s_own_exit_and_the_nodes_it_lists_are_the_lost_ones() -> None:
    """MindSpore's msrun watches the workers it started on its node: "There's worker exits with exception, kill all
    other workers" is the pod's own exit in the launcher's words. Reading its scheduler's log, it lists the nodes the
    scheduler stopped hearing from ("Time out nodes are ['3']"): another member went away, and this pod's exit is its
    echo. An empty list names nobody."""
    own = f"{MSRUN} There's worker exits with exception, kill all other workers.\n"
    f = assess(member("w-1", 1, own))
    assert (f.role, f.source, f.category) == ("primary", "log", "user_code")
    v = decide(_incident(member("w-0", 0, ""), member("w-1", 1, own), member("w-2", 2, WATCHDOG)))
    assert v.pod == "w-1"
    listed = "[ERROR] ME(77:281,MainProcess):2031-01-02-03:04:31.000.000 [_api.py:431] Time out nodes are {}\n"
    lost = assess(member("w-1", 1, own + listed.format("['3']")))
    assert (lost.role, lost.secondary) == ("secondary", "peer")
    none = own + listed.format("[]")
    assert assess(member("w-1", 1, none)).role == "primary"


LOST_DAEMON = (
    "--------------------------------------------------------------------------\n"
    "{who} has lost communication with a remote daemon.\n\n"
    "  HNP daemon   : [[{job},0],0] on node mpi-launcher\n"
    "  Remote daemon: [[{job},0],2] on node {host}\n\n"
    "This is usually due to either a failure of the TCP network\n"
    "connection to the node, or possibly an internal failure of\n"
    "the daemon itself. We cannot recover from this failure, and\n"
    "therefore will terminate the job.\n"
)


@pytest.mark.parametrize(
    "report",
    [
        LOST_DAEMON.format(who="ORTE", job=5150, host="gpu-rack4-17"),
        LOST_DAEMON.format(who="PRTE", job="prterun-mpi-launcher-81@0", host="10.3.0.44"),
        # the banner cut off after its first line: no node named
        "step 300 loss 0.4\nORTE has lost communication with a remote daemon.\n",
    ],
)
def test_an_mpi_launcher_losing_a_node_s_daemon_is_that_node_lost_not_a_hang(report: str) -> None:
    """mpirun lost the daemon that ran a node's processes: the node went away (or the way to it); the ranks that timed
    out or lost a peer waited for it. No member is that node here: the member whose log carries the report, unsure."""
    v = decide(_incident(member("w-0", 0, WATCHDOG), member("w-1", 1, PEER_CLOSED), member("w-2", 2, report)))
    assert (v.pod, v.category, v.retryable) == ("w-2", "node_lost", True)
    assert v.confidence < LOW_CONFIDENCE


def test_an_mpi_launcher_s_lost_daemon_blames_the_member_on_the_node_it_names() -> None:
    report = LOST_DAEMON.format(who="ORTE", job=5150, host="w-1")
    v = decide(_incident(member("w-0", 0, report), member("w-1", 1, "", exit_code=137), member("w-2", 2, WATCHDOG)))
    assert (v.pod, v.category) == ("w-1", "node_lost")


def test_a_process_s_death_report_says_more_than_the_lost_daemon_after_it() -> None:
    """The launcher saw the process die of SIGKILL, then lost that node's daemon: the death, as it reports it."""
    report = OMPI_KILLED.format(host="gpu-17", sig=9, name="Killed") + LOST_DAEMON.format(
        who="ORTE", job=5150, host="gpu-17"
    )
    v = decide(_incident(member("w-0", 0, WATCHDOG), member("w-1", 1, PEER_CLOSED), member("w-2", 2, report)))
    assert (v.pod, v.category) == ("w-2", "host_oom")


# --- a process's start failing in words no echo prints, beside the peers that waited for it ------------------------


def _beside_waiters(root_log: str, exit_code: int = 1) -> tuple[str | None, str | None, bool | None, float]:
    """The verdict on a job whose w-1 printed `root_log` while w-0 and w-2 timed out in a collective waiting for it."""
    v = decide(
        _incident(
            member("w-0", 0, WATCHDOG.replace("rank1", "rank0").replace("Rank 1", "Rank 0")),
            member("w-1", 1, root_log, exit_code=exit_code),
            member("w-2", 2, WATCHDOG.replace("rank1", "rank2").replace("Rank 1", "Rank 2")),
        )
    )
    return v.pod, v.category, v.retryable, v.confidence


@pytest.mark.parametrize(
    "line",
    [
        "E1104 09:12:01.000417  7 add_port.cc:83] Failed to add port to server:\n"
        "    No address added out of total 1 resolved for '[::]:9411'",
        "RuntimeError: Failed to bind to address [::]:50051; set GRPC_VERBOSITY=debug environment variable to see "
        "detailed error message.",
        "jaxlib.xla_extension.XlaRuntimeError: UNKNOWN: Failed to start RPC server",
        "tensorflow.python.framework.errors_impl.UnknownError: Could not start gRPC server",
    ],
)
def test_a_grpc_server_that_cannot_listen_is_the_node_s_port_below_the_threshold(line: str) -> None:
    """gRPC's, JAX's and TensorFlow's words for a server that could not listen: the port taken on the node, most often
    (a malformed address in the job's config prints them too). Its SIGSEGV on the way out is not the cause."""
    for code in (1, 139):
        pod, category, retryable, confidence = _beside_waiters(f"starting the coordinator\n{line}\n", code)
        assert (pod, category, retryable) == ("w-1", "infra", True)
        assert confidence < 0.9


def test_a_segfault_status_beside_an_error_line_no_rule_reads_stays_below_the_threshold() -> None:
    """The status says how the process ended; an error of its own logged before it may say why."""
    said = "E1104 09:12:01.000417  7 loader.cc:41] Unable to frobnicate the shard index\n"
    pod, category, retryable, confidence = _beside_waiters(said, 139)
    assert (pod, category, retryable) == ("w-1", "crash", False)
    assert confidence < 0.9
    # ...and without such a line, a bare SIGSEGV is the native crash it was
    assert _beside_waiters("step 9 loss 1.2\n", 139)[3] >= 0.9


@pytest.mark.parametrize(
    "line",
    [
        "malloc_consolidate(): invalid chunk size",
        "malloc_consolidate(): unaligned fastbin chunk detected",
        "malloc(): unaligned tcache chunk detected",
        "free(): invalid next size (fast)",
        "free(): double free detected in tcache 2",
        "double free or corruption (!prev)",
        "corrupted size vs. prev_size",
        "munmap_chunk(): invalid pointer",
    ],
)
def test_glibc_s_heap_checks_are_the_process_s_crash_before_the_echoes_beside_them(line: str) -> None:
    """glibc aborts a process whose heap it finds corrupted; a store's complaint or a timeout the same process printed
    before it is what its dying looked like from inside, not the failure."""
    tail = (
        "[rank1]:[W1104 09:12:01.000417 ProcessGroupNCCL.cpp:1662] [PG ID 0 PG GUID 0 Rank 1] Failed to check the "
        '"should dump" flag on TCPStore, (maybe TCPStore server has shut down too early), with error: failed to '
        f"recv, got 0 bytes\n{line}\n"
    )
    assert _beside_waiters(tail, 134)[:3] == ("w-1", "crash", False)


@pytest.mark.parametrize(
    "report",
    [
        "(raylet) A worker died or was killed while executing a task by an unexpected system error. To troubleshoot "
        "the problem, check the logs for the dead worker. Worker exit type: SYSTEM_ERROR Worker exit detail: Worker "
        "unexpectedly exits with a connection error code 2. End of file.",
        "2024-03-17 03:17:31,000\tWARNING worker.py:1072 -- A worker died or was killed while executing task "
        "ffffffffffffffff0a1b2c3d.",
    ],
)
def test_ray_s_report_of_a_killed_worker_is_the_root_before_the_timeout_it_caused(report: str) -> None:
    """The raylet reporting a worker of its node dead of a system error, then a collective of the same job timing out
    in that log: the timeout is the death's consequence."""
    tail = f"generate:   3%|          | 4/128\n{report}\n{WATCHDOG}"
    assert _beside_waiters(tail)[:3] == ("w-1", "host_oom", False)


def test_ray_s_report_of_a_worker_stopped_by_sigterm_stays_a_teardown() -> None:
    stopped = (
        "(raylet) A worker died or was killed while executing a task by an unexpected system error. Worker exit "
        "type: SYSTEM_ERROR Worker exit detail: Worker exits unexpectedly by a signal. SystemExit is raised "
        "(sys.exit is called). Exit code: 1. The process receives a SIGTERM.\n"
    )
    f = assess(member("w-1", 1, stopped))
    assert (f.role, f.secondary) == ("secondary", "teardown")


@pytest.mark.parametrize(("status", "category"), [(137, "host_oom"), (139, "crash"), (-9, "host_oom")])
def test_horovod_s_word_that_a_process_exited_with_a_status_is_a_launcher_report(status: int, category: str) -> None:
    """Horovod's gloo launcher prints "Process N exit with status code S." as each process it ran ends non-zero: the
    status of a process killed by a signal is 128 + the signal (a negative one, the signal itself)."""
    tail = (
        f"Process 1 exit with status code {status}.\n"
        "Traceback (most recent call last):\n"
        '  File "/usr/local/bin/horovodrun", line 8, in <module>\n'
        "    sys.exit(run_commandline())\n"
    )
    assert _beside_waiters(tail, 1)[:3] == ("w-1", category, False)


@pytest.mark.parametrize(
    "line",
    [
        "Exception in device=TPU:2: xrt_local_service.cc:56 : Check failed: NewServer(def, &server) == OK "
        "(PERMISSION_DENIED: open(/dev/accel2): Operation not permitted vs. OK)",
        "F1104 09:12:01.000417  7 tpu_driver.cc:120] Couldn't open device: /dev/accel0; could not create driver",
        "RuntimeError: TPU initialization failed: open(/dev/accel1): Device or resource busy",
    ],
)
def test_a_tpu_device_file_the_container_cannot_open_is_the_node_s(line: str) -> None:
    """libtpu unable to open the node's /dev/accelN (not mapped into the container, not permitted, held by another
    process): the node's state, whatever the traceback after it says."""
    tail = f'{line}\nTraceback (most recent call last):\n  File "/usr/lib/xla_multiprocessing.py", line 315\n'
    assert _beside_waiters(tail)[:3] == ("w-1", "infra", True)


@pytest.mark.parametrize(
    "line",
    [
        # accelerate's launcher checking the port it hands its ranks before it starts them
        "ConnectionError: Tried to launch distributed communication on port `29500`, but another process is "
        "utilizing it. Please specify a different port (such as using the `--main_process_port` flag or specifying a "
        "different `main_process_port` in your config file) and rerun your script.",
        "ConnectionError: Tried to launch distributed communication on port `12355`, but another process is "
        "utilizing it. To automatically use the next open port (on a single node), you can set this to `0`.",
    ],
)
def test_a_launcher_s_own_word_that_its_port_is_taken_is_the_node_s(line: str) -> None:
    """The launcher found another process listening on the port before starting any rank: what EADDRINUSE means, in
    its own sentence, behind its traceback. The node's state (a leftover run, another job), retryable on a free port;
    below the threshold, as a runtime's own words for a port are."""
    tail = (
        "Traceback (most recent call last):\n"
        '  File "/opt/conda/bin/accelerate", line 8, in <module>\n'
        "    sys.exit(main())\n"
        '  File "/opt/conda/lib/python3.11/site-packages/accelerate/utils/launch.py", line 190, in '
        "prepare_multi_gpu_env\n"
        "    raise ConnectionError(\n"
        f"{line}\n"
    )
    pod, category, retryable, confidence = _beside_waiters(tail)
    assert (pod, category, retryable) == ("w-1", "infra", True)
    assert confidence < 0.9


def test_a_report_s_aligned_fields_are_no_exceptions() -> None:
    """kubectl describe (and any report laid out in columns) sets each field's value apart after its colon; Python
    prints one space after an exception's type. The pod's own state in the report is what reads it."""
    assert exception_type_of("Name:           j-worker-0") == ""
    assert exception_type_of("Status:\t\tPending") == ""
    assert exception_type_of("InternalError:  Blas GEMM launch failed") == "InternalError"
    assert exception_type_of("Name: j-worker-0") == "Name"
    log = (
        "$ kubectl describe pod j-worker-0\n"
        "Name:           j-worker-0\n"
        "Namespace:      ml\n"
        "Status:         Pending\n"
        "Containers:\n"
        "  trainer:\n"
        "    State:          Waiting\n"
        "      Reason:       ImagePullBackOff\n"
    )
    f = assess(member("w-0", 0, log))
    assert (f.role, f.category, f.rule.id if f.rule else "") == ("primary", "infra", "log.kube-warnings")
    assert f.rule is not None and f.rule.weak


ORTE_NO_DAEMON = (
    '[w-0:00412] Warning: could not find environment variable "LD_PRELOAD"\n{}\n'
    "--------------------------------------------------------------------------\n"
    "ORTE was unable to reliably start one or more daemons.\n"
    "This usually is caused by:\n"
)
OOB_UNCONNECTED = (
    "------------------------------------------------------------\n"
    "{}\n"
    "  Local host:    node-a7\n"
    "  Remote host:   node-b3\n"
    "This is usually caused by a firewall on the remote host. Please\n"
    "check that any firewall (e.g., iptables) has been disabled and\n"
    "try again.\n"
    "------------------------------------------------------------\n"
)


@pytest.mark.parametrize(
    ("tail", "category"),
    [
        # mpirun starts its daemon on each other host through ssh; that host's shell not finding it: the MPI
        # installation is not on the PATH a non-interactive shell sees (the image or the job's environment)
        (ORTE_NO_DAEMON.format("bash: orted: command not found"), "user_code"),
        (ORTE_NO_DAEMON.format("sh: 1: orted: not found"), "user_code"),
        (ORTE_NO_DAEMON.format("zsh: command not found: orted"), "user_code"),
        (ORTE_NO_DAEMON.format("bash: /opt/openmpi-4.1/bin/orted: No such file or directory"), "user_code"),
        (ORTE_NO_DAEMON.format("bash: prted: command not found"), "user_code"),
        # MPICH's Hydra starts its proxy by the absolute path of its own install
        ("bash: /opt/mpich-4.1/bin/hydra_pmi_proxy: No such file or directory\n", "user_code"),
        # its out-of-band channel (ORTE's, PRRTE's) tried every address the peer published and none connected: the
        # path between the hosts, a firewall most often (a host that is down reads the same)
        (
            OOB_UNCONNECTED.format("A process or daemon was unable to complete a TCP connection\nto another process:"),
            "network",
        ),
        (OOB_UNCONNECTED.format("A daemon was unable to complete a TCP connection\nto another daemon:"), "network"),
    ],
)
def test_open_mpi_s_daemons_that_did_not_start_say_why_in_their_own_words(tail: str, category: str) -> None:
    """Open MPI's banner that its daemons did not start lists several causes; the word before it (the remote shell's,
    the out-of-band channel's) says which. Never certain, and retryable as the family is."""
    pod, got, retryable, confidence = _beside_waiters(tail)
    assert (pod, got, retryable) == ("w-1", category, category == "network")
    assert confidence < 0.9


def test_horovod_s_hosts_without_an_interface_in_common_is_the_network() -> None:
    """horovodrun has each host probe the next one's interfaces before the job starts; none reached by all: the path
    between the hosts (or the interfaces given), whatever exception type carries it."""
    tail = (
        "Traceback (most recent call last):\n"
        '  File "/opt/venv/bin/horovodrun", line 8, in <module>\n'
        "Exception: Unable to find a set of common task-to-task communication interfaces: "
        "[(0, {'ib0': [('192.168.7.2', 41234)]}), (1, {'eth0': [('10.1.0.9', 40111)]})]\n"
    )
    pod, category, retryable, confidence = _beside_waiters(tail)
    assert (pod, category, retryable) == ("w-1", "network", True)
    assert confidence < 0.9


@pytest.mark.parametrize("name", ["[[29973,1],2]", "[prterun-gpu-a-77@1,2]", "[prterun-gpu-a-77,2]"])
def test_open_mpi_s_first_non_zero_exit_names_its_rank_in_either_runtime_s_words(name: str) -> None:
    """mpirun names the first process that exited non-zero: ORTE by its job family, job and rank, PRRTE (Open MPI 5)
    by its job's namespace and rank. Either way the member that hosts that rank is the one that failed."""
    report = (
        "prterun detected that one or more processes exited with non-zero status,\nthus causing the job to be "
        f"terminated. The first process to do so was:\n\n   Process name: {name}\n   Exit code:    3\n"
    )
    hosting = "[rank2]: epoch 3 step 120 loss 0.71\n"
    v = decide(_incident(member("w-0", 0, report), member("w-1", 1, WATCHDOG), member("w-2", 2, hosting)))
    assert (v.pod, v.category, v.retryable) == ("w-2", "user_code", False)


def test_open_mpi_s_report_of_an_unnamed_non_zero_exit_is_a_process_s_own_failure() -> None:
    """mpirun's "1 process returned a non-zero exit code" names neither the process nor its code: a process of the
    job ended non-zero, as much as a bare exit code says (the program's, weakly) — not a hang among the peers that
    waited, even beside a member that exited without words. Its log carries the processes' own output."""
    report = (
        "step 12 done\n"
        "--------------------------------------------------------------------------\n"
        "Primary job  terminated normally, but 1 process returned\n"
        "a non-zero exit code. Per user-direction, the job has been aborted.\n"
        "--------------------------------------------------------------------------\n"
    )
    v = decide(_incident(member("w-0", 0, WATCHDOG), member("w-1", 1, report), member("w-2", 2, "")))
    assert (v.pod, v.category, v.retryable) == ("w-1", "user_code", False)
    assert v.confidence < LOW_CONFIDENCE


@pytest.mark.parametrize("stamp", ["", "Mon Jul  3 09:14:07 2023"])
def test_horovod_s_rank_tag_on_each_line_hides_no_exception(stamp: str) -> None:
    """horovodrun's own runners tag each line a process prints with its rank and stream ("[2]<stderr>:"), after the
    time with --prefix-output-with-timestamp: the traceback under the tags is the process's own."""
    lines = [
        "[2]<stdout>:epoch 1",
        "[2]<stderr>:Traceback (most recent call last):",
        '[2]<stderr>:  File "/work/train.py", line 40, in <module>',
        "[2]<stderr>:    lookup[name]",
        "[2]<stderr>:KeyError: 'resnet18'",
    ]
    tail = "".join(f"{stamp}{line}\n" for line in lines) + "Process 2 exit with status code 1.\n"
    pod, category, retryable, _ = _beside_waiters(tail)
    assert (pod, category, retryable) == ("w-1", "user_code", False)
    assert assess(member("w-1", 1, tail)).exception_type == "KeyError"
