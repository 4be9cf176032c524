"""The incident page (podmortem/page): what it shows, how it folds a large job, and that pod text stays text.

The page's markup is read back with the standard library's HTML parser (the tag and attribute structure a
browser builds from it); `tests/e2e/test_page_browser.py` opens the same pages in Chromium.
"""

from __future__ import annotations

import dataclasses
import io
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from support.bundles import HANG_TS, HOSTILE_LINES, HOSTILE_POD, HOSTILE_ROOT_MESSAGE, hang_bundle, hostile_bundle

from bench.engine_speed import build
from podmortem import cli
from podmortem.core.engine import decide
from podmortem.core.model import Condition, ErrorRecord, Incident, JobRef, Member, Termination, WorkerCapture
from podmortem.offline import analyze
from podmortem.offline.bundle import load_bundle
from podmortem.page import cluster, timeline
from podmortem.page.render import CSP, PageContext, render

T0 = 1_800_000_000.0


class Parsed(HTMLParser):
    """Elements, attributes and text as a browser's parser sees them."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def by_id(self, ident: str) -> dict[str, str | None] | None:
        return next((a for _, a in self.tags if a.get("id") == ident), None)

    @property
    def all_text(self) -> str:
        return "".join(self.text)


def small_incident(**changes: object) -> Incident:
    """worker-1 raises; worker-0 and worker-2 lose their peer (gloo)."""
    gloo = "RuntimeError: [../gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.2]:29500"
    members = []
    for i in range(3):
        msg = "ValueError: bad label 7" if i == 1 else gloo
        members.append(
            Member(
                pod=f"job-worker-{i}",
                namespace="ns",
                node=f"node-{i}",
                rank=i,
                pod_ip=f"10.0.0.{i + 1}",
                error=ErrorRecord(
                    message=msg, exception_type=msg.split(":")[0], timestamp=int(T0) + (0 if i == 1 else 2)
                ),
                termination=Termination(exit_code=1, reason="Error", finished_at=T0 + 3),
                log_tail=f"[rank{i}] step 10 loss 1.2\n[rank{i}]: {msg}\n",
            )
        )
    incident = Incident(job=JobRef("ns", "job", "PyTorchJob"), world_size=3, members=tuple(members))
    return dataclasses.replace(incident, **changes)  # type: ignore[arg-type]


def test_the_page_states_the_verdict_and_draws_each_pod() -> None:
    incident = small_incident()
    verdict = decide(incident)
    page = Parsed(render(incident, verdict))
    sentence = page.by_id("verdict-sentence")
    assert sentence is not None
    assert "job-worker-1 failed first: user_code, not retryable, confidence 0.95." in page.all_text
    root = page.by_id("root-row")
    assert root is not None and root["data-pod"] == "job-worker-1"
    rows = [a["data-pod"] for t, a in page.tags if t == "g" and "row" in (a.get("class") or "").split()]
    assert sorted(r or "" for r in rows) == ["job-worker-0", "job-worker-1", "job-worker-2"]
    # each victim says why, on its row and in the table; the conditions the aggregator would write
    assert page.all_text.count("gloo: connection closed by peer (10.0.0.2 is job-worker-1)") >= 4
    assert "podmortem.io/PermanentFailure (would write)" in page.all_text
    assert "podmortem.io/Victim (would write)" in page.all_text
    assert "annotations podmortem.io/summary, podmortem.io/verdict; condition PodmortemRootCause" in page.all_text
    assert "hardware-faults" not in page.all_text
    hardware = dataclasses.replace(verdict, category="hardware", retryable=True, node="node-1")
    assert "podmortem.io/hardware-faults (this incident) on node/node-1" in Parsed(render(incident, hardware)).all_text
    # the matched line is marked in the root's log excerpt
    hits = [a for t, a in page.tags if t == "span" and a.get("class") == "hit"]
    assert len(hits) >= 1


def test_the_page_needs_nothing_from_outside() -> None:
    html = render(small_incident(), decide(small_incident()))
    page = Parsed(html)
    assert ("meta", {"http-equiv": "Content-Security-Policy", "content": CSP}) in page.tags
    assert CSP == "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
    tags = {t for t, _ in page.tags}
    assert not tags & {"script", "link", "img", "iframe", "object", "embed", "a", "form"}
    assert not re.search(r"(?i)\b(?:src|href)=|url\(|@import|@font-face", html)


def test_hostile_text_from_the_pods_stays_text(tmp_path: Path) -> None:
    incident = load_bundle(hostile_bundle(tmp_path / "b"))
    html = render(incident, decide(incident))
    page = Parsed(html)
    tags = {t for t, _ in page.tags}
    assert [t for t, _ in page.tags].count("style") == 1  # the page's own
    assert not tags & {"script", "img", "a", "textarea"}
    for _, attrs in page.tags:
        assert not any(name.startswith("on") for name in attrs), attrs
        assert not any("javascript:" in (value or "") for name, value in attrs.items() if name in ("href", "src"))
    text = page.all_text
    for line in HOSTILE_LINES:
        assert line in text, line  # shown as the pod wrote it
    assert HOSTILE_ROOT_MESSAGE in text and HOSTILE_POD in text
    assert "{{ 7 * 7 }}" in text and "49" not in text  # the template did not evaluate pod text


def test_a_large_job_folds_its_victims_and_keeps_the_odd_ones_out() -> None:
    incident = build(4096)
    members = list(incident.members)
    # one victim that failed on its own, differently: it must keep its own row
    odd = members[4000]
    members[4000] = dataclasses.replace(
        odd, error=ErrorRecord(message="MemoryError: cannot allocate", exception_type="MemoryError", timestamp=int(T0))
    )
    incident = dataclasses.replace(incident, members=tuple(members))
    verdict = decide(incident)
    html = render(incident, verdict)
    assert len(html.encode()) < 2 << 20
    tl = timeline.build(incident, verdict)
    assert tl.folded
    rows = {r.pod: r for g in tl.groups for r in g.rows}
    assert verdict.pod in rows and rows[verdict.pod].role == "root"
    assert "job-worker-4000" in rows
    bands = [b for g in tl.groups for b in g.bands]
    assert 1 <= len(bands) <= 10
    assert sum(len(b.pods) for b in bands) + len(rows) == 4096  # every pod is on the page once
    page = Parsed(html)
    assert page.by_id("root-row") is not None
    # every folded pod is named in the victims table
    assert all(f"job-worker-{i}" in page.all_text for i in (1, 2, 3, 4095))


def test_a_node_holding_several_pods_is_their_band() -> None:
    incident = build(200)
    members = tuple(dataclasses.replace(m, node=f"node-{i // 8}") for i, m in enumerate(incident.members))
    incident = dataclasses.replace(incident, members=members)
    tl = timeline.build(incident, decide(incident))
    assert {g.name for g in tl.groups} == {f"node node-{i}" for i in range(25)}
    assert all(len(b.pods) >= timeline.FOLD_MIN for g in tl.groups for b in g.bands)


def test_a_job_on_many_nodes_folds_per_replica_group() -> None:
    """4,096 pods, 8 a node: 512 nodes of bands would be neither readable nor small."""
    incident = build(4096)
    members = tuple(dataclasses.replace(m, node=f"node-{i // 8}") for i, m in enumerate(incident.members))
    incident = dataclasses.replace(incident, members=members)
    verdict = decide(incident)
    tl = timeline.build(incident, verdict)
    assert [g.name for g in tl.groups] == ["replica group pods"]
    assert len(render(incident, verdict).encode()) < 200 << 10


def test_clock_offsets_are_applied_and_said() -> None:
    incident = small_incident()
    members = list(incident.members)
    members[0] = dataclasses.replace(members[0], clock_offset=-4.0)
    incident = dataclasses.replace(incident, members=tuple(members))
    tl = timeline.build(incident, decide(incident))
    rows = {r.pod: r for g in tl.groups for r in g.rows}
    error = next(k for k in rows["job-worker-0"].marks if k.kind == "error")
    assert error.at == T0 + 2 - 4.0
    end = next(k for k in rows["job-worker-2"].marks if k.kind == "end")
    assert end.at == T0 + 3 and rows["job-worker-2"].offset is None
    assert tl.offsets_measured == 1
    text = Parsed(render(incident, decide(incident))).all_text
    assert "clock offset -4.000 s applied" in text and "1 of 3 measured" in text


def test_what_the_cluster_says_is_shown_with_its_time() -> None:
    incident = small_incident()
    members = list(incident.members)
    members[0] = dataclasses.replace(
        members[0],
        conditions=(
            Condition("podmortem.io/Victim", "True", "Victim", "peer closed; root pod job-worker-1", T0 + 2.5),
            Condition("DisruptionTarget", "True", "PreemptionByScheduler", "preempted", T0 + 1),
        ),
        deleted_at=T0 + 1.5,
    )
    incident = dataclasses.replace(incident, members=tuple(members), opened_at=T0 + 0.5)
    verdict = decide(incident)
    tl = timeline.build(incident, verdict, decided_at=T0 + 6, closed_by="quorum")
    row = next(r for g in tl.groups for r in g.rows if r.pod == "job-worker-0")
    assert [(k.kind, k.label) for k in row.marks] == [
        ("disruption", "DisruptionTarget"),
        ("deletion", "deleted"),
        ("error", "error file"),
        ("condition", "Victim"),
        ("end", "exit 1"),
    ]
    assert row.condition == "Victim (written)"
    assert [(m.at, m.label) for m in tl.moments] == [(T0 + 0.5, "incident opened"), (T0 + 6, "verdict (quorum)")]
    ctx = PageContext("test", decided_at=T0 + 6, closed_by="quorum", written=(("pytorchjob/job", "x-y"),), live=True)
    text = Parsed(render(incident, verdict, ctx)).all_text
    assert "podmortem wrote" in text and "x-y" in text and "verdict (quorum)" in text


def test_end_labels_name_the_signal_and_the_oom() -> None:
    incident = small_incident()
    members = list(incident.members)
    members[0] = dataclasses.replace(
        members[0], termination=Termination(exit_code=137, reason="OOMKilled", finished_at=T0 + 3)
    )
    members[2] = dataclasses.replace(members[2], termination=Termination(exit_code=143, reason="Error", finished_at=T0))
    incident = dataclasses.replace(incident, members=tuple(members))
    tl = timeline.build(incident, decide(incident))
    ends = {r.pod: [k.label for k in r.marks if k.kind == "end"] for g in tl.groups for r in g.rows}
    assert ends["job-worker-0"] == ["OOMKilled"] and ends["job-worker-2"] == ["exit 143 (SIGTERM)"]


def test_the_runner_up_shows_only_below_0_9() -> None:
    incident = small_incident()
    verdict = dataclasses.replace(decide(incident), confidence=0.6, runner_up_pod="job-worker-0")
    page = Parsed(render(incident, verdict))
    assert page.by_id("runner-up") is not None
    assert "job-worker-0" in page.all_text and "was the next most likely root" in page.all_text
    sure = dataclasses.replace(verdict, confidence=0.9)
    assert Parsed(render(incident, sure)).by_id("runner-up") is None


def test_missing_members_are_named() -> None:
    incident = small_incident(world_size=4)
    verdict = dataclasses.replace(
        decide(incident), members_missing=1, missing_ranks=(3,), missing_pods=("job-worker-3",)
    )
    page = Parsed(render(incident, verdict))
    assert page.by_id("missing") is not None
    assert "1 of 4 members had not reported when this was decided: job-worker-3 (node rank 3)." in page.all_text
    assert Parsed(render(small_incident(), decide(small_incident()))).by_id("missing") is None


def test_hang_evidence_and_attempt_history_show_when_the_verdict_has_them() -> None:
    incident = small_incident()
    doc = decide(incident).to_dict()
    assert doc.get("hang") is None and "attempt_history" not in doc  # no hang evidence, no history
    bare = Parsed(render(incident, doc))
    assert bare.by_id("hang") is None and bare.by_id("attempts") is None
    doc["hang"] = {"stuck_ranks": [2], "frame": "load_batch (train.py:5) <script>x</script>", "behind": "job-worker-2"}
    doc["attempt_history"] = [
        {"attempt": "", "pod": "job-worker-1", "category": "user_code"},
        {"attempt": "r1", "pod": "job-worker-1", "category": "user_code"},
    ]
    page = Parsed(render(incident, doc))
    assert page.by_id("hang") is not None and page.by_id("attempts") is not None
    text = page.all_text
    assert "stuck_ranks" in text and "load_batch (train.py:5) <script>x</script>" in text
    assert "r1" in text
    assert "script" not in {t for t, _ in page.tags}
    # from the cluster, the annotation's camelCase keys reach the same place
    annotated = cluster.verdict_from_annotation({"pod": "job-worker-1", "attemptHistory": [{"attempt": "g2"}]})
    assert annotated["attempt_history"] == [{"attempt": "g2"}]
    assert Parsed(render(incident, {**doc, **annotated})).by_id("attempts") is not None


def test_a_job_that_did_not_fail_has_a_page_too() -> None:
    incident = small_incident()
    clean = tuple(
        dataclasses.replace(m, error=None, log_tail="", termination=Termination(exit_code=0, reason="Completed"))
        for m in incident.members
    )
    incident = dataclasses.replace(incident, members=clean)
    verdict = decide(incident)
    assert verdict.pod is None
    page = Parsed(render(incident, verdict))
    assert page.by_id("root-row") is None and page.by_id("verdict-sentence") is not None


def test_analyze_html_writes_the_page_and_still_prints(tmp_path: Path) -> None:
    bundle = hostile_bundle(tmp_path / "b")
    out, err = io.StringIO(), io.StringIO()
    page = tmp_path / "page.html"
    assert analyze.main(str(bundle), as_json=True, html_path=str(page), out=out, err=err) == 0
    assert '"root_cause"' in out.getvalue()
    assert f"incident page written to {page}" in err.getvalue()
    assert Parsed(page.read_text()).by_id("root-row") is not None


def test_analyze_html_to_a_place_it_cannot_write_is_one_clear_line(tmp_path: Path) -> None:
    bundle = hostile_bundle(tmp_path / "b")
    out, err = io.StringIO(), io.StringIO()
    target = tmp_path / "no-such-dir" / "page.html"
    assert analyze.main(str(bundle), html_path=str(target), out=out, err=err) == 2
    assert err.getvalue().startswith(f"podmortem analyze: cannot write the page {target}: ")
    assert len(err.getvalue().splitlines()) == 1 and not target.exists()
    assert not list((tmp_path / "b").glob(".*.tmp"))


def test_analyze_html_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bundle = hostile_bundle(tmp_path / "b")
    assert cli.main(["analyze", str(bundle), "--html", str(tmp_path / "p.html")]) == 0
    assert "failed first" in capsys.readouterr().out
    assert (tmp_path / "p.html").read_text().startswith("<!DOCTYPE html>")


def test_page_beside_uses_the_published_verdict_file(tmp_path: Path) -> None:
    bundle = hostile_bundle(tmp_path / "b")
    incident = load_bundle(bundle)
    verdict = decide(incident)
    doc = {
        "incident": {"id": "ns:job", "attempt": "r1", "opened_at": 1795272000.5},
        "verdict": verdict.to_dict(),
        "revision": 2,
        "final": True,
        "closed_by": "quorum",
        "decided_at": 1795272003.0,
    }
    doc["attempt_history"] = [{"attempt": "", "pod": "job-worker-1"}, {"attempt": "r1", "pod": "job-worker-1"}]
    path = analyze.page_beside(bundle, doc)
    assert Parsed(path.read_text()).by_id("attempts") is not None  # a verdict file's own key shows too
    assert path == bundle / "incident.html"
    text = Parsed(path.read_text()).all_text
    assert "revision 2, final" in text and "attempt r1" in text and "verdict (quorum)" in text
    assert "incident opened" in text


def test_from_a_cluster_the_page_shows_only_what_was_written() -> None:
    incident = small_incident()
    members = list(incident.members)
    # the verdict names no victims (an early revision), but podmortem marked worker-0 one
    said = "gloo: connection closed by peer; root pod job-worker-1 failed first: user_code"
    # its error file and log were not read (a live page): only its exit code and the condition podmortem wrote
    members[0] = dataclasses.replace(
        members[0], error=None, log_tail="", conditions=(Condition("podmortem.io/Victim", "True", "Victim", said),)
    )
    incident = dataclasses.replace(incident, members=tuple(members))
    verdict = dataclasses.replace(decide(incident), secondary=(), runner_up_pod=None)
    live = timeline.build(incident, verdict, would_write=False)
    rows = {r.pod: r for g in live.groups for r in g.rows}
    assert rows["job-worker-0"].role == "victim" and rows["job-worker-0"].why == said
    assert rows["job-worker-0"].condition == "Victim (written)"
    assert rows["job-worker-1"].condition == "" and rows["job-worker-2"].condition == ""
    text = Parsed(render(incident, verdict, PageContext("cluster", live=True))).all_text
    assert "would write" not in text and "podmortem wrote" in text


def test_written_to_names_the_job_and_the_nodes_record() -> None:
    from podmortem.kubectl_plugin import written_to

    job = {
        "kind": "PyTorchJob",
        "metadata": {"name": "llm", "annotations": {"podmortem.io/summary": "s", "podmortem.io/verdict": "{}"}},
        "status": {"conditions": [{"type": "PodmortemRootCause", "status": "True", "reason": "Hardware"}]},
    }
    node = {
        "metadata": {"name": "gpu-7", "annotations": {"podmortem.io/hardware-faults": '[{"pod": "a"}, {"pod": "b"}]'}},
        "status": {"conditions": [{"type": "podmortem.io/SuspectHardware", "status": "True", "reason": "Repeated"}]},
    }
    assert written_to(job, node) == [
        ("pytorchjob/llm", "annotations podmortem.io/summary, podmortem.io/verdict"),
        ("pytorchjob/llm", "condition PodmortemRootCause=True (Hardware)"),
        ("node/gpu-7", "podmortem.io/hardware-faults (2 record(s))"),
        ("node/gpu-7", "condition podmortem.io/SuspectHardware=True (Repeated)"),
    ]
    assert written_to(job, {}) == written_to(job, {})[:2]


def test_a_hang_frame_reads_as_file_line_and_function() -> None:
    incident = small_incident()
    doc = decide(incident).to_dict()
    doc["hang"] = {"finding": "behind", "frame": {"file": "train.py", "line": 211, "function": "load_batch"}}
    assert "train.py:211 in load_batch" in Parsed(render(incident, doc)).all_text


def test_the_evidence_lists_a_failed_capture_only_where_it_leaves_a_gap() -> None:
    """worker-0's socket was asked after its container ended (T0+3): counted. worker-2's py-spy failed while
    it still ran, and nothing else shows its rank: listed."""
    refused = "control-plane socket: [Errno 111] Connection refused"
    denied = "py-spy exited 1: Permission denied (os error 13)"
    incident = small_incident()
    members = list(incident.members)
    members[0] = dataclasses.replace(
        members[0], captures=(WorkerCapture("control_plane", global_rank=0, note=refused, captured_at=T0 + 5),)
    )
    members[2] = dataclasses.replace(
        members[2], captures=(WorkerCapture("py_spy", global_rank=2, note=denied, captured_at=T0 + 1),)
    )
    incident = dataclasses.replace(incident, members=tuple(members))
    page = Parsed(render(incident, decide(incident)))
    assert page.by_id("evidence") is not None
    text = page.all_text
    assert refused not in text
    assert "capture notes not listed: 1 asked after the rank had exited" in text
    assert f"job-worker-2: capture of rank 2 (py_spy) failed, and nothing else shows where it was: {denied}" in text


def hang_verdict_file(bundle: Path, **incident: object) -> dict[str, object]:
    """The verdict file the aggregator publishes for `hang_bundle` (its keys as `Decision.to_dict` writes them)."""
    verdict = decide(load_bundle(bundle))
    meta = {"id": "ns:job", "attempt": "", "opened_at": HANG_TS + 10.2, **incident}
    return {"incident": meta, "verdict": verdict.to_dict(), "revision": 2, "final": True, "closed_by": "quorum",
            "decided_at": HANG_TS + 12}  # fmt: skip


def moments(page: str) -> list[str]:
    return re.findall(r'<text class="momentlabel"[^>]*>([^<]*)</text>', page)


def test_the_stall_is_drawn_when_the_incident_has_one(tmp_path: Path) -> None:
    bundle = hang_bundle(tmp_path / "b")
    # The verdict on the failure, after a provisional one on the stall: its moment is drawn, with its label.
    page = analyze.page_beside(bundle, hang_verdict_file(bundle, stalled_at=HANG_TS + 1.0)).read_text()
    assert moments(page) == ["incident opened", "stalled: every member quiet", "verdict (quorum)"]
    tl = timeline.build(dataclasses.replace(load_bundle(bundle), stalled_at=HANG_TS + 1.0), decide(load_bundle(bundle)))
    assert timeline.Moment(HANG_TS + 1.0, "stalled: every member quiet") in tl.moments
    # A bundle alone does not know when the verdict was published: its stall's captures say when it was seen.
    assert moments(render(load_bundle(bundle), decide(load_bundle(bundle)))) == ["stalled: stacks captured"]
    # From the cluster: the verdict annotation's `stalledAt` (kubectl podmortem explain --html).
    job = {"kind": "PyTorchJob", "metadata": {"namespace": "ns", "name": "job"}}
    live = cluster.incident_from_cluster(job, [], {}, {"stalledAt": "2026-11-21T14:58:01Z"})
    assert live.stalled_at == HANG_TS + 1.0
    # No stall, nothing drawn.
    assert moments(render(small_incident(), decide(small_incident()))) == []


def test_a_hangs_root_row_says_what_the_capture_showed(tmp_path: Path) -> None:
    incident = load_bundle(hang_bundle(tmp_path / "b"))
    verdict = decide(incident)
    assert (verdict.pod, verdict.global_rank, verdict.category) == ("job-worker-1", 1, "hang")
    for v in (verdict, timeline.verdict_of(verdict.to_dict())):  # a Verdict, or a verdict file's dictionary
        [root] = [r for g in timeline.build(incident, v).groups for r in g.rows if r.role == "root"]
        assert root.why == "rank 1 never entered all_reduce #7 that the others wait in"
        assert root.line == "stuck at workload.py:216 in load_batch" and root.source == "captured (control_plane)"
        capture = next(k for k in root.marks if k.kind == "capture")
        assert (capture.at, capture.label) == (HANG_TS + 0.5, "stuck at workload.py:216 in load_batch")
    page = render(incident, verdict.to_dict())
    [row] = re.findall(r'<g class="row row-root".*?</g>\n</g>', page, re.S)
    assert re.findall(r'<text class="why"[^>]*>([^<]*)</text>', row) == [
        "root cause: rank 1 never entered all_reduce #7 that the others wait in"
    ]  # not the timeout it printed
    assert ">stuck at workload.py:216 in load_batch</text>" in row  # its capture's mark
    # The other ranks keep what they printed: they timed out waiting.
    rows = {r.pod: r for g in timeline.build(incident, verdict).groups for r in g.rows}
    assert "Timed out waiting" in rows["job-worker-0"].line and not any(
        k.kind == "capture" for k in rows["job-worker-0"].marks
    )
    # A bundle copied without the sidecars' captures (`podmortem demo --keep`), beside the verdict file that
    # says what they showed: the row says it too, its capture placed at the stall (it came after, when unknown).
    bare = hang_bundle(tmp_path / "bare", captured=False)
    doc = {**hang_verdict_file(tmp_path / "b", stalled_at=HANG_TS + 1.0), "verdict": verdict.to_dict()}
    [row] = re.findall(r'<g class="row row-root".*?</g>\n</g>', analyze.page_beside(bare, doc).read_text(), re.S)
    assert "rank 1 never entered all_reduce #7" in row and ">stuck at workload.py:216 in load_batch</text>" in row
    assert "(taken after the stall was seen, its own time not kept: drawn at the stall)" in row
    assert "provisional verdict" not in row  # the verdict on the failure: no provisional verdict placed it


def provisional_verdict_file(bundle: Path, verdict: dict[str, object]) -> dict[str, object]:
    """The verdict file of a stall's provisional verdict on `hang_bundle`'s job: the stall first seen at
    HANG_TS + 1, its captures asked for then and answered, the verdict published 8 s later; nothing failed."""
    doc = hang_verdict_file(bundle, opened_at=None, stalled_at=HANG_TS + 1.0)
    return {**doc, "verdict": verdict, "revision": 1, "final": False, "provisional": True, "closed_by": "stall",
            "decided_at": HANG_TS + 9.0}  # fmt: skip


def test_a_provisional_verdicts_page_draws_the_stall_when_it_was_first_seen(tmp_path: Path) -> None:
    # The stall is drawn where the aggregator first saw every member quiet, and the provisional verdict where
    # it was published after the captures: two moments, not the stall at the publish time.
    verdict = decide(load_bundle(hang_bundle(tmp_path / "b"))).to_dict()
    bare = hang_bundle(tmp_path / "bare", captured=False)
    page = analyze.page_beside(bare, provisional_verdict_file(tmp_path / "b", verdict)).read_text()
    assert moments(page) == ["stalled: every member quiet", "provisional verdict"]
    drawn = dict(re.findall(r'<title>([^<]*) at [^<]*</title><line class="moment" x1="([\d.]+)"', page))
    assert float(drawn["stalled: every member quiet"]) < float(drawn["provisional verdict"])
    # The capture, its own time not kept, is drawn at the stall (asked for then), not at the publish.
    [row] = re.findall(r'<g class="row row-root".*?</g>\n</g>', page, re.S)
    assert "its own time not kept: drawn at the stall" in row
    incident = dataclasses.replace(load_bundle(bare), stalled_at=HANG_TS + 1.0)
    tl = timeline.build(incident, timeline.verdict_of(verdict), decided_at=HANG_TS + 9.0, closed_by="stall")
    assert tl.moments == (
        timeline.Moment(HANG_TS + 1.0, "stalled: every member quiet"),
        timeline.Moment(HANG_TS + 9.0, "provisional verdict"),
    )
    [root] = [r for g in tl.groups for r in g.rows if r.role == "root"]
    assert [k.at for k in root.marks if k.kind == "capture"] == [HANG_TS + 1.0]


def test_clock_offsets_a_source_does_not_carry_are_not_counted_as_unmeasured(tmp_path: Path) -> None:
    bundle = hang_bundle(tmp_path / "b")
    incident = load_bundle(bundle)
    offline = Parsed(render(incident, decide(incident), PageContext(source="podmortem analyze (offline)"))).all_text
    assert "0 of 3 measured" not in offline
    assert "Pod times are shown as each pod's own clock said: podmortem analyze (offline) carries no clock" in offline
    assert "clock offset not measured" not in offline  # nor in the rows' tooltips
    older = analyze.page_beside(bundle, hang_verdict_file(bundle)).read_text()  # a verdict file without them
    assert "carries no clock offsets" in older and "0 of 3 measured" not in older
    # The aggregator's verdict file carries what the sidecars measured: applied to the bundle's pod times.
    doc = hang_verdict_file(bundle, clock_offsets={"job-worker-0": -4.0, "job-worker-1": 0.0})
    page = analyze.page_beside(bundle, doc).read_text()
    text = Parsed(page).all_text
    assert "2 of 3 measured (the others shown as their clocks said)" in text
    assert "clock offset -4.000 s applied" in text and "clock offset not measured (none applied)" in text
