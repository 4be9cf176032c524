"""Victims recognised by what their words mean, whatever the launcher: a rank that only waited for the rendezvous
store or a coordination service, lost a peer, timed out in a collective, or was told to stop is an echo, and never
outranks a member that failed on its own. A failure that names its cause outranks an exception whose words name
none when their times cannot be told apart, and a member that only exited makes no close call. The texts are written
for these tests in the formats the tools print."""

from __future__ import annotations

import pytest
from support.common import GLOO_PEER
from support.members import T0, member

from podmortem.core.assess import assess
from podmortem.core.engine import decide
from podmortem.core.model import Incident, JobRef
from podmortem.core.rules import DEFAULT_RULES

PERMANENT = 0.9


def cascade(root_log: str, victim_log: str, root_exit: int = 1, victim_first: bool = True) -> Incident:
    """A root beside two copies of one victim; the victims end a second earlier (times give no help)."""
    early = T0 - 1 if victim_first else T0
    return Incident(
        JobRef("ml", "llm"),
        3,
        (
            member("llm-worker-0", 0, victim_log, finished=early),
            member("llm-worker-1", 1, root_log, exit_code=root_exit),
            member("llm-worker-2", 2, victim_log, finished=early),
        ),
    )


# --- the store or a coordination service never answered --------------------------------------------------------

STORE_CREATE_TIMEOUT = (
    "Traceback (most recent call last):\n"
    '  File "/opt/venv/lib/python3.9/site-packages/torch/distributed/distributed_c10d.py", line 602, in '
    "init_process_group\n"
    "    store, rank, world_size = next(rendezvous_iterator)\n"
    '  File "/opt/venv/lib/python3.9/site-packages/torch/distributed/rendezvous.py", line 161, in '
    "_env_rendezvous_handler\n"
    "    store = TCPStore(master_addr, master_port, world_size, start_daemon, timeout)\n"
    "RuntimeError: Connection timed out"
)
OLD_STORE_CONNECT = STORE_CREATE_TIMEOUT.replace(
    "RuntimeError: Connection timed out", "RuntimeError: connect() timed out."
)
FILE_STORE_WAIT = (
    '  File "/srv/job/launch.py", line 41, in setup\n'
    '    dist.init_process_group("gloo", init_method="file:///shared/rdzv/job-17", rank=3, world_size=4)\n'
    "RuntimeError: Wait timeout"
)
XLA_BARRIER = (
    '  File "/opt/venv/lib/python3.11/site-packages/jax/_src/distributed.py", line 97, in initialize\n'
    "    self.client.connect()\n"
    "jaxlib.xla_extension.XlaRuntimeError: DEADLINE_EXCEEDED: Barrier timed out. Barrier_id: PjRT_Client_Connect. "
    "Timed out task names:\n/job:jax_worker/replica:0/task:2"
)
COORDINATION_AGENT = (
    "2026-11-27 06:40:00.118: E external/xla/xla/pjrt/distributed/client.cc:121] Coordination service agent in error "
    "status: DEADLINE_EXCEEDED: Deadline Exceeded"
)
COORDINATION_FATAL = (
    "F1127 06:40:00.118200 4411 client.h:80] Terminating process because the JAX distributed service detected fatal "
    "errors. This most likely indicates that another task died; see the other task logs for more details."
)


@pytest.mark.parametrize(
    "victim",
    [STORE_CREATE_TIMEOUT, OLD_STORE_CONNECT, FILE_STORE_WAIT, XLA_BARRIER, COORDINATION_AGENT, COORDINATION_FATAL],
)
def test_a_rank_that_only_waited_for_the_store_or_the_coordinator_is_an_echo(victim: str) -> None:
    assert assess(member("v", 0, victim)).role == "secondary"
    root = "slurmstepd: error: *** STEP 40117.0 ON gpu-node-3 CANCELLED AT 2026-11-27T06:40:00 DUE TO TIME LIMIT ***"
    v = decide(cascade(root, victim))
    assert (v.pod, v.category, v.retryable) == ("llm-worker-1", "preemption", True)


def test_a_configuration_error_raised_while_the_store_is_created_stays_the_program_s_own() -> None:
    log = STORE_CREATE_TIMEOUT.replace(
        "RuntimeError: Connection timed out",
        "ValueError: Error initializing torch.distributed using env:// rendezvous: environment variable MASTER_ADDR "
        "expected, but not set",
    )
    f = assess(member("p", 0, log))
    assert (f.role, f.category) == ("primary", "user_code")


# --- a collective that timed out, in other launchers' and runtimes' words ---------------------------------------


@pytest.mark.parametrize(
    "victim",
    [
        "EI0006: 2026-11-27-06:40:00.118.201 Getting socket times out. Reason: Remote Rank did not send the data in "
        "time. Please check the reason for the rank being stuck",
        "EI0002: The wait execution of the Notify register times out. Reason: The Notify register has not received the "
        "Notify record from remote rank [3].",
        "[rank2]:[E1127 06:40:00.118 ProcessGroupNCCL.cpp:1721] [PG ID 0 PG GUID 0(default_pg) Rank 2] failure "
        "detected "
        "by watchdog at work sequence id: 918 PG status: last enqueued work: 918, last completed work: 917",
        "[rank2]:[E1127 06:40:00.118 ProcessGroupNCCL.cpp:1709] [PG 0 Rank 2] Timeout at NCCL work: 918, last enqueued "
        "NCCL work: 918, last completed NCCL work: 917.",
    ],
)
def test_a_rank_whose_collective_timed_out_is_an_echo(victim: str) -> None:
    f = assess(member("v", 0, victim))
    assert (f.role, f.secondary) == ("secondary", "timeout")


# --- told to stop ------------------------------------------------------------------------------------------------

STOPPED_THEN_RAISED = (
    "[2026-11-27 06:40:00,118] [INFO] [launch.py:431:sigkill_handler] Killing subprocess 5120\n"
    "Traceback (most recent call last):\n"
    '  File "/opt/venv/lib/python3.10/site-packages/deepspeed/launcher/runner.py", line 560, in sigkill_handler\n'
    "    result_kill = subprocess.Popen(kill_cmd, env=env)\n"
    "AttributeError: 'NoneType' object has no attribute 'pid'"
)


def test_what_a_pod_raises_after_it_was_told_to_stop_is_the_stop_s_echo() -> None:
    f = assess(member("v", 0, STOPPED_THEN_RAISED))
    assert (f.role, f.secondary) == ("secondary", "teardown")
    v = decide(cascade("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB", STOPPED_THEN_RAISED))
    assert (v.pod, v.category) == ("llm-worker-1", "gpu_oom")


@pytest.mark.parametrize(
    "after",
    [
        "W1127 06:40:00.118000 41 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 812 closing "
        "signal SIGTERM",
        # a sibling rank's timeout printed right under it: its echo, not the detail the error carries
        "[rank1]:[E ProcessGroupNCCL.cpp:563] [Rank 1] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=42, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600031 milliseconds before timing out.",
    ],
)
def test_a_program_error_before_the_launcher_stops_the_others_stays_the_pod_s_own(after: str) -> None:
    """A program error is the pod's own whatever follows it: the launcher stopping its other workers, a sibling's
    timeout."""
    log = (
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "/app/train.py", line 51, in <module>\n'
        "[rank0]: AttributeError: 'Trainer' object has no attribute 'optim'\n" + after
    )
    f = assess(member("r", 0, log))
    assert (f.role, f.category) == ("primary", "user_code")


# --- own failures in one family's words: torch's checks of the program's tensors, a node the scheduler lost ------


@pytest.mark.parametrize(
    ("line", "category"),
    [
        (
            "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:1 and "
            "cpu!",
            "user_code",
        ),
        (
            "RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one.",
            "user_code",
        ),
        (
            "RuntimeError: Error(s) in loading state_dict for GPTModel:\n\tsize mismatch for lm_head.weight: copying a "
            "param with shape torch.Size([32000, 2048]) from checkpoint, the shape in current model is "
            "torch.Size([32128, 2048]).",
            "user_code",
        ),
        ("RuntimeError: mat1 and mat2 shapes cannot be multiplied (16x768 and 1024x10)", "user_code"),
        ("srun: error: Node failure on gpu-node-7", "node_lost"),
        ("PBS Job Id: 5510.head\nJob Name:   pretrain\njob preempted (node failure)", "node_lost"),
        (
            "INFO:tensorflow:ShutdownHook: lame workers found: "
            "HeartbeatManager(/job:worker/replica:0/task:3/device:CPU:0)",
            "node_lost",
        ),
    ],
)
def test_one_family_s_words_decide_the_root_at_the_threshold(line: str, category: str) -> None:
    v = decide(cascade(line, GLOO_PEER, victim_first=False))
    assert (v.pod, v.category) == ("llm-worker-1", category)
    assert v.retryable is (category != "user_code")
    assert v.confidence >= PERMANENT


# --- timing: words that name a cause, an exit that names none --------------------------------------------------------

UNKNOWN_VICTIM = (
    '  File "/opt/venv/lib/python3.10/site-packages/meshrt/comm.py", line 212, in wait\n'
    "    raise MeshError(status)\n"
    "meshrt.errors.MeshError: peer group 3 left the mesh"
)


def test_a_cause_named_outranks_an_exception_whose_words_name_none_within_the_timing_uncertainty() -> None:
    root = "RuntimeError: CUDA out of memory. Tried to allocate 1.50 GiB (GPU 0; 79.15 GiB total capacity)"
    v = decide(cascade(root, UNKNOWN_VICTIM))
    assert (v.pod, v.category) == ("llm-worker-1", "gpu_oom")
    assert v.confidence < PERMANENT  # two own failures in one second: said as a close call


def test_a_member_that_only_exited_does_not_make_a_close_call() -> None:
    root = "slurmstepd: error: *** STEP 40117.0 ON gpu-node-3 CANCELLED AT 2026-11-27T06:40:00 DUE TO TIME LIMIT ***"
    v = decide(cascade(root, "", victim_first=True))
    assert (v.pod, v.category) == ("llm-worker-1", "preemption")
    assert v.confidence >= PERMANENT


