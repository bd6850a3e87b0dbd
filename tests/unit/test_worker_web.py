"""The worker's web server (its /metrics needs no key) listens where the settings say and
serves Sagaline's pages only."""

from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from runtime.settings import Settings
from sagas.participants.ledger import CapacityLedger
from services.worker.faust_app import create_app

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
def test_the_web_server_binds_the_configured_address_only(host: str, tmp_path: Path) -> None:
    # Faust binds `web_bind` (every interface unless told), not `web_host` (a URL's name).
    settings = Settings(worker_web_host=host, data_dir=tmp_path, store="memory")
    app, _ = create_app(settings, [])
    assert (app.conf.web_bind, app.conf.web_host) == (host, host)


FAUST_VIEWS = [
    "/",
    "/table/",
    "/table/inventory/",
    "/table/inventory/p1/",
    "/router/",
    "/router/topics",
    "/router/inventory/p1/",
    "/graph/",
    "/assignment/",
    "/performance/",
]


async def test_the_port_serves_sagalines_pages_and_none_of_fausts_views(tmp_path: Path) -> None:
    # /table/<table>/<key>/ served any key's stored state, /router/ the cluster's layout,
    # to anyone who reached the port (it has no key).
    settings = Settings(data_dir=tmp_path, store="memory")
    app, _ = create_app(settings, [CapacityLedger(name="inventory", entity_type="product")])
    served = await app.web.wsgi()  # the aiohttp application Faust's server runs
    async with TestClient(TestServer(served)) as client:
        for path in FAUST_VIEWS:
            response = await client.get(path)
            assert response.status == 404, path
        metrics = await client.get("/metrics")
        assert metrics.status == 200
        assert "sagaline_worker_records_total" in await metrics.text()
        assert (await client.get("/sagaline/metrics")).status == 200
    paths = {route.resource.canonical for route in served.router.routes() if route.resource}
    assert paths == {"/metrics", "/sagaline/metrics"}
