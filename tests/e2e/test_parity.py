"""Behaviours where php_worker answered otherwise than FrankenPHP on FrankenPHP's own test
fixtures, each php_worker's bug: the same PHP code must behave the same on both servers."""

import json
import socket
import subprocess
import threading
import time

import pytest

from conftest import CADDY, eventually, make_caddyfile, send_stalled_body

COUNTER = """<?php
$count = 0;
while (frankenphp_handle_request(function () use (&$count) {
    $count++;
    echo 'requests:', $count;
})) {
}
"""

# A webhook receiver: its sender gives up once it runs, the work must still be done.
WEBHOOK = """<?php
ignore_user_abort(true);
touch(__DIR__ . '/webhook.started');
$body = file_get_contents('php://input');
usleep(300000); // the server has seen the client leave by now
echo 'received';
flush();
file_put_contents(__DIR__ . '/webhook.log', $body . ' aborted=' . connection_aborted() . "\\n", FILE_APPEND);
"""


def send_and_close_once(srv, data, started):
    """Sends a whole request and closes the connection without reading the answer, once
    the script has started (the file `started` exists): a request its client leaves while
    it waits for a PHP thread is withdrawn instead (tests/e2e/test_security.py)."""
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
    s.sendall(data)
    assert eventually(started.exists, timeout=10), "the script started"
    s.close()


