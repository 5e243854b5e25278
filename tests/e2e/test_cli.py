"""`caddy php-cli`: PHP's command line on the server's PHP (same build, extensions and,
with --config, php_ini): $argv, the standard streams, exit statuses, and the modes
PHP's CLI has (-r, -v, -m, -i, -d, -n). And `caddy php-server`: a folder served with no
Caddyfile."""

import json
import os
import re
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from conftest import APP, CADDY, REPO, WORK, eventually, free_port, http_get


def php_cli(*args, stdin=b"", cwd=None, timeout=60):
    p = subprocess.run([str(CADDY), "php-cli", *args], input=stdin, capture_output=True, timeout=timeout, cwd=cwd)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def test_a_script_runs_as_phps_cli_runs_it(tmp_path):
    """A script with a shebang line (as artisan has) gets its $argv, reads STDIN, writes
    STDOUT and STDERR, sees php_sapi_name() "cli", and its exit() status is the
    command's."""
    script = tmp_path / "tool"
    script.write_text("""#!/usr/bin/env php
<?php
fwrite(STDERR, "progress\\n");
echo json_encode(['argv' => $argv, 'argc' => $argc, 'sapi' => php_sapi_name(), 'const' => PHP_SAPI,
                  'stdin' => stream_get_contents(STDIN), 'self' => $_SERVER['PHP_SELF'],
                  'limit' => ini_get('max_execution_time'), 'cwd' => getcwd()]);
fclose(STDOUT);
exit(3);
""")
    status, out, err = php_cli(str(script), "migrate", "--force", "-v", stdin=b"line 1\nline 2\n", cwd=tmp_path)
    assert status == 3, (out, err)
    assert err == "progress\n"
    assert not out.startswith("#!"), "the shebang line is not output"
    d = json.loads(out)
    assert d["argv"] == [str(script), "migrate", "--force", "-v"] and d["argc"] == 4
    assert (d["sapi"], d["const"]) == ("cli", "cli")
    assert d["stdin"] == "line 1\nline 2\n"
    assert d["self"] == str(script) and d["limit"] == "0" and d["cwd"] == str(tmp_path)


def test_code_errors_and_missing_files_end_as_phps_cli_ends(tmp_path):
    assert php_cli("-r", "echo 6 * 7, ' ', json_encode($argv);", "a", "-b") == (0, '42 ["Standard input code","a","-b"]', "")
    status, out, _ = php_cli("-r", "undefined_function();")
    assert status == 255 and "Call to undefined function undefined_function()" in out
    assert php_cli(str(tmp_path / "nope.php"))[:2] == (1, f"Could not open input file: {tmp_path / 'nope.php'}\n")
    status, _, err = php_cli("-x")
    assert status == 2 and "unknown option -x" in err


