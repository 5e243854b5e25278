"""End-to-end harness: starts the built ./caddy on loopback ports with a test Caddyfile
and talks to it over real HTTP.

The binary comes from ./xcaddy.sh (tests/run.sh builds it first). Each server gets its own
working directory under tests/.work/ with its Caddyfile and log.
"""

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CADDY = Path(os.environ.get("PHP_WORKER_CADDY") or REPO / "caddy")  # scripts/asan.sh points it at its ASan build
APP = Path(__file__).resolve().parent / "app"
# tests/run.sh runs the suite in two processes (pytest-xdist, a file at a time in each):
# each has a work folder of its own, since the same session fixtures start in both.
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
WORK_ROOT = REPO / "tests" / ".work"
WORK = WORK_ROOT / XDIST_WORKER if XDIST_WORKER else WORK_ROOT


# The Laravel versions the Laravel tests run on: Debian 12's Laravel 8 (/usr/share/php,
# scripts/install-deps.sh --tests installs it) and a current one, Laravel 13 from sid,
# unpacked into a test root by scripts/fetch-php-app.py (it needs PHP 8.3 or newer).
LARAVEL_APP = Path(__file__).resolve().parent / "laravel"
LARAVEL_VERSIONS = ("8", "13")
_php_version = []


def php_version():
    """The PHP version of the binary under test, as (major, minor)."""
    if not _php_version:
        out = subprocess.run([str(CADDY), "php-cli", "-n", "-r", "echo PHP_MAJOR_VERSION, ' ', PHP_MINOR_VERSION;"],
                             capture_output=True, text=True, timeout=60).stdout
        _php_version.append(tuple(int(x) for x in out.split()))
    return _php_version[0]


def laravel_root(version):
    """The PHP folder holding that Laravel's Illuminate/autoload.php and its libraries."""
    if version == "8":
        root = Path("/usr/share/php")
        if not (root / "Illuminate/autoload.php").exists():
            pytest.fail("Debian's php-laravel-framework is missing (scripts/install-deps.sh --tests installs it)")
        return root
    if php_version() < (8, 3):
        pytest.skip(f"Laravel {version} needs PHP 8.3 or newer")
    p = subprocess.run(["python3", str(REPO / "scripts" / "fetch-php-app.py"), "--suite", "sid", "php-laravel-framework"],
                       capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        pytest.fail(f"could not unpack Laravel {version} from sid: {p.stderr[-2000:]}")
    return Path(p.stdout.strip())


# Laravel servers keep PHP's errors in the log, as production does: Laravel 8's code draws
# PHP 8.4's deprecation notices, which displayed errors would put in the answers.
LARAVEL_INI = "\t\tphp_ini display_errors 0\n"


@pytest.fixture(scope="module", params=LARAVEL_VERSIONS, ids=[f"laravel{v}" for v in LARAVEL_VERSIONS])
def laravel(request):
    """(version, PHP folder) of each Laravel the test app runs on."""
    return request.param, laravel_root(request.param)


# The messages of worker lifecycle log lines (their fields say which worker, thread...).
CRASHED = "worker script crashed; restarting it"
BOOT_FAILED = "worker script failed before reaching frankenphp_handle_request(); backing off"


_HANDED_OUT = set()
# (this process's remainder, the number of processes) under pytest-xdist; (0, 1) alone.
_PORT_SHARES = (int(XDIST_WORKER[2:]), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))) \
    if XDIST_WORKER.startswith("gw") else (0, 1)


def free_port():
    """A loopback port nobody listens on and that this run has not handed out before. The
    kernel may give the same free port to two calls in a row (a site and its admin port),
    and Caddy binds with SO_REUSEPORT, so both listeners would get it and split the
    connections between them. Under pytest-xdist each process takes ports of its own (by
    port // 2, since Linux gives even ports to bind(0)), so two never hand out one port."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _HANDED_OUT and port // 2 % _PORT_SHARES[1] == _PORT_SHARES[0]:
            _HANDED_OUT.add(port)
            return port


class Response:
    def __init__(self, status, reason, headers, body):
        self.status = status
        self.reason = reason
        self.headers = headers  # list of (name, value), names as sent
        self.body = body

    def header(self, name):
        values = self.headers_all(name)
        return values[0] if values else None

    def headers_all(self, name):
        return [v for k, v in self.headers if k.lower() == name.lower()]

    @property
    def text(self):
        return self.body.decode("utf-8", "replace")

    def json(self):
        return json.loads(self.body)


def json_lines(text):
    """The JSON log lines of a server's output, skipping any other line."""
    entries = []
    for line in text.splitlines():
        try:
            entries.append(json.loads(line))
        except ValueError:
            pass
    return entries


