"""The saga console in a real browser (Debian's headless Chromium, driven by Selenium) over
the real stack: the shared broker, a worker and a projector process, the API as a process
(``sagaline api``) serving the console, and a fresh PostgreSQL database.

An operator logs in, finds a declined order (CANCELLED, its reservation released: a
compensation) and reads its steps and reason, lists the failed sagas, then re-drives a dead
letter made exactly as test_deadletter_redrive.py makes one (an order too large for the
worker's SAGALINE_MAX_MESSAGE_BYTES, then the worker restarted with the default limit) and
watches that order's saga end in the console. A second click without force is refused.
It also opens the order saga's definition, drawn with its live counts, and compensates the
waiting order through the list's bulk action (dry run, then confirmation). Screenshots of
every page (and of a phone-width view) go to .local/console-screenshots/.

Chromium and its driver come from Debian (``deploy/local/chromium.sh install``, which
`make test` runs); nothing is downloaded at run time.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver

from runtime.settings import Settings
from runtime.topics import DEAD_LETTERS
from services.api.console import session
from tests.integration.harness import (
    ServiceProcess,
    api_key,
    isolated_settings,
    read_all,
    running_stack,
)
from tests.integration.readside import ProjectorProcess, fresh_database

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / ".local" / "console-screenshots"
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
API_PORT = 19511
"""A fixed port of the range this test may use (the browser needs a real address)."""
LINES = 100


class ApiProcess(ServiceProcess):
    command = "api"
    ready_marker = "Uvicorn running on"


@contextmanager
def chromium(phone: bool = False) -> Iterator[WebDriver]:
    """Headless Chromium, 1280 px wide, or a phone's 390 x 844 CSS pixels (emulated: a
    headless window is never narrower than 500 px)."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if shutil.which(p) is None]
    if missing:  # fail, never skip: `make test` installs them
        pytest.fail(
            f"{', '.join(missing)} not found: run `deploy/local/chromium.sh install` "
            "(Debian's chromium and chromium-driver)",
            pytrace=False,
        )
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",  # root in a container has no user namespace for the sandbox
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,900",
        "--lang=en-US",
    ):
        options.add_argument(arg)
    if phone:
        metrics = {"width": 390, "height": 844, "pixelRatio": 2.0}
        options.add_experimental_option("mobileEmulation", {"deviceMetrics": metrics})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def shot(driver: WebDriver, name: str, whole: bool = True) -> None:
    """A screenshot of the whole page, beyond the viewport (or of the viewport only, for a
    page too long to look at)."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    if not whole:
        driver.save_screenshot(str(SHOTS / f"{name}.png"))
        return
    taken = driver.execute_cdp_cmd(  # type: ignore[attr-defined]
        "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}
    )
    (SHOTS / f"{name}.png").write_bytes(base64.b64decode(taken["data"]))


def text_of(driver: WebDriver, selector: str) -> str:
    return str(driver.find_element(By.CSS_SELECTOR, selector).text)


def until(check: object, timeout: float = 60, every: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():  # type: ignore[operator]
                return
        except WebDriverException:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"not true after {timeout} s: {check}")
        time.sleep(every)


def definition_and_actions(driver: WebDriver, base: str, waiting: str) -> None:
    """Issue 32: the order saga drawn from its declaration with its live counts (the
    waiting order at AUTHORIZING), its step's link to the list, and a bulk compensation of
    that list: the dry run, then the confirmation."""
    driver.get(f"{base}/console/definitions/order")
    step = "a[href='/console/sagas?saga_type=order&status=AUTHORIZING']"

    def counted() -> bool:
        driver.get(f"{base}/console/definitions/order")
        return "1 now" in driver.find_element(By.CSS_SELECTOR, step).text

    until(counted, timeout=60, every=1)
    picture = text_of(driver, "svg.definition")
    for word in ("PENDING", "AUTHORIZING", "CONFIRMING", "CAPTURING", "CONFIRMED", "inventory"):
        assert word in picture, word
    shot(driver, "16-definition-order")
    driver.get(f"{base}/console/sagas?saga_type=order&status=AUTHORIZING")
    until(lambda: waiting in text_of(driver, "#saga-list"))
    driver.find_element(By.ID, "compensate-these").click()
    driver.find_element(By.ID, "a-reason").send_keys("browser test: payment provider down")
    driver.find_element(By.ID, "dry-run").click()
    until(lambda: "/console/actions/" in driver.current_url)
    # A click does not wait for the page it navigates to: the URL can change before the
    # action's page is in the document (CI of 721b282 looked for its table too soon).
    until(lambda: waiting in text_of(driver, "#action-sagas"))
    assert "payment.Void to payment" in text_of(driver, "#action-sagas")
    assert text_of(driver, "#action-state") == "planned"
    shot(driver, "17-action-dry-run")
    driver.find_element(By.ID, "confirm-action").click()
    until(lambda: text_of(driver, "#action-state") == "done")
    shot(driver, "18-action-done")


def browse(settings: Settings, declined: str, redriven: str, waiting: str) -> None:
    """Everything the operator does, in one browser (blocking: run in a thread)."""
    base = f"http://127.0.0.1:{settings.api_port}"
    with chromium() as driver:
        driver.get(f"{base}/console")
        assert driver.current_url == f"{base}/console/login"
        shot(driver, "01-login")
        field = driver.find_element(By.ID, "api_key")
        assert driver.find_element(By.CSS_SELECTOR, "label[for=api_key]").text == "API key"
        field.send_keys("sgl_000000000000_wrong" + Keys.ENTER)
        until(lambda: "not valid here" in text_of(driver, "[role=alert]"))
        shot(driver, "02-login-refused")
        driver.find_element(By.ID, "api_key").send_keys(api_key(settings) + Keys.ENTER)
        until(lambda: driver.current_url == f"{base}/console")
        cookie = driver.get_cookie(session.COOKIE)
        assert cookie is not None and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        assert api_key(settings) not in cookie["value"]  # a session id, never the key
        until(lambda: "caught up" in text_of(driver, "main"), timeout=60, every=1)
        shot(driver, "03-overview")
        definition_and_actions(driver, base, waiting)
        driver.get(f"{base}/console")

        # The keyboard: the first Tab reaches the skip link, which is then visible.
        driver.find_element(By.TAG_NAME, "body").send_keys(Keys.TAB)
        skip = driver.switch_to.active_element
        assert skip.text == "Skip to the content" and skip.is_displayed()
        shot(driver, "03b-keyboard-skip-link", whole=False)
        skip.send_keys(Keys.ENTER)
        assert driver.switch_to.active_element.get_attribute("id") == "main"

        # The search box: the declined order, its reason and its compensation.
        search = driver.find_element(By.ID, "q")
        search.send_keys(declined + Keys.ENTER)
        until(lambda: driver.current_url == f"{base}/console/sagas/{declined}")
        assert text_of(driver, "#saga-status") == "CANCELLED"
        assert "declined" in text_of(driver, "#saga-reason")
        compensations = driver.find_elements(By.CSS_SELECTOR, "tr.compensation")
        assert compensations, "no compensation marked"
        assert "ledger.Released" in compensations[0].text
        assert "Compensation" in compensations[0].text
        shot(driver, "04-saga-declined")

        # Hostile input in the search box: a page with a sentence, escaped.
        search = driver.find_element(By.ID, "q")
        search.clear()
        search.send_keys('<img src=x onerror=alert(1)>"' + Keys.ENTER)
        until(lambda: "Nothing found" in text_of(driver, "[role=alert]"))
        assert driver.find_elements(By.CSS_SELECTOR, "main img") == []
        shot(driver, "05-search-hostile")

        driver.find_element(By.LINK_TEXT, "Failed sagas").click()
        until(lambda: declined in text_of(driver, "main table"))
        shot(driver, "06-failures")

        # Issue 32: the overview's counts and charts, a filtered list, the swimlanes.
        driver.find_element(By.LINK_TEXT, "Overview").click()
        until(lambda: "stuck" in text_of(driver, "#stuck-total"))
        assert driver.find_elements(By.CSS_SELECTOR, "svg.chart.throughput rect.bar")
        assert driver.find_elements(By.CSS_SELECTOR, "svg.chart.latency")
        # The orders run on an unversioned definition: their events carry no version, so
        # the read side counts them as version 1.
        assert driver.find_elements(By.ID, "counts-order-v1")
        shot(driver, "13-overview-counts")
        driver.get(f"{base}/console/sagas?saga_type=order&outcome=compensated")
        until(lambda: declined in text_of(driver, "#saga-list"))
        assert "compensated" in text_of(driver, "#saga-list")
        assert driver.find_element(By.ID, "f-outcome").get_attribute("value") == "compensated"
        shot(driver, "14-sagas-filtered")
        driver.get(f"{base}/console/sagas?saga_type=order&outcome=compensated&version=1")
        until(lambda: declined in text_of(driver, "#saga-list"))
        assert driver.find_element(By.ID, "f-version").get_attribute("value") == "1"
        driver.find_element(By.LINK_TEXT, declined).click()
        until(lambda: driver.current_url == f"{base}/console/sagas/{declined}")
        lanes = [
            e.get_attribute("data-lane")
            for e in driver.find_elements(By.CSS_SELECTOR, "svg.swimlanes g.lane")
        ]
        assert lanes[0] == "order" and "product" in lanes and "payment" in lanes, lanes
        assert driver.find_elements(By.CSS_SELECTOR, "svg.swimlanes .mark.compensation")
        shot(driver, "15-saga-swimlanes")

        driver.find_element(By.LINK_TEXT, "Dead letters").click()
        until(lambda: "1 letter(s)" in text_of(driver, "main caption"))
        assert "SAGALINE_MAX_MESSAGE_BYTES" in text_of(driver, "main table")
        shot(driver, "07-deadletters")
        driver.find_element(By.CSS_SELECTOR, "button[aria-label^='Re-drive letter']").click()
        until(lambda: "Re-drove letter" in text_of(driver, "#redrive-result"))
        assert driver.find_element(By.ID, "redrive-result").get_attribute("aria-live") == "polite"
        assert "re-driven" in text_of(driver, "main table")
        shot(driver, "08-redriven")

        # The re-driven order is processed: its saga ends, as the console shows.
        def ended() -> bool:
            driver.get(f"{base}/console/sagas/{redriven}")
            return text_of(driver, "#saga-status") == "REJECTED"

        until(ended, timeout=90, every=1)
        shot(driver, "09-saga-redriven", whole=False)  # 100 lines: 200 steps and more

        # A second re-drive is refused unless forced: the page offers only the forced one,
        # and a replayed plain one (the form without force) is refused with a sentence.
        driver.get(f"{base}/console/deadletters")
        forced = driver.find_element(By.CSS_SELECTOR, "button.danger")
        assert "force" in forced.text

        # Logging out ends the session on the server: the old cookie, put back, opens nothing.
        old = driver.get_cookie(session.COOKIE)
        assert old is not None
        driver.find_element(By.CSS_SELECTOR, "form[action='/console/logout'] button").click()
        until(lambda: driver.current_url == f"{base}/console/login")
        assert driver.get_cookie(session.COOKIE) is None
        driver.add_cookie({k: old[k] for k in ("name", "value", "path")})
        driver.get(f"{base}/console")
        assert driver.current_url == f"{base}/console/login"
        shot(driver, "12-logged-out-old-cookie")

    with chromium(phone=True) as phone:
        phone.get(f"{base}/console/login")
        phone.find_element(By.ID, "api_key").send_keys(api_key(settings) + Keys.ENTER)
        until(lambda: phone.current_url == f"{base}/console")
        phone.get(f"{base}/console/sagas/{declined}")
        shot(phone, "10-phone-saga")
        width = phone.execute_script("return document.documentElement.scrollWidth")
        assert int(width) <= 390, f"the page is {width} px wide on a 390 px screen"
        phone.get(f"{base}/console/deadletters")
        shot(phone, "11-phone-deadletters")


async def _letters(settings: Settings, count: int, timeout: float = 60) -> list[dict[str, object]]:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        letters = [json.loads(r.value) for r in await read_all(settings, DEAD_LETTERS)]
        if len(letters) >= count or asyncio.get_running_loop().time() > deadline:
            return letters
        await asyncio.sleep(0.5)


async def _second_redrive_refused_unless_forced(settings: Settings) -> None:
    """The form without ``force`` (a reload of the first POST, say) is refused with the
    CLI's sentence; with it, the record is sent again (and dropped as a duplicate)."""
    base = f"http://127.0.0.1:{settings.api_port}"
    async with httpx.AsyncClient(base_url=base) as client:
        key = api_key(settings)
        logged_in = await client.post("/console/login", data={"api_key": key})
        assert logged_in.status_code == 303
        assert key not in logged_in.headers["set-cookie"]  # a session id, never the key
        page = (await client.get("/console/deadletters")).text
        token = page.split('name="form_token" value="')[1].split('"')[0]
        again = await client.post("/console/deadletters/0/redrive", data={"form_token": token})
        assert again.status_code == 409, again.text
        assert "was re-driven at" in again.text and "--force" in again.text
        forced = await client.post(
            "/console/deadletters/0/redrive", data={"form_token": token, "force": "yes"}
        )
        assert forced.status_code == 200, forced.text
        assert "again (forced)" in forced.text


