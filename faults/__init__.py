"""A fault harness on the real stack: Sagaline's promises checked under crashes and poison.

``python -m faults --cycles N`` starts a private broker, then per cycle a fresh topic set,
database, worker (``--workers N``: N in one group), projector and API (real processes),
drives mixed load through the REST API while it kills, stops and poisons them, drains, and
checks from the API, the topics and the read models that no accepted order was lost,
nothing was applied twice and every dead letter was one of its own poison records. See
RELIABILITY.md.
"""