def http_get(port, path, headers=None, timeout=30):
    """One GET on a new connection to 127.0.0.1:port: (status, body bytes, headers)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path, headers=headers or {})
        r = conn.getresponse()
        return r.status, r.read(), dict(r.getheaders())
    finally:
        conn.close()


class Server:
    """A running ./caddy with php_worker."""

    def __init__(self, name, caddyfile, port, admin_port, workdir, env=None):
        self.name = name
        self.port = port
        self.admin_port = admin_port
        self.workdir = workdir
        self.log_path = workdir / "caddy.log"
        # A JSON config (Caddy's own format, as FrankenPHP's tests write it) loads as is;
        # anything else is a Caddyfile.
        config, adapter = (workdir / "Caddyfile", ["--adapter", "caddyfile"])
        if caddyfile.lstrip().startswith("{\""):
            config, adapter = (workdir / "config.json", [])
        config.write_text(caddyfile)
        self.log_file = open(self.log_path, "wb")
        env = dict(os.environ, HOME=str(workdir), XDG_CONFIG_HOME=str(workdir), XDG_DATA_HOME=str(workdir),
                   PHP_WORKER_TEST_ENV="from-process", **(env or {}))
        self.proc = subprocess.Popen(
            [str(CADDY), "run", "--config", str(config)] + adapter,
            cwd=str(REPO), stdout=self.log_file, stderr=subprocess.STDOUT, env=env)
        try:
            self._wait_ready()
        except BaseException:
            # Nobody else holds this server yet: do not leave it running.
            self.proc.kill()
            self.proc.wait()
            self.log_file.close()
            raise

    def _wait_ready(self):
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"caddy exited early:\n{self.log_text()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    pass
                if "PHP engine started" in self.log_text():
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"caddy did not become ready:\n{self.log_text()}")

    def log_text(self):
        self.log_file.flush()
        return self.log_path.read_text(errors="replace")

    def log_entries(self):
        return json_lines(self.log_text())

    def wait_log(self, predicate, timeout=5, count=1):
        """The log entries that satisfy predicate, once there are `count` of them, or
        those there are when `timeout` passes."""
        deadline = time.time() + timeout
        found = []
        while time.time() < deadline:
            found = [e for e in self.log_entries() if predicate(e)]
            if len(found) >= count:
                return found
            time.sleep(0.05)
        return found

    def request(self, path, method="GET", body=None, headers=None, timeout=30, resend=False):
        """One request on a new connection. With resend, a GET whose connection closed
        unanswered is sent again, up to 3 tries, as HTTP clients do: right after a config
        load Caddy may close a connection its old listener accepted (see
        docs/reloads-and-admin-api.md)."""
        for attempt in range(3 if resend and method == "GET" else 1):
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
            try:
                conn.request(method, path, body=body, headers=headers or {})
                r = conn.getresponse()
                return Response(r.status, r.reason, r.getheaders(), r.read())
            except (http.client.RemoteDisconnected, ConnectionResetError):
                if attempt == 2 or not resend or method != "GET":
                    raise
                time.sleep(0.05)
            finally:
                conn.close()

    def post_early_answer(self, path, body, headers, timeout=30):
        """A request whose body the server may stop reading (it answered early and
        closes): the body goes out from another thread, and the answer is read whatever
        became of the rest of the body. Returns (status, head and body text)."""
        s = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        head = f"POST {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: {len(body)}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"

        def send():
            try:
                s.sendall(head.encode() + body)
            except OSError:
                pass

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        answer = b""
        try:
            while chunk := s.recv(65536):
                answer += chunk
        except OSError:
            pass
        finally:
            s.close()
        sender.join(timeout)
        text = answer.decode("utf-8", "replace")
        status = int(text.split(" ", 2)[1]) if text.startswith("HTTP/") else 0
        return status, text

    def get(self, path, **kw):
        return self.request(path, **kw)

    def raw(self, data, timeout=10):
        """Sends raw bytes and returns the raw answer (for requests http.client refuses)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as s:
            s.sendall(data)
            chunks = []
            try:
                while True:
                    c = s.recv(65536)
                    if not c:
                        break
                    chunks.append(c)
            except socket.timeout:
                pass
            return b"".join(chunks)

    def admin(self, method, path, body=None, headers=None, timeout=120):
        """A request to Caddy's admin API: (status, body text). Caddy restarts its admin
        server after every config load, and a connection that reached the old one can
        close unanswered (see docs/reloads-and-admin-api.md): a GET is sent again then, up
        to 3 tries, as HTTP clients do; other methods are sent once."""
        for attempt in range(3 if method == "GET" else 1):
            conn = http.client.HTTPConnection("127.0.0.1", self.admin_port, timeout=timeout)
            try:
                conn.request(method, path, body=body, headers=headers or {})
                r = conn.getresponse()
                return r.status, r.read().decode("utf-8", "replace")
            except (http.client.RemoteDisconnected, ConnectionResetError):
                if method != "GET" or attempt == 2:
                    raise
                time.sleep(0.05)
            finally:
                conn.close()

    def load(self, caddyfile, force=False):
        """POST /load of a Caddyfile: (status, body). force asks Caddy to reload an
        unchanged config, as `caddy reload --force` and Laravel Octane do."""
        headers = {"Content-Type": "text/caddyfile"}
        if force:
            headers["Cache-Control"] = "must-revalidate"
        return self.admin("POST", "/load", body=caddyfile.encode(), headers=headers)

    def threads(self):
        """GET /php_worker/threads, decoded."""
        status, body = self.admin("GET", "/php_worker/threads")
        assert status == 200, body
        return json.loads(body)

    def rss_kb(self):
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    def os_threads(self):
        """Every thread of the process (PHP's, Go's, ...)."""
        return len(list(Path(f"/proc/{self.proc.pid}/task").iterdir()))

    def php_named_threads(self):
        """Threads named like PHP threads ("php-N"). A thread takes its creator's name, so
        threads a library starts from a PHP thread count here; the Go runtime's own
        threads, which come and go with its load, do not."""
        tasks = Path(f"/proc/{self.proc.pid}/task")
        return sum(1 for t in tasks.iterdir() if (t / "comm").read_text().startswith("php-"))

    def stop(self):
        status = stop_process(self.proc)
        self.log_file.close()
        return status


