"""deploy/docker-compose.yml validates with Debian's docker-compose (`make compose`; no engine
needed for `config`), takes every credential from deploy/.env and stops when one is
missing; deploy/README.md's line that generates deploy/.env works as written (issue 24)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMPOSE = ["docker-compose", "-f", "deploy/docker-compose.yml"]
VARIABLES = ("POSTGRES_PASSWORD", "DEBEZIUM_PASSWORD", "GRAFANA_ADMIN_PASSWORD")


def run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert shutil.which(args[0]), f"{args[0]} is not installed: make compose"
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=120)


def generate_line() -> str:
    (line,) = [
        line
        for line in (DEPLOY / "README.md").read_text().splitlines()
        if line.startswith("(umask 077;") and "deploy/.env" in line
    ]
    return line


def test_the_file_validates_with_the_example_env_file() -> None:
    done = run(ROOT, *COMPOSE, "--env-file", "deploy/.env.example", "config", "-q")
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("missing", VARIABLES)
def test_a_missing_credential_stops_compose_with_a_sentence(tmp_path: Path, missing: str) -> None:
    example = (DEPLOY / ".env.example").read_text().splitlines()
    env_file = tmp_path / "partial.env"
    env_file.write_text("\n".join(x for x in example if not x.startswith(f"{missing}=")) + "\n")
    done = run(ROOT, *COMPOSE, "--env-file", str(env_file), "config", "-q")
    assert done.returncode != 0
    assert "set it in deploy/.env" in done.stderr


def test_the_readme_line_generates_a_private_env_file_compose_reads(tmp_path: Path) -> None:
    shutil.copytree(DEPLOY, tmp_path / "deploy", ignore=shutil.ignore_patterns(".env"))
    generate = run(tmp_path, "bash", "-c", generate_line())
    assert generate.returncode == 0, generate.stderr
    env_file = tmp_path / "deploy" / ".env"
    assert env_file.stat().st_mode & 0o077 == 0, "deploy/.env is readable by others"
    values = dict(x.split("=", 1) for x in env_file.read_text().splitlines() if "=" in x)
    secrets = [values[v] for v in VARIABLES]
    assert all(re.fullmatch("[0-9a-f]{48}", s) for s in secrets), "random hex values"
    assert len(set(secrets)) == len(secrets), "each its own"
    # Compose finds deploy/.env beside the file by itself, and puts the values in.
    config = run(tmp_path, *COMPOSE, "config")
    assert config.returncode == 0, config.stderr
    assert all(s in config.stdout for s in secrets) and "change-me" not in config.stdout
    # Run again, the line refuses to overwrite the passwords the volumes were made with.
    again = run(tmp_path, "bash", "-c", generate_line())
    assert again.returncode != 0
    assert dict(x.split("=", 1) for x in env_file.read_text().splitlines() if "=" in x) == values
