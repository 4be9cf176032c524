"""What launchers and frameworks print about a failure that is not a worker's own exception: an MPI launcher's
report of another process's death (mpirun, mpiexec, Hydra), a launcher's word that a worker exited non-zero, a
framework's label lines. The texts are written for these tests in the formats the tools print; each member is read the
way a pod watch sees it (the log tail and the exit code, no error file)."""

from __future__ import annotations

from support.members import member

from podmortem.core.assess import assess
from podmortem.core.engine import decide
from podmortem.core.errorfile import exception_type_of
from podmortem.core.model import Incident, JobRef, Member

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
