"""Sagaline's edges: the Faust app and its agents, the REST API, the CLI.

Everything here is thin: it decodes, loads state, calls the pure core in :mod:`sagas`,
stores state and sends messages. Rules live in :mod:`sagas`, never here.
"""
