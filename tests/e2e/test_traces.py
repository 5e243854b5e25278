"""Traces: with Caddy's tracing directive on a site, each PHP request adds a span under
Caddy's, with child spans for the wait for a thread and the run, and PHP sees that
span's trace context. The spans are received by an OTLP/HTTP receiver the test runs."""
import http.server
import socket
import threading
import time
import uuid

import pytest

from conftest import APP, bcrypt_cost

try:
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
except ImportError:
    trace_service_pb2 = None

TRACEPARENT_WORKER = r"""<?php
while (frankenphp_handle_request(function () {
    echo $_SERVER['HTTP_TRACEPARENT'] ?? 'none';
})) {
}
"""


class Receiver(http.server.ThreadingHTTPServer):
    """OTLP over HTTP: POST /v1/traces, protobuf."""

    def __init__(self):
        self.spans = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
                with receiver.lock:
                    for rs in request.resource_spans:
                        for ss in rs.scope_spans:
                            receiver.spans.extend(ss.spans)
                reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    def trace(self, trace_id, count, timeout=15):
        """The spans of trace_id once there are at least count of them."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            with self.lock:
                found = [s for s in self.spans if s.trace_id.hex() == trace_id]
            if len(found) >= count:
                return found
            time.sleep(0.05)
        return found


def attrs(span):
    out = {}
    for kv in span.attributes:
        v = kv.value
        out[kv.key] = v.string_value if v.HasField("string_value") else v.int_value
    return out


def describe(spans):
    """The spans as text: ids in hex, times from the first span's start."""
    t0 = min(s.start_time_unix_nano for s in spans)
    lines = []
    for s in sorted(spans, key=lambda s: s.start_time_unix_nano):
        lines.append(f"{s.name}  trace {s.trace_id.hex()}  span {s.span_id.hex()}  parent {s.parent_span_id.hex() or '-'}  "
                     f"{(s.start_time_unix_nano - t0) / 1e3:.0f}..{(s.end_time_unix_nano - t0) / 1e3:.0f} us  "
                     f"status {s.status.code} {s.status.message!r}  {attrs(s)}")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def receiver():
    if trace_service_pb2 is None:
        pytest.fail("opentelemetry-proto is missing (tests/run.sh installs it from PyPI)")
    r = Receiver()
    threading.Thread(target=r.serve_forever, daemon=True).start()
    yield r
    r.shutdown()


@pytest.fixture(scope="module", params=[1, 2], ids=["processes1", "processes2"])
def traced(start_server, receiver, tmp_path_factory, request):
    """Once in one process, once with PHP in two child processes: the spans are the
    same, and PHP's traceparent continues them from a child too."""
    processes = request.param
    root = tmp_path_factory.mktemp("traced")
    (root / "traceparent.php").write_text(TRACEPARENT_WORKER)
    for name in ("hello.php", "fatal.php", "bcrypt.php"):
        (root / name).write_text((APP / "public" / name).read_text())
    env = {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
           "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.server_port}",
           "OTEL_BSP_SCHEDULE_DELAY": "100"}

    def caddyfile(port, admin):
        return f"""{{
	admin 127.0.0.1:{admin}
	persist_config off
	php_worker {{
		num_threads 3
		processes {processes}
		timeout_grace 500ms
		php_ini max_execution_time 1
		php_ini display_errors 0
	}}
}}

:{port} {{
	bind 127.0.0.1
	tracing {{
		span caddy
	}}
	root * {root}
	php_worker {{
		worker {{
			file {root}/traceparent.php
			num 1
			match /traced*
		}}
	}}
}}
"""
    return start_server(f"traces-{processes}", caddyfile, env=env)


def send(srv, path, trace_id, parent="00f067aa0ba902b7"):
    return srv.get(path, headers={"traceparent": f"00-{trace_id}-{parent}-01"})


