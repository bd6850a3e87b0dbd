"""The composition root: the ``sagaline`` command line and the wiring that assembles the
components (:mod:`services`: worker, API, projector; :mod:`spark_projections`: the rebuild)
from the definitions in :mod:`sagas` and the settings in :mod:`runtime`. Nothing imports it."""
