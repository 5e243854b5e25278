"""Config reloads and the admin API while PHP serves: no request fails, the engine
survives unless php_ini changes, every reload serves new worker code, a config that
fails to load changes nothing."""

import http.client
import json
import os
import socket
import statistics
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import APP, BOOT_FAILED, CADDY, WORK, eventually, make_caddyfile

HERE = Path(__file__).resolve().parent
WORKER = HERE / "worker"


def reload_caddyfile(port, admin, num, threads, memory_limit, worker_file=WORKER / "counter.php", extra_site=""):
    """The default app with a counter worker, in one of the variants the reload tests
    switch between."""
    return make_caddyfile(port, admin, threads=threads, global_extra=f"\t\tphp_ini memory_limit {memory_limit}",
                          site_extra=f"""\t\tworker {{
			file {worker_file}
			num {num}
			name counter
			match /counter
		}}""") + extra_site


class Client(threading.Thread):
    """A keep-alive HTTP client sending requests in a loop. A request that got no
    response byte because its connection closed is sent again on a new connection, up to
    three attempts, as HTTP clients do for idempotent requests: at the moment Caddy swaps
    listeners, Linux may reset a connection queued on the old socket and Go's server may
    close one it accepted without answering (plain Caddy does the same; see
    docs/reloads-and-admin-api.md). php_worker's part is that every request it gets is answered 200."""

    ATTEMPTS = 3

    def __init__(self, port, paths, stop):
        super().__init__(daemon=True)
        self.port, self.paths, self.stop = port, paths, stop
        self.conn = None
        self.samples = []  # (start, seconds, status)
        self.failures = []

    def connect(self):
        if self.conn is not None:
            self.conn.close()
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)

    def once(self, path):
        self.conn.request("GET", path)
        r = self.conn.getresponse()
        r.read()
        return r.status

    def run(self):
        self.connect()
        i = 0
        while not self.stop.is_set():
            path = self.paths[i % len(self.paths)]
            i += 1
            start = time.monotonic()
            status, errors = None, []
            for _ in range(self.ATTEMPTS):
                try:
                    status = self.once(path)
                    break
                except (ConnectionError, http.client.HTTPException, OSError) as e:
                    errors.append(repr(e))
                    self.connect()
            if status is None:
                self.failures.append(f"{path}: {errors}")
                continue
            self.samples.append((start, time.monotonic() - start, status))
            if status != 200:
                self.failures.append(f"{path}: status {status}")