def test_a_worker_that_exited_1_while_its_peers_waited_is_the_root_not_a_hang() -> None:
    root = (
        "E1127 06:39:58.118000 41 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) "
        "local_rank: 3 (pid: 812) of binary: /usr/bin/python3"
    )
    waited = (
        "[rank0]:[E1127 06:40:00.118 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=41, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600081 milliseconds "
        "before timing out."
    )
    v = decide(cascade(root, waited))
    assert (v.pod, v.category, v.retryable) == ("llm-worker-1", "user_code", False)


# --- more schedulers' words, and a stuck kernel looked at with cuda-gdb --------------------------------------------


@pytest.mark.parametrize(
    ("line", "category"),
    [
        ('    <a n="MyType"><s>JobEvictedEvent</s></a>', "preemption"),
        ("004 (4411.000.000) 11/27 06:40:00 Job was evicted.", "preemption"),
        ('  "reason": "PreemptionByKubeScheduler",', "preemption"),
        (
            "024 (4411.000.000) 11/27 06:40:00 Job reconnection failed\n    Job not found at execution machine",
            "node_lost",
        ),
        (
            "(cuda-gdb) cuda thread 64\n[Switching focus to CUDA kernel 0, grid 118, block (0,0,0), thread (64,0,0)]",
            "hang",
        ),
    ],
)
def test_a_pool_s_eviction_a_lost_execute_host_and_a_kernel_looked_at_in_cuda_gdb(line: str, category: str) -> None:
    v = decide(cascade(line, "", victim_first=False))
    assert (v.pod, v.category) == ("llm-worker-1", category)


@pytest.mark.parametrize(
    ("victim", "kind"),
    [
        (
            "[E1127 06:40:00.118 TCPStore.cpp:411] Timed out after 601 seconds waiting for clients. 3/4 clients "
            "joined.",
            "store",
        ),
        ("[rank: 2] Received SIGTERM: 15", "teardown"),
        ("srun: Job step aborted: Waiting up to 32 seconds for job step to finish.", "teardown"),
        ("./run_pretrain.sh: line 9:  4411 Terminated              python pretrain.py", "teardown"),
        ("step 4100 loss 2.117\nTerminated", "teardown"),
    ],
)
def test_the_store_s_server_and_stopped_launchers_are_echoes(victim: str, kind: str) -> None:
    f = assess(member("v", 0, victim))
    assert (f.role, f.secondary) == ("secondary", kind)


def test_a_nic_completion_with_an_error_status_is_the_network() -> None:
    line = "NET/IBP:Got completion from peer 10.0.4.7<40123> with status=12 opcode=0 len=0 vendor err 129 (Send)"
    v = decide(cascade(line, "", victim_first=False))
    assert (v.pod, v.category, v.retryable) == ("llm-worker-1", "network", True)


@pytest.mark.parametrize(
    ("line", "category"),
    [
        ("=>> PBS: job killed: walltime 86431 exceeded limit 86400", "preemption"),
        ("Job <4411> exited: TERM_RUNLIMIT: job killed after reaching LSF run time limit.", "preemption"),
        ("JobId=4411 JobName=pretrain JobState=TIMEOUT Reason=TimeLimit", "preemption"),
        ("  Warning  DeadlineExceeded  job-controller  Job was active longer than specified deadline", "preemption"),
        ('  "reason": "Evicted",', "preemption"),
        ("  Ready  Unknown  NodeStatusUnknown  Kubelet stopped posting node status.", "node_lost"),
        ("  Normal  NodeNotReady  node-controller  Node gpu-node-7 status is now: NodeNotReady", "node_lost"),
    ],
)
def test_time_limits_evictions_and_silent_nodes_in_more_schedulers_words(line: str, category: str) -> None:
    v = decide(cascade(line, "", victim_first=False))
    assert (v.pod, v.category) == ("llm-worker-1", category)


@pytest.mark.parametrize(
    ("line", "category"),
    [
        ("TERM_MEMLIMIT: job killed after reaching LSF memory usage limit.\nExited with exit code 130.", "host_oom"),
        ("Aborted by PBS Server\nJob exceeded its walltime limit. Job was aborted", "preemption"),
        (
            "RuntimeError: Bad StatusOr access: RESOURCE_EXHAUSTED: Error allocating device buffer: Attempting to "
            "allocate 512.00M. That was not possible. There are 301.12M free.; (0x0x0_HBM0)",
            "gpu_oom",
        ),
        (
            "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Ran out of memory in memory space hbm. Used 17.2G",
            "gpu_oom",
        ),
        ("EJ0001: Failed to initialize the HCCP process. Reason: Maybe the last training process is running.", "infra"),
    ],
)
def test_a_memory_limit_a_walltime_an_accelerator_s_memory_and_a_device_still_held(line: str, category: str) -> None:
    v = decide(cascade(line, "", victim_first=False))
    assert (v.pod, v.category) == ("llm-worker-1", category)


@pytest.mark.parametrize(
    "victim",
    [
        "[W tensorpipe_agent.cpp:726] RPC agent for trainer2 encountered error when reading incoming request from "
        "trainer0: eof (this error originated at tensorpipe/transport/uv/connection_impl.cc:132)",
        'E1127 06:40:00.118 master_session.cc:1372] RunStep error: Unavailable: {"created":"@1800000000.1",'
        '"description":"EOF","file":"tcp_posix.cc","file_line":235,"grpc_status":14}',
    ],
)
def test_a_peer_s_socket_closing_under_rpc_and_grpc_is_an_echo(victim: str) -> None:
    f = assess(member("v", 0, victim))
    assert (f.role, f.secondary) == ("secondary", "peer")


@pytest.mark.parametrize(
    "root",
    [
        "ValueError: num_key_value_heads (6) must divide num_attention_heads (32)",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "FileNotFoundError: [Errno 2] No such file or directory: '/mnt/ckpt/step_900/model.safetensors'",
    ],
)
def test_a_program_error_or_a_capped_cause_also_goes_before_a_carrier_exception(root: str) -> None:
    v = decide(cascade(root, UNKNOWN_VICTIM))
    assert v.pod == "llm-worker-1"


# --- a live member's words when another died, hung or was stopped, in runtimes and launchers beyond torch's ---------
# Each is what a healthy member prints; a root that only exited 1 (no words of its own) ends after them, so a victim
# read as a failure of its own would take the root.

OTHER_RUNTIMES_VICTIMS = [
    # JAX's coordination service: the leader task (its host) gone; tasks that stopped sending heartbeats; a collective
    # cancelled because a participant is no longer connected
    (
        "jaxlib.xla_extension.XlaRuntimeError: UNAVAILABLE: Failed to send RPC to coordination service. Either the "
        "leader task was preempted/died/restarted unexpectedly or this task is experiencing network issues.",
        "store",
    ),
    (
        "E1127 06:40:00.118 41 coordination_service_agent.cc:332] Polled an error from coordination service (this can "
        "be an error from this or another task).\n"
        "jaxlib.xla_extension.XlaRuntimeError: UNAVAILABLE: The following tasks are unhealthy (stopped sending "
        "heartbeats):\n/job:jax_worker/replica:0/task:5\nThe tasks have crashed. Check the task logs for an earlier "
        "error, or scheduler events (e.g. preemption, eviction) to debug further.",
        "peer",
    ),
    ("jaxlib._jax.XlaRuntimeError: FAILED_PRECONDITION: Task with incarnation id 77 is not connected", "peer"),
    # Ascend HCCL's cluster monitor: a remote rank's heartbeat lost
    (
        "there are(is) 1 abnormal device(s):\n    Cluster Exception Location[IP/ID]:[10.0.0.9/3], Arrival Time:[Fri "
        "Nov 27 06:40:00 2026], Discoverer:[10.0.0.2/1], ExceptionType:[Heartbeat Lost Occurred], Possible Reason:1. "
        "Process has exited, 2. Network Disconnected",
        "peer",
    ),
    # PaddlePaddle: a parameter server doubting a trainer is alive (then aborting); a trainer told to stop by glog's
    # signal handler and Paddle's own summary
    (
        "PaddleCheckError: the latest update of worker 2 is 600 secs ago, we doubt the worker is not alive and this "
        "may have a bad effect on the fitting result\n*** SIGABRT (@0x3e8) received by PID 88 (TID 0x7f11) from PID "
        "88; stack trace: ***",
        "peer",
    ),
    (
        "FatalError: `Termination signal` is detected by the operating system.\n  [SignalInfo: *** SIGTERM (@0x3e8) "
        "received by PID 88 (TID 0x7f11) from PID 12 ***]",
        "teardown",
    ),
    # TensorFlow: a ring all-reduce aborted on a closed socket; gRPC unable to reach a remote task
    (
        "2026-11-27 06:40:00.118: E tensorflow/core/common_runtime/ring_reducer.cc:369] Aborting RingReduce with "
        "Unavailable: Socket closed",
        "peer",
    ),
    ("tensorflow.python.framework.errors_impl.UnavailableError: failed to connect to all addresses", "peer"),
    # Horovod: its launcher stopping the others after one process failed; an older stall report naming the rank
    ("Terminating remaining workers after failure of Process 5.", "peer"),
    ("HorovodAllreduce_grads_dense_kernel_0 [missing ranks: 4]", "timeout"),
    # UCX (under Open MPI, Horovod, NCCL's UCX plugin): the peer closed its end
    ("[node-0:00077] pml_ucx.c:812 Error: mca_pml_ucx_send_nbr failed: -25, Connection reset by remote peer", "peer"),
    ("[1800000000.118] [node-0:77:0] sock.c:344 UCX  ERROR recv(fd=33) failed: Connection reset by peer", "peer"),
    # Ray and Dask: the actor or the peer it called is gone
    ("ray.exceptions.ActorUnavailableError: The actor 9f0e is unavailable: connection lost.", "peer"),
    ("distributed.comm.core.CommClosedError: in <TCP (closed) Worker.gather_dep remote=tcp://w2>", "peer"),
    ("2026-11-27 06:40:00 - distributed.worker - ERROR - Worker stream died during communication: tcp://w2", "peer"),
    # torch elastic's agent told to stop (older Pythons print the signal's enum name); srun stopping a step
    (
        "W1127 06:40:00.118 41 torch/distributed/elastic/agent/server/api.py:719] Received Signals.SIGTERM death "
        "signal, shutting down workers",
        "teardown",
    ),
    ("srun: launch/slurm: _step_signal: Terminating StepId=4012.0", "teardown"),
    # MPI launchers: mpirun passing on the SIGTERM it was sent; Hydra's mpiexec after one of its processes died
    ("mpirun: Forwarding signal 15 to job", "teardown"),
    (
        "[mpiexec@node-0] HYDT_bscu_wait_for_completion (tools/bootstrap/utils/bscu_wait.c:76): one of the processes "
        "terminated badly; aborting",
        "peer",
    ),
    # JAX's shutdown barrier that some task never reached; torch RPC's call to another worker unanswered in time
    ("jaxlib.xla_extension.XlaRuntimeError: INTERNAL: Shutdown barrier has failed.", "store"),
    (
        "RuntimeError: RPCErr:1:RPC ran for more than set timeout (60000 ms) and will now be marked with an error",
        "timeout",
    ),
    # the watchdog's exception known only by its origin; an agent's traceback cut off inside the rendezvous
    ("Exception raised from checkTimeout at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:618", "timeout"),
    (
        '  File "/opt/venv/lib/python3.9/site-packages/torch/distributed/elastic/rendezvous/etcd_rendezvous.py", '
        "line 152, in next_rendezvous",
        "store",
    ),
    # any runtime saying in plain words that another member died, or that it timed out waiting for one
    ("RuntimeError: shard exchange failed: another worker exited before sending its part", "peer"),
    ("fleetrt.SyncError: timed out after 600 s waiting for peers to reach step 1200", "timeout"),
    ("meshrt.CollectiveError: allgather on group 'dp' timed out after 1800 s", "timeout"),
    ("WARNING trainer: barrier timeout at step 1200, shutting down", "timeout"),
    ("swarm.errors.LinkError: lost connection to the coordinator at 10.0.0.1:7077", "store"),
    ("E1127 06:40:00 agent.cc:88] unable to reach the head node: deadline passed", "store"),
    ("INFO launcher: received SIGTERM, stopping the training loop", "teardown"),
    ("fleetrt.Stopped: worker terminated by signal 15", "teardown"),
]


