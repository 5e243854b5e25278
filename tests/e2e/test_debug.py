"""Debugging and profiling a worker app: a request carrying a debug trigger runs the
worker script in a request of its own on a classic thread (its frankenphp_handle_request()
serves it once), where a debugger's request startup sees it; other requests keep the
booted worker. The DBGp session against Xdebug needs the PHP 8.2 build (the only one
with Xdebug here)."""
import base64
import gzip
import socket
import subprocess
import threading
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import CADDY, LARAVEL_APP, LARAVEL_INI, laravel_root, make_caddyfile

# Counts its requests and tells its boots apart; prints what the request brought.
COUNTING_WORKER = r"""<?php
$boot = bin2hex(random_bytes(4));
$n = 0;
$shutdown = false;
while (frankenphp_handle_request(function () use ($boot, &$n, &$shutdown) {
    $n++;
    if (isset($_GET['exit'])) {
        register_shutdown_function(function () { echo "shutdown output\n"; });
        if (isset($_GET['echo'])) {
            echo "before exit\n";
        }
        exit(1);
    }
    if (isset($_GET['throw'])) {
        throw new RuntimeException('thrown by the handler');
    }
    header('Content-Type: application/json');
    echo json_encode([
        'boot' => $boot, 'n' => $n, 'get' => $_GET, 'post' => $_POST, 'cookie' => $_COOKIE,
        'worker' => $_SERVER['FRANKENPHP_WORKER'] ?? null, 'app_env' => $_SERVER['APP_ENV'] ?? null,
        'host' => $_SERVER['WORKER_HOST'] ?? null,
    ]);
})) {
}
"""


@pytest.fixture(scope="module")
def triggered(start_server, tmp_path_factory):
    root = tmp_path_factory.mktemp("debug")
    (root / "worker.php").write_text(COUNTING_WORKER)
    return start_server("debug-triggers", app=root, threads=3,
                        global_extra="\t\tdebug_triggers MY_DEBUG X-Profile-Me",
                        site_extra=f"""\t\tworker {{
			file {root}/worker.php
			num 1
			match /app*
			env WORKER_HOST {{http.request.host}}
		}}""")


def test_a_triggered_request_runs_the_worker_script_for_itself_alone(triggered):
    first = triggered.get("/app").json()
    second = triggered.get("/app").json()
    assert second["boot"] == first["boot"] and second["n"] == first["n"] + 1, "untriggered: the booted worker"

    for how, kw in [("query", dict(path="/app?MY_DEBUG=1&x=2")),
                    ("cookie", dict(path="/app?x=2", headers={"Cookie": "a=b; MY_DEBUG=ide"})),
                    ("header", dict(path="/app?x=2", headers={"X-Profile-Me": "1"})),
                    ("form field", dict(path="/app?x=2", method="POST", body=b"MY_DEBUG=1&f=v",
                                        headers={"Content-Type": "application/x-www-form-urlencoded"}))]:
        r = triggered.request(**kw)
        assert r.status == 200, (how, r.status, r.text)
        got = r.json()
        assert got["boot"] != first["boot"] and got["n"] == 1, f"{how}: a boot of its own, serving one request"
        assert got["get"]["x"] == "2", how
        assert got["worker"] == "1" and got["app_env"] == "testing", f"{how}: the worker's and the site's env"
        assert got["host"] and got["host"].startswith("127.0.0.1"), f"{how}: env placeholders replaced: {got['host']}"
        if how == "form field":
            assert got["post"] == {"MY_DEBUG": "1", "f": "v"}, "the body read for the trigger reaches PHP whole"

    after = triggered.get("/app").json()
    assert after["boot"] == first["boot"] and after["n"] == first["n"] + 2, \
        "the booted worker never saw the triggered requests and kept its state"


def test_a_triggered_request_fails_like_the_worker_would_and_the_server_goes_on(triggered):
    r = triggered.get("/app?MY_DEBUG=1&exit=1")
    assert r.status == 500, "exit() in the handler fails the request, as in the worker"
    assert r.text == "shutdown output\n", "what shutdown prints reaches the client (Symfony's dd())"
    r = triggered.get("/app?MY_DEBUG=1&exit=1&echo=1")
    assert r.text == "before exit\nshutdown output\n", r.text
    r = triggered.get("/app?MY_DEBUG=1&throw=1")
    assert r.status == 500 and "thrown by the handler" in r.text
    assert triggered.get("/app?MY_DEBUG=1").status == 200
    assert triggered.get("/app").status == 200


