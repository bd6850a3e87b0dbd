"""Every domain of Sagaline, registered here once: the catalog, the worker's wiring, the
API, the contract export, the Spark rebuild and the tests iterate over :data:`DOMAINS`.

A new domain is its own declaration module (``DOMAIN = Domain(...)``, see
``sagas.machinery.domain``) and one line below. Left unannotated on purpose: mypy keeps
each domain's own settings type, so the wiring's call checks that the runtime's settings
satisfy every domain's settings protocol.
"""

from sagas.domains import enrollment, legacy, orders, transfers
from sagas.machinery.domain import check_domains

DOMAINS = (
    orders.DOMAIN,
    enrollment.DOMAIN,
    legacy.DOMAIN,
    transfers.DOMAIN,
)
check_domains(DOMAINS)
