"""The dashboard in headless Chromium against a real loop (tiny params) in a temporary project copy.

Checks: the API server starts (``python -m ml.api``) on a free loopback port; the page's
Start button launches loop.py on a copy of the two-generation reference run; after its first
attempt the page's Pause button pauses the loop between stages (status ``paused``); while a
stage runs its live learning curve is drawn;
the Vega-Lite charts (vendored vega-embed) are drawn and not empty, the win-rate chart with
one point per row of plots/generations.json, and no request leaves the server; refreshes
with unchanged data redraw no chart (no flicker);
Resume lets it go on, Stop makes it finish its stage and exit (status ``stopped``). A
screenshot of the paused page is saved; its path is printed.

Needs Debian's ``chromium`` and ``chromium-driver`` (.ci/run installs them) and selenium.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from ml.api.control import is_loop_process
from ml.api.vega import POINTS
from tests.conftest import ROOT, wait_for

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage", "--window-size=1400,1150",
)  # fmt: skip
LOOP_TIMEOUT_S = 240

pytestmark = [
    pytest.mark.expensive,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs /usr/bin/chromium (apt-get install chromium; .ci/run does)"),
    pytest.mark.skipif(not CHROMEDRIVER.exists(), reason="needs /usr/bin/chromedriver (apt-get install chromium-driver)"),
]
webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (pip install -e '.[dev]')")
from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as ec  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str) -> dict | list:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.load(r)


def browser(profile: Path):
    """Headless Chromium through Debian's chromedriver, with a fresh profile in ``profile``."""
    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
        opts.add_argument(flag)
    return webdriver.Chrome(service=webdriver.ChromeService(executable_path=str(CHROMEDRIVER)), options=opts)


def click(driver, button_id: str) -> None:
    """Click a control button once the page has enabled it (buttons follow the refreshed status)."""
    WebDriverWait(driver, 30).until(ec.element_to_be_clickable((By.ID, button_id))).click()


def page_state(driver) -> str:
    """The status panel's state, read in one script call: the panel is replaced on every
    refresh, so an element found first and read after may already be gone (stale)."""
    return driver.execute_script("const e = document.getElementById('status-state'); return e && e.dataset.state;")


def check_charts(driver, repo: Path) -> None:
    """Every Vega-Lite chart drawn (vega-embed, SVG renderer, not empty); one win-rate point per
    row of plots/generations.json; every resource from this server (no CDN)."""
    rows = json.loads((repo / "plots/generations.json").read_text())
    WebDriverWait(driver, 30, ignored_exceptions=(StaleElementReferenceException,)).until(
        lambda d: all(c.get_attribute("data-rendered") == "true" for c in d.find_elements(By.CSS_SELECTOR, ".vl-chart"))
    )
    for chart_id in ("winrate-chart", "elo-chart", "composition-chart"):
        marks = driver.find_elements(By.CSS_SELECTOR, f"#{chart_id} svg .mark-symbol path, #{chart_id} svg .mark-rect path")
        assert marks, chart_id
    # the gate points' own mark group (ml.api.vega.POINTS): not the legend's symbols, not the student line's points
    points = driver.find_elements(By.CSS_SELECTOR, f"#winrate-chart svg .mark-symbol.role-mark.{POINTS}_marks path")
    assert len(points) == len([r for r in rows if r.get("gate_win_rate") is not None]) == len(rows)
    assert driver.find_elements(By.CSS_SELECTOR, "#curves .vl-chart svg .mark-line path")  # the stages' learning curves
    origin = driver.execute_script("return location.origin")
    urls = driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert urls and all(u.startswith(origin) for u in urls), urls