def test_a_request_whose_client_leaves_while_it_runs_still_runs(start_server, tmp_path):
    """A running request goes on when its client closes the connection (a webhook whose
    sender times out, a beacon): the POST's script reads its body and sees
    connection_aborted()."""
    (tmp_path / "webhook.php").write_text(WEBHOOK)
    srv = start_server("client-leaves-at-once", threads=3, app=tmp_path, site_extra="")
    body = b"event=paid&id=42"
    send_and_close_once(srv, b"POST /webhook.php HTTP/1.1\r\nHost: t\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                        b"Content-Length: %d\r\n\r\n%s" % (len(body), body), tmp_path / "webhook.started")
    log = tmp_path / "webhook.log"
    assert eventually(lambda: log.exists() and log.read_text(), timeout=10), "the webhook's script ran"
    assert log.read_text() == "event=paid&id=42 aborted=1\n"


# A webhook receiver that records what its body brought: the raw body's length and
# digest, and the form's field count, after its sender has gone.
BIG_WEBHOOK = """<?php
ignore_user_abort(true);
touch(__DIR__ . '/' . basename($_GET['log']) . '.started');
usleep(300000); // the client leaves meanwhile
$raw = file_get_contents('php://input');
echo 'received';
flush(); // PHP learns that the client left when it writes
file_put_contents(__DIR__ . '/' . basename($_GET['log']), json_encode([
    'raw' => strlen($raw), 'sha1' => sha1($raw), 'fields' => count($_POST), 'aborted' => connection_aborted(),
]));
"""


def test_a_request_whose_client_left_reads_its_whole_body_past_64_kib(start_server, tmp_path):
    """A webhook whose sender hangs up after sending its whole body (200 KB of JSON, a
    300 KB form), once its script runs: the script reads the body it was sent, whole,
    after the client left; the body was buffered before the request went to PHP."""
    import hashlib
    (tmp_path / "hook.php").write_text(BIG_WEBHOOK)
    srv = start_server("client-leaves-big-body", threads=1, app=tmp_path, site_extra="")
    payload = json.dumps({"items": ["x" * 100] * 2000}).encode()
    form = b"&".join(b"f%d=%s" % (i, b"v" * 600) for i in range(500))
    send_and_close_once(srv, b"POST /hook.php?log=json.log HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                        b"Content-Length: %d\r\n\r\n%s" % (len(payload), payload), tmp_path / "json.log.started")
    send_and_close_once(srv, b"POST /hook.php?log=form.log HTTP/1.1\r\nHost: t\r\n"
                        b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: %d\r\n\r\n%s" % (len(form), form),
                        tmp_path / "form.log.started")
    for name, want in (("json.log", {"raw": len(payload), "sha1": hashlib.sha1(payload).hexdigest(), "fields": 0}),
                       ("form.log", {"fields": 500})):
        log = tmp_path / name
        assert eventually(lambda: log.exists() and log.read_text(), timeout=10), f"{name}: the script ran"
        got = json.loads(log.read_text())
        assert {k: got[k] for k in want} == want, (name, got)
        assert got["aborted"] == 1, (name, got)


# A user session save handler in memory, set before the worker's loop (SET_IN=boot) or
# by the first request that finds none (SET_IN=request).
SESSION_WORKER = """<?php
final class MemoryHandler implements SessionHandlerInterface
{
    public static array $data = [];
    public static int $writes = 0;
    public function open(string $path, string $name): bool { return true; }
    public function close(): bool { return true; }
    public function read(string $id): string|false { return self::$data[$id] ?? ''; }
    public function write(string $id, string $data): bool { self::$writes++; self::$data[$id] = $data; return true; }
    public function destroy(string $id): bool { unset(self::$data[$id]); return true; }
    public function gc(int $max): int|false { return 0; }
}
$set = false;
if (getenv('SET_IN') === 'boot') {
    session_set_save_handler(new MemoryHandler(), false);
    $set = true;
}
while (frankenphp_handle_request(function () use (&$set) {
    if (!$set) {
        session_set_save_handler(new MemoryHandler(), false);
        $set = true;
    }
    if (!session_start()) {
        echo 'session_start failed: ', error_get_last()['message'] ?? '';
        return;
    }
    $_SESSION['n'] = ($_SESSION['n'] ?? 0) + 1;
    echo 'n=', $_SESSION['n'], ' writes=', MemoryHandler::$writes;
    session_write_close();
})) {
}
"""


def test_a_user_session_handler_set_once_serves_every_later_request(start_server, tmp_path):
    """session_set_save_handler() before the worker's loop, or in an earlier request:
    every later request's session_start() uses it, as under FrankenPHP, and the session
    goes on across requests."""
    (tmp_path / "session.php").write_text(SESSION_WORKER)
    workers = "".join(f"\t\tworker {{\n\t\t\tfile {tmp_path}/session.php\n\t\t\tname {where}\n\t\t\tnum 1\n"
                      f"\t\t\tenv SET_IN {where}\n\t\t\tmatch /{where}\n\t\t}}\n" for where in ("boot", "request"))
    srv = start_server("user-session-handler", threads=3, app=tmp_path, site_extra=workers)
    for where in ("boot", "request"):
        first = srv.get(f"/{where}")
        assert first.text == "n=1 writes=0", (where, first.text)
        cookie = first.header("Set-Cookie").split(";")[0]
        for n in (2, 3):
            r = srv.get(f"/{where}", headers={"Cookie": cookie})
            assert r.text == f"n={n} writes={n - 1}", (where, r.text)


# A user save handler that delegates to PHP's files handler (through SessionHandler),
# as Symfony's StrictSessionHandler does. A request that waits for the session's lock
# past its time limit fails inside the handler's read() once it gets the lock; the one
# holding the lock keeps it for 2 s in a child process.
LOCKING_SESSION = """<?php
final class Delegating implements SessionHandlerInterface, SessionUpdateTimestampHandlerInterface
{
    public function __construct(private SessionHandlerInterface $inner) {}
    // Strict mode asks whether the id exists: by reading it, which takes the lock.
    private ?string $validated = null;
    // Strict mode asks whether the id exists: by reading it (which takes its lock), and
    // keeping what was read for read(), as Symfony's StrictSessionHandler does.
    public function validateId(string $id): bool
    {
        $this->validated = $this->inner->read($id);
        return $this->validated !== '';
    }
    public function updateTimestamp(string $id, string $data): bool { return $this->write($id, $data); }
    public function open(string $path, string $name): bool { return $this->inner->open($path, $name); }
    public function close(): bool { return $this->inner->close(); }
    public function read(string $id): string|false
    {
        [$validated, $this->validated] = [$this->validated, null];
        // PHP code runs here: a time limit that passed while the lock was awaited ends it.
        return $validated === '' ? '' : $this->inner->read($id);
    }
    public function write(string $id, string $data): bool { return $this->inner->write($id, $data); }
    public function destroy(string $id): bool { return $this->inner->destroy($id); }
    public function gc(int $max): int|false { return $this->inner->gc($max); }
}
set_time_limit(1);
ini_set('session.use_strict_mode', '1');
ini_set('session.save_path', __DIR__ . '/sessions');
session_set_save_handler(new Delegating(new SessionHandler()), true);
session_id('parity2368');
session_start();
set_time_limit(5);
echo "started\n";
flush();
if (!isset($_GET['quick'])) {
    system('sleep 2');
}
echo 'done';
"""


def test_a_timeout_inside_a_session_handler_releases_the_session_lock(start_server, tmp_path):
    """2 threads; the first request holds a session's lock for 2 s; the second waits for
    it past its time limit (1 s) and fails inside the user save handler once it gets the
    lock. The lock (a flock on the session file, taken by PHP's files handler under the
    user one) goes with the failed request: the next requests for that session are
    served (FrankenPHP's issue 2368)."""
    (tmp_path / "sessions").mkdir()
    (tmp_path / "session.php").write_text(LOCKING_SESSION)
    srv = start_server("session-lock-timeout", threads=2, app=tmp_path, site_extra="",
                       global_extra="\t\ttimeout_grace 1s")
    answers = {}

    def get(name, delay):
        time.sleep(delay)
        answers[name] = srv.get("/session.php", timeout=60)

    clients = [threading.Thread(target=get, args=(name, delay)) for name, delay in (("holder", 0), ("waiter", 0.3))]
    for c in clients:
        c.start()
    time.sleep(0.4)
    get("third", 0)
    for c in clients:
        c.join(60)
    assert answers["holder"].text.endswith("done"), answers["holder"].text[:300]
    assert answers["waiter"].status in (500, 504), "the waiter ran past its time limit"
    for _ in range(3):
        start = time.monotonic()
        r = srv.get("/session.php?quick=1", timeout=30)
        assert (r.status, r.text) == (200, "started\ndone"), (r.status, r.text[:300], f"{time.monotonic() - start:.1f}s")


# exit() in a handler, with a shutdown function and an object made outside the handler
# that print when the script ends.
EXIT_WORKER = """<?php
final class Announces
{
    public function __destruct() { echo "|destructed"; }
}
$announces = new Announces();
register_shutdown_function(function () { echo "|shut down"; });
while (frankenphp_handle_request(function () {
    if (isset($_GET['exit'])) {
        echo 'before exit';
        exit(1);
    }
    echo 'served';
})) {
}
"""


def test_output_after_exit_in_a_handler_reaches_the_client(start_server, tmp_path):
    """exit() in a worker's handler ends the script with the request in flight: what
    its shutdown functions and destructors print goes to that request's client after
    the handler's own output (Symfony's dd() relies on it), and the worker boots again."""
    (tmp_path / "exit.php").write_text(EXIT_WORKER)
    worker = f"\t\tworker {{\n\t\t\tfile {tmp_path}/exit.php\n\t\t\tnum 1\n\t\t\tmatch /exit*\n\t\t}}"
    srv = start_server("exit-output", threads=2, app=tmp_path, site_extra=worker)
    assert srv.get("/exit").text == "served"
    r = srv.get("/exit?exit=1")
    assert r.text == "before exit|shut down|destructed", r.text
    assert r.status == 500, "exit() fails the request unless the script chose a status"
    assert srv.get("/exit").text == "served"


ENV_WORKER = """<?php
while (frankenphp_handle_request(function () {
    header('Content-Type: application/json');
    echo json_encode(array_map(fn ($k) => [$_SERVER[$k] ?? null, getenv($k)], ['FOO' => 'FOO', 'BAR' => 'BAR', 'HOST' => 'HOST']));
})) {
}
"""


def test_a_sites_env_reaches_the_requests_a_global_worker_serves(start_server, tmp_path):
    """A global worker with `env FOO bar`, serving a site whose php_worker block sets
    `env FOO baz`, `env BAR site` and a placeholder: the site's env wins for that site's
    requests, in $_SERVER and getenv(), as FrankenPHP's does."""
    (tmp_path / "w.php").write_text(ENV_WORKER)
    srv = start_server("site-env-global-worker", lambda port, admin: make_caddyfile(
        port, admin, threads=3, app=tmp_path,
        global_extra=f"\t\tworker {{\n\t\t\tfile {tmp_path}/w.php\n\t\t\tnum 1\n\t\t\tenv FOO bar\n\t\t}}",
        site_extra="\t\tenv FOO baz\n\t\tenv BAR site\n\t\tenv HOST {http.request.host}"))
    got = srv.get("/w.php", headers={"Host": "example.test"}).json()
    assert got == {"FOO": ["baz", "baz"], "BAR": ["site", "site"], "HOST": ["example.test", "example.test"]}, got


PUTENV = """<?php
putenv('PW_PARITY=1');
$set = putenv("PW_PARITY\\0B=v");
echo json_encode([$set, getenv("PW_PARITY\\0B"), getenv('PW_PARITY')]);
"""


def test_putenv_ends_a_setting_at_a_nul_byte_as_php_does(start_server, tmp_path):
    """putenv("A\\0B=v") sets no variable whose name holds a NUL: the C environment ends
    the setting at the NUL, so PHP unsets A; php_worker's per-thread environment does the
    same, and agrees with php-cli."""
    (tmp_path / "putenv.php").write_text(PUTENV)
    srv = start_server("putenv-nul", threads=2, app=tmp_path, site_extra="")
    assert srv.get("/putenv.php").json() == [True, False, False]
    cli = subprocess.run([str(CADDY), "php-cli", str(tmp_path / "putenv.php")], capture_output=True, text=True, timeout=60)
    assert json.loads(cli.stdout) == [True, False, False], cli


def test_request_body_timeout_ends_a_stalled_upload_with_408(start_server):
    """FrankenPHP's request_body_timeout (php_server, php, php_worker): a body from
    which no byte arrives for that long ends with 408, whether it is read ahead
    (buffered) or streamed to PHP (a PUT with request_buffer off reading php://input),
    with no Caddy read timeout set; the thread serves again."""
    site = "\t\trequest_body_timeout 1s"
    buffered = start_server("body-timeout", threads=2, site_extra=site)
    streamed = start_server("body-timeout-streamed", threads=2, site_extra=site,
                            global_extra="\t\trequest_buffer off")
    for srv in (buffered, streamed):
        start = time.monotonic()
        marker = srv.workdir / "stall.txt"
        answer = send_stalled_body(srv, "PUT", f"/body-stall.php?marker={marker}", "application/octet-stream")
        assert answer.startswith(b"HTTP/1.1 408 "), (srv.name, answer[:200], f"{time.monotonic() - start:.1f}s")
        assert srv.get("/hello.php").text == "Hello, world!"


CONTEXT_COUNTER = """<?php
$served = 0;
while (frankenphp_handle_request(function () use (&$served) {
    echo ++$served;
})) {
}
"""


def test_global_max_requests_gives_threads_a_fresh_php_context(start_server, tmp_path):
    """FrankenPHP's global max_requests 3: after 3 requests a PHP thread frees its PHP
    context and starts a new one, worker threads (whose script ends first and boots
    again) and classic threads alike; no request fails, and the log says so."""
    (tmp_path / "counter.php").write_text(CONTEXT_COUNTER)
    (tmp_path / "hello.php").write_text("<?php echo 'hello';")
    worker = f"\t\tworker {{\n\t\t\tfile {tmp_path}/counter.php\n\t\t\tnum 1\n\t\t\tmatch /count\n\t\t}}"
    srv = start_server("global-max-requests", threads=2, app=tmp_path, site_extra=worker,
                       global_extra="\t\tmax_requests 3")
    assert [srv.get("/count").text for _ in range(7)] == ["1", "2", "3", "1", "2", "3", "1"]
    assert all(srv.get("/hello.php").text == "hello" for _ in range(7))
    # Each thread renews twice (after its 3rd and 6th request), the last maybe after its answer.
    renewed = srv.wait_log(lambda e: e.get("msg") == "PHP thread restarted (max_requests)", timeout=5, count=4)
    threads = {e["thread"] for e in renewed}
    assert len(threads) == 2, f"the worker's thread and the classic one renewed their contexts: {renewed}"
    assert not srv.wait_log(lambda e: "unrecoverable" in e.get("msg", ""), timeout=0.1)


def test_max_wait_time_counts_only_the_time_no_thread_is_free(start_server):
    """max_wait_time 1ns with one classic thread: a request that finds the thread free
    is handed to it, never refused for the microseconds of the hand-over; one that
    finds it busy is answered 503 at once."""
    srv = start_server("max-wait-handover", threads=1, site_extra="", global_extra="\t\tmax_wait_time 1ns")
    # Once the thread has started (until then no thread is free, and 503 is right).
    assert eventually(lambda: srv.get("/hello.php").status == 200)
    statuses = [srv.get("/hello.php").status for _ in range(30)]
    assert statuses == [200] * 30, statuses
    busy = threading.Thread(target=lambda: srv.get("/sleep.php?ms=1500", timeout=30))
    busy.start()
    time.sleep(0.5)
    r = srv.get("/hello.php", timeout=10)
    assert r.status == 503 and r.header("Retry-After"), (r.status, r.text)
    busy.join(30)
    # The thread is free again once PHP ended that request, a moment after its client got
    # the last byte; a request in that moment is refused as rightly as the one above.
    assert eventually(lambda: srv.get("/hello.php").status == 200)


def test_a_handler_that_serves_scripts_only_passes_other_requests_on(start_server, tmp_path):
    """php_server with index off and file_server off, or FrankenPHP's php directive,
    serves the scripts requests name; any other request goes to the next handler of the
    route, as FrankenPHP's do, instead of an empty 404."""
    (tmp_path / "a.php").write_text("<?php echo 'script';")

    def caddyfile(port, admin, block):
        return f"""{{
	admin 127.0.0.1:{admin}
	persist_config off
}}
:{port} {{
	bind 127.0.0.1
	root * {tmp_path}
	route {{
		{block}
		respond "next handler"
	}}
}}
"""
    for name, block in (("php-server-scripts-only", "php_server {\n\t\t\tindex off\n\t\t\tfile_server off\n\t\t}"),
                        ("php-scripts-only", "php")):
        srv = start_server(name, lambda port, admin: caddyfile(port, admin, block))
        assert srv.get("/a.php").text == "script"
        r = srv.get("/no/such/page")
        assert (r.status, r.text) == (200, "next handler"), (name, r.status, r.text)


def test_frankenphps_cgi_variables_and_module_are_there(start_server, tmp_path):
    """What scripts written for FrankenPHP read without a fallback: AUTH_TYPE,
    REMOTE_IDENT, SSL_PROTOCOL and SSL_CIPHER (empty over plain HTTP), and a module named
    frankenphp (extension_loaded('frankenphp'), phpversion('frankenphp')); and
    frankenphp_handle_request() outside a worker fails with FrankenPHP's words."""
    (tmp_path / "vars.php").write_text(
        "<?php header('Content-Type: application/json'); echo json_encode(["
        "'vars' => array_intersect_key($_SERVER, array_flip(['AUTH_TYPE', 'REMOTE_IDENT', 'SSL_PROTOCOL', 'SSL_CIPHER', 'HTTPS'])),"
        "'module' => extension_loaded('frankenphp'), 'version' => phpversion('frankenphp'),"
        "'handle' => function_exists('frankenphp_handle_request')]);")
    (tmp_path / "not-worker.php").write_text(
        "<?php try { frankenphp_handle_request(function () {}); } catch (RuntimeException $e) { echo $e->getMessage(); }")
    srv = start_server("parity-cgi", app=tmp_path, threads=2, site_extra="")
    d = srv.get("/vars.php").json()
    assert d["vars"] == {"AUTH_TYPE": "", "REMOTE_IDENT": "", "SSL_PROTOCOL": "", "SSL_CIPHER": "", "HTTPS": ""}, d
    assert d["module"] is True and d["version"] == "1.12.7" and d["handle"] is True, d
    assert srv.get("/not-worker.php").text == "frankenphp_handle_request() called while not in worker mode"


def test_redirects_and_the_restart_route_answer_as_frankenphps(start_server, tmp_path):
    """A directory holding the index redirects (308) with no body, as php_server's redir
    answers; POST /frankenphp/workers/restart answers FrankenPHP's text."""
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "index.php").write_text("<?php echo 'index';")
    (tmp_path / "w.php").write_text(COUNTER)
    worker = f"\t\tworker {{\n\t\t\tfile {tmp_path}/w.php\n\t\t\tnum 1\n\t\t\tmatch /count\n\t\t}}"
    srv = start_server("parity-redirect", app=tmp_path, threads=2, site_extra=worker)
    r = srv.get("/dir?a=1")
    assert (r.status, r.header("Location"), r.body) == (308, "/dir/?a=1", b""), (r.status, r.headers, r.body)
    assert srv.admin("POST", "/frankenphp/workers/restart") == (200, "workers restarted successfully\n")
    assert srv.admin("POST", "/php_worker/workers/restart") == (200, "restarted 1 workers\n")


# FrankenPHP's connection_status fixture's question: after frankenphp_finish_request(),
# what does connection_status() say when the client had already left?
FINISH_STATUS = """<?php
ignore_user_abort(true);
touch(__DIR__ . '/' . basename($_GET['log']) . '.started');
usleep(300000); // the client leaves meanwhile
if (isset($_GET['finish'])) {
    frankenphp_finish_request();
}
echo 'hi';
flush();
file_put_contents(__DIR__ . '/' . basename($_GET['log']), (string) connection_status());
"""


@pytest.mark.parametrize("processes", [1, 2])
def test_connection_status_after_finish_request_says_whether_the_client_had_left(start_server, tmp_path, processes):
    """A request whose client left while it ran: connection_status() is 1 (aborted)
    after frankenphp_finish_request() as without it, as under FrankenPHP; with the
    client there, finishing the request aborts nothing (0). The handler tells the core
    the client left (no callback asks it), through a child process too."""
    (tmp_path / "status.php").write_text(FINISH_STATUS)
    extra = "\tprocesses 2" if processes == 2 else ""
    srv = start_server(f"parity-finish-status-{processes}", threads=processes, app=tmp_path,
                       site_extra="", global_extra=extra)
    for name in ("gone-finish", "gone"):
        query = "finish=1&" if name == "gone-finish" else ""
        send_and_close_once(srv, f"GET /status.php?{query}log={name}.log HTTP/1.1\r\nHost: t\r\n\r\n".encode(),
                            tmp_path / f"{name}.log.started")
    assert srv.get("/status.php?finish=1&log=there.log").text == ""
    for name, want in (("gone-finish", "1"), ("gone", "1"), ("there", "0")):
        log = tmp_path / f"{name}.log"
        assert eventually(lambda: log.exists() and log.read_text(), timeout=10), name
        assert log.read_text() == want, (name, log.read_text())
