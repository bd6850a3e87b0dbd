"""Alembic migrations of the read-model database (``sagaline db upgrade`` applies them,
``sagaline db revision`` writes a new one).

No ``alembic.ini`` is needed: :mod:`readside.migrate` builds the configuration in code,
pointing at this package, and gives ``env.py`` its connection. Nothing here imports
Sagaline's packages: ``readside`` imports this package, never the other way round.
"""
