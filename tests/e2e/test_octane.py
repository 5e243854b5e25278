"""Laravel Octane's FrankenPHP server, played by php_worker: the binary found on PATH as
`frankenphp`, started as Octane starts it (`frankenphp run -c <Caddyfile>`, its settings
in the environment), a Caddyfile with the structure of Octane's stub (the frankenphp
global block, php_server, `encode zstd br gzip`, `{$VAR}` placeholders that expand to
nothing), and the worker in the shape of Octane's frankenphp-worker.php over the Laravel
test app (Debian's php-laravel-framework: Laravel 8 and a current one, conftest.laravel). Then Octane's admin calls: status
(`GET /config/apps/frankenphp`), reload (the same JSON sent back with `PATCH` and
`Cache-Control: must-revalidate`) under load, and stop (`POST /stop`)."""

import http.client
import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import CADDY, WORK_ROOT, XDIST_WORKER, free_port, http_get, json_lines

LARAVEL = Path(__file__).resolve().parent / "laravel"

# The structure of Octane's src/Commands/stubs/Caddyfile: every setting comes from the
# environment Octane sets for the child process.
STUB = """{
	{$CADDY_GLOBAL_OPTIONS}

	admin {$CADDY_SERVER_ADMIN_HOST}:{$CADDY_SERVER_ADMIN_PORT}

	frankenphp {
		worker {
			file "{$APP_PUBLIC_PATH}/frankenphp-worker.php"
			{$CADDY_SERVER_WORKER_DIRECTIVE}
			{$CADDY_SERVER_WATCH_DIRECTIVES}
		}
	}
}

{$CADDY_EXTRA_CONFIG}

{$CADDY_SERVER_SERVER_NAME} {
	log {
		level {$CADDY_SERVER_LOG_LEVEL}

		format filter {
			wrap {$CADDY_SERVER_LOGGER}
			fields {
				uri query {
					replace authorization REDACTED
				}
			}
		}
	}

	route {
		root * "{$APP_PUBLIC_PATH}"
		encode zstd br gzip

		{$CADDY_SERVER_EXTRA_DIRECTIVES}

		php_server {
			index frankenphp-worker.php
			try_files {path} frankenphp-worker.php
			resolve_root_symlink
		}
	}
}
"""


class Octane:
    """The server process as Octane's StartFrankenPhpCommand runs it."""

    def __init__(self, base, port, admin_port, laravel_root):
        self.base, self.port, self.admin_port = base, port, admin_port
        bin_dir = base / "bin"
        bin_dir.mkdir()
        (bin_dir / "frankenphp").symlink_to(CADDY.resolve())
        found = shutil.which("frankenphp", path=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
        assert found == str(bin_dir / "frankenphp"), "the binary is found on PATH as frankenphp"
        env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
               "APP_ENV": "local", "APP_BASE_PATH": str(base), "APP_PUBLIC_PATH": str(base / "public"),
               "LARAVEL_OCTANE": "1", "MAX_REQUESTS": "100000", "REQUEST_MAX_EXECUTION_TIME": "30",
               "CADDY_GLOBAL_OPTIONS": "auto_https disable_redirects",
               "CADDY_SERVER_ADMIN_HOST": "localhost", "CADDY_SERVER_ADMIN_PORT": str(admin_port),
               "CADDY_SERVER_LOG_LEVEL": "INFO", "CADDY_SERVER_LOGGER": "json",
               "CADDY_SERVER_SERVER_NAME": f"http://:{port}",
               "CADDY_SERVER_WORKER_COUNT": "2", "CADDY_SERVER_WORKER_DIRECTIVE": "num 2",
               "CADDY_SERVER_EXTRA_DIRECTIVES": "", "CADDY_SERVER_WATCH_DIRECTIVES": "",
               "LARAVEL_CACHE_DIR": str(base / "laravel-cache"), "LARAVEL_PHP_ROOT": str(laravel_root)}
        env.pop("CADDY_EXTRA_CONFIG", None)  # referenced by the stub, never set by Octane
        self.log_path = base / "server.log"
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(["frankenphp", "run", "-c", str(base / "Caddyfile")], cwd=base, env=env,
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"frankenphp run exited {self.proc.returncode}:\n{self.log_text()}")
            try:
                if self.get("/octane")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"the Octane-shaped server did not answer:\n{self.log_text()}")

    def log_text(self):
        self.log.flush()
        return self.log_path.read_text(errors="replace")

    def log_entries(self):
        return json_lines(self.log_text())

    def get(self, path, headers=None):
        return http_get(self.port, path, headers)

    def admin(self, method, path, body=None, headers=None):
        # Octane's ServerProcessInspector: http://{adminHost}:{adminPort}
        c = http.client.HTTPConnection("localhost", self.admin_port, timeout=120)
        try:
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture
def octane(laravel):
    version, root = laravel
    # As deep under the repository as tests/e2e/laravel, whose bootstrap reaches adapters/
    # by a relative path: beside the work folders of the processes of a parallel run.
    base = WORK_ROOT / f"octane-app{version}{'-' + XDIST_WORKER if XDIST_WORKER else ''}"
    shutil.rmtree(base, ignore_errors=True)
    shutil.copytree(LARAVEL, base, symlinks=True)
    (base / "Caddyfile").write_text(STUB)
    srv = Octane(base, free_port(), free_port(), root)
    yield srv
    srv.kill()