@pytest.mark.parametrize(("victim", "kind"), OTHER_RUNTIMES_VICTIMS)
def test_what_a_live_member_of_another_runtime_prints_is_an_echo(victim: str, kind: str) -> None:
    f = assess(member("v", 0, victim))
    assert (f.role, f.secondary) == ("secondary", kind)
    v = decide(cascade("", victim))
    assert v.pod == "llm-worker-1"


@pytest.mark.parametrize(
    "line",
    [
        "Either the leader task was preempted/died/restarted unexpectedly or this task has network issues.",
        "Check the task logs for an earlier error, or scheduler events (e.g. preemption, eviction) to debug further.",
        "This indicates that the remote worker has failed, got preempted, or crashed unexpectedly.",
        "The session was closed; this may be due to a preemption in a connected worker.",
    ],
)
def test_a_preemption_named_as_one_possible_cause_is_not_a_preemption(line: str) -> None:
    f = assess(member("v", 0, line))
    assert f.category != "preemption"


def test_a_preemption_stated_as_what_happened_stays_a_preemption() -> None:
    f = assess(
        member("p", 0, "submitit WARNING (2026-11-27 06:40:00) - Bypassing signal SIGTERM: this job is preempted")
    )
    assert f.category == "preemption"


def test_nccl_s_remote_error_keeps_its_reading_beside_the_plain_words_rule() -> None:
    """NCCL's "remote process exited or there was a network error" names two causes: its own rule reads the message
    (a weak network failure), not the rule for a member that says another died."""
    message = "NCCL error: remote process exited or there was a network error"
    rule = DEFAULT_RULES.classify_message(message, "torch.distributed.DistBackendError")
    assert rule is not None and rule.id == "nccl.remote-error"


def test_the_stress_test_s_victims_stay_in_words_no_rule_knows() -> None:
    """`bench.realworld --unknown-victims` measures the decision when no victim's words are known: its echoes must stay
    unknown to the rules (a member left, a session closed: no other member is said to have died)."""
    from bench.realworld import UNKNOWN_ECHOES

    for text in UNKNOWN_ECHOES:
        f = assess(member("v", 0, text))
        assert (f.role, f.rule.generic if f.rule else None) == ("primary", True)


def test_a_rank_s_own_collective_timeout_record_is_not_read_as_a_waiting_peer_s_words() -> None:
    """ProcessGroupNCCL's dump signal "due to a collective timeout from this local rank" is the rank's own record (the
    collective-timeout words read it); the rule for any runtime's timed-out collective does not take it as an echo."""
    line = (
        "[rank1]:[E1127 06:40:00.118 ProcessGroupNCCL.cpp:1743] [PG ID 0 PG GUID 0(default_pg) Rank 1] Received a dump "
        "signal due to a collective timeout from this local rank and we will try our best to dump the debug info."
    )
    f = assess(member("p", 0, line))
    assert f.rule is not None and f.rule.id not in ("log.another-waited", "message.another-waited")


def test_a_remote_endpoint_closing_is_not_read_as_a_member_gone() -> None:
    """The plain-words rule names members of the job (rank, task, worker, node...), not "the remote host", which the
    endpoint of an upload or a download is as well."""
    f = assess(member("p", 0, "ERROR: the remote host closed the connection while uploading checkpoint step_900"))
    assert f.role == "primary"


def test_other_ranks_failing_a_program_s_check_is_the_program_s_error() -> None:
    """A program's own check says "failed" of other ranks too: the plain-words rule reads deaths and departures."""
    f = assess(member("p", 0, "AssertionError: world size mismatch: other ranks failed the shape check"))
    assert (f.role, f.category) == ("primary", "user_code")


def test_horovod_s_stall_report_names_the_rank_the_others_wait_for() -> None:
    """Older Horovod lists each stalled tensor with the ranks it still waits for ("[missing ranks: 1]"): the ranks
    that print it name the stuck one, as the monitored barrier's "from rank 1" does."""
    waiting = "HorovodAllreduce_grads_dense_kernel_0 [missing ranks: 1]"
    stuck = "[rank1]: step 40 loss 2.2\nHorovodAllreduce_grads_dense_kernel_0 [missing ranks: 0, 2]"
    incident = Incident(
        JobRef("ml", "llm"),
        3,
        (
            member("llm-worker-0", 0, waiting, finished=T0 - 1),
            member("llm-worker-1", 1, stuck),
            member("llm-worker-2", 2, waiting, finished=T0 - 1),
        ),
    )
    v = decide(incident)
    assert (v.pod, v.category) == ("llm-worker-1", "hang")


def test_paddle_s_launcher_says_how_each_pod_s_worker_ended() -> None:
    """PaddlePaddle's launcher reports its worker's end as torchrun's agent does ("Container rank 0 status failed cmd
    [...] code -9", negative: a signal): the SIGKILLed worker's pod is the root, the SIGTERMed ones are the teardown."""

    def launcher(rank: int, code: int) -> str:
        return (
            "LAUNCH INFO 2026-11-27 06:40:00,118 Pod failed\n"
            "LAUNCH ERROR 2026-11-27 06:40:00,120 Container failed !!!\n"
            f"Container rank {rank} status failed cmd ['/usr/bin/python3', '-u', 'train.py'] code {code} log "
            f"./log/workerlog.{rank}"
        )

    assert assess(member("v", 0, launcher(0, -15))).secondary == "teardown"
    v = decide(cascade(launcher(1, -9), launcher(0, -15)))
    assert (v.pod, v.category) == ("llm-worker-1", "host_oom")


def test_composer_s_launcher_says_which_pod_s_rank_crashed_and_which_it_stopped() -> None:
    """composer's launcher reports its own rank's end ("Rank 1 crashed with exit code -9.") and then stops the others
    ("Killing global rank 0 (PID 77) with SIGTERM"): the first is the pod's own failure, the second alone a teardown."""
    crashed = (
        "ERROR:composer.cli.launcher:Rank 1 crashed with exit code -9.\n"
        "INFO:composer.cli.launcher:Killing global rank 0 (PID 77) with SIGTERM\n"
        "Waiting up to 30 seconds for all training processes to terminate. Press Ctrl-C to exit immediately."
    )
    stopped = "INFO:composer.cli.launcher:Killing global rank 8 (PID 78) with SIGTERM"
    assert assess(member("v", 0, stopped)).secondary == "teardown"
    v = decide(cascade(crashed, stopped))
    assert (v.pod, v.category) == ("llm-worker-1", "host_oom")


NPU_SYNC_TIMEOUT = (
    "RuntimeError: npuSynchronizeDevice:torch_npu/csrc/core/npu/NPUStream.cpp:401 NPU function error: "
    "aclrtSynchronizeDevice, error code is 507046\n"
    "[ERROR] 2031-01-02-03:04:05 (PID:77, Device:3, RankID:3) ERR00100 PTA call acl api failed\n"
    "EE1002: 2031-01-02-03:04:05.000.001 Stream synchronize timeout. rtDeviceSynchronize execute failed, "
    "reason=[stream sync timeout]\n"
)


