"""Deterministic message ids.

A message's id is derived from the id of the message that caused it and its place among
that cause's outputs. Reprocessing the same cause after a crash therefore re-creates the
very same ids, and every consumer can drop the copies.
"""

import uuid

_NAMESPACE = uuid.UUID("6f1d3c9e-1b7a-4c53-9d55-5a6e1f0b2c11")


def derive_id(parent: str, tag: str) -> str:
    """The id of the output ``tag`` of the message ``parent``."""
    return uuid.uuid5(_NAMESPACE, f"{parent}/{tag}").hex


COMMAND_ID_PREFIX = "cmd-"
"""Marks the id of a command a client sent through the API (see :func:`external_command_id`)."""


def external_command_id(parent: str, tag: str) -> str:
    """The id of a command accepted from outside (the REST API), derived like any other id.

    The prefix lets the projector recognise the events such a command caused (their
    ``causation_id``) and record a receipt, which is what a consistency token waits for.
    """
    return COMMAND_ID_PREFIX + derive_id(parent, tag)


def is_external_command_id(message_id: str | None) -> bool:
    return message_id is not None and message_id.startswith(COMMAND_ID_PREFIX)
