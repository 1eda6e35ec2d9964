"""The visualiser in a real browser: Debian's headless Chromium, driven by selenium,
loads the page from a file:// URL, draws the e-graph, opens a loop by a click on the
drawing, and takes a screenshot that must not be blank.

Chromium and chromedriver come from Debian (`make test` installs them as root; see
the Makefile). Without them the test is skipped, except under CI (the CI variable
set), where it fails: CI must really run it.
"""
from __future__ import annotations

import os
import pathlib
import time

import numpy as np
import pytest

from egad import viz

CHROMIUM = pathlib.Path("/usr/bin/chromium")
CHROMEDRIVER = pathlib.Path("/usr/bin/chromedriver")
# Without the background-networking flags Chromium dials out at start, which a closed network refuses.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--window-size=1600,1000")


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    missing = [str(path) for path in (CHROMIUM, CHROMEDRIVER) if not path.exists()]
    if missing:
        why = f"{', '.join(missing)} missing (apt-get install chromium chromium-driver; `make test` does it as root)"
        if os.environ.get("CI"):
            pytest.fail(f"the browser test must run under CI: {why}")
        pytest.skip(why)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_script_timeout(120)
    yield driver
    driver.quit()


def wait_drawn(driver, seconds: float = 120.0) -> None:
    """Until the page has drawn and laid out what it shows (viz.js sets body[data-ready])."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if driver.execute_script("return document.body && document.body.dataset.ready") == "1":
            return
        time.sleep(0.1)
    raise AssertionError(f"the page did not finish drawing in {seconds} s; console: {driver.get_log('browser')}")


def distinct_colours(png: pathlib.Path, box=None) -> tuple[int, float]:
    """(distinct RGB colours, fraction of pixels that are not white) of a screenshot,
    or of the part `box` = (x, y, width, height) in CSS pixels."""
    import matplotlib.image

    pixels = (matplotlib.image.imread(str(png))[..., :3] * 255).round().astype(np.uint8)
    if box is not None:
        x, y, width, height = (int(v) for v in box)
        pixels = pixels[y:y + height, x:x + width]
    flat = pixels.reshape(-1, 3)
    colours = len(np.unique(flat[:, 0].astype(np.uint32) << 16 | flat[:, 1].astype(np.uint32) << 8 | flat[:, 2]))
    return colours, float(np.mean(np.any(flat < 245, axis=1)))


def open_page(driver, optimization, directory: pathlib.Path) -> dict:
    path = viz.render(optimization, directory / "viz.html")
    driver.get(path.resolve().as_uri())
    wait_drawn(driver)
    errors = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
    assert not errors, errors
    return driver.execute_script("return egadViz.data")


def click_on_graph(driver, element_id: str) -> None:
    """A real mouse click on a drawn node of the graph's canvas."""
    from selenium.webdriver.common.action_chains import ActionChains

    graph = driver.find_element("id", "graph")
    x, y = driver.execute_script(  # pan it into view first, as a user would
        "const node = egadViz.cy.$id(arguments[0]); egadViz.cy.center(node);"
        "const p = node.renderedPosition(); return [p.x, p.y];", element_id)
    size = graph.size  # selenium 4 offsets are from the element's centre
    ActionChains(driver).move_to_element_with_offset(graph, int(x - size["width"] / 2),
                                                     int(y - size["height"] / 2)).click().perform()