def test_an_exception_that_carries_a_timeout_in_its_own_detail_is_the_timeout_s_echo() -> None:
    """torch_npu raises "NPU function error: <call>, error code is N" for any runtime error and prints the runtime's
    reason under it: here the device's stream never finished the work it waited on (a collective, most often). The
    exception names no cause; its detail says the rank waited: an echo, which never outranks a member's own exit."""
    f = assess(member("w-0", 0, NPU_SYNC_TIMEOUT))
    assert (f.role, f.secondary) == ("secondary", "timeout")
    own = (
        "E0101 09:00:01.400000 7 torch/distributed/elastic/multiprocessing/api.py:869] "
        "failed (exitcode: 1) local_rank: 0\n"
    )
    v = decide(cascade(own, NPU_SYNC_TIMEOUT, victim_first=True))
    assert v.pod == "llm-worker-1"


def test_a_sibling_rank_s_echo_under_a_carrier_exception_is_not_its_detail() -> None:
    """Interleaved ranks: an echo another rank prints under this rank's exception is not that exception's detail."""
    log = (
        "[rank0]: RuntimeError: step 88 failed: bad shard header\n"
        "[rank1]: [E ProcessGroupNCCL.cpp:563] [Rank 1] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=42, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600031 milliseconds before timing out.\n"
    )
    assert assess(member("w-0", 0, log)).role == "primary"
    assert assess(member("w-0", 0, NPU_SYNC_TIMEOUT)).role == "secondary"


# --- victims in the words of each runtime's own teardown: read as echoes, never as a failure of their own ----------

# A root whose words name its cause at the threshold: the victims beside it must not take the root from it.
DEVICE_OOM_ROOT = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB (GPU 0; 79.1 GiB total)"


def assert_echo_beside_a_root(victim: str, kind: str) -> None:
    """The victim alone reads as the `kind` echo and, beside a root failing in its own words, leaves it the root."""
    f = assess(member("v", 0, victim))
    assert (f.role, f.secondary) == ("secondary", kind)
    v = decide(cascade(DEVICE_OOM_ROOT, victim))
    assert (v.pod, v.category) == ("llm-worker-1", "gpu_oom")


@pytest.mark.parametrize(
    "victim",
    [
        # NCCL's socket transport: its socket layer says the peer closed or reset its end, then the network plugin's
        # own line that its progress failed (which names no cause)
        "gpu-b:91:140 [2] misc/socket.cc:540 NCCL WARN socketProgressOpt: Connection closed by remote peer "
        "gpu-a<40211>\ngpu-b:91:140 [2] NCCL WARN NET/Socket : socket progress error",
        "gpu-b:91:140 [2] misc/socket.cc:50 NCCL WARN socketProgressOpt: Call to recv from 10.4.0.7<40211> failed : "
        "Connection reset by peer\ngpu-b:91:140 [2] NCCL WARN NET/Socket : socket progress error",
        "gpu-b:91:140 [2] misc/socket.cc:50 NCCL WARN Net : Call to send to 10.4.0.7<40211> failed : Broken pipe\n"
        "gpu-b:91:140 [2] NCCL WARN NET/Socket : socket progress error",
    ],
)
def test_nccl_s_socket_transport_losing_its_peer_is_the_peer_s_echo_not_the_network(victim: str) -> None:
    assert_echo_beside_a_root(victim, "peer")


def test_nccl_s_socket_progress_line_alone_names_no_network_fault() -> None:
    """The network plugin's own line says only that a transfer failed: the socket layer's line before it says why
    (a peer gone, or a network errno, which keeps its reading)."""
    assert assess(member("v", 0, "gpu-b:91:140 [2] NCCL WARN NET/Socket : socket progress error")).category != (
        "network"
    )
    unreachable = (
        "gpu-b:91:140 [2] misc/socket.cc:50 NCCL WARN socketProgressOpt: Call to recv from 10.4.0.7<40211> failed : "
        "No route to host\ngpu-b:91:140 [2] NCCL WARN NET/Socket : socket progress error"
    )
    assert assess(member("v", 0, unreachable)).category == "network"


@pytest.mark.parametrize(
    "victim",
    [
        "[rank3]:[E1127 06:40:00.118 ProcessGroupNCCL.cpp:1600] [PG 0 Rank 3] Received a global timeout from another "
        "rank and will start to dump the debug info. Last enqueued NCCL work: 77, last completed NCCL work: 77.",
        "[rank3]:[E1127 06:40:00.118 ProcessGroupNCCL.cpp:1630] [PG 0 Rank 3] ProcessGroupNCCL's watchdog detected a "
        "collective timeout and notified current rank. This is most likely caused by incorrect usages of collectives",
        # the same exit reason in the process groups other accelerators' vendors derive from ProcessGroupNCCL
        "RuntimeError: ProcessGroupXCCL's watchdog detected a collective timeout on some other rank and notified "
        "current rank. This is most likely caused by incorrect usages of collectives, e.g., wrong sizes",
        "RuntimeError: ProcessGroupHCCL's watchdog detected a dump signal from rank 5 and notified the current rank. "
        "This is most likely caused by incorrect usages of collectives",
    ],
)
def test_a_rank_told_through_the_store_that_another_rank_timed_out_is_the_timeout_s_echo(victim: str) -> None:
    assert_echo_beside_a_root(victim, "timeout")


@pytest.mark.parametrize(
    "victim",
    [
        "jaxlib.xla_extension.XlaRuntimeError: DEADLINE_EXCEEDED: GetKeyValue() timed out with key: "
        "cuda:local_topology/cuda/2 and duration: 5m",
        "E1127 06:40:00.118 77 coordination_service_agent.cc:300] Coordination agent is set to ERROR: ABORTED: Leader "
        "incarnation ID mismatch: the coordination leader has restarted.",
        "E1127 06:40:00.118 77 coordination_service_agent.cc:480] Failed to disconnect from coordination service with "
        "status: UNAVAILABLE: Connection refused\nProceeding with agent shutdown anyway.",
    ],
)
def test_a_task_whose_coordination_service_never_answered_or_restarted_is_the_store_s_echo(victim: str) -> None:
    assert_echo_beside_a_root(victim, "store")


@pytest.mark.parametrize(
    "victim",
    [
        "tensorflow.python.framework.errors_impl.AbortedError: RecvTensor expects a different device incarnation: "
        '881 vs. 902. Your worker job ("/job:worker/replica:0/task:2") was probably restarted.',
        "tensorflow.python.framework.errors_impl.AbortedError: [_Derived_]RecvBuf expects a different device "
        "incarnation: 881 vs. 902.",
        "tensorflow.python.framework.errors_impl.AbortedError: Unable to find a context_id matching the specified one "
        "(5512). Perhaps the worker was restarted, or the context was GC'd?",
        "ERROR:tensorflow:Cluster check alive failed, /job:worker/replica:0/task:0 is down, aborting collectives: "
        "Deadline Exceeded",
        "tensorflow.python.framework.errors_impl.UnavailableError: [_Derived_]Collective ops is aborted by: cluster "
        "check alive failed, /job:worker/replica:0/task:1 is down",
    ],
)
def test_a_tensorflow_worker_finding_a_peer_task_restarted_or_down_is_the_peer_s_echo(victim: str) -> None:
    assert_echo_beside_a_root(victim, "peer")


@pytest.mark.parametrize(
    "error",
    [
        "Input/output error",
        "Transport endpoint is not connected",
        "Connection reset by peer",
    ],
)
def test_an_mpi_fabric_completion_error_is_not_the_storage(error: str) -> None:
    """MPICH's and Intel MPI's OFI layer failing a transfer's completion reports the provider's errno: the fabric's
    (a peer gone or the network), never a file's, whatever errno's words say."""
    log = (
        "Abort(403) on node 2 (rank 2 in comm 0): Fatal error in PMPI_Allreduce: Other MPI error, error stack:\n"
        "PMPI_Allreduce(450)...........: MPI_Allreduce(sbuf=0x1, rbuf=0x2, count=4, MPI_FLOAT, MPI_SUM, comm=0x84) "
        "failed\n"
        f"MPIDI_OFI_handle_cq_error(1075): OFI poll failed (ofi_events.c:1077:MPIDI_OFI_handle_cq_error:{error})"
    )
    f = assess(member("v", 0, log))
    assert f.category != "infra"
    v = decide(cascade(DEVICE_OOM_ROOT, log))
    assert (v.pod, v.category) == ("llm-worker-1", "gpu_oom")


@pytest.mark.parametrize(
    ("victim", "kind"),
    [
        # the coordination service (on the leader task) finding another task back with a new incarnation
        (
            "E1127 06:40:00.118 77 coordination_service.cc:900] /job:jax_worker/replica:0/task:2 unexpectedly tried "
            "to connect with a different incarnation. It has likely restarted.",
            "peer",
        ),
        # ProcessGroupNCCL's monitor ending the process once a collective timed out or failed
        (
            "[rank3]:[F1127 06:40:00.118 ProcessGroupNCCL.cpp:1500] [PG ID 0 PG GUID 0(default_pg) Rank 3] "
            "Terminating the process after attempting to dump debug info, due to collective timeout or exception.",
            "timeout",
        ),
        # the c10d store's client socket failing on the store's end (its host gone)
        (
            "[rank3]:[W1127 06:40:00.118 socket.cpp:460] [c10d] sendBytes failed on SocketImpl(fd=41, "
            "addr=[gpu-b]:50112, remote=[gpu-a]:29500): Broken pipe",
            "store",
        ),
        (
            "[rank3]:[W1127 06:40:00.118 TCPStore.cpp:120] [c10d] recvVector failed on SocketImpl(fd=41, "
            "addr=[gpu-b]:50112, remote=[gpu-a]:29500): Connection timed out",
            "store",
        ),
        # an MPI launcher's banner for a process that exited non-zero, wrapped at another word
        (
            "prterun detected that one or more processes exited with non-zero status,\nthus causing the job to be "
            "terminated. The first process to do so was:\n\n   Process name: [prterun-gpu-a-77@1,2]\n   Exit code: 1",
            "peer",
        ),
        (
            "RuntimeError: Gloo job detected that one or more processes exited with non-zero status, thus causing the "
            "job to be terminated. The first process to do so was:\nProcess name: 1\nExit code: 1",
            "peer",
        ),
        # JAX's distributed client shutting down: its call to the coordination service (another task's) got no answer
        # in time, raised in gRPC's own words for that status
        (
            '  File "/venv/lib/python3.11/site-packages/jax/_src/distributed.py", line 87, in shutdown\n'
            "    self.client.shutdown()\njaxlib.xla_extension.XlaRuntimeError: DEADLINE_EXCEEDED: Deadline Exceeded",
            "timeout",
        ),
    ],
)
def test_a_runtime_s_own_words_for_a_peer_restarted_a_failed_collective_or_a_lost_store(victim: str, kind: str) -> None:
    f = assess(member("v", 0, victim))
    assert (f.role, f.secondary) == ("secondary", kind)


