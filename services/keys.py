"""API keys: made here, stored only as salted hashes, checked in constant time.

A key, as a client sends it (``Authorization: Bearer <key>``), is ``sgl_<id>_<secret>``:
``<id>`` is 12 hex digits that name the key (in listings, logs of who did what, and to
revoke it), ``<secret>`` is 32 random bytes in URL-safe base64. Only the key's creator ever
sees the whole key: it is printed once by ``sagaline keys create`` and never stored.

The key file (``SAGALINE_API_KEYS_FILE``) holds one key per line, fields separated by
spaces::

    <id> <scopes> scrypt$<n>$<r>$<p>$<salt>$<hash> <created> [label...]

``<scopes>`` is a comma-separated subset of :data:`SCOPES`; salt and hash are URL-safe
base64 (the hash is scrypt of the secret, 32 bytes); ``<created>`` is an ISO-8601 UTC time;
the label is free text. Lines that are empty or start with ``#`` are ignored. The same lines,
separated by ``;``, may be given in ``SAGALINE_API_KEYS``. Several keys are valid at once
(rotation: create the new key, move clients to it, revoke the old one); revoking is removing
the line (``sagaline keys revoke <id>``). The API re-reads the file when it changes.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import os
import re
import secrets
import tempfile
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

SCOPES = ("commands", "read", "admin")
"""``commands``: every write route; ``read``: every query route; ``admin``: operational
routes (dead-letter re-drive and the like)."""
PREFIX = "sgl"
KEY_PATTERN = re.compile(r"sgl_(?P<id>[0-9a-f]{12})_(?P<secret>[A-Za-z0-9_-]{43})")
"""A whole key; also what the log redaction looks for (services.logsafe)."""
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
"""scrypt's cost (about 16 MiB and a few tens of ms): the API checks a key once per process
and remembers it, so the cost is paid per key, not per request."""
HASH_BYTES = 32
KEY_CHARS = len(PREFIX) + 1 + 12 + 1 + 43
"""The length of every whole key (``sgl_<12 hex>_<43 base64>``)."""
log = logging.getLogger(__name__)
_NEVER = (-1, -1)


class KeyFileError(ValueError):
    """A key file line that cannot be read, or a key id that is not in the file."""


@dataclass(frozen=True)
class StoredKey:
    """One line of the key file: everything but the secret."""

    key_id: str
    scopes: frozenset[str]
    hashed: str
    created: str
    label: str = ""

    def line(self) -> str:
        scopes = ",".join(s for s in SCOPES if s in self.scopes)
        return " ".join(filter(None, (self.key_id, scopes, self.hashed, self.created, self.label)))


# --- making and checking keys -----------------------------------------------------------


def new_key(
    scopes: Iterable[str], label: str = "", taken: Iterable[str] = ()
) -> tuple[str, StoredKey]:
    """A fresh key (the whole key, to give the client once) and its line for the key file."""
    wanted = parse_scopes(",".join(scopes))
    taken_ids = set(taken)
    key_id = secrets.token_hex(6)
    while key_id in taken_ids:
        key_id = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    created = datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    clean_label = " ".join(label.split())
    stored = StoredKey(key_id, wanted, hash_secret(secret), created, clean_label)
    return f"{PREFIX}_{key_id}_{secret}", stored


def parse_scopes(text: str) -> frozenset[str]:
    scopes = frozenset(s.strip() for s in text.split(",") if s.strip())
    unknown = scopes - set(SCOPES)
    if unknown or not scopes:
        raise KeyFileError(
            f"scopes must be a comma-separated list of {', '.join(SCOPES)}"
            + (f"; unknown: {', '.join(sorted(unknown))}" if unknown else "")
        )
    return scopes


def hash_secret(secret: str, salt: bytes | None = None) -> str:
    salt = secrets.token_bytes(16) if salt is None else salt
    digest = _scrypt(secret, salt, SCRYPT_N, SCRYPT_R, SCRYPT_P)
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${_b64(salt)}${_b64(digest)}"


def secret_matches(secret: str, hashed: str) -> bool:
    """Whether ``secret`` hashes to ``hashed`` (compared in constant time)."""
    try:
        scheme, n, r, p, salt, digest = hashed.split("$")
        if scheme != "scrypt":
            return False
        expected = _unb64(digest)
        actual = _scrypt(secret, _unb64(salt), int(n), int(r), int(p))
    except ValueError:
        return False
    return hmac.compare_digest(actual, expected)


def well_formed(presented: str) -> bool:
    """Whether ``presented`` has a key's shape: only such a key is ever checked with scrypt
    (anything else is refused at once, costing nothing)."""
    return len(presented) == KEY_CHARS and KEY_PATTERN.fullmatch(presented) is not None


def _scrypt(secret: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(
        secret.encode(), salt=salt, n=n, r=r, p=p, maxmem=256 * n * r, dklen=HASH_BYTES
    )


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError) as exc:
        raise ValueError("not base64") from exc


UNKNOWN_ID_HASH = (
    f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${_b64(bytes(16))}${_b64(bytes(HASH_BYTES))}"
)
"""What a key with an unknown id is checked against: the format and cost of every key's
hash, and matched by no secret (an all-zero digest would take an scrypt preimage)."""


# --- the key file -----------------------------------------------------------------------


def parse_line(line: str, where: str = "") -> StoredKey:
    fields = line.split(None, 4)
    if len(fields) < 4:
        raise KeyFileError(f"{where}expected '<id> <scopes> <hash> <created> [label]'")
    key_id, scopes, hashed, created = fields[:4]
    if not re.fullmatch(r"[0-9a-f]{12}", key_id):
        raise KeyFileError(f"{where}the key id must be 12 hex digits")
    if not hashed.startswith("scrypt$") or hashed.count("$") != 5:
        raise KeyFileError(f"{where}the hash must be scrypt$<n>$<r>$<p>$<salt>$<hash>")
    try:
        wanted = parse_scopes(scopes)
    except KeyFileError as exc:
        raise KeyFileError(f"{where}{exc}") from None
    return StoredKey(key_id, wanted, hashed, created, fields[4] if len(fields) > 4 else "")


def parse_lines(lines: Iterable[str], source: str) -> list[StoredKey]:
    """Every key in ``lines``; :class:`KeyFileError` names the first bad line (not its text:
    it holds a hash)."""
    keys = []
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if line and not line.startswith("#"):
            keys.append(parse_line(line, f"{source}, line {number}: "))
    return keys


def read_key_file(path: Path) -> list[StoredKey]:
    """The keys in ``path``; none when it does not exist."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    return parse_lines(text.splitlines(), str(path))


