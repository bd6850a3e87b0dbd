"""How every Kafka client reaches the brokers: the SAGALINE_KAFKA_* security settings turned
into what aiokafka, Faust and Spark's Kafka source each take.

Every aiokafka client Sagaline creates (API, projector, worker probe, topics, rebuild) gets
its connection arguments from :func:`aiokafka_options`; the worker's Faust app from
:func:`faust_credentials`; the rebuild's Spark reader from :func:`spark_kafka_options`. A
client built any other way would silently talk plaintext to a cluster that requires more.
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass
from typing import Any

from aiokafka.helpers import create_ssl_context

from runtime.settings import Settings
from runtime.startup_wait import Unreachable

JAAS_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


def uses_tls(settings: Settings) -> bool:
    return settings.kafka_security_protocol in ("SSL", "SASL_SSL")


def uses_sasl(settings: Settings) -> bool:
    return settings.kafka_security_protocol.startswith("SASL_")


def ssl_context(settings: Settings) -> ssl.SSLContext | None:
    """The TLS context of an SSL or SASL_SSL protocol (hostnames are checked), else None."""
    if not uses_tls(settings):
        return None
    context: ssl.SSLContext = create_ssl_context(
        cafile=settings.kafka_ssl_cafile,
        certfile=settings.kafka_ssl_certfile,
        keyfile=settings.kafka_ssl_keyfile,
    )
    return context


def aiokafka_options(settings: Settings) -> dict[str, Any]:
    """Keyword arguments for every AIOKafkaProducer, AIOKafkaConsumer and
    AIOKafkaAdminClient: the bootstrap servers and the security settings."""
    options: dict[str, Any] = {
        "bootstrap_servers": settings.kafka_bootstrap,
        "security_protocol": settings.kafka_security_protocol,
    }
    context = ssl_context(settings)
    if context is not None:
        options["ssl_context"] = context
    if uses_sasl(settings):
        options["sasl_mechanism"] = settings.kafka_sasl_mechanism
        options["sasl_plain_username"] = settings.kafka_sasl_username
        options["sasl_plain_password"] = settings.kafka_sasl_secret()
    return options


def faust_credentials(settings: Settings) -> Any:
    """``broker_credentials`` of the Faust app (None under PLAINTEXT).

    faust.SASLCredentials switches itself to SASL_SSL when given an ``ssl_context``;
    faust.SSLCredentials is TLS alone (faust.auth; the aiokafka driver maps both onto the
    same aiokafka arguments as :func:`aiokafka_options`)."""
    import faust

    context = ssl_context(settings)
    if uses_sasl(settings):
        return faust.SASLCredentials(
            username=settings.kafka_sasl_username,
            password=settings.kafka_sasl_secret(),
            mechanism=settings.kafka_sasl_mechanism,
            ssl_context=context,
        )
    if context is not None:
        return faust.SSLCredentials(context)
    return None


def spark_kafka_options(settings: Settings) -> dict[str, str]:
    """Options of Spark's Kafka source (``kafka.``-prefixed Java client settings).

    PEM files are used as they are (Kafka clients >= 2.7): the CA file as a PEM trust store,
    the client certificate and key inline as a PEM key store (the key unencrypted PKCS#8,
    ``BEGIN PRIVATE KEY``). Kafka logs these, and the JAAS line, as ``[hidden]``."""
    options = {
        "kafka.bootstrap.servers": settings.kafka_bootstrap,
        "kafka.security.protocol": settings.kafka_security_protocol,
    }
    if uses_tls(settings):
        if settings.kafka_ssl_cafile is not None:
            options["kafka.ssl.truststore.type"] = "PEM"
            options["kafka.ssl.truststore.location"] = str(settings.kafka_ssl_cafile.resolve())
        if settings.kafka_ssl_certfile is not None and settings.kafka_ssl_keyfile is not None:
            options["kafka.ssl.keystore.type"] = "PEM"
            options["kafka.ssl.keystore.certificate.chain"] = (
                settings.kafka_ssl_certfile.read_text()
            )
            options["kafka.ssl.keystore.key"] = settings.kafka_ssl_keyfile.read_text()
    if uses_sasl(settings):
        module = JAAS_MODULES[settings.kafka_sasl_mechanism]
        username = _jaas_quoted(settings.kafka_sasl_username)
        password = _jaas_quoted(settings.kafka_sasl_secret())
        options["kafka.sasl.mechanism"] = settings.kafka_sasl_mechanism
        options["kafka.sasl.jaas.config"] = (
            f"{module} required username={username} password={password};"
        )
    return options


def _jaas_quoted(value: str) -> str:
    """A JAAS option value in double quotes (Kafka's JaasConfig reads backslash escapes)."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


class KafkaUnreachable(Unreachable):
    """A client could not start: the sentence says where it went, how, and what the broker
    answered (a refused login, a TLS failure, nothing at all)."""

    WAIT_SETTING = "SAGALINE_KAFKA_STARTUP_WAIT_S"


async def unreachable(settings: Settings, exc: BaseException) -> KafkaUnreachable:
    """Why a client failed to start, in a sentence. aiokafka's own error only says "Unable
    to bootstrap from [...]" and logs the reason; one direct connection to the first
    bootstrap server asks the broker again for the reason (never with the password in it)."""
    how: str = settings.kafka_security_protocol
    if uses_sasl(settings):
        how += f" ({settings.kafka_sasl_mechanism} as user {settings.kafka_sasl_username!r})"
    problem = await _connection_problem(settings)
    reason = problem.reason or (
        f"{_named(exc)} (a connection opens, but requests fail: does this listener want "
        "another SAGALINE_KAFKA_SECURITY_PROTOCOL?)"
    )
    return KafkaUnreachable(
        f"cannot use Kafka at {settings.kafka_bootstrap} over {how}: {reason}",
        silent=problem.silent,
    )


@dataclass(frozen=True)
class _Problem:
    reason: str
    """Empty when a connection opened."""
    silent: bool = False


async def _connection_problem(settings: Settings) -> _Problem:
    from aiokafka.conn import create_conn

    host, _, port = settings.kafka_bootstrap.split(",")[0].strip().rpartition(":")
    options = aiokafka_options(settings)
    del options["bootstrap_servers"]
    try:
        conn = await asyncio.wait_for(
            create_conn(host, int(port), request_timeout_ms=5_000, **options), 10
        )
    except TimeoutError:
        return _Problem("the broker did not answer within 10 s", silent=True)
    except Exception as exc:
        reason = str(exc) or type(exc).__name__
        if isinstance(exc, ConnectionError | OSError) and not reason.strip():
            reason = "the connection was closed"
        hint = ""
        if "SaslAuthenticationFailed" in type(exc).__name__ or "uthentication" in reason:
            hint = " (wrong user name or password?)"
        elif isinstance(exc, ssl.SSLError):
            hint = " (the broker's certificate, or SAGALINE_KAFKA_SSL_CAFILE?)"
        # An SSLError is an OSError too, but a broker answered it.
        silent = isinstance(exc, OSError) and not isinstance(exc, ssl.SSLError) and not hint
        return _Problem(f"{_named(exc, reason)}{hint}", silent=silent)
    conn.close()
    return _Problem("")


def _named(exc: BaseException, text: str | None = None) -> str:
    """The error's text with its type's name once (aiokafka's broker errors include it)."""
    text = str(exc) if text is None else text
    name = type(exc).__name__
    return text if name in text else f"{name}: {text}"
