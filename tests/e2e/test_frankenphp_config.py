"""A Caddyfile written for FrankenPHP, served unchanged: the frankenphp global block
(apps.frankenphp), php_server and php with FrankenPHP's option names, `{$VAR}`
placeholders (empty ones included), `encode zstd br gzip`; and each FrankenPHP option
php_worker has no counterpart for, refused by `caddy adapt` with a message."""

import json
import subprocess

import pytest

from conftest import CADDY, REPO, free_port, http_get

WORKER = REPO / "tests" / "e2e" / "worker"

CADDYFILE = """{{
	admin 127.0.0.1:{admin}
	{{$PW_TEST_GLOBAL_OPTIONS}}
	frankenphp {{
		num_threads 4
		max_threads 6
		max_wait_time 10s
		php_ini memory_limit 96M
		php_ini {{
			precision 11
		}}
		worker {root}/global-worker.php 1
	}}
	log {{
		format json
	}}
}}

{{$PW_TEST_EXTRA_CONFIG}}

http://127.0.0.1:{port} {{
	encode zstd br gzip
	php_server {{
		root {root}
		split_path .php
		index index.php
		try_files {{path}} {{path}}/index.php index.php
		resolve_root_symlink false
		env FROM_SITE {{$PW_TEST_SITE_VALUE}}
		env EMPTY_VALUE "{{$PW_TEST_UNSET}}"
		worker {{
			file {worker}/env.php
			num 1
			name env-worker
			env WORKER_ONLY yes
			match /env/*
			max_consecutive_failures -1
		}}
	}}
}}

http://127.0.0.1:{port2} {{
	root * {root}
	@scripts path *.php
	php @scripts {{
		split .php
		env FROM_PHP raw
	}}
	file_server
}}
"""