def add_key(path: Path, scopes: Iterable[str], label: str = "") -> tuple[str, StoredKey]:
    """Create a key, append its line to ``path`` (made, mode 0600, if missing) and return the
    whole key: the only time it exists outside the client."""
    existing = read_key_file(path)
    key, stored = new_key(scopes, label, taken=(k.key_id for k in existing))
    _write(path, [*existing, stored])
    return key, stored


def revoke_key(path: Path, key_id: str) -> StoredKey:
    """Remove the key ``key_id`` (or a unique prefix of it) from ``path``; the removed key."""
    existing = read_key_file(path)
    matches = [k for k in existing if k.key_id.startswith(key_id)] if key_id else []
    if len(matches) != 1:
        found = "no key" if not matches else f"{len(matches)} keys"
        raise KeyFileError(f"{found} in {path} with an id starting {key_id!r}")
    _write(path, [k for k in existing if k is not matches[0]])
    return matches[0]


def _write(path: Path, keys: list[StoredKey]) -> None:
    """Replace the file at once (a reader sees the old or the new file), readable only by
    its owner."""
    path.parent.mkdir(parents=True, exist_ok=True)
    header = "# Sagaline API keys (services/keys.py): <id> <scopes> <hash> <created> [label]\n"
    text = header + "".join(k.line() + "\n" for k in keys)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def ensure_local_key(key_file: Path, keys_file: Path, inline: str = "") -> str:
    """The key in ``key_file`` if the API would accept it; otherwise a new key with every
    scope, its hash added to ``keys_file`` and the key written to ``key_file`` (mode 0600).
    For a developer's machine (`make run`, the demo), not for deployments."""
    if key_file.exists():
        key = key_file.read_text().strip()
        if Keyring(keys_file, inline).authenticate(key) is not None:
            return key
    key, _ = add_key(keys_file, SCOPES, "local (make run)")
    key_file.parent.mkdir(parents=True, exist_ok=True)
    key_file.touch(mode=0o600)
    key_file.chmod(0o600)
    key_file.write_text(key + "\n")
    return key


