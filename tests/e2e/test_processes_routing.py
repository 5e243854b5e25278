"""`processes N`: how requests find a child process, and what a client sees when none
can serve (docs/processes.md). The crashing extension is test_processes.py's."""
import os
import signal
import subprocess
import threading
import time

import pytest

from conftest import APP as BASIC_APP
from conftest import eventually, global_options, make_caddyfile
from test_processes import LOST, caddyfile, crashext, in_background, processes, running_pids  # noqa: F401
from test_request_buffer import slow_upload

# curl's exit statuses for a response cut off: 18, a transfer closed with bytes still
# expected (HTTP/1.1); over HTTP/2 a stream reset or a connection closed mid-stream
# (16, 56, 92, depending on curl's version and on which came first).
CUT_OFF = {"http1.1": {18}, "h2c": {16, 18, 56, 92}}

CUT = "the PHP process running this request died after its response began; cutting it off"

CRASH_AFTER_OUTPUT = """<?php
// 200 KB of the response leave for the client, then this process crashes.
header('Content-Type: text/plain');
echo str_repeat('a', 200000);
flush();
usleep(300000);
pw_crash('segv');
"""


@pytest.mark.parametrize("protocol", ["http1.1", "h2c"])
def test_a_crash_after_the_headers_left_cuts_the_response_off(start_server, crashext, tmp_path, protocol):
    """A child that crashes after its script flushed part of the response: the client
    already has a 200 and its first bytes, so the response must end as incomplete (the
    connection or the stream cut off), never framed as complete; the log says so."""
    (tmp_path / "crash_after_output.php").write_text(CRASH_AFTER_OUTPUT)
    servers = "\tservers {\n\t\tprotocols h1 h2 h2c\n\t}\n"

    def make(port, admin):
        return global_options(admin, threads=4, global_extra=f"\t\tprocesses 2\n\t\tphp_ini extension {crashext}",
                              servers=servers) + f"""
:{port} {{
	bind 127.0.0.1
	root * {tmp_path}
	php_worker
}}
"""
    srv = start_server(f"processes-cut-off-{protocol}", make)
    flag = "--http1.1" if protocol == "http1.1" else "--http2-prior-knowledge"
    p = subprocess.run(["curl", "-sS", flag, "-o", "/dev/null", "-w", "%{http_code} %{size_download}",
                        f"http://127.0.0.1:{srv.port}/crash_after_output.php"], capture_output=True, text=True,
                       timeout=30)
    status, size = p.stdout.split()
    assert status == "200" and int(size) >= 200000, (p.stdout, p.stderr)
    assert p.returncode in CUT_OFF[protocol], f"curl exit {p.returncode} ({p.stderr.strip()}): complete?"
    assert srv.wait_log(lambda e: e.get("msg") == CUT), srv.log_text()[-3000:]
    assert not [e for e in srv.log_entries() if e.get("msg") == LOST]
    assert eventually(lambda: len(running_pids(srv)) == 2, timeout=15)
    assert srv.stop() == 0


def test_max_wait_time_counts_the_threads_of_the_process_holding_the_request(start_server, crashext):
    """max_wait_time 2s, a worker with one thread per child: one child busy with an 8 s
    request, the other with a 1 s one, then two more requests, one queued in each. The
    one behind the 1 s request is served once it ends; the one behind the 8 s request
    must not wait for it because the other child has a free thread by then (the children
    do not take each other's queued requests): it is answered at max_wait_time."""
    srv = start_server("processes-max-wait", caddyfile(crashext, threads=4, workers=2,
                                                       extra="\t\tmax_wait_time 2s"))
    answers = {}
    jobs = [in_background(srv, "/w/sleep?ms=8000", answers, key="long")]
    assert eventually(lambda: sum(p["requests"] for p in processes(srv)) == 1)
    jobs.append(in_background(srv, "/w/sleep?ms=1000", answers, key="short"))
    assert eventually(lambda: [p["requests"] for p in processes(srv)] == [1, 1])
    started = time.monotonic()
    took = {}

    def timed(key):
        r = srv.get("/w/sleep?ms=1", timeout=30)
        answers[key], took[key] = (r.status, None), time.monotonic() - started

    queued = [threading.Thread(target=timed, args=(f"queued{i}",)) for i in range(2)]
    for t in queued:
        t.start()
    for t in queued:
        t.join(30)
    assert sorted(answers[f"queued{i}"][0] for i in range(2)) in ([200, 503], [200, 200]), answers
    assert max(took.values()) < 5, f"a request waited for the long one: {took}"
    for t in jobs:
        t.join(30)
    assert (answers["long"][0], answers["short"][0]) == (200, 200), answers
    assert srv.stop() == 0


