"""The Helm chart through the real Helm engine: lint, render with each ci/ values file, Kubernetes schemas,
RBAC as documented, webhook and TLS wiring, and every container's command, env, ports and probes
checked against `podmortem <command> --help` and the components' own settings readers."""

from __future__ import annotations

import argparse
import base64
import functools
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import helm_python
import jsonpatch
import kubernetes_validate
import pytest
import yaml
from cryptography import x509
from support.kube_emulator import match_labels

from podmortem.aggregator import config as aggregator_config
from podmortem.aggregator.config import load_kube_settings
from podmortem.webhook import config as webhook_config
from podmortem.webhook import mutation

REPO = Path(__file__).resolve().parent.parent.parent
CHART = REPO / "charts" / "podmortem"
KUBE_VERSION = "1.33.0"
VALUES_FILES = sorted(p.name for p in (CHART / "ci").glob("*.yaml"))
CUSTOM_RESOURCES = {
    ("cert-manager.io/v1", "Issuer"),
    ("cert-manager.io/v1", "Certificate"),
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PodMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
}

Obj = dict[str, Any]


def values_of(name: str | None) -> dict[str, Any]:
    return {} if name is None else dict(helm_python.values_from_yaml((CHART / "ci" / name).read_text()))


def render(values: dict[str, Any] | None = None, name: str = "podmortem", namespace: str = "podmortem") -> list[Obj]:
    chart = helm_python.Chart.load(str(CHART))
    out = chart.render(values or {}, name=name, namespace=namespace, is_install=True)
    docs: list[Obj] = []
    for path, text in sorted(out.items()):
        if path.endswith("NOTES.txt"):
            continue
        docs.extend(d for d in yaml.safe_load_all(text) if d)
    return docs


def notes(values: dict[str, Any] | None = None) -> str:
    out = helm_python.Chart.load(str(CHART)).render(
        values or {}, name="podmortem", namespace="podmortem", is_install=True
    )
    return next(text for path, text in out.items() if path.endswith("NOTES.txt"))


def by_kind(docs: list[Obj], kind: str) -> list[Obj]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[Obj], kind: str, name_suffix: str = "") -> Obj:
    found = [d for d in by_kind(docs, kind) if d["metadata"]["name"].endswith(name_suffix)]
    assert len(found) == 1, (kind, name_suffix, [d["metadata"]["name"] for d in found])
    return found[0]


def env_of(container: Obj) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


# --- lint, render, schemas -------------------------------------------------------------------------


@pytest.mark.parametrize("values_file", [None, *VALUES_FILES])
def test_lint_is_clean(values_file: str | None) -> None:
    result = helm_python.lint(str(CHART), values_of(values_file), strict=True, kube_version=f"v{KUBE_VERSION}")
    errors = [m for m in result["messages"] if m["severity"] >= 2] + list(result["errors"])
    assert errors == []