# --- checking a presented key -----------------------------------------------------------


class Keyring:
    """The keys an API process accepts: the key file (re-read whenever it changes, so a
    revoked key stops working at the next request) and the keys of ``SAGALINE_API_KEYS``.

    A presented key is looked up by its id and its secret checked against the scrypt hash
    once (an unknown id against :data:`UNKNOWN_ID_HASH`, at the same cost); a match is
    remembered by a SHA-256 of the whole key (never the key itself) until the key's line
    changes or goes away."""

    def __init__(self, path: Path | None, inline: str = "") -> None:
        self.path = path
        self._inline = parse_lines(inline.split(";"), "SAGALINE_API_KEYS")
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = _NEVER
        self._keys: dict[str, StoredKey] = {}
        self._verified: dict[bytes, StoredKey] = {}
        self.refresh()

    def __len__(self) -> int:
        return len(self._current())

    def refresh(self) -> None:
        """Re-read the key file if it changed since the last read (size or mtime)."""
        stamp = self._file_stamp()
        with self._lock:
            if stamp == self._stamp:
                return
            from_file = [] if self.path is None or stamp is None else read_key_file(self.path)
            keys = {k.key_id: k for k in [*self._inline, *from_file]}
            self._keys, self._stamp = keys, stamp
            self._verified = {d: k for d, k in self._verified.items() if keys.get(k.key_id) == k}

    def authenticate(self, presented: str) -> StoredKey | None:
        """The stored key ``presented`` is, or None. Blocking (scrypt): call it in a thread,
        unless :meth:`recognise` answered first."""
        match = KEY_PATTERN.fullmatch(presented) if len(presented) == KEY_CHARS else None
        if match is None:
            return None
        stored = self.recognise(presented)
        if stored is not None:
            return stored
        stored = self._current().get(match["id"])
        if stored is None:
            # The same scrypt run as a known id's: the time taken tells no one which exist.
            secret_matches(match["secret"], UNKNOWN_ID_HASH)
            return None
        fingerprint = hashlib.sha256(presented.encode()).digest()
        if not secret_matches(match["secret"], stored.hashed):
            return None
        with self._lock:
            self._verified[fingerprint] = stored
        return stored

    def recognise(self, presented: str) -> StoredKey | None:
        """The stored key ``presented`` is, if it was verified before and its line is still
        the same (the key file is re-read if it changed); None means "not known yet", to be
        settled by :meth:`authenticate`. No scrypt: cheap enough for the event loop (a
        ``stat`` and a SHA-256), so a known key costs no thread hop."""
        fingerprint = hashlib.sha256(presented.encode()).digest()
        keys = self._current()
        with self._lock:
            known = self._verified.get(fingerprint)
        if known is not None and keys.get(known.key_id) == known:
            return known
        return None

    def _current(self) -> dict[str, StoredKey]:
        try:
            self.refresh()
        except KeyFileError as exc:
            # A file half-edited by hand: keep the keys last read, and say why (the message
            # names the line, never its text).
            log.warning("keeping the API keys read before: %s", exc)
        return self._keys

    def _file_stamp(self) -> tuple[int, int] | None:
        if self.path is None:
            return None
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return None
        return stat.st_mtime_ns, stat.st_size

    def __iter__(self) -> Iterator[StoredKey]:
        return iter(list(self._current().values()))
