"""`kubectl podmortem explain` through the real kubectl binary (plugin discovery included) and the emulator."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.kube_emulator import PODS, TRAINJOBS, EmulatorHandle
from support.kube_objects import (
    JOB,
    NS,
    decision,
    make_kube,
    seed_jobset,
    seed_pytorchjob,
    terminated,
    trainjob,
)

from podmortem import kubectl_plugin
from podmortem.aggregator.config import KubeSettings, NodeActions
from podmortem.aggregator.kube import nodes
from podmortem.aggregator.kube.publish import kube_publishers
from podmortem.core.model import JobRef


@pytest.fixture
async def published(kube_api: EmulatorHandle, tmp_path: Path) -> Path:
    seed_pytorchjob(kube_api)
    kube = make_kube(kube_api, tmp_path)
    for publisher in kube_publishers(KubeSettings(), kube):
        await publisher.publish(decision())
    kube.close()
    kube_api.emulator.token = None  # kubectl (client-go) sends no bearer token over plain http
    return kube_api.kubeconfig(tmp_path / "config", NS)


def plugin_on_path(tmp_path: Path) -> dict[str, str]:
    """A `kubectl-podmortem` executable on PATH, as `pip install` would put the console script."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "kubectl-podmortem"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m podmortem.kubectl_plugin "$@"\n')
    script.chmod(0o755)
    return dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}")


def run(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=120, env=env)


async def test_kubectl_podmortem_explain_a_job(published: Path, tmp_path: Path) -> None:
    env = plugin_on_path(tmp_path) | {"KUBECONFIG": str(published)}  # flags cannot precede a plugin's name
    out = run(["kubectl", "podmortem", "explain", "pytorchjob/mixtral-cpt", "-n", NS], env=env)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "Name:           mixtral-cpt" in text and "Kind:           PyTorchJob" in text
    assert "Verdict:        rank 1 (pod mixtral-cpt-worker-1 on node-1) failed first: user_code" in text
    assert "  Pod:          mixtral-cpt-worker-1" in text and "  Retryable:    false" in text
    assert "  - error file: ValueError at 15:06:10" in text
    assert "Incident:       kubeflow-user.mixtral-cpt.0 (revision 1, final)" in text
    assert "Condition:      PodmortemRootCause=True (UserCode)" in text


async def test_explain_shows_each_pods_condition(published: Path, kube_api: EmulatorHandle) -> None:
    for pod, kind, reason in (("worker-0", "Victim", "Victim"), ("worker-1", "PermanentFailure", "UserCode")):
        condition = {
            "type": f"podmortem.io/{kind}", "status": "True", "reason": reason, "message": f"{kind} of {pod}",
            "lastTransitionTime": "2026-11-21T15:06:11Z",
        }  # fmt: skip
        kube_api.change(PODS, NS, f"mixtral-cpt-{pod}", {"status": {"conditions": [condition]}})
    out = run([sys.executable, "-m", "podmortem.kubectl_plugin", "explain", "pod/mixtral-cpt-worker-0",
               "--kubeconfig", str(published), "-n", NS])  # fmt: skip
    assert out.returncode == 0, out.stderr
    section = out.stdout.split("Pod Conditions:\n", 1)[1].splitlines()
    assert section == [
        "  mixtral-cpt-worker-0  Victim (Victim, 2026-11-21T15:06:11Z): Victim of worker-0",
        "  mixtral-cpt-worker-1  PermanentFailure (UserCode, 2026-11-21T15:06:11Z): PermanentFailure of worker-1",
        "  mixtral-cpt-worker-2  <none>",
    ]


