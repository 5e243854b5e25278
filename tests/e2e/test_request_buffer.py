"""Slow uploads hold no PHP thread: the handler goroutine reads each request body whole
(memory, then an unlinked temporary file) before the request goes to PHP, the mirror of
the response buffer (test_slow_clients.py)."""

import hashlib
import json
import os
import socket
import threading
import time
import uuid

import pytest

from conftest import APP
from test_operations import metric, scrape

EXECUTOR = f"""\t\tworker {{
			file {APP}/executor.php
			num 2
			match /upload.php /hello.php /input.php
		}}"""


def multipart(fields, files):
    """A multipart/form-data body: (content type, body)."""
    boundary = uuid.uuid4().hex
    out = b""
    for name, value in fields.items():
        out += (f"--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n").encode() + value + b"\r\n"
    for name, data in files.items():
        out += (f"--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"; filename=\"{name}.bin\"\r\n"
                "Content-Type: application/octet-stream\r\n\r\n").encode() + data + b"\r\n"
    out += f"--{boundary}--\r\n".encode()
    return f"multipart/form-data; boundary={boundary}", out


def slow_upload(srv, method, path, ctype, body, rate, chunked=False, piece=16384):
    """Sends body at about `rate` bytes/s on a new connection; returns (the time the
    last byte left, the status, the decoded JSON answer or the raw one)."""
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=120)
    try:
        framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {len(body)}"
        s.sendall(f"{method} {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Type: {ctype}\r\n{framing}\r\n\r\n"
                  .encode())
        start = time.monotonic()
        for i in range(0, len(body), piece):
            part = body[i:i + piece]
            s.sendall(b"%x\r\n%s\r\n" % (len(part), part) if chunked else part)
            # Paced against the start, so the rate holds however long a send takes.
            delay = start + (i + len(part)) / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        if chunked:
            s.sendall(b"0\r\n\r\n")
        last_byte = time.time()
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    finally:
        s.close()
    head, _, payload = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/1.1 ") else 0
    try:
        payload = json.loads(payload[payload.index(b"{"):])
    except ValueError:
        pass
    return last_byte, status, payload


def sha1(b):
    return hashlib.sha1(b).hexdigest()


def spill_files(srv):
    """The request spill files the server holds open (unlinked, so only /proc sees them)."""
    out = []
    for fd in os.listdir(f"/proc/{srv.proc.pid}/fd"):
        try:
            target = os.readlink(f"/proc/{srv.proc.pid}/fd/{fd}")
        except OSError:
            continue
        if "php_worker-request-" in target:
            out.append(target)
    return out


@pytest.mark.parametrize("mode", ["classic", "worker"])
def test_slow_uploads_take_no_php_thread(start_server, mode):
    """8 clients upload 2 MB (6 multipart forms with a file, 2 chunked PUTs) at 512 KB/s
    to 2 PHP threads. While they upload, normal requests are served at once and no PHP
    thread is busy; each script starts only after its body's last byte left the client,
    and every upload arrives whole: $_FILES, $_POST and php://input as sent, with the
    chunked bodies' CONTENT_LENGTH set to their length."""
    extra = EXECUTOR if mode == "worker" else ""
    srv = start_server(f"slow-uploads-{mode}", threads=3 if mode == "worker" else 2, site_extra=extra)
    uploads, results = [], {}
    for i in range(8):
        data = os.urandom(2 << 20)
        if i < 6:
            ctype, body = multipart({"title": f"upload {i}".encode()}, {"file": data})
            uploads.append(("POST", ctype, body, False, {"file": sha1(data), "title": sha1(f"upload {i}".encode())}))
        else:
            uploads.append(("PUT", "application/octet-stream", data, True, {"input": sha1(data), "length": len(data)}))

    def client(i):
        method, ctype, body, chunked, _ = uploads[i]
        results[i] = slow_upload(srv, method, f"/upload.php?i={i}", ctype, body, rate=512 << 10, chunked=chunked)

    clients = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    for c in clients:
        c.start()
    time.sleep(1)
    served_during, busy_seen = [], []
    for _ in range(5):
        r = srv.get("/hello.php", timeout=10)
        served_during.append((r.status, r.text, time.time()))
        # A thread may still show the /hello.php just answered as busy for a moment.
        busy_seen += [t for t in srv.threads()["threads"] if t["state"] == "busy" and "upload.php" in t.get("uri", "")]
        time.sleep(0.3)
    for c in clients:
        c.join(120)
    first_done = min(last for last, _, _ in results.values())
    print(f"\n{mode}: 8 uploads of 2 MB at 512 KB/s; /hello.php answered 5 times meanwhile, "
          f"the last {first_done - served_during[-1][2]:.1f} s before the first upload ended")
    assert [(s, t) for s, t, _ in served_during] == [(200, "Hello, world!")] * 5
    assert served_during[-1][2] < first_done, "normal requests were served while every upload was in flight"
    assert busy_seen == [], "no PHP thread waited on an upload"
    for i, (last_byte, status, answer) in sorted(results.items()):
        method, _, body, _, want = uploads[i]
        assert status == 200, (i, answer)
        assert answer["started"] >= last_byte - 0.05, "PHP ran only once the whole body was there"
        if method == "POST":
            assert answer["files"]["file"] == {"size": 2 << 20, "error": 0, "sha1": want["file"]}
            assert answer["post"] == {"title": want["title"]}
            assert answer["content_length"] == str(len(body))
        else:
            assert (answer["input_length"], answer["input_sha1"]) == (want["length"], want["input"])
            assert answer["content_length"] == str(want["length"]), "a buffered chunked body has its length"
    assert srv.stop() == 0


