"""A command whose read-model database cannot be reached ends with one sentence, not a
traceback (sagaline/cli.py, ``Commands``)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit


def test_a_database_nobody_answers_is_said_in_one_sentence() -> None:
    env = dict(os.environ, SAGALINE_DATABASE_URL="postgresql+psycopg://u:secret@127.0.0.1:1/d")
    done = subprocess.run(
        [sys.executable, "-m", "sagaline.cli", "db", "upgrade"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert "secret" not in done.stderr
    assert done.stderr.startswith(
        "Error: cannot use the read-model database at postgresql+psycopg://u:***@127.0.0.1:1/d: "
        "connection failed: "
    ), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
