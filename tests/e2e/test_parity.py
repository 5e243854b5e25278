"""Behaviours where php_worker answered otherwise than FrankenPHP on FrankenPHP's own test
fixtures, each php_worker's bug: the same PHP code must behave the same on both servers."""

import socket
import time

from conftest import eventually, make_caddyfile

COUNTER = """<?php
$count = 0;
while (frankenphp_handle_request(function () use (&$count) {
    $count++;
    echo 'requests:', $count;
})) {
}
"""

# A webhook receiver: the sender gives up at once, the work must still be done.
WEBHOOK = """<?php
ignore_user_abort(true);
$body = file_get_contents('php://input');
usleep(300000); // the server has seen the client leave by now
echo 'received';
flush();
file_put_contents(__DIR__ . '/webhook.log', $body . ' aborted=' . connection_aborted() . "\\n", FILE_APPEND);
"""


def send_and_close(srv, data):
    """Sends a whole request and closes the connection without reading the answer."""
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
    s.sendall(data)
    s.close()


def test_a_request_whose_client_leaves_at_once_still_runs(start_server, tmp_path):
    """A request received whole runs even when its client closes the connection right
    after sending it (a webhook whose sender times out, a beacon): a worker counts it,
    and a POST's script reads its body and sees connection_aborted()."""
    (tmp_path / "counter.php").write_text(COUNTER)
    (tmp_path / "webhook.php").write_text(WEBHOOK)
    worker = f"\t\tworker {{\n\t\t\tfile {tmp_path}/counter.php\n\t\t\tnum 1\n\t\t\tmatch /count\n\t\t}}"
    srv = start_server("client-leaves-at-once", threads=3, app=tmp_path, site_extra=worker)
    send_and_close(srv, b"GET /count HTTP/1.1\r\nHost: t\r\n\r\n")
    time.sleep(0.5)
    assert srv.get("/count").text == "requests:2", "the request whose client left was served too"

    body = b"event=paid&id=42"
    send_and_close(srv, b"POST /webhook.php HTTP/1.1\r\nHost: t\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                   b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    log = tmp_path / "webhook.log"
    assert eventually(lambda: log.exists() and log.read_text(), timeout=10), "the webhook's script ran"
    assert log.read_text() == "event=paid&id=42 aborted=1\n"