def test_untriggered_requests_keep_the_booted_worker_while_triggered_ones_run(triggered):
    boot = triggered.get("/app").json()["boot"]
    with ThreadPoolExecutor(8) as pool:
        triggered_answers = list(pool.map(lambda i: triggered.get(f"/app?MY_DEBUG=1&i={i}").json(), range(8)))
        plain = list(pool.map(lambda i: triggered.get(f"/app?i={i}").json(), range(24)))
    assert all(a["n"] == 1 and a["boot"] != boot for a in triggered_answers)
    assert all(a["boot"] == boot for a in plain)


def test_triggers_are_off_until_the_config_turns_them_on(start_server, tmp_path):
    """No trigger routes a request unless debug_triggers says so, even when php_ini loads
    a debugger (production servers load Blackfire or Tideways): no client can make the
    server boot the app for its request. With Xdebug loaded (the PHP 8.2 build),
    debug_triggers auto takes Xdebug's triggers."""
    (tmp_path / "worker.php").write_text(COUNTING_WORKER)
    worker = f"""\t\tworker {{
			file {tmp_path}/worker.php
			num 1
			match /app*
		}}"""
    xdebug = xdebug_available()
    # Loaded but idle (mode off): routing looks at php_ini's lines, not at what Xdebug does.
    ini = "\t\tphp_ini zend_extension xdebug\n\t\tphp_ini xdebug.mode off\n" if xdebug else ""
    srv = start_server("debug-off", app=tmp_path, threads=2, global_extra=ini, site_extra=worker)
    first = srv.get("/app").json()
    got = srv.get("/app?XDEBUG_SESSION=1&SPX_ENABLED=1", headers={"Cookie": "XDEBUG_SESSION=x",
                                                                  "X-Blackfire-Query": "x"}).json()
    assert got["boot"] == first["boot"] and got["n"] == 2, "no trigger is on by default"
    if not xdebug:
        return
    auto = start_server("debug-auto", app=tmp_path, threads=2, global_extra=ini + "\t\tdebug_triggers auto", site_extra=worker)
    first = auto.get("/app").json()
    got = auto.get("/app?XDEBUG_TRIGGER=1").json()
    assert got["boot"] != first["boot"] and got["n"] == 1, "auto: Xdebug's triggers"
    assert auto.wait_log(lambda e: e.get("msg", "").startswith("debug triggers are on")
                         and "XDEBUG_SESSION" in e.get("triggers", []))


def test_a_trigger_counts_only_with_the_configured_value(start_server, tmp_path):
    """debug_trigger_value: a trigger carrying another value, or none, goes to the
    booted worker like any request; one carrying the value runs on its own."""
    (tmp_path / "worker.php").write_text(COUNTING_WORKER)
    srv = start_server("debug-value", app=tmp_path, threads=2,
                       global_extra="\t\tdebug_triggers MY_DEBUG X-Profile-Me\n\t\tdebug_trigger_value s3cr3t-v4lue",
                       site_extra=f"\t\tworker {{\n\t\t\tfile {tmp_path}/worker.php\n\t\t\tnum 1\n\t\t\tmatch /app*\n\t\t}}")
    boot = srv.get("/app").json()["boot"]
    for how, kw in [("no value", dict(path="/app?MY_DEBUG")), ("another value", dict(path="/app?MY_DEBUG=PHPSTORM")),
                    ("a prefix", dict(path="/app?MY_DEBUG=s3cr3t")),
                    ("cookie, another value", dict(path="/app", headers={"Cookie": "MY_DEBUG=x"})),
                    ("header, another value", dict(path="/app", headers={"X-Profile-Me": "1"}))]:
        assert srv.request(**kw).json()["boot"] == boot, f"{how}: the booted worker"
    for how, kw in [("query", dict(path="/app?MY_DEBUG=s3cr3t-v4lue")),
                    ("cookie", dict(path="/app", headers={"Cookie": "MY_DEBUG=s3cr3t-v4lue"})),
                    ("header", dict(path="/app", headers={"X-Profile-Me": "s3cr3t-v4lue"}))]:
        got = srv.request(**kw).json()
        assert got["boot"] != boot and got["n"] == 1, f"{how}: a request of its own"