def test_invoked_as_php_the_binary_is_phps_cli_and_php_binary_runs_it_again(tmp_path):
    """A `php` link to the binary (as the image, the package and the portable layout
    install) is PHP's command line; PHP_BINARY names that link, found by path or on
    PATH, so what respawns PHP (Symfony's PhpExecutableFinder under Laravel's scheduler,
    Composer's @php, PHPUnit's isolation) runs this PHP. A script on standard input,
    -l and --ini work as in PHP's CLI; -a says why it cannot."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    php = bin_dir / "php"
    php.symlink_to(CADDY.resolve())
    env = dict(os.environ, PATH=f"{bin_dir}:/usr/bin:/bin")

    def run(*args, stdin=b"", via=str(php)):
        p = subprocess.run([via, *args], input=stdin, capture_output=True, timeout=60, env=env, cwd=tmp_path)
        return p.returncode, p.stdout.decode(), p.stderr.decode()

    assert run("-r", "echo PHP_BINARY;") == (0, str(php), "")
    assert run("-r", "echo PHP_BINARY;", via="php") == (0, str(php), ""), "found on PATH"
    again = "echo shell_exec(escapeshellarg(PHP_BINARY) . ' -r ' . escapeshellarg('echo PHP_SAPI, \" \", PHP_VERSION;'));"
    status, out, err = run("-r", again)
    assert (status, out) == (0, f"cli {run('-r', 'echo PHP_VERSION;')[1]}"), err
    assert run(stdin=b"<?php echo 6 * 7, ' ', $argv[0];") == (0, "42 Standard input code", "")
    (tmp_path / "good.php").write_text("<?php echo 1;\n")
    (tmp_path / "bad.php").write_text("<?php echo 1\necho 2;\n")
    assert run("-l", "good.php") == (0, "No syntax errors detected in good.php\n", "")
    status, out, _ = run("-l", "bad.php")
    assert status == 255 and "syntax error" in out and out.endswith("Errors parsing bad.php\n"), out
    status, out, _ = run("--ini")
    assert status == 0 and "Loaded Configuration File:" in out and "Scan for additional .ini files in:" in out, out
    status, _, err = run("-a")
    assert status == 2 and "no interactive shell" in err
    # Through `caddy php-cli` with no `php` link beside the binary (./caddy has none),
    # PHP_BINARY is empty, as PHP's CLI leaves it when it cannot tell.
    assert not (CADDY.resolve().parent / "php").exists()
    assert php_cli("-r", "echo PHP_BINARY;")[:2] == (0, "")


def test_version_modules_and_info_name_the_same_php_as_the_server(server):
    status, out, _ = php_cli("-v")
    assert status == 0
    first, second = out.splitlines()[:2]
    php = php_cli("-r", "echo PHP_VERSION;")[1]
    assert second.startswith(f"PHP {php} (cli)") and php.startswith("8."), out
    minor = ".".join(php.split(".")[:2])
    # One version line everywhere: VERSION, the PHP version and how PHP was built.
    assert first.startswith(f"php_worker v{(REPO / 'VERSION').read_text().strip()} (core ")
    assert f"PHP {php} (ZTS, " in first and "embed SAPI, build php-" in first, first
    version = subprocess.run([str(CADDY), "version"], capture_output=True, text=True, check=True).stdout
    assert version.startswith(first + "; caddy v2."), version
    build_info = subprocess.run([str(CADDY), "build-info"], capture_output=True, text=True, check=True).stdout
    module_version = first.split()[1]
    assert f"dep\tgithub.com/php-worker/php_worker/go-module\t{module_version}" in build_info
    assert f"/php-{minor}-zts-" in build_info, "the PHP build linked (CGO_LDFLAGS)"
    started = [e for e in server.log_entries() if e.get("msg") == "PHP engine started"]
    assert started and started[0]["version"] == module_version and f"({started[0]['php_build']})" in first
    status, out, _ = php_cli("-m")
    assert status == 0 and out.startswith("[PHP Modules]\n")
    php_modules, _, zend = out.partition("\n\n[Zend Modules]\n")
    listed = {m.lower() for m in php_modules.splitlines()[1:]}
    served = set(server.get("/extensions.php").json()["extensions"])
    assert served - listed == {"php_worker", "frankenphp"}, "the server's extensions, but php_worker's own (and its FrankenPHP name)"
    assert listed - served == set()
    assert {"pdo_sqlite", "intl", "gd", "mbstring", "openssl", "curl"} <= listed
    status, out, _ = php_cli("-i")
    assert status == 0 and f"PHP Version => {php}" in out and "Thread Safety => enabled" in out


def test_artisan_migrate_runs_a_laravel_apps_migrations(laravel, tmp_path):
    """`caddy php-cli artisan migrate --force` on the Laravel test app (Debian's
    php-laravel-framework: Laravel 8 and a current one): its migration creates and fills
    a table in the SQLite database the environment names, and a second run has nothing
    to migrate, although the app's cache store is php_worker's."""
    version, root = laravel
    laravel = Path(__file__).resolve().parent / "laravel"
    database = tmp_path / "app.sqlite"
    database.touch()
    env = {**os.environ, "DB_DATABASE": str(database), "LARAVEL_CACHE_DIR": str(tmp_path / "cache"),
           "LARAVEL_PHP_ROOT": str(root)}

    def artisan(*args):
        p = subprocess.run([str(CADDY), "php-cli", "artisan", *args], cwd=laravel, env=env, capture_output=True,
                           timeout=120)
        return p.returncode, p.stdout.decode() + p.stderr.decode()

    status, out = artisan("migrate", "--force")
    assert status == 0 and "2026_01_01_000000_create_notes_table" in out and ("Migrated:" in out or "DONE" in out), out
    assert sqlite3.connect(database).execute("SELECT body FROM notes").fetchall() == [("migrated by cli",)]
    status, out = artisan("migrate", "--force")
    assert status == 0 and "Nothing to migrate" in out, out
    # The app's default cache store is php_worker's, which needs the server: the commands
    # that do not use it run (above); one that does says why it cannot.
    status, out = artisan("cache:clear")
    assert status == 1 and "The php_worker cache store needs php_worker's shared store" in out, out


def test_settings_come_from_the_config_then_d_and_n_skips_php_ini(server, tmp_path):
    """--config applies the config's php_ini after php.ini, as the server does; -d comes
    after that; -n reads no php.ini."""
    caddyfile = server.workdir / "Caddyfile"
    (tmp_path / "Caddyfile").write_text(caddyfile.read_text().replace("php_ini html_errors 0", "php_ini html_errors 0\n\t\tphp_ini precision 5"))
    code = "echo ini_get('precision'), ' ', ini_get('display_errors'), ' ', ini_get('memory_limit');"
    assert php_cli("--config", str(tmp_path / "Caddyfile"), "-r", code)[1] == "5 1 128M"
    assert php_cli("--config", str(tmp_path / "Caddyfile"), "-d", "precision=7", "-d", "memory_limit=64M", "-r", code)[1] == "7 1 64M"
    status, _, err = php_cli("--config", str(tmp_path / "missing"), "-r", code)
    assert status == 1 and "missing" in err
    assert php_cli("-n", "-r", "var_export(php_ini_loaded_file());")[1] == "false"


def test_a_script_reaches_the_server_and_uses_sqlite(server, tmp_path):
    """What a cron job or a migration does: PDO SQLite, curl to the running server."""
    script = tmp_path / "job.php"
    script.write_text(f"""<?php
