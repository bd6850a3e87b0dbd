"""The Kafka and database security settings: refused at start when incomplete, and turned
into what aiokafka, Faust and Spark's Kafka source take (the SASL run against a real broker
is tests/integration/test_kafka_sasl.py)."""

from __future__ import annotations

import socket
import ssl
import subprocess
from pathlib import Path

import faust
import pytest
from pydantic import ValidationError

from runtime.kafka_security import (
    KafkaUnreachable,
    aiokafka_options,
    faust_credentials,
    spark_kafka_options,
)
from runtime.settings import Settings, masked_url
from runtime.topics import create_topics

pytestmark = pytest.mark.unit


def test_plaintext_is_the_default_and_adds_nothing() -> None:
    settings = Settings(kafka_bootstrap="k:9092")
    assert aiokafka_options(settings) == {
        "bootstrap_servers": "k:9092",
        "security_protocol": "PLAINTEXT",
    }
    assert faust_credentials(settings) is None
    assert spark_kafka_options(settings) == {
        "kafka.bootstrap.servers": "k:9092",
        "kafka.security.protocol": "PLAINTEXT",
    }


@pytest.mark.parametrize(
    "given",
    [
        {},
        {"kafka_sasl_username": "u"},
        {"kafka_sasl_password": "p"},
        {"kafka_sasl_username": "u", "kafka_sasl_password": "p", "kafka_sasl_password_file": "f"},
    ],
)
def test_a_sasl_protocol_without_whole_credentials_is_refused_at_start(
    given: dict[str, str],
) -> None:
    with pytest.raises(ValidationError) as refused:
        Settings(kafka_security_protocol="SASL_SSL", **given)  # type: ignore[arg-type]
    message = str(refused.value)
    assert "SAGALINE_KAFKA_SECURITY_PROTOCOL=SASL_SSL needs SAGALINE_KAFKA_SASL_USERNAME" in message
    assert "'p'" not in message.split("input_value")[0]


def test_scram_over_plaintext_with_the_password_from_a_file(tmp_path: Path) -> None:
    secret = tmp_path / "kafka-password"
    secret.write_text('pa"ss\\word\n')
    settings = Settings(
        kafka_bootstrap="k:9094",
        kafka_security_protocol="SASL_PLAINTEXT",
        kafka_sasl_mechanism="SCRAM-SHA-256",
        kafka_sasl_username="sagaline",
        kafka_sasl_password_file=secret,
    )
    assert aiokafka_options(settings) == {
        "bootstrap_servers": "k:9094",
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": "sagaline",
        "sasl_plain_password": 'pa"ss\\word',
    }
    credentials = faust_credentials(settings)
    assert isinstance(credentials, faust.SASLCredentials)
    assert (credentials.username, credentials.password) == ("sagaline", 'pa"ss\\word')
    assert credentials.mechanism.value == "SCRAM-SHA-256"
    assert credentials.protocol.value == "SASL_PLAINTEXT"
    spark = spark_kafka_options(settings)
    assert spark["kafka.security.protocol"] == "SASL_PLAINTEXT"
    assert spark["kafka.sasl.mechanism"] == "SCRAM-SHA-256"
    assert spark["kafka.sasl.jaas.config"] == (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="sagaline" password="pa\\"ss\\\\word";'
    )
    # The password is a secret: not in the settings' repr.
    assert 'pa"ss' not in repr(Settings(kafka_sasl_password='pa"ss'))


@pytest.fixture(scope="module")
def pem(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate and its unencrypted PKCS#8 key."""
    folder = tmp_path_factory.mktemp("pem")
    cert, key = folder / "ca.pem", folder / "client.key"
    command = "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=sagaline-test"
    subprocess.run(
        [*command.split(), "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    return cert, key


def test_sasl_over_tls_with_a_private_ca_and_a_client_certificate(pem: tuple[Path, Path]) -> None:
    cert, key = pem
    settings = Settings(
        kafka_security_protocol="SASL_SSL",
        kafka_sasl_mechanism="SCRAM-SHA-512",
        kafka_sasl_username="u",
        kafka_sasl_password="p",
        kafka_ssl_cafile=cert,
        kafka_ssl_certfile=cert,
        kafka_ssl_keyfile=key,
    )
    options = aiokafka_options(settings)
    assert options["security_protocol"] == "SASL_SSL"
    context = options["ssl_context"]
    assert isinstance(context, ssl.SSLContext)
    assert context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    assert [c["subject"] for c in context.get_ca_certs()] == [((("commonName", "sagaline-test"),),)]
    credentials = faust_credentials(settings)
    assert isinstance(credentials, faust.SASLCredentials)
    assert credentials.protocol.value == "SASL_SSL" and credentials.ssl_context is not None
    spark = spark_kafka_options(settings)
    assert spark["kafka.ssl.truststore.type"] == "PEM"
    assert spark["kafka.ssl.truststore.location"] == str(cert.resolve())
    assert spark["kafka.ssl.keystore.type"] == "PEM"
    assert spark["kafka.ssl.keystore.key"].startswith("-----BEGIN PRIVATE KEY-----")
    assert spark["kafka.ssl.keystore.certificate.chain"] == cert.read_text()


def test_tls_alone(pem: tuple[Path, Path]) -> None:
    settings = Settings(kafka_security_protocol="SSL", kafka_ssl_cafile=pem[0])
    assert isinstance(aiokafka_options(settings)["ssl_context"], ssl.SSLContext)
    assert "sasl_mechanism" not in aiokafka_options(settings)
    credentials = faust_credentials(settings)
    assert isinstance(credentials, faust.SSLCredentials)
    assert credentials.protocol.value == "SSL"
    with pytest.raises(ValidationError, match="go together"):
        Settings(kafka_security_protocol="SSL", kafka_ssl_certfile=pem[0])


def test_the_database_password_comes_from_the_url_or_a_file_and_is_masked(
    tmp_path: Path,
) -> None:
    secret = tmp_path / "db-password"
    secret.write_text("s3cr:t@/x\n")
    url = "postgresql+psycopg://sagaline@db:5432/sagaline"
    settings = Settings(database_url=url, database_password_file=secret)
    opened = settings.database_url_with_password()
    assert opened == "postgresql+psycopg://sagaline:s3cr%3At%40%2Fx@db:5432/sagaline"
    assert masked_url(opened) == "postgresql+psycopg://sagaline:***@db:5432/sagaline"
    assert Settings(database_url=opened).database_url_with_password() == opened
    with pytest.raises(ValidationError, match="given twice"):
        Settings(database_url=opened, database_password_file=secret)
    empty = tmp_path / "empty"
    empty.write_text("")
    with pytest.raises(ValueError, match="SAGALINE_DATABASE_PASSWORD_FILE: the first line"):
        Settings(database_url=url, database_password_file=empty).database_url_with_password()
    assert "s3cr" not in masked_url("not a url s3cr")


async def test_a_client_that_cannot_connect_says_where_how_and_why() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    settings = Settings(
        kafka_bootstrap=f"127.0.0.1:{port}",
        kafka_security_protocol="SASL_PLAINTEXT",
        kafka_sasl_username="sagaline",
        kafka_sasl_password="hunter2",
    )
    with pytest.raises(KafkaUnreachable) as refused:
        await create_topics(settings)
    message = str(refused.value)
    assert message.startswith(
        f"cannot use Kafka at 127.0.0.1:{port} over SASL_PLAINTEXT "
        "(SCRAM-SHA-512 as user 'sagaline'): "
    ), message
    assert "Connect call failed" in message or "refused" in message.lower(), message
    assert "hunter2" not in message
