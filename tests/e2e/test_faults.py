"""PHP fails in every phase of a request, in every way PHP can: a fatal error, an
uncaught exception, exit(), a timeout, memory_limit. Each failure answers the request in
flight with an error status, logs a line naming the worker and the thread, restarts what
must restart, and leaves the server serving, with the next request on that thread clean.

The table below is the contract: one row per (mode, phase, fault)."""

import re
import socket
import time
import uuid
from pathlib import Path

import pytest

from conftest import BOOT_FAILED, CRASHED, Response

HERE = Path(__file__).resolve().parent
FAULTS = HERE / "faults"
KINDS = ["fatal", "exception", "exit", "timeout", "memory"]
# What each fault prints where the client can see it (display_errors is on here).
SHOWN = {
    "fatal": "Call to undefined function undefined_function_on_purpose()",
    "exception": "Uncaught DomainException: fault on purpose",
    "exit": None,
    "timeout": "Maximum execution time of 1 second exceeded",
    "memory": "Allowed memory size of",
}


def worker_block(name, path, env=(), extra=""):
    lines = [f"\t\tworker {{", f"\t\t\tfile {FAULTS}/worker.php", "\t\t\tnum 1", f"\t\t\tname {name}",
             f"\t\t\tmatch {path}", "\t\t\tmax_boot_backoff 1s"]
    lines += [f"\t\t\tenv {k} {v}" for k, v in env]
    if extra:
        lines.append(extra)
    return "\n".join(lines) + "\n\t\t}\n"


@pytest.fixture(scope="module", params=[1, 2], ids=["processes1", "processes2"])
def faults(start_server, request):
    """One site: a worker failing per request, one worker per fault at boot and per
    fault after its loop, and the classic fixtures. Once in one process, once with PHP
    in two child processes (docs/processes.md): a PHP fault is the same there, never a
    process's death."""
    site = f"\t\troot {FAULTS}/public\n" + worker_block("requests", "/worker")
    for kind in KINDS:
        site += worker_block(f"boot-{kind}", f"/boot-{kind}", [("FAULT_PHASE", "boot"), ("FAULT_KIND", kind)])
        site += worker_block(f"after-{kind}", f"/after-{kind}", [("FAULT_PHASE", "after"), ("FAULT_KIND", kind)],
                             "\t\t\tmax_requests 1")
    processes = request.param
    srv = start_server(f"faults-{processes}", app=FAULTS / "public", threads=16, site_extra=site,
                       global_extra=f"\t\tprocesses {processes}" if processes > 1 else "")
    yield srv
    assert srv.stop() == 0


def failure_lines(srv, worker, since):
    """Log lines of this worker's script ending badly, after `since` entries."""
    return [e for e in srv.log_entries()[since:] if e.get("worker") == worker and e.get("msg") in (CRASHED, BOOT_FAILED)]


def assert_names_thread(line):
    assert re.fullmatch(r"php-\d+", line.get("thread", "")), line


def next_in_process_of(srv, failed):
    """The next /worker answer from the process that answered `failed`: under
    `processes 2` the worker has a thread in each, and only the failed one restarted."""
    pid = failed.header("X-Pid")
    assert pid, ("the failed answer names its process", failed.headers)
    for _ in range(40):
        r = srv.get("/worker")
        if r.header("X-Pid") == pid:
            return r
    pytest.fail(f"no answer from process {pid} in 40 requests")


@pytest.mark.parametrize("kind", KINDS)
def test_worker_handler(faults, kind):
    first = faults.get("/worker").text
    since = len(faults.log_entries())
    r = faults.get(f"/worker?phase=handler&kind={kind}")
    assert r.status == 500, (r.status, r.text)
    if SHOWN[kind]:
        assert SHOWN[kind] in r.text
    assert next_in_process_of(faults, r).text == "served:1 session:none", "the script restarted; the next request is clean"
    lines = faults.wait_log(lambda e: e.get("worker") == "requests" and e.get("msg") == CRASHED)
    assert failure_lines(faults, "requests", since), lines
    assert_names_thread(failure_lines(faults, "requests", since)[-1])
    assert first.startswith("served:")


