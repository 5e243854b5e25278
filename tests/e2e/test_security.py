"""The security suite: one test for each class of hole that FrankenPHP's 2026 security
advisories found in code paths php_worker shares with it (script resolution, the
directory redirect, per-request state in worker mode, the queue, the environment,
frankenphp_log(), signals, autoscaling), tried over HTTP against the built server.
docs/security.md names each class, how it is prevented, and its test here.

Tests are named after the class, and say in their docstring which advisory row of
docs/security.md they answer."""

import ctypes
import http.server
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

from conftest import eventually, global_options, php_version, send_stalled_body

HERE = Path(__file__).resolve().parent
SECURITY = HERE / "security"

EXECUTED = "<?php echo strrev('DETUCEXE'), ' ', basename(__FILE__);"  # prints "EXECUTED <file>"; the source does not say it


def caddyfile(port, admin, site, global_extra="", servers="", threads=2):
    return global_options(admin, threads, global_extra, servers) + f"""
:{port} {{
	bind 127.0.0.1
{site}
}}
"""


def raw_request(port, target, headers=b"", timeout=10):
    """A GET of `target` exactly as written (no client normalises it): (status, headers
    dict with lower-case names, body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(b"GET " + target.encode() + b" HTTP/1.0\r\nHost: t\r\n" + headers + b"\r\n")  # 1.0: no chunks
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    fields = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        fields[name.strip().lower()] = value.strip()
    return status, fields, body


def metric(srv, name, labels):
    """The value of one metric sample from the admin API's /metrics, or None."""
    status, text = srv.admin("GET", "/metrics")
    assert status == 200, text
    want = "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}" if labels else ""
    for line in text.splitlines():
        if line.startswith(name + want + " "):
            return float(line.split()[-1])
    return None


# -- Script resolution ------------------------------------------------------------------

@pytest.fixture(scope="module")
def docroot(tmp_path_factory):
    root = tmp_path_factory.mktemp("docroot")
    (root / "index.php").write_text("<?php echo 'INDEX';")
    (root / "blog").mkdir()
    (root / "blog" / "index.php").write_text("<?php echo 'BLOG';")
    uploads = root / "uploads"
    uploads.mkdir()
    (uploads / "a.php").write_text(EXECUTED)
    (uploads / "a.php.txt").write_text(EXECUTED)  # an upload named to look like a script
    (uploads / "photos.php").write_text(EXECUTED)
    (uploads / "photos.php.php").mkdir()
    (uploads / "photos.php.php" / "avatar.jpg").write_text(EXECUTED)  # a "picture" holding PHP
    (uploads / "avatar.jpg").write_text(EXECUTED)
    (uploads / "avatar.jpg.PHP.txt").write_text(EXECUTED)
    (root / "server.php").write_text(
        "<?php header('Content-Type: application/json');"
        "echo json_encode(['server' => array_filter($_SERVER, 'is_string'), 'getenv' => getenv()]);")
    return root


@pytest.fixture(scope="module", params=["php_worker", "php_server"])
def site(request, start_server, docroot):
    """The docroot served by each of the two site directives."""
    return start_server(f"security-{request.param}", caddyfile=lambda port, admin: caddyfile(
        port, admin, f"\troot * {docroot}\n\t{request.param}\n"))


def test_split_path_splits_only_at_a_segment_boundary(site):
    """Advisory row 1 (CVE-2026-128025): `/uploads/a.php.txt/b.php` must not run
    uploads/a.php: the split extension counts only where it ends a path segment."""
    assert site.get("/uploads/a.php.txt/b.php").text == "INDEX"
    assert site.get("/uploads/A.PHP.txt/b.php").text == "INDEX"
    # A real split still works: a.php with PATH_INFO /b.php.
    assert site.get("/uploads/a.php/b.php").text == "EXECUTED a.php"


@pytest.mark.parametrize("path", [
    "/uploads/photos.php.php/avatar.jpg", "/uploads/avatar.jpg", "/uploads/avatar.jpg/x.php", "/uploads/avatar.jpg/.php",
    "/uploads/a.php.txt", "/uploads/avatar.jpg.PHP.txt", "/uploads/avatar.jpg%2ephp", "/uploads/avatar.jpg%2f.php",
    "/uploads/photos.php.php/", "/uploads/photos.php.php/avatar.jpg/", "/uploads/avatar.jpg::$DATA",
    "/uploads/avatar.jpg%20", "/uploads/avatar.jpg.", "/uploads/avatar.jpg%00.php",
])
def test_a_file_whose_name_does_not_end_in_php_never_runs(site, path):
    """Advisory row 2 (GHSA-j99q-3wr8-xj43): whatever the path, only a file whose name
    ends in the split extension runs as PHP; an upload holding PHP code is served as
    bytes or not at all."""
    status, _, body = raw_request(site.port, path)
    assert b"EXECUTED" not in body, (path, status, body[:200])


@pytest.fixture(scope="module")
def tenants(tmp_path_factory):
    base = tmp_path_factory.mktemp("tenants")
    for name in ("a", "b"):
        (base / "tenants" / name).mkdir(parents=True)
        (base / "tenants" / name / "index.php").write_text(f"<?php echo 'TENANT {name}';")
    (base / "secret").mkdir()
    (base / "secret" / "index.php").write_text("<?php echo 'SECRET';")
    (base / "tenants" / "index.php").write_text("<?php echo 'TENANTS FOLDER';")
    return base


@pytest.mark.parametrize("query,want", [
    ("tenant=a", (200, "TENANT a")), ("tenant=b", (200, "TENANT b")), ("tenant=a/../b", (200, "TENANT b")),
    ("tenant=../secret", (400, None)), ("tenant=..%2fsecret", (400, None)), ("tenant=..", (400, None)),
    ("tenant=a%00", (400, None)), ("tenant=%00", (400, None)), ("tenant=a%00/../../secret", (400, None)),
    ("tenant=", (400, None)), ("tenant=a/../../secret", (400, None)),
])
def test_a_placeholder_root_stays_in_its_folder(start_server, tenants, query, want):
    """Advisory row 3 (GHSA-h69m-723r-5w86): a root built from a request placeholder
    (`{query.tenant}`) refuses a NUL byte and never leaves the folder its literal part
    names: 400 and a log line, no script run."""
    srv = start_server("security-tenants", caddyfile=lambda port, admin: caddyfile(
        port, admin, f"\tphp_worker {{\n\t\troot {tenants}/tenants/{{query.tenant}}\n\t}}\n"))
    status, _, body = raw_request(srv.port, "/?" + query)
    assert b"SECRET" not in body and b"TENANTS FOLDER" not in body, body
    assert status == want[0], (query, status, body[:200])
    if want[1] is not None:
        assert body.decode() == want[1]
    else:
        assert srv.wait_log(lambda e: e.get("msg") == "request refused" and "document root" in e.get("reason", ""))


