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