@pytest.mark.parametrize("kind", KINDS)
def test_worker_request_shutdown(faults, kind):
    since = len(faults.log_entries())
    r = faults.get(f"/worker?phase=shutdown&kind={kind}")
    assert r.status == 500, (r.status, r.text)
    assert next_in_process_of(faults, r).text == "served:1 session:none"
    deadline = time.time() + 5
    while not failure_lines(faults, "requests", since) and time.time() < deadline:
        time.sleep(0.05)
    assert_names_thread(failure_lines(faults, "requests", since)[-1])


@pytest.mark.parametrize("kind", KINDS)
def test_worker_boot(faults, kind):
    r = faults.get(f"/boot-{kind}", timeout=15)
    assert r.status == 503 and r.header("Retry-After"), (r.status, r.text)
    assert f"worker boot-{kind} fails to start" in r.text
    lines = faults.wait_log(lambda e: e.get("worker") == f"boot-{kind}" and e.get("msg") == BOOT_FAILED)
    assert lines and lines[0]["level"] == "error"
    assert_names_thread(lines[0])
    if kind == "exit":
        assert lines[0]["exit_status"] == 3, lines[0]
    assert faults.get("/worker").status == 200, "the rest of the server serves"
    assert faults.get("/hello.php").text == "Hello, world!"


@pytest.mark.parametrize("kind", KINDS)
def test_worker_after_the_loop(faults, kind):
    """max_requests 1: after each request the loop ends and the code after it fails."""
    since = len(faults.log_entries())
    for _ in range(3):
        r = faults.get(f"/after-{kind}")
        assert (r.status, r.text) == (200, "served:1 session:none"), "each request gets a fresh script"
    deadline = time.time() + 5
    while len(failure_lines(faults, f"after-{kind}", since)) < 2 and time.time() < deadline:
        time.sleep(0.05)
    lines = failure_lines(faults, f"after-{kind}", since)
    assert len(lines) >= 2 and all(e["level"] == "warn" for e in lines), lines
    assert_names_thread(lines[-1])


CLASSIC = [("script", kind, 200 if kind == "exit" else 500) for kind in KINDS] + \
    [(phase, kind, 200 if kind == "exit" else 500) for phase in ("shutdown", "shutdown-function") for kind in KINDS]


@pytest.mark.parametrize("phase, kind, status", CLASSIC)
def test_classic(faults, phase, kind, status):
    r = faults.get(f"/classic.php?phase={phase}&kind={kind}")
    assert r.status == status, (r.status, r.text)
    if status == 500 and phase == "script" and SHOWN[kind]:
        assert SHOWN[kind] in r.text
    for _ in range(3):
        assert faults.get("/classic.php").text == "classic ok", "the thread serves clean requests"
    assert faults.get("/worker").status == 200


