"""Headless Chromium driven by Selenium, for the tests of the built-in pages.

Debian's `chromium` and `chromium-driver` packages provide the browser and its driver;
`make test` installs them where they are missing. The driver's path is given explicitly,
so Selenium never tries to download one. Screenshots go to tests/browser/shots/ (ignored
by git) for a person to look at after a run.
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

SHOTS_DIR = Path(__file__).resolve().parent / "shots"
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--window-size=1280,900")


def _find(*names: str) -> str:
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    pytest.fail(f"{' or '.join(names)} not found: run `make test` (it installs Debian's "
                "chromium and chromium-driver) or `apt-get install chromium chromium-driver`")


@pytest.fixture(scope="session")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = _find("chromium", "chromium-browser")
    profile = tempfile.mkdtemp(prefix="tl-chromium-")
    for flag in CHROMIUM_FLAGS + (f"--user-data-dir={profile}",):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(_find("chromedriver")), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="session")
def shot():
    """shot(driver, name): save a screenshot as tests/browser/shots/<name>.png."""
    SHOTS_DIR.mkdir(exist_ok=True)
    return lambda driver, name: driver.save_screenshot(str(SHOTS_DIR / f"{name}.png"))
