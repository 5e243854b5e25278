"""Health and readiness probes, on the admin API and on a site route, in each state a
load balancer or Kubernetes must see: serving, a worker still booting, threads stuck at
their limit, and a stop with shutdown_delay (during which PHP keeps serving)."""

import json
import signal
import threading
import time
from pathlib import Path

from conftest import APP, bcrypt_cost, eventually, make_caddyfile

HERE = Path(__file__).resolve().parent

PROBES = "\thandle /live {\n\t\tphp_worker_health live\n\t}\n\thandle /ready {\n\t\tphp_worker_health ready\n\t}\n"


def with_probes(caddyfile, global_options=""):
    """Adds the site's probe routes (and Caddy global options) to a test Caddyfile."""
    caddyfile = caddyfile.replace("\tphp_worker {\n\t\tenv APP_ENV", PROBES + "\tphp_worker {\n\t\tenv APP_ENV", 1)
    return caddyfile.replace("\tpersist_config off\n", "\tpersist_config off\n" + global_options, 1)


def probe(srv, name, admin=False):
    """(status, decoded body) of a probe: /php_worker/<health|ready> on the admin API, or
    the site's /live and /ready routes."""
    if admin:
        status, body = srv.admin("GET", "/php_worker/" + ("health" if name == "live" else "ready"))
    else:
        # resend: right after a config load Caddy may close a connection its old
        # listener accepted, unanswered; a load balancer's probe tries again.
        r = srv.get("/" + name, timeout=10, resend=True)
        status, body = r.status, r.text
    return status, json.loads(body)


def all_probes(srv):
    return {(name, admin): probe(srv, name, admin) for name in ("live", "ready") for admin in (False, True)}


def test_probes_answer_200_while_the_server_serves(start_server):
    worker = f"\t\tworker {{\n\t\t\tfile {HERE}/worker/counter.php\n\t\t\tname counter\n\t\t\tnum 1\n\t\t\tmatch /count\n\t\t}}"
    srv = start_server("probes", lambda port, admin: with_probes(make_caddyfile(port, admin, threads=3, site_extra=worker)))
    deadline = time.time() + 10
    while probe(srv, "ready")[0] != 200 and time.time() < deadline:
        time.sleep(0.05)
    for (name, admin), (status, body) in all_probes(srv).items():
        assert status == 200 and body["status"] == "ok" and body["engine"] == "running", (name, admin, body)
        assert "reasons" not in body
        pools = {p.get("worker", ""): p for p in body["pools"]}
        assert pools["counter"]["ready"] == 1 and pools[""]["threads"] == 2, body
    r = srv.request("/ready", method="HEAD")
    assert (r.status, r.body) == (200, b"")
    assert srv.request("/ready", method="POST").status == 405
    assert srv.admin("POST", "/php_worker/ready")[0] == 405
    assert srv.get("/hello.php").text == "Hello, world!"
    assert srv.stop() == 0


def test_readiness_waits_for_every_worker_to_boot(start_server):
    """A worker that takes 3 s to boot: until it has a booted thread, both probes answer
    503 naming it (nothing can serve its routes yet), then 200; and again after a php_ini
    change restarted PHP, until the worker has booted anew."""
    worker = (f"\t\tworker {{\n\t\t\tfile {HERE}/worker/slow-boot.php\n\t\t\tname slow\n\t\t\tnum 1\n"
              "\t\t\tenv BOOT_SECONDS 3\n\t\t\tmatch /slow\n\t\t}")
    srv = start_server("probes-boot", lambda port, admin: with_probes(make_caddyfile(port, admin, threads=2, site_extra=worker)))
    booting = all_probes(srv)
    for (name, admin), (status, body) in booting.items():
        assert status == 503 and body["status"] == "unavailable", (name, admin, body)
        assert "worker slow has no booted thread" in body["reasons"], body
    assert srv.get("/slow", timeout=30).text == "booted"
    for (name, admin), (status, body) in all_probes(srv).items():
        assert status == 200, (name, admin, body)

    # A php_ini change restarts PHP: readiness fails until the worker has booted again.
    caddyfile = (srv.workdir / "Caddyfile").read_text().replace("php_ini log_errors 1", "php_ini log_errors 1\n\t\tphp_ini precision 15")
    status, body = srv.load(caddyfile)
    assert status == 200, body
    during = probe(srv, "ready")
    assert during[0] == 503 and "worker slow has no booted thread" in during[1]["reasons"], during
    assert srv.get("/slow", timeout=30).text == "booted"
    assert probe(srv, "ready")[0] == 200
    assert srv.stop() == 0


