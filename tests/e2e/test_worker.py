"""Worker mode: scripts booted once per thread, serving requests through
frankenphp_handle_request(), over real HTTP."""

import concurrent.futures
import json
import os
import re
import time
import uuid
from pathlib import Path

import pytest

from conftest import (BOOT_FAILED, CRASHED, WORK, assert_disconnect_frees_the_thread, assert_stalled_body_frees_the_thread, make_caddyfile,
                      with_read_body_timeout)
from test_classic import multipart

HERE = Path(__file__).resolve().parent
WORKER = HERE / "worker"
OCTANE = HERE / "octane"


def match_worker(file, path, extra=""):
    return f"""		worker {{
			file ../{file}
			num 1
			match {path}
{extra}		}}
"""


@pytest.fixture(scope="session")
def workers(start_server):
    """One site with a worker per behaviour under test, each on one thread."""
    site = "\t\troot " + str(WORKER / "public") + "\n\t\tworker app.php 1\n"
    site += match_worker("api.php", "/api/*")
    site += match_worker("counter.php", "/counter")
    site += match_worker("recycled.php", "/recycled", "\t\t\tmax_requests 3\n")
    site += match_worker("resets.php", "/resets")
    site += match_worker("crashy.php", "/crashy")
    site += match_worker("exit-between.php", "/exit-between")
    site += match_worker("finish.php", "/finish")
    site += match_worker("hints.php", "/hints")
    site += match_worker("header-functions.php", "/header-functions")
    site += match_worker("env.php", "/env", "\t\t\tenv WORKER_ONLY yes\n\t\t\tenv SERVER_SOFTWARE from-worker-env\n"
                         "\t\t\tenv WORKER_HOST {http.request.host}\n")
    return start_server("workers", app=WORKER / "public", threads=16, site_extra=site,
                        global_extra="\t\tphp_ini max_execution_time 2")


def test_counter_boots_once_and_counts(workers):
    bodies = [workers.get("/counter").text for _ in range(5)]
    assert bodies == [f"requests:{i}" for i in range(1, 6)]
    boot = workers.wait_log(lambda e: e.get("msg") == "counter worker booting")
    assert boot and boot[0]["level"] == "info", "output printed while booting goes to the log"


def test_max_requests_recycles_the_script(workers):
    bodies = [workers.get("/recycled").text for _ in range(7)]
    assert bodies == ["requests:1", "requests:2", "requests:3", "requests:1", "requests:2", "requests:3",
                      "requests:1"]


def test_worker_routed_by_file_and_by_match(workers):
    r = workers.get("/app.php?x=1")
    assert r.text.startswith("worker app:") and r.text.endswith("|/app.php|/app.php?x=1")
    assert workers.get("/plain.php").text == "classic plain", "other scripts stay classic"
    r = workers.get("/api/users/7")
    assert r.text.startswith("api worker:") and "|/api/users/7|" in r.text
    assert r.text.endswith(str(WORKER / "api.php"))
    assert workers.get("/static.txt").text == "static in worker site\n"
    assert workers.get("/").text == "classic index"


def test_session_does_not_leak_to_a_cookieless_request(workers):
    secret = uuid.uuid4().hex
    a = workers.get(f"/resets?action=session&value={secret}")
    assert a.status == 200 and a.header("Set-Cookie").startswith("PHPSESSID=")
    b = workers.get("/resets").json()["before"]
    assert b["session_status"] == 1, "PHP_SESSION_NONE: no session carried over"
    assert b["session_id"] == "" and b["has_session_global"] is False
    assert secret not in json.dumps(b)


def test_headers_status_and_buffers_do_not_leak(workers):
    a = workers.get("/resets?action=dirty")
    assert a.status == 299 and a.header("X-Leaky") == "yes"
    assert a.text.startswith("buffered\n"), "an output buffer left open is flushed at the end of the request"
    b = workers.get("/resets")
    assert b.status == 200 and b.header("X-Leaky") is None
    before = b.json()["before"]
    assert before["code"] == 200 and before["ob_level"] == 0
    assert not any("Leaky" in h for h in before["headers"])


