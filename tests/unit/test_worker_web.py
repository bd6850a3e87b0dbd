"""The worker's web server (its /metrics needs no key) listens where the settings say."""

from pathlib import Path

import pytest

from runtime.settings import Settings
from services.worker.faust_app import create_app

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
def test_the_web_server_binds_the_configured_address_only(host: str, tmp_path: Path) -> None:
    # Faust binds `web_bind` (every interface unless told), not `web_host` (a URL's name).
    settings = Settings(worker_web_host=host, data_dir=tmp_path, store="memory")
    app, _ = create_app(settings, [])
    assert (app.conf.web_bind, app.conf.web_host) == (host, host)