def test_a_request_when_every_process_died_waits_only_for_a_replacement(start_server, crashext):
    """Both children killed at once (as an OOM killer may): a request sent right after
    is served as soon as a replacement runs, a fraction of a second later, not after the
    30 s a request waits for PHP to start."""
    srv = start_server("processes-all-dead", caddyfile(crashext, threads=4, workers=2))
    before = running_pids(srv)
    for pid in before:
        os.kill(pid, signal.SIGKILL)
    time.sleep(0.02)
    for path in ("/sleep.php?ms=1", "/w/sleep?ms=1"):
        started = time.monotonic()
        r = srv.get(path, timeout=40)
        took = time.monotonic() - started
        assert r.status == 200 and took < 3, (path, r.status, took, r.text[:200])
    assert eventually(lambda: len(running_pids(srv)) == 2 and not running_pids(srv) & before, timeout=15)
    assert srv.stop() == 0


def test_requests_queued_in_processes_that_all_died_wait_for_a_replacement(start_server, crashext):
    """Each child busy with a request and holding one more that no thread took yet; both
    children killed at once. The running requests are lost (502); the queued ones never
    ran, and with no other child to take them they wait for a replacement and are served
    by it, not answered 502 with the lost ones."""
    srv = start_server("processes-all-dead-queued", caddyfile(crashext, threads=4, workers=2))
    before = running_pids(srv)
    answers = {}
    jobs = [in_background(srv, "/w/sleep?ms=3000", answers, key=f"running{i}") for i in range(2)]
    assert eventually(lambda: [p["requests"] for p in processes(srv)] == [1, 1])
    jobs += [in_background(srv, "/w/sleep?ms=1", answers, key=f"queued{i}") for i in range(2)]
    assert eventually(lambda: [p["requests"] for p in processes(srv)] == [2, 2])
    killed = time.monotonic()
    for pid in before:
        os.kill(pid, signal.SIGKILL)
    for t in jobs:
        t.join(40)
    took = time.monotonic() - killed
    assert {k: v[0] for k, v in answers.items()} == {"running0": 502, "running1": 502, "queued0": 200,
                                                     "queued1": 200}, answers
    assert not {answers["queued0"][1], answers["queued1"][1]} & before, answers
    assert took < 5, took
    assert srv.stop() == 0


BOOT_CRASH_WORKER = """<?php
// Crashes its process at boot once the marker file exists.
if (file_exists(__DIR__ . '/crash-at-boot')) {
    pw_crash('segv');
}
while (frankenphp_handle_request(function () { echo 'pid=' . getmypid(); })) {
}
"""


def worker_site(root, crashext, worker_extra=""):
    """processes 2 with the crashing extension, 4 threads, and root/worker.php as a
    2-thread worker for /w/*."""
    def make(port, admin):
        return make_caddyfile(port, admin, app=root, threads=4, global_extra=f"""\t\tprocesses 2
		php_ini extension {crashext}""", site_extra=f"""\t\tworker {{
			file {root}/worker.php
			num 2
			match /w/*
{worker_extra}		}}""")
    return make


