"""API keys: the format, the hashes, the key file, rotation and revocation."""

from __future__ import annotations

import os
import stat
import statistics
import time
from pathlib import Path

import pytest

from services import keys as keys_module
from services.keys import (
    KEY_PATTERN,
    SCRYPT_N,
    SCRYPT_P,
    SCRYPT_R,
    KeyFileError,
    Keyring,
    add_key,
    ensure_local_key,
    hash_secret,
    new_key,
    parse_line,
    read_key_file,
    revoke_key,
    secret_matches,
)

pytestmark = pytest.mark.unit


def test_a_key_names_its_id_and_is_stored_only_as_a_salted_hash() -> None:
    key, stored = new_key(["commands", "read"], label="billing service")
    match = KEY_PATTERN.fullmatch(key)
    assert match is not None and match["id"] == stored.key_id
    assert match["secret"] not in stored.line() and key not in stored.line()
    assert stored.line().startswith(f"{stored.key_id} commands,read scrypt$16384$8$1$")
    assert stored.line().endswith(" billing service")
    assert parse_line(stored.line()) == stored
    # Salted: the same secret hashes differently each time, and both verify.
    assert hash_secret(match["secret"]) != hash_secret(match["secret"])
    assert secret_matches(match["secret"], stored.hashed)
    last = match["secret"][-1]
    assert not secret_matches(match["secret"][:-1] + ("B" if last == "A" else "A"), stored.hashed)
    assert not secret_matches(match["secret"], "scrypt$1$1$1$AAAA$AAAA")
    assert not secret_matches(match["secret"], "plain$text")


def test_scopes_must_be_known() -> None:
    with pytest.raises(KeyFileError, match="unknown: write"):
        new_key(["write"])
    with pytest.raises(KeyFileError, match="comma-separated"):
        new_key([])


def test_the_key_file_is_written_whole_and_readable_by_its_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "api-keys"
    first, a = add_key(path, ["read"], "dashboard")
    second, b = add_key(path, ["commands"], "shop")
    assert read_key_file(path) == [a, b]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    text = path.read_text()
    assert first not in text and second not in text
    assert text.startswith("# Sagaline API keys")


def test_a_bad_line_is_named_by_its_number_not_its_text(tmp_path: Path) -> None:
    path = tmp_path / "api-keys"
    _, good = add_key(path, ["read"])
    secretish = "scrypt$16384$8$1$c2FsdA$aGFzaA"
    path.write_text(good.line() + "\n" + f"nothex read {secretish} 2026-01-01T00:00:00Z\n")
    with pytest.raises(KeyFileError) as refused:
        read_key_file(path)
    assert "line 2" in str(refused.value) and "12 hex digits" in str(refused.value)
    assert secretish not in str(refused.value)


def test_rotation_two_keys_at_once_then_the_old_one_revoked(tmp_path: Path) -> None:
    path = tmp_path / "api-keys"
    old, old_stored = add_key(path, ["commands"], "v1")
    keyring = Keyring(path)
    assert keyring.authenticate(old) == old_stored
    new, new_stored = add_key(path, ["commands"], "v2")
    # The running keyring sees the new line at the next request, and both keys work.
    assert keyring.authenticate(new) == new_stored
    assert keyring.authenticate(old) == old_stored
    assert revoke_key(path, old_stored.key_id[:6]) == old_stored  # a unique prefix will do
    assert keyring.authenticate(old) is None  # refused at once, though it was remembered
    assert keyring.authenticate(new) == new_stored
    with pytest.raises(KeyFileError, match="no key"):
        revoke_key(path, old_stored.key_id)


def test_a_wrong_secret_an_unknown_id_or_garbage_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "api-keys"
    key, stored = add_key(path, ["read"])
    keyring = Keyring(path)
    wrong_secret = key[:-4] + ("AAAA" if not key.endswith("AAAA") else "BBBB")
    unknown_id = "sgl_000000000000_" + key.split("_", 2)[2]
    for presented in (wrong_secret, unknown_id, "", "Bearer " + key, key + "x", key.upper()):
        assert keyring.authenticate(presented) is None, presented
    assert keyring.authenticate(key) == stored


def test_an_unknown_id_costs_the_same_scrypt_run_as_a_known_id_with_a_wrong_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "api-keys"
    key, _ = add_key(path, ["read"])
    keyring = Keyring(path)
    wrong_secret = key[:-4] + ("AAAA" if not key.endswith("AAAA") else "BBBB")
    unknown_id = "sgl_000000000000_" + key.split("_", 2)[2]
    runs: list[tuple[int, int, int, int]] = []
    real = keys_module._scrypt

    def counted(secret: str, salt: bytes, n: int, r: int, p: int) -> bytes:
        runs.append((n, r, p, len(salt)))
        return real(secret, salt, n, r, p)

    monkeypatch.setattr(keys_module, "_scrypt", counted)
    work = {}
    for name, presented in (("wrong secret", wrong_secret), ("unknown id", unknown_id)):
        runs.clear()
        assert keyring.authenticate(presented) is None
        work[name] = list(runs)
    assert work["wrong secret"] == work["unknown id"] == [(SCRYPT_N, SCRYPT_R, SCRYPT_P, 16)]
    runs.clear()
    assert keyring.authenticate("sgl_not-a-key") is None
    assert runs == []  # not shaped like a key: refused without a run