def test_readiness_fails_while_stuck_threads_are_at_their_limit(start_server):
    """max_stuck_threads 1: a request stuck in a long C call (bcrypt) past its time limit
    and the grace is answered 504 and its thread replaced; while that thread is stuck,
    readiness answers 503 (one more stuck request would leave the pool a thread short),
    liveness stays 200 (the replacement serves); once the call returns, both are 200."""
    srv = start_server("probes-stuck", lambda port, admin: with_probes(make_caddyfile(
        port, admin, threads=2,
        global_extra="\t\tphp_ini max_execution_time 1\n\t\ttimeout_grace 1s\n\t\tmax_stuck_threads 1\n")))
    assert probe(srv, "ready")[0] == 200
    cost = bcrypt_cost(srv, 6)  # about 12 s or more: well past the 2 s deadline
    answer = []
    client = threading.Thread(target=lambda: answer.append(srv.get(f"/bcrypt.php?cost={cost}", timeout=120)))
    client.start()
    client.join(30)
    assert answer and answer[0].status == 504, answer
    during = all_probes(srv)
    assert srv.get("/hello.php").text == "Hello, world!", "the replacement thread serves"
    for admin in (False, True):
        status, body = during[("ready", admin)]
        assert status == 503 and body["stuck_threads"] == {"threads": 1, "limit": 1}, body
        assert "1 PHP threads are stuck: max_stuck_threads is reached" in body["reasons"], body
        assert during[("live", admin)][0] == 200, during[("live", admin)]
    deadline = time.time() + 120
    while probe(srv, "ready")[0] != 200 and time.time() < deadline:
        time.sleep(0.2)
    assert probe(srv, "ready") [0] == 200, "ready again once the stuck thread came back"
    assert srv.stop() == 0


def test_php_serves_through_shutdown_delay_while_readiness_fails(start_server):
    """SIGTERM with Caddy's shutdown_delay 3s: from the signal on, readiness answers 503
    ("the server is stopping") while every request, PHP ones included, is served as
    before, until the delay has passed; then the server drains and exits cleanly."""
    worker = f"\t\tworker {{\n\t\t\tfile {HERE}/worker/counter.php\n\t\t\tnum 1\n\t\t\tmatch /count\n\t\t}}"
    srv = start_server("probes-stop", lambda port, admin: with_probes(
        make_caddyfile(port, admin, threads=3, site_extra=worker), "\tshutdown_delay 3s\n"))
    # Ready once the worker has booted (milliseconds after the port opens).
    assert eventually(lambda: probe(srv, "ready")[0] == 200)
    srv.proc.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    # The signal reaches Caddy's handler asynchronously: a probe sent at once may come first.
    while probe(srv, "ready")[0] != 503 and time.monotonic() - signalled < 1:
        time.sleep(0.01)
    seen = []
    while time.monotonic() - signalled < 2.5:
        ready = probe(srv, "ready")
        live = probe(srv, "live")
        hello, count, static = srv.get("/hello.php", timeout=2), srv.get("/count", timeout=2), srv.get("/static.txt", timeout=2)
        seen.append((round(time.monotonic() - signalled, 2), ready[0], live[0], hello.status, count.status, static.status))
        assert ready[0] == 503 and "the server is stopping" in ready[1]["reasons"], ready
        assert live[0] == 200, live
        assert (hello.status, hello.text) == (200, "Hello, world!")
        assert count.status == 200 and count.text.startswith("requests:")
        assert static.status == 200
        time.sleep(0.2)
    print(f"\nduring shutdown_delay (s since SIGTERM, ready, live, php, worker, static): {seen}")
    print(f"readiness then: {json.dumps(ready[1])}")
    assert len(seen) >= 5 and seen[0][0] < 1, seen
    srv.proc.wait(timeout=30)
    assert srv.proc.returncode == 0
    log = srv.log_text()
    assert "PHP keeps serving until shutdown_delay has passed" in log
    assert "PHP engine stopped" in log


# A background script that ignores its stop: the old copy runs out shutdown_timeout.
STUBBORN_BACKGROUND = """<?php
php_worker_shared_increment('stubborn:starts');
while (true) {
    usleep(20000);
}
"""


