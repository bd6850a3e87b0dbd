"""Message contracts, defined once and used by the API, the agents, the projector and Spark.

Importing this package registers every contract with :class:`sagas.messages.Message`.
"""

from sagas.contracts import ledger, orders, payment, system

__all__ = ["ledger", "orders", "payment", "system"]