def test_an_unknown_id_takes_as_long_as_a_wrong_secret_within_the_noise(tmp_path: Path) -> None:
    path = tmp_path / "api-keys"
    key, _ = add_key(path, ["read"])
    keyring = Keyring(path)
    wrong_secret = key[:-4] + ("AAAA" if not key.endswith("AAAA") else "BBBB")
    unknown_id = "sgl_000000000000_" + key.split("_", 2)[2]
    times: dict[str, list[float]] = {wrong_secret: [], unknown_id: []}
    for _ in range(5):  # interleaved, so a busy moment of the machine falls on both
        for presented, taken in times.items():
            started = time.perf_counter()
            keyring.authenticate(presented)
            taken.append(time.perf_counter() - started)
    known, unknown = (statistics.median(t) for t in times.values())
    # Before the unknown id ran scrypt it took ~1/1000 of the time: far outside this band.
    assert 0.5 < unknown / known < 2.0, (known, unknown)


def test_keys_from_the_setting_are_accepted_beside_the_file(tmp_path: Path) -> None:
    inline_key, inline = new_key(["admin"], "from a secret store")
    file_key, _ = add_key(tmp_path / "api-keys", ["read"])
    keyring = Keyring(tmp_path / "api-keys", f" {inline.line()} ; ")
    assert keyring.authenticate(inline_key) == inline
    assert keyring.authenticate(file_key) is not None
    assert len(keyring) == 2
    assert len(Keyring(tmp_path / "missing")) == 0


def test_the_local_key_is_made_once_and_kept(tmp_path: Path) -> None:
    keys, key_file = tmp_path / "api-keys", tmp_path / "api-key"
    key = ensure_local_key(key_file, keys)
    assert ensure_local_key(key_file, keys) == key
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
    stored = Keyring(keys).authenticate(key)
    assert stored is not None and stored.scopes == {"commands", "read", "admin"}
    # Revoked (or the key file deleted): a new key is made, the old one stays refused.
    revoke_key(keys, stored.key_id)
    fresh = ensure_local_key(key_file, keys)
    assert fresh != key and Keyring(keys).authenticate(key) is None


def test_the_keys_commands_create_list_and_revoke(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from runtime.settings import get_settings
    from sagaline.cli import main

    keys = tmp_path / "api-keys"
    monkeypatch.setenv("SAGALINE_API_KEYS_FILE", str(keys))
    get_settings.cache_clear()
    try:
        runner = CliRunner(mix_stderr=False)
        created = runner.invoke(main, ["keys", "create", "--scope", "read", "--label", "bi tool"])
        assert created.exit_code == 0, created.output
        key = created.stdout.strip()  # stdout holds the key alone, for scripts
        stored = Keyring(keys).authenticate(key)
        assert stored is not None and stored.scopes == {"read"}
        assert f"created key {stored.key_id} (read)" in created.stderr
        listed = runner.invoke(main, ["keys", "list"])
        assert f"{stored.key_id}  read" in listed.stdout and "bi tool" in listed.stdout
        assert key.split("_", 2)[2] not in listed.output and "scrypt" not in listed.output
        refused = runner.invoke(main, ["keys", "create", "--scope", "everything"])
        assert refused.exit_code == 1 and "unknown: everything" in refused.stderr
        revoked = runner.invoke(main, ["keys", "revoke", stored.key_id])
        assert revoked.exit_code == 0 and f"revoked key {stored.key_id}" in revoked.stdout
        assert Keyring(keys).authenticate(key) is None
        again = runner.invoke(main, ["keys", "revoke", stored.key_id])
        assert again.exit_code == 1 and "no key" in again.stderr
    finally:
        get_settings.cache_clear()


@pytest.mark.parametrize(
    ("env", "said"),
    [
        (
            {
                "SAGALINE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
                "SAGALINE_KAFKA_SASL_PASSWORD": "hunter2",
            },
            "invalid settings: SAGALINE_KAFKA_SECURITY_PROTOCOL=SASL_SSL needs",
        ),
        (  # a setting that takes JSON, given something else
            {"SAGALINE_SPARK_CONF": "spark.sql.adaptive.enabled=false"},
            'invalid settings: error parsing value for field "spark_conf" from source'
            ' "EnvSettingsSource" (it takes JSON)',
        ),
    ],
    ids=["a rule across settings", "not JSON"],
)
def test_invalid_settings_stop_every_command_with_a_sentence(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], said: str
) -> None:
    from click.testing import CliRunner

    from runtime.settings import get_settings
    from sagaline.cli import main

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(main, ["topics", "check"])
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 1
    assert said in result.output
    assert "hunter2" not in result.output and "Traceback" not in result.output