@pytest.fixture(scope="module")
def site(start_server, tmp_path_factory, monkeypatch_module):
    root = tmp_path_factory.mktemp("frankenphp-site")
    (root / "index.php").write_text("<?php echo 'front:', $_SERVER['REQUEST_URI'];")
    (root / "vars.php").write_text("<?php header('Content-Type: application/json'); echo json_encode(["
                                   "'site' => $_SERVER['FROM_SITE'] ?? null, 'empty' => $_SERVER['EMPTY_VALUE'] ?? null,"
                                   "'php' => $_SERVER['FROM_PHP'] ?? null, 'memory_limit' => ini_get('memory_limit'),"
                                   "'precision' => ini_get('precision'), 'path_info' => $_SERVER['PATH_INFO'] ?? null]);")
    (root / "global-worker.php").write_text(
        "<?php $boot = bin2hex(random_bytes(4)); while (frankenphp_handle_request(function () use ($boot) {"
        " echo json_encode(['global_worker' => $_SERVER['FRANKENPHP_WORKER'] ?? null, 'boot' => $boot]); })) {}")
    (root / "static.txt").write_text("static text, compressible. " * 100)
    monkeypatch_module.setenv("PW_TEST_SITE_VALUE", "from-env")
    monkeypatch_module.delenv("PW_TEST_UNSET", raising=False)
    monkeypatch_module.delenv("PW_TEST_GLOBAL_OPTIONS", raising=False)
    monkeypatch_module.delenv("PW_TEST_EXTRA_CONFIG", raising=False)
    port2 = free_port()
    srv = start_server("frankenphp-config", caddyfile=lambda port, admin: CADDYFILE.format(
        admin=admin, port=port, port2=port2, root=root, worker=WORKER))
    srv.port2 = port2
    return srv


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def adapt(text, tmp_path):
    f = tmp_path / "Caddyfile"
    f.write_text(text)
    p = subprocess.run([str(CADDY), "adapt", "--config", str(f)], capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def test_the_frankenphp_block_is_the_php_worker_app_named_frankenphp(site):
    status, body = site.admin("GET", "/config/apps")
    apps = json.loads(body)
    assert "frankenphp" in apps and "php_worker" not in apps, apps.keys()
    app = apps["frankenphp"]
    assert app["num_threads"] == 4 and app["max_threads"] == 6
    assert app["php_ini"] == {"memory_limit": "96M", "precision": "11"}
    assert app["workers"][0]["file_name"].endswith("/global-worker.php") and app["workers"][0]["num"] == 1
    status, body = site.admin("GET", "/frankenphp/threads")
    assert status == 200
    assert json.loads(body).keys() == json.loads(site.admin("GET", "/php_worker/threads")[1]).keys()


def test_php_server_with_frankenphp_options_serves_the_site(site):
    vars_ = site.get("/vars.php/extra").json()
    assert vars_["site"] == "from-env" and vars_["empty"] == "", "an unset {$VAR} expands to nothing"
    assert vars_["memory_limit"] == "96M" and vars_["precision"] == "11" and vars_["path_info"] == "/extra"
    assert site.get("/global-worker.php").json()["global_worker"] == "1"
    env = site.get("/env/anything").json()
    assert env["request"]["server_custom"] == "yes" and env["request"]["server_worker"] == "1"
    assert site.get("/no/such/page").text == "front:/no/such/page"
    r = site.request("/static.txt", headers={"Accept-Encoding": "br"})
    assert r.status == 200 and r.header("Content-Encoding") == "br"
    r = site.request("/static.txt", headers={"Accept-Encoding": "zstd, br, gzip"})
    assert r.header("Content-Encoding") == "zstd", "the order encode lists them in"


def test_php_runs_only_the_scripts_requests_name(site):
    def get(path):
        status, body, _ = http_get(site.port2, path)
        return status, body.decode()

    status, body = get("/vars.php")
    assert status == 200 and json.loads(body)["php"] == "raw"
    assert get("/static.txt")[0] == 200, "file_server, after php"
    assert get("/no/such/page")[0] == 404, "php has no front controller"


@pytest.mark.parametrize("snippet, message", [
    ("{\n\tfrankenphp {\n\t\tmax_requests -1\n\t}\n}\n:8080 {\n\tphp_server\n}\n",
     "max_requests must be a non-negative integer"),
    (":8080 {\n\tphp_server {\n\t\thot_reload\n\t}\n}\n",
     "php_server hot_reload: this FrankenPHP option has no php_worker counterpart"),
    (":8080 {\n\tphp_server {\n\t\trequest_body_timeout soon\n\t}\n}\n", "request_body_timeout takes a duration"),
    (":8080 {\n\tphp_server {\n\t\tworker {\n\t\t\tfile w.php\n\t\t\tmax_consecutive_failures 6\n\t\t}\n\t}\n}\n",
     "only -1 is accepted"),
    (":8080 {\n\tphp_server {\n\t\ttry_files {path} app.php\n\t}\n}\n", "takes try_files only in that form"),
    (":8080 {\n\tphp {\n\t\tindex app.php\n\t}\n}\n", "php has no index"),
    ("{\n\tfrankenphp\n\tphp_worker\n}\n:8080 {\n\tphp_server\n}\n", "they are one app under two names"),
])
def test_frankenphp_options_without_a_counterpart_are_refused(tmp_path, snippet, message):
    status, out, err = adapt(snippet, tmp_path)
    if "two names" in message:  # both apps adapt; the conflict is found when the config loads
        assert status == 0, err
        f = tmp_path / "Caddyfile"
        p = subprocess.run([str(CADDY), "validate", "--config", str(f)], capture_output=True, text=True, timeout=60)
        status, err = p.returncode, p.stderr
    assert status != 0 and message in err, err


# A worker that prints FOO as the request sees it, then as it saw it at boot.
ENV_WORKER = """<?php
$boot = $_SERVER;
while (frankenphp_handle_request(function () use ($boot) {
    echo $_SERVER['FOO'] ?? '', $boot['FOO'] ?? '', $_GET['i'] ?? '';
})) {
}
"""


def frankenphp_json(admin, port, worker_dir, root, handlers):
    """The JSON config of FrankenPHP's own caddy/TestJsonEnv: an apps.frankenphp worker
    with env, and a route whose nested subroutes end in FrankenPHP's php handler."""
    return {
        "admin": {"listen": f"127.0.0.1:{admin}"},
        "apps": {
            "frankenphp": {"workers": [{"env": {"FOO": "bar"}, "file_name": str(worker_dir / "worker-env.php"), "num": 1}]},
            "http": {
                "http_port": port,
                "servers": {"srv0": {
                    "listen": [f"127.0.0.1:{port}"],
                    "routes": [{
                        "handle": [{"handler": "subroute", "routes": [{"handle": [{
                            "handler": "subroute", "routes": [{"handle": handlers}]}]}]}],
                        "terminal": True,
                    }],
                }},
            },
            "pki": {"certificate_authorities": {"local": {"install_trust": False}}},
        },
    }


def test_frankenphps_json_config_loads_and_serves(start_server, tmp_path):
    """FrankenPHP's TestJsonEnv config, as FrankenPHP's JSON writes it (handler "php"
    with env and root under nested subroutes, a worker in apps.frankenphp): it loads,
    and the worker sees the site's env over its own, as on FrankenPHP ("bazbar")."""
    (tmp_path / "worker-env.php").write_text(ENV_WORKER)
    handler = {"env": {"FOO": "baz"}, "handler": "php", "root": str(tmp_path)}

    def config(port, admin):
        return json.dumps(frankenphp_json(admin, port, tmp_path, tmp_path, [handler]))

    srv = start_server("frankenphp-json", caddyfile=config)
    r = srv.get("/worker-env.php?i=1")
    assert (r.status, r.text) == (200, "bazbar1"), r.text


def test_frankenphp_json_handler_fields_and_route_groups(start_server, tmp_path):
    """http.handlers.php takes FrankenPHP's fields: its request_body_timeout (0 turns it
    off), name, and route_group (1.12) or server_index (1.13), which FrankenPHP's
    php_server puts on the copies of one handler in several routes: the copies' worker
    starts once. A field FrankenPHP does not have is refused."""
    (tmp_path / "worker-env.php").write_text(ENV_WORKER)
    (tmp_path / "plain.php").write_text("<?php echo 'plain';")
    worker = {"file_name": "worker-env.php", "num": 1, "match_path": ["/w/*"], "name": "env",
              "max_consecutive_failures": -1}
    copy = {"handler": "php", "root": str(tmp_path), "server_index": 3, "name": "shop", "request_body_timeout": 0,
            "env": {"FOO": "site"}, "workers": [worker]}

    def config(port, admin):
        cfg = frankenphp_json(admin, port, tmp_path, tmp_path, [])
        del cfg["apps"]["frankenphp"]["workers"]
        routes = cfg["apps"]["http"]["servers"]["srv0"]["routes"]
        routes[0] = {"match": [{"path": ["/w/*"]}], "handle": [dict(copy)]}
        routes.append({"handle": [dict(copy)], "terminal": True})
        return json.dumps(cfg)

    srv = start_server("frankenphp-json-groups", caddyfile=config)
    assert srv.get("/w/x?i=7").text == "sitesite7"
    assert srv.get("/plain.php").text == "plain"
    threads = srv.threads()
    workers = {t.get("worker") for t in threads["threads"] if t.get("worker")}
    assert workers == {"env"}, threads
    assert sum(1 for t in threads["threads"] if t.get("worker") == "env") == 1, "the copies share one worker thread"

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(frankenphp_json(free_port(), free_port(), tmp_path, tmp_path,
                                              [{"handler": "php", "root": str(tmp_path), "index": "x.php"}])))
    p = subprocess.run([str(CADDY), "validate", "--config", str(bad)], capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and 'unknown field \\"index\\"' in p.stderr, p.stderr[-2000:]


def test_php_server_name_scopes_workers_and_logs(start_server, tmp_path):
    """php_server's name (FrankenPHP 1.13): two sites whose workers have one name keep
    them apart, the one provisioned second as "<server>:<name>", and the lines PHP logs
    while serving a site carry its name."""
    for site in ("a", "b"):
        (tmp_path / site).mkdir()
        (tmp_path / site / "w.php").write_text(
            "<?php while (frankenphp_handle_request(function () { error_log('served by ' . __DIR__); echo basename(__DIR__); })) {}")

    def caddyfile(port, admin):
        port2 = free_port()
        caddyfile.port2 = port2
        sites = ""
        for site, p in (("a", port), ("b", port2)):
            sites += f"""
http://127.0.0.1:{p} {{
	php_server {{
		root {tmp_path / site}
		name shop-{site}
		worker {{
			file w.php
			num 1
			name app
			match /*
		}}
	}}
}}
"""
        return f"{{\n\tadmin 127.0.0.1:{admin}\n\tlog {{\n\t\tformat json\n\t}}\n}}\n" + sites

    srv = start_server("php-server-name", caddyfile=caddyfile)
    assert srv.get("/").text == "a"
    status, body, _ = http_get(caddyfile.port2, "/")
    assert (status, body) == (200, b"b")
    names = {t.get("worker") for t in srv.threads()["threads"] if t.get("worker")}
    assert names in ({"app", "shop-a:app"}, {"app", "shop-b:app"}), names
    lines = srv.wait_log(lambda e: "served by" in e.get("msg", ""), count=2)
    assert {(e.get("server"), e["msg"].rsplit("/", 1)[-1]) for e in lines} == {("shop-a", "a"), ("shop-b", "b")}, lines