def test_a_reload_keeps_the_server_ready_while_pools_restart(start_server, tmp_path):
    """A reload restarts every background worker and boots a new generation of each HTTP
    worker. While a background script's old copy runs out its shutdown_timeout (3 s) and
    the HTTP worker's new generation boots (2 s) beside the old one that serves, both
    probes keep answering 200, and their bodies say which pools are restarting."""
    (tmp_path / "stubborn.php").write_text(STUBBORN_BACKGROUND)
    (tmp_path / "hello.php").write_text("<?php echo 'Hello, world!';")
    worker = (f"\t\tworker {{\n\t\t\tfile {HERE}/worker/slow-boot.php\n\t\t\tname slow\n\t\t\tnum 1\n"
              "\t\t\tenv BOOT_SECONDS 2\n\t\t\tenv GENERATION one\n\t\t\tmatch /slow\n\t\t}")
    background = f"\t\tshutdown_timeout 3s\n\t\tbackground {{\n\t\t\tfile {tmp_path}/stubborn.php\n\t\t\tname stubborn\n\t\t}}\n"
    srv = start_server("probes-reload", lambda port, admin: with_probes(
        make_caddyfile(port, admin, threads=3, app=tmp_path, site_extra=worker, global_extra=background)))
    assert srv.get("/slow", timeout=30).text == "booted"
    assert eventually(lambda: probe(srv, "ready")[0] == 200)

    status, body = srv.load((srv.workdir / "Caddyfile").read_text().replace("GENERATION one", "GENERATION two"))
    assert status == 200, body
    seen, restarting = [], set()
    deadline = time.monotonic() + 2.5
    while time.monotonic() < deadline:
        for (name, admin), (status, body) in all_probes(srv).items():
            seen.append((name, admin, status))
            assert status == 200 and body["status"] == "ok", (name, admin, body)
            restarting |= {p.get("worker", "") for p in body["pools"] if p.get("restarting")}
        assert srv.get("/slow", timeout=5, resend=True).text == "booted", "the old generation serves meanwhile"
        time.sleep(0.1)
    assert {"stubborn", "slow"} <= restarting, f"the probes' bodies say which pools restart: {restarting}"
    # Once the old copies are gone, no pool is restarting.
    assert eventually(lambda: not any(p.get("restarting") for p in probe(srv, "ready")[1]["pools"]), timeout=15)
    assert srv.stop() == 0


# A background loop that stops when asked, as a queue consumer does.
POLITE_BACKGROUND = """<?php
while (!php_worker_stopping()) {
    usleep(5000);
}
"""


def test_readiness_holds_through_worker_restarts_beside_background_workers(start_server, tmp_path):
    """POST /php_worker/workers/restart under load, with background workers beside the
    HTTP worker, while a load balancer probes readiness every 10 ms: every probe answers
    200 (a deploy does not take the instance out of rotation), through three restarts."""
    (tmp_path / "polite.php").write_text(POLITE_BACKGROUND)
    (tmp_path / "hello.php").write_text("<?php echo 'Hello, world!';")
    worker = f"\t\tworker {{\n\t\t\tfile {HERE}/worker/counter.php\n\t\t\tname counter\n\t\t\tnum 2\n\t\t\tmatch /count\n\t\t}}"
    background = (f"\t\tbackground {{\n\t\t\tfile {tmp_path}/polite.php\n\t\t\tname polite\n\t\t\tnum 2\n\t\t}}\n"
                  f"\t\tbackground {{\n\t\t\tfile {tmp_path}/polite.php\n\t\t\tname polite-one\n\t\t}}\n")
    srv = start_server("probes-restart", lambda port, admin: with_probes(
        make_caddyfile(port, admin, threads=7, app=tmp_path, site_extra=worker, global_extra=background)))
    assert eventually(lambda: probe(srv, "ready", admin=True)[0] == 200, timeout=15)

    stop = threading.Event()
    failures, probes, served = [], [0], [0]

    def prober():
        while not stop.is_set():
            status, body = probe(srv, "ready", admin=True)
            probes[0] += 1
            if status != 200:
                failures.append(body)
            time.sleep(0.01)

    def load():
        while not stop.is_set():
            if srv.get("/count", timeout=10).status == 200:
                served[0] += 1

    threads = [threading.Thread(target=prober)] + [threading.Thread(target=load) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        for _ in range(3):
            status, body = srv.admin("POST", "/php_worker/workers/restart")
            assert status == 200, body
            time.sleep(0.3)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert served[0] > 0 and probes[0] > 30, (served, probes)
    assert not failures, f"{len(failures)} of {probes[0]} readiness probes failed: {failures[:3]}"
