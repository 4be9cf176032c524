"""The signature of a verdict on pairs of real excerpts: the same failure (the same thread's two posts, two
peers of one run, the same bug in two runs) gets the same signature; different failures do not."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from podmortem.core import repeats
from podmortem.core.engine import decide
from podmortem.core.model import Incident, JobRef, Member, Termination, Verdict
from podmortem.core.signature import collective_of, frame_of, normalise, parts, signature
from podmortem.offline.bundle import load_bundle

TESTS = Path(__file__).resolve().parents[1]
TORCHRUN = TESTS / "corpus-torchrun"
EXCERPTS = {(d := json.loads(line))["id"]: d for line in (TESTS / "corpus-realworld" / "excerpts.jsonl").open()}


def of_bundle(name: str) -> str:
    incident = load_bundle(TORCHRUN / name)
    entry = repeats.entry(incident, decide(incident), 0.0)
    assert entry is not None
    return entry.signature


def of_excerpt(excerpt_id: str, pod: str = "rw-worker-0", node: str = "node-0") -> str:
    """The signature of the verdict on one pod whose log tail is the excerpt (what a pod watch reads)."""
    text = EXCERPTS[excerpt_id]["text"]
    member = Member(
        pod=pod, namespace="ml", node=node, rank=0, phase="Failed", log_tail=text,
        termination=Termination(exit_code=1, reason="Error", finished_at=10.0),
    )  # fmt: skip
    incident = Incident(JobRef("ml", "job"), 1, (member,))
    entry = repeats.entry(incident, decide(incident), 0.0)
    assert entry is not None
    return entry.signature


@pytest.mark.parametrize(
    ("a", "b", "why"),
    [
        ("inc-a4b5da", "inc-bb000a", "KeyError 'cosine_restarts' in two runs"),
        ("inc-53b340", "inc-660366", "a worker's SIGSEGV in two runs of one model"),
        ("inc-22e98b", "inc-317053", "CUDA OOM in allocate_workspace: other sizes, another GPU index"),
        ("inc-105e16", "inc-7c1c59", "a negative learning rate at another step, another value"),
        ("inc-b8462e", "inc-cf308a", "IndexError in cross_entropy: another label of another batch"),
        ("inc-39fff0", "inc-7b3782", "preempted by the scheduler, other pids"),
    ],
)
def test_the_same_failure_in_two_torchrun_runs_has_one_signature(a: str, b: str, why: str) -> None:
    assert of_bundle(a) == of_bundle(b), why


@pytest.mark.parametrize(
    ("a", "b", "why"),
    [
        ("inc-a4b5da", "inc-7c1c59", "KeyError vs ValueError, both in learning_rate"),
        ("inc-06b0cb", "inc-63662b", "exit code 2 vs exit code 1: a code names the failure"),
        ("inc-53b340", "inc-08732c", "SIGSEGV vs SIGABRT"),
        ("inc-9f4e84", "inc-b9e566", "node lost: another node"),
        ("inc-39fff0", "inc-fb772f", "preempted by the scheduler vs evicted"),
        ("inc-8ddb18", "inc-f2694b", "hangs: another rank stuck, another operation"),
        ("inc-22e98b", "inc-0e825a", "gpu_oom vs user_code"),
    ],
)
def test_different_failures_in_the_torchrun_corpus_differ(a: str, b: str, why: str) -> None:
    assert of_bundle(a) != of_bundle(b), why


def test_two_ranks_of_one_run_that_failed_differently_differ() -> None:
    """inc-b8462e: worker-0 raised IndexError, worker-1 a ValueError in the same run."""
    incident = load_bundle(TORCHRUN / "inc-b8462e")
    verdict = decide(incident)
    own = {m.pod: m for m in incident.members if m.error is not None}
    signatures = set()
    for pod in ("llama-lora-a5b6e-worker-0", "llama-lora-a5b6e-worker-1"):
        error = own[pod].error
        assert error is not None
        as_root = dataclasses.replace(verdict, pod=pod, exception_type=error.exception_type, message=error.message)
        signatures.add(signature(as_root, error.traceback))
    assert len(signatures) == 2


def test_the_same_thread_two_peers_of_one_run_have_one_signature() -> None:
    """NVIDIA/nccl#928: the same IB completion error reported by two ranks, from two peers' addresses."""
    assert of_excerpt("nccl928-ib-completion-error-1") == of_excerpt(
        "nccl928-ib-completion-error-2", pod="rw-worker-1", node="node-1"
    )