def check_page(driver, data: dict, tmp_path: pathlib.Path) -> pathlib.Path:
    """The assertions both pages must pass; returns the screenshot."""
    # the extracted term and the critical path are in the DOM (the outline lists every e-node)
    extracted = driver.find_elements("css selector", "#outline-tree li.enode.extracted")
    critical = driver.find_elements("css selector", "#outline-tree li.enode.critical")
    assert len(extracted) == sum(node["extracted"] for node in data["nodes"]) > 0
    assert len(critical) == sum(node["critical"] for node in data["nodes"]) > 0
    assert driver.find_elements("css selector", "#critical li.critical-chain")
    predicted = driver.find_element("id", "predicted").text
    assert f"{data['summary']['predicted_before_us']:.0f}" in predicted.replace(",", "")

    # regions start closed: only the program's own e-classes are drawn, the loops are boxes
    cy = "egadViz.cy"
    loops = [f["id"] for f in data["frames"] if f["parent"] == "r0" and f["critical"]]
    assert loops, "no loop on the critical path"
    assert driver.execute_script(f"return {cy}.nodes('.frame.closed').map(n => n.id())") and \
        driver.execute_script(f"return {cy}.nodes('.frame.open').length") == 0
    assert driver.execute_script(f"return {cy}.nodes('.enode.extracted').length") > 0

    # open the loop with the longest chain by clicking its box on the canvas
    chain = data["critical"][0]
    loop = chain["frame"]
    click_on_graph(driver, loop)
    time.sleep(0.3)
    wait_drawn(driver)
    assert driver.execute_script(f"return {cy}.$id(arguments[0]).hasClass('open')", loop)
    drawn_critical = driver.execute_script(f"return {cy}.nodes('.critical').map(n => n.id())")
    assert set(chain["nodes"]) <= set(drawn_critical)
    assert driver.execute_script(f"return {cy}.edges('.critical').length") >= len(chain["nodes"]) - 1
    assert driver.find_element("css selector", f'#outline-tree details[data-frame="{loop}"]').get_attribute("open")

    screenshot = tmp_path / "viz.png"
    assert driver.save_screenshot(str(screenshot))
    colours, inked = distinct_colours(screenshot)
    assert colours > 200 and inked > 0.1, (colours, inked)
    rect = driver.execute_script("const r = document.getElementById('graph').getBoundingClientRect();"
                                 "return [r.x, r.y, r.width, r.height];")
    colours, inked = distinct_colours(screenshot, rect)
    assert colours > 50 and inked > 0.05, f"the graph looks blank: {colours} colours, {inked:.1%} inked"

    # search by rule name marks its e-nodes and lists them
    search = driver.find_element("id", "search")
    search.send_keys("batch-")
    time.sleep(0.6)
    results = driver.find_elements("css selector", "#results li.enode")
    made = [n for n in data["nodes"] if "batch-" in n["rule"].lower() or "batch-" in n["op"].lower()]
    assert len(results) == min(len(made), 200) > 0
    assert driver.execute_script(f"return {cy}.nodes('.match, .has-match').length") > 0

    return screenshot


def test_page_draws_extracted_term_and_critical_path(browser, rnn_optimization, tmp_path):
    data = open_page(browser, rnn_optimization, tmp_path)
    check_page(browser, data, tmp_path)


@pytest.mark.slow
def test_gnmt_lite_page(browser, tmp_path):
    """`egad viz`'s default, GNMT-lite tiny's gradient (~1,500 e-nodes, 15 loops)."""
    from egad.cli_viz import workload

    data = open_page(browser, workload("gnmt-lite-tiny"), tmp_path)
    assert len(data["nodes"]) > 1000
    check_page(browser, data, tmp_path)


@pytest.mark.slow
def test_page_of_5000_enodes_opens_with_its_regions_closed(browser, large_optimization, tmp_path):
    started = time.monotonic()
    data = open_page(browser, large_optimization, tmp_path)
    seconds = time.monotonic() - started
    drawn = browser.execute_script("return egadViz.cy.nodes('.enode').filter(n => !n.data('of')).length")
    closed = browser.execute_script("return egadViz.cy.nodes('.frame.closed').length")
    assert len(data["nodes"]) >= 5000 and closed == 66 and drawn < 0.1 * len(data["nodes"])
    assert seconds < 60, f"the first drawing took {seconds:.0f} s"
    loop = data["critical"][0]["frame"]
    click_on_graph(browser, loop)
    time.sleep(0.3)
    wait_drawn(browser)
    assert set(data["critical"][0]["nodes"]) <= set(browser.execute_script(
        "return egadViz.cy.nodes('.critical').map(n => n.id())"))
    screenshot = tmp_path / "large.png"
    assert browser.save_screenshot(str(screenshot))
    rect = browser.execute_script("const r = document.getElementById('graph').getBoundingClientRect();"
                                  "return [r.x, r.y, r.width, r.height];")
    colours, inked = distinct_colours(screenshot, rect)
    assert colours > 50 and inked > 0.05, (colours, inked)
