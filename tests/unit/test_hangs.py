"""The cross-rank matcher (podmortem.core.hangs), over Flight Recorder summaries and stacks.

Gloo cases use dumps torch itself made (tests/fixtures/flightrecorder/: ranks 0 and 1 wait in all_reduce #4
of the default group, rank 2 never entered it; in group 1, ranks 0 and 1 broadcast different sizes). The
cases a CPU cannot produce — NCCL dumps with member lists, a missing dump, all ranks in and none behind,
several process groups — are built from the documented format (podmortem.core.flightrecorder's docstring)
and summarised by the same code.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from podmortem.core.flightrecorder import FRSummary, summarize, summarize_pickle
from podmortem.core.hangs import RankCapture, match
from podmortem.core.model import Frame, WorkerCapture

FIXTURES = Path(__file__).parents[1] / "fixtures" / "flightrecorder"
SITE = "/opt/venv/lib/python3.11/site-packages"


def _real(rank: int, *, drop_group: str | None = "1") -> FRSummary:
    s = summarize_pickle((FIXTURES / f"fr-{rank}.pkl").read_bytes(), rank=rank)
    if drop_group is None:
        return s
    return dataclasses.replace(
        s,
        entries=tuple(e for e in s.entries if e.pg_id != drop_group),
        pg_status={k: v for k, v in s.pg_status.items() if k != drop_group},
    )


def _fr(rank: int, summary: FRSummary, pod: str | None = None, path: str = "control_plane") -> RankCapture:
    return RankCapture(rank, pod or f"pod-{rank}", WorkerCapture(path, global_rank=rank, flight_recorder=summary))


def _stack(rank: int, text: str, pod: str | None = None, path: str = "control_plane") -> RankCapture:
    return RankCapture(rank, pod or f"pod-{rank}", WorkerCapture(path, global_rank=rank, stack=text))


def _faulthandler(*frames: tuple[str, int, str]) -> str:
    body = "".join(f'  File "{f}", line {n} in {fn}\n' for f, n, fn in frames)
    return "Current thread 0x00007f0000000001 (most recent call first):\n" + body


WAITING = _faulthandler(
    (f"{SITE}/torch/distributed/distributed_c10d.py", 3252, "all_reduce"),
    (f"{SITE}/torch/distributed/c10d_logger.py", 83, "wrapper"),
    ("/app/train.py", 120, "step"),
    ("/app/train.py", 300, "<module>"),
)
LOADING = _faulthandler(
    ("/usr/lib/python3.11/threading.py", 327, "wait"),
    ("/app/train.py", 211, "load_batch"),
    ("/app/train.py", 118, "step"),
    ("/app/train.py", 300, "<module>"),
)


def test_behind_from_torchs_own_gloo_dumps() -> None:
    found = match([_fr(r, _real(r)) for r in (0, 1, 2)])
    assert found is not None
    assert (found.finding, found.stuck_ranks, found.stuck_pods) == ("behind", (2,), ("pod-2",))
    assert (found.process_group, found.seq, found.op) == ("0", 4, "all_reduce")
    assert found.frame is None  # no stack of rank 2: the Flight Recorder says who, not where


def test_behind_with_the_culprits_stack_gives_the_line() -> None:
    caps = [_fr(r, _real(r)) for r in (0, 1, 2)] + [_stack(2, LOADING), _stack(0, WAITING)]
    found = match(caps)
    assert found is not None and found.stuck_ranks == (2,)
    assert found.frame == Frame("/app/train.py", 211, "load_batch")
    assert found.path == "control_plane"


def test_mismatch_from_torchs_own_gloo_dumps() -> None:
    found = match([_fr(r, _real(r, drop_group=None)) for r in (0, 1, 2)])
    assert found is not None and found.finding == "mismatch"
    assert (found.stuck_ranks, found.process_group, found.seq, found.op) == ((1,), "1", 1, "broadcast")
    assert "broadcast [3] Float" in found.detail and "broadcast [2] Float" in found.detail


def test_culprits_dump_missing_the_others_say_who() -> None:
    # gloo under torchrun lists no members: the default group is every rank the job is known to have.
    found = match([_fr(r, _real(r)) for r in (0, 1)], all_ranks=range(3), owners={2: "pod-2"})
    assert found is not None
    assert (found.finding, found.stuck_ranks, found.stuck_pods, found.seq) == ("behind", (2,), ("pod-2",), 4)
    assert "no state of theirs came" in found.detail


def _nccl(
    rank: int, status: dict[str, tuple[int, int, int]], entries: list[dict[str, Any]], pgs: dict[str, Any]
) -> FRSummary:
    dump = {
        "version": "2.10",
        "pg_config": {
            name: {"name": name, "desc": desc, "ranks": str(list(ranks))} for name, (desc, ranks) in pgs.items()
        },
        "pg_status": {
            pg: {"last_enqueued_collective": e, "last_started_collective": s, "last_completed_collective": c}
            for pg, (e, s, c) in status.items()
        },
        "entries": entries,
    }
    return summarize(dump, source="pickle", rank=rank)


def _e(
    pg: int, seq: int, op: str = "nccl:all_reduce", size: int = 1024, dtype: str = "Float", state: str = "started"
) -> dict[str, Any]:
    return {
        "pg_id": pg,
        "process_group": (str(pg), "default_pg" if pg == 0 else "tp"),
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "is_p2p": False,
        "profiling_name": op,
        "input_sizes": [[size]],
        "output_sizes": [[size]],
        "input_dtypes": [dtype],
        "output_dtypes": [dtype],
        "state": state,
        "timeout_ms": 600000,
    }


PGS = {"0": ("default_pg", range(4)), "1": ("tp", [2, 3])}


def test_nccl_all_in_none_behind_is_the_collective_itself() -> None:
    caps = [_fr(r, _nccl(r, {"0": (4812, 4812, 4811)}, [_e(0, 4812)], PGS)) for r in range(4)]
    found = match(caps)
    assert found is not None and found.finding == "all_in"
    assert (found.stuck_ranks, found.process_group, found.seq, found.op) == ((), "0", 4812, "all_reduce")


def test_nccl_member_list_names_the_missing_dump() -> None:
    caps = [_fr(r, _nccl(r, {"0": (4812, 4812, 4811)}, [_e(0, 4812)], PGS)) for r in (0, 1, 3)]
    found = match(caps, owners={2: "llm-worker-1"})
    assert found is not None and (found.finding, found.stuck_ranks, found.stuck_pods) == (
        "behind",
        (2,),
        ("llm-worker-1",),
    )


def test_several_groups_the_laggard_of_the_subgroup_is_named() -> None:
    # Rank 3 never entered tp #7; rank 2 waits there, so rank 2 is behind in the default group but is a victim.
    status = {
        0: {"0": (100, 100, 99)},
        1: {"0": (100, 100, 99)},
        2: {"0": (99, 99, 99), "1": (7, 7, 6)},
        3: {"0": (99, 99, 99), "1": (6, 6, 6)},
    }
    caps = [
        _fr(r, _nccl(r, st, [_e(0, 100 if r < 2 else 99), *([_e(1, 7)] if r == 2 else [])], PGS))
        for r, st in status.items()
    ]
    found = match(caps)
    assert found is not None and found.finding == "behind"
    assert (found.stuck_ranks, found.process_group, found.seq) == ((3,), "0", 100)


def test_desync_across_groups_is_a_mismatch_naming_the_smaller_side() -> None:
    # Rank 3 skipped default #50 and waits in metrics #20 (group 1 of all ranks); the others wait in default #50.
    pgs = {"0": ("default_pg", range(4)), "1": ("metrics", range(4))}
    caps = []
    for r in range(4):
        st = {"0": (49, 49, 49), "1": (20, 20, 19)} if r == 3 else {"0": (50, 50, 49), "1": (19, 19, 19)}
        caps.append(_fr(r, _nccl(r, st, [_e(0, 49 if r == 3 else 50)], pgs)))
    found = match(caps)
    assert found is not None and found.finding == "mismatch"
    assert (found.stuck_ranks, found.process_group, found.seq) == ((3,), "0", 50)
    assert "different order" in found.detail and "#20 of group 1" in found.detail


def test_same_seq_other_dtype_is_a_mismatch_but_alltoall_sizes_may_differ() -> None:
    caps = [
        _fr(r, _nccl(r, {"0": (9, 9, 8)}, [_e(0, 9, dtype="BFloat16" if r == 1 else "Float")], PGS)) for r in range(4)
    ]
    found = match(caps)
    assert found is not None and (found.finding, found.stuck_ranks) == ("mismatch", (1,))
    uneven = [_fr(r, _nccl(r, {"0": (9, 9, 8)}, [_e(0, 9, op="nccl:all_to_all", size=10 + r)], PGS)) for r in range(4)]
    found = match(uneven)
    assert found is not None and found.finding == "all_in"


def test_stacks_alone_the_rank_outside_the_collective() -> None:
    caps = [_stack(0, WAITING), _stack(1, WAITING), _stack(2, LOADING, path="py_spy")]
    found = match(caps)
    assert found is not None and (found.finding, found.stuck_ranks, found.seq) == ("behind", (2,), None)
    assert found.frame == Frame("/app/train.py", 211, "load_batch") and found.path == "py_spy"


def test_stacks_alone_a_direct_process_group_wait_shows_by_comparison() -> None:
    # pg.allreduce([t]).wait() leaves no torch frame: the ranks waiting share one place, the culprit is elsewhere.
    direct = _faulthandler(("/app/train.py", 57, "collective"), ("/app/train.py", 300, "<module>"))
    found = match([_stack(0, direct), _stack(1, direct), _stack(2, LOADING), _stack(3, direct)], timed_out={4})
    assert found is not None and found.stuck_ranks == (2,)
    # ...but only once something shows a wait: ranks at different lines of their own code may just be busy.
    assert match([_stack(0, direct), _stack(1, direct), _stack(2, LOADING)]) is None


def test_stacks_alone_one_teardown_dump_and_the_logs_timeouts() -> None:
    found = match([_stack(2, LOADING, path="sigterm_stack")], timed_out={0, 1, 3})
    assert found is not None and found.stuck_ranks == (2,) and found.path == "sigterm_stack"


def test_nothing_decisive() -> None:
    assert match([]) is None
    assert match([_stack(0, WAITING), _stack(1, WAITING)]) is None  # everyone waits: no rank stands out
    assert match([_stack(2, LOADING)]) is None  # one stack, nobody known to wait
    done = [_fr(r, _nccl(r, {"0": (5, 5, 5)}, [_e(0, 5, state="completed")], PGS)) for r in range(4)]
    assert match(done) is None  # every collective completed: not a hang the recorder shows


def _workload(fault: str) -> list[RankCapture]:
    """What torch's worker control plane answered, mid-hang, in the demo workload (3 ranks, rank 1 failing):
    `fr_trace_json` and `dump_traceback`, as the sidecar asks them (tests/e2e/test_hangs_torchrun.py)."""
    from podmortem.core.flightrecorder import summarize_json

    root = FIXTURES / f"workload-{fault}"
    caps = []
    for r in range(3):
        summary = summarize_json((root / f"fr_trace_json-{r}.txt").read_bytes(), rank=r)
        stack = (root / f"dump_traceback-{r}.txt").read_text()
        caps.append(
            RankCapture(
                r, f"pod-{r}", WorkerCapture("control_plane", global_rank=r, flight_recorder=summary, stack=stack)
            )
        )
    return caps


def test_demo_workload_hang_through_the_control_plane() -> None:
    found = match(_workload("hang"))
    assert found is not None and (found.finding, found.stuck_ranks, found.op) == ("behind", (1,), "all_reduce")
    assert found.frame is not None and (found.frame.file.rsplit("/", 1)[-1], found.frame.function) == (
        "workload.py",
        "load_batch",
    )


def test_demo_workload_desync_through_the_control_plane() -> None:
    found = match(_workload("desync"))
    assert found is not None and (found.finding, found.stuck_ranks) == ("mismatch", (1,))
    # It waits in the metrics all_reduce (its own group) that the others never entered.
    assert found.frame is not None and found.frame.function == "train"


def test_waited_apart_one_rank_in_another_collective() -> None:
    grads, metrics = Frame("/app/train.py", 257, "collective"), Frame("/app/train.py", 299, "train")
    found = match([], waited_at={0: grads, 1: grads, 2: metrics, 3: grads}, owners={2: "pod-1"})
    assert found is not None and (found.finding, found.stuck_ranks, found.stuck_pods) == ("mismatch", (2,), ("pod-1",))
    assert found.frame == metrics and found.path == "log"
    # Two groups of two (pipeline stages wait at different places by design) and a lone pair decide nothing.
    assert match([], waited_at={0: grads, 1: grads, 2: metrics, 3: metrics}) is None
    assert match([], waited_at={0: grads, 1: metrics}) is None
