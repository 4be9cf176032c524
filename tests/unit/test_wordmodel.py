"""Words no rule knows (podmortem.core.wordmodel): the shipped model is the fit of the development splits, never of a
blind one; an echo in words no rule knows does not out-time the member it lost; a root that only a reading of last
resort found takes the category its words say, below the PermanentFailure threshold; and words never make a verdict
surer than the rules alone. The log texts are written for these tests (a made-up stack, `meshrt`), in the forms a
Python program prints."""

from __future__ import annotations

import json

import pytest
from support.common import GLOO_PEER
from support.members import T0, member

from podmortem.core import engine
from podmortem.core.assess import assess
from podmortem.core.engine import decide
from podmortem.core.model import Incident, JobRef
from podmortem.core.wordmodel import MODEL, words
from podmortem.offline.corpus import BLIND, load
from podmortem.offline.wordfit import CORPUS, MODEL_PATH, development_splits, dumps, fit

PERMANENT = 0.9
SILENT = "step 1200 loss 2.314 lr 3.0e-4\nstep 1210 loss 2.301 lr 3.0e-4"
LOST_WORKER = (
    "meshrt.errors.MeshError: waiting for worker 3 failed: it is unavailable, the session was terminated remotely"
)
ALLOCATOR = "meshrt.errors.MeshError: allocator exhausted: tried to reserve more than the capacity left unallocated"


# Words no rule knows, of a failure of the process's own (not an exception's form: the rules read only its exit code).
EXHAUSTED = "meshrt: allocator exhausted: failed to reserve more than the capacity left unallocated"
# A training loop's progress lines: what a rank that hung leaves as its log's tail.
PROGRESS = (
    "[2026-11-27 10:00:00,000] [INFO] [logging.py:96:log_dist] [Rank 1] step=100, skipped=0, lr=[0.0001]\n"
    "[2026-11-27 10:00:05,000] [INFO] [timer.py:260:stop] epoch=0/micro_step=100/global_step=100, "
    "RunningAvgSamplesPerSec=12.3, CurrSamplesPerSec=12.1, MemAllocated=10.2GB, MaxMemAllocated=20.1GB"
)
WAITED = (
    "[rank{r}]:[E1127 10:10:00.1 ProcessGroupNCCL.cpp:600] [Rank {r}] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=88, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600050 milliseconds before timing out."
)


def cascade(root_log: str, victim_log: str) -> Incident:
    """A root beside two copies of one victim that end a second earlier (times give no help)."""
    return Incident(
        JobRef("ml", "llm"),
        3,
        (
            member("llm-worker-0", 0, victim_log, finished=T0 - 1),
            member("llm-worker-1", 1, root_log),
            member("llm-worker-2", 2, victim_log, finished=T0 - 1),
        ),
    )


def test_the_shipped_model_is_the_fit_of_the_splits_it_names() -> None:
    shipped = MODEL_PATH.read_text(encoding="utf-8")
    doc = json.loads(shipped)
    assert dumps(fit(load(CORPUS), doc["splits"])) == shipped


def test_the_model_is_fitted_on_every_development_split_and_no_blind_one() -> None:
    splits = set(json.loads(MODEL_PATH.read_text(encoding="utf-8"))["splits"])
    assert not splits & BLIND
    assert splits == {e.split for e in load(CORPUS)} - BLIND  # unblinding a split refits the model


def test_a_refit_never_takes_a_blind_split_unless_it_is_unblinded() -> None:
    excerpts = load(CORPUS)
    assert set(development_splits(excerpts)) == {e.split for e in excerpts} - BLIND
    assert "train" not in development_splits(excerpts, skip=["train"])


def test_words_are_runs_of_letters_split_at_case_changes() -> None:
    assert words("ConnectionResetError: [Errno 104] NCCL WARN peer") == {
        "connection",
        "reset",
        "error",
        "errno",
        "nccl",
        "warn",
        "peer",
    }


def test_the_rules_do_not_know_these_texts() -> None:
    """What the tests below show is the word model's doing only: the rules read both as any Python exception."""
    for text in (LOST_WORKER, ALLOCATOR):
        f = assess(member("w", 0, text))
        assert (f.role, f.rule.id if f.rule else None) == ("primary", "python.exception")
    for text in (EXHAUSTED, PROGRESS):
        f = assess(member("w", 0, text))
        assert (f.role, f.rule.id if f.rule else None, f.source) == ("primary", "exit.nonzero", "termination")


