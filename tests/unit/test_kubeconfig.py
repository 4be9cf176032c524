"""The sidecar's kubeconfig reader: kubectl's merge and path rules, the credentials it can use, clear refusals."""

from __future__ import annotations

import base64
import json
import ssl
from pathlib import Path
from typing import Any

import pytest
import trustme

from podmortem.sidecar import config
from podmortem.sidecar.kubeconfig import KubeconfigError, from_kubeconfig, resolve_endpoint


def write(path: Path, clusters: list[Any], users: list[Any], contexts: list[Any], current: str = "") -> Path:
    doc: dict[str, Any] = {"apiVersion": "v1", "kind": "Config", "clusters": clusters, "users": users}
    doc["contexts"] = contexts
    if current:
        doc["current-context"] = current
    path.write_text(json.dumps(doc))
    return path


def ctx(name: str, cluster: str, user: str) -> dict[str, Any]:
    return {"name": name, "context": {"cluster": cluster, "user": user}}


def test_yaml_with_files_relative_to_the_kubeconfig(tmp_path: Path) -> None:
    (tmp_path / "kc").mkdir()
    path = tmp_path / "kc" / "config"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: dev\n"
        "clusters:\n- name: c\n  cluster: {server: 'https://10.0.0.1:6443/', certificate-authority: ca.crt}\n"
        "users:\n- name: u\n  user: {tokenFile: secrets/token}\n"
        "contexts:\n- name: dev\n  context: {cluster: c, user: u}\n"
    )
    endpoint = from_kubeconfig(str(path))
    assert endpoint.base_url == "https://10.0.0.1:6443"
    assert endpoint.ca_file == tmp_path / "kc" / "ca.crt"
    assert endpoint.token_file == tmp_path / "kc" / "secrets" / "token" and endpoint.token is None


def test_several_files_merge_first_wins_and_a_context_can_be_chosen(tmp_path: Path) -> None:
    a = write(
        tmp_path / "a",
        [{"name": "c", "cluster": {"server": "https://first"}}],
        [{"name": "u", "user": {"token": "t-first"}}],
        [ctx("one", "c", "u")],
        current="one",
    )
    b = write(
        tmp_path / "b",
        [{"name": "c", "cluster": {"server": "https://second"}}, {"name": "d", "cluster": {"server": "http://d"}}],
        [{"name": "u", "user": {"token": "t-second"}}],
        [ctx("two", "d", "u")],
        current="two",
    )
    joined = f"{a}:{tmp_path / 'missing'}:{b}"  # a missing file in a list is skipped, as kubectl does
    assert (from_kubeconfig(joined).base_url, from_kubeconfig(joined).token) == ("https://first", "t-first")
    chosen = from_kubeconfig(joined, "two")
    assert (chosen.base_url, chosen.token) == ("http://d", "t-first")


@pytest.mark.parametrize(
    ("user", "context", "expected"),
    [
        ({"exec": {"command": "aws"}}, None, "exec plugin"),
        ({"auth-provider": {"name": "gcp"}}, None, "auth-provider plugin"),
        ({"client-certificate": "c.pem"}, None, "no client key"),
        ({"client-certificate-data": "!!"}, None, "not base64"),
        ({"token": "t"}, "nope", "no context named 'nope'"),
    ],
)
def test_what_cannot_be_used_is_refused_with_the_reason(
    tmp_path: Path, user: dict[str, Any], context: str | None, expected: str
) -> None:
    path = write(
        tmp_path / "config",
        [{"name": "c", "cluster": {"server": "https://x"}}],
        [{"name": "u", "user": user}],
        [ctx("dev", "c", "u")],
        current="dev",
    )
    with pytest.raises(KubeconfigError, match=expected):
        from_kubeconfig(str(path), context)


def test_a_missing_file_or_no_current_context(tmp_path: Path) -> None:
    with pytest.raises(KubeconfigError, match="no such kubeconfig"):
        from_kubeconfig(str(tmp_path / "nope"))
    path = write(tmp_path / "config", [], [], [])
    with pytest.raises(KubeconfigError, match="no current-context"):
        from_kubeconfig(str(path))


def test_inline_client_certificate_and_ca_make_a_working_tls_context(tmp_path: Path) -> None:
    ca = trustme.CA()
    client = ca.issue_cert("podmortem-sidecar")
    pem = b"".join(blob.bytes() for blob in client.cert_chain_pems) + client.private_key_pem.bytes()
    cert_pem = b"".join(blob.bytes() for blob in client.cert_chain_pems)
    path = write(
        tmp_path / "config",
        [{"name": "c", "cluster": {"server": "https://x", "certificate-authority-data": b64(ca.cert_pem.bytes())}}],
        [
            {
                "name": "u",
                "user": {
                    "client-certificate-data": b64(cert_pem),
                    "client-key-data": b64(client.private_key_pem.bytes()),
                },
            }
        ],
        [ctx("dev", "c", "u")],
        current="dev",
    )
    endpoint = from_kubeconfig(str(path))
    assert endpoint.client_pem is not None and endpoint.client_pem.replace(b"\n", b"") == pem.replace(b"\n", b"")
    context = endpoint.ssl_context()  # loads the CA and the key pair (a wrong pair would raise here)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert not list(tmp_path.glob("**/client.pem"))


def test_precedence_is_the_aggregators(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(
        tmp_path / "config",
        [{"name": "c", "cluster": {"server": "https://from-file", "insecure-skip-tls-verify": True}}],
        [{"name": "u", "user": {"token": "t"}}],
        [ctx("dev", "c", "u")],
        current="dev",
    )
    in_pod = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    given = resolve_endpoint(str(path), None, in_pod)
    assert given.base_url == "https://from-file" and given.insecure
    assert resolve_endpoint(None, None, in_pod).base_url == "https://10.96.0.1:443"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    with pytest.raises(KubeconfigError, match="no API server"):
        resolve_endpoint(None, None, {})
    (tmp_path / "home" / ".kube").mkdir(parents=True)
    (tmp_path / "home" / ".kube" / "config").write_text(path.read_text())
    assert resolve_endpoint(None, None, {}).base_url == "https://from-file"


def test_settings_flags_and_auto_source(tmp_path: Path) -> None:
    base = {"POD_NAME": "p", "POD_NAMESPACE": "ns", "TORCHELASTIC_ERROR_FILE": "/e", "PODMORTEM_AGGREGATOR": "a:1"}
    assert config.from_env_and_args(base).pod_source == "none"
    told = config.from_env_and_args({**base, "KUBECONFIG": "/k", "PODMORTEM_KUBE_CONTEXT": "dev"})
    assert (told.pod_source, told.kubeconfig, told.kube_context) == ("api", "/k", "dev")
    with_file = config.from_env_and_args({**base, "KUBECONFIG": "/k", "PODMORTEM_POD_STATUS_FILE": "/pod.json"})
    assert with_file.pod_source == "file"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