def test_a_header_trigger_php_cannot_see_routes_nothing(start_server, tmp_path):
    """php_worker gives PHP no header whose name has '_' (X_Foo would spoof X-Foo once
    PHP reads HTTP_X_FOO): XDEBUG_SESSION sent as a header, even one Caddy keeps
    (expected_underscore_headers), would boot the app for a request in which Xdebug
    never sees it. As a cookie it counts."""
    (tmp_path / "worker.php").write_text(COUNTING_WORKER)
    worker = f"\t\tworker {{\n\t\t\tfile {tmp_path}/worker.php\n\t\t\tnum 1\n\t\t\tmatch /app*\n\t\t}}"

    def caddyfile(port, admin):
        text = make_caddyfile(port, admin, app=tmp_path, threads=2, global_extra="\t\tdebug_triggers XDEBUG_SESSION",
                              site_extra=worker)
        return text.replace("\tphp_worker {", "\tservers {\n\t\texpected_underscore_headers XDEBUG_SESSION\n\t}\n"
                            "\tphp_worker {", 1)

    srv = start_server("debug-underscore", caddyfile=caddyfile)
    boot = srv.get("/app").json()["boot"]
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    s.sendall(b"GET /app HTTP/1.1\r\nHost: t\r\nXDEBUG_SESSION: 1\r\nConnection: close\r\n\r\n")
    answer = b""
    while chunk := s.recv(65536):
        answer += chunk
    s.close()
    assert b'"boot":"%s"' % boot.encode() in answer, answer[-300:]
    assert srv.get("/app", headers={"Cookie": "XDEBUG_SESSION=1"}).json()["boot"] != boot


def test_a_stalled_form_body_is_bound_by_the_body_timeout_before_the_trigger_check(start_server, tmp_path):
    """The form field check reads the body: a client that stalls it gets the 408 of
    request_body_timeout, as anywhere else, and the server serves on."""
    (tmp_path / "worker.php").write_text(COUNTING_WORKER)
    srv = start_server("debug-form-stall", app=tmp_path, threads=2, global_extra="\t\tdebug_triggers MY_DEBUG",
                       site_extra=f"\t\trequest_body_timeout 1s\n\t\tworker {{\n\t\t\tfile {tmp_path}/worker.php"
                                  "\n\t\t\tnum 1\n\t\t\tmatch /app*\n\t\t}")
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=15)
    start = time.monotonic()
    s.sendall(b"POST /app HTTP/1.1\r\nHost: t\r\nContent-Type: application/x-www-form-urlencoded\r\n"
              b"Content-Length: 1000\r\n\r\nMY_DEBUG=1&a=")
    answer = b""
    try:
        while chunk := s.recv(65536):
            answer += chunk
    except socket.timeout:
        pass
    s.close()
    elapsed = time.monotonic() - start
    assert answer.startswith(b"HTTP/1.1 408 "), (answer[:200], f"{elapsed:.1f}s")
    assert elapsed < 10, f"{elapsed:.1f}s"
    assert srv.get("/app").status == 200


def xdebug_available():
    out = subprocess.run([str(CADDY), "php-cli", "-r", "echo ini_get('extension_dir');"],
                         capture_output=True, text=True, timeout=60).stdout
    return (Path(out) / "xdebug.so").exists()