def test_an_echo_in_words_no_rule_knows_does_not_out_time_the_member_it_lost() -> None:
    assert MODEL.victim_score(LOST_WORKER) > 0 > MODEL.victim_score(SILENT)
    v = decide(cascade(SILENT, LOST_WORKER))
    assert (v.pod, v.rule) == ("llm-worker-1", "exit.nonzero")
    assert {s.pod for s in v.secondary} == {"llm-worker-0", "llm-worker-2"}
    assert all("its words are a victim's" in s.reason for s in v.secondary)
    assert any("its words are a victim's" in e for e in v.evidence)


def test_without_the_words_the_echo_would_out_time_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine, "WORDS_ECHO_MARGIN", float("inf"))
    assert decide(cascade(SILENT, LOST_WORKER)).pod == "llm-worker-0"


def test_a_program_error_of_the_worker_s_own_is_never_taken_for_an_echo() -> None:
    """A ValueError is the program's own check, whatever words it carries."""
    v = decide(cascade(SILENT, LOST_WORKER.replace("meshrt.errors.MeshError", "ValueError")))
    assert v.pod == "llm-worker-0"


def test_a_root_only_a_carrier_exception_read_takes_the_category_its_words_say() -> None:
    v = decide(cascade(ALLOCATOR, GLOO_PEER))
    assert (v.pod, v.category, v.retryable, v.rule) == ("llm-worker-1", "gpu_oom", False, "words.category")
    assert v.confidence == engine.CONF_WORDS_CATEGORY < PERMANENT  # "likely", with a runner-up
    assert v.runner_up_pod is not None
    assert any("its words are those of gpu_oom failures" in e for e in v.evidence)


def test_words_the_model_does_not_know_leave_the_generic_reading() -> None:
    text = "MeshrtZzq: qzvx wkkq"
    assert MODEL.category_guess(text) == (None, 0.0)
    v = decide(cascade(text, GLOO_PEER))
    assert (v.category, v.rule) == ("user_code", "python.exception")


def test_a_verdict_at_the_threshold_keeps_its_rule_s_category() -> None:
    """A program error alone among echoes is said at the threshold; its words do not change its category."""
    v = decide(cascade(ALLOCATOR.replace("meshrt.errors.MeshError", "ValueError"), GLOO_PEER))
    assert (v.category, v.confidence) == ("user_code", PERMANENT)


def test_words_never_make_a_verdict_surer_than_the_rules_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """The echo in words no rule knows ends within the timing uncertainty of a cause the rules name: the close call
    the rules alone make stands, though the words say who the echo is."""
    root = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB (GPU 0; 79.15 GiB total capacity)"
    with_words = decide(cascade(root, LOST_WORKER))
    monkeypatch.setattr(engine, "WORDS_ECHO_MARGIN", float("inf"))
    without = decide(cascade(root, LOST_WORKER))
    assert (with_words.pod, with_words.category) == (without.pod, without.category) == ("llm-worker-1", "gpu_oom")
    assert with_words.confidence == without.confidence < PERMANENT


def waited_on(root_log: str) -> Incident:
    """`root_log`'s pod exited 1 while its two peers timed out in a collective, ending after it (times give no help)."""
    return Incident(
        JobRef("ml", "llm"),
        3,
        (
            member("llm-worker-0", 0, WAITED.format(r=0), finished=T0 + 1),
            member("llm-worker-1", 1, root_log),
            member("llm-worker-2", 2, WAITED.format(r=2), finished=T0 + 1),
        ),
    )


def test_a_member_that_exited_in_words_of_a_failure_of_its_own_while_its_peers_waited_failed_not_hung() -> None:
    """The classic cascade: a process died of something no rule knows, and its peers timed out waiting for it."""
    assert MODEL.victim_score(EXHAUSTED) < 0 and MODEL.category_guess(EXHAUSTED)[0] == "gpu_oom"
    v = decide(waited_on(EXHAUSTED))
    assert (v.pod, v.category, v.retryable, v.rule) == ("llm-worker-1", "gpu_oom", False, "words.category")
    assert v.confidence < PERMANENT


def test_a_member_that_exited_on_progress_lines_while_its_peers_waited_is_the_hang() -> None:
    """A rank that hung says nothing failed: its tail is its last progress, whatever category its words lean to."""
    guess, margin = MODEL.category_guess(PROGRESS)
    assert guess != "hang" and margin > engine.WORDS_CATEGORY_MARGIN and MODEL.victim_score(PROGRESS) < 0
    v = decide(waited_on(PROGRESS))
    assert (v.pod, v.category, v.rule) == ("llm-worker-1", "hang", "engine.hang")


def test_without_the_words_the_member_that_exited_while_its_peers_waited_is_read_as_hung(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(engine, "WORDS_CATEGORY_MARGIN", float("inf"))
    v = decide(waited_on(EXHAUSTED))
    assert (v.pod, v.category) == ("llm-worker-1", "hang")
