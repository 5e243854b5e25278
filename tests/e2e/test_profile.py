"""The built-in sampling profiler: GET /php_worker/profile on the admin API returns a
pprof profile of every PHP thread, which `go tool pprof` reads."""

import os
import re
import shutil
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import make_caddyfile

# The hot function: its loop is on lines 4 to 6.
HOT = """<?php
function hot_spin(float $seconds): int {
    $end = microtime(true) + $seconds;
    for ($n = 0; microtime(true) < $end; $n++) {
        $n = $n ^ 1 ^ 1;
    }
    return $n;
}
"""
HOT_LINES = range(2, 8)

CLASSIC = """<?php
require __DIR__ . '/hot.php';
echo hot_spin((float) ($_GET['s'] ?? 3));
"""

# A worker whose handler spins, or ends its request the ways a request can end badly.
WORKER = """<?php
require __DIR__ . '/hot.php';
while (frankenphp_handle_request(function () {
    $s = (float) ($_GET['s'] ?? 3);
    switch (parse_url($_SERVER['REQUEST_URI'], PHP_URL_PATH)) {
        case '/work/exit':
            hot_spin($s);
            exit(3);
        case '/work/throw':
            hot_spin($s);
            throw new RuntimeException('thrown mid-sample');
        case '/work/fatal':
            hot_spin($s);
            undefined_function_mid_sample();
    }
    echo hot_spin($s);
})) {
}
"""

TASKS = """<?php
require __DIR__ . '/hot.php';
while (php_worker_handle_task(fn (string $payload) => (string) hot_spin((float) $payload))) {
}
"""

BACKGROUND = """<?php
require __DIR__ . '/hot.php';
while (!php_worker_wait_stop(0.05)) {
    hot_spin(0.01);
}
"""

SEND_TASK = """<?php
echo php_worker_task('tasks', (string) ($_GET['s'] ?? 1));
"""

EXIT = """<?php
require __DIR__ . '/hot.php';
hot_spin((float) ($_GET['s'] ?? 0.02));
exit(2);
"""

THROW = """<?php
require __DIR__ . '/hot.php';
hot_spin((float) ($_GET['s'] ?? 0.02));
throw new Exception('thrown mid-sample');
"""

FATAL = """<?php
require __DIR__ . '/hot.php';
hot_spin((float) ($_GET['s'] ?? 0.02));
undefined_function_mid_sample();
"""

HELLO = """<?php
echo 'Hello, world!';
"""

HELLO_WORKER = """<?php
while (frankenphp_handle_request(function () { echo 'Hello, world!'; })) {
}
"""


def go_binary():
    found = shutil.which("go") or ("/usr/local/go/bin/go" if os.path.exists("/usr/local/go/bin/go") else None)
    if not found:
        pytest.fail("go is not installed: the profile is read with go tool pprof")
    return found