def stop_process(proc):
    """Stops a server as Ctrl-C does (SIGINT), killing it if it has not ended within
    30 s; its exit status."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def eventually(check, timeout=10, pause=0.05):
    """Whether check() turned true within timeout. For a reload's or a restart's new code:
    the old threads serve until the new ones are ready and take over one by one, so one
    answer from the new code does not mean the next one is; wait for the threads to
    settle before asserting that every answer is new."""
    deadline = time.time() + timeout
    while True:
        if check():
            return True
        if time.time() >= deadline:
            return False
        time.sleep(pause)


def assert_disconnect_frees_the_thread(srv):
    """A client that leaves in the middle of a streamed response: the script sees the
    aborted connection and the server's only PHP thread serves again."""
    marker = srv.workdir / "marker.txt"
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    s.sendall(f"GET /forever.php?marker={marker} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
    assert b"xxxx" in s.recv(65536)
    s.close()
    deadline = time.time() + 10
    while not marker.exists() and time.time() < deadline:
        time.sleep(0.05)
    assert marker.exists() and marker.read_text() == "aborted=1", "the script saw the aborted connection"
    r = srv.get("/hello.php", timeout=5)
    assert (r.status, r.text) == (200, "Hello, world!"), "the PHP thread is free again"
    assert srv.stop() == 0


def read_streamed(port, path, first=b"first"):
    """GETs path on a new connection and reads the response to its end: returns the
    seconds until `first` arrived, the seconds until the end, and the raw response."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        start = time.monotonic()
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode())
        received = b""
        while first not in received:
            chunk = s.recv(4096)
            assert chunk, f"connection closed before {first!r} arrived"
            received += chunk
        first_at = time.monotonic() - start
        while chunk := s.recv(4096):
            received += chunk
        return first_at, time.monotonic() - start, received


def send_stalled_body(srv, method, path, content_type):
    """Sends a request announcing a 1 MB body, stops after 200 KB, and returns the whole
    answer."""
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    s.sendall(f"{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Type: {content_type}\r\n"
              "Content-Length: 1000000\r\n\r\n".encode() + b"x=" + b"y" * 200_000)
    answer = b""
    try:
        while chunk := s.recv(65536):
            answer += chunk
    finally:
        s.close()
    return answer


def assert_stalled_body_frees_the_thread(srv):
    """A client that stops sending its request body: Caddy's read timeout (read_body 1s)
    ends the wait and the answer is 408. A PUT script reading php://input sees what
    arrived and an aborted connection; a POST body (which PHP reads whole before the
    script starts) never reaches the script at all, nor does the POST body of a client
    that leaves in its middle. Either way the server's only PHP thread serves again."""
    marker = srv.workdir / "stall.txt"
    answer = send_stalled_body(srv, "PUT", f"/body-stall.php?marker={marker}", "application/octet-stream")
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert b"read " not in answer, "what the script built on part of the body must not reach the client"
    # The 408 can leave before the script ends, and file_put_contents creates the marker
    # before it writes it: wait for the whole line.
    deadline = time.time() + 10
    while time.time() < deadline and not (marker.exists() and marker.read_text().endswith("aborted=1")):
        time.sleep(0.05)
    text = marker.read_text() if marker.exists() else "(no marker)"
    assert text.startswith("read=") and text.endswith("aborted=1"), text
    assert srv.wait_log(lambda e: e["level"] == "warn" and "the script sees an aborted connection" in e.get("msg", ""))

    # A script that never reads the body answers at once: PHP must not drain the body
    # through the stalled client, and the 408 is only for scripts that needed the body.
    answer = send_stalled_body(srv, "PUT", "/hello.php", "application/octet-stream")
    assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b"Hello, world!"), answer[:300]

    gone_marker = srv.workdir / "gone-form.txt"
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    s.sendall(f"POST /body-stall.php?marker={gone_marker} HTTP/1.1\r\nHost: t\r\n"
              "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000000\r\n\r\n".encode()
              + b"x=" + b"y" * 200_000)
    s.close()  # the client leaves in the middle of its body

    form_marker = srv.workdir / "stall-form.txt"
    answer = send_stalled_body(srv, "POST", f"/body-stall.php?marker={form_marker}",
                               "application/x-www-form-urlencoded")
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    r = srv.get("/hello.php", timeout=5)
    assert (r.status, r.text) == (200, "Hello, world!"), "the PHP thread is free again"
    assert not form_marker.exists(), "the script must not run on part of a form body"
    assert not gone_marker.exists(), "nor on part of the body of a client that left"