@pytest.mark.parametrize("mode", ["classic", "worker"])
@pytest.mark.parametrize("kind", KINDS)
def test_fault_after_output_that_waits_for_a_slow_client(faults, mode, kind):
    """The script sends 3 MB to a client that is not reading yet, then fails: its
    output waits in the response buffer and spill file while the thread moves on. The
    client still gets all of it, then what PHP showed of the fault, and the response
    ends; the server serves on."""
    path = "/classic.php?phase=script" if mode == "classic" else "/worker?phase=handler"
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", faults.port))
    s.sendall(f"GET {path}&kind={kind}&big=3 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode())
    deadline = time.time() + 20
    time.sleep(0.3)
    while any(t["state"] == "busy" for t in faults.threads()["threads"]) and time.time() < deadline:
        time.sleep(0.1)
    assert time.time() < deadline, "the failing script ended without waiting on the client"
    s.settimeout(20)
    received = b""
    while chunk := s.recv(1 << 20):
        received += chunk
    s.close()
    head, _, chunked = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 "), "the headers had left before the fault"
    body = b""
    while True:  # the chunked encoding, to its last chunk
        size, _, rest = chunked.partition(b"\r\n")
        n = int(size, 16)
        if n == 0:
            assert rest == b"\r\n", "the response ended properly"
            break
        body, chunked = body + rest[:n], rest[n + 2:]
    assert body.startswith(b"x" * (3 << 20)), "all 3 MB arrived, in order"
    if SHOWN[kind]:
        assert SHOWN[kind].encode() in body
    assert faults.get("/classic.php").text == "classic ok"
    assert faults.get("/worker").status == 200


# Request startup: PHP code runs before the handler when PHP parses a large form or
# upload (memory_limit) and when it starts the session (session.auto_start reads and
# unserializes it, which runs __wakeup()).


@pytest.fixture(scope="module")
def startup(start_server, tmp_path_factory):
    sessions = tmp_path_factory.mktemp("sessions")
    site = f"\t\troot {FAULTS}/public\n" + worker_block("held", "/held", [("HOLD_MB", "24")])
    srv = start_server("startup-faults", app=FAULTS / "public", threads=4, site_extra=site, global_extra=f"""
		php_ini memory_limit 40M
		php_ini post_max_size 64M
		php_ini upload_max_filesize 64M
		php_ini session.auto_start 1
		php_ini session.save_path {sessions}""")
    srv.sessions = sessions
    yield srv
    assert srv.stop() == 0


def session_cookie(srv, data):
    sid = uuid.uuid4().hex
    (srv.sessions / f"sess_{sid}").write_bytes(data)
    return {"Cookie": f"PHPSESSID={sid}"}


def wakeup(kind):
    return f'fault|O:13:"FaultOnWakeup":1:{{s:4:"kind";s:{len(kind)}:"{kind}";}}'.encode()


def big_form(mb):
    return b"a=" + b"x" * (mb << 20)


def multipart_field(mb):
    boundary = "pwboundary"
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"big\"\r\n\r\n".encode() + b"x" * (mb << 20)
            + f"\r\n--{boundary}--\r\n".encode())
    return body, {"Content-Type": f"multipart/form-data; boundary={boundary}"}


STARTUP = [(f"session-{kind}", kind) for kind in KINDS] + [("form-memory", "memory"), ("multipart-memory", "memory")]


def startup_request(srv, path, case):
    if case.startswith("session-"):
        return srv.get(path, headers=session_cookie(srv, wakeup(case.removeprefix("session-"))))
    if case == "form-memory":
        return srv.get(path, method="POST", body=big_form(30),
                       headers={"Content-Type": "application/x-www-form-urlencoded"})
    # PHP stops reading the body when it runs out of memory, and the server closes the
    # connection once it answered: read the answer whatever happens to the body.
    body, headers = multipart_field(30)
    status, text = srv.post_early_answer(path, body, headers)
    return Response(status, "", [], text.partition("\r\n\r\n")[2].encode())


@pytest.mark.parametrize("case, kind", STARTUP)
def test_worker_request_startup(startup, case, kind):
    """The case of the issue: a worker holding 24 MB of a 40 MB memory_limit gets a 30 MB
    form; its request startup runs out of memory before the handler runs."""
    assert startup.get("/held").text.startswith("served:")
    since = len(startup.log_entries())
    r = startup_request(startup, "/held", case)
    assert r.status == 500, (r.status, r.text[:300])
    if SHOWN[kind]:
        assert SHOWN[kind] in r.text
    clean = startup.get("/held")
    assert (clean.status, clean.text) == (200, "served:1 session:active"), "a fresh script; a new, empty session"
    deadline = time.time() + 5
    while not failure_lines(startup, "held", since) and time.time() < deadline:
        time.sleep(0.05)
    assert_names_thread(failure_lines(startup, "held", since)[-1])
    assert startup.get("/hello.php").text == "Hello, world!"


@pytest.mark.parametrize("case", ["session-memory", "form-memory"])
def test_classic_request_startup(startup, case):
    big_session = b"fault|s:52428800:\"" + b"x" * (50 << 20) + b"\";"
    if case == "session-memory":
        r = startup.get("/classic.php", headers=session_cookie(startup, big_session))
    else:
        r = startup.get("/classic.php", method="POST", body=big_form(45),
                        headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert r.status == 500, (r.status, r.text[:300])
    lines = startup.wait_log(lambda e: "failed outside the script" in e.get("msg", ""))
    assert lines and re.fullmatch(r"php-\d+", lines[-1].get("thread", "")), lines
    for _ in range(4):
        assert startup.get("/classic.php").text == "classic ok"
