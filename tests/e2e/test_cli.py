"""`caddy php-cli`: PHP's command line on the server's PHP (same build, extensions and,
with --config, php_ini): $argv, the standard streams, exit statuses, and the modes
PHP's CLI has (-r, -v, -m, -i, -d, -n)."""

import json
import subprocess

from conftest import CADDY


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


def test_version_modules_and_info_name_the_same_php_as_the_server(server):
    status, out, _ = php_cli("-v")
    assert status == 0
    first, second = out.splitlines()[:2]
    assert first.startswith("php_worker ") and second.startswith("PHP 8.2.") and "(cli)" in second, out
    status, out, _ = php_cli("-m")
    assert status == 0 and out.startswith("[PHP Modules]\n")
    php_modules, _, zend = out.partition("\n\n[Zend Modules]\n")
    listed = {m.lower() for m in php_modules.splitlines()[1:]}
    served = set(server.get("/extensions.php").json()["extensions"])
    assert served - listed == {"php_worker"}, "the server's extensions, but php_worker's own"
    assert listed - served == set()
    assert {"pdo_sqlite", "intl", "gd", "mbstring", "openssl", "curl"} <= listed
    status, out, _ = php_cli("-i")
    assert status == 0 and "PHP Version => 8.2." in out and "Thread Safety => enabled" in out


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
