"""Sagaline's pure core.

Message contracts, the generic saga/participant machinery, saga definitions and the
meaning of every projection. Standard library and pydantic only: no Kafka, no database,
no clock reads (``now`` is passed in) and no random ids (ids derive from their cause), so
a replayed message yields the same decisions and the same message ids.
"""
