"""deploy/docker-compose.yml exposes nothing beyond this machine and holds no password: every
published port is bound to 127.0.0.1, Kafka Connect's REST API is not published, and every
credential is a ``${VAR:?...}`` reference to the git-ignored deploy/.env (issue 24).
`make lint` validates the file itself with `docker-compose config`."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.unit

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
COMPOSE_FILE = DEPLOY / "docker-compose.yml"
TEXT = COMPOSE_FILE.read_text()
COMPOSE: dict[str, Any] = yaml.safe_load(TEXT)
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]

CONNECT_REST_PORT = 8083
CREDENTIAL_NAME = re.compile(r"PASSWORD|PASSWD|SECRET|TOKEN|CREDENTIAL|(^|_)PASS$|_KEY$", re.I)
REFERENCE = re.compile(r"\$\{([A-Z_][A-Z0-9_]*):\?[^}]+\}")
"""A compose variable that stops compose when it is missing (`${VAR:?message}`)."""
URL_PASSWORD = re.compile(r"[a-z][a-z0-9+.-]*://[^/:@\s]+:([^@\s]+)@", re.I)


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):  # the KEY=value form
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {str(k): "" if v is None else str(v) for k, v in env.items()}


def published(service: dict[str, Any]) -> list[tuple[str | None, str, str]]:
    """(host address, host port, container port) of every published port."""
    out: list[tuple[str | None, str, str]] = []
    for port in service.get("ports") or []:
        if isinstance(port, dict):  # the long syntax
            out.append((port.get("host_ip"), str(port.get("published", "")), str(port["target"])))
            continue
        parts = str(port).split("/")[0].split(":")
        if len(parts) == 3:
            out.append((parts[0], parts[1], parts[2]))
        elif len(parts) == 2:
            out.append((None, parts[0], parts[1]))
        else:  # a container port alone: published on a random port of every interface
            out.append((None, "", parts[0]))
    return out


def test_the_file_has_the_services_it_had() -> None:
    # A guard for the tests below: they would pass vacuously on an empty or renamed file.
    assert {"kafka", "postgres", "connect", "api", "prometheus", "grafana"} <= set(SERVICES)


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_every_published_port_is_bound_to_loopback(name: str) -> None:
    for host, host_port, container_port in published(SERVICES[name]):
        assert host == "127.0.0.1", (
            f"{name} publishes {container_port} on every interface: write "
            f'"127.0.0.1:{host_port or container_port}:{container_port}"'
        )


def test_kafka_connect_rest_api_is_not_published() -> None:
    # It returns connector configs and takes new ones: never outside the compose network.
    assert "ports" not in SERVICES["connect"]
    for name, service in SERVICES.items():
        for _, host_port, container_port in published(service):
            assert str(CONNECT_REST_PORT) not in (host_port, container_port), name
    assert SERVICES["connect"].get("network_mode") != "host"


def test_the_published_ports_are_the_ones_the_docs_name() -> None:
    ports = {
        name: sorted(int(container) for _, _, container in published(service))
        for name, service in SERVICES.items()
        if published(service)
    }
    assert ports == {
        "kafka": [9092],
        "postgres": [5432],
        "api": [8000],
        "prometheus": [9090],
        "grafana": [3000],
    }


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_every_credential_is_a_reference_to_deploy_env(name: str) -> None:
    for key, value in environment(SERVICES[name]).items():
        if CREDENTIAL_NAME.search(key) and not key.endswith("_FILE"):
            assert REFERENCE.fullmatch(value), f"{name}: {key} is a literal, not ${{VAR:?...}}"
        for password in URL_PASSWORD.findall(value):
            assert REFERENCE.fullmatch(password), f"{name}: {key} has a literal password"


def test_no_literal_password_anywhere_in_the_file() -> None:
    """Comments and commands too: a URL's password is always a reference, and no default
    login is written down."""
    for password in URL_PASSWORD.findall(TEXT):
        assert REFERENCE.fullmatch(password), password
    assert "admin/admin" not in TEXT
    assert not re.search(r"PASSWORD\s*[:=]\s*['\"]?(?!\$\{)\w", TEXT), "a literal *PASSWORD value"
    # A variable with a default would run with the default when deploy/.env lacks it.
    for match in re.finditer(r"\$\{([^}]*)\}", TEXT):
        assert REFERENCE.fullmatch(match.group(0)), f"{match.group(0)}: use ${{VAR:?...}}"


def test_every_variable_is_in_the_example_env_file_as_a_placeholder() -> None:
    example = dict(
        line.split("=", 1)
        for line in (DEPLOY / ".env.example").read_text().splitlines()
        if line and not line.startswith("#")
    )
    used = set(REFERENCE.findall(TEXT))
    assert used and used <= set(example), used - set(example)
    assert {example[var] for var in used} == {"change-me"}, "the example holds placeholders"
    assert example["COMPOSE_PROJECT_NAME"] == "sagaline"


def test_deploy_env_is_ignored_by_git() -> None:
    ignored = (DEPLOY.parent / ".gitignore").read_text().splitlines()
    assert "deploy/.env" in ignored


def test_the_connector_config_names_its_password_and_connect_resolves_it() -> None:
    """The committed connector config (registered by compose and by connect.sh) names the
    password as a config provider reference: GET /connectors/.../config shows no secret."""
    config = json.loads((DEPLOY / "local/connect/legacy-school.json").read_text())["config"]
    assert config["database.password"] == "${env:SAGALINE_DEBEZIUM_PASSWORD}"
    env = environment(SERVICES["connect"])
    assert env["CONNECT_CONFIG_PROVIDERS"] == "env"
    assert env["CONNECT_CONFIG_PROVIDERS_ENV_CLASS"].endswith(".EnvVarConfigProvider")
    assert env["CONNECT_CONFIG_PROVIDERS_ENV_PARAM_ALLOWLIST_PATTERN"] == (
        "SAGALINE_DEBEZIUM_PASSWORD"
    )
    assert REFERENCE.fullmatch(env["SAGALINE_DEBEZIUM_PASSWORD"])
    # The role's password is set by postgres.sh (generated) or the compose init script.
    school = (DEPLOY / "local/legacy/school.sql").read_text()
    assert not re.search(r"PASSWORD\s+'", school, re.I)