class DBGp:
    """The IDE's side of a DBGp connection: commands out, XML packets in, all recorded."""
    NS = {"d": "urn:debugger_protocol_v1", "x": "https://xdebug.org/dbgp/xdebug"}

    def __init__(self, conn):
        self.conn, self.buf, self.tid, self.transcript = conn, b"", 0, []

    def packet(self):
        while b"\0" not in self.buf:
            chunk = self.conn.recv(65536)
            assert chunk, "Xdebug closed the connection"
            self.buf += chunk
        size, rest = self.buf.split(b"\0", 1)
        while len(rest) < int(size) + 1:
            chunk = self.conn.recv(65536)
            assert chunk, "Xdebug closed the connection"
            rest += chunk
        xml, self.buf = rest[:int(size)], rest[int(size) + 1:]
        self.transcript.append("<- " + xml.decode(errors="replace"))
        return ET.fromstring(xml)

    def command(self, line):
        self.tid += 1
        text = f"{line.split(' ', 1)[0]} -i {self.tid}" + (f" {line.split(' ', 1)[1]}" if " " in line else "")
        self.transcript.append("-> " + text)
        self.conn.sendall(text.encode() + b"\0")
        while True:
            answer = self.packet()
            if answer.get("transaction_id") == str(self.tid):
                return answer

    def value(self, name, context=0):
        prop = self.command(f"property_get -c {context} -n {name}").find("d:property", self.NS)
        assert prop is not None, f"{name} not found"
        return base64.b64decode(prop.text or "").decode() if prop.get("encoding") == "base64" else prop.text


def test_an_ide_debugs_one_request_of_a_laravel_worker_while_the_worker_serves(start_server, tmp_path):
    """As an IDE would: listen, take Xdebug's init, set a line breakpoint in a Laravel
    controller the worker serves, run, read the stack and the request's variables, and
    detach; untriggered requests to the same worker are answered meanwhile."""
    if not xdebug_available():
        pytest.skip("this PHP build has no Xdebug (only Xdebug 3.2, for PHP 8.2, builds here)")
    root = laravel_root("8")
    controller = LARAVEL_APP / "app/Http/Controllers/GreetingController.php"
    line = next(i for i, text in enumerate(controller.read_text().splitlines(), 1) if "// breakpoint" in text)
    ide = socket.socket()
    ide.bind(("127.0.0.1", 0))
    ide.listen(1)
    ide.settimeout(60)
    port = ide.getsockname()[1]
    name = "laravel-xdebug"
    ini = (LARAVEL_INI + "\t\tdebug_triggers auto\n\t\tphp_ini zend_extension xdebug\n\t\tphp_ini xdebug.mode debug\n"
           "\t\tphp_ini xdebug.start_with_request trigger\n\t\tphp_ini xdebug.client_host 127.0.0.1\n"
           f"\t\tphp_ini xdebug.client_port {port}\n")
    srv = start_server(name, app=LARAVEL_APP / "public", threads=3, global_extra=ini, site_extra=f"""\t\troot {LARAVEL_APP}/public
		index worker.php
		file_server off
		worker {{
			file worker.php
			num 1
			env LARAVEL_CACHE_DIR {tmp_path / "laravel-cache"}
			env LARAVEL_PHP_ROOT {root}
		}}""")
    plain = srv.get("/greet?name=plain")
    assert plain.status == 200, plain.text[:2000]
    boot = plain.json()["boot"]

    answer = {}
    debugged = threading.Thread(target=lambda: answer.update(r=srv.get("/greet?name=debugged&XDEBUG_SESSION=e2e", timeout=120)))
    debugged.start()
    conn, _ = ide.accept()
    conn.settimeout(60)
    dbgp = DBGp(conn)
    try:
        init = dbgp.packet()
        assert init.tag.endswith("init") and init.get("fileuri", "").endswith("/public/worker.php"), init.attrib
        assert init.get("idekey") == "e2e"
        bp = dbgp.command(f"breakpoint_set -t line -f file://{controller} -n {line}")
        assert bp.get("id") and bp.find("d:error", DBGp.NS) is None, bp.attrib
        run = dbgp.command("run")
        assert run.get("status") == "break", run.attrib
        stack = dbgp.command("stack_get").findall("d:stack", DBGp.NS)
        assert stack[0].get("filename") == f"file://{controller}" and stack[0].get("lineno") == str(line), stack[0].attrib
        assert "GreetingController->show" in stack[0].get("where"), stack[0].attrib
        assert any(f.get("filename", "").endswith("/public/worker.php") for f in stack[1:]), \
            "the worker script's handler called the app"
        assert dbgp.value("$name") == "debugged"
        assert dbgp.value("$_GET['name']", context=1) == "debugged", "that request's superglobals (context 1)"

        # Stopped at the breakpoint: the worker still answers everyone else.
        started = time.monotonic()
        with ThreadPoolExecutor(4) as pool:
            others = list(pool.map(lambda i: srv.get(f"/greet?name=other{i}"), range(20)))
        elapsed = time.monotonic() - started
        assert [r.status for r in others] == [200] * 20
        assert all(r.json() == {"greeting": f"hello other{i}", "boot": boot} for i, r in enumerate(others))
        print(f"20 untriggered requests while the debugger held one: {elapsed:.2f} s")

        dbgp.command("detach")
    finally:
        conn.close()
        ide.close()
        (srv.workdir / "dbgp-transcript.txt").write_text("\n".join(dbgp.transcript) + "\n")
    debugged.join(60)
    r = answer["r"]
    assert r.status == 200 and r.json()["greeting"] == "hello debugged"
    assert r.json()["boot"] != boot, "the debugged request booted the app for itself"
    assert srv.get("/greet?name=again").json() == {"greeting": "hello again", "boot": boot}


