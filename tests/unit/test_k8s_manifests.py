"""deploy/k8s: what `make lint`'s schema validation and security scan cannot see. Every
SAGALINE_* name the manifests set is a field of runtime/settings.py (a misspelt one would be
ignored silently: the settings ignore unknown variables), and each container's variables,
the ConfigMap's included, make valid Settings; each pod's termination grace period covers
its bounded shutdown; no pod gets Kubernetes' service-link variables (one of them,
SAGALINE_API_PORT=tcp://..., would stop every component); the kustomization applies every
manifest but the Secrets' example, and the Secrets are referenced as files, by names and
keys the example documents, holding no value but placeholders (issue 31)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from runtime.settings import Settings

pytestmark = pytest.mark.unit

K8S = Path(__file__).resolve().parents[2] / "deploy" / "k8s"
KUSTOMIZATION = K8S / "kustomization.yaml"
SECRETS_EXAMPLE = K8S / "secrets.example.yaml"
MANIFESTS = sorted(p for p in K8S.glob("*.yaml") if p != KUSTOMIZATION)
DOCS: list[tuple[Path, dict[str, Any]]] = [
    (path, doc) for path in MANIFESTS for doc in yaml.safe_load_all(path.read_text()) if doc
]
PREFIX = "SAGALINE_"
SHUTDOWN_MARGIN_S = 5
"""The least time between the watchdog's exit (SAGALINE_SHUTDOWN_GRACE_S after SIGTERM)
and the kubelet's SIGKILL: the process's own teardown, a slow node."""
REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def _pod_spec(doc: dict[str, Any]) -> dict[str, Any] | None:
    kind = doc["kind"]
    if kind in {"Deployment", "StatefulSet", "Job", "DaemonSet"}:
        return doc["spec"]["template"]["spec"]  # type: ignore[no-any-return]
    if kind == "CronJob":
        return doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]  # type: ignore[no-any-return]
    return None


PODS: list[tuple[str, dict[str, Any]]] = [
    (f"{path.name}:{doc['kind']}/{doc['metadata']['name']}", spec)
    for path, doc in DOCS
    if (spec := _pod_spec(doc)) is not None
]


def _containers(pod: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield from pod.get("initContainers", [])
    yield from pod["containers"]


def _config_maps() -> dict[str, dict[str, str]]:
    return {
        doc["metadata"]["name"]: doc.get("data", {})
        for _, doc in DOCS
        if doc["kind"] == "ConfigMap"
    }


def _environment(container: dict[str, Any]) -> dict[str, str | None]:
    """The container's variables as Kubernetes sets them (env over envFrom); None for one
    taken from the downward API or a Secret."""
    maps = _config_maps()
    env: dict[str, str | None] = {}
    for source in container.get("envFrom", []):
        env.update(maps[source["configMapRef"]["name"]])
    for var in container.get("env", []):
        env[var["name"]] = var.get("value")
    return env


def _every_sagaline_name() -> set[str]:
    names = {k for data in _config_maps().values() for k in data if k.startswith(PREFIX)}
    for _, pod in PODS:
        for container in _containers(pod):
            names |= {v["name"] for v in container.get("env", []) if v["name"].startswith(PREFIX)}
    return names


def test_the_manifests_were_found() -> None:
    kinds = {doc["kind"] for _, doc in DOCS}
    assert {"Deployment", "StatefulSet", "CronJob", "ConfigMap", "Secret", "Service"} <= kinds


def test_every_sagaline_variable_is_a_setting() -> None:
    names = _every_sagaline_name()
    assert len(names) > 10
    fields = set(Settings.model_fields)
    unknown = sorted(n for n in names if n.removeprefix(PREFIX).lower() not in fields)
    assert unknown == [], f"not fields of runtime/settings.py: {unknown}"


@pytest.mark.parametrize("where,pod", PODS, ids=[p[0] for p in PODS])
def test_each_container_makes_valid_settings(
    where: str, pod: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Values the settings would refuse (a port that is no number, SASL without a password
    source) fail here, not in the pod's first seconds."""
    for container in _containers(pod):
        for name in [n for n in os.environ if n.startswith(PREFIX)]:
            monkeypatch.delenv(name)
        for name, value in _environment(container).items():
            if name.startswith(PREFIX) and value is not None:
                monkeypatch.setenv(name, value)
        Settings(_env_file=None)  # type: ignore[call-arg]