def pprof(*args):
    p = subprocess.run([go_binary(), "tool", "pprof", *args], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return p.stdout


def write_app(d):
    files = {"hot.php": HOT, "classic.php": CLASSIC, "worker.php": WORKER, "tasks.php": TASKS, "background.php": BACKGROUND,
             "send-task.php": SEND_TASK, "exit.php": EXIT, "throw.php": THROW, "fatal.php": FATAL, "hello.php": HELLO,
             "hello-worker.php": HELLO_WORKER}
    for name, text in files.items():
        (d / name).write_text(text)


def profile_caddyfile(d, threads=6):
    def caddyfile(port, admin):
        return make_caddyfile(port, admin, threads=threads, app=d, global_extra=f"""\t\ttask_worker {{
			file {d}/tasks.php
			name tasks
			num 1
		}}
		background {{
			file {d}/background.php
			name ticker
		}}""", site_extra=f"""\t\tworker {{
			file {d}/worker.php
			name spinner
			num 2
			match /work/*
		}}""")
    return caddyfile


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    d = tmp_path_factory.mktemp("profile-app")
    write_app(d)
    return d


@pytest.fixture(scope="module")
def srv(start_server, app):
    return start_server("profile", profile_caddyfile(app))


def admin_get(srv, path, timeout=120):
    """GET on the admin API: (status, body bytes)."""
    req = urllib.request.Request(f"http://127.0.0.1:{srv.admin_port}{path}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def in_background(fn, *args):
    t = threading.Thread(target=fn, args=args, daemon=True)
    t.start()
    return t


def top_rows(path):
    """`go tool pprof -top -lines`: (cumulative share, function, file:line) per row. The
    hot function's own share goes mostly to the internal function it calls (microtime):
    PHP 8.4 checks for the interrupt right after an internal call, with its frame on top."""
    rows = []
    for line in pprof("-top", "-lines", str(path)).splitlines():
        m = re.match(r"\s*[\d.]+\w*\s+[\d.]+%\s+[\d.]+%\s+[\d.]+\w*\s+([\d.]+)%\s+(\S+)\s*(\S*)", line)
        if m:
            rows.append((float(m.group(1)), m.group(2), m.group(3)))
    return rows


def labels(path):
    """`go tool pprof -tags`: {label: {values}}."""
    found, current = {}, None
    for line in pprof("-tags", str(path)).splitlines():
        if m := re.match(r"\s*(\w+): Total ", line):
            current = found.setdefault(m.group(1), set())
        elif (m := re.match(r"\s*\S+ \(\s*[\d.]+%\): (.+)$", line)) and current is not None:
            current.add(m.group(1))
    return found


def test_profile_finds_the_hot_function_on_every_kind_of_thread(srv, app, tmp_path):
    # Classic and worker requests, and a task, that spin for 3 s while a 2 s profile runs.
    loads = [in_background(srv.get, "/classic.php?s=3"), in_background(srv.get, "/work/spin?s=3"),
             in_background(srv.get, "/send-task.php?s=3")]
    time.sleep(0.3)
    status, body = admin_get(srv, "/php_worker/profile?seconds=2")
    for t in loads:
        t.join(30)
    assert status == 200, body
    out = tmp_path / "wall.pprof"
    out.write_bytes(body)

    rows = top_rows(out)
    hot = [r for r in rows if r[1] == "hot_spin"]
    assert hot, rows
    # One sample holds hot_spin at one line: its lines' cumulative shares add up.
    share = sum(r[0] for r in hot)
    assert share > 50, f"hot_spin has {share}% of the wall time: {rows}"
    for _, _, where in hot:
        file, line = where.rsplit(":", 1)
        assert file == str(app / "hot.php") and int(line) in HOT_LINES, where

    # -traces shows the callers: a worker handler's closure and the classic script's main.
    traces = pprof("-traces", str(out))
    assert "hot_spin" in traces and "{main}" in traces, traces[:3000]

    tags = labels(out)
    assert tags["kind"] == {"classic", "worker", "task", "background"}, tags
    assert tags["worker"] == {"spinner", "tasks", "ticker"}, tags  # classic threads have none
    assert tags["route"] == {"/classic.php", "/work/spin"}, tags  # no HTTP request, no route

    # CPU mode: a blocked thread weighs nothing, so the spinning dominates again.
    loads = [in_background(srv.get, "/classic.php?s=2"), in_background(srv.get, "/work/spin?s=2")]
    time.sleep(0.3)
    status, body = admin_get(srv, "/php_worker/profile?seconds=1&mode=cpu&hz=250")
    for t in loads:
        t.join(30)
    assert status == 200, body
    out = tmp_path / "cpu.pprof"
    out.write_bytes(body)
    raw = pprof("-raw", str(out))
    assert "cpu/nanoseconds" in raw and "Period: 4000000" in raw, raw[:500]
    hot = [r for r in top_rows(out) if r[1] == "hot_spin"]
    assert sum(r[0] for r in hot) > 50, top_rows(out)


def test_profile_survives_requests_that_end_badly_mid_sample(srv, tmp_path):
    paths = ["/exit.php?s=0.01", "/throw.php?s=0.01", "/fatal.php?s=0.01",
             "/work/exit?s=0.01", "/work/throw?s=0.01", "/work/fatal?s=0.01"]
    stop = threading.Event()
    answered = []

    def hammer(offset):
        i = offset
        while not stop.is_set():
            try:
                answered.append(srv.get(paths[i % len(paths)], timeout=30).status)
            except OSError:
                answered.append(0)
            i += 1

    clients = [in_background(hammer, n) for n in range(6)]
    status, body = admin_get(srv, "/php_worker/profile?seconds=2&hz=1000")
    stop.set()
    for t in clients:
        t.join(60)
    assert status == 200, body
    assert len(answered) > 30, f"only {len(answered)} requests ran during the profile"
    assert 0 not in answered, "a connection failed"
    out = tmp_path / "bad.pprof"
    out.write_bytes(body)
    assert any(r[1] == "hot_spin" for r in top_rows(out))
    # Still serving, and no crash trail in the log.
    assert srv.get("/classic.php?s=0").status == 200
    assert srv.get("/work/spin?s=0").status == 200
    fatal = [e for e in srv.log_entries() if e.get("level") == "fatal"]
    assert not fatal, fatal
    # A profile after that one starts afresh.
    status, body = admin_get(srv, "/php_worker/profile?seconds=1")
    assert status == 200, body


def test_one_profile_at_a_time_and_bad_parameters(srv):
    # Two overlapping profiles: whichever starts second is refused while the other runs.
    first = {}
    t = in_background(lambda: first.setdefault("answer", admin_get(srv, "/php_worker/profile?seconds=3")))
    time.sleep(0.5)
    second = admin_get(srv, "/php_worker/profile?seconds=1")
    t.join(30)
    statuses = sorted([first["answer"][0], second[0]])
    assert statuses == [200, 409], (first["answer"], second)
    refused = first["answer"] if first["answer"][0] == 409 else second
    assert b"profile is being taken" in refused[1]
    # Once it ended, the next one runs.
    assert admin_get(srv, "/php_worker/profile?seconds=1")[0] == 200

    for query, word in [("seconds=0", b"seconds"), ("seconds=301", b"seconds"), ("seconds=abc", b"seconds"),
                        ("hz=0", b"hz"), ("hz=1001", b"hz"), ("hz=1.5", b"hz"), ("mode=sideways", b"mode")]:
        status, body = admin_get(srv, f"/php_worker/profile?{query}")
        assert status == 400, (query, status, body)
        assert word in body, (query, body)
    req = urllib.request.Request(f"http://127.0.0.1:{srv.admin_port}/php_worker/profile", method="POST", data=b"")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=30)
    assert e.value.code == 405


def test_a_profile_cut_short_by_a_php_restart_leaves_the_profiler_free(start_server, tmp_path):
    """A php_ini change restarts PHP while a profile runs: that profile is lost (503,
    saying so), and the next one runs, without a restart of the server."""
    write_app(tmp_path)
    srv = start_server("profile-engine-restart", profile_caddyfile(tmp_path, threads=5))
    first = {}
    t = in_background(lambda: first.setdefault("answer", admin_get(srv, "/php_worker/profile?seconds=4")))
    time.sleep(0.7)
    status, body = srv.load((srv.workdir / "Caddyfile").read_text().replace(
        "php_ini log_errors 1", "php_ini log_errors 1\n\t\tphp_ini precision 13"))
    assert status == 200, body
    t.join(60)
    assert first["answer"][0] == 503 and b"profile" in first["answer"][1], first["answer"]
    assert srv.get("/hello.php", resend=True).status == 200
    status, body = admin_get(srv, "/php_worker/profile?seconds=1")
    assert status == 200, body[:300]