def test_a_php_request_is_a_span_under_caddys_with_its_wait_and_run(traced, receiver):
    trace_id = uuid.uuid4().hex  # one per run: the receiver keeps every run's spans
    r = send(traced, "/hello.php", trace_id)
    assert r.status == 200
    spans = receiver.trace(trace_id, 4)
    (traced.workdir / "spans.txt").write_text(describe(spans))  # the trace as received
    by_name = {s.name: s for s in spans}
    assert {"caddy", "php classic", "php queue", "php run"} <= set(by_name), [s.name for s in spans]
    caddy, php = by_name["caddy"], by_name["php classic"]
    assert php.parent_span_id == caddy.span_id, "under Caddy's span"
    for child in ("php queue", "php run"):
        assert by_name[child].parent_span_id == php.span_id
    assert by_name["php queue"].end_time_unix_nano <= by_name["php run"].start_time_unix_nano + 1000
    a = attrs(php)
    assert a["php_worker.script"].endswith("/hello.php") and a["php_worker.mode"] == "classic"
    assert a["php_worker.thread"].startswith("php-") and a["http.response.status_code"] == 200
    assert a["php_worker.thread"] == attrs(by_name["php run"])["php_worker.thread"]
    assert php.status.code != 2, "no error"  # STATUS_CODE_ERROR


def test_php_continues_the_trace_under_its_span(traced, receiver):
    trace_id = uuid.uuid4().hex  # one per run: the receiver keeps every run's spans
    r = send(traced, "/traced", trace_id)
    spans = receiver.trace(trace_id, 2)
    php = next(s for s in spans if s.name == "php worker")
    assert r.text == f"00-{trace_id}-{php.span_id.hex()}-01", "the traceparent PHP sees is its span's"
    assert attrs(php)["php_worker.worker"] != ""


def test_a_fault_and_a_timeout_are_the_spans_errors(traced, receiver):
    trace_id = uuid.uuid4().hex  # one per run: the receiver keeps every run's spans
    assert send(traced, "/fatal.php", trace_id).status == 500
    php = next(s for s in receiver.trace(trace_id, 2) if s.name == "php classic")
    assert php.status.code == 2 and "500" in php.status.message

    # A C call PHP's time limit cannot cut short, past the limit (1 s) and the grace.
    cost = bcrypt_cost(traced, 4)
    trace_id = uuid.uuid4().hex  # one per run: the receiver keeps every run's spans
    slow = send(traced, f"/bcrypt.php?cost={cost}", trace_id)
    assert slow.status == 504
    php = next(s for s in receiver.trace(trace_id, 2) if s.name == "php classic")
    assert php.status.code == 2 and "time limit" in php.status.message


def test_the_queue_span_starts_once_the_body_has_arrived(traced, receiver):
    """An upload's time is not PHP's: a 256 KB body sent over 1.2 s is read before the
    request goes to PHP, and "php queue" starts when the core takes it, after the body;
    the wait and the run together take a small part of the PHP span."""
    trace_id = uuid.uuid4().hex  # one per run: the receiver keeps every run's spans
    body = b"x" * (256 * 1024)
    s = socket.create_connection(("127.0.0.1", traced.port), timeout=30)
    s.sendall(f"POST /hello.php HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: {len(body)}\r\n"
              f"Content-Type: application/octet-stream\r\ntraceparent: 00-{trace_id}-00f067aa0ba902b7-01\r\n\r\n".encode())
    for i in range(4):
        s.sendall(body[i * len(body) // 4:(i + 1) * len(body) // 4])
        time.sleep(0.4)
    answer = b""
    while chunk := s.recv(65536):
        answer += chunk
    s.close()
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
    spans = {sp.name: sp for sp in receiver.trace(trace_id, 4)}
    php, queue, run = spans["php classic"], spans["php queue"], spans["php run"]
    upload = (queue.start_time_unix_nano - php.start_time_unix_nano) / 1e9
    in_php = (run.end_time_unix_nano - queue.start_time_unix_nano) / 1e9
    assert upload >= 1.0, f"the queue starts after the body arrived: {upload:.2f}s after the span"
    assert in_php < 0.5, f"queue and run take {in_php:.2f}s"