@pytest.mark.parametrize("values_file", [None, *VALUES_FILES])
def test_every_object_is_schema_valid(values_file: str | None) -> None:
    docs = render(values_of(values_file))
    assert docs
    for doc in docs:
        if (doc["apiVersion"], doc["kind"]) in CUSTOM_RESOURCES:
            assert doc["metadata"]["name"] and doc["spec"], doc
            continue
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
        assert doc["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
        assert doc["metadata"]["labels"]["app.kubernetes.io/instance"] == "podmortem"


@pytest.mark.parametrize("values_file", [None, *VALUES_FILES])
def test_each_template_renders_one_kind(values_file: str | None) -> None:
    """One template per component and kind (as the cert-manager chart): a file holds one kind of object.
    RBAC files are the exception, a role beside its binding."""
    out = helm_python.Chart.load(str(CHART)).render(
        values_of(values_file), name="podmortem", namespace="podmortem", is_install=True
    )
    for path, text in out.items():
        kinds = {d["kind"] for d in yaml.safe_load_all(text) if d} if path.endswith(".yaml") else set()
        if path.endswith("-rbac.yaml"):
            assert kinds <= {"Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}, (path, kinds)
        else:
            assert len(kinds) <= 1, (path, kinds)


def test_schema_refuses_unknown_keys_and_bad_values() -> None:
    bad_values: list[dict[str, Any]] = [
        {"aggregatr": {}},
        {"webhook": {"timeoutSeconds": 11}},
        {"webhook": {"failurePolicy": "Maybe"}},
        {"aggregator": {"kube": {"publish": ["tweets"]}}},
        {"sidecar": {"tokenExpirationSeconds": 60}},
    ]
    for bad in bad_values:
        with pytest.raises(helm_python.HelmValuesError):
            render(bad)


def test_grace_period_must_exceed_shutdown_grace() -> None:
    with pytest.raises(helm_python.HelmRenderError, match=r"must be greater than aggregator\.shutdownGrace"):
        render({"aggregator": {"shutdownGrace": 30, "terminationGracePeriodSeconds": 30}})


def test_long_release_names_are_cut_to_63_characters() -> None:
    for doc in render(name="x" * 60):
        assert len(doc["metadata"]["name"]) <= 63, doc["metadata"]["name"]
    names = {d["metadata"]["name"] for d in render(name="r" * 70)}
    assert any(n.endswith("-aggregator") for n in names) and any(n.endswith("-webhook") for n in names)


# --- RBAC, exactly as docs/kubernetes.md ------------------------------------------------------------


def documented_role(kind: str, name: str) -> list[Obj]:
    text = (REPO / "docs" / "kubernetes.md").read_text()
    for block in re.findall(r"```yaml\n(.*?)```", text, re.S):
        doc = yaml.safe_load(block)
        if isinstance(doc, dict) and doc.get("kind") == kind and doc["metadata"]["name"] == name:
            return list(doc["rules"])
    raise AssertionError(f"no {kind} {name} in docs/kubernetes.md")


def test_cluster_mode_rbac_is_the_documented_one() -> None:
    docs = render()
    role = one(docs, "ClusterRole", "-aggregator")
    assert role["rules"] == documented_role("ClusterRole", "podmortem-aggregator")
    binding = one(docs, "ClusterRoleBinding", "-aggregator")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "podmortem-aggregator", "namespace": "podmortem"}]
    sidecar = one(docs, "ClusterRole", "-sidecar")
    assert sidecar["rules"] == documented_role("Role", "podmortem-sidecar")
    assert by_kind(docs, "Role") == []


def test_node_rbac_only_while_node_actions_are_on() -> None:
    docs = render()
    role = one(docs, "ClusterRole", "-nodes")
    assert role["rules"] == documented_role("ClusterRole", "podmortem-aggregator-nodes")
    binding = one(docs, "ClusterRoleBinding", "-nodes")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    env = env_of(one(docs, "Deployment", "-aggregator")["spec"]["template"]["spec"]["containers"][0])
    settings = load_kube_settings(argparse.Namespace(), env)
    assert settings.nodes.enabled and settings.nodes.threshold == 2
    assert settings.nodes.window == 7 * 86400 and not settings.nodes.taint
    off = render({"aggregator": {"nodeActions": {"enabled": False}}})
    assert not [d for d in off if d["metadata"]["name"].endswith("-nodes")]
    env = env_of(one(off, "Deployment", "-aggregator")["spec"]["template"]["spec"]["containers"][0])
    assert not load_kube_settings(argparse.Namespace(), env).nodes.enabled
    strict = {"taint": True, "suspectWindow": "36h", "suspectMinNamespaces": 2, "faultsPerNamespacePerHour": 1}
    tainting = render({"aggregator": {"nodeActions": strict}})
    env = env_of(one(tainting, "Deployment", "-aggregator")["spec"]["template"]["spec"]["containers"][0])
    settings = load_kube_settings(argparse.Namespace(), env)
    assert settings.nodes.taint and settings.nodes.window == 36 * 3600
    assert (settings.nodes.min_jobs, settings.nodes.min_namespaces) == (2, 2)
    assert settings.nodes.per_namespace_per_hour == 1


def test_namespace_mode_has_roles_and_no_webhook() -> None:
    docs = render(values_of("namespace-values.yaml"), namespace="team-a")
    kinds = {d["kind"] for d in docs}
    assert not kinds & {"ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration"}
    aggregator_role = one(docs, "Role", "-aggregator")
    assert aggregator_role["metadata"]["namespace"] == "team-a"
    assert aggregator_role["rules"] == documented_role("ClusterRole", "podmortem-aggregator")
    sidecar_binding = one(docs, "RoleBinding", "-sidecar")
    assert [s["name"] for s in sidecar_binding["subjects"]] == ["default", "trainer"]
    assert len(by_kind(docs, "Deployment")) == 1
    env = env_of(one(docs, "Deployment", "-aggregator")["spec"]["template"]["spec"]["containers"][0])
    assert env["PODMORTEM_NAMESPACES"] == "team-a"
    assert "kubectl label namespace" not in notes(values_of("namespace-values.yaml"))