def test_octane_start_status_reload_under_load_and_stop(octane):
    # What the worker sees: worker mode, Octane's environment, the front controller.
    status, body, _ = octane.get("/octane?x=1")
    assert status == 200, body
    seen = json.loads(body)
    assert seen["worker"] == "1" and seen["octane"] == "1" and seen["max_requests"] == "100000"
    assert seen["base_path"] == str(octane.base) and seen["sapi"] == "php_worker"
    assert seen["script_name"] == "/frankenphp-worker.php" and seen["uri"] == "/octane?x=1"
    assert seen["time_limit"] == 30, "set_time_limit() before the loop applies to each request"
    assert seen["boot_version"] == "v1"
    # Static files are Caddy's, compressed as the stub asks (br from the pure-Go encoder).
    (octane.base / "public" / "robots.txt").write_text("User-agent: *\nDisallow:\n" * 50)
    status, body, headers = octane.get("/robots.txt", {"Accept-Encoding": "br"})
    assert status == 200 and headers.get("Content-Encoding") == "br"

    # octane:status: any 2xx from GET /config/apps/frankenphp.
    status, config = octane.admin("GET", "/config/apps/frankenphp")
    assert status == 200 and json.loads(config)["workers"][0]["file_name"].endswith("/public/frankenphp-worker.php")
    status, threads = octane.admin("GET", "/frankenphp/threads")
    assert status == 200 and json.loads(threads)["pools"], threads

    # Logs as Octane reads them: error_log($line, 4) gives the raw line as msg;
    # frankenphp_log() its level and context; access lines are Caddy's.
    assert octane.get("/octane/log")[0] == 200
    entries = octane.log_entries()
    records = [json.loads(e["msg"]) for e in entries if e.get("msg", "").startswith("{")]
    assert {"type": "request", "method": "GET", "url": "/octane/log", "statusCode": 200} in records
    logged = [e for e in entries if e.get("msg") == "a frankenphp_log line"]
    assert logged and logged[0]["level"] == "warn" and logged[0]["order"] == 42 and logged[0]["user"] == {"id": 7}
    access = [e for e in entries if e.get("msg") == "handled request" and e["request"]["uri"] == "/octane/log"]
    assert access and access[0]["status"] == 200 and "duration" in access[0]
    # A worker script that ends with a status: the warning carries exit_status, which
    # Octane reads (it hides the 255 of timeouts).
    octane.get("/octane/exit")
    deadline = time.monotonic() + 10
    while not [e for e in octane.log_entries() if e.get("exit_status") == 3] and time.monotonic() < deadline:
        time.sleep(0.1)
    crashed = [e for e in octane.log_entries() if e.get("exit_status") == 3]
    assert crashed and crashed[0]["level"] == "warn", "a worker exit line with exit_status"
    assert octane.get("/octane")[0] == 200, "the worker was booted again"

    # octane:reload under load: new code, no request failed. (MAX_REQUESTS is high
    # enough that only the reload can boot the new code.)
    # The deploy writes the code and reloads at once, within OPcache's revalidate_freq.
    (octane.base / "app" / "version.php").write_text("<?php return 'v2';")
    stop, failures, served, resent, versions = threading.Event(), [], [0], [0], set()

    def client():
        while not stop.is_set():
            for attempt in range(3):
                try:
                    status, body, _ = octane.get("/octane")
                except (http.client.RemoteDisconnected, ConnectionResetError) as e:
                    # Caddy may close unanswered a connection its old server accepted
                    # (docs/reloads-and-admin-api.md); a GET is sent again, as HTTP clients do.
                    resent[0] += 1
                    if attempt == 2:
                        failures.append(repr(e))
                    continue
                if status != 200:
                    failures.append((status, body[:200]))
                else:
                    versions.add(json.loads(body)["boot_version"])
                    served[0] += 1
                break

    clients = [threading.Thread(target=client) for _ in range(4)]
    for t in clients:
        t.start()
    try:
        time.sleep(0.5)
        status, config = octane.admin("GET", "/config/apps/frankenphp")
        assert status == 200
        status, answer = octane.admin("PATCH", "/config/apps/frankenphp", body=config,
                                      headers={"Content-Type": "application/json", "Cache-Control": "must-revalidate"})
        assert status == 200, answer
        deadline = time.monotonic() + 30
        while "v2" not in versions and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)
    finally:
        stop.set()
        for t in clients:
            t.join()
    print(f"reload through apps.frankenphp: {served[0]} requests, {len(failures)} failed, {resent[0]} sent again")
    assert failures == [] and served[0] > 0
    assert octane.get("/octane")[0] == 200 and json.loads(octane.get("/octane")[1])["boot_version"] == "v2"
    stopping = [json.loads(e["msg"]) for e in octane.log_entries() if '"worker_stopping"' in e.get("msg", "")]
    assert stopping, "the old workers left their loop and ran their end (Octane's WorkerStopping)"

    # octane:stop: POST /stop ends the process gracefully; the workers' loops end.
    before = len(stopping)
    status, _ = octane.admin("POST", "/stop")
    assert status == 200
    assert octane.proc.wait(timeout=60) == 0
    stopping = [e for e in octane.log_entries() if '"worker_stopping"' in e.get("msg", "")]
    assert len(stopping) >= before + 2, "each of the 2 workers ended its loop on stop"


