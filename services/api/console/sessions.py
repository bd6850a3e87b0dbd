"""The console's sessions: a random id in the browser's cookie, the rest on the API's disk.

A session is a small file named by the SHA-256 of its id (a listing of the directory gives
no cookie value) holding the key id, its scopes at login, when it was opened and its form
token; the file's modification time is when it was last used. Never the key: a stolen
cookie is worth one session, which ends at logout, after ``idle_s`` unused, ``absolute_s``
after login, or when its key is revoked.

Files rather than the process's memory because ``SAGALINE_API_WORKERS`` runs several
processes behind one port and the kernel hands each connection to any of them: a session
one process made must be known to the others, as the key file is (each process re-reads
it). One directory per host; API replicas on several hosts need a shared directory or a
load balancer that keeps a browser on one replica. A restart keeps sessions (they still
expire). Per request: an ``open``, a read of a few hundred bytes and a ``utime``.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import string
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from runtime.settings import Settings

ID_CHARS = 43
"""``secrets.token_urlsafe(32)``: 32 random bytes, URL-safe base64 without padding."""
_ID_ALPHABET = frozenset(string.ascii_letters + string.digits + "-_")
_MAX_FILE_BYTES = 4096
"""A session file holds a key id, three scopes, a time and a token: far less than this."""


@dataclass(frozen=True)
class Session:
    """What a session id stands for."""

    key_id: str
    scopes: frozenset[str]
    opened: float
    """When the session was opened (login), seconds since the epoch."""
    form_token: str
    """What every form of this session's pages carries: random, so no one without the page
    (or the session file) knows it."""


class SessionStore:
    """Sessions in ``directory``: opened at login, checked at each request, ended at logout
    or expiry; at most ``cap`` (opening one more ends the least recently used)."""

    def __init__(
        self,
        directory: Path,
        idle_s: float,
        absolute_s: float,
        cap: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.directory = directory
        self.idle_s = idle_s
        self.absolute_s = absolute_s
        self.cap = cap
        self.clock = clock
        """Wall-clock seconds (file times are wall-clock); tests pass their own."""

    @classmethod
    def from_settings(cls, settings: Settings) -> SessionStore:
        return cls(
            settings.console_sessions_dir,
            settings.console_session_idle_s,
            settings.console_session_max_s,
            settings.console_sessions_max,
        )

    def open(self, key_id: str, scopes: frozenset[str]) -> tuple[str, Session]:
        """A new session (its id, for the cookie only); blocking (lists the directory when
        full): call it in a thread."""
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._make_room()
        session_id = secrets.token_urlsafe(32)
        now = self.clock()
        opened = Session(key_id, scopes, now, secrets.token_urlsafe(32))
        path = self._file(session_id)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(_fields(opened), out)
        os.utime(path, (now, now))
        return session_id, opened

    def current(self, session_id: str) -> Session | None:
        """The session ``session_id`` names if it is still open, and marks it used now;
        None for an unknown, malformed, ended or expired one (an expired one is ended)."""
        path = self._path(session_id)
        if path is None:
            return None
        try:
            with open(path, "rb") as f:
                used = os.fstat(f.fileno()).st_mtime
                found = _parsed(f.read(_MAX_FILE_BYTES))
        except FileNotFoundError:
            return None
        now = self.clock()
        if found is None or now - used > self.idle_s or now - found.opened > self.absolute_s:
            self.end(session_id)
            return None
        try:
            os.utime(path, (now, now))
        except FileNotFoundError:  # ended (logout in another process) since the read
            return None
        return found

    def end(self, session_id: str) -> None:
        """The session is over (logout, expiry, a revoked key): its id opens nothing again."""
        path = self._path(session_id)
        if path is not None:
            path.unlink(missing_ok=True)

    def _path(self, session_id: str) -> Path | None:
        """The session's file; None for text that is no session id (no file is looked at)."""
        if len(session_id) != ID_CHARS or not _ID_ALPHABET.issuperset(session_id):
            return None
        return self._file(session_id)

    def _file(self, session_id: str) -> Path:
        return self.directory / hashlib.sha256(session_id.encode()).hexdigest()

    def _make_room(self) -> None:
        """Delete sessions unused for ``idle_s``; at the cap, the least recently used too.
        (One past its absolute expiry but used lately is ended at its next request.)"""
        now = self.clock()
        alive: list[tuple[float, Path]] = []
        for path in self.directory.iterdir():
            try:
                used = path.stat().st_mtime
            except FileNotFoundError:
                continue
            if now - used > self.idle_s:
                path.unlink(missing_ok=True)
            else:
                alive.append((used, path))
        alive.sort()
        for _used, path in alive[: max(len(alive) - self.cap + 1, 0)]:
            path.unlink(missing_ok=True)


def _fields(session: Session) -> dict[str, object]:
    return {
        "key_id": session.key_id,
        "scopes": sorted(session.scopes),
        "opened": session.opened,
        "form_token": session.form_token,
    }


def _parsed(raw: bytes) -> Session | None:
    """A session file's content; None for anything this module did not write."""
    try:
        fields = json.loads(raw)
        return Session(
            key_id=str(fields["key_id"]),
            scopes=frozenset(str(s) for s in fields["scopes"]),
            opened=float(fields["opened"]),
            form_token=str(fields["form_token"]),
        )
    except (ValueError, TypeError, KeyError):
        return None