def test_watched_namespaces_get_a_role_each_and_sidecar_bindings() -> None:
    docs = render(values_of("everything-values.yaml"))
    assert {r["metadata"]["namespace"] for r in by_kind(docs, "Role")} == {"team-a", "team-b"}
    assert not [r for r in by_kind(docs, "ClusterRole") if r["metadata"]["name"].endswith("-aggregator")]
    bindings = {
        b["metadata"]["namespace"]: b for b in by_kind(docs, "RoleBinding") if b["roleRef"]["kind"] == "ClusterRole"
    }
    assert bindings["team-a"]["subjects"] == [{"kind": "ServiceAccount", "name": "default", "namespace": "team-a"}]
    assert bindings["team-b"]["subjects"][0]["name"] == "system:serviceaccounts:team-b"


def test_publishing_nothing_leaves_only_reads() -> None:
    rules = one(render(values_of("publish-none-values.yaml")), "ClusterRole", "-aggregator")["rules"]
    assert {tuple(r["verbs"]) for r in rules} == {("get", "list", "watch"), ("get",)}
    assert not any("status" in res or res == "events" for r in rules for res in r["resources"])


def test_leader_election_runs_two_replicas_with_a_lease_role() -> None:
    docs = render(values_of("leader-election-values.yaml"))
    deployment = one(docs, "Deployment", "-aggregator")
    assert deployment["spec"]["replicas"] == 2 and deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    env = env_of(container)
    assert env["PODMORTEM_LEADER_ELECT"] == "1" and env["PODMORTEM_LEASE_NAME"] == "podmortem-aggregator"
    settings = load_kube_settings(argparse.Namespace(), {**env, "POD_NAMESPACE": "podmortem"})
    assert settings.leader.enabled and settings.leader.lease_name == "podmortem-aggregator"
    role = one(docs, "Role", "-leader-election")
    assert role["metadata"]["namespace"] == "podmortem"
    assert role["rules"] == documented_role("Role", "podmortem-aggregator-leader-election")
    binding = one(docs, "RoleBinding", "-leader-election")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    single = one(render(), "Deployment", "-aggregator")
    assert single["spec"]["replicas"] == 1 and not by_kind(render(), "Role")


def test_state_dir_is_on_a_volume() -> None:
    deployment = one(render(), "Deployment", "-aggregator")
    spec = deployment["spec"]["template"]["spec"]
    [container] = spec["containers"]
    assert env_of(container)["PODMORTEM_STATE_DIR"] == "/var/lib/podmortem/state"
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert mounts["state"] == "/var/lib/podmortem/state" and "emptyDir" in volumes["state"]
    claim = {"aggregator": {"state": {"existingClaim": "podmortem-state"}}}
    spec = one(render(claim), "Deployment", "-aggregator")["spec"]["template"]["spec"]
    [volume] = [v for v in spec["volumes"] if v["name"] == "state"]
    assert volume["persistentVolumeClaim"] == {"claimName": "podmortem-state"}
    off = one(render({"aggregator": {"state": {"enabled": False}}}), "Deployment", "-aggregator")
    assert "PODMORTEM_STATE_DIR" not in env_of(off["spec"]["template"]["spec"]["containers"][0])


# --- webhook and TLS -------------------------------------------------------------------------------


def test_webhook_configuration() -> None:
    docs = render(namespace="ops")
    config = one(docs, "MutatingWebhookConfiguration")
    hook = next(h for h in config["webhooks"] if h["name"] == "inject.sidecar.podmortem.io")
    assert hook["sideEffects"] == "None" and hook["failurePolicy"] == "Ignore"
    assert hook["timeoutSeconds"] <= 10 and hook["reinvocationPolicy"] == "IfNeeded"
    assert hook["rules"] == [
        {
            "operations": ["CREATE"],
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["pods"],
            "scope": "Namespaced",
        }
    ]
    assert hook["namespaceSelector"]["matchLabels"] == {"podmortem.io/injection": "enabled"}
    assert hook["namespaceSelector"]["matchExpressions"] == [
        {
            "key": "kubernetes.io/metadata.name",
            "operator": "NotIn",
            "values": ["ops", "kube-system", "kube-public", "kube-node-lease"],
        }
    ]
    conditions = {c["name"]: c["expression"] for c in hook["matchConditions"]}
    for label in ("training.kubeflow.org/job-name", "jobset.sigs.k8s.io/jobset-name", "batch.kubernetes.io/job-name"):
        assert label in conditions["training-pod"]
    assert "podmortem.io/inject" in conditions["not-opted-out"]
    service = hook["clientConfig"]["service"]
    svc = one(docs, "Service", "-webhook")
    assert (service["name"], service["namespace"], service["path"]) == (svc["metadata"]["name"], "ops", "/mutate")
    assert service["port"] in [p["port"] for p in svc["spec"]["ports"]]