async def test_an_operator_finds_a_failed_order_and_redrives_a_dead_letter(
    tmp_path: Path,
) -> None:
    with fresh_database("postgresql", tmp_path) as url:
        # A long step deadline: the waiting order stays at its step until the operator
        # cancels it (nothing else here waits for a deadline).
        strict = isolated_settings(
            tmp_path,
            max_message_bytes=10_000,
            database_url=url,
            api_port=API_PORT,
            step_timeout_s=600.0,
        )
        async with running_stack(strict, tmp_path) as stack:
            projector = ProjectorProcess(strict, tmp_path)
            api = ApiProcess(strict, tmp_path)
            projector.start()
            await asyncio.to_thread(api.start)
            try:
                await stack.set_stock("m1", 5)
                declined = await stack.place([("m1", 1)], method="decline")
                waiting = await stack.place([("m1", 1)], method="hang")  # no payment answer
                lines = [(f"p{i:02d}-" + "x" * 86, 1) for i in range(LINES)]
                redriven = await stack.place(lines)
                outcome = (await stack.tail.wait_for([declined], 60)).get(declined)
                assert outcome is not None and outcome.status == "CANCELLED"
                [letter] = await _letters(strict, 1)
                assert "SAGALINE_MAX_MESSAGE_BYTES" in str(letter["reason"])

                # The fix: the worker restarts with the default limit; the letter stays.
                fixed = strict.model_copy(
                    update={"max_message_bytes": Settings().max_message_bytes}
                )
                stack.worker.stop()
                stack.worker.settings = fixed
                await asyncio.to_thread(stack.worker.start)

                await asyncio.to_thread(browse, strict, declined, redriven, waiting)
                outcome = (await stack.tail.wait_for([redriven], 30)).get(redriven)
                assert outcome is not None and outcome.status == "REJECTED"
                assert len(await _letters(strict, 1)) == 1  # not parked again
                await _second_redrive_refused_unless_forced(strict)
            finally:
                api.stop()
                projector.stop()