def test_the_frankenphp_name_answers_in_frankenphps_documented_forms(tmp_path):
    """version, build-info, php-cli (Octane's docs run `frankenphp php-cli artisan …`)
    and php-server with FrankenPHP's short flags and its <file>,<num> worker form, which
    compresses responses unless --no-compress."""
    frankenphp = tmp_path / "frankenphp"
    frankenphp.symlink_to(CADDY.resolve())
    version = subprocess.run([str(frankenphp), "version"], capture_output=True, text=True, check=True).stdout
    assert version.startswith("php_worker v")
    build_info = subprocess.run([str(frankenphp), "build-info"], capture_output=True, text=True, check=True).stdout
    assert "github.com/php-worker/php_worker/go-module" in build_info
    assert "github.com/dunglas/frankenphp" not in build_info, "Octane then warns that it cannot read a version"
    p = subprocess.run([str(frankenphp), "php-cli", "-r", "echo PHP_SAPI, ' ', $argv[1];", "arg"],
                       capture_output=True, text=True, timeout=60)
    assert (p.returncode, p.stdout) == (0, "cli arg"), p.stderr

    root = tmp_path / "public"
    root.mkdir()
    (root / "index.php").write_text("<?php while (frankenphp_handle_request(function () {"
                                    " echo str_repeat('worker ', 200), $_SERVER['FRANKENPHP_WORKER'] ?? '-'; })) {}")
    port = free_port()
    log = open(tmp_path / "php-server.log", "wb")
    proc = subprocess.Popen([str(frankenphp), "php-server", "-r", str(root), "-l", f"127.0.0.1:{port}",
                             "-w", "index.php,1"], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, (tmp_path / "php-server.log").read_text()
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                c.request("GET", "/some/page", headers={"Accept-Encoding": "br"})
                r = c.getresponse()
                body = r.read()
                break
            except OSError:
                assert time.monotonic() < deadline, "php-server did not start"
                time.sleep(0.1)
        assert r.status == 200 and r.getheader("Content-Encoding") == "br"
        assert b"worker worker" not in body and len(body) < 200, "compressed"
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("GET", "/other")
        r = c.getresponse()
        plain = r.read().decode()
        assert r.getheader("Content-Encoding") is None and plain == "worker " * 200 + "1", "the worker served it"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