def selector_string(selector: dict[str, Any]) -> str:
    """A LabelSelector object as the `labelSelector` query string the API server (and the emulator) parse."""
    terms = [f"{k}={v}" for k, v in (selector.get("matchLabels") or {}).items()]
    for e in selector.get("matchExpressions") or []:
        op = e["operator"]
        if op in ("In", "NotIn"):
            terms.append(f"{e['key']} {op.lower()} ({','.join(e['values'])})")
        else:
            terms.append(e["key"] if op == "Exists" else f"!{e['key']}")
    return ",".join(terms)


@pytest.mark.parametrize(
    "values",
    [{}, {"webhook": {"namespaceSelector": {"matchLabels": {}}, "excludeNamespaces": ["batch"]}}],
    ids=["defaults", "no-label-needed"],
)
def test_the_control_planes_namespaces_are_never_selected_whatever_their_labels(values: dict[str, Any]) -> None:
    config = one(render(values, namespace="ops"), "MutatingWebhookConfiguration")
    labelled = {"podmortem.io/injection": "enabled"}
    for hook in config["webhooks"]:
        selector = selector_string(hook["namespaceSelector"])
        for ns in ("kube-system", "kube-public", "kube-node-lease", "ops"):
            labels = {**labelled, "kubernetes.io/metadata.name": ns}
            assert not match_labels(selector, labels), f"{hook['name']} selects namespace {ns}"
        team = {**labelled, "kubernetes.io/metadata.name": "team-a"}
        assert match_labels(selector, team), f"{hook['name']} misses a labelled namespace"


def test_retry_policy_webhook_sees_only_opted_in_jobs_and_jobsets() -> None:
    docs = render(namespace="ops")
    config = one(docs, "MutatingWebhookConfiguration")
    hooks = {h["name"]: h for h in config["webhooks"]}
    retry = hooks["retry-policy.podmortem.io"]
    assert retry["objectSelector"] == {"matchLabels": {"podmortem.io/retry-policy": "enabled"}}
    assert retry["namespaceSelector"] == hooks["inject.sidecar.podmortem.io"]["namespaceSelector"]
    assert {(r["apiGroups"][0], r["resources"][0], tuple(r["operations"])) for r in retry["rules"]} == {
        ("batch", "jobs", ("CREATE",)),
        ("jobset.x-k8s.io", "jobsets", ("CREATE",)),
    }
    assert retry["clientConfig"] == hooks["inject.sidecar.podmortem.io"]["clientConfig"]
    container = one(docs, "Deployment", "-webhook")["spec"]["template"]["spec"]["containers"][0]
    env = env_of(container)
    assert env["PODMORTEM_JOBSET_MAX_RESTARTS"] == "3"
    assert env["PODMORTEM_SIDECAR_HOLD_TIMEOUT"] == ""
    cfg = webhook_config.load(None, {**env, "PODMORTEM_WEBHOOK_TLS_CERT": "c", "PODMORTEM_WEBHOOK_TLS_KEY": "k"})
    assert cfg.injection.jobset_max_restarts == 3
    off = one(render({"webhook": {"retryPolicy": {"enabled": False}}}), "MutatingWebhookConfiguration")
    assert [h["name"] for h in off["webhooks"]] == ["inject.sidecar.podmortem.io"]


def test_helm_generated_ca_signs_the_served_certificate() -> None:
    docs = render(namespace="ops")
    hook = one(docs, "MutatingWebhookConfiguration")["webhooks"][0]
    secret = one(docs, "Secret", "-webhook-tls")
    ca = x509.load_pem_x509_certificate(base64.b64decode(hook["clientConfig"]["caBundle"]))
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    assert base64.b64decode(secret["data"]["ca.crt"]) == base64.b64decode(hook["clientConfig"]["caBundle"])
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert "podmortem-webhook.ops.svc" in names
    deployment = one(docs, "Deployment", "-webhook")
    [volume] = [v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == "tls"]
    assert volume["secret"]["secretName"] == secret["metadata"]["name"]