$db = new PDO('sqlite:{tmp_path}/app.db');
$db->exec('CREATE TABLE t (v TEXT)');
$db->exec("INSERT INTO t VALUES ('migrated')");
$ch = curl_init('http://127.0.0.1:{server.port}/hello.php');
curl_setopt($ch, CURLOPT_RETURNTRANSFER, true);
echo $db->query('SELECT v FROM t')->fetchColumn(), ' ', curl_exec($ch), ' ', mb_strtoupper('é'), ' ',
     strlen(openssl_encrypt('x', 'aes-128-cbc', 'k', 0, str_repeat('i', 16))) > 0 ? 'tls' : 'no';
""")
    assert php_cli(str(script)) == (0, "migrated Hello, world! É tls", "")


class PHPServer:
    """`caddy php-server` on a free loopback port."""

    def __init__(self, *args):
        self.port = free_port()
        self.log = open(WORK / f"php-server-{self.port}.log", "wb")
        self.proc = subprocess.Popen([str(CADDY), "php-server", "--listen", f"127.0.0.1:{self.port}", *args],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while time.time() < deadline:
            assert self.proc.poll() is None, (WORK / f"php-server-{self.port}.log").read_text()
            try:
                if self.get("/hello.php")[0] in (200, 404):
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("php-server did not start")

    def get(self, path):
        status, body, _ = http_get(self.port, path, timeout=10)
        return status, body.decode()

    def stop(self):
        self.proc.send_signal(signal.SIGINT)
        code = self.proc.wait(timeout=30)
        self.log.close()
        return code


def test_php_server_serves_a_folder_without_a_caddyfile():
    """Static files, scripts with PATH_INFO, and the front controller, as the site
    directive serves them; it stops cleanly on SIGINT."""
    WORK.mkdir(parents=True, exist_ok=True)
    srv = PHPServer("--root", str(APP / "public"))
    try:
        assert srv.get("/hello.php") == (200, "Hello, world!")
        assert srv.get("/static.txt")[0] == 200
        status, body = srv.get("/pathinfo.php/a/b")
        assert status == 200 and "/a/b" in body
        status, body = srv.get("/no/such/page")
        assert (status, body) == (200, "front:/no/such/page|/index.php|"), "the front controller"
    finally:
        assert srv.stop() == 0


def test_php_server_runs_workers_and_watches_them(tmp_path):
    (tmp_path / "index.php").write_text(
        "<?php $v = 'v1'; $n = 0; while (frankenphp_handle_request(function () use ($v, &$n) { echo $v, ' ', ++$n; })) {}\n")
    WORK.mkdir(parents=True, exist_ok=True)
    srv = PHPServer("--root", str(tmp_path), "--worker", "index.php:1", "--watch")
    try:
        answers = [srv.get("/anything")[1] for _ in range(3)]
        first = int(answers[0].split()[1])  # the start-up check was served too
        assert answers == [f"v1 {first + i}" for i in range(3)], "one booted worker thread serves them all"
        (tmp_path / "index.php").write_text((tmp_path / "index.php").read_text().replace("'v1'", "'v2'"))
        assert eventually(lambda: srv.get("/")[1].startswith("v2 "), timeout=15), \
            "--watch restarted the worker with the new code"
    finally:
        assert srv.stop() == 0


def test_php_server_refuses_a_bad_worker_flag():
    p = subprocess.run([str(CADDY), "php-server", "--worker", "index.php:0"], capture_output=True, timeout=30)
    assert p.returncode != 0 and b"thread count must be positive" in p.stderr


def test_caddy_validate_refuses_a_php_ini_line_php_cannot_read(tmp_path):
    """`caddy validate` asks the core about php_ini without starting PHP: a key PHP's ini
    reader cannot take is refused there, naming it, instead of failing the next start
    (or a reload) of the engine; a good config validates."""
    def validate(ini):
        f = tmp_path / "Caddyfile"
        f.write_text(f"{{\n\tphp_worker {{\n\t\tphp_ini {ini}\n\t}}\n}}\n:0 {{\n\tphp_worker\n}}\n")
        p = subprocess.run([str(CADDY), "validate", "--config", str(f), "--adapter", "caddyfile"],
                           capture_output=True, text=True, timeout=60)
        return p.returncode, p.stderr
    status, err = validate('"a[b]" 1')
    assert status != 0 and "a[b]" in err and "is not a valid ini line" in err, err
    assert "PHP 8" not in err, "no PHP started"
    status, err = validate("memory_limit 256M")
    assert status == 0, err


# A queue worker's signal handling, as Laravel's queue:work and Symfony Messenger do it:
# pcntl handlers for SIGUSR1/SIGUSR2 sent to the process, and a pcntl_alarm() timeout.
PCNTL = """<?php
pcntl_async_signals(true);
$got = ['USR1' => 0, 'USR2' => 0, 'ALRM' => 0];
pcntl_signal(SIGUSR1, function () use (&$got) { $got['USR1']++; });
pcntl_signal(SIGUSR2, function () use (&$got) { $got['USR2']++; });
pcntl_signal(SIGALRM, function () use (&$got) { $got['ALRM']++; });
for ($i = 0; $i < 200; $i++) {
    posix_kill(getmypid(), SIGUSR1);
    posix_kill(getmypid(), SIGUSR2);
    usleep(2000);
}
pcntl_alarm(1);
$deadline = microtime(true) + 3;
while (microtime(true) < $deadline && $got['ALRM'] === 0) {
    usleep(1000);
}
echo json_encode($got);
"""


@pytest.mark.parametrize("invoked", ["php-cli", "php link"])
def test_a_scripts_pcntl_handlers_get_the_signals_sent_to_the_process(tmp_path, invoked):
    """Signals sent to the process (posix_kill, pcntl_alarm) reach the script's pcntl
    handlers on its own thread: none lands on a thread without PHP (which crashed the
    process), none is lost; as `caddy php-cli` and as the `php` link (`php artisan
    queue:work`), whose main thread blocks them before Go's runtime starts its own."""
    (tmp_path / "pcntl.php").write_text(PCNTL)
    if invoked == "php-cli":
        status, out, err = php_cli(str(tmp_path / "pcntl.php"), timeout=60)
    else:
        php = tmp_path / "php"
        php.symlink_to(CADDY.resolve())
        p = subprocess.run([str(php), str(tmp_path / "pcntl.php")], capture_output=True, timeout=60)
        status, out, err = p.returncode, p.stdout.decode(), p.stderr.decode()
    assert status == 0, (status, out, err[-2000:])
    got = json.loads(out)
    assert got["USR1"] > 0 and got["USR2"] > 0 and got["ALRM"] == 1, got
    if invoked == "php link":
        # Go's threads block them, so the kernel hands them to the script's thread.
        pid = subprocess.Popen([str(php), "-r", "sleep(5);"])
        try:
            deadline = time.time() + 5
            while time.time() < deadline and len(list(Path(f"/proc/{pid.pid}/task").iterdir())) < 3:
                time.sleep(0.05)
            unblocked = []
            for task in Path(f"/proc/{pid.pid}/task").iterdir():
                status_text = (task / "status").read_text()
                mask = int(re.search(r"^SigBlk:\s*([0-9a-f]+)", status_text, re.M).group(1), 16)
                if not mask & (1 << (signal.SIGALRM - 1)):
                    unblocked.append(task.name)
            assert len(unblocked) <= 1, f"threads that take SIGALRM: {unblocked} (only the script's may)"
        finally:
            pid.kill()
            pid.wait()