def test_request_buffer_off_streams_the_body_to_php(start_server):
    """request_buffer off: PHP reads a large body from the client as it arrives, so the
    script starts before the last byte left the client (and holds its thread meanwhile,
    the trade-off); the body still arrives whole."""
    srv = start_server("request-buffer-off", threads=2, global_extra="\t\trequest_buffer off\n")
    data = os.urandom(1 << 20)
    last_byte, status, answer = slow_upload(srv, "PUT", "/upload.php", "application/octet-stream", data, rate=512 << 10)
    assert status == 200, answer
    assert answer["started"] < last_byte - 0.5, "the script ran while the body was still arriving"
    assert (answer["input_length"], answer["input_sha1"]) == (len(data), sha1(data))
    assert srv.stop() == 0


def test_bodies_past_the_bounds_spill_to_files_that_go_with_the_request(start_server):
    """request_buffer 64KiB and request_buffer_total 256KiB: 4 slow 3 MB uploads keep at
    most 256 KiB in memory between them, the rest in unlinked temporary files, which the
    metrics count; the bodies arrive whole, and the files are gone once the requests end,
    as are those of a client that left in the middle of its body."""
    srv = start_server("request-spills", threads=2,
                       global_extra="\t\trequest_buffer 64KiB\n\t\trequest_buffer_total 256KiB\n")
    datas = [os.urandom(3 << 20) for _ in range(4)]
    results = {}

    def client(i):
        results[i] = slow_upload(srv, "PUT", "/input.php", "application/octet-stream", datas[i], rate=2 << 20)

    clients = [threading.Thread(target=client, args=(i,)) for i in range(4)]
    for c in clients:
        c.start()
    time.sleep(0.8)
    during = spill_files(srv)
    samples = scrape(srv)
    for c in clients:
        c.join(60)
    print(f"\nspill files during the uploads: {len(during)}; buffered "
          f"{metric(samples, 'php_worker_request_buffered_bytes'):.0f} bytes")
    assert len(during) >= 3 and all("(deleted)" in f for f in during), during
    assert metric(samples, "php_worker_request_spill_files") >= 3
    assert metric(samples, "php_worker_request_buffered_bytes") <= 256 << 10
    for i, (_, status, answer) in sorted(results.items()):
        assert status == 200 and answer == {"length": 3 << 20, "sha1": sha1(datas[i])}, (i, status, answer)

    # A client that leaves in the middle of its body: its file goes with it, no script runs.
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.sendall(b"PUT /input.php HTTP/1.1\r\nHost: t\r\nContent-Length: 3000000\r\n\r\n" + b"x" * 1_000_000)
    time.sleep(0.3)
    assert len(spill_files(srv)) == 1
    s.close()
    deadline = time.time() + 10
    while spill_files(srv) and time.time() < deadline:
        time.sleep(0.05)
    samples = scrape(srv)
    assert spill_files(srv) == []
    assert metric(samples, "php_worker_request_spill_files") == 0
    assert metric(samples, "php_worker_request_buffered_bytes") == 0
    assert metric(samples, "php_worker_request_spills_total") >= 5
    assert srv.get("/hello.php").text == "Hello, world!"
    assert srv.stop() == 0