def test_the_grpc_port_gets_a_certificate_and_sidecars_its_ca() -> None:
    docs = render(namespace="ops")
    secret = one(docs, "Secret", "-aggregator-grpc-tls")
    ca = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["ca.crt"]))
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    host = one(docs, "Deployment", "-webhook")["spec"]["template"]["spec"]["containers"][0]
    address = env_of(host)["PODMORTEM_AGGREGATOR"].rpartition(":")[0]
    assert address in names  # the name the sidecars dial is one the certificate is for
    aggregator = one(docs, "Deployment", "-aggregator")["spec"]["template"]["spec"]
    env = env_of(aggregator["containers"][0])
    mounts = {m["name"]: m["mountPath"] for m in aggregator["containers"][0]["volumeMounts"]}
    assert env["PODMORTEM_TLS_CERT"] == mounts["grpc-tls"] + "/tls.crt"
    assert any(
        v["name"] == "grpc-tls" and v["secret"]["secretName"] == secret["metadata"]["name"]
        for v in aggregator["volumes"]
    )
    webhook = one(docs, "Deployment", "-webhook")["spec"]["template"]["spec"]
    wmounts = {m["name"]: m["mountPath"] for m in webhook["containers"][0]["volumeMounts"]}
    assert env_of(webhook["containers"][0])["PODMORTEM_SIDECAR_TLS_CA"] == wmounts["grpc-ca"] + "/ca.crt"
    [ca_volume] = [v for v in webhook["volumes"] if v["name"] == "grpc-ca"]
    assert ca_volume["secret"]["items"] == [{"key": "ca.crt", "path": "ca.crt"}]  # never the key
    off = render({"aggregator": {"tls": {"enabled": False}}})
    assert not [d for d in by_kind(off, "Secret") if d["metadata"]["name"].endswith("-grpc-tls")]
    assert "PODMORTEM_TLS_CERT" not in env_of(
        one(off, "Deployment", "-aggregator")["spec"]["template"]["spec"]["containers"][0]
    )


@pytest.mark.parametrize("values_file", ["cert-manager-values.yaml", "cert-manager-issuer-values.yaml"])
def test_cert_manager_mode(values_file: str) -> None:
    docs = render(values_of(values_file), namespace="ops")
    config = one(docs, "MutatingWebhookConfiguration")
    assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == "ops/podmortem-webhook"
    assert "caBundle" not in config["webhooks"][0]["clientConfig"]
    assert [s["metadata"]["name"] for s in by_kind(docs, "Secret")] == ["podmortem-aggregator-grpc-tls"]
    cert = one(docs, "Certificate")
    assert cert["metadata"]["name"] == "podmortem-webhook" and cert["spec"]["secretName"] == "podmortem-webhook-tls"
    assert "podmortem-webhook.ops.svc" in cert["spec"]["dnsNames"]
    if values_file == "cert-manager-values.yaml":
        assert one(docs, "Issuer")["spec"] == {"selfSigned": {}}
        assert cert["spec"]["issuerRef"] == {"kind": "Issuer", "name": "podmortem-webhook"}
    else:
        assert by_kind(docs, "Issuer") == []
        assert cert["spec"]["issuerRef"] == {"kind": "ClusterIssuer", "name": "corp-ca"}


# --- monitoring, alerting, dashboard ----------------------------------------------------------------


def test_prometheus_rule_passes_promtool(tmp_path: Path) -> None:
    if shutil.which("promtool") is None:
        pytest.fail("promtool is not installed: run `make test` (it installs Debian's prometheus)")
    rule = one(render(values_of("everything-values.yaml")), "PrometheusRule")
    [alert] = rule["spec"]["groups"][0]["rules"]
    assert 'category=~"hardware|node_lost"' in alert["expr"]
    assert "$labels.pod" in alert["annotations"]["summary"] and "$labels.category" in alert["annotations"]["summary"]
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(rule["spec"]))
    out = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert by_kind(render(), "PrometheusRule") == []  # off by default