async def test_explain_shows_the_nodes_fault_record(kube_api: EmulatorHandle, tmp_path: Path) -> None:
    """Hardware root causes of two jobs on node-1: explain shows the node's record and its SuspectHardware
    condition."""
    seed_pytorchjob(kube_api)
    kube_api.put("v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}, "status": {}})
    kube = make_kube(kube_api, tmp_path)
    other = JobRef(NS, "llama-sft", "PyTorchJob", "uid-llama-sft")  # a node is marked on two jobs' faults
    for n, job in ((1, None), (2, other)):
        d = decision(category="hardware", job=job)
        d = dataclasses.replace(d, incident=dataclasses.replace(d.incident, incident_id=f"{NS}.job.{n}"))
        for publisher in kube_publishers(KubeSettings(), kube):
            if job is None or publisher.name == "kube-nodes":  # the other job exists only in the node's record
                await publisher.publish(d)
    kube.close()
    kube_api.emulator.token = None
    config = kube_api.kubeconfig(tmp_path / "config", NS)
    out = run([sys.executable, "-m", "podmortem.kubectl_plugin", "explain", "pytorchjob/mixtral-cpt",
               "--kubeconfig", str(config), "-n", NS])  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "Node node-1 Hardware Faults:" in out.stdout
    assert out.stdout.count(f"{NS}/PyTorchJob/mixtral-cpt  pod mixtral-cpt-worker-1") == 1
    assert out.stdout.count(f"{NS}/PyTorchJob/llama-sft  pod mixtral-cpt-worker-1") == 1
    assert "      error file: ValueError at 15:06:10" in out.stdout
    assert "Suspect:        True (RepeatedHardwareFaults): 2 hardware root causes within 7d" in out.stdout


def documented_clearing_commands() -> list[str]:
    """The console commands docs/kubernetes.md gives for clearing a suspect node, as written there."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "kubernetes.md").read_text()
    section = text.split("Clearing a node once it is repaired", 1)[1].split("```console", 1)[1].split("```", 1)[0]
    return [line[2:].split("  #", 1)[0].strip() for line in section.splitlines() if line.startswith("$ kubectl")]


async def test_the_documented_commands_clear_a_suspect_node(kube_api: EmulatorHandle, tmp_path: Path) -> None:
    kube_api.put("v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}, "status": {}})
    kube = make_kube(kube_api, tmp_path)
    settings = KubeSettings(nodes=NodeActions(taint=True), publish=frozenset())
    for n in (1, 2):
        d = decision(category="hardware", job=JobRef(NS, f"j{n}", "Job", f"uid-j{n}"))  # two jobs mark a node
        d = dataclasses.replace(d, incident=dataclasses.replace(d.incident, incident_id=f"{NS}.j.{n}"))
        for publisher in kube_publishers(settings, kube):
            await publisher.publish(d)
    node = kube_api.get("v1/nodes", None, "node-1")
    assert node is not None and node["spec"]["taints"][0]["key"] == "podmortem.io/suspect-hardware"
    kube_api.emulator.token = None
    env = dict(os.environ, KUBECONFIG=str(kube_api.kubeconfig(tmp_path / "config", NS)))
    commands = documented_clearing_commands()
    assert len(commands) == 3
    for command in commands:
        out = subprocess.run(["bash", "-c", command.replace("NODE", "node-1")], capture_output=True, text=True,
                             timeout=120, env=env)  # fmt: skip
        assert out.returncode == 0, (command, out.stderr)
    node = kube_api.get("v1/nodes", None, "node-1")
    assert node is not None
    [ours] = [c for c in node["status"]["conditions"] if c["type"] == "podmortem.io/SuspectHardware"]
    assert ours["status"] == "False" and nodes.cleared_at(node) is not None
    assert not node["spec"].get("taints") and "podmortem.io/hardware-faults" not in node["metadata"].get(
        "annotations", {}
    )
    kube.close()


def test_render_node() -> None:
    assert kubectl_plugin.render_node({"metadata": {"name": "n"}}) is None
    damaged = {"metadata": {"name": "n", "annotations": {"podmortem.io/hardware-faults": "{oops"}}}
    assert kubectl_plugin.render_node(damaged) == "Node n Hardware Faults: <none>\n"


async def test_a_pod_without_a_verdict_leads_to_its_job(published: Path) -> None:
    args = [sys.executable, "-m", "podmortem.kubectl_plugin", "explain", "pod/mixtral-cpt-worker-0"]
    out = run([*args, "--kubeconfig", str(published), "-n", NS])
    assert out.returncode == 0, out.stderr
    assert "showing its job pytorchjob.kubeflow.org/mixtral-cpt" in out.stdout
    assert "Pod:          mixtral-cpt-worker-1" in out.stdout
    out = run([sys.executable, "-m", "podmortem.kubectl_plugin", "explain", "pod/mixtral-cpt-worker-1",
               "--kubeconfig", str(published), "-n", NS, "-o", "json"])  # fmt: skip
    assert out.returncode == 0 and json.loads(out.stdout)["rank"] == 1


async def test_errors_and_no_verdict(published: Path, kube_api: EmulatorHandle) -> None:
    base = [sys.executable, "-m", "podmortem.kubectl_plugin", "explain"]
    missing = run([*base, "pytorchjob/nope", "--kubeconfig", str(published), "-n", NS])
    assert missing.returncode == 2 and missing.stderr.startswith("error: ") and "Not Found" in missing.stderr
    no_config = run([*base, "pytorchjob/x", "--kubeconfig", str(published.parent / "absent")])
    assert no_config.returncode == 2 and "no such file or directory" in no_config.stderr  # kubectl: "error: stat ..."
    assert no_config.stderr.startswith("error: stat ") and "error: error:" not in no_config.stderr  # said once
    assert run([*base, "mixtral-cpt", "--kubeconfig", str(published)]).returncode == 2
    kube_api.put("v1/pods", {"metadata": {"name": "lonely", "namespace": NS}})
    none = run([*base, "pod/lonely", "--kubeconfig", str(published), "-n", NS])
    assert none.returncode == 1 and "No podmortem verdict" in none.stdout


async def test_kubectl_describe_shows_the_warning_event(published: Path) -> None:
    out = run(["kubectl", "--kubeconfig", str(published), "describe", "pod", "mixtral-cpt-worker-1"])
    assert out.returncode == 0, out.stderr
    assert "podmortem.io/summary" in out.stdout
    assert "Warning  PodmortemRootCause" in out.stdout


def test_render_without_a_verdict_is_none() -> None:
    assert kubectl_plugin.render({"metadata": {"name": "x"}}) is None
    text = kubectl_plugin.render({"kind": "Job", "metadata": {"annotations": {"podmortem.io/summary": "s"}}})
    assert text is not None and "Verdict:        s" in text


@pytest.mark.parametrize("verdict", ["[" * 100_000, "[1, 2]", '"text"', "{broken"])
def test_render_of_an_edited_verdict_annotation_shows_the_summary(verdict: str) -> None:
    annotations = {"podmortem.io/summary": "s", "podmortem.io/verdict": verdict}
    text = kubectl_plugin.render({"kind": "Job", "metadata": {"annotations": annotations}})
    assert text is not None and "Verdict:        s" in text


async def test_a_jobset_pod_leads_through_its_child_job_to_the_jobset(kube_api: EmulatorHandle, tmp_path: Path) -> None:
    _, pods = seed_jobset(kube_api, "llm", [("workers", 2, 2)])
    kube = make_kube(kube_api, tmp_path)
    target = decision(pod=pods[3]["metadata"]["name"], job=JobRef(NS, "llm", "JobSet"))
    for publisher in kube_publishers(KubeSettings(publish=frozenset({"annotations"})), kube):
        await publisher.publish(target)
    kube.close()
    kube_api.emulator.token = None
    config = kube_api.kubeconfig(tmp_path / "config", NS)
    pod = pods[0]["metadata"]["name"]  # a victim: no verdict on it, nor on its child Job
    out = run([sys.executable, "-m", "podmortem.kubectl_plugin", "explain", f"pod/{pod}",
               "--kubeconfig", str(config), "-n", NS])  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "showing its job jobset.jobset.x-k8s.io/llm, via job.batch/llm-workers-0" in out.stdout
    assert f"Pod:          {pods[3]['metadata']['name']}" in out.stdout


async def test_a_trainjob_pod_leads_through_job_and_jobset_to_the_trainjob(
    kube_api: EmulatorHandle, tmp_path: Path
) -> None:
    # TrainJob -> JobSet -> child Job -> pod: the verdict lives on the TrainJob, three hops up.
    tj = kube_api.put(TRAINJOBS, trainjob("ft", num_nodes=4))
    _, pods = seed_jobset(kube_api, "ft", [("node", 2, 2)], owner=tj)
    kube = make_kube(kube_api, tmp_path)
    target = decision(pod=pods[2]["metadata"]["name"], job=JobRef(NS, "ft", "TrainJob"))
    for publisher in kube_publishers(KubeSettings(publish=frozenset({"annotations"})), kube):
        await publisher.publish(target)
    kube.close()
    kube_api.emulator.token = None
    config = kube_api.kubeconfig(tmp_path / "config", NS)
    pod = pods[1]["metadata"]["name"]  # a victim, in another child Job than the root
    out = run(["kubectl", "podmortem", "explain", f"pod/{pod}", "--kubeconfig", str(config), "-n", NS],
              env=plugin_on_path(tmp_path))  # fmt: skip
    assert out.returncode == 0, out.stderr
    via = "showing its job trainjob.trainer.kubeflow.org/ft, via job.batch/ft-node-0 -> jobset.jobset.x-k8s.io/ft"
    assert via in out.stdout, out.stdout
    assert f"Pod:          {pods[2]['metadata']['name']}" in out.stdout


async def test_kubectl_podmortem_bundle_collects_what_podmortem_analyze_reads(
    kube_api: EmulatorHandle, tmp_path: Path
) -> None:
    """A job's pods and logs through the real kubectl, into a bundle that `podmortem analyze` decides on."""
    _, pods = seed_pytorchjob(kube_api, workers=3)
    victim_log = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer\n"
    for pod in pods:
        kube_api.set_log(
            NS,
            pod,
            "pytorch",
            "Traceback (most recent call last):\nKeyError: 'label'\n" if pod == pods[1] else victim_log,
        )
        kube_api.change(
            PODS, NS, pod, terminated(1, finished="2026-11-21T15:06:10Z" if pod == pods[1] else "2026-11-21T15:06:12Z")
        )
    kube_api.emulator.token = None  # kubectl (client-go) sends no bearer token over plain http
    env = plugin_on_path(tmp_path) | {"KUBECONFIG": str(kube_api.kubeconfig(tmp_path / "config", NS))}
    out = run(["kubectl", "podmortem", "bundle", f"pytorchjob/{JOB}", str(tmp_path / "b"), "-n", NS], env=env)
    assert out.returncode == 0, out.stderr
    bundle = tmp_path / "b"
    assert json.loads((bundle / "incident.json").read_text())["job"]["kind"] == "PyTorchJob"
    assert sorted(p.name for p in (bundle / "pods").iterdir()) == sorted(pods)
    assert "KeyError" in (bundle / "pods" / pods[1] / "log.txt").read_text()
    analyzed = run([sys.executable, "-m", "podmortem.cli", "analyze", str(bundle), "--json"])
    assert analyzed.returncode == 0, analyzed.stderr
    assert json.loads(analyzed.stdout)["root_cause"]["pod"] == pods[1]


async def test_bundle_takes_the_captures_of_the_aggregators_verdict_file(
    kube_api: EmulatorHandle, tmp_path: Path
) -> None:
    """No object in the cluster holds a hang's captures: the verdict file the aggregator wrote does, and
    `--verdict-file` puts them in each pod's captures.json. Another job's verdict file is refused first."""
    from podmortem.offline.bundle import load_bundle

    _, pods = seed_pytorchjob(kube_api, workers=2)
    kube_api.emulator.token = None  # kubectl (client-go) sends no bearer token over plain http
    env = plugin_on_path(tmp_path) | {"KUBECONFIG": str(kube_api.kubeconfig(tmp_path / "config", NS))}
    stack = 'Thread 0x01 (most recent call first):\n  File "/w/train.py", line 12 in load_batch\n'
    verdict = {
        "incident": {"job": {"namespace": NS, "name": JOB, "kind": "PyTorchJob", "uid": ""}},
        "captures": [{"pod": pods[1], "path": "py_spy", "global_rank": 1, "local_rank": 0, "stack": stack,
                      "flight_recorder": None, "note": "", "trigger": "stall", "captured_at": 1.5}],
    }  # fmt: skip
    other = tmp_path / "other.json"
    other.write_text(json.dumps(verdict | {"incident": {"job": {"namespace": NS, "name": "another"}}}))
    refused = run(["kubectl", "podmortem", "bundle", f"pytorchjob/{JOB}", str(tmp_path / "b"), "-n", NS,
                   "--verdict-file", str(other)], env=env)  # fmt: skip
    assert refused.returncode == 2 and f"the verdict of {NS}/another, not of {NS}/{JOB}" in refused.stderr
    assert not (tmp_path / "b").exists()  # nothing written
    (file := tmp_path / "verdict.json").write_text(json.dumps(verdict))
    out = run(["kubectl", "podmortem", "bundle", f"pytorchjob/{JOB}", str(tmp_path / "b"), "-n", NS,
               "--verdict-file", str(file)], env=env)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "2 pod(s) of pytorchjob/" in out.stdout and "(1 with captures)" in out.stdout
    members = {m.pod: m for m in load_bundle(tmp_path / "b").members}
    assert [(c.path, c.global_rank, c.stack) for c in members[pods[1]].captures] == [("py_spy", 1, stack)]
    assert members[pods[0]].captures == ()


async def test_explain_html_draws_the_page_from_what_kubectl_reads(
    published: Path, kube_api: EmulatorHandle, tmp_path: Path
) -> None:
    """`explain --html`: the job's pods, the verdict annotation, the conditions podmortem wrote and the root's
    log tail, read through the real kubectl, drawn on a page that Chromium opens without a request."""
    from bench import browser

    root, victim = f"{JOB}-worker-1", f"{JOB}-worker-0"
    kube_api.set_log(NS, root, "pytorch", "step 10\nTraceback (most recent call last):\nValueError: bad label 7\n")
    for pod, finished in ((root, "2026-11-21T15:06:10Z"), (victim, "2026-11-21T15:06:12Z")):
        kube_api.change(PODS, NS, pod, terminated(1, finished=finished))
    written = {
        "type": "podmortem.io/Victim", "status": "True", "reason": "Victim",
        "message": f"gloo: connection closed by peer; root pod {root} failed first: user_code",
        "lastTransitionTime": "2026-11-21T15:06:13Z",
    }  # fmt: skip
    kube_api.change(PODS, NS, victim, {"status": {"conditions": [written]}})
    env = plugin_on_path(tmp_path) | {"KUBECONFIG": str(published)}
    page = tmp_path / "incident.html"
    out = run(["kubectl", "podmortem", "explain", "pytorchjob/mixtral-cpt", "-n", NS, "--html", str(page)], env=env)
    assert out.returncode == 0, out.stderr
    assert "Kind:           PyTorchJob" in out.stdout and f"incident page written to {page}" in out.stderr
    probes = {
        "root": "document.getElementById('root-row')?.dataset.pod ?? null",
        "sentence": "document.getElementById('verdict-sentence').textContent",
        "text": "document.body.innerText",
    }
    loaded = await browser.load_async(page, evaluate=probes, screenshot=tmp_path / "explain.png")
    assert loaded.errors == [] and loaded.requests == []
    assert loaded.values["root"] == root
    assert loaded.values["sentence"] == f"{root} failed first: user_code, not retryable, confidence 0.92."
    text = loaded.values["text"]
    assert "from the cluster (kubectl podmortem explain) · revision 1, final" in text
    assert "condition PodmortemRootCause=True (UserCode) on pytorchjob/mixtral-cpt" in text
    assert f"podmortem.io/Victim (written) on 1 pod(s): {victim}" in text
    assert "ValueError: bad label 7" in text  # the root's log tail, read with kubectl logs
    assert "error file: ValueError at 15:06:10" in text  # the verdict's evidence


async def test_explain_json_html_prints_the_verdict_and_writes_the_page(published: Path, tmp_path: Path) -> None:
    page = tmp_path / "p.html"
    out = run([sys.executable, "-m", "podmortem.kubectl_plugin", "explain", "pytorchjob/mixtral-cpt", "-o", "json",
               "--kubeconfig", str(published), "-n", NS, "--html", str(page)])  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["pod"] == f"{JOB}-worker-1"
    assert 'id="root-row"' in page.read_text()


async def test_explain_html_to_a_place_it_cannot_write(published: Path, tmp_path: Path) -> None:
    target = tmp_path / "no-such-dir" / "page.html"
    out = run([sys.executable, "-m", "podmortem.kubectl_plugin", "explain", "pytorchjob/mixtral-cpt",
               "--kubeconfig", str(published), "-n", NS, "--html", str(target)])  # fmt: skip
    assert out.returncode == 2
    assert out.stderr.startswith(f"error: cannot write the page {target}: ") and not target.exists()


async def test_bundle_refuses_a_directory_that_holds_anything(kube_api: EmulatorHandle, tmp_path: Path) -> None:
    """Another job's pods left in DIR would be read as members of this one: only a new or empty DIR is taken."""
    seed_pytorchjob(kube_api, workers=1)
    kube_api.emulator.token = None  # kubectl (client-go) sends no bearer token over plain http
    env = plugin_on_path(tmp_path) | {"KUBECONFIG": str(kube_api.kubeconfig(tmp_path / "config", NS))}
    taken = tmp_path / "b"
    (taken / "pods" / "other-job-worker-0").mkdir(parents=True)
    (taken / "incident.json").write_text('{"job": {"namespace": "x", "name": "y"}, "world_size": 3}\n')
    out = run(["kubectl", "podmortem", "bundle", f"pytorchjob/{JOB}", str(taken), "-n", NS], env=env)
    assert out.returncode == 2 and "not an empty directory" in out.stderr, out.stderr
    assert [p.name for p in (taken / "pods").iterdir()] == ["other-job-worker-0"]  # nothing written, nothing lost
    assert json.loads((taken / "incident.json").read_text())["job"]["name"] == "y"
    (empty := tmp_path / "empty").mkdir()
    out = run(["kubectl", "podmortem", "bundle", f"pytorchjob/{JOB}", str(empty), "-n", NS], env=env)
    assert out.returncode == 0, out.stderr
