"""The extensions php_worker ships, on PHP threads: every one loaded in the server and in
php-cli; each one called on several threads at once; APCu shared by every thread and
surviving a worker restart; memcached and Redis (phpredis with igbinary, in a Laravel
app's cache, session and queue, across a reload) against real servers the tests start on
loopback; ImageMagick without threads of its own; extensions loaded by php_ini, every
`extension` line of them.

The Redis and memcached servers are Debian's redis-server and memcached, which
`scripts/install-deps.sh --tests` installs."""

import concurrent.futures
import json
import shutil
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

from conftest import CADDY, LARAVEL_INI, REPO, WORK, eventually, free_port, loopback_service

HERE = Path(__file__).resolve().parent
EXT_APP = HERE / "extensions"
LARAVEL = HERE / "laravel"

# Every extension of the build (scripts/build-php.sh): PHP's own, then the PECL ones. The
# lists in docs/extensions-<minor>.md are generated from the build
# (scripts/extension-list.sh); this is the contract the tests hold it to.
CORE = """bcmath bz2 calendar ctype curl date dba dom exif fileinfo filter ftp gd gettext gmp hash
iconv intl json ldap libxml mbstring mysqli mysqlnd openssl pcntl pcre pdo pdo_mysql pdo_pgsql
pdo_sqlite pgsql phar posix random readline reflection session shmop simplexml soap sockets sodium
spl sqlite3 standard sysvmsg sysvsem sysvshm tidy tokenizer xml xmlreader xmlwriter xsl zip
zlib""".split()
PECL = "amqp apcu ast igbinary imagick memcached msgpack redis ssh2 yaml zstd".split()
SHARED = ("pcov", "excimer")  # developer extensions, shared objects; Xdebug only on PHP 8.2


def php_cli(*args, env=None):
    p = subprocess.run([str(CADDY), "php-cli", *args], capture_output=True, text=True, timeout=60, cwd=str(REPO),
                       env=env)
    return p.returncode, p.stdout, p.stderr


def php_minor():
    return php_cli("-r", "echo PHP_MAJOR_VERSION, '.', PHP_MINOR_VERSION;")[1]


def extension_dir():
    return Path(php_cli("-r", "echo ini_get('extension_dir');")[1])


def caddyfile(port, admin_port, root, site="", global_extra="", threads=4):
    return f"""{{
	admin 127.0.0.1:{admin_port}
	persist_config off
	log {{
		format json
		level DEBUG
	}}
	php_worker {{
		num_threads {threads}
		php_ini display_errors 1
		php_ini html_errors 0
		php_ini apc.shm_size 32M
{global_extra}
	}}
}}

:{port} {{
	bind 127.0.0.1
	root * {root}
	php_worker {{
{site}
	}}
}}
"""


@pytest.fixture(scope="module")
def ext_server(start_server):
    """The extensions app: classic scripts, and /worker/* through a 3-thread worker."""
    return start_server("extensions", lambda port, admin: caddyfile(port, admin, EXT_APP / "public", site=f"""\t\tworker {{
			file {EXT_APP}/worker.php
			num 3
			match /worker/*
		}}""", threads=6))


def get_json(srv, path):
    r = srv.get(path)
    assert r.status == 200, f"{path}: {r.status} {r.text[:3000]}"
    return r.json()


def test_every_extension_is_loaded_in_the_server_and_in_php_cli(ext_server):
    served = {e.lower() for e in get_json(ext_server, "/loaded.php")["extensions"]}
    status, out, err = php_cli("-m")
    assert status == 0, err
    listed = {line.strip().lower() for line in out.splitlines() if line and not line.startswith("[")}
    for name in CORE + PECL:
        assert name in served, f"{name} is not in the server's get_loaded_extensions()"
        assert name in listed, f"{name} is not in php-cli -m"
    assert "zend opcache" in served and "zend opcache" in listed


@pytest.mark.parametrize("mode", ["classic", "worker"])
def test_each_extension_works_on_several_threads_at_once(ext_server, mode):
    path = "/checks.php" if mode == "classic" else "/worker/checks"
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda _: get_json(ext_server, path), range(12)))
    for answer in answers:
        failed = {name: detail for name, (ok, detail) in answer["checks"].items() if not ok}
        assert not failed, failed
    assert len({a["thread"] for a in answers}) > 1, "the checks ran on more than one PHP thread"