def with_read_body_timeout(caddyfile, timeout="1s"):
    """Adds Caddy's server read timeout to a test Caddyfile's global options."""
    return caddyfile.replace("\tphp_worker {", f"\tservers {{\n\t\ttimeouts {{\n\t\t\tread_body {timeout}\n\t\t}}\n\t}}\n\tphp_worker {{", 1)


def protocols_caddyfile(admin_port, protocols, sites):
    """A test Caddyfile serving the default app on several sites, with Caddy's server
    `protocols` set. sites: (address, worker) pairs; an https:// address uses
    `tls internal`, and worker=True runs every script through the worker executor."""
    blocks = []
    for address, worker in sites:
        body = "\tbind 127.0.0.1\n"
        if address.startswith("https://"):
            body += "\ttls internal\n"
        body += f"\troot * {APP}/public\n"
        if worker:
            body += (f"\tphp_worker {{\n\t\tworker {{\n\t\t\tfile {APP}/executor.php\n\t\t\tnum 2\n"
                     "\t\t\tmatch *.php *.php/*\n\t\t}\n\t}\n")
        else:
            body += "\tphp_worker\n"
        blocks.append(f"{address} {{\n{body}}}\n")
    return f"""{{
	admin 127.0.0.1:{admin_port}
	persist_config off
	skip_install_trust
	auto_https disable_redirects
	log {{
		format json
		level DEBUG
	}}
	servers {{
		protocols {protocols}
	}}
	php_worker {{
		num_threads 6
		php_ini display_errors 1
		php_ini html_errors 0
	}}
}}

""" + "\n".join(blocks)


def wait_for_certificate(port, timeout=30):
    """Caddy issues the `tls internal` certificate in the background after it starts
    listening; until then every handshake fails (curl exit 35)."""
    deadline = time.time() + timeout
    while True:
        p = subprocess.run(["curl", "-sS", "--insecure", "-o", "/dev/null", f"https://127.0.0.1:{port}/"],
                           capture_output=True, timeout=30)
        if p.returncode == 0:
            return
        if time.time() > deadline:
            raise RuntimeError(f"no TLS handshake on port {port} after {timeout}s: {p.stderr.decode()}")
        time.sleep(0.1)


