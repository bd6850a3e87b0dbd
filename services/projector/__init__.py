"""The online projector: domain events -> read-model rows, exactly once, in one transaction
per batch with the Kafka offsets it reflects (``sagaline projector``)."""
