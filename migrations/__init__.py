"""Alembic migrations of the read-model database (``sagaline db upgrade`` applies them).

No ``alembic.ini`` is needed: :mod:`readside.migrate` builds the configuration
in code, pointing at this package and at ``settings.database_url``.
"""