def global_options(admin_port, threads=4, global_extra="", servers=""):
    """The global options block of a test Caddyfile: the admin API on admin_port, JSON
    logs at DEBUG, php_worker with `threads` PHP threads, PHP's errors shown and logged;
    `servers` (Caddy's server options) and `global_extra` (more php_worker options) as
    given."""
    return f"""{{
	admin 127.0.0.1:{admin_port}
	persist_config off
	log {{
		format json
		level DEBUG
	}}
{servers}	php_worker {{
		num_threads {threads}
		php_ini display_errors 1
		php_ini html_errors 0
		php_ini log_errors 1
{global_extra}
	}}
}}
"""


def make_caddyfile(port, admin_port, global_extra="", site_extra="", app=APP / "public", threads=4):
    return global_options(admin_port, threads, global_extra) + f"""
:{port} {{
	bind 127.0.0.1
	root * {app}
	php_worker {{
		env APP_ENV testing
		env FROM_CONFIG configured
{site_extra}
	}}
}}
"""


@pytest.fixture(scope="session")
def start_server(tmp_path_factory):
    """Returns start(name, **caddyfile options) -> Server; servers stop at session end."""
    if not CADDY.exists():
        pytest.fail("./caddy is missing: run ./xcaddy.sh (tests/run.sh does)")
    WORK.mkdir(parents=True, exist_ok=True)
    servers = []

    def start(name, caddyfile=None, env=None, **options):
        port, admin_port = free_port(), free_port()
        workdir = WORK / name
        shutil.rmtree(workdir, ignore_errors=True)
        workdir.mkdir(parents=True)
        text = caddyfile(port, admin_port) if callable(caddyfile) else make_caddyfile(port, admin_port, **options)
        server = Server(name, text, port, admin_port, workdir, env=env)
        servers.append(server)
        return server

    yield start
    for s in servers:
        s.stop()


@pytest.fixture(scope="session")
def server(start_server):
    """The default server: tests/e2e/app/public with 4 threads, classic mode."""
    return start_server("default")


@pytest.fixture(scope="session")
def worker_server(start_server):
    """The same app with its scripts run by a worker executor (2 threads)."""
    return start_server("executor", site_extra=f"""\t\tworker {{
			file {APP}/executor.php
			num 2
			match *.php *.php/*
		}}""")


@pytest.fixture(scope="session", params=["classic", "worker"])
def php(request):
    """The default app, once in classic mode and once through the worker executor."""
    return request.getfixturevalue("server" if request.param == "classic" else "worker_server")


def bcrypt_cost(srv, doublings, start=10):
    """A bcrypt cost whose hash (tests/e2e/app/public/bcrypt.php: one long C call PHP's
    time limit cannot cut short) runs 2**doublings times as long as the first one that
    takes 0.2 s on this machine: bcrypt's cost doubles its time."""
    cost, took = start, 0.0
    while took < 0.2:
        cost += 1
        began = time.monotonic()
        assert srv.get(f"/bcrypt.php?cost={cost}").text == "60"
        took = time.monotonic() - began
    return cost + doublings


def start_service(argv, port, workdir, name):
    log = open(workdir / f"{name}.log", "wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=str(workdir))
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.05)
    proc.kill()
    pytest.fail(f"{name} did not start: {(workdir / f'{name}.log').read_text()}")


def loopback_service(name, argv_for_port):
    """Runs Debian's daemon `name` on a loopback port of its own, in a fresh work folder,
    for a fixture: yields the port, then stops it. argv_for_port(binary, port, workdir)
    gives its command line."""
    binary = shutil.which(name) or f"/usr/bin/{name}"
    if not Path(binary).exists():
        pytest.fail(f"{name} is missing: scripts/install-deps.sh --tests installs it")
    port = free_port()
    workdir = WORK / name
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    proc = start_service(argv_for_port(binary, port, workdir), port, workdir, name)
    yield port
    proc.terminate()
    proc.wait(10)


@pytest.fixture(scope="module")
def redis():
    """A redis-server on a loopback port of its own, for this module: the port."""
    yield from loopback_service("redis-server", lambda binary, port, workdir: [
        binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no", "--dir", str(workdir)])