def test_libxml_first_used_by_every_thread_at_once(start_server):
    """libxml2 (before 2.12) sets up its catalogs and schema types lazily, and two threads
    setting up the catalogs at once broke its catalog lock: every later SoapClient, DOM DTD
    or XSL load then hung. A fresh server whose threads all make their first catalog lookup
    and schema validation at the same moment answers every request."""
    threads = 8
    for attempt in range(12):  # each fresh server has one first use; the race hit about 1 in 10
        srv = start_server(f"first-libxml-use-{attempt}", lambda port, admin: caddyfile(
            port, admin, EXT_APP / "public", threads=threads))
        with concurrent.futures.ThreadPoolExecutor(threads) as pool:
            answers = list(pool.map(
                lambda _: srv.get(f"/first-libxml-use.php?threads={threads}&round={attempt}", timeout=10),
                range(threads)))
        for r in answers:
            assert (r.status, r.json()) == (200, {"functions": 1, "root": "a", "valid": True}), r.text[:500]
        srv.stop()


def test_apcu_is_shared_by_every_thread_and_survives_a_worker_restart(ext_server):
    key = uuid.uuid4().hex
    stored = get_json(ext_server, f"/worker/apcu?op=store&k={key}")
    assert stored["ok"] is True

    def seen_by_every_thread():
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            answers = list(pool.map(lambda _: get_json(ext_server, f"/worker/apcu?op=fetch&k={key}"), range(18)))
        threads = {a["thread"] for a in answers}
        assert all(a["value"] == {"from": stored["thread"]} for a in answers), answers
        classic = get_json(ext_server, f"/apcu.php?op=fetch&k={key}")
        assert classic["value"] == {"from": stored["thread"]}, "a classic thread sees it too"
        return threads

    threads = seen_by_every_thread()
    assert len(threads - {stored["thread"]}) >= 1, f"another thread read what {stored['thread']} stored: {threads}"

    status, body = ext_server.admin("POST", "/php_worker/workers/restart")
    assert status == 200, body
    assert eventually(lambda: get_json(ext_server, "/worker/apcu?op=boot")["boot"] != stored["boot"], timeout=20)
    seen_by_every_thread()


def test_imagick_runs_no_threads_of_its_own(ext_server):
    """ImageMagick's OpenMP threads do not belong in a threaded server: imagick limits
    ImageMagick to the calling thread (imagick.set_single_thread, on by default), so a
    large resize leaves the process with the threads it had."""
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        # ImageMagick initialised on the threads the big resizes will use; small images
        # are never split across threads, so this starts none.
        list(pool.map(lambda _: get_json(ext_server, "/worker/resize?size=64"), range(6)))
        before = ext_server.php_named_threads()
        answers = list(pool.map(lambda _: get_json(ext_server, "/worker/resize?size=1600"), range(6)))
    assert all(a["width"] == 800 and a["threads_limit"] == 1 for a in answers), answers
    assert ext_server.php_named_threads() <= before, "ImageMagick started threads of its own"


@pytest.fixture(scope="module")
def memcached():
    yield from loopback_service("memcached", lambda binary, port, workdir: [
        binary, "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-m", "32", "-u", "root"])


def test_memcached_from_several_threads_at_once(ext_server, memcached):
    prefix = uuid.uuid4().hex[:8]
    assert get_json(ext_server, f"/worker/memcached?port={memcached}&prefix={prefix}&i=init")["set"] is True

    def work(i):
        return get_json(ext_server, f"/worker/memcached?port={memcached}&prefix={prefix}&i={i}")

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(work, range(60)))
    assert all(a["own"] is True for a in answers), [a for a in answers if not a["own"]][:3]
    assert all(isinstance(a["counter"], int) for a in answers), [a for a in answers if not isinstance(a["counter"], int)][:3]
    final = get_json(ext_server, f"/worker/memcached?port={memcached}&prefix={prefix}&i=final")
    assert final["counter"] == 61, "every increment from every thread counted once"
    assert len({a["thread"] for a in answers}) > 1


def laravel_caddyfile(redis_port, version, laravel):
    laravel_version, root = laravel

    def make(port, admin_port):
        return caddyfile(port, admin_port, LARAVEL / "public", threads=6, global_extra=LARAVEL_INI, site=f"""\t\troot {LARAVEL}/public
		index worker.php
		file_server off
		worker {{
			file worker.php
			num 4
			env LARAVEL_CACHE_DIR {WORK / f"laravel{laravel_version}-redis" / "laravel-cache"}
			env LARAVEL_PHP_ROOT {root}
			env REDIS_PORT {redis_port}
			env SESSION_DRIVER redis
			env CODE_VERSION {version}
		}}""")
    return make