def test_superglobals_and_input_are_per_request(workers):
    a = workers.get("/resets?x=1", method="POST", body=b"p=2",
                    headers={"Content-Type": "application/x-www-form-urlencoded", "Cookie": "c=3", "X-Probe": "a"})
    assert a.json()["before"]["post"] == {"p": "2"} and a.json()["before"]["server_probe"] == "a"
    raw = workers.get("/resets", method="PUT", body=b"raw body").json()["before"]
    assert raw["input"] == "raw body"
    b = workers.get("/resets").json()["before"]
    assert (b["get"], b["post"], b["cookie"], b["request"], b["files"]) == ([], [], [], [], [])
    assert b["server_probe"] is None and b["input"] == ""


def test_uploaded_temp_file_is_gone_after_its_request(workers):
    record = WORK / "workers" / f"upload-{uuid.uuid4().hex}.txt"
    body, ctype = multipart({}, {"f": ("a.bin", os.urandom(100_000))})
    r = workers.get(f"/resets?action=upload&record={record}", method="POST", body=body,
                    headers={"Content-Type": ctype})
    assert r.status == 200
    tmp = record.read_text()
    assert tmp and not os.path.exists(tmp)
    assert workers.get("/resets").json()["before"]["files"] == []


@pytest.mark.parametrize("how, text", [
    ("exception", "Uncaught DomainException: thrown on purpose"),
    ("fatal", "Call to undefined function undefined_function_on_purpose()"),
    ("exit", "exiting"),
    ("die", "dying"),
    ("timeout", "Maximum execution time of 1 second exceeded"),
])
def test_a_failing_request_gets_500_and_the_worker_recovers(workers, how, text):
    first = workers.get("/crashy").text
    assert first.startswith("count:")
    r = workers.get(f"/crashy?do={how}")
    assert r.status == 500, (how, r.status, r.text)
    assert text in r.text
    assert workers.get("/crashy").text == "count:1", "the script restarted and the next request is clean"
    found = workers.wait_log(lambda e: e.get("level") == "warn" and e.get("msg") == CRASHED
                             and e.get("worker", "").endswith("crashy.php"))
    assert found and "exit_status" in found[-1] and re.fullmatch(r"php-\d+", found[-1]["thread"]), found
    served = int(first.split(":")[1]) + 1  # the failed request counts, however it failed
    assert found[-1]["requests"] == served, found[-1]


def test_exit_after_a_redirect_keeps_the_status(workers):
    r = workers.get("/crashy?do=redirect-exit")
    assert r.status == 302 and r.header("Location") == "/elsewhere"
    assert workers.get("/crashy").text == "count:1"


def test_exit_zero_between_requests_restarts_cleanly(workers):
    bodies = [workers.get("/exit-between").text for _ in range(5)]
    assert bodies == ["count:1", "count:2", "count:1", "count:2", "count:1"]


def test_execution_time_does_not_run_while_waiting(workers):
    assert workers.get("/counter").status == 200
    time.sleep(2.5)  # max_execution_time is 2 s here: idle time must not count
    r = workers.get("/counter")
    assert r.status == 200 and r.text.startswith("requests:")


def test_finish_request_answers_before_the_script_ends(workers):
    marker = WORK / "workers" / f"finish-{uuid.uuid4().hex}"
    start = time.time()
    r = workers.get(f"/finish?marker={marker}")
    elapsed = time.time() - start
    assert r.text == "answered"
    assert elapsed < 1.2, f"the response waited for the script's sleep ({elapsed:.2f}s)"
    deadline = time.time() + 10
    while not marker.exists() and time.time() < deadline:
        time.sleep(0.05)
    assert json.loads(marker.read_text()) == [True, False], "the second finish returns false"


