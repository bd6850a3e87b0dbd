"""Message contracts, defined once and used by the API, the agents, the projector and Spark.

Each domain names the contract modules it declares (``sagas.domains``); ``system`` (the
tick every process accepts) belongs to none. Importing ``sagas.domains`` registers every
contract with :class:`sagas.messages.Message`; this package lists none (a domain's
contracts are its own).
"""
