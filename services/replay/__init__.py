"""``sagaline replay``: read the recorded history off Kafka, run it through candidate
definitions (the pure core: :mod:`sagas.machinery.replay`) and report what they would have
decided differently."""