def test_the_same_thread_two_posts_of_one_crash_have_one_signature() -> None:
    """Megatron-LM#1880: the agent's failure summary and the training log of the same SIGSEGV."""
    assert of_excerpt("megatron1880-b200-sigsegv-1") == of_excerpt("megatron1880-agent-failed-sigsegv-2")


def test_different_threads_different_failures_differ() -> None:
    assert of_excerpt("nccl928-ib-completion-error-1") != of_excerpt("megatron1880-b200-sigsegv-1")


def test_hardware_and_node_lost_carry_the_node_other_categories_do_not() -> None:
    base = Verdict(pod="p", category="hardware", retryable=True, summary="", message="Xid 79: GPU fell off the bus")
    assert signature(dataclasses.replace(base, node="a")) != signature(dataclasses.replace(base, node="b"))
    network = dataclasses.replace(base, category="network", message="NCCL error: remote process exited")
    assert signature(dataclasses.replace(network, node="a")) == signature(dataclasses.replace(network, node="b"))


def test_a_hang_is_keyed_by_its_collective_and_its_stuck_rank() -> None:
    hang = Verdict(pod="p", category="hang", retryable=True, summary="", global_rank=3,
                   evidence=("WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1024, Timeout(ms)=600000)",))  # fmt: skip
    assert parts(hang).op == "allreduce"
    assert signature(hang) != signature(dataclasses.replace(hang, global_rank=4))
    assert signature(hang) != signature(dataclasses.replace(hang, evidence=("OpType=BROADCAST",)))

    @dataclasses.dataclass(frozen=True)
    class Located:
        op: str
        frame: str

    located = dataclasses.replace(hang)
    object.__setattr__(located, "hang", Located("_ALLGATHER_BASE", "train.py:step"))  # the engine's own, when given
    assert (parts(located).op, parts(located).frame) == ("allgatherbase", "train.py:step")


def test_what_changes_run_to_run_is_normalised_and_codes_stay() -> None:
    text = (
        "E0325 20:57:27.620000 2606 site-packages/torch/x.py:869] failed (exitcode: -9) local_rank: 5 (pid: 2630) "
        "peer [10.1.0.12]:29500 at 0x7f3a2c00 in /tmp/torchelastic_ab12/attempt_0 torch.Size([32, 512]) "
        "Tried to allocate 2.00 GiB on job-worker-3"
    )
    assert normalise(text, ["job-worker-3"]) == (
        "<time> failed (exitcode: -9) local_rank: <r> (pid <pid>) peer <addr> at <hex> in <tmp> "
        "torch.Size([<shape>]) Tried to allocate <n> GiB on <name>"
    )
    assert normalise("Xid 79, signal 11, NCCL error 12") == "Xid 79, signal 11, NCCL error 12"


def test_frame_and_collective() -> None:
    tb = 'Traceback:\n  File "/tmp/x/site-packages/a.py", line 3, in outer\n  File "/work/train.py", line 91, in step\n'
    assert frame_of(tb) == "train.py:step"
    assert frame_of("no frames") == ""
    assert collective_of(["Timed out waiting 10000ms for recv operation"]) == "recv"


def test_no_root_no_signature() -> None:
    assert signature(Verdict(pod=None, category=None, retryable=None, summary="clean")) == ""