@pytest.mark.parametrize(
    ("said", "kind"),
    [
        ("Socket unexpectedly closed [10.4.0.7]:38211", "peer"),
        ("Remote socket closed during sync read [10.4.0.7]:38211", "peer"),
        ("Pair is not connected ([10.4.0.9]:41002 <--> [10.4.0.7]:38211)", "peer"),
        ("Read timeout [10.4.0.7]:38211", "timeout"),
        ("Write timeout [10.4.0.7]:38211", "timeout"),
    ],
)
def test_gloo_s_transport_about_the_peer_of_a_pair_is_that_peer_s_echo(said: str, kind: str) -> None:
    """gloo's pairs name their peer by address: its socket closed under a read, a pair no longer connected (the peer
    died), a read or a write that got nothing from it in time (this rank waited for it). A connect that timed out is the
    network's (test_engine_stacks): it never reached the peer's host."""
    for where in ("/opt/venv/torch/third_party/gloo/gloo/transport/tcp/pair.cc:312", "gloo/transport/tcp/pair.cc:88"):
        assert_echo_beside_a_root(f"[rank1]: RuntimeError: [{where}] {said}", kind)


@pytest.mark.parametrize(
    "victim",
    [
        "RuntimeError: lost connection to rank 3 while reducing bucket 12",
        "RuntimeError: connection to worker gpu-a:7 dropped during all_gather",
        "ConnectionError: connection closed with peer 10.4.0.7:6000",
        "meshrt.errors.PeerError: peer 10.4.0.7:6000 has disconnected",
        "RuntimeError: rank 3 stopped responding; giving up on the step",
        "RuntimeError: participant task-2 is unreachable",
        "RuntimeError: collective operation was aborted",
        "RuntimeError: the communicator has been revoked",
        "RuntimeError: reduce_scatter aborted because rank 5 crashed",
        "RuntimeError: shutting down the trainer since a worker has failed",
    ],
)
def test_plain_words_that_another_member_went_away_or_aborted_the_collective_are_an_echo(victim: str) -> None:
    """Words of no known runtime that still say another member is gone: a connection to it lost, it disconnected or
    stopped answering, a collective or communicator aborted, the job stopping because a member failed."""
    assert_echo_beside_a_root(victim, "peer")


@pytest.mark.parametrize(
    "launcher",
    [
        "ERROR:root:failure count == 8 -> stop running",
        "ERROR:root:blacklisted slots count == 8 -> stop running",
        "RuntimeError: No hosts from previous set remaining, unable to broadcast state.",
        "RuntimeError: Job has been shutdown, see above error messages for details.",
    ],
)
def test_horovod_s_elastic_driver_stopping_after_its_workers_failed_is_their_echo(launcher: str) -> None:
    assert_echo_beside_a_root(launcher, "peer")


@pytest.mark.parametrize(
    "victim",
    [
        "RuntimeError: step 88: timed out receiving gradients from rank 6",
        "RuntimeError: send to peer 2 timed out after 300 s",
        "RuntimeError: parameter sync with peers timed out",
        "RuntimeError: worker 5 did not respond within 900 seconds",
        "RuntimeError: gave up: no response from rank 6",
        "TimeoutError: barrier 'epoch-end' timed out (ranks missing: [2, 6])",
        "RuntimeError: deadline exceeded: task 4 never arrived at the step barrier",
    ],
)
def test_plain_words_that_it_timed_out_on_a_member_are_the_timeout_s_echo(victim: str) -> None:
    assert_echo_beside_a_root(victim, "timeout")


@pytest.mark.parametrize(
    "own",
    [
        # a launcher's words for its own worker, a check of its own that names a rank, an abort of its own
        "ERROR:composer.cli.launcher:Rank 1 crashed with exit code -9.",
        "RuntimeError: rank 2 failed the shape check: expected 4096, got 4095",
        "RuntimeError: The operation was aborted by the user",
        # a timeout of its own that names no other member, a number beside a duration alone
        "RuntimeError: DataLoader timed out after 120 seconds",
        "[rank3]: TimeoutError: reading shard 12 from s3 timed out",
        "INFO rank 0 finished epoch 3 after 600 s\nValueError: bad label in batch 7",
    ],
)
def test_plain_words_of_a_failure_of_its_own_stay_its_own(own: str) -> None:
    assert assess(member("r", 0, own)).role == "primary"


@pytest.mark.parametrize(
    "stopped",
    [
        "*** SIGTERM received by PID 812 (TID 812) on cpu 11 from PID 1; stack trace: ***",
        "worker: exiting due to SIGTERM",
        "trainer shutting down after SIGINT",
        "supervisor: terminating on signal SIGTERM(15)",
    ],
)
def test_a_process_saying_it_exits_because_it_was_told_to_stop_is_teardown(stopped: str) -> None:
    assert_echo_beside_a_root(stopped, "teardown")


@pytest.mark.parametrize("status", ["Deadline Exceeded (4)", "Socket closed (14)", "Connection reset by peer (14)"])
def test_torch_xla_s_replicas_failing_to_meet_at_a_rendezvous_is_the_store_s_echo(status: str) -> None:
    victim = (
        "RuntimeError: third_party/xla_client/mesh_service.cc:370 : Failed to meet rendezvous "
        f"'torch_xla.core.xla_model.save': {status}"
    )
    assert_echo_beside_a_root(victim, "store")


@pytest.mark.parametrize(
    "victim",
    [
        "[2026-11-27 06:40:00,118 E 77 77] core_worker.cc:612: The GCS server is unreachable. Exiting the worker.",
        "[2026-11-27 06:40:00,118 C 77 77] gcs_client.cc:221: GCS has been unreachable for more than 60 seconds",
        "WARNING: the coordinator became unreachable; stopping the step",
        "ERROR: failed to establish a connection to the rendezvous server at gpu-a:29400",
    ],
)
def test_the_member_that_coordinates_the_job_said_unreachable_first_is_the_store_s_echo(victim: str) -> None:
    assert_echo_beside_a_root(victim, "store")


# --- TensorFlow's collective runtime losing a peer task, and the abort a TF process ends with -----------------------

TF_LATE_PEER = [
    # the collective executor aborting what is in flight because a call to a peer task missed its deadline
    "2026-11-27 06:40:00.118204: E tensorflow/core/common_runtime/base_collective_executor.cc:249] "
    "BaseCollectiveExecutor::StartAbort DEADLINE_EXCEEDED: Deadline Exceeded",
    # (older TensorFlow's words for the same status)
    "2026-11-27 06:40:00.118204: E tensorflow/core/common_runtime/base_collective_executor.cc:217] "
    "BaseCollectiveExecutor::StartAbort Deadline exceeded: Deadline Exceeded",
    # gRPC's deadline on a call to a named task, as TF's runtime passes it on
    "2026-11-27 06:40:00.118204: W tensorflow/core/distributed_runtime/eager/remote_copy_node.cc:120] RecvTensor "
    "failed: DEADLINE_EXCEEDED: Deadline Exceeded\nAdditional GRPC error information from remote target "
    '/job:worker/replica:0/task:2:\n:{"description":"Deadline Exceeded","grpc_status":4}',
]
# What a TF process with a gRPC server prints as it exits, whatever ended it: the server cannot be stopped cleanly
TF_EXIT_ABORT = (
    "2026-11-27 06:40:00.118400: F tensorflow/core/distributed_runtime/rpc/grpc_server_lib.cc:103] Non-OK-status: "
    "Stop() status: {status}: Clean shutdown is not currently implemented\nFatal Python error: Aborted"
)


@pytest.mark.parametrize("victim", TF_LATE_PEER)
def test_tensorflow_s_runtime_giving_up_on_a_late_peer_task_is_the_timeout_echo(victim: str) -> None:
    assert_echo_beside_a_root(victim, "timeout")


@pytest.mark.parametrize("status", ["UNIMPLEMENTED", "Unimplemented"])
@pytest.mark.parametrize("victim", TF_LATE_PEER)
def test_the_abort_a_tf_process_ends_with_after_a_late_peer_is_still_that_echo(victim: str, status: str) -> None:
    log = victim + "\n" + TF_EXIT_ABORT.format(status=status)
    f = assess(member("v", 0, log, exit_code=134))
    assert (f.role, f.secondary) == ("secondary", "timeout")
    v = decide(cascade(DEVICE_OOM_ROOT, log))
    assert (v.pod, v.category) == ("llm-worker-1", "gpu_oom")


def test_tensorflow_s_collective_executor_finding_a_peer_task_unreachable_is_the_peer_s_echo() -> None:
    victim = (
        "2026-11-27 06:40:00.118204: E tensorflow/core/common_runtime/base_collective_executor.cc:249] "
        "BaseCollectiveExecutor::StartAbort UNAVAILABLE: Stream removed"
    )
    assert_echo_beside_a_root(victim, "peer")


