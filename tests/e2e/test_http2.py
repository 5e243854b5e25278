"""PHP over HTTP/2: cleartext h2c and TLS (Caddy's default for HTTPS sites), in classic
and worker mode. The client is curl, which speaks HTTP/2 through nghttp2."""

import hashlib
import json
import os
import subprocess
import time

import pytest

from conftest import free_port, protocols_caddyfile, wait_for_certificate

CURL_TIMEOUT = 30


class H2Site:
    """One site of the HTTP/2 server, reached with curl."""

    def __init__(self, server, base, curl_args):
        self.server = server
        self.base = base
        self.curl_args = curl_args

    def curl(self, path, *args):
        """Runs curl; returns (status line, headers as (name, value) pairs, body)."""
        p = subprocess.run(["curl", "-sS", "-D", "-", *self.curl_args, *args, self.base + path],
                           capture_output=True, timeout=CURL_TIMEOUT, check=True)
        head, _, body = p.stdout.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        headers = [tuple(part.strip() for part in line.split(":", 1)) for line in lines[1:]]
        return lines[0].strip(), headers, body


@pytest.fixture(scope="module")
def h2_server(start_server):
    tls_port = free_port()
    srv = start_server("http2", lambda port, admin: protocols_caddyfile(
        admin, "h1 h2 h2c", [(f"http://127.0.0.1:{port}", False), (f"https://127.0.0.1:{tls_port}", True)]))
    srv.tls_port = tls_port
    wait_for_certificate(tls_port)
    return srv


@pytest.fixture(params=["h2c-classic", "tls-worker"])
def site(request, h2_server):
    if request.param == "h2c-classic":
        return H2Site(h2_server, f"http://127.0.0.1:{h2_server.port}", ["--http2-prior-knowledge"])
    return H2Site(h2_server, f"https://127.0.0.1:{h2_server.tls_port}", ["--http2", "--insecure"])


def test_request_arrives_as_http2(site):
    status, _, body = site.curl("/server.php?x=1")
    assert status == "HTTP/2 200"
    server = json.loads(body)["server"]
    assert server["SERVER_PROTOCOL"] == "HTTP/2.0"
    assert server["QUERY_STRING"] == "x=1"
    if site.base.startswith("https"):
        assert (server["HTTPS"], server["REQUEST_SCHEME"], server["FRANKENPHP_WORKER"]) == ("on", "https", "1")
    else:
        assert server["REQUEST_SCHEME"] == "http"
        assert "FRANKENPHP_WORKER" not in server


def test_headers_status_and_cookies(site):
    status, headers, body = site.curl("/headers.php")
    assert status == "HTTP/2 202"
    values = lambda name: [v for k, v in headers if k.lower() == name]
    assert values("x-custom") == ["one"]
    assert values("x-multi") == ["a", "b"]
    assert values("x-removed") == []
    assert sorted(c.split(";")[0] for c in values("set-cookie")) == ["a=1", "b=2", "c=3"]
    assert b"sent-after-flush:yes" in body


def test_large_request_body(site, tmp_path):
    data = os.urandom(5 * 1024 * 1024)
    upload = tmp_path / "body.bin"
    upload.write_bytes(data)
    status, _, body = site.curl("/input.php", "--data-binary", f"@{upload}",
                                "-H", "Content-Type: application/octet-stream")
    assert status == "HTTP/2 200"
    assert json.loads(body) == {"length": len(data), "sha1": hashlib.sha1(data).hexdigest()}


def test_flush_streams_over_http2(site):
    start = time.time()
    p = subprocess.Popen(["curl", "-sS", "-N", *site.curl_args, site.base + "/flush.php?ms=1500"],
                         stdout=subprocess.PIPE)
    try:
        first = p.stdout.readline()
        first_at = time.time() - start
        rest = p.stdout.read()
    finally:
        p.wait(timeout=CURL_TIMEOUT)
    assert first == b"first\n"
    assert first_at < 1.0, f"first chunk came after {first_at:.2f}s: output was not streamed"
    assert rest == b"second\n"


def test_multiplexed_streams_see_only_their_own_data(site, tmp_path):
    """50 requests as concurrent streams of one connection, each with its own query,
    body, cookie and header."""
    args = ["curl", "-sS", "--parallel", "--parallel-immediate", "--parallel-max", "50"]
    for i in range(50):
        if i:
            args.append("--next")
        args += [*site.curl_args, "-d", f"id=p{i}", "-b", f"id=c{i}", "-H", f"X-Id: h{i}",
                 "-o", str(tmp_path / f"{i}.json"), site.base + f"/mine.php?id=g{i}"]
    subprocess.run(args, check=True, timeout=CURL_TIMEOUT)
    for i in range(50):
        d = json.loads((tmp_path / f"{i}.json").read_bytes())
        d.pop("thread_leak")
        assert d == {"get": f"g{i}", "post": f"p{i}", "cookie": f"c{i}", "header": f"h{i}"}