def test_monitors_select_the_metrics_ports() -> None:
    docs = render(values_of("everything-values.yaml"))
    monitor = one(docs, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    for svc in by_kind(docs, "Service"):
        assert "metrics" in [p["name"] for p in svc["spec"]["ports"]]
        selector = monitor["spec"]["selector"]["matchLabels"]
        assert selector.items() <= svc["metadata"]["labels"].items()
    for deployment in by_kind(docs, "Deployment"):
        ports = deployment["spec"]["template"]["spec"]["containers"][0]["ports"]
        assert "metrics" in [p["name"] for p in ports]


def test_dashboard_configmap_carries_the_generated_dashboard() -> None:
    docs = render(values_of("everything-values.yaml"))
    cm = one(docs, "ConfigMap", "-dashboard")
    assert cm["metadata"]["labels"]["grafana-dashboards"] == "podmortem"
    assert cm["metadata"]["namespace"] == "monitoring"
    dashboard = json.loads(cm["data"]["podmortem.json"])
    assert dashboard == json.loads((CHART / "dashboards" / "podmortem.json").read_text())
    assert [v["name"] for v in dashboard["templating"]["list"]] == ["datasource", "job", "namespace"]
    assert one(render(), "ConfigMap", "-dashboard")["metadata"]["labels"]["grafana_dashboard"] == "1"


def test_checked_in_dashboard_is_not_stale() -> None:
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen_dashboard.py"), "--check"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr


# --- the chart against the CLI ----------------------------------------------------------------------


@functools.cache
def cli_help(command: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "podmortem.cli", command, "--help"],
        capture_output=True, text=True, timeout=60, env={"PYTHONPATH": str(REPO), "COLUMNS": "200"},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return " ".join(out.stdout.split())


def port_of(address: str) -> int:
    return int(address.rpartition(":")[2])


@pytest.mark.parametrize("values_file", [None, *VALUES_FILES])
def test_containers_match_the_cli(values_file: str | None) -> None:
    docs = render(values_of(values_file))
    images = set()
    for deployment in by_kind(docs, "Deployment"):
        [container] = deployment["spec"]["template"]["spec"]["containers"]
        images.add(container["image"])
        assert "command" not in container  # the image's entrypoint is `podmortem`
        command, *flags = container["args"]
        assert command in ("aggregator", "webhook")
        help_text = cli_help(command)
        for flag in flags:
            assert re.search(rf"(^| ){re.escape(flag.split('=')[0])}[ ,]", help_text), flag
        for name in env_of(container):
            assert re.search(rf"\b{name}\b", help_text), f"{command}: {name} is not in --help"
        env = env_of(container)
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        probes = [container[k] for k in ("startupProbe", "livenessProbe", "readinessProbe") if k in container]
        if command == "aggregator":
            kube = load_kube_settings(argparse.Namespace(), env)  # read as `podmortem aggregator` does
            config = aggregator_config.load(argparse.Namespace(), env, kube=kube.enabled)
            assert kube.enabled
            assert config.auth == ("none" if values_file and "namespace" in values_file else "tokenreview")
            assert port_of(config.listen) == ports["grpc"] and port_of(config.metrics_listen) == ports["metrics"]
            assert {p["grpc"]["port"] for p in probes} == {ports["grpc"]}
            assert {p["grpc"].get("service", "") for p in probes} == {"", "podmortem.v1.Collector"}
            grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
            assert grace > config.shutdown_grace
            mounts = {m["mountPath"] for m in container["volumeMounts"]}
            assert config.verdict_dir == "" or config.verdict_dir in mounts  # the root filesystem is read-only
        else:
            check_webhook(docs, container, env, ports, probes)
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert container["securityContext"]["runAsNonRoot"] is True
        assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    assert len(images) == 1  # one image for every component


def check_webhook(
    docs: list[Obj], container: Obj, env: dict[str, str], ports: dict[str, int], probes: list[Obj]
) -> None:
    config = webhook_config.load(None, env)
    assert port_of(config.listen) == ports["https"] and port_of(config.metrics_listen) == ports["metrics"]
    assert all(p["httpGet"]["port"] == "https" and p["httpGet"]["scheme"] == "HTTPS" for p in probes)
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert str(config.tls_cert.parent) in mounts and str(config.tls_key.parent) in mounts
    # What the sidecars will be told: the aggregator's Service and gRPC port, and the chart's image.
    aggregator_svc = one(docs, "Service", "-aggregator")
    grpc_port = next(p["port"] for p in aggregator_svc["spec"]["ports"] if p["name"] == "grpc")
    namespace = aggregator_svc["metadata"]["namespace"]
    assert config.injection.aggregator == f"{aggregator_svc['metadata']['name']}.{namespace}.svc:{grpc_port}"
    assert config.injection.image == container["image"]
    # The injected sidecar's env, as this webhook configuration makes it, is what `podmortem sidecar` reads.
    pod = json.loads((REPO / "tests" / "fixtures" / "admission" / "pytorchjob-worker.json").read_text())
    result = mutation.mutate(pod["request"]["object"], config.injection)
    patched = jsonpatch.apply_patch(pod["request"]["object"], result.patch)
    containers = patched["spec"].get("initContainers", []) + patched["spec"]["containers"]
    sidecar_container = next(c for c in containers if c["name"] == mutation.SIDECAR_NAME)
    assert sidecar_container["args"] == ["sidecar"]
    for name in env_of(sidecar_container):
        assert re.search(rf"\[env {name}(=1)?\]", cli_help("sidecar")), f"sidecar: {name} is not in --help"


def test_native_sidecars_follow_the_cluster_version() -> None:
    def native(values: dict[str, Any]) -> str:
        container = one(render(values), "Deployment", "-webhook")["spec"]["template"]["spec"]["containers"][0]
        return env_of(container)["PODMORTEM_NATIVE_SIDECARS"]

    assert native({}) == "true"  # the engine's default Kubernetes version is >= 1.29
    assert native({"webhook": {"nativeSidecars": False}}) == "false"


def test_readme_hand_written_sidecar_is_valid_and_uses_real_settings() -> None:
    text = (REPO / "README.md").read_text()
    [block] = [b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "pytorchReplicaSpecs" in b]
    spec = yaml.safe_load(block)["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    spec["containers"][0]["image"] = "example.org/train:1"
    kubernetes_validate.validate({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w"}, "spec": spec},
                                 KUBE_VERSION, strict=True)  # fmt: skip
    [sidecar] = spec["initContainers"]
    assert sidecar["name"] == mutation.SIDECAR_NAME and sidecar["restartPolicy"] == "Always"
    for name in env_of(sidecar):
        assert re.search(rf"\[env {name}\]", cli_help("sidecar")), name
    # The error file is shared: same path, same volume, in both containers.
    assert env_of(sidecar)["TORCHELASTIC_ERROR_FILE"] == env_of(spec["containers"][0])["TORCHELASTIC_ERROR_FILE"]
    namespace_install = render(values_of("namespace-values.yaml"), namespace="team-a")
    svc = one(namespace_install, "Service", "-aggregator")
    assert env_of(sidecar)["PODMORTEM_AGGREGATOR"] == f"{svc['metadata']['name']}.team-a.svc:50051"


def test_the_sidecars_hold_timeout_reaches_the_webhook() -> None:
    docs = render({"sidecar": {"holdTimeout": 8}})
    env = env_of(one(docs, "Deployment", "-webhook")["spec"]["template"]["spec"]["containers"][0])
    cfg = webhook_config.load(None, {**env, "PODMORTEM_WEBHOOK_TLS_CERT": "c", "PODMORTEM_WEBHOOK_TLS_KEY": "k"})
    assert cfg.injection.hold_timeout == "8"


@pytest.mark.parametrize(
    ("capture", "expected"),
    [
        ({}, ("", False, False)),
        ({"stallAfter": "5m", "pythonHook": True, "pyspy": True}, ("300", True, True)),
        ({"stallAfter": 90}, ("90", False, False)),
    ],
)
def test_the_capture_values_reach_the_webhook(capture: dict[str, Any], expected: tuple[str, bool, bool]) -> None:
    docs = render({"sidecar": {"capture": capture}})
    env = env_of(one(docs, "Deployment", "-webhook")["spec"]["template"]["spec"]["containers"][0])
    cfg = webhook_config.load(None, {**env, "PODMORTEM_WEBHOOK_TLS_CERT": "c", "PODMORTEM_WEBHOOK_TLS_KEY": "k"})
    assert (cfg.injection.stall_after, cfg.injection.python_hook, cfg.injection.pyspy) == expected


@pytest.mark.parametrize("bad", [{"stallAfter": "soon"}, {"stallAfter": -1}, {"pyspy": "yes"}, {"gdb": True}])
def test_the_schema_refuses_bad_capture_values(bad: dict[str, Any]) -> None:
    with pytest.raises(helm_python.HelmValuesError):
        render({"sidecar": {"capture": bad}})