@pytest.mark.parametrize("buffering", ["on", "off"])
def test_upload_limits_behave_as_php_sets_them(start_server, buffering):
    """post_max_size and upload_max_filesize behave the same whether the body was read
    before PHP ran or streamed to it: a form past post_max_size reaches the script empty,
    with PHP's warning; a file past upload_max_filesize is UPLOAD_ERR_INI_SIZE; one under
    it arrives."""
    extra = "\t\tphp_ini post_max_size 1M\n\t\tphp_ini upload_max_filesize 300K\n"
    if buffering == "off":
        extra += "\t\trequest_buffer off\n"
    srv = start_server(f"upload-limits-{buffering}", threads=2, global_extra=extra)
    big, small = os.urandom(400 << 10), os.urandom(200 << 10)
    ctype, body = multipart({"a": b"1"}, {"big": big, "small": small})
    _, status, answer = slow_upload(srv, "POST", "/upload.php", ctype, body, rate=8 << 20)
    assert status == 200, answer
    assert answer["files"]["big"] == {"size": 0, "error": 1, "sha1": None}, "UPLOAD_ERR_INI_SIZE"
    assert answer["files"]["small"] == {"size": 200 << 10, "error": 0, "sha1": sha1(small)}
    assert answer["post"] == {"a": sha1(b"1")}
    # A form past post_max_size is not read ahead in either mode: PHP refuses it without
    # reading it, and the server closes the connection with the body unread, which Linux
    # may report to a client still sending as a reset (or, when the reset came before the
    # client's next write, a broken pipe) instead of the answer.
    ctype, body = multipart({"a": b"x" * (1100 << 10)}, {})
    try:
        _, status, answer = slow_upload(srv, "POST", "/upload.php", ctype, body, rate=8 << 20)
        assert status == 200, answer
        assert answer["post"] == [] and answer["files"] == []
        assert "exceeds the limit" in (answer["error"] or ""), answer
    except (ConnectionResetError, BrokenPipeError):
        pass
    assert srv.wait_log(lambda e: "exceeds the limit" in e.get("msg", "")), "PHP refused the form"
    assert srv.get("/hello.php").text == "Hello, world!"
    assert srv.stop() == 0


@pytest.mark.parametrize("chunked", [False, True])
def test_bodies_past_post_max_size_stream_to_php(start_server, chunked):
    """post_max_size 1M bounds what is read ahead, so the disk never holds more than PHP
    could take: a 3 MB PUT with its Content-Length goes to PHP at once and streams; a
    chunked one is read ahead to just past 1 MB and the rest streams. Either way the
    script starts before the last byte left the client, and reads the whole body."""
    srv = start_server(f"post-max-stream-{chunked}", threads=2, global_extra="\t\tphp_ini post_max_size 1M\n")
    data = os.urandom(3 << 20)
    last_byte, status, answer = slow_upload(srv, "PUT", "/upload.php", "application/octet-stream", data,
                                            rate=1 << 20, chunked=chunked)
    assert status == 200, answer
    assert answer["started"] < last_byte - 0.5, "the script ran while the body was still arriving"
    assert (answer["input_length"], answer["input_sha1"]) == (len(data), sha1(data))
    assert metric(scrape(srv), "php_worker_request_spills_total") <= 1
    assert srv.stop() == 0


# Reads php://input, then runs on past request_body_timeout (an import, an upload that
# is processed), and answers the body's length and digest.
LONG_RUN = """<?php
$body = file_get_contents('php://input');
usleep((int) ($_GET['ms'] ?? 0) * 1000);
echo strlen($body), ' ', sha1($body);
"""


@pytest.mark.parametrize("buffering", ["on", "off"])
def test_a_script_that_runs_past_the_body_timeout_after_the_body_ended_is_answered(start_server, tmp_path, buffering):
    """request_body_timeout bounds how long a body may stall, not how long a script may
    run after the body arrived: a 1 MiB POST (a body that ends on a 64 KiB boundary) and
    a 100 KB one whose script sleeps past the timeout get the script's answer, never an
    empty 200; a body read whole ahead and one PHP streams alike."""
    (tmp_path / "long.php").write_text(LONG_RUN)
    srv = start_server(f"long-post-{buffering}", app=tmp_path, threads=3, site_extra="\t\trequest_body_timeout 1s",
                       global_extra="" if buffering == "on" else "\t\trequest_buffer off")
    results = {}

    def post(size):
        body = os.urandom(size)
        r = srv.request("/long.php?ms=2500", method="POST", body=body,
                        headers={"Content-Type": "application/octet-stream"}, timeout=30)
        results[size] = (r.status, r.text, f"{size} {sha1(body)}")

    threads = [threading.Thread(target=post, args=(size,)) for size in (1 << 20, 100_000, 3 << 20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for size, (status, text, want) in results.items():
        assert (status, text) == (200, want), f"{size} bytes: {status} {text[:200]!r}"
    assert not srv.wait_log(lambda e: "stopped arriving" in e.get("msg", "") + str(e.get("error", "")), timeout=0.1)