def check_charts_kept(driver) -> None:
    """Two refreshes with unchanged data (the loop paused) redraw no chart: each keeps its SVG element."""
    tag = "return [...document.querySelectorAll('.vl-chart svg')].map(s => (s.dataset.probe = '1', s)).length"
    count = "return Number(document.body.dataset.refreshes || 0)"
    drawn, before = driver.execute_script(tag), driver.execute_script(count)
    WebDriverWait(driver, 20).until(lambda d: d.execute_script(count) >= before + 2)
    probed = driver.execute_script("return document.querySelectorAll('.vl-chart svg[data-probe=\"1\"]').length")
    assert drawn and probed == drawn == len(driver.find_elements(By.CSS_SELECTOR, ".vl-chart svg"))


def check_live_curve(driver) -> None:
    """While a stage with curves runs, its chart comes first, marked live, and is drawn."""
    WebDriverWait(driver, 120).until(
        lambda d: d.find_elements(
            By.CSS_SELECTOR, '#curves .vl-chart[data-live="true"][data-rendered="true"] svg .mark-line path'
        )
    )


def kill_loop(repo: Path) -> None:
    """Kill a loop left running by a failed test (its own process group)."""
    for name in ("status.json", "api-launch.json"):
        try:
            pid = json.loads((repo / ".dvc/tmp/loop" / name).read_text()).get("pid")
        except (OSError, ValueError):
            continue
        if isinstance(pid, int) and is_loop_process(pid):
            os.killpg(pid, signal.SIGKILL)


def test_dashboard_drives_a_real_loop(reference_run, tmp_path: Path, capsys: pytest.CaptureFixture):
    repo = reference_run[0]  # two generations done: the page has rows to draw before its loop's first attempt ends
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "PYTHONHASHSEED": "0"}
    server_log = open(tmp_path / "server.log", "wb")  # closed in finally
    server = subprocess.Popen(
        [sys.executable, "-m", "ml.api", "--repo", str(repo), "--port", str(port), "--log-level", "warning"],
        cwd=ROOT, env=env, stdout=server_log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    driver = None
    try:
        wait_for(lambda: get_json(f"{base}/api/ml/distill/status"), 120, "the API server", 0.5)  # a loaded CI machine
        driver = browser(tmp_path / "chromium-profile")
        driver.get(base)
        assert page_state(driver) == "done"  # the reference run's end
        driver.find_element(By.ID, "start-max-generations").send_keys("4")
        click(driver, "btn-start")
        WebDriverWait(driver, 10).until(ec.text_to_be_present_in_element((By.ID, "action-result"), "start: ok"))
        status = lambda: get_json(f"{base}/api/ml/distill/status")  # noqa: E731
        wait_for(lambda: status()["running"], 120, "the loop to start", 0.5)
        check_live_curve(driver)
        history = lambda: get_json(f"{base}/api/ml/distill/history?metrics=false")  # noqa: E731
        wait_for(lambda: len(history()) >= 3 or status()["state"] in ("error", "done"), LOOP_TIMEOUT_S, "an attempt", 1.0)
        assert len(history()) >= 3, (repo / ".dvc/tmp/loop/loop.log").read_text()[-3000:]

        click(driver, "btn-pause")
        wait_for(lambda: status()["state"] == "paused", 120, "the loop to pause", 0.5)
        WebDriverWait(driver, 15).until(lambda d: page_state(d) == "paused")
        driver.refresh()
        assert page_state(driver) == "paused"
        check_charts(driver, repo)
        check_charts_kept(driver)
        shot = tmp_path / "dashboard.png"
        driver.save_screenshot(str(shot))
        with capsys.disabled():
            print(f"\ndashboard screenshot: {shot}")

        click(driver, "btn-resume")
        wait_for(lambda: status()["state"] in ("running", "starting"), 60, "the loop to resume", 0.5)
        click(driver, "btn-stop")
        wait_for(lambda: not status()["running"], 120, "the loop to stop", 0.5)
        s = status()
        assert s["state"] == "stopped", s
        WebDriverWait(driver, 15).until(lambda d: page_state(d) == "stopped")
        assert "stopped on request" in (repo / ".dvc/tmp/loop/loop.log").read_text()
    finally:
        if driver is not None:
            driver.quit()
        server.terminate()
        server.wait(timeout=30)
        server_log.close()
        kill_loop(repo)
