"""PHP over HTTP/3 (QUIC), which Caddy serves by default next to HTTP/2 on HTTPS sites,
in classic and worker mode. The client is aioquic (h3client.py)."""

import hashlib
import json
import os

import pytest

pytest.importorskip("aioquic", reason="tests/run.sh installs aioquic, the HTTP/3 client")

from conftest import free_port, protocols_caddyfile, wait_for_certificate  # noqa: E402
from h3client import request, requests  # noqa: E402


@pytest.fixture(scope="module")
def h3_server(start_server):
    worker_port = free_port()
    srv = start_server("http3", lambda port, admin: protocols_caddyfile(
        admin, "h1 h2 h3", [(f"https://127.0.0.1:{port}", False), (f"https://127.0.0.1:{worker_port}", True)]))
    srv.ports = {"classic": srv.port, "worker": worker_port}
    for port in srv.ports.values():
        wait_for_certificate(port)
    return srv


@pytest.fixture(params=["classic", "worker"])
def port(request, h3_server):
    return h3_server.ports[request.param]


def test_request_arrives_as_http3(port):
    r = request(port, "GET", "/server.php?x=1")
    assert r.status == 200
    server = json.loads(r.body)["server"]
    assert (server["SERVER_PROTOCOL"], server["HTTPS"], server["QUERY_STRING"]) == ("HTTP/3.0", "on", "x=1")


def test_headers_status_and_cookies(port):
    r = request(port, "GET", "/headers.php")
    assert r.status == 202
    assert r.header_values("x-custom") == ["one"]
    assert r.header_values("x-multi") == ["a", "b"]
    assert r.header_values("x-removed") == []
    assert sorted(c.split(";")[0] for c in r.header_values("set-cookie")) == ["a=1", "b=2", "c=3"]


def test_large_request_body(port):
    data = os.urandom(1024 * 1024)
    r = request(port, "POST", "/input.php", [("content-type", "application/octet-stream")], data)
    assert r.status == 200
    assert json.loads(r.body) == {"length": len(data), "sha1": hashlib.sha1(data).hexdigest()}


def test_flush_streams_over_http3(port):
    r = request(port, "GET", "/flush.php?ms=1500")
    assert r.body == b"first\nsecond\n"
    first_at, first = r.chunks[0]
    assert first == b"first\n"
    assert first_at < 1.0, f"first chunk came after {first_at:.2f}s: output was not streamed"


def test_concurrent_streams_see_only_their_own_data(port):
    specs = [("POST", f"/mine.php?id=g{i}",
              [("content-type", "application/x-www-form-urlencoded"), ("cookie", f"id=c{i}"), ("x-id", f"h{i}")],
              f"id=p{i}".encode()) for i in range(20)]
    for i, r in enumerate(requests(port, specs)):
        d = json.loads(r.body)
        d.pop("thread_leak")
        assert d == {"get": f"g{i}", "post": f"p{i}", "cookie": f"c{i}", "header": f"h{i}"}


def test_invalid_headers_do_not_stall_the_response(port):
    """An invalid header name from PHP used to stall the whole HTTP/3 response."""
    r = request(port, "GET", "/bad-headers.php")
    assert (r.status, r.body, r.header_values("x-fine")) == (200, b"body", ["kept"])