def test_xdebugs_profiler_writes_one_file_per_triggered_request(start_server, tmp_path):
    if not xdebug_available():
        pytest.skip("this PHP build has no Xdebug (only Xdebug 3.2, for PHP 8.2, builds here)")
    out = tmp_path / "profiles"
    out.mkdir()
    (tmp_path / "worker.php").write_text(COUNTING_WORKER)
    ini = (f"\t\tdebug_triggers auto\n\t\tphp_ini zend_extension xdebug\n\t\tphp_ini xdebug.mode profile\n"
           f"\t\tphp_ini xdebug.start_with_request trigger\n\t\tphp_ini xdebug.output_dir {out}\n"
           "\t\tphp_ini xdebug.profiler_output_name cachegrind.out.%R.%u\n")
    srv = start_server("xdebug-profile", app=tmp_path, threads=2, global_extra=ini, site_extra=f"""\t\tworker {{
			file {tmp_path}/worker.php
			num 1
			match /app*
		}}""")
    for i in range(3):
        assert srv.get("/app").status == 200
    assert list(out.iterdir()) == [], "untriggered worker requests are not profiled"
    for i in range(3):
        assert srv.get(f"/app?XDEBUG_PROFILE=1&i={i}").json()["n"] == 1
    files = sorted(out.iterdir())
    assert len(files) == 3, [f.name for f in files]
    for f in files:
        raw = f.read_bytes()
        text = (gzip.decompress(raw) if f.name.endswith(".gz") else raw).decode(errors="replace")
        assert text.startswith("version: 1") and "worker.php" in text, text[:300]


SHUTDOWN_WORKER = r"""<?php
register_shutdown_function(function () { error_log('shutdown function ran'); });
while (frankenphp_handle_request(function () { echo 'served'; })) {
}
"""


def test_a_worker_with_xdebug_loaded_ends_cleanly(start_server, tmp_path):
    """The shutdown functions after a worker's loop run with Xdebug loaded (it looks for
    its triggers in the superglobals then, and crashed the process on a $_ENV slot left
    empty between requests)."""
    if not xdebug_available():
        pytest.skip("this PHP build has no Xdebug (only Xdebug 3.2, for PHP 8.2, builds here)")
    (tmp_path / "w.php").write_text(SHUTDOWN_WORKER)
    srv = start_server("xdebug-shutdown", app=tmp_path, threads=2,
                       global_extra="\t\tphp_ini zend_extension xdebug\n\t\tphp_ini xdebug.mode debug\n"
                                    "\t\tphp_ini xdebug.start_with_request trigger\n",
                       site_extra=f"\t\tworker {{\n\t\t\tfile {tmp_path}/w.php\n\t\t\tnum 1\n\t\t\tmatch /app*\n\t\t}}")
    assert srv.get("/app").text == "served"
    status, body = srv.admin("POST", "/php_worker/workers/restart")
    assert status == 200, body
    assert srv.wait_log(lambda e: e.get("msg") == "shutdown function ran")
    assert srv.get("/app").text == "served"
    assert not [e for e in srv.log_entries() if e.get("level") == "fatal"]
