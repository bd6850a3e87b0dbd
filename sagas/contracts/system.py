"""Messages the machinery itself sends."""

from sagas.messages import Message


class Tick(Message):
    """Wakes an agent for one key so that its due deadlines fire inside its own stream.

    Deadlines live in table state; a timer only sends ticks, so firing a deadline is
    serialized with every other message for that key, like any other decision.
    """

    TYPE = "system.Tick"