def test_a_python_abort_at_interpreter_shutdown_after_a_peer_s_timeout_is_that_echo() -> None:
    log = (
        TF_LATE_PEER[0] + "\nFatal Python error: _enter_buffered_busy: could not acquire lock for "
        "<_io.BufferedWriter name='<stderr>'> at interpreter shutdown, possibly due to daemon threads\n"
        "Python runtime state: finalizing (tstate=0x55d0c1a0)\n\nFatal Python error: Aborted"
    )
    f = assess(member("v", 0, log, exit_code=134))
    assert (f.role, f.secondary) == ("secondary", "timeout")


def test_the_exit_abort_with_nothing_before_it_stays_a_crash() -> None:
    f = assess(member("v", 0, TF_EXIT_ABORT.format(status="UNIMPLEMENTED"), exit_code=134))
    assert (f.role, f.category) == ("primary", "crash")


# --- torch_xla's replicas unable to reach their mesh master, and mp.spawn's report of a child's exit ---------------


@pytest.mark.parametrize(
    "report",
    [
        "torch.multiprocessing.spawn.ProcessExitedException: process 3 terminated with exit code 17",
        "Exception: process 0 terminated with exit code 1",
    ],
)
def test_a_replica_that_could_not_reach_the_mesh_master_is_the_store_s_echo(report: str) -> None:
    victim = (
        "Failed to connect to client mesh master: tpu-vm-0.internal:8477\nTraceback (most recent call last):\n"
        '  File "/srv/train.py", line 88, in <module>\n    xmp.spawn(_mp_fn, nprocs=8)\n' + report
    )
    assert_echo_beside_a_root(victim, "store")


def test_mp_spawn_s_report_of_a_child_s_exit_alone_is_the_pod_s_own_weak_failure() -> None:
    report = "torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with exit code 3"
    f = assess(member("v", 0, report))
    assert (f.role, f.category, f.weak) == ("primary", "user_code", True)


@pytest.mark.parametrize(
    "echo",
    [
        "ERROR:tensorflow:all-reduce timed out waiting for task 2 of job worker",
        "trainer: lost connection to worker 3 during the step",
    ],
)
def test_an_abort_on_the_way_out_is_read_by_what_the_process_said_before_it(echo: str) -> None:
    for exit_abort in (
        TF_EXIT_ABORT.format(status="UNIMPLEMENTED"),
        "Fatal Python error: _enter_buffered_busy: could not acquire lock for <_io.BufferedWriter name='<stdout>'> at "
        "interpreter shutdown, possibly due to daemon threads\nFatal Python error: Aborted",
    ):
        f = assess(member("v", 0, echo + "\n" + exit_abort, exit_code=134))
        assert f.role == "secondary"


# --- a worker killed with no word of its own, as its launcher or Ray reports it -----------------------------------

AGENT_STOPPING_OTHERS = (
    "agent: Sending process 4410 closing signal SIGTERM\nagent: Sending process 4411 closing signal SIGTERM"
)


@pytest.mark.parametrize("code", ["137", "-9"])
def test_horovod_s_launcher_naming_a_first_process_killed_reads_as_that_kill(code: str) -> None:
    report = (
        "RuntimeError: Horovod detected that one or more processes exited with non-zero status, thus causing the job "
        f"to be terminated. The first process to do so was:\nProcess name: trainer-2[1]\nExit code: {code}"
    )
    v = decide(cascade(report, AGENT_STOPPING_OTHERS, root_exit=1, victim_first=False))
    assert (v.pod, v.category, v.retryable) == ("llm-worker-1", "host_oom", False)
    assert v.confidence < PERMANENT


RAY_SYSTEM_KILL = [
    # the raylet's own report (forwarded to the driver), listing the OOM killer's SIGKILL first among its causes, then
    # the driver's call to that worker's actor failing for it
    "(raylet) A worker died or was killed while executing a task by an unexpected system error. To troubleshoot the "
    "problem, check the logs for the dead worker. Worker PID: 7721 Worker exit type: SYSTEM_ERROR Worker exit detail: "
    "Worker unexpectedly exits with a connection error code 2. End of file. There are some potential root causes. (1) "
    "The process is killed by SIGKILL by OOM killer due to high memory usage. (2) ray stop --force is called.\n"
    "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\nThe actor is dead because "
    "its worker process has died.",
    # (Ray 1.x's words for the same report, from the driver)
    "2026-11-27 06:40:00,118\tWARNING worker.py:1072 -- A worker died or was killed while executing task "
    "ffffffffffffffff5c2a0b7e01000000.",
    # an actor's worker that exited in a Kubernetes pod, which Ray puts down to the pod's memory limit
    "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n\tclass_name: Rollout\n"
    "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: Worker "
    "exits unexpectedly. Worker exits with an exit code None. The worker may have exceeded K8s pod memory limits.",
]


@pytest.mark.parametrize("report", RAY_SYSTEM_KILL)
def test_ray_s_report_of_a_worker_the_system_killed_is_host_oom(report: str) -> None:
    f = assess(member("v", 0, report))
    assert (f.role, f.category, f.weak) == ("primary", "host_oom", True)
    v = decide(cascade(report, AGENT_STOPPING_OTHERS, victim_first=False))
    assert (v.pod, v.category) == ("llm-worker-1", "host_oom")
    assert v.confidence < PERMANENT


def test_an_actor_s_death_as_its_caller_sees_it_stays_the_peer_s_echo() -> None:
    caller = (
        "ray.exceptions.RayActorError: The actor died unexpectedly before finishing this task.\n"
        "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: "
        "Worker unexpectedly exits with a connection error code 2. End of file. There are some potential root causes."
    )
    assert (assess(member("v", 0, caller)).secondary) == "peer"


CALLER_OF_A_KILLED_ACTOR = (
    '  File "/srv/rl/controller.py", line 88, in step\n    out = ray.get(refs)\n'
    "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n\tclass_name: Learner\n"
    "\tip: 10.0.3.12\nThe actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker "
    "exit detail: Worker unexpectedly exits with a connection error code 2. End of file. There are some potential "
    "root causes. (1) The process is killed by SIGKILL by OOM killer due to high memory usage. (2) ray stop --force is "
    "called. (3) The worker is crashed unexpectedly due to SIGSEGV or other unexpected errors."
)


@pytest.mark.parametrize(
    "others",
    [
        # the rest of the job's pods torn down after it, and after it the store's clients that lost their server
        "[2026-11-27 06:40:02,118] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 4101",
        "torch.distributed.DistStoreError: Socket Timeout",
    ],
)
def test_when_only_echoes_remain_the_caller_s_report_of_a_worker_killed_for_memory_says_what_ended_it(
    others: str,
) -> None:
    """The caller only lost its actor, and it stays an echo; but when nobody failed on their own, its report of the
    worker killed — the OOM killer named first — is the one account of the death and its cause. Only likely."""
    assert assess(member("v", 0, CALLER_OF_A_KILLED_ACTOR)).secondary == "peer"
    v = decide(cascade(CALLER_OF_A_KILLED_ACTOR, others, victim_first=False))
    assert (v.pod, v.category, v.retryable) == ("llm-worker-1", "host_oom", False)
    assert v.confidence < 0.7


def test_the_caller_s_report_of_a_killed_worker_yields_to_a_failure_of_a_member_s_own() -> None:
    own = 'Traceback (most recent call last):\n  File "/srv/rl/learner.py", line 40, in update\nKeyError: "advantages"'
    v = decide(cascade(own, CALLER_OF_A_KILLED_ACTOR))
    assert (v.pod, v.category) == ("llm-worker-1", "user_code")


@pytest.mark.parametrize(
    "said",
    [
        "Connect timeout [10.4.0.7]:38211",
        "connect [10.4.0.7]:38211: Connection timed out",
        "timed out connecting: SO_ERROR: Connection timed out, remote=[10.4.0.7]:38211",
    ],
)
def test_gloo_s_connect_that_timed_out_leaves_a_root_failing_in_its_own_words_the_root(said: str) -> None:
    """A pair's connect that got no answer is a failure of the network's, below the threshold: beside a member that
    failed in its own words at the threshold, that member stays the root."""
    victim = f"[rank1]: RuntimeError: [/opt/venv/torch/third_party/gloo/gloo/transport/tcp/pair.cc:312] {said}"
    f = assess(member("v", 0, victim))
    assert (f.role, f.category) == ("primary", "network")
    v = decide(cascade(DEVICE_OOM_ROOT, victim))
    assert (v.pod, v.category) == ("llm-worker-1", "gpu_oom")


# --- a peer gone in the words of gRPC's transport, TensorFlow's graph manager, a native runtime's fatal log line and
# absl's signal-safe log: echoes beside a root that failed in its own words, and beside one that said nothing --------


def assert_echo_beside_any_root(victim: str, kind: str) -> None:
    """The victim is the `kind` echo beside a root failing in its own words, and beside a root whose log says nothing
    (its container only exited 1): two victims that end a second earlier leave it the root."""
    assert_echo_beside_a_root(victim, kind)
    v = decide(cascade("", victim))
    assert v.pod == "llm-worker-1"


@pytest.mark.parametrize(
    "victim",
    [
        # a Python client's streaming call, the server's end gone (gRPC's status details for the dropped stream)
        "Traceback (most recent call last):\n"
        '  File "/srv/fl/client.py", line 64, in run\n    reply = next(replies)\n'
        "grpc._channel._MultiThreadedRendezvous: <_MultiThreadedRendezvous of RPC that terminated with:\n"
        "\tstatus = StatusCode.UNKNOWN\n"
        '\tdetails = "Stream removed"\n'
        '\tdebug_error_string = "{"description":"Error received from peer ipv4:10.4.0.7:8080","grpc_status":2}"\n'
        ">",
        # ...a unary call that found it gone
        "grpc._channel._InactiveRpcError: <_InactiveRpcError of RPC that terminated with:\n"
        "\tstatus = StatusCode.UNAVAILABLE\n"
        '\tdetails = "Stream removed"\n'
        ">",
        # TensorFlow's runtime raising the status its call to a worker task ended with
        "tensorflow.python.framework.errors_impl.UnavailableError: Stream removed\n"
        "Additional GRPC error information from remote target /job:worker/replica:0/task:2",
    ],
)
def test_a_grpc_call_whose_stream_the_transport_removed_is_the_peer_s_echo(victim: str) -> None:
    assert_echo_beside_any_root(victim, "peer")


