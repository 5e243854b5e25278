"""The status page (php_worker_status on a site route), loaded in headless Chromium
under load: what it shows must match /php_worker/threads and /php_worker/schedules on
the admin API. A screenshot is kept as an artifact (status.png in the server's work folder under tests/.work)."""
import json
import re
import shutil
import subprocess
import threading
import time
from html.parser import HTMLParser

import pytest

from conftest import make_caddyfile

TASKS = r"""<?php
while (php_worker_handle_task(fn (string $payload) => strtoupper($payload))) {
}
"""

WORKER = r"""<?php
while (frankenphp_handle_request(function () {
    usleep((int) ($_GET['ms'] ?? 0) * 1000);
    echo 'worked';
})) {
}
"""


def chromium():
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        pytest.fail("chromium is missing (scripts/install-deps.sh --tests installs Debian's)")
    return path


def headless(*args, timeout=90):
    """Runs headless Chromium (as root in CI: no sandbox) and returns its stdout."""
    p = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                        "--no-first-run", "--hide-scrollbars", *args],
                       capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


class Rows(HTMLParser):
    """The data-* attributes of the page's table rows."""

    def __init__(self):
        super().__init__()
        self.rows = []
        self.body = {}

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "tr" and any(k.startswith("data-") for k in attrs):
            self.rows.append(attrs)
        if tag == "body":
            self.body = attrs


def test_the_status_page_shows_what_the_admin_api_says_under_load(start_server, tmp_path):
    (tmp_path / "tasks.php").write_text(TASKS)
    (tmp_path / "worker.php").write_text(WORKER)
    (tmp_path / "job.php").write_text("<?php echo 'job';")
    srv = start_server("status", lambda port, admin: with_status_route(make_caddyfile(port, admin, threads=5, app=tmp_path, global_extra=f"""\t\ttask_worker {{
			file {tmp_path}/tasks.php
			name uppercase
			num 1
		}}
		schedule "*/5 * * * *" {tmp_path}/job.php {{
			name every-five-minutes
		}}""", site_extra=f"""\t\tworker {{
			file {tmp_path}/worker.php
			name app
			num 2
			match /app*
		}}""")))
    # Load: two worker threads held by slow requests, and a steady flow of quick ones.
    stop = threading.Event()

    def slow():
        while not stop.is_set():
            srv.get("/app?ms=1500", timeout=30)

    def quick():
        while not stop.is_set():
            srv.get("/app", timeout=30)

    load = [threading.Thread(target=f) for f in (slow, slow, quick)]
    for t in load:
        t.start()
    try:
        time.sleep(1)
        url = f"http://127.0.0.1:{srv.port}/php-status"
        dom = headless("--virtual-time-budget=4000", "--dump-dom", url)
        threads = json.loads(srv.admin("GET", "/php_worker/threads")[1])
        schedules = json.loads(srv.admin("GET", "/php_worker/schedules")[1])
        shot = srv.workdir / "status.png"
        headless("--window-size=1400,1100", "--virtual-time-budget=4000", f"--screenshot={shot}", url)
    finally:
        stop.set()
        for t in load:
            t.join()

    page = Rows()
    page.feed(dom)
    assert int(page.body.get("data-polls", "0")) >= 2, "the page polled the admin API and kept updating"
    shown = {r["data-thread"]: r for r in page.rows if "data-thread" in r}
    assert set(shown) == {t["name"] for t in threads["threads"]}, "one row per PHP thread"
    for t in threads["threads"]:
        assert shown[t["name"]]["data-worker"] == (t["worker"] or ""), t
    busy_app = [r for r in shown.values() if r["data-worker"] == "app" and r["data-state"] == "busy"]
    assert busy_app, "the slow requests' threads show busy"
    assert re.search(r"GET /app\?ms=1500</td><td>[0-9.]+ (ms|s)</td>", dom), "a busy thread shows its request and how long it has run"
    pools = {r["data-pool"] for r in page.rows if "data-pool" in r}
    assert pools == {p["worker"] or "classic" for p in threads["pools"]}
    assert [r["data-task-worker"] for r in page.rows if "data-task-worker" in r] == ["uppercase"]
    assert [r["data-job"] for r in page.rows if "data-job" in r] == [j["name"] for j in schedules] == ["every-five-minutes"]
    assert re.search(r'id="summary-rps">[0-9]+\.[0-9]', dom), "the throughput figure is filled in"
    usage = threads["opcache"]["usage"]
    assert usage and usage["memory_used"] > 0 and usage["memory_free"] > 0, "OPcache's numbers, sampled by the PHP threads"
    assert [r["data-opcache"] for r in page.rows if "data-opcache" in r] == ["memory", "hit-rate"]
    assert re.search(r'<td>hit rate</td><td>[0-9.]+%</td>', dom), "OPcache's hit rate is shown"
    assert shot.stat().st_size > 10_000, "a screenshot of the page"


def test_the_status_page_loads_nothing_from_elsewhere(start_server):
    srv = start_server("status-static", lambda port, admin: with_status_route(make_caddyfile(port, admin)))
    r = srv.get("/php-status")
    assert r.status == 200 and r.header("Content-Type").startswith("text/html")
    assert "connect-src 'self'" in r.header("Content-Security-Policy")
    assert not re.search(r'(src|href)="https?://', r.text), "nothing loaded from elsewhere (no CDN)"
    assert json.loads(srv.get("/php-status?data=threads").text)["threads"]
    assert json.loads(srv.get("/php-status?data=schedules").text) == []
    assert srv.get("/php-status?data=nonsense").status == 400
    status, body = srv.admin("GET", "/php_worker/schedules")
    assert status == 200 and json.loads(body) == []


def with_status_route(caddyfile):
    """The site with the status page at /php-status, before its PHP handler."""
    return caddyfile.replace("\tbind 127.0.0.1\n", "\tbind 127.0.0.1\n\thandle /php-status* {\n\t\tphp_worker_status\n\t}\n", 1)