def settle(srv, expected_threads, timeout=30):
    """Waits until the PHP threads are back to a steady count with none stopping."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        threads = srv.threads()["threads"]
        if len(threads) == expected_threads and all(t["state"] in ("ready", "busy") for t in threads):
            return
        time.sleep(0.1)
    raise AssertionError(f"threads did not settle: {srv.threads()}")


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))] if values else 0.0


def test_reload_under_load_fails_no_request(start_server, tmp_path):
    variants = [dict(num=2, threads=6, memory_limit="128M"), dict(num=3, threads=8, memory_limit="256M")]
    srv = start_server("reload-load", lambda port, admin: reload_caddyfile(port, admin, **variants[0]))
    config = lambda v: reload_caddyfile(srv.port, srv.admin_port, **v)  # noqa: E731
    stop = threading.Event()
    clients = [Client(srv.port, ["/counter", "/hello.php"], stop) for _ in range(32)]
    for c in clients:
        c.start()
    time.sleep(3)  # warm up and measure the steady state
    settle(srv, 6)
    before = {"threads": len(srv.threads()["threads"]), "rss_kb": srv.rss_kb(), "os_threads": srv.os_threads()}
    steady_until = time.monotonic()
    windows = []
    reloads = restarts = 0
    for k in range(1, 21):
        start = time.monotonic()
        if k % 5 == 0:
            # `caddy reload`, the CLI teams deploy with.
            path = tmp_path / f"Caddyfile.{k}"
            path.write_text(config(variants[k % 2]))
            p = subprocess.run([str(CADDY), "reload", "--config", str(path), "--adapter", "caddyfile",
                                "--address", f"127.0.0.1:{srv.admin_port}"], capture_output=True, timeout=120)
            assert p.returncode == 0, p.stderr.decode()
        else:
            status, body = srv.load(config(variants[k % 2]))
            assert status == 200, body
        reloads += 1
        if k % 2 == 0:
            status, body = srv.admin("POST", "/php_worker/workers/restart")
            assert status == 200, body
            restarts += 1
        windows.append((start, time.monotonic() + 0.5))
        time.sleep(0.3)
    reloads_until = time.monotonic()
    time.sleep(1)
    stop.set()
    for c in clients:
        c.join(timeout=90)
    failures = [f for c in clients for f in c.failures]
    samples = [s for c in clients for s in c.samples]
    assert (reloads, restarts) == (20, 10)
    assert failures == [], failures[:20]
    assert all(status == 200 for _, _, status in samples)

    # The final config is the first one: PHP is back to its size.
    settle(srv, 6)
    time.sleep(1)
    after = {"threads": len(srv.threads()["threads"]), "rss_kb": srv.rss_kb(), "os_threads": srv.os_threads()}
    assert after["threads"] == before["threads"]
    # Each PHP restart (here every reload, as memory_limit alternates) used to keep
    # about 0.5 MB, most of it every thread's map_ptr table growing (fixed by
    # scripts/php-patches/zend-map-ptr-restart.patch); about 50 KB remains.
    php_restarts = srv.log_text().count("PHP engine started") - 1
    allowed_kb = 0.05 * before["rss_kb"] + 200 * php_restarts
    print(f"RSS {before['rss_kb'] / 1024:.0f} MB -> {after['rss_kb'] / 1024:.0f} MB after {php_restarts} PHP restarts")
    assert abs(after["rss_kb"] - before["rss_kb"]) <= allowed_kb, (before, after, php_restarts)

    steady = [d for t, d, _ in samples if t < steady_until]
    during = [d for t, d, _ in samples if steady_until <= t <= reloads_until and any(a <= t <= b for a, b in windows)]
    figures = {
        "requests": len(samples), "failures": len(failures), "reloads": reloads, "restarts": restarts,
        "steady_p50_ms": 1000 * statistics.median(steady), "steady_p99_ms": 1000 * percentile(steady, 99),
        "reload_p50_ms": 1000 * statistics.median(during), "reload_p99_ms": 1000 * percentile(during, 99),
        "before": before, "after": after,
    }
    (WORK / "reload-under-load.json").write_text(json.dumps(figures, indent=2))
    print("\nreload under load:", json.dumps(figures))
    log = srv.log_text()
    assert "php_ini changed: restarting PHP" in log, "the log says why PHP restarted"
    assert srv.stop() == 0


def test_the_engine_survives_reloads_that_keep_php_ini(start_server):
    srv = start_server("reload-keep", lambda port, admin: reload_caddyfile(port, admin, num=1, threads=4,
                                                                            memory_limit="128M"))
    assert srv.get("/hello.php").status == 200
    for num, threads in [(2, 6), (1, 3), (1, 5)]:
        status, body = srv.load(reload_caddyfile(srv.port, srv.admin_port, num=num, threads=threads,
                                                 memory_limit="128M"))
        assert status == 200, body
        settle(srv, threads)
        pools = {p["worker"] or "classic": p["threads"] for p in srv.threads()["pools"]}
        assert pools == {"classic": threads - num, "counter": num}, pools
    assert srv.log_text().count("PHP engine started") == 1, "num_threads and worker changes keep the engine"
    assert srv.stop() == 0


def test_a_config_that_fails_to_load_leaves_php_as_it_was(start_server):
    srv = start_server("reload-fail", lambda port, admin: reload_caddyfile(port, admin, num=1, threads=3,
                                                                            memory_limit="128M"))
    assert [srv.get("/counter").text for _ in range(2)] == ["requests:1", "requests:2"]
    served = 2
    variants = [dict(num=2, threads=5, memory_limit="128M"), dict(num=1, threads=3, memory_limit="256M")]
    # Caddy starts the apps of a config in random order: load until the php_worker app
    # has started (and then been stopped) in a failing load of each variant.
    undone = 0
    for attempt in range(24):
        blocker = socket.socket()  # one more site on a port already in use: the http app cannot start
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        busy = f"\n:{blocker.getsockname()[1]} {{\n\tbind 127.0.0.1\n\trespond busy\n}}\n"
        status, body = srv.load(reload_caddyfile(srv.port, srv.admin_port, extra_site=busy, **variants[attempt % 2]))
        blocker.close()
        assert status != 200, "the load must fail"
        start = time.time()
        r = srv.get("/counter", timeout=10, resend=True)
        served += 1
        assert time.time() - start < 2, "requests do not wait for a PHP that is gone"
        assert (r.status, r.text) == (200, f"requests:{served}"), "the worker was never restarted"
        assert srv.get("/hello.php", timeout=10).status == 200
        undone = srv.log_text().count("the new config did not load")
        if undone >= 4 and attempt % 2 == 1:
            break
    assert undone >= 2, "the php_worker app started in some of the failing loads"
    pools = {p["worker"] or "classic": p["threads"] for p in srv.threads()["pools"]}
    assert pools == {"classic": 2, "counter": 1}
    # Threads a failed load had started finish booting PHP before they can stop.
    settle(srv, 3)
    assert srv.log_text().count("PHP engine started") == 1
    assert srv.stop() == 0


def versioned(path, version):
    path.write_text("<?php\n$v = '" + version + "';\n"
                    "while (frankenphp_handle_request(function () use ($v) { echo $v; })) {}\n")
    # Versions have the same size: a new mtime (OPcache compares it, in whole seconds)
    # tells them apart. The times are in the past, beyond opcache.file_update_protection
    # (2 s), so that OPcache caches each version, as it would a deployed file.
    versioned.mtime = getattr(versioned, "mtime", time.time() - 1000) + 2
    os.utime(path, (versioned.mtime, versioned.mtime))


@pytest.mark.parametrize("validate_timestamps", ["1", "0"])
def test_a_forced_reload_of_the_same_config_serves_edited_worker_code(start_server, tmp_path, validate_timestamps):
    """A deploy writes the code and reloads at once. OPcache looks at a cached file's
    mtime only every revalidate_freq seconds (2, counted in whole seconds) and never with
    validate_timestamps off, so the new generation's first boot has it drop the scripts
    whose files changed (all of them with validate_timestamps off)."""
    worker = tmp_path / "deploy.php"
    versioned(worker, "v1")
    text = {}

    def caddyfile(port, admin):
        text["c"] = reload_caddyfile(port, admin, num=2, threads=4, memory_limit="128M", worker_file=worker).replace(
            "php_ini memory_limit 128M", f"php_ini memory_limit 128M\n\t\tphp_ini opcache.validate_timestamps {validate_timestamps}")
        return text["c"]

    srv = start_server(f"reload-force-{validate_timestamps}", caddyfile)
    assert srv.get("/counter").text == "v1"
    stop = threading.Event()
    clients = [Client(srv.port, ["/counter"], stop) for _ in range(4)]
    for c in clients:
        c.start()
    time.sleep(0.3)
    versioned(worker, "v2")
    status, body = srv.load(text["c"], force=True)
    assert status == 200, body
    assert eventually(lambda: srv.get("/counter", resend=True).text == "v2"), "the reload serves the new code"
    settle(srv, 4)
    assert {srv.get("/counter").text for _ in range(10)} == {"v2"}, "no thread of the old code is left"

    versioned(worker, "v3")
    p = subprocess.run([str(CADDY), "reload", "--force", "--config", str(srv.workdir / "Caddyfile"), "--adapter",
                        "caddyfile", "--address", f"127.0.0.1:{srv.admin_port}"], capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode()
    assert eventually(lambda: srv.get("/counter", resend=True).text == "v3"), "caddy reload --force serves the new code too"
    settle(srv, 4)
    assert {srv.get("/counter").text for _ in range(10)} == {"v3"}, "no thread of the old code is left"
    stop.set()
    for c in clients:
        c.join(timeout=30)
    assert [f for c in clients for f in c.failures] == []
    assert srv.log_text().count("PHP engine started") == 1
    assert srv.stop() == 0


def test_a_new_worker_that_cannot_boot_leaves_the_old_one_serving(start_server, tmp_path):
    worker = tmp_path / "deploy.php"
    versioned(worker, "v1")
    srv = start_server("reload-broken", lambda port, admin: reload_caddyfile(
        port, admin, num=1, threads=3, memory_limit="128M", worker_file=worker))
    assert srv.get("/counter").text == "v1"
    worker.write_text("<?php throw new RuntimeException('broken deploy');\n")
    status, body = srv.load((srv.workdir / "Caddyfile").read_text(), force=True)
    assert status == 200, body
    assert srv.wait_log(lambda e: "broken deploy" in e.get("msg", ""))
    for _ in range(5):
        r = srv.get("/counter")
        assert (r.status, r.text) == (200, "v1"), "the running worker keeps serving"
    assert srv.wait_log(lambda e: e.get("msg") == BOOT_FAILED and e.get("worker") == "counter")
    versioned(worker, "v2")
    assert eventually(lambda: srv.get("/counter", resend=True).text == "v2", timeout=15), "the new worker takes over once it boots"
    assert srv.stop() == 0


def test_a_restart_that_cannot_boot_keeps_idle_old_threads_serving(start_server, tmp_path):
    """With autoscaling on, idle threads past max_idle_time end; the old worker threads of
    a restart whose new scripts fail to boot are not extras: they are all that serves."""
    worker = tmp_path / "scaled-deploy.php"
    versioned(worker, "v1")
    srv = start_server("restart-broken-scaled", lambda port, admin: make_caddyfile(
        port, admin, threads=2, global_extra="\t\tmax_threads 8\n\t\tmax_idle_time 200ms",
        site_extra=f"""\t\tworker {{
			file {worker}
			num 1
			name counter
			match /counter
		}}"""))
    assert srv.get("/counter").text == "v1"
    worker.write_text("<?php throw new RuntimeException('broken scaled deploy');\n")
    status, body = srv.admin("POST", "/php_worker/workers/restart")
    assert (status, "the running ones keep serving" in body) == (500, True), body
    time.sleep(1)  # the old thread idles past max_idle_time
    for _ in range(5):
        r = srv.get("/counter")
        assert (r.status, r.text) == (200, "v1"), "the old thread keeps serving"
    versioned(worker, "v2")
    assert eventually(lambda: srv.get("/counter").text == "v2", timeout=15), "the new worker takes over once it boots"
    assert srv.stop() == 0


def test_admin_restart_and_thread_list(start_server):
    srv = start_server("admin", lambda port, admin: reload_caddyfile(port, admin, num=2, threads=5,
                                                                      memory_limit="128M"))
    for _ in range(3):
        srv.get("/counter")
    status, body = srv.admin("POST", "/php_worker/workers/restart")
    assert (status, body) == (200, "restarted 1 workers\n")
    assert srv.get("/counter").text == "requests:1", "the worker's script started again"
    status, _ = srv.admin("GET", "/php_worker/workers/restart")
    assert status == 405
    status, _ = srv.admin("POST", "/php_worker/threads")
    assert status == 405

    settle(srv, 5)
    d = srv.threads()
    threads = d["threads"]
    assert len(threads) == 5
    assert {t["worker"] for t in threads} == {None, "counter"}
    for t in threads:
        assert set(t) >= {"index", "name", "state", "pool", "worker", "method", "uri", "requests", "memory"}
        assert t["name"] == f"php-{t['index']}"
    workers = [t for t in threads if t["worker"] == "counter"]
    assert len(workers) == 2 and sum(t["requests"] for t in workers) == 1
    assert all(t["memory"] > 0 for t in workers if t["requests"])

    # A busy thread shows its request.
    slow = threading.Thread(target=lambda: srv.get("/sleep.php?ms=1500"))
    slow.start()
    deadline = time.time() + 5
    busy = []
    while not busy and time.time() < deadline:
        busy = [t for t in srv.threads()["threads"] if t["state"] == "busy"]
        time.sleep(0.05)
    slow.join()
    assert busy and busy[0]["method"] == "GET" and busy[0]["uri"] == "/sleep.php?ms=1500", busy
    assert srv.stop() == 0


def test_validate_and_adapt_refuse_a_missing_worker_file(tmp_path):
    cf = tmp_path / "Caddyfile"
    cf.write_text(f":0 {{\n\troot * {APP}/public\n\tphp_worker {{\n\t\tworker /nonexistent.php\n\t}}\n}}\n")
    for command in ("validate", "adapt"):
        p = subprocess.run([str(CADDY), command, "--config", str(cf), "--adapter", "caddyfile"], capture_output=True,
                           timeout=60)
        assert p.returncode != 0, command
        assert b"worker file /nonexistent.php does not exist" in p.stderr, p.stderr
        assert b"PHP engine started" not in p.stderr


def test_a_reload_with_a_changed_worker_env_serves_the_new_value(start_server):
    """The worker's env goes to the core once, in the pool's spec: a reload that changes
    it boots the worker with the new value, in $_SERVER and getenv() alike."""
    worker = (f"\t\tworker {{\n\t\t\tfile {WORKER}/env.php\n\t\t\tnum 1\n\t\t\tmatch /env\n"
              "\t\t\tenv WORKER_ONLY first\n\t\t}")
    srv = start_server("reload-env", lambda port, admin: make_caddyfile(port, admin, threads=2, site_extra=worker))

    def seen():
        d = srv.get("/env", resend=True).json()["request"]
        return d["server_custom"], d["getenv_custom"]

    assert seen() == ("first", "first")
    status, body = srv.load((srv.workdir / "Caddyfile").read_text().replace("WORKER_ONLY first", "WORKER_ONLY second"))
    assert status == 200, body
    assert eventually(lambda: seen() == ("second", "second")), "the reloaded worker has the new env"
    assert srv.stop() == 0
