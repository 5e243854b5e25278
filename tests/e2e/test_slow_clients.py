"""Slow clients hold no PHP thread: a response leaves its PHP thread for a per-request
buffer (memory, then a temporary file) that the handler goroutine drains to the client."""

import os
import socket
import threading
import time
from pathlib import Path

import pytest

from conftest import bcrypt_cost, make_caddyfile, read_streamed, send_stalled_body, with_read_body_timeout
from test_operations import metric, scrape

SLOW_READER_RCVBUF = 4096


def slow_readers(srv, n, path="/big.php?mb=30", close=False):
    """n clients that request a large response and never read it."""
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SLOW_READER_RCVBUF)
        s.connect(("127.0.0.1", srv.port))
        extra = "Connection: close\r\n" if close else ""
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: t\r\n{extra}\r\n".encode())
        socks.append(s)
    return socks


def busy_threads(srv):
    return [t for t in srv.threads()["threads"] if t["state"] == "busy"]


@pytest.fixture(scope="module")
def slow(start_server):
    return start_server("slow-clients", threads=4, global_extra="", site_extra="")


def served(srv):
    return sum(t["requests"] for t in srv.threads()["threads"])


def wait_served(srv, target, timeout=60):
    """Waits until the PHP threads served `target` requests in all and none runs one."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if served(srv) >= target and not busy_threads(srv):
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("readers,mb", [(8, 30), (64, 4)])
def test_slow_readers_do_not_stall_the_server(slow, readers, mb):
    before, done = slow.rss_kb(), served(slow)
    socks = slow_readers(slow, readers, f"/big.php?mb={mb}")
    try:
        # Every script runs to its end, its response left to the buffers: no PHP thread
        # waits on a client that does not read.
        assert wait_served(slow, done + readers), "no PHP thread waits on a client"
        started = time.monotonic()
        r = slow.get("/hello.php", timeout=10)
        took = time.monotonic() - started
        assert (r.status, r.text) == (200, "Hello, world!")
        print(f"{readers} slow readers: /hello.php answered in {took * 1000:.0f} ms, "
              f"RSS +{(slow.rss_kb() - before) / 1024:.0f} MB")
        assert took < 1, f"a normal request waited {took:.2f} s behind slow readers"
        grown_mb = (slow.rss_kb() - before) / 1024
        assert grown_mb < 16 + min(readers, 64) * 1.2, \
            f"{readers} × {mb} MB responses are buffered in memory only up to the bounds: RSS +{grown_mb:.0f} MB"
    finally:
        for s in socks:
            s.close()


def test_a_slow_reader_still_gets_the_whole_response(slow):
    done = served(slow)
    s = slow_readers(slow, 1, "/big.php?mb=8", close=True)[0]
    assert wait_served(slow, done + 1), "PHP is done; the response waits in the buffer and the spill file"
    s.settimeout(20)
    received = b""
    while chunk := s.recv(1 << 20):
        received += chunk
    s.close()
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head[:200]
    assert body.count(b"x") == 8 << 20, "every byte arrived, in order, from memory and the spill file"


def test_a_client_that_stops_reading_is_ended_by_the_write_timeout(start_server):
    # Caddy's `timeouts write` bounds how long the goroutine waits on the client. It is
    # in the first config, not loaded later: a connection made right after a load may be
    # accepted by the old listener and closed unanswered, and then nothing is logged.
    def caddyfile(port, admin_port):
        return make_caddyfile(port, admin_port, threads=2).replace(
            "\tpersist_config off\n",
            "\tpersist_config off\n\tservers {\n\t\ttimeouts {\n\t\t\twrite 2s\n\t\t}\n\t}\n", 1)
    srv = start_server("write-timeout", caddyfile=caddyfile)
    socks = slow_readers(srv, 2, "/big.php?mb=20")
    try:
        line = srv.wait_log(lambda e: e.get("msg") == "client stopped reading the response; it is dropped", timeout=15)
        assert line and "big.php" in line[0]["uri"], line
        assert srv.get("/hello.php", timeout=5).status == 200
    finally:
        for s in socks:
            s.close()


def spill_files(srv):
    """The spill files Caddy holds open: unlinked at creation, they show as deleted."""
    fds = Path(f"/proc/{srv.proc.pid}/fd")
    found = []
    for fd in fds.iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue  # closed meanwhile
        if "php_worker-response-" in target:
            found.append(target)
    return found


def test_response_buffer_bounds_memory_and_the_spill_file_goes_with_the_client(start_server):
    srv = start_server("response-buffer", threads=2,
                       global_extra="\t\tresponse_buffer 64KB\n\t\tresponse_buffer_total 1MB", site_extra="")
    done = served(srv)
    socks = slow_readers(srv, 3, "/big.php?mb=8")
    try:
        assert wait_served(srv, done + 3), "the scripts ended; their responses wait for the clients"
        samples = scrape(srv)
        assert metric(samples, "php_worker_response_spill_files") == 3
        assert metric(samples, "php_worker_response_spills_total") >= 3
        held = metric(samples, "php_worker_response_buffered_bytes")
        assert held <= 3 * 64_000, f"{held} bytes in memory: each response keeps at most response_buffer"
        files = spill_files(srv)
        assert len(files) == 3 and all(f.endswith("(deleted)") for f in files), files
    finally:
        for s in socks:
            s.close()
    deadline = time.time() + 10
    while (spill_files(srv) or metric(scrape(srv), "php_worker_response_buffered_bytes")) and time.time() < deadline:
        time.sleep(0.1)
    assert spill_files(srv) == [], "a client that left takes its spill file with it"
    samples = scrape(srv)
    assert metric(samples, "php_worker_response_spill_files") == 0
    assert metric(samples, "php_worker_response_buffered_bytes") == 0
    assert srv.get("/hello.php").text == "Hello, world!"


def test_many_stalled_request_bodies_at_once_take_no_thread(start_server):
    """24 clients stop sending their request bodies at once, on 4 PHP threads, with
    Caddy's read_body timeout at 1 s. Bodies are read before PHP runs, so no stalled
    request ever takes a PHP thread: a normal request sent meanwhile is served at once,
    every client is answered 408 when the timeout passes, and no script runs, not even
    the PUT ones (which, with request_buffer off, would have read part of the body)."""
    srv = start_server("many-stalled-bodies", lambda port, admin: with_read_body_timeout(
        make_caddyfile(port, admin, threads=4)))
    served_before = sum(t["requests"] for t in srv.threads()["threads"])
    outcomes, markers, answered_at = {}, [], []

    def stall(i):
        method, ctype = ("PUT", "application/octet-stream") if i % 2 else ("POST", "application/x-www-form-urlencoded")
        marker = srv.workdir / f"{method.lower()}-{i}.txt"
        markers.append(marker)
        try:
            answer = send_stalled_body(srv, method, f"/body-stall.php?marker={marker}", ctype)
            outcomes[i] = answer.split(b" ", 2)[1].decode() if answer.startswith(b"HTTP/1.1 ") else repr(answer[:50])
        except ConnectionResetError:
            outcomes[i] = "reset"
        answered_at.append(time.monotonic())

    clients = [threading.Thread(target=stall, args=(i,)) for i in range(24)]
    for c in clients:
        c.start()
    time.sleep(0.2)
    busy = [t for t in srv.threads()["threads"] if t["state"] == "busy"]
    started = time.monotonic()
    r = srv.get("/hello.php", timeout=10)
    hello_at = time.monotonic()
    assert (r.status, r.text) == (200, "Hello, world!")
    for c in clients:
        c.join(timeout=60)
    print(f"24 stalled bodies on 4 threads: {sorted(outcomes.values())}; /hello.php meanwhile in {hello_at - started:.2f} s")
    assert busy == [], "no thread waits on a stalled body"
    assert sorted(outcomes) == list(range(24)), "every client was answered"
    assert set(outcomes.values()) == {"408"}, outcomes
    assert hello_at < min(answered_at), "/hello.php did not wait for the stalled clients' read timeout"
    time.sleep(0.3)
    assert not any(m.exists() for m in markers), "no script ran on part of a body"
    served = sum(t["requests"] for t in srv.threads()["threads"]) - served_before
    assert served == 1, f"PHP served {served} requests: only /hello.php reached it"
    r = srv.get("/hello.php", timeout=5)
    assert (r.status, r.text) == (200, "Hello, world!")


def test_response_buffer_off_writes_from_the_php_thread(start_server):
    """response_buffer off, for a server behind a buffering proxy: PHP threads write to
    clients themselves. Responses, large ones and streamed ones, arrive as before, nothing
    waits in a buffer, and a client that does not read holds its PHP thread (the reason
    buffering is on by default)."""
    srv = start_server("response-buffer-off", threads=2, global_extra="\t\tresponse_buffer off", site_extra="")
    r = srv.get("/big.php?mb=4", timeout=20)
    assert r.status == 200 and r.body == b"x" * (4 << 20)
    first_at, _, received = read_streamed(srv.port, "/flush.php?ms=1000")
    assert first_at < 0.8 and b"second" in received, f"flush() streamed: first part after {first_at:.2f} s"

    # The client has its bytes before the thread counts the request as served.
    assert wait_served(srv, 2), "both requests above were counted"
    done = served(srv)
    socks = slow_readers(srv, 1, "/big.php?mb=30")
    try:
        deadline = time.time() + 10
        while not busy_threads(srv) and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(1)
        assert len(busy_threads(srv)) == 1 and served(srv) == done, "the PHP thread waits on the client"
        samples = scrape(srv)
        assert metric(samples, "php_worker_response_spills_total") == 0
        assert metric(samples, "php_worker_response_buffered_bytes") == 0
    finally:
        for s in socks:
            s.close()
    assert wait_served(srv, done + 1), "the client left: its script ends and the thread is free"


def read_whole(sock):
    """Reads a Connection: close HTTP/1.1 response to its end: (head, decoded body)."""
    sock.settimeout(30)
    received = b""
    while chunk := sock.recv(1 << 20):
        received += chunk
    sock.close()
    head, _, chunked = received.partition(b"\r\n\r\n")
    body = b""
    while True:
        size, _, rest = chunked.partition(b"\r\n")
        n = int(size, 16)
        if n == 0:
            return head, body
        body, chunked = body + rest[:n], rest[n + 2:]


def test_responses_waiting_for_clients_survive_reloads(start_server):
    """Responses that left their PHP threads for buffers and spill files while clients
    did not read reach those clients whole across a forced reload of the same config, a
    reload that changes it (a php_ini change, which restarts PHP, and new buffer bounds)
    and a config that fails to load; the server serves throughout."""
    def caddyfile(port, admin, memory_limit="128M", extra_site=""):
        return make_caddyfile(port, admin, threads=2, global_extra=f"\t\tphp_ini memory_limit {memory_limit}",
                              site_extra="") + extra_site

    srv = start_server("buffers-reload", caddyfile)
    done = served(srv)
    socks = slow_readers(srv, 4, "/big.php?mb=6", close=True)
    assert wait_served(srv, done + 4), "the scripts ended; their responses wait for the clients"

    status, body = srv.load((srv.workdir / "Caddyfile").read_text(), force=True)
    assert status == 200, body
    changed = caddyfile(srv.port, srv.admin_port, memory_limit="256M").replace(
        "\t\tphp_ini display_errors 1", "\t\tresponse_buffer 256KB\n\t\tphp_ini display_errors 1")
    assert "response_buffer 256KB" in changed
    status, body = srv.load(changed)
    assert status == 200, body
    assert srv.wait_log(lambda e: "php_ini changed" in e.get("msg", ""))
    assert srv.get("/hello.php", timeout=10, resend=True).text == "Hello, world!"

    blocker = socket.socket()  # a site on a port in use: this config cannot load
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    busy = f"\n:{blocker.getsockname()[1]} {{\n\tbind 127.0.0.1\n\trespond busy\n}}\n"
    status, body = srv.load(caddyfile(srv.port, srv.admin_port, memory_limit="64M", extra_site=busy))
    blocker.close()
    assert status != 200, "the load must fail"
    assert srv.get("/hello.php", timeout=10, resend=True).text == "Hello, world!"

    for s in socks:
        head, body = read_whole(s)
        assert head.startswith(b"HTTP/1.1 200 ") and body == b"x" * (6 << 20), (head[:100], len(body))
    deadline = time.time() + 10
    while spill_files(srv) and time.time() < deadline:
        time.sleep(0.1)
    assert spill_files(srv) == []
    assert srv.get("/hello.php").text == "Hello, world!"


def read_all(sock, timeout=15):
    sock.settimeout(timeout)
    data = b""
    while True:
        try:
            got = sock.recv(1 << 20)
        except (ConnectionResetError, socket.timeout):
            break
        if not got:
            break
        data += got
    return data


def test_a_response_that_cannot_be_buffered_is_never_framed_as_complete(start_server):
    """response_buffer 128KB and a spill directory that does not exist ($TMPDIR): a
    response that must spill cannot be kept whole. Before any of it left, the client
    gets a 500; once its headers left (a slow reader), the response is cut off, never
    ended with a chunked terminator as if it were whole. Either way the log says why,
    and the server serves on."""
    srv = start_server("response-spill-fails", threads=2, env={"TMPDIR": "/nonexistent/php_worker-spill"},
                       global_extra="\t\tresponse_buffer 128KB", site_extra="")
    r = srv.get("/big-once.php?mb=2", timeout=15)
    assert r.status == 500, (r.status, len(r.body))
    assert len(r.body) < 1 << 20

    sock = slow_readers(srv, 1, "/big.php?mb=8&pause_ms=300")[0]
    try:
        assert srv.wait_log(lambda e: "spill file failed" in e.get("msg", "") and "big.php" in e.get("uri", ""),
                            timeout=15), "the log says the response could not be buffered"
        data = read_all(sock)
    finally:
        sock.close()
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head[:200]
    assert b"Transfer-Encoding: chunked" in head, head
    assert not body.endswith(b"0\r\n\r\n"), "a response cut short ends without the chunked terminator"
    assert len(body) < 8 << 20
    assert srv.get("/hello.php", timeout=5).text == "Hello, world!"


def test_a_client_stalled_mid_body_delays_no_other_requests_deadline(start_server):
    """request_buffer off: a PHP thread reads a PUT body from a client that stops
    sending. Its deadline (max_execution_time 1, grace 1s) passes while it waits on the
    client: the client gets 504 and the thread serves again, and the watchdog, one
    thread for every pool, is never held by that wait: another request stuck in a long
    C call (bcrypt) past its own deadline is answered 504 on time too, not 200 when the
    call returns seconds later."""
    srv = start_server("stalled-body-deadlines", threads=3, site_extra="",
                       global_extra="\t\trequest_buffer off\n\t\tphp_ini max_execution_time 1\n\t\ttimeout_grace 1s")
    cost = bcrypt_cost(srv, 5, start=8)  # about 6 s or more: well past the 2 s deadline

    marker = srv.workdir / "stall.txt"
    stalled = {}
    client = threading.Thread(target=lambda: stalled.setdefault("answer", send_stalled_body(
        srv, "PUT", f"/body-stall.php?marker={marker}", "application/octet-stream")))
    client.start()
    time.sleep(2.5)  # the stalled request's deadline has passed: the watchdog acted on it
    start = time.monotonic()
    slow = srv.get(f"/bcrypt.php?cost={cost}", timeout=60)
    took = time.monotonic() - start
    assert slow.status == 504, f"{slow.status} after {took:.1f}s: the watchdog was held by the stalled body"
    client.join(15)
    assert stalled.get("answer", b"").startswith(b"HTTP/1.1 504 "), stalled.get("answer", b"")[:200]
    assert srv.get("/hello.php", timeout=10).text == "Hello, world!"