def test_early_hints(workers):
    raw = workers.raw(b"GET /hints HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    hints, _, final = raw.partition(b"\r\n\r\n")
    assert hints.startswith(b"HTTP/1.1 103 Early Hints")
    assert b"Link: </style.css>; rel=preload; as=style" in hints
    assert final.startswith(b"HTTP/1.1 200 OK")
    assert b"final after hints:1" in final
    assert b"Link: </style.css>" in final.partition(b"\r\n\r\n")[0], "the final response keeps PHP's headers"


def test_request_and_response_header_functions(workers):
    d = workers.get("/header-functions", headers={"X-Custom-Thing": "v1", "Accept": "text/plain"}).json()
    req = d["request"]
    assert req["X-Custom-Thing"] == "v1" and req["Accept"] == "text/plain"
    assert req["Host"] == f"127.0.0.1:{workers.port}"
    assert d["getallheaders"] == req and d["apache_request_headers"] == req
    assert d["response"]["X-Answer"] == "42" and d["response"]["Content-Type"] == "application/json"
    assert d["apache_response_headers"] == d["response"]


def test_environment_at_boot_and_in_requests(workers):
    d = workers.get("/env").json()
    expected = {"server_worker": "1", "server_custom": "yes", "server_site": "configured",
                "server_process": "from-process", "getenv_custom": "yes", "getenv_process": "from-process",
                "server_software": "from-worker-env", "getenv_all_custom": "yes"}
    placeholder = "{http.request.host}"
    assert d["boot"] == dict(expected, server_host=placeholder, getenv_host=placeholder), \
        "the pool's env at boot; a placeholder stays as written (no request to take it from)"
    folder = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker")
    assert d["boot_server"] == {"SCRIPT_NAME": "/env.php", "SCRIPT_FILENAME": os.path.join(folder, "env.php"),
                                "DOCUMENT_ROOT": folder, "GATEWAY_INTERFACE": "CGI/1.1", "REQUEST_METHOD": "GET"}, \
        "the boot request is a GET of the script from its folder, with the CGI variables of every request"
    request = dict(d["request"])
    assert request.pop("script") == "", "a matched worker outside the root has no SCRIPT_NAME"
    host = "127.0.0.1"  # {http.request.host}: the host without its port
    assert request == dict(expected, server_host=host, getenv_host=host), \
        "the pool's env, sent once, and the placeholder's value, sent with the request"


def test_concurrent_requests_across_two_threads(start_server):
    srv = start_server("two-threads", threads=4, site_extra=f"""\t\tworker {{
			file {HERE}/app/executor.php
			num 2
			match /mine.php
		}}""")

    def one(i):
        r = srv.get(f"/mine.php?id=g{i}", method="POST", body=f"id=p{i}".encode(),
                    headers={"Content-Type": "application/x-www-form-urlencoded", "Cookie": f"id=c{i}",
                             "X-Id": f"h{i}"})
        return i, r.json()

    with concurrent.futures.ThreadPoolExecutor(max_workers=100) as pool:
        for i, d in pool.map(one, range(100)):
            assert (d["get"], d["post"], d["cookie"], d["header"]) == (f"g{i}", f"p{i}", f"c{i}", f"h{i}")
    assert srv.stop() == 0


def test_boot_failure_backs_off_answers_503_and_recovers(start_server, tmp_path):
    script = tmp_path / "boot.php"
    script.write_text("<?php throw new RuntimeException('broken boot');\n")
    srv = start_server("bootfail", site_extra=f"""\t\tworker {{
			file {script}
			num 1
			match /boot
			max_boot_backoff 400ms
		}}""")
    failures = srv.wait_log(lambda e: e.get("msg") == BOOT_FAILED)
    assert failures and failures[0]["level"] == "error"
    # No max_wait_time: the request is answered after the next failed attempt.
    r = srv.get("/boot", timeout=5)
    assert r.status == 503 and r.header("Retry-After") == "1"
    assert r.text == f"503 Service Unavailable: worker {script} fails to start; the server log says why\n"
    assert srv.wait_log(lambda e: e.get("msg") == "no thread can start the worker script: the waiting requests are refused"
                        and e.get("refused") == 1)
    assert srv.wait_log(lambda e: e.get("msg") == "request answered 503" and e.get("reason", "").endswith("fails to start; the server log says why")), \
        "the handler writes the refusal and its log line"
    assert srv.get("/hello.php").status == 200, "the rest of the server keeps working"
    assert srv.wait_log(lambda e: e.get("msg") == BOOT_FAILED and e.get("attempt") == 4), "the attempts go on, further apart"
    script.write_text("<?php while (frankenphp_handle_request(function () { echo 'fixed'; })) {}\n")
    deadline = time.time() + 10
    while time.time() < deadline:
        r = srv.get("/boot")
        if r.status == 200:
            break
    assert (r.status, r.text) == (200, "fixed"), "the worker recovered on its own"
    delays = [e["retry_in_ms"] for e in srv.log_entries() if e.get("msg") == BOOT_FAILED]
    assert delays[:3] == [100, 200, 400] and max(delays) <= 400, delays
    assert srv.stop() == 0


def test_octane_shaped_app_boots_once_per_thread_and_never_leaks(start_server, tmp_path):
    boot_log = tmp_path / "boots.log"
    srv = start_server("octane", app=OCTANE / "public", threads=4, site_extra=f"""\t\troot {OCTANE}/public
		index frankenphp-worker.php
		file_server off
		worker {{
			file frankenphp-worker.php
			num 2
			env APP_BASE_PATH {OCTANE}
			env BOOT_LOG {boot_log}
			env MAX_REQUESTS 500
		}}""")

    def one(i):
        user = f"user{i}" if i % 2 else None
        query = f"?user={user}&add=item{i}" if user else f"?add=item{i}"
        return i, user, srv.get(f"/orders/{i}{query}").json()

    with concurrent.futures.ThreadPoolExecutor(max_workers=20) as pool:
        results = list(pool.map(one, range(200)))
    boot_ids = set()
    for i, user, d in results:
        assert d["user"] == user, "the request scope is the request's own"
        assert d["cart"] == [f"item{i}"], "a scoped service starts empty in every request"
        assert d["base_has_request"] is False and d["base_has_cart"] is False, "the booted app stays clean"
        assert d["boots_in_this_thread"] == 1
        assert d["max_requests"] == 500
        boot_ids.add(d["boot_id"])
    boots = boot_log.read_text().split()
    assert len(boots) == 2, "the 200 ms bootstrap ran once per worker thread"
    assert boot_ids == set(boots)
    assert srv.stop() == 0


def test_graceful_stop_runs_the_code_after_the_loop(start_server, tmp_path):
    marker = tmp_path / "ended"
    srv = start_server("lifecycle", site_extra=f"""\t\tworker {{
			file {WORKER}/lifecycle.php
			num 2
			match /life
			env LIFECYCLE_MARKER {marker}
		}}""")
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        assert srv.get("/life").text.startswith("served:")
        pending = pool.submit(srv.get, "/life?sleep=1")
        time.sleep(0.3)
        srv.proc.send_signal(__import__("signal").SIGINT)
        r = pending.result(timeout=30)
    assert r.status == 200 and r.text.startswith("served:"), "the in-flight request finished"
    assert srv.proc.wait(timeout=30) == 0
    ended = sorted(tmp_path.glob("ended.*"))
    assert len(ended) == 2, "both threads left their loop and ran the code after it"
    assert "PHP stopped" in srv.log_text()


def test_a_stuck_script_is_stopped_after_the_shutdown_timeout(start_server, tmp_path):
    marker = tmp_path / "ended"
    srv = start_server("stuck", global_extra="\t\tshutdown_timeout 1s\n\t\tphp_ini max_execution_time 0",
                       site_extra=f"""\t\tworker {{
			file {WORKER}/lifecycle.php
			num 1
			match /life
			env LIFECYCLE_MARKER {marker}
		}}""")
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(srv.get, "/life?sleep=600")
        time.sleep(0.5)
        start = time.time()
        srv.proc.send_signal(__import__("signal").SIGINT)
        assert srv.proc.wait(timeout=30) == 0
        stopped_in = time.time() - start
        r = pending.result(timeout=10)
    assert stopped_in < 15, f"shutdown took {stopped_in:.1f}s"
    assert r.status == 500
    log = srv.log_text()
    assert "still running 1000 ms after shutdown began" in log


def test_client_disconnect_frees_a_worker_thread(start_server):
    """ignore_user_abort is on in workers: the handler sees the abort and returns, and
    the script is not restarted (no new boot per cancelled request)."""
    srv = start_server("worker-disconnect", threads=2, site_extra=f"""\t\tworker {{
			file {HERE}/app/executor.php
			num 1
			match /forever.php /hello.php
		}}""")
    assert_disconnect_frees_the_thread(srv)  # stops the server
    assert "restarting" not in srv.log_path.read_text()



def test_stalled_request_body_frees_a_worker_thread(start_server):
    worker = f"""\t\tworker {{
			file {HERE}/app/executor.php
			num 1
			match /body-stall.php /hello.php
		}}"""
    srv = start_server("worker-body-stall", lambda port, admin: with_read_body_timeout(
        make_caddyfile(port, admin, threads=2, site_extra=worker, global_extra="\t\trequest_buffer off\n")))
    assert_stalled_body_frees_the_thread(srv)
    assert "restarting" not in srv.log_text()


def test_max_memory_restarts_a_leaking_script_and_names_the_route(start_server):
    """A worker whose /leak route keeps 1 MB per request, beside /ok that keeps nothing,
    with max_memory 16MB on 2 threads: under concurrent load every request succeeds, each
    script restarts once its memory passes the limit, with a warning naming the worker,
    the memory and /leak as the route that grew it most; the thread list shows the same
    attribution. A request that reaches memory_limit still ends as a fault (500), and the
    worker serves on."""
    worker = f"""\t\tworker {{
			file {HERE}/worker/leaky.php
			name leaky
			num 2
			max_memory 16MB
			match /leak /ok /huge
		}}"""
    srv = start_server("max-memory", threads=3, site_extra=worker, global_extra="\t\tphp_ini memory_limit 128M\n")
    paths = ["/leak?n=%d" % i if i % 4 == 0 else "/ok?n=%d" % i for i in range(240)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=6) as pool:
        answers = list(pool.map(lambda p: srv.get(p, timeout=30), paths))
    assert [a.status for a in answers] == [200] * len(paths)
    assert all(a.text == "ok" for p, a in zip(paths, answers) if p.startswith("/ok"))
    kept = [int(a.text.split()[1]) for p, a in zip(paths, answers) if p.startswith("/leak")]
    assert max(kept) <= 16, f"no script kept more than max_memory allows: {max(kept)} MB"
    lines = srv.wait_log(lambda e: e.get("msg", "").startswith("worker script restarted (max_memory)"), count=2)
    assert len(lines) >= 2, "60 MB leaked over 2 threads: each script passed 16 MB at least once"
    line = lines[0]
    print("\n" + json.dumps(line))
    assert line["level"] == "warn" and line["worker"] == "leaky" and line["thread"].startswith("php-")
    assert line["memory"] > 16_000_000 and line["max_memory"] == 16_000_000
    assert line["grew_most"].startswith("/leak +"), line["grew_most"]
    assert "/ok" not in line["grew_most"].split(",")[0]
    pool = next(p for p in srv.threads()["pools"] if p["worker"] == "leaky")
    print(json.dumps(pool["memory_growth"][:3]))
    top = pool["memory_growth"][0]
    assert top["path"] == "/leak" and top["requests"] == 60 and top["bytes"] >= 60 << 20, pool["memory_growth"]
    assert all(r["bytes"] < 1 << 20 for r in pool["memory_growth"][1:]), "no other route grew the memory by much"
    assert pool["restarts"] >= 2
    threads = [t for t in srv.threads()["threads"] if t["worker"] == "leaky"]
    assert all(0 < t["real_memory"] for t in threads), threads

    r = srv.get("/huge", timeout=30)
    assert r.status == 500, r.text
    assert srv.wait_log(lambda e: e.get("msg") == CRASHED and e.get("worker") == "leaky")
    assert [srv.get("/ok").text for _ in range(4)] == ["ok"] * 4
    assert srv.stop() == 0


# Boots at once the first time, slowly every later time (a cache to warm, a failing
# dependency that retries).
SLOW_REBOOT = """<?php
$marker = __DIR__ . '/booted-once';
if (file_exists($marker)) {
    sleep(3);
}
touch($marker);
while (frankenphp_handle_request(function () {
    echo 'served';
})) {
}
"""


def test_max_wait_time_fires_while_a_worker_script_restarts(start_server, tmp_path):
    """A worker whose only thread restarts its script (max_requests 1) is not free while
    the script boots again: a request that arrives then gets max_wait_time's 503, not
    an answer seconds later once the boot is over."""
    (tmp_path / "slow-reboot.php").write_text(SLOW_REBOOT)
    worker = (f"\t\tworker {{\n\t\t\tfile {tmp_path}/slow-reboot.php\n\t\t\tnum 1\n\t\t\tmax_requests 1\n"
              "\t\t\tmatch /w\n\t\t}")
    srv = start_server("max-wait-reboot", app=tmp_path, threads=2, site_extra=worker,
                       global_extra="\t\tmax_wait_time 500ms")
    assert srv.get("/w").text == "served"  # its last request: the script restarts, slowly
    start = time.monotonic()
    r = srv.get("/w", timeout=30)
    elapsed = time.monotonic() - start
    assert r.status == 503 and r.header("Retry-After"), (r.status, r.text, f"{elapsed:.2f}s")
    assert elapsed < 2, f"{elapsed:.2f}s"