@pytest.mark.parametrize(
    "victim",
    [
        "tensorflow.python.framework.errors_impl.AbortedError: Graph handle is not found: 7d2e51a09c1b44f2. "
        "Possibly, this worker just restarted.",
        "2026-11-27 06:40:00.118200: W tensorflow/core/distributed_runtime/master_session.cc:1801] Cleanup partition "
        "error: ABORTED: Graph handle is not found: 0000a1b2c3d4e5f6. Possibly, this worker just restarted.",
        # ...the same status from a step run on the worker (GraphMgr::ExecuteAsync says it without the guess)
        "tensorflow.python.framework.errors_impl.AbortedError: Graph handle is not found: 00000000000a3f1c",
        "2026-11-27 06:40:00.118200: W tensorflow/core/distributed_runtime/master_session.cc:1525] RunStep failed: "
        "Aborted: Graph handle is not found: 0000000000000042",
    ],
)
def test_a_worker_telling_its_caller_that_it_just_restarted_is_the_peer_s_echo(victim: str) -> None:
    assert_echo_beside_any_root(victim, "peer")


@pytest.mark.parametrize(
    "wrapper",
    [
        # Spark's executor wrapping the exception its Python worker raised; the tail ends before the inner one
        "26/11/27 06:40:00 ERROR Executor: Exception in task 3.0 in stage 1.0 (TID 7)\n"
        "org.apache.spark.api.python.PythonException: Traceback (most recent call last):",
        # ...PySpark's own class for it, raised in the driver
        "pyspark.errors.exceptions.captured.PythonException: \n"
        "  An exception was thrown from the Python worker. Please see the stack trace below.\nTraceback (most recent "
        "call last):",
    ],
)
def test_a_wrapper_of_a_python_worker_s_exception_does_not_outrank_a_pod_s_own_failure(wrapper: str) -> None:
    # The wrapper says a Python worker raised something, not what: beside a pod whose launcher reports its own worker
    # failed, ending later, the wrapper's pods are not the root.
    root = (
        "ERROR 2026-11-27 06:40:01,420 launch_utils.py:545] ABORT!!! Out of all 3 trainers, the trainer process with "
        "rank=[1] was aborted. Please check its log."
    )
    v = decide(cascade(root, wrapper))
    assert v.pod == "llm-worker-1"


@pytest.mark.parametrize(
    "fatal",
    [
        # a parameter client refused by the server it names, with and without mpirun's --tag-output prefix
        "F1127 06:40:00.118200  4411 socket_client.cc:395] connection refused by pserver, maybe pserver failed!",
        "Fri Nov 27 06:40:00 2026[1,7]<stderr>:F1127 06:40:00.118200  4411 socket_client.cc:395] connection refused "
        "by the parameter server at 10.4.0.7:7164",
        # a runtime's RPC layer whose peer reset the connection
        "[1,7]<stderr>:F1127 06:40:00.118200  4411 rpc_client.cc:212] send to trainer 3 failed: Connection reset by "
        "peer",
    ],
)
def test_a_native_fatal_log_line_that_its_peer_went_away_is_the_peer_s_echo(fatal: str) -> None:
    """glog's LOG(FATAL) aborts the process under "*** Check failure stack trace ***": the abort carries the fatal
    line's words, and when they say the peer went away, the abort is that echo."""
    victim = (
        f"{fatal}\n*** Check failure stack trace: ***\n"
        "    @     0x7f4dc82b827d  google::LogMessage::Fail()\n"
        "    @     0x7f4dc82bbd2c  google::LogMessage::SendToLog()\n"
        "    @     0x7f4dc81153c1  rt::SocketClient::Connect()"
    )
    assert_echo_beside_any_root(victim, "peer")


def test_a_native_fatal_log_line_naming_a_failure_of_its_own_stays_a_crash() -> None:
    own = (
        "F1127 06:40:00.118200  4411 tensor_shape.cc:88] reshape of [3, 4] into [5] changes the element count\n"
        "*** Check failure stack trace: ***\n"
        "    @     0x7f4dc82b827d  google::LogMessage::Fail()"
    )
    f = assess(member("v", 0, own))
    assert (f.role, f.category) == ("primary", "crash")


@pytest.mark.parametrize(
    "raw",
    [
        "E1127 06:40:00.279713   10422 coredump_hook.cc:250] RAW: Remote crash gathering disabled for SIGTERM.",
        "E1127 06:40:00.279713   10422 process_state.cc:784] RAW: Raising signal 15 with default behavior",
    ],
)
def test_absl_s_signal_safe_log_naming_the_sigterm_it_handled_is_the_teardown(raw: str) -> None:
    """What absl's failure-signal handler and its hooks write while they handle a signal is written in absl's raw log
    (the one a signal handler may use): a raw line naming SIGTERM is the process being stopped, among its frames."""
    victim = (
        "2026-11-27 06:40:00 10.4.0.7 [3]     @     0x7f3396f38b4c       1072  rt::MeshClient::Rendezvous()\n"
        f"2026-11-27 06:40:00 10.4.0.7 [3] {raw}\n"
        "2026-11-27 06:40:00 10.4.0.8 [2]     @     0x7fc8d586e4eb         64  rt::MeshService::Stub::Rendezvous()"
    )
    assert_echo_beside_any_root(victim, "teardown")


def test_a_check_whose_native_frames_come_before_its_words_carries_the_mesh_master_echo() -> None:
    """torch_xla's checks write the native stack trace into the exception's message, between the check and the words
    that say why: the frames are not other detail, so the words after them are the exception's own."""
    frames = "".join(f"\tframe_{i}()\n" for i in range(14))
    victim = (
        "Traceback (most recent call last):\n"
        '  File "/srv/train.py", line 91, in main\n    xm.rendezvous("init")\n'
        "RuntimeError: tensorflow/compiler/xla/xla_client/mesh_service.cc:316 : Check failed: "
        "impl_->channel->WaitForConnected( std::chrono::system_clock::now() + std::chrono::seconds(wait_seconds))\n"
        f"*** Begin stack trace ***\n\ttensorflow::CurrentStackTrace()\n{frames}*** End stack trace ***\n"
        "Failed to connect to client mesh master: tpu-vm-0.internal:8477"
    )
    assert_echo_beside_any_root(victim, "store")


@pytest.mark.parametrize(
    "victim",
    [
        "2026-11-27 06:40:00.118200: I tensorflow/core/distributed_runtime/master.cc:221] CreateSession still waiting "
        "for response from worker: /job:ps/replica:0/task:1\n"
        "2026-11-27 06:40:10.118400: I tensorflow/core/distributed_runtime/master.cc:221] CreateSession still waiting "
        "for response from worker: /job:ps/replica:0/task:1",
        "E1127 06:40:00.118659 25384 grpc_client.cc:280] Send name:[fc_2.w_0@GRAD], ep:[10.4.0.7:6174], status:[-1] "
        "meets grpc error:Deadline Exceeded",
        "E1127 06:40:00.118659 25384 grpc_client.h:91] /ps.Service/PullSparse meets grpc error, error_code: 4, "
        "error_message: Deadline Exceeded error_details:",
    ],
)
def test_a_task_still_waiting_for_another_or_whose_call_to_its_server_ran_out_of_time_is_the_timeout_echo(
    victim: str,
) -> None:
    assert_echo_beside_any_root(victim, "timeout")


@pytest.mark.parametrize(
    "victim",
    [
        # a Spark task feeding a TensorFlow worker that took nothing from its queue for feed_timeout seconds
        '  File "/tmp/spark/tensorflowonspark/TFSparkNode.py", line 420, in _train\n'
        "    Exception: Timeout while feeding partition\n"
        "\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException"
        "(PythonRunner.scala:298)",
        # ...the same as the Spark driver reports the task it lost
        "26/11/27 06:40:00 WARN TaskSetManager: Lost task 1.0 in stage 2.0 (TID 9, 10.4.0.7, executor 2): "
        "org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
        "Exception: Timeout while feeding partition",
    ],
)
def test_a_feeder_whose_consumer_took_nothing_in_time_is_the_timeout_echo(victim: str) -> None:
    assert_echo_beside_any_root(victim, "timeout")


@pytest.mark.parametrize(
    "victim",
    [
        "2026-11-27 06:40:00 10.4.0.7 [3] Terminated\n2026-11-27 06:40:00 10.4.0.8 [5] Terminated",
        "gpu-b:91:140 [2] include/socket.h 398 NCCL WARN Call to write failed : Connection reset  by peer.",
    ],
)
def test_a_worker_tag_before_the_shell_s_terminated_and_a_doubled_space_change_no_reading(victim: str) -> None:
    kind = "teardown" if "Terminated" in victim else "peer"
    assert_echo_beside_any_root(victim, kind)


# --- a socket channel's check that its transfer to a named peer moved nothing, TensorFlow's derived and closed-session
# cancellations: echoes; a segfault inside a peer receive and C++'s bad_alloc: crash and host memory below 0.9 ------

SOCKET_CHANNEL_ABORT = (
    "F1127 06:40:00.118200    57 SocketChannel.cpp:101] Check failed: len > 0  peer=10.4.0.7 curIov=3 iovCnt=40 "
    "iovs[curIov].base=0x7f00aa11c0de iovs[curIov].iov_len=65536\n"
    "*** Check failure stack trace: ***\n"
    "    @     0x7f4dc82b827d  google::LogMessage::Fail()\n"
    "    @     0x7f4dc81153c1  paddle::SocketChannel::writev()\n"
    "    @     0x7f4dc81163a2  paddle::ProtoClient::send()\n"
    "Aborted (core dumped)"
)