@pytest.mark.parametrize("where,pod", PODS, ids=[p[0] for p in PODS])
def test_variable_references_are_defined(where: str, pod: dict[str, Any]) -> None:
    """A `$(NAME)` in a command that names no variable stays as that text."""
    for container in _containers(pod):
        defined = set(_environment(container))
        used = {
            m.group(1)
            for arg in [*container.get("command", []), *container.get("args", [])]
            for m in REFERENCE.finditer(arg)
        }
        assert used <= defined, f"{where}/{container['name']}: {sorted(used - defined)}"


@pytest.mark.parametrize("where,pod", PODS, ids=[p[0] for p in PODS])
def test_no_service_links(where: str, pod: dict[str, Any]) -> None:
    """Kubernetes gives every pod `<SERVICE>_PORT=tcp://ip:port` and friends for each
    Service of its namespace: the Service sagaline-api makes SAGALINE_API_PORT, a setting
    that must be a number."""
    services = [doc["metadata"]["name"] for _, doc in DOCS if doc["kind"] == "Service"]
    links = {f"{s.upper().replace('-', '_')}_PORT" for s in services}
    assert any(n.removeprefix(PREFIX).lower() in Settings.model_fields for n in links)
    assert pod.get("enableServiceLinks") is False, where


@pytest.mark.parametrize("where,pod", PODS, ids=[p[0] for p in PODS])
def test_termination_grace_covers_the_bounded_shutdown(where: str, pod: dict[str, Any]) -> None:
    if ":Job/" in where:
        return  # the set-up Job's commands end by themselves
    granted = pod.get("terminationGracePeriodSeconds", 30)
    for container in _containers(pod):
        env = _environment(container)
        grace = env.get("SAGALINE_SHUTDOWN_GRACE_S")
        assert grace is not None, f"{where}: set SAGALINE_SHUTDOWN_GRACE_S beside the pod's grace"
        pre_stop = container.get("lifecycle", {}).get("preStop", {}).get("exec", {})
        pause = float(pre_stop["command"][-1]) if pre_stop.get("command", [""])[0] == "sleep" else 0
        assert granted >= float(grace) + pause + SHUTDOWN_MARGIN_S, where


def test_the_projector_runs_alone_until_it_scales_out() -> None:
    """One projector assigns itself every partition of the event topic (issue 31's
    scale-out is not done): one replica, and no overlap during an update."""
    (projector,) = [
        doc
        for _, doc in DOCS
        if doc["kind"] == "Deployment" and doc["metadata"]["name"] == "sagaline-projector"
    ]
    assert projector["spec"]["replicas"] == 1
    assert projector["spec"]["strategy"]["type"] == "Recreate"


def test_the_workers_keep_rocksdb_on_their_own_volume() -> None:
    (worker,) = [doc for _, doc in DOCS if doc["kind"] == "StatefulSet"]
    (claim,) = worker["spec"]["volumeClaimTemplates"]
    (container,) = worker["spec"]["template"]["spec"]["containers"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == claim["metadata"]["name"])
    data_dir = _environment(container)["SAGALINE_DATA_DIR"]
    assert data_dir is not None and Path(data_dir).is_relative_to(mount["mountPath"])
    headless = [
        doc
        for _, doc in DOCS
        if doc["kind"] == "Service" and doc["metadata"]["name"] == worker["spec"]["serviceName"]
    ]
    assert headless and headless[0]["spec"]["clusterIP"] == "None"


def test_the_kustomization_applies_every_manifest_but_the_secrets_example() -> None:
    listed = yaml.safe_load(KUSTOMIZATION.read_text())["resources"]
    assert sorted(listed) == sorted(p.name for p in MANIFESTS if p != SECRETS_EXAMPLE)


def test_secrets_are_mounted_files_named_by_the_example() -> None:
    example = {
        doc["metadata"]["name"]: doc["stringData"]
        for doc in yaml.safe_load_all(SECRETS_EXAMPLE.read_text())
    }
    for values in example.values():
        assert all("REPLACE" in v for v in values.values()), "placeholders only"
    for where, pod in PODS:
        mounted: dict[str, str] = {}
        for volume in pod.get("volumes", []):
            if "secret" in volume:
                assert volume["secret"]["secretName"] in example, where
                mounted[volume["name"]] = volume["secret"]["secretName"]
        for container in _containers(pod):
            assert not any(
                "valueFrom" in v and "secretKeyRef" in v["valueFrom"]
                for v in container.get("env", [])
            ), f"{where}: a secret in env"
            mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
            for name, value in _environment(container).items():
                if not (name.endswith("_FILE") and value and value.startswith("/etc/sagaline/")):
                    continue
                path = Path(value)
                volume = mounts.get(str(path.parent))
                assert volume in mounted, f"{where}: {name}={value} is on no mounted Secret"
                assert path.name in example[mounted[volume]], f"{where}: {name}: no key {path.name}"
