"""Message contracts, defined once and used by the API, the agents, the projector and Spark.

Importing this package registers every contract with :class:`sagas.messages.Message`.
"""

from sagas.contracts import enrollment, ledger, legacy, orders, payment, system

__all__ = ["enrollment", "ledger", "legacy", "orders", "payment", "system"]
