"""Generic machinery shared by every saga and participant.

A *process* (saga or participant) is a :class:`~sagas.machinery.process.Process`: pure
``decide`` and ``on_deadline`` functions over a frozen state. :func:`~sagas.machinery.step.step`
wraps them with what every process needs: dedupe by message id, durable deadlines, per-entity
event sequence numbers and deterministic ids for everything it sends.
"""