def test_header_names_with_dots_or_underscores_never_become_cgi_variables(site):
    """Advisory row 4 (GHSA-qcrp-8483-f2f2): `Foo.Bar` and `Foo_Bar` would both map to
    HTTP_FOO_BAR and spoof `Foo-Bar`; they are dropped."""
    _, _, body = raw_request(site.port, "/server.php", b"Foo.Bar: dot\r\nFoo_Bar: underscore\r\nFoo-Bar: dash\r\n"
                             b"X_Forwarded_For: 6.6.6.6\r\n")
    server = json.loads(body)["server"]
    assert server["HTTP_FOO_BAR"] == "dash"
    assert "HTTP_X_FORWARDED_FOR" not in server


# -- HTTP/2 ---------------------------------------------------------------------------

def h2_get(port, headers, timeout=10):
    """One HTTP/2 request over cleartext (prior knowledge), with the header block as
    given, unchecked by the client: ("reset" or the status, body)."""
    import h2.config
    import h2.connection
    import h2.events
    config = h2.config.H2Configuration(client_side=True, validate_outbound_headers=False,
                                       normalize_outbound_headers=False, validate_inbound_headers=False)
    conn = h2.connection.H2Connection(config=config)
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        conn.initiate_connection()
        s.sendall(conn.data_to_send())
        stream = conn.get_next_available_stream_id()
        conn.send_headers(stream, headers, end_stream=True)
        s.sendall(conn.data_to_send())
        status, body = None, b""
        while True:
            data = s.recv(65536)
            if not data:
                return status or "closed", body
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived):
                    status = int(dict(event.headers)[b":status"])
                elif isinstance(event, h2.events.DataReceived):
                    body += event.data
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.StreamEnded):
                    return status, body
                elif isinstance(event, (h2.events.StreamReset, h2.events.ConnectionTerminated)):
                    return "reset", body
            s.sendall(conn.data_to_send())


def test_an_http2_host_header_cannot_differ_from_authority(start_server, docroot):
    """Advisory row 5 (GHSA-2725-rh2w-9j9w): an HTTP/2 request with a `host` header
    beside `:authority` is refused, or the script sees the host the request was routed
    by, never the other."""
    srv = start_server("security-h2", caddyfile=lambda port, admin: caddyfile(
        port, admin, f"\troot * {docroot}\n\tphp_worker\n", servers="\tservers {\n\t\tprotocols h1 h2 h2c\n\t}\n"))
    plain = [(":method", "GET"), (":scheme", "http"), (":authority", "good.test"), (":path", "/server.php")]
    status, body = h2_get(srv.port, plain)
    assert status == 200 and json.loads(body)["server"]["HTTP_HOST"] == "good.test", (status, body[:300])
    status, body = h2_get(srv.port, plain + [("host", "evil.test")])
    if status == 200:
        server = json.loads(body)["server"]
        assert (server["HTTP_HOST"], server["SERVER_NAME"]) == ("good.test", "good.test"), server
    else:
        assert status in ("reset", 400), status
    assert b"evil.test" not in body


# -- The directory redirect -------------------------------------------------------------

@pytest.mark.parametrize("target", [
    "//evil.example/%2e%2e/blog", "//evil.example/..%2fblog", "///evil.example/../blog", "//evil.example/../blog",
    "/%2fevil.example/../blog", "/\\evil.example/../blog", "/%5cevil.example/%2e%2e/blog", "/./blog", "//blog",
])
def test_the_directory_redirect_never_leaves_the_site(site, target):
    """Advisory row 6 (GHSA-jvmv-5538-pqpg): a directory holding the index redirects to
    its slash form, named as resolved, never as the client wrote it: `//evil.example/...`
    echoed back is a link a browser follows to another host."""
    status, headers, _ = raw_request(site.port, target)
    assert status == 308, (target, status, headers)
    location = headers["location"]
    assert location == "/blog/", (target, location)


def test_the_directory_redirect_keeps_the_query(site):
    status, headers, _ = raw_request(site.port, "/blog?a=1&b=%2F%2Fx")
    assert (status, headers["location"]) == (308, "/blog/?a=1&b=%2F%2Fx")


# -- Request bodies and the queue ------------------------------------------------------------

def test_a_slow_request_body_holds_no_php_thread(start_server, tmp_path):
    """Advisory row 7 (GHSA-j45x-h238-h4xx): a client that sends its body slowly never
    holds a PHP thread: the body is read in Go before PHP runs, and request_body_timeout
    ends it with 408. With one PHP thread, other requests are served meanwhile."""
    (tmp_path / "hello.php").write_text("<?php echo 'hello';")
    (tmp_path / "form.php").write_text("<?php echo 'form ', count($_POST);")
    srv = start_server("security-slow-body", caddyfile=lambda port, admin: caddyfile(
        port, admin, f"\troot * {tmp_path}\n\tphp_worker {{\n\t\trequest_body_timeout 2s\n\t}}\n", threads=1))
    answers = []
    stalled = [threading.Thread(target=lambda: answers.append(
        send_stalled_body(srv, "POST", "/form.php", "application/x-www-form-urlencoded"))) for _ in range(3)]
    for t in stalled:
        t.start()
    time.sleep(0.5)  # the three bodies have stalled
    began = time.monotonic()
    assert srv.get("/hello.php", timeout=5).text == "hello"
    assert time.monotonic() - began < 1.5, "the only PHP thread was free while three bodies stalled"
    for t in stalled:
        t.join(15)
    assert len(answers) == 3 and all(a.startswith(b"HTTP/1.1 408 ") for a in answers), [a[:40] for a in answers]


COUNT = "<?php file_put_contents(__DIR__ . '/ran.log', $_GET['n'] . \"\\n\", FILE_APPEND); echo 'counted';"