def test_laravel_keeps_its_cache_sessions_and_queue_in_redis_across_a_reload(start_server, redis, laravel):
    """Laravel (8, and a current one) in worker mode with phpredis (igbinary serializer): cache increments from
    concurrent clients, each client's session, and a queue, while the config reloads
    (every worker restarts): no request fails and nothing is lost or counted twice."""
    srv = start_server(f"laravel{laravel[0]}-redis", laravel_caddyfile(redis, "v1", laravel))
    first = get_json(srv, "/redis/cache?k=warm")
    assert first["serializer"] == 2, "phpredis serializes with igbinary (Redis::SERIALIZER_IGBINARY)"
    put = get_json(srv, "/redis/cache/put?k=struct&v=x")
    assert put["stored"] is True
    assert get_json(srv, "/redis/cache/get?k=struct")["value"] == {"v": "x", "list": [1, 2]}

    counter = "c-" + uuid.uuid4().hex[:8]
    clients = 8
    reloaded = threading.Event()

    def client(n):
        """One visitor: a session of its own, a shared cache counter, jobs pushed; at least
        25 rounds, and on until 10 rounds after the reload."""
        cookie = None
        boots = set()
        i = after = 0
        while i < 25 or after < 10:
            after += reloaded.is_set()
            headers = {"Cookie": cookie} if cookie else {}
            r = srv.get("/redis/session", headers=headers, resend=True)
            assert r.status == 200, r.text[:2000]
            body = r.json()
            assert body["n"] == i + 1, f"client {n}: the session lost a visit ({body})"
            assert body["driver"] == "redis"
            for c in r.headers_all("Set-Cookie"):
                if c.startswith("laravel_session="):
                    cookie = c.split(";", 1)[0]
            boots.add(body["boot"])
            r = srv.get(f"/redis/cache?k={counter}", resend=True)
            assert r.status == 200, r.text[:2000]
            r = srv.get(f"/redis/queue/push?id={counter}-{n}-{i}", resend=True)
            assert r.status == 200, r.text[:2000]
            i += 1
        return boots, i

    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        futures = [pool.submit(client, n) for n in range(clients)]
        time.sleep(0.5)
        status, body = srv.load(laravel_caddyfile(redis, "v2", laravel)(srv.port, srv.admin_port), force=True)
        assert status == 200, body
        reloaded.set()
        results = [f.result() for f in futures]
    boots = set().union(*(b for b, _ in results))
    visits = sum(n for _, n in results)
    assert len(boots) > 4, "the reload replaced the worker threads while the clients ran"

    value = get_json(srv, f"/redis/cache?k={counter}")["value"]
    assert value == visits + 1, "every increment counted once"
    worked = get_json(srv, f"/redis/queue/work?run={counter}-")
    assert worked["ran"] == visits and worked["done"] == visits, worked
    assert srv.stop() == 0


def test_every_repeated_extension_line_loads(start_server, tmp_path):
    """`php_ini extension` twice, and php-cli's -d twice, load both, as PHP's CLI and a
    php.ini with two extension lines do."""
    ext_dir = extension_dir()
    for name in SHARED:
        assert (ext_dir / f"{name}.so").exists(), f"{name}.so is not in {ext_dir}"
    status, out, err = php_cli("-d", "extension=pcov", "-d", "extension=excimer.so", "-m")
    assert status == 0, err
    modules = out.lower().split()
    assert "pcov" in modules and "excimer" in modules, out
    status, out, _ = php_cli("-m")
    assert "pcov" not in out.lower().split() and "excimer" not in out.lower().split(), \
        "the developer extensions load only when asked for"

    srv = start_server("extension-lines", lambda port, admin: caddyfile(port, admin, EXT_APP / "public",
                                                                        global_extra="\t\tphp_ini extension pcov\n"
                                                                                     "\t\tphp_ini {\n\t\t\textension excimer\n\t\t}"))
    loaded = {e.lower() for e in get_json(srv, "/loaded.php")["extensions"]}
    assert {"pcov", "excimer"} <= loaded
    assert srv.stop() == 0


def test_xdebug_loads_where_the_build_has_it(start_server):
    """Xdebug is built for PHP 8.2 only (the one version of it that downloads here); the
    8.4 build says why it has none (scripts/build-php.sh), and a user's own Xdebug loads
    the same way."""
    xdebug = extension_dir() / "xdebug.so"
    if php_minor() != "8.2":
        assert not xdebug.exists()
        pytest.skip("no Xdebug for PHP 8.4 downloads here (only Debian 12's Xdebug 3.2, for PHP 8.0-8.2)")
    status, out, err = php_cli("-d", "zend_extension=xdebug", "-r", "echo phpversion('xdebug');")
    assert status == 0 and out.startswith("3."), (out, err)
    srv = start_server("xdebug-loaded", lambda port, admin: caddyfile(port, admin, EXT_APP / "public",
                                                                      global_extra="\t\tphp_ini zend_extension xdebug\n\t\tphp_ini xdebug.mode off"))
    loaded = {e.lower() for e in get_json(srv, "/loaded.php")["extensions"]}
    assert "xdebug" in loaded
    assert srv.stop() == 0


def test_the_readme_extension_list_is_the_builds():
    """docs/extensions-<minor>.md, which the README links, lists what this binary carries
    (scripts/extension-list.sh writes it from the binary)."""
    p = subprocess.run([str(REPO / "scripts" / "extension-list.sh"), "--check", str(CADDY)], capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