@pytest.mark.parametrize("code", [134, 1])
def test_a_native_check_that_a_socket_transfer_to_its_peer_moved_nothing_is_the_peer_s_echo(code: int) -> None:
    """Paddle's socket channel checks the bytes each readv/writev to the peer it names moved; none moved and no errno
    after the check is the connection to that peer closed: the abort (exit 134 or not) carries the peer's echo."""
    f = assess(member("v", 0, SOCKET_CHANNEL_ABORT, exit_code=code))
    assert (f.role, f.secondary) == ("secondary", "peer")
    v = decide(
        Incident(
            JobRef("ml", "llm"),
            3,
            (
                member("llm-worker-0", 0, SOCKET_CHANNEL_ABORT, exit_code=code, finished=T0 - 1),
                member("llm-worker-1", 1, DEVICE_OOM_ROOT),
                member("llm-worker-2", 2, SOCKET_CHANNEL_ABORT, exit_code=code, finished=T0 - 1),
            ),
        )
    )
    assert (v.pod, v.category) == ("llm-worker-1", "gpu_oom")


def test_the_same_check_naming_an_errno_is_not_read_as_the_closed_connection() -> None:
    # the errno says what failed (a timeout on the socket is not the peer closing it): other rules read it
    timed_out = SOCKET_CHANNEL_ABORT.replace(
        "iovs[curIov].iov_len=65536\n", "iovs[curIov].iov_len=65536: Connection timed out [110]\n"
    )
    f = assess(member("v", 0, timed_out, exit_code=134))
    assert f.rule is not None and f.rule.id != "paddle.socket-peer-closed"


@pytest.mark.parametrize(
    "victim",
    [
        # a step whose cross-device receive TensorFlow cancelled as the step was aborted for another op's failure
        "tensorflow.python.framework.errors_impl.CancelledError:  [_Derived_]RecvAsync is cancelled.\n"
        "\t [[{{node replica_1/loss/Mean/_88}}]] [Op:__inference_train_function_4411]",
        # ...the same status without the marker (later TensorFlow keeps it out of the message)
        "tensorflow.python.framework.errors_impl.CancelledError: RecvAsync is cancelled.",
        # ...any status TensorFlow marks as derived from another
        "tensorflow.python.framework.errors_impl.CancelledError: [_Derived_]Cancelled",
    ],
)
def test_a_status_tensorflow_says_derives_from_another_failure_is_the_peer_s_echo(victim: str) -> None:
    assert_echo_beside_any_root(victim, "peer")


def test_a_step_cancelled_because_its_session_was_closed_is_the_teardown() -> None:
    victim = (
        '  File "/opt/venv/lib/python3.6/site-packages/tensorflow/python/training/queue_runner_impl.py", line 238, '
        "in _run\n    enqueue_callable()\n"
        "tensorflow.python.framework.errors_impl.CancelledError: Step was cancelled by an explicit call to "
        "`Session::Close()`."
    )
    assert_echo_beside_any_root(victim, "teardown")


def test_a_segfault_inside_a_receive_from_a_peer_is_a_crash_below_the_permanent_threshold() -> None:
    """The guide's native row: a SIGSEGV is the process's own crash; inside its receive from a peer the peer's loss may
    have set it off, which the words do not tell, so below 0.9."""
    segv = (
        '*** Aborted at 1795761600 (unix time) try "date -d @1795761600" if you are using GNU date ***\n'
        "PC: @                0x0 (unknown)\n"
        "*** SIGSEGV (@0x10) received by PID 4411 (TID 0x7f00aa11c700) from PID 16; stack trace: ***\n"
        "    @     0x7f00aa000160 (unknown)\n"
        "    @     0x7f00ab1170d2 rt::RpcClient::recv()\n"
        "    @     0x7f00ab2270d2 rt::ParameterClient::pull()\n"
    )
    f = assess(member("v", 0, segv, exit_code=139))
    assert (f.role, f.category) == ("primary", "crash")
    v = decide(cascade(segv, GLOO_PEER, root_exit=139))
    assert (v.pod, v.category) == ("llm-worker-1", "crash")
    assert v.confidence < PERMANENT
    # a segfault elsewhere stays the crash it is, at the threshold
    own = segv.replace("rt::RpcClient::recv()", "rt::Tensor::Reshape()")
    f = assess(member("v", 0, own, exit_code=139))
    assert (f.role, f.category) == ("primary", "crash")
    assert f.rule is not None and f.rule.max_confidence >= PERMANENT


@pytest.mark.parametrize(
    "said",
    [
        "terminate called after throwing an instance of 'std::bad_alloc'\n  what():  std::bad_alloc\nAborted",
        "RuntimeError: std::bad_alloc",
    ],
)
def test_cpp_s_bad_alloc_is_the_host_s_memory_below_the_permanent_threshold(said: str) -> None:
    """operator new failing: the host's memory short, or a size no host has; the words alone do not say which."""
    v = decide(cascade(said, GLOO_PEER))
    assert (v.pod, v.category) == ("llm-worker-1", "host_oom")
    assert v.confidence < PERMANENT


# --- a parameter server's client, or a runtime's wait, that only lost another member ---------------------------

# PaddlePaddle's parameter-server client logging each call its gRPC channel could not complete, before the trainer's
# executor raises: the variable it sent or fetched, the server's endpoint, the status's message
PADDLE_RPC = (
    "I0722 04:18:40.101200  4410 send_op.cc:51] sending conv2d_3.w_0@GRAD to 10.3.0.12:7164\n"
    "E0722 04:18:40.117733  4410 grpc_client.cc:204] proc param error:name:[conv2d_3.w_0@GRAD] "
    "ep:[10.3.0.12:7164] grpc error:{status}\n"
    "Traceback (most recent call last):\n"
    '  File "dist_train.py", line 131, in <module>\n'
    "    exe.run(trainer_prog, feed=feeder.feed(batch), fetch_list=[loss])\n"
)
# newer Paddle's form of the same client, with the status's code
PADDLE_RPC_CODED = (
    "F0722 04:18:40.117733  4410 grpc_client.cc:431] SendRPC name:[conv2d_3.w_0@GRAD], ep:[10.3.0.12:7164], "
    "status:[-1] meets grpc error, error_code:{code} error_message:{status} error_details:\n"
    "*** Check failure stack trace: ***\n"
)
# OneFlow's eager runtime giving up on the instructions it waits for (its optimizer's step in a job of two machines)
ONEFLOW_WAIT = (
    "Traceback (most recent call last):\n"
    '  File "train_eager.py", line 212, in train_one_epoch\n'
    "    self.optimizer.step()\n"
    '  File "/usr/local/lib/python3.7/site-packages/oneflow/framework/op_expr_util.py", line 29, in user_op_expr_call\n'
    "    results = self.apply(args, attrs)\n"
    "oneflow._oneflow_internal.exception.TimeoutException: \n"
    '  File "/src/oneflow/oneflow/api/python/framework/op_expr.cpp", line 48, in Interpret\n'
)


@pytest.mark.parametrize(
    ("victim", "kind"),
    [
        (PADDLE_RPC.format(status="Connect Failed"), "peer"),
        (PADDLE_RPC.format(status="failed to connect to all addresses"), "peer"),
        (PADDLE_RPC_CODED.format(code=14, status="Connect Failed"), "peer"),
        (PADDLE_RPC.format(status="Deadline Exceeded"), "timeout"),
        (ONEFLOW_WAIT, "timeout"),
    ],
)
def test_a_client_that_lost_its_server_or_a_runtime_that_waited_is_an_echo(victim: str, kind: str) -> None:
    """The trainer could not reach the server it sends to, or its call ran out of time; OneFlow's runtime waited for
    instructions that depend on the other machines: each only lost or waited for another member. The member that
    failed on its own, even with no more than its exit code and a second later, is the root."""
    f = assess(member("v", 0, victim))
    assert (f.role, f.secondary) == ("secondary", kind), f.rule
    v = decide(cascade("", victim))
    assert v.pod == "llm-worker-1"


# old torch's rendezvous, its socket read timing out while the process group formed (the errno's words, raised bare)
OLD_TORCH_STORE_EAGAIN = (
    "Traceback (most recent call last):\n"
    '  File "pretrain.py", line 77, in <module>\n'
    "    dist.init_process_group(backend='gloo', init_method=args.dist_url, rank=rank, world_size=world)\n"
    '  File "/usr/local/lib/python3.6/dist-packages/torch/distributed/distributed_c10d.py", line 354, in '
    "init_process_group\n"
    "    store, rank, world_size = next(rendezvous(url))\n"
    '  File "/usr/local/lib/python3.6/dist-packages/torch/distributed/rendezvous.py", line 95, in '
    "_tcp_rendezvous_handler\n"
    "    store = TCPStore(result.hostname, result.port, world_size, start_daemon)\n"
    "RuntimeError: Resource temporarily unavailable\n"
)


def test_a_store_read_that_timed_out_as_the_group_formed_is_the_store_s_echo() -> None:
    """torch's socket layer raises the errno of a receive whose timeout ran out (EAGAIN) as its bare words: from
    torch's rendezvous frame, the store or its peers did not answer in time. The member that failed on its own, with
    no more than its exit code and a second later, is the root."""
    f = assess(member("v", 0, OLD_TORCH_STORE_EAGAIN))
    assert (f.role, f.secondary) == ("secondary", "store"), f.rule
    assert decide(cascade("", OLD_TORCH_STORE_EAGAIN)).pod == "llm-worker-1"


def test_the_same_errno_raised_from_the_program_s_own_frame_is_no_store_echo() -> None:
    """The bare words alone name no store: raised from the program's own call, the process failed on its own."""
    own = (
        "Traceback (most recent call last):\n"
        '  File "pretrain.py", line 120, in <module>\n'
        "    batch = loader.next_batch()\n"
        "RuntimeError: Resource temporarily unavailable\n"
    )
    assert assess(member("p", 0, own)).role == "primary"