def test_probes_fail_while_no_process_runs(start_server, crashext, tmp_path):
    """A worker whose boot crashes its process every time: once both children are gone,
    each replacement dies at boot, and between those deaths no child runs at all.
    Readiness never answers 200 then, nor does liveness while no child runs; both name
    the reason."""
    (tmp_path / "worker.php").write_text(BOOT_CRASH_WORKER)
    (tmp_path / "index.php").write_text("<?php echo 'classic';")

    srv = start_server("processes-probes", worker_site(tmp_path, crashext))
    assert srv.admin("GET", "/php_worker/ready")[0] == 200
    (tmp_path / "crash-at-boot").write_text("")
    for pid in running_pids(srv):
        os.kill(pid, signal.SIGKILL)
    ready, live, none_running = [], [], 0
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        status, body = srv.admin("GET", "/php_worker/ready")
        ready.append((status, body))
        status, body = srv.admin("GET", "/php_worker/health")
        running = [p for p in processes(srv) if p["state"] == "running"]
        if not running:
            none_running += 1
            live.append((status, body))
        time.sleep(0.02)
    assert none_running > 10, "the children were never all down"
    assert [r for r in ready if r[0] == 200] == [], [r for r in ready if r[0] == 200][:3]
    assert any("no PHP process runs" in body for _, body in ready), ready[-3:]
    # A child may have come up between the snapshot and the probe: most must fail.
    failed = [s for s, body in live if s == 503 and "no PHP process runs" in body]
    assert len(failed) >= len(live) - 2, live[:5]
    (tmp_path / "crash-at-boot").unlink()
    assert eventually(lambda: srv.admin("GET", "/php_worker/ready")[0] == 200, timeout=40)
    assert srv.stop() == 0


FAIL_IN_SECOND_WORKER = """<?php
// Boots in the first process to take the marker file; fails at boot in the others.
$marker = __DIR__ . '/owner';
if ($f = @fopen($marker, 'x')) {
    fwrite($f, (string) getmypid());
    fclose($f);
} elseif (trim((string) file_get_contents($marker)) !== (string) getmypid()) {
    exit(1);
}
while (frankenphp_handle_request(function () { echo 'pid=' . getmypid(); })) {
}
"""


def test_requests_avoid_a_process_whose_worker_fails_to_boot(start_server, crashext, tmp_path):
    """A worker that boots in one child and fails at boot in the other, which then holds
    no request and refuses those it gets: the least loaded child is the one that cannot
    serve. 50 requests, 5 at a time: each is served, by the child whose worker runs."""
    (tmp_path / "worker.php").write_text(FAIL_IN_SECOND_WORKER)
    (tmp_path / "index.php").write_text("<?php echo 'classic';")

    srv = start_server("processes-boot-failing", worker_site(tmp_path, crashext, "\t\t\tmax_boot_backoff 1s\n"))
    owner = int((tmp_path / "owner").read_text())
    assert srv.wait_log(lambda e: "failed before reaching" in e.get("msg", ""), timeout=10)
    statuses, pids = [], set()
    lock = threading.Lock()

    def client():
        for _ in range(10):
            r = srv.get("/w/x", timeout=30)
            with lock:
                statuses.append(r.status)
                if r.status == 200:
                    pids.add(int(r.text[4:]))

    clients = [threading.Thread(target=client) for _ in range(5)]
    for c in clients:
        c.start()
    for c in clients:
        c.join(120)
    assert len(statuses) == 50
    assert statuses.count(200) >= 49, f"{statuses.count(200)} of 50 served: {statuses}"
    assert pids == {owner}
    assert srv.stop() == 0


def test_a_post_max_size_reload_reaches_the_body_read_ahead(start_server):
    """post_max_size 1M, then a reload to 8M, which restarts the children one at a time:
    a 3 MB body is between the two limits, so it is now read whole before PHP runs (the
    script starts once the last byte left the client), as it would be at a fresh start
    with 8M."""
    def make(size):
        return lambda port, admin: make_caddyfile(port, admin, app=BASIC_APP / "public", threads=2,
                                                  global_extra=f"\t\tprocesses 2\n\t\tphp_ini post_max_size {size}")
    srv = start_server("processes-post-max-roll", make("1M"))
    before = running_pids(srv)
    status, body = srv.load(make("8M")(srv.port, srv.admin_port))
    assert status == 200, body
    assert eventually(lambda: len(running_pids(srv)) == 2 and not running_pids(srv) & before, timeout=30)
    data = os.urandom(3 << 20)
    last_byte, status, answer = slow_upload(srv, "PUT", "/upload.php", "application/octet-stream", data, rate=1 << 20)
    assert status == 200, answer
    assert answer["input_length"] == len(data)
    assert answer["started"] >= last_byte - 0.05, "the body was read ahead: the script ran once it was all there"
    assert srv.stop() == 0