@pytest.mark.parametrize("processes", [1, 2])
def test_a_queued_request_whose_client_left_never_runs(start_server, tmp_path, processes):
    """Advisory row 8 (CVE-2026-128022): with every PHP thread busy, 20 clients send a
    request and close the connection while it waits in the queue: none of the 20 scripts
    runs afterwards; each is withdrawn with a log line and counted in
    php_worker_requests_withdrawn_total{reason="client_gone"}. In child processes too."""
    (tmp_path / "count.php").write_text(COUNT)
    (tmp_path / "sleep.php").write_text("<?php usleep(1500000); echo 'slept';")
    extra = "\t\tprocesses 2" if processes == 2 else ""
    srv = start_server(f"security-queue-{processes}", caddyfile=lambda port, admin: caddyfile(
        port, admin, f"\troot * {tmp_path}\n\tphp_worker\n", global_extra=extra, threads=processes))
    sleepers = [threading.Thread(target=lambda: srv.get("/sleep.php", timeout=30)) for _ in range(processes)]
    for t in sleepers:
        t.start()
    time.sleep(0.4)  # every thread sleeps
    for n in range(20):
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
        s.sendall(f"GET /count.php?n={n} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
        s.close()
    for t in sleepers:
        t.join()
    withdrawn = srv.wait_log(lambda e: "client left while the request waited" in e.get("msg", ""), timeout=10, count=20)
    assert len(withdrawn) == 20, len(withdrawn)
    time.sleep(0.3)
    assert not (tmp_path / "ran.log").exists(), (tmp_path / "ran.log").read_text()
    assert metric(srv, "php_worker_requests_withdrawn_total", {"reason": "client_gone"}) == 20
    assert srv.get("/count.php?n=after").text == "counted"
    assert (tmp_path / "ran.log").read_text() == "after\n"


# -- Worker mode: a fatal error at request startup -------------------------------------------

def test_a_fatal_error_at_worker_request_startup_is_answered(start_server, tmp_path):
    """Advisory row 9 (CVE-2026-128018): PHP fails while it starts a worker request (a
    form too large for memory_limit, parsed before the handler runs): the request is
    answered 500 at once, never left hanging, and the worker serves the next request."""
    (tmp_path / "w.php").write_text("<?php while (frankenphp_handle_request(function () { echo 'fields ', count($_POST); })) {}")
    srv = start_server("security-startup-fatal", caddyfile=lambda port, admin: caddyfile(
        port, admin, f"\troot * {tmp_path}\n\tphp_worker {{\n\t\tworker {tmp_path}/w.php 1\n\t}}\n",
        global_extra="\t\tphp_ini memory_limit 16M\n\t\tphp_ini post_max_size 64M\n\t\tphp_ini max_input_vars 1000000"))
    assert srv.post_early_answer("/w.php", b"a=1", {"Content-Type": "application/x-www-form-urlencoded"})[1].endswith("fields 1")
    form = b"&".join(b"f%d=%d" % (i, i) for i in range(400_000))
    began = time.monotonic()
    status, text = srv.post_early_answer("/w.php", form, {"Content-Type": "application/x-www-form-urlencoded"}, timeout=20)
    assert status == 500, text[:300]
    assert time.monotonic() - began < 15
    assert eventually(lambda: srv.get("/w.php", resend=True).text == "fields 0", timeout=10)


# -- Worker mode: PHP bails out while the request's state is reset ---------------------------------

BAILING_SESSION_WORKER = """<?php
// A user session save handler whose write fails as ?how= says: PHP writes the session
// as the request ends, in the reset between two worker requests.
class Bailing implements SessionHandlerInterface {
    public function open($path, $name): bool { return true; }
    public function close(): bool { return true; }
    public function read($id): string|false { return ''; }
    public function write($id, $data): bool {
        match ($_GET['how'] ?? '') {
            'exit' => exit(3),
            'fatal' => undefined_function_in_write(),
            'memory' => str_repeat('x', 64 << 20),
            default => null,
        };
        return true;
    }
    public function destroy($id): bool { return true; }
    public function gc($max): int|false { return 0; }
}
session_set_save_handler(new Bailing(), true);
$boot = bin2hex(random_bytes(4));
while (frankenphp_handle_request(function () use ($boot) {
    session_id('s' . bin2hex(random_bytes(4)));
    session_start();
    $_SESSION['n'] = 1;
    echo 'boot=' . $boot;
})) {
    gc_collect_cycles();
}
"""


@pytest.mark.parametrize("how", ["exit", "fatal", "memory"])
def test_a_bailout_while_the_worker_request_ends_leaves_the_server_serving(start_server, tmp_path, how):
    """PHP bails out (exit, a fatal error, memory_limit) inside a session save handler it
    runs as the worker request ends, in the reset before the next one: the response
    already given stands, the worker starts again, and every later request is served."""
    (tmp_path / "w.php").write_text(BAILING_SESSION_WORKER)
    srv = start_server(f"security-reset-bailout-{how}", caddyfile=lambda port, admin: caddyfile(
        port, admin, f"\troot * {tmp_path}\n\tphp_worker {{\n\t\tworker {tmp_path}/w.php 1\n\t}}\n",
        global_extra="\t\tphp_ini memory_limit 32M"))
    first = srv.get("/w.php")
    assert first.status == 200 and first.text.startswith("boot="), first.text[:300]
    r = srv.get(f"/w.php?how={how}", resend=True)
    assert r.status in (200, 500), (r.status, r.text[:300])
    answers = [srv.get("/w.php", resend=True) for _ in range(5)]
    assert all(a.status == 200 and a.text.startswith("boot=") for a in answers), [(a.status, a.text[:200]) for a in answers]
    assert srv.threads()["threads"], "the server runs"
    assert srv.stop() == 0


# -- Header names under connection resets ----------------------------------------------------------

def test_unseen_header_names_with_connection_resets_do_not_crash(start_server, tmp_path):
    """Advisory row 10 (GHSA-5f4m-ff4w-g458): requests carrying header names never seen
    before, whose connections are reset while PHP reads them, in classic and worker mode:
    the server serves on."""
    (tmp_path / "headers.php").write_text("<?php usleep(20000); echo count(getallheaders());")
    (tmp_path / "w.php").write_text("<?php while (frankenphp_handle_request(function () { usleep(20000); echo count(getallheaders()); })) {}")
    srv = start_server("security-header-resets", caddyfile=lambda port, admin: caddyfile(
        port, admin, f"\troot * {tmp_path}\n\tphp_worker {{\n\t\tworker {{\n\t\t\tfile {tmp_path}/w.php\n\t\t\tnum 2\n"
        "\t\t\tmatch /w\n\t\t}\n\t}\n", threads=4))
    for i in range(150):
        names = "".join(f"X-{uuid.uuid4().hex}-{j}: v{j}\r\n" for j in range(30))
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # close sends RST
        s.sendall(f"GET {'/w' if i % 2 else '/headers.php'} HTTP/1.1\r\nHost: t\r\n{names}\r\n".encode())
        if i % 3 == 0:
            time.sleep(0.025)  # reset while PHP runs
        s.close()
    assert srv.proc.poll() is None, srv.log_text()[-3000:]
    assert srv.get("/headers.php").status == 200 and srv.get("/w").status == 200


# -- frankenphp_log() -------------------------------------------------------------------------

HOSTILE_LOG = r"""<?php
$self = ['a' => 1];
$self['me'] = &$self;
$obj = new stdClass();
$obj->me = $obj;
$deep = [];
$cur = &$deep;
for ($i = 0; $i < 5000; $i++) { $cur['d'] = []; $cur = &$cur['d']; }
unset($cur);
$contexts = [
    'recursive array' => $self,
    'recursive object' => ['o' => $obj],
    'deep' => $deep,
    'resource' => ['r' => fopen('php://memory', 'r')],
    'closure' => ['f' => function () {}],
    'floats' => ['inf' => INF, 'nan' => NAN, '-0' => -0.0],
    'bad utf-8' => ["\xff\xfe" => "\xc3\x28", 'k' => "\x00\x01"],
    'int keys' => [PHP_INT_MAX => 1, -1 => 2, 0 => 3],
    'huge' => ['big' => str_repeat('x', 2_000_000)],
    'many' => array_fill(0, 100000, 'v'),
    'nested objects' => ['o' => new ArrayObject([new ArrayIterator([1, 2])])],
    'generator' => ['g' => (function () { yield 1; })()],
    'enum-like' => ['e' => new DateTimeZone('UTC')],
];
foreach ($contexts as $name => $context) {
    try {
        frankenphp_log("hostile $name {$_GET['tag']}", FRANKENPHP_LOG_LEVEL_WARN, $context);
    } catch (Throwable $e) {
        echo get_class($e), ' ';
    }
}
frankenphp_log("level " . $_GET['tag'], PHP_INT_MAX, []);
frankenphp_log("level " . $_GET['tag'], PHP_INT_MIN, []);
echo 'done';
"""


@pytest.mark.parametrize("mode", ["classic", "worker"])
def test_frankenphp_log_with_hostile_contexts_never_crashes(start_server, tmp_path, mode):
    """Advisory row 11 (CVE-2026-128024): frankenphp_log() with contexts that recurse,
    nest 5,000 deep, hold resources, closures, invalid UTF-8, NaN, 2 MB strings or
    100,000 entries, and levels out of range: each is logged or refused with an
    exception, and the server serves on."""
    (tmp_path / "log.php").write_text(HOSTILE_LOG)
    (tmp_path / "w.php").write_text("<?php while (frankenphp_handle_request(function () { require __DIR__ . '/log.php'; })) {}")
    worker = f"\t\tworker {{\n\t\t\tfile {tmp_path}/w.php\n\t\t\tnum 1\n\t\t\tmatch /log.php\n\t\t}}\n" if mode == "worker" else ""
    srv = start_server(f"security-log-{mode}", caddyfile=lambda port, admin: caddyfile(
        port, admin, f"\troot * {tmp_path}\n\tphp_worker {{\n{worker}\t}}\n",
        global_extra="\t\tphp_ini memory_limit 256M"))
    tag = uuid.uuid4().hex
    r = srv.get(f"/log.php?tag={tag}", timeout=60)
    assert r.status == 200 and r.text.endswith("done"), r.text[:500]
    assert srv.proc.poll() is None
    assert srv.wait_log(lambda e: e.get("msg") == f"hostile int keys {tag}")
    assert srv.get(f"/log.php?tag=again{tag}", timeout=60).text.endswith("done")


# -- The environment ----------------------------------------------------------------------------

PUTENV_SLOW = r"""<?php
putenv('PW_SECRET=client-a-' . $_GET['tag']);
touch(__DIR__ . '/putenv.started');
usleep(800000);
echo getenv('PW_SECRET');
"""
GETENV = r"""<?php
header('Content-Type: application/json');
echo json_encode([
    'getenv' => getenv('PW_SECRET'),
    'server' => $_SERVER['PW_SECRET'] ?? null,
    'env' => $_ENV['PW_SECRET'] ?? null,
    'child' => trim((string) shell_exec('printenv PW_SECRET')),
    'proc_open' => (function () {
        $p = proc_open(['printenv', 'PW_SECRET'], [1 => ['pipe', 'w']], $pipes);
        $out = stream_get_contents($pipes[1]);
        proc_close($p);
        return trim($out);
    })(),
]);
"""


@pytest.mark.parametrize("mode", ["classic", "worker"])
def test_putenv_stays_in_its_thread_and_its_request(start_server, tmp_path, mode):
    """Advisory row 12 (GHSA-996f-w38m-f574): putenv() in one request is seen by its own
    script (and the programs it starts), never by a request running on another thread nor
    its programs, nor by the next request on the same thread."""
    (tmp_path / "put.php").write_text(PUTENV_SLOW)
    (tmp_path / "get.php").write_text(GETENV)
    (tmp_path / "w.php").write_text("<?php while (frankenphp_handle_request(function () { require __DIR__ . '/' . basename($_GET['script']); })) {}")
    worker = (f"\t\tworker {{\n\t\t\tfile {tmp_path}/w.php\n\t\t\tnum 2\n\t\t\tmatch /w\n\t\t}}\n") if mode == "worker" else ""
    srv = start_server(f"security-putenv-{mode}", caddyfile=lambda port, admin: caddyfile(
        port, admin, f"\troot * {tmp_path}\n\tphp_worker {{\n{worker}\t}}\n", threads=3 if mode == "worker" else 2))
    put, get = ("/put.php", "/get.php") if mode == "classic" else ("/w?script=put.php", "/w?script=get.php")
    tag = uuid.uuid4().hex
    result = []
    slow = threading.Thread(target=lambda: result.append(srv.get(f"{put}{'&' if '?' in put else '?'}tag={tag}").text))
    slow.start()
    assert eventually((tmp_path / "putenv.started").exists)
    during = srv.get(get).json()  # on the other thread, while the first one runs
    slow.join()
    assert result == [f"client-a-{tag}"], "the script sees its own putenv()"
    empty = {"getenv": False, "server": None, "env": None, "child": "", "proc_open": ""}
    assert during == empty, during
    for _ in range(4):  # both threads, after the request that called putenv() ended
        assert srv.get(get).json() == empty


PUTENV_LATE = r"""<?php
final class Late { public function __destruct() { putenv('PW_DESTRUCT=' . str_repeat('d', 64)); $kept = getenv('PW_DESTRUCT'); putenv('PW_DESTRUCT=' . strrev($kept)); } }
final class Handler implements SessionHandlerInterface {
    public function open(string $p, string $n): bool { putenv('PW_SESSION_OPEN=x'); return true; }
    public function close(): bool { putenv('PW_SESSION_CLOSE=' . str_repeat('c', 64)); return true; }
    public function read(string $id): string|false { return ''; }
    public function write(string $id, string $data): bool { putenv('PW_SESSION_WRITE=' . $data); return true; }
    public function destroy(string $id): bool { return true; }
    public function gc(int $max): int|false { return 0; }
}
function handle() {
    if (isset($_GET['read'])) {
        header('Content-Type: application/json');
        echo json_encode(array_map(fn ($n) => getenv($n), ['PW_DESTRUCT', 'PW_SESSION_OPEN', 'PW_SESSION_CLOSE', 'PW_SESSION_WRITE', 'PW_SHUTDOWN']));
        return;
    }
    session_set_save_handler(new Handler(), false);
    session_start();
    $_SESSION['x'] = str_repeat('s', 100);
    $GLOBALS['late'] = new Late();
    if (!isset($_SERVER['FRANKENPHP_WORKER'])) {
        register_shutdown_function(function () { putenv('PW_SHUTDOWN=' . str_repeat('u', 64)); });
    }
    echo 'set';
}
if (isset($_SERVER['FRANKENPHP_WORKER']) && !isset($_GET['read']) && !isset($_GET['set'])) {
    while (frankenphp_handle_request(function () { handle(); unset($GLOBALS['late']); })) {}
} else {
    handle();
}
"""


@pytest.mark.parametrize("mode", ["classic", "worker"])
def test_putenv_from_destructors_shutdown_functions_and_session_handlers(start_server, tmp_path, mode):
    """Advisory row 13 (GHSA-rgpj-f2qx-xwhf): putenv() called while a request ends (a
    destructor, a shutdown function, a session save handler's write and close, which run
    during the request's shutdown) neither crashes nor leaves its value to the next
    request; getenv() during that shutdown reads a value that stays valid."""
    (tmp_path / "late.php").write_text(PUTENV_LATE)
    worker = (f"\t\tworker {{\n\t\t\tfile {tmp_path}/late.php\n\t\t\tnum 1\n\t\t\tmatch /w\n\t\t}}\n") if mode == "worker" else ""
    srv = start_server(f"security-putenv-late-{mode}", caddyfile=lambda port, admin: caddyfile(
        port, admin, f"\troot * {tmp_path}\n\tphp_worker {{\n{worker}\t}}\n", threads=2))
    path = "/late.php" if mode == "classic" else "/w"
    for _ in range(5):
        assert srv.get(path).text == "set"
        assert srv.get(path + "?read=1").json() == [False] * 5
    assert srv.proc.poll() is None


JIT_GETENV = r"""<?php
function probe(int $n): string {
    $bad = 0;
    for ($i = 0; $i < $n; $i++) {
        $v = getenv('FROM_CONFIG');
        if ($v !== 'configured') { $bad++; }
        if ($i % 500 === 0) { putenv("PW_JIT_$i=" . str_repeat('j', $i % 97)); $w = getenv("PW_JIT_$i"); if (strlen($w) !== $i % 97) { $bad++; } }
        $all = $i % 5000 === 0 ? getenv() : null;
        if ($all !== null && ($all['FROM_CONFIG'] ?? null) !== 'configured') { $bad++; }
    }
    return "bad=$bad";
}
"""


@pytest.mark.parametrize("mode", ["classic", "worker"])
def test_getenv_under_the_jit_reads_values_that_stay_valid(start_server, tmp_path, mode):
    """Advisory row 14 (GHSA-2v8j-j26h-cpx5): with OPcache's JIT on (tracing, hot loops
    compiled), getenv() in a loop beside putenv() always returns the right value, in
    classic and worker mode, and the server serves on."""
    (tmp_path / "jit.php").write_text(JIT_GETENV + "echo probe(100000), ' ', opcache_get_status(false)['jit']['on'] ? 'jit' : 'nojit';")
    (tmp_path / "w.php").write_text(JIT_GETENV + "while (frankenphp_handle_request(function () { echo probe(100000), ' ', opcache_get_status(false)['jit']['on'] ? 'jit' : 'nojit'; })) {}")
    worker = (f"\t\tworker {{\n\t\t\tfile {tmp_path}/w.php\n\t\t\tnum 2\n\t\t\tmatch /w\n\t\t}}\n") if mode == "worker" else ""
    srv = start_server(f"security-jit-{mode}", caddyfile=lambda port, admin: caddyfile(
        port, admin, f"\troot * {tmp_path}\n\tphp_worker {{\n\t\tenv FROM_CONFIG configured\n{worker}\t}}\n",
        global_extra="\t\tphp_ini opcache.enable 1\n\t\tphp_ini opcache.jit tracing\n\t\tphp_ini opcache.jit_buffer_size 32M\n"
                     "\t\tphp_ini opcache.jit_hot_loop 1\n\t\tphp_ini opcache.jit_hot_func 1", threads=3))
    path = "/jit.php" if mode == "classic" else "/w"
    for _ in range(4):
        assert srv.get(path, timeout=60).text == "bad=0 jit"


ENV_PROBE = r"""<?php
header('Content-Type: application/json');
echo json_encode(['getenv' => getenv('TENANT_TOKEN'), 'server' => $_SERVER['TENANT_TOKEN'] ?? null,
                  'env' => $_ENV['TENANT_TOKEN'] ?? null, 'all' => getenv()['TENANT_TOKEN'] ?? null]);
"""


@pytest.mark.parametrize("mode", ["classic", "worker"])
def test_a_per_request_env_value_is_gone_from_the_next_request(start_server, tmp_path, mode):
    """Advisory row 15 (CVE-2026-128019): `env` values built from request placeholders
    (a header here) are the request's own: the next request on the same thread, which
    does not carry the header, sees none of it through getenv(), $_SERVER or $_ENV."""
    (tmp_path / "env.php").write_text(ENV_PROBE)
    (tmp_path / "w.php").write_text("<?php $e = $_ENV; while (frankenphp_handle_request(function () { require __DIR__ . '/env.php'; })) {}")
    worker = (f"\t\tworker {{\n\t\t\tfile {tmp_path}/w.php\n\t\t\tnum 1\n\t\t\tmatch /w\n\t\t}}\n") if mode == "worker" else ""
    srv = start_server(f"security-request-env-{mode}", caddyfile=lambda port, admin: caddyfile(
        port, admin, f"\troot * {tmp_path}\n\tphp_worker {{\n\t\tenv TENANT_TOKEN {{header.X-Tenant-Token}}\n{worker}\t}}\n",
        global_extra="\t\tphp_ini variables_order EGPCS", threads=2))
    path = "/env.php" if mode == "classic" else "/w"
    secret = "client-a-" + uuid.uuid4().hex
    first = srv.get(path, headers={"X-Tenant-Token": secret}).json()
    assert first["getenv"] == secret and first["server"] == secret, first
    second = srv.get(path).json()
    assert secret not in json.dumps(second), second
    assert second["getenv"] in ("", False) and second["server"] in ("", None), second


# -- Worker requests reset as PHP's request shutdown resets -----------------------------------------

class Backend(http.server.BaseHTTPRequestHandler):
    """An HTTP backend a script fetches: its response carries another client's cookie."""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Set-Cookie", "backend_session=client-a-secret-cookie")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def backend():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Backend)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()


def state_server(start_server, name, boot=False):
    env = "\t\t\tenv BOOT 1\n" if boot else ""
    return start_server(name, caddyfile=lambda port, admin: caddyfile(
        port, admin, f"\troot * {SECURITY}\n\tphp_worker {{\n\t\tworker {{\n\t\t\tfile {SECURITY}/state.php\n\t\t\tnum 1\n"
        f"\t\t\tmatch /state\n{env}\t\t}}\n\t}}\n", threads=2))


@pytest.fixture(scope="module")
def state(start_server):
    return state_server(start_server, "security-state")


def read_state(srv):
    r = srv.get("/state?read=1")
    assert r.status == 200, r.text
    return r


# Every piece of state tests/e2e/security/state.php sets, with its reader.
PROBES = ["libxml_errors", "last_response_headers", "error_get_last", "ini_set", "error_reporting", "locale", "timezone",
          "set_time_limit", "ignore_user_abort", "output_handlers", "session", "putenv", "strtok", "umask", "mt_srand",
          "mbstring", "bcscale", "json_error", "preg_error", "openssl_errors", "header_callback", "stat_cache",
          "intl_error", "cwd"]


@pytest.mark.parametrize("probe", PROBES)
def test_worker_request_state_is_reset_between_requests(state, backend, probe):
    """Advisory rows 16-18 and the class behind them (CVE-2026-128021, CVE-2026-122233):
    what a worker request sets in the engine or an extension (libxml's error list, the
    last HTTP response headers, error_get_last(), ini_set(), the locale, the timezone,
    the session, putenv(), ...) is gone from the next request on the same thread, which
    reads the state a fresh worker request reads. docs/security.md has the table."""
    fresh = read_state(state)
    assert state.get(f"/state?set={probe}&url={backend}").status == 200
    after = read_state(state)
    assert "client-a" not in after.text, after.text
    assert not after.headers_all("X-Client-A")
    want, got = fresh.json()["state"], after.json()["state"]
    if probe == "mt_srand":
        # Seeded with 42 by the request before, the generator would go on with the seed's
        # sequence (mt.php computes its next value); a fresh request's is seeded anew.
        assert got["mt_srand"] != int(state.get("/mt.php").text), got
    want.pop("mt_srand"), got.pop("mt_srand")
    assert got == want, {k: (want[k], got[k]) for k in want if want[k] != got.get(k)}


def test_every_extension_with_request_hooks_is_known_to_worker_mode(state):
    """The reset above is a table of every extension whose request hooks PHP runs
    (rust-core/csrc/worker_reset.c): one the table does not know, as a new PHP version
    or extension can bring, gets a warning at engine start, and fails this test."""
    read_state(state)
    unknown = [e["msg"] for e in state.log_entries() if "worker mode does not know" in e.get("msg", "")]
    assert not unknown, unknown


def test_libxml_errors_do_not_cross_worker_requests(state):
    """Advisory row 16 (GHSA-4gfw-9v29-gp9h): a request that turns libxml's internal
    errors on and parses a broken document; the next request, another client's, reads no
    fragment of it through libxml_get_errors(), and internal errors are off again."""
    assert state.get("/state?set=libxml_errors").status == 200
    libxml = read_state(state).json()["state"]["libxml_errors"]
    assert libxml == [False, []], libxml


def test_the_last_response_headers_do_not_cross_worker_requests(state, backend):
    """Advisory row 17 (GHSA-pmvg-8483-mw84): a request fetches a URL; the next request
    reads no header of that response through http_get_last_response_headers()."""
    if php_version() < (8, 4):
        pytest.skip("http_get_last_response_headers() is PHP 8.4's")
    assert state.get(f"/state?set=last_response_headers&url={backend}").status == 200
    assert read_state(state).json()["state"]["last_response_headers"] is None


def test_state_the_worker_set_before_its_loop_is_kept(start_server, backend):
    """What the worker script set before its first frankenphp_handle_request() (ini
    values, the timezone, the locale, mbstring's encoding, bcmath's scale, libxml's
    internal errors, putenv(), the time limit, the umask) is its own: requests that change
    it find it back as the script left it."""
    srv = state_server(start_server, "security-state-boot", boot=True)
    fresh = read_state(srv).json()["state"]
    assert fresh["ini_set"][0] == "7" and fresh["timezone"] == "Europe/Paris" and fresh["bcscale"] == 3, fresh
    assert fresh["locale"][0].startswith("C.UTF-8") and fresh["mbstring"][0] == "ISO-8859-1", fresh
    assert fresh["libxml_errors"] == [True, []] and fresh["putenv"] == [False, "from-boot"], fresh
    assert (fresh["set_time_limit"], fresh["umask"]) == ("17", "27"), fresh
    for probe in PROBES:
        assert srv.get(f"/state?set={probe}&url={backend}").status == 200
        after = read_state(srv).json()["state"]
        after.pop("mt_srand")
        fresh.pop("mt_srand", None)
        assert after == fresh, (probe, {k: (fresh[k], after[k]) for k in fresh if fresh[k] != after[k]})


PERSISTENT_STREAMS = r"""<?php
$temp = new SplTempFileObject();        // php://temp
$memory = new SplTempFileObject(0);     // php://memory
$small = new SplTempFileObject(64);     // spills to a file past 64 bytes
$handle = fopen('php://temp', 'w+');
$file = new SplFileObject(tempnam(sys_get_temp_dir(), 'pw'), 'w+');
while (frankenphp_handle_request(function () use ($temp, $memory, $small, $handle, $file) {
    $line = ($_GET['n'] ?? '?') . "\n";
    $out = [];
    foreach (['temp' => $temp, 'memory' => $memory, 'small' => $small, 'file' => $file] as $name => $f) {
        $f->fwrite($line);
        $f->rewind();
        $out[$name] = '';
        while (!$f->eof()) { $out[$name] .= $f->fgets(); }
    }
    fwrite($handle, $line);
    rewind($handle);
    $out['handle'] = stream_get_contents($handle);
    header('Content-Type: application/json');
    echo json_encode($out);
})) {
    gc_collect_cycles();
}
"""


def test_streams_kept_across_worker_requests_keep_working(start_server, tmp_path):
    """Advisory row 18 (CVE-2026-128016): temporary streams a worker creates before its
    loop (SplTempFileObject in memory, in php://temp, spilled to a file; fopen('php://temp'))
    and writes in every request keep their content; the process does not crash. A
    request's php://input buffer is still freed at its end."""
    (tmp_path / "w.php").write_text(PERSISTENT_STREAMS)
    (tmp_path / "input.php").write_text(
        "<?php $n = 0; while (frankenphp_handle_request(function () use (&$n) { $n++; file_get_contents('php://input');"
        " echo count(get_resources('stream')); })) {}")
    srv = start_server("security-persistent-streams", caddyfile=lambda port, admin: caddyfile(
        port, admin, f"\troot * {tmp_path}\n\tphp_worker {{\n\t\tworker {tmp_path}/w.php 1\n\t\tworker {{\n\t\t\tfile {tmp_path}/input.php\n"
        "\t\t\tnum 1\n\t\t\tmatch /input\n\t\t}\n\t}\n", threads=3))
    want = ""
    for n in range(1, 8):
        want += f"{n}\n"
        r = srv.get(f"/w.php?n={n}")
        assert r.status == 200, r.text
        assert r.json() == dict.fromkeys(["temp", "memory", "small", "file", "handle"], want)
    assert srv.proc.poll() is None
    counts = {srv.request("/input", method="POST", body=b"x" * (100_000 + n)).text for n in range(20)}
    assert len(counts) == 1, f"php://input buffers pile up: stream counts {counts}"


def test_the_session_id_does_not_cross_worker_requests(start_server, tmp_path):
    """Advisory row 19 (GHSA-v3ph-cgqh-r8p5): a worker request starts a session; the next
    request, without the session cookie, gets neither its ID nor its data."""
    (tmp_path / "w.php").write_text(
        "<?php while (frankenphp_handle_request(function () {"
        " $before = session_id(); session_start(); $had = $_SESSION['who'] ?? null;"
        " if (isset($_GET['who'])) { $_SESSION['who'] = $_GET['who']; }"
        " header('Content-Type: application/json'); echo json_encode([$before, session_id(), $had]); })) {}")
    srv = start_server("security-session-id", caddyfile=lambda port, admin: caddyfile(
        port, admin, f"\troot * {tmp_path}\n\tphp_worker {{\n\t\tworker {tmp_path}/w.php 1\n\t}}\n", threads=2))
    first = srv.get("/w.php?who=client-a")
    before, sid, had = first.json()
    assert before == "" and sid and had is None
    second = srv.get("/w.php")
    before2, sid2, had2 = second.json()
    assert before2 == "" and sid2 != sid and had2 is None, second.json()
    again = srv.get("/w.php", headers={"Cookie": f"PHPSESSID={sid}"})
    assert again.json()[1:] == [sid, "client-a"], "the client that holds the cookie keeps its session"


def test_a_worker_match_gets_no_path_info_to_route_by(start_server, tmp_path):
    """Advisory row 20 (FrankenPHP 1.14.1's worker-match bypass): a Caddy rule refuses
    /admin*; `/x.php/admin` and `/router.php/admin` reach a worker taken by `match`, which
    sees the path as Caddy matched it and no PATH_INFO of `/admin` to route by."""
    (tmp_path / "router.php").write_text(
        "<?php while (frankenphp_handle_request(function () { header('Content-Type: application/json');"
        " echo json_encode(array_intersect_key($_SERVER, array_flip(['PATH_INFO', 'SCRIPT_NAME', 'REQUEST_URI', 'PHP_SELF'])));"
        " })) {}")
    site = (f"\troot * {tmp_path}\n\troute {{\n\t\trespond /admin* \"refused\" 403\n\t\tphp_worker {{\n\t\t\tworker {{\n"
            f"\t\t\t\tfile {tmp_path}/router.php\n\t\t\t\tnum 1\n\t\t\t\tmatch *\n\t\t\t}}\n\t\t}}\n\t}}\n")
    srv = start_server("security-worker-match", caddyfile=lambda port, admin: caddyfile(port, admin, site, threads=2))
    assert srv.get("/admin").status == 403
    for path in ("/x.php/admin", "/router.php/admin", "/router.php/admin/", "/x.php/%61dmin"):
        r = srv.get(path)
        assert r.status == 200, (path, r.status)
        server = r.json()
        assert server.get("PATH_INFO", "") == "", (path, server)
        assert server["SCRIPT_NAME"] == "/router.php" and server["PHP_SELF"] == "/router.php", (path, server)


# -- Signals ------------------------------------------------------------------------------------------

HOST_SIGNALS = [signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGPIPE,
                signal.SIGALRM, signal.SIGCHLD, signal.SIGURG, signal.SIGWINCH, signal.SIGPROF]

SELECT = r"""<?php
[$a, $b] = stream_socket_pair(STREAM_PF_UNIX, STREAM_SOCK_STREAM, STREAM_IPPROTO_IP);
touch(__DIR__ . '/select.started');
$r = [$a]; $w = $e = null;
$began = microtime(true);
$n = @stream_select($r, $w, $e, 2);
echo json_encode(['n' => $n, 'error' => error_get_last()['message'] ?? null, 'waited' => round(microtime(true) - $began, 1)]);
"""


def php_threads(pid):
    """{tid: name} of the server's PHP threads."""
    found = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
        except OSError:
            continue
        if name.startswith("php-"):
            found[int(task.name)] = name
    return found


def test_php_threads_leave_the_process_signals_to_go(start_server, tmp_path):
    """Advisory row 23 (FrankenPHP 1.13.6, #2833): PHP threads block the signals Go's
    runtime owns (its preemption signal SIGURG, SIGCHLD, the process signals), so none
    interrupts a PHP call: a stream_select() waiting 2 s on a PHP thread, whose thread is
    sent SIGURG and SIGCHLD meanwhile, waits its 2 s and returns 0."""
    (tmp_path / "select.php").write_text(SELECT)
    srv = start_server("security-signals", caddyfile=lambda port, admin: caddyfile(
        port, admin, f"\troot * {tmp_path}\n\tphp_worker\n", threads=1))
    threads = php_threads(srv.proc.pid)
    assert threads, "no PHP thread found"
    for tid, name in threads.items():
        status = Path(f"/proc/{srv.proc.pid}/task/{tid}/status").read_text()
        blocked = int(re.search(r"^SigBlk:\s*([0-9a-f]+)", status, re.M).group(1), 16)
        missing = [s.name for s in HOST_SIGNALS if not blocked & (1 << (s - 1))]
        assert not missing, f"{name} does not block {missing}"
    result = []
    t = threading.Thread(target=lambda: result.append(srv.get("/select.php", timeout=30).json()))
    t.start()
    assert eventually((tmp_path / "select.started").exists)
    time.sleep(0.2)
    libc = ctypes.CDLL(None, use_errno=True)
    tgkill = 234  # x86-64; aarch64: 131
    if os.uname().machine == "aarch64":
        tgkill = 131
    for _ in range(20):
        for tid in php_threads(srv.proc.pid):
            libc.syscall(tgkill, srv.proc.pid, tid, signal.SIGURG)
            libc.syscall(tgkill, srv.proc.pid, tid, signal.SIGCHLD)
        time.sleep(0.05)
    t.join()
    assert result and result[0]["n"] == 0 and result[0]["error"] is None and result[0]["waited"] >= 1.9, result
    assert srv.proc.poll() is None
    # pcntl_alarm() arms the process's timer (Laravel's queue:work does for each job): its
    # SIGALRM goes to a Go thread, which drops it; on a PHP thread Go would re-raise it
    # with its default action and end the process.
    (tmp_path / "alarm.php").write_text("<?php pcntl_alarm(1); usleep(1300000); echo 'alive';")
    for _ in range(3):
        assert srv.get("/alarm.php", timeout=10).text == "alive"
    assert srv.proc.poll() is None


SPAWNED_MASKS = r"""<?php
$blocked = function (string $status) {
    return preg_match('/^SigBlk:\s*([0-9a-f]+)/m', $status, $m) ? $m[1] : 'none found';
};
$out = [];
$out['shell_exec'] = $blocked(shell_exec('cat /proc/self/status'));
exec('cat /proc/self/status', $lines);
$out['exec'] = $blocked(implode("\n", $lines));
$f = popen('cat /proc/self/status', 'r');
$out['popen'] = $blocked(stream_get_contents($f));
pclose($f);
$p = proc_open(['cat', '/proc/self/status'], [1 => ['pipe', 'w']], $pipes);
$out['proc_open'] = $blocked(stream_get_contents($pipes[1]));
proc_close($p);
$p = proc_open('cat /proc/self/status', [1 => ['pipe', 'w']], $pipes);
$out['proc_open_shell'] = $blocked(stream_get_contents($pipes[1]));
proc_close($p);
// What the mask decides: proc_terminate()'s SIGTERM ends the program.
$p = proc_open(['sleep', '30'], [], $pipes);
proc_terminate($p);
$began = microtime(true);
while (($st = proc_get_status($p))['running'] && microtime(true) - $began < 5) {
    usleep(10000);
}
$out['terminated'] = ['running' => $st['running'], 'termsig' => $st['termsig']];
// A stream to a program's input, and its exit status through pclose().
$f = popen('cat > /dev/null; exit 3', 'w');
fwrite($f, 'x');
$out['pclose'] = pclose($f);
// fork() (proc_open() before PHP 8.3 forks, then execs): the child takes SIGTERM's
// default action, here while it sleeps.
$pid = pcntl_fork();
if ($pid === 0) {
    usleep(10000000);
    posix_kill(posix_getpid(), SIGKILL);
}
posix_kill($pid, SIGTERM);
$began = microtime(true);
while (pcntl_waitpid($pid, $status, WNOHANG) === 0) {
    if (microtime(true) - $began > 5) {
        posix_kill($pid, SIGKILL);
        pcntl_waitpid($pid, $status);
        break;
    }
    usleep(10000);
}
$out['forked'] = pcntl_wifsignaled($status) ? pcntl_wtermsig($status) : 'exited';
echo json_encode($out);
"""


@pytest.mark.parametrize("processes", [1, 2])
def test_programs_a_script_starts_get_no_blocked_signal(start_server, tmp_path, processes):
    """PHP threads block the signals Go's runtime takes (the test above). A program a
    script starts must not inherit that mask: with SIGTERM blocked, proc_terminate(),
    `timeout` and a plain kill could never end it. Each way PHP starts a program
    (shell_exec, exec, popen, proc_open with an argv and with a shell command) gives an
    empty mask; proc_terminate() ends a sleep by SIGTERM, pclose() returns the program's
    exit status, and a fork()ed child (PHP 8.2's proc_open() forks) takes SIGTERM's
    default action. In one process and in child processes."""
    (tmp_path / "spawn.php").write_text(SPAWNED_MASKS)
    extra = "\t\tprocesses 2" if processes == 2 else ""
    srv = start_server(f"security-spawn-{processes}", caddyfile=lambda port, admin: caddyfile(
        port, admin, f"\troot * {tmp_path}\n\tphp_worker\n", global_extra=extra, threads=processes))
    got = srv.get("/spawn.php", timeout=30).json()
    masks = {how: got[how] for how in ("shell_exec", "exec", "popen", "proc_open", "proc_open_shell")}
    assert all(int(mask, 16) == 0 for mask in masks.values()), masks
    assert got["terminated"] == {"running": False, "termsig": signal.SIGTERM}, got["terminated"]
    assert got["pclose"] == 3, got["pclose"]
    assert got["forked"] == signal.SIGTERM, got["forked"]
    # A script that dies on its memory_limit with a popen() stream open: PHP closes the
    # stream at the request's end, which waits for its program (no zombie is left), and
    # the next scripts start programs as before.
    (tmp_path / "bail.php").write_text("<?php ini_set('memory_limit', '16M'); $f = popen('sleep 0.2; echo x', 'r');"
                                       " $a = str_repeat('x', 64 << 20); echo 'unreachable';")
    assert srv.get("/bail.php", timeout=30).status == 500
    time.sleep(0.5)  # past the program's end, had nothing waited for it
    pids = [srv.proc.pid] + [int(p) for p in subprocess.run(["pgrep", "-P", str(srv.proc.pid)], capture_output=True,
                                                            text=True).stdout.split()]
    zombies = [p for p in pids for child in subprocess.run(["pgrep", "-P", str(p)], capture_output=True,
                                                             text=True).stdout.split()
               if Path(f"/proc/{child}/stat").exists() and Path(f"/proc/{child}/stat").read_text().split(") ")[1][0] == "Z"]
    assert not zombies, f"programs of a script that bailed out left as zombies under {zombies}"
    again = srv.get("/spawn.php", timeout=30).json()
    assert int(again["popen"], 16) == 0 and again["pclose"] == 3, again


# -- Autoscaling against a cgroup's memory limit ----------------------------------------------------------

def test_max_threads_auto_stays_within_the_cgroups_memory_limit(tmp_path):
    """Advisory row 24 (FrankenPHP 1.14.1): `max_threads auto` divides the memory limit of
    the cgroup the server runs in (v1 here; v2 by the same walk, see go-module's unit
    test), not the machine's memory: 1 GiB with a memory_limit of 128M allows 6 threads."""
    from conftest import CADDY, WORK, free_port, Server
    memory = Path("/sys/fs/cgroup/memory")
    unified = Path("/sys/fs/cgroup/cgroup.controllers")
    if unified.exists() and "memory" in unified.read_text():
        base = Path("/sys/fs/cgroup")
        group = base / f"php_worker_test_{os.getpid()}"
        limit_file, procs = "memory.max", "cgroup.procs"
    elif memory.is_dir() and os.access(memory, os.W_OK):
        own = next(line.split(":", 2)[2] for line in Path("/proc/self/cgroup").read_text().splitlines()
                   if "memory" in line.split(":")[1].split(","))
        group = memory / own.lstrip("/") / f"php_worker_test_{os.getpid()}"
        limit_file, procs = "memory.limit_in_bytes", "cgroup.procs"
    else:
        pytest.skip("no writable memory cgroup controller")
    group.mkdir()
    try:
        (group / limit_file).write_text(str(1 << 30))
        port, admin = free_port(), free_port()
        workdir = WORK / "security-cgroup"
        workdir.mkdir(parents=True, exist_ok=True)
        text = caddyfile(port, admin, f"\troot * {tmp_path}\n\tphp_worker\n",
                         global_extra="\t\tmax_threads auto\n\t\tphp_ini memory_limit 128M")
        wrapper = workdir / "in-cgroup.sh"
        wrapper.write_text(f"#!/bin/sh\necho $$ > {group / procs}\nexec {CADDY} \"$@\"\n")
        wrapper.chmod(0o755)
        import conftest
        saved = conftest.CADDY
        conftest.CADDY = wrapper
        try:
            srv = Server("security-cgroup", text, port, admin, workdir)
        finally:
            conftest.CADDY = saved
        try:
            chosen = srv.wait_log(lambda e: e.get("msg", "").startswith("max_threads auto"))
            assert chosen, srv.log_text()[-2000:]
            assert chosen[0]["max_threads"] == 6, chosen[0]
        finally:
            srv.stop()
    finally:
        for _ in range(50):
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)
