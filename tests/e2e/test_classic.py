"""The request semantics of classic mode (one script run per request) over real HTTP.

Tests taking the `php` fixture run twice: in classic mode and through a worker that runs
the same fixture scripts (tests/e2e/app/executor.php)."""

import base64
import concurrent.futures
import hashlib
import json
import os
import subprocess
import time
import uuid

import pytest

from conftest import (APP, CADDY, REPO, assert_disconnect_frees_the_thread, assert_stalled_body_frees_the_thread,
                      free_port, make_caddyfile, read_streamed, with_read_body_timeout)


def test_hello(php):
    r = php.get("/hello.php")
    assert r.status == 200
    assert r.body == b"Hello, world!"
    assert r.header("Content-Type") == "text/html; charset=UTF-8"
    assert r.header("X-Powered-By") == "PHP/" + php.get("/version.php").text


def test_cgi_variables(server):
    r = server.get("/server.php/extra/path?a=1&b=two&getenv[]=APP_ENV&getenv[]=FROM_CONFIG"
                   "&getenv[]=PHP_WORKER_TEST_ENV&getenv[]=HTTP_PROXY",
                   headers={"X-Custom-Header": "hv", "Content-Type": "text/x-test", "Proxy": "http://evil:1",
                            "Authorization": "Basic " + base64.b64encode(b"alice:s3cret").decode()})
    assert r.status == 200, r.text
    data = r.json()
    s, env = data["server"], data["getenv"]
    root = str((APP / "public").resolve())
    expected = {
        "REQUEST_METHOD": "GET",
        "REQUEST_URI": "/server.php/extra/path?a=1&b=two&getenv[]=APP_ENV&getenv[]=FROM_CONFIG"
                       "&getenv[]=PHP_WORKER_TEST_ENV&getenv[]=HTTP_PROXY",
        "QUERY_STRING": "a=1&b=two&getenv[]=APP_ENV&getenv[]=FROM_CONFIG&getenv[]=PHP_WORKER_TEST_ENV"
                        "&getenv[]=HTTP_PROXY",
        "SCRIPT_NAME": "/server.php",
        "SCRIPT_FILENAME": root + "/server.php",
        "PHP_SELF": "/server.php/extra/path",
        "PATH_INFO": "/extra/path",
        "PATH_TRANSLATED": root + "/extra/path",
        "DOCUMENT_ROOT": root,
        "DOCUMENT_URI": "/server.php",
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": str(server.port),
        "SERVER_PROTOCOL": "HTTP/1.1",
        "SERVER_SOFTWARE": "Caddy php_worker",
        "GATEWAY_INTERFACE": "CGI/1.1",
        "REMOTE_ADDR": "127.0.0.1",
        "REQUEST_SCHEME": "http",
        "HTTPS": "",
        "CONTENT_TYPE": "text/x-test",
        "CONTENT_LENGTH": "",
        "HTTP_HOST": f"127.0.0.1:{server.port}",
        "HTTP_X_CUSTOM_HEADER": "hv",
        "PHP_AUTH_USER": "alice",
        "PHP_AUTH_PW": "s3cret",
        "APP_ENV": "testing",
        "FROM_CONFIG": "configured",
        "PHP_WORKER_TEST_ENV": "from-process",
    }
    for key, value in expected.items():
        assert s.get(key) == value, f"$_SERVER[{key}] = {s.get(key)!r}, want {value!r}"
    assert s["REMOTE_PORT"].isdigit() and int(s["REMOTE_PORT"]) > 0
    assert abs(s["REQUEST_TIME"] - time.time()) < 5
    assert isinstance(s["REQUEST_TIME_FLOAT"], float) and abs(s["REQUEST_TIME_FLOAT"] - time.time()) < 5
    assert "HTTP_PROXY" not in s, "httpoxy: a Proxy header must never become HTTP_PROXY"
    assert env["HTTP_PROXY"] is False
    assert env == {"APP_ENV": "testing", "FROM_CONFIG": "configured", "PHP_WORKER_TEST_ENV": "from-process",
                   "HTTP_PROXY": False}


def test_content_length_and_type_of_a_post(server):
    r = server.get("/server.php", method="POST", body=b"x=1",
                   headers={"Content-Type": "application/x-www-form-urlencoded"})
    s = r.json()["server"]
    assert (s["CONTENT_LENGTH"], s["CONTENT_TYPE"], s["REQUEST_METHOD"]) == (
        "3", "application/x-www-form-urlencoded", "POST")


def test_query_post_cookies_and_request(php):
    r = php.get("/echo.php?q=1&arr[]=a&arr[]=b", method="POST", body=b"p=2&q=post&name=J%C3%BCrgen",
                   headers={"Content-Type": "application/x-www-form-urlencoded", "Cookie": "c1=v1; c2=v%202"})
    d = r.json()
    assert d["method"] == "POST"
    assert d["get"] == {"q": "1", "arr": ["a", "b"]}
    assert d["post"] == {"p": "2", "q": "post", "name": "Jürgen"}
    assert d["cookie"] == {"c1": "v1", "c2": "v 2"}
    assert d["request"]["p"] == "2" and d["request"]["q"] == "post"  # request_order GP: POST wins


def multipart(fields, files):
    boundary = "----php-worker-" + uuid.uuid4().hex
    parts = []
    for name, value in fields.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode())
    for name, (filename, content) in files.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'
                     f'Content-Type: application/octet-stream\r\n\r\n'.encode() + content + b"\r\n")
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


def test_upload_and_temp_file_cleanup(php):
    small = b"hello upload"
    big = os.urandom(300 * 1024)  # larger than the read-ahead: streamed to PHP
    body, ctype = multipart({"title": "t"}, {"small": ("a.txt", small), "big": ("b.bin", big)})
    r = php.get("/echo.php", method="POST", body=body, headers={"Content-Type": ctype})
    d = r.json()
    assert d["post"] == {"title": "t"}
    files = d["files"]
    assert files["small"]["name"] == "a.txt" and files["small"]["size"] == len(small)
    assert files["small"]["sha1"] == hashlib.sha1(small).hexdigest()
    assert files["big"]["size"] == len(big) and files["big"]["sha1"] == hashlib.sha1(big).hexdigest()
    assert files["small"]["tmp_exists"] and files["big"]["tmp_exists"]
    for f in files.values():
        assert not os.path.exists(f["tmp_name"]), "uploaded temp files are removed after the request"


def test_ten_megabyte_php_input(php):
    data = os.urandom(10 * 1024 * 1024)
    r = php.get("/input.php", method="PUT", body=data, headers={"Content-Type": "application/octet-stream"})
    assert r.status == 200, r.text
    assert r.json() == {"length": len(data), "sha1": hashlib.sha1(data).hexdigest()}


def test_chunked_request_body(php):
    def gen():
        for _ in range(10):
            yield b"a" * 100_000
    conn = __import__("http.client").client.HTTPConnection("127.0.0.1", php.port, timeout=30)
    conn.request("POST", "/input.php", body=gen(), headers={"Content-Type": "application/octet-stream"},
                 encode_chunked=True)
    r = conn.getresponse()
    assert json.loads(r.read()) == {"length": 1_000_000, "sha1": hashlib.sha1(b"a" * 1_000_000).hexdigest()}
    conn.close()


def test_flush_streams_the_first_chunk_before_the_script_ends(php):
    first_at, total, received = read_streamed(php.port, "/flush.php?ms=1500")
    assert first_at < 1.0, f"first chunk came after {first_at:.2f}s: output was not streamed"
    assert total >= 1.4
    assert b"second" in received


def test_headers_status_and_cookies(php):
    r = php.get("/headers.php")
    assert r.status == 202
    assert r.header("X-Custom") == "one"
    assert r.header("X-Removed") is None
    assert r.headers_all("X-Multi") == ["a", "b"]
    cookies = r.headers_all("Set-Cookie")
    assert len(cookies) == 3
    assert cookies[0] == "a=1" and cookies[1].startswith("b=2; path=/") and "HttpOnly" in cookies[1]
    assert r.text == "sent-before-output:no\nsent-after-flush:yes\n"


def test_status_line(php):
    r = php.get("/teapot.php")
    assert r.status == 418
    assert r.body == b"short and stout"


def test_session_round_trip(php):
    r1 = php.get("/session.php")
    cookie = r1.header("Set-Cookie")
    assert cookie and cookie.startswith("PHPSESSID=")
    sid = r1.json()["id"]
    assert r1.json()["count"] == 1
    r2 = php.get("/session.php", headers={"Cookie": f"PHPSESSID={sid}"})
    assert r2.json() == {"id": sid, "count": 2}
    r3 = php.get("/session.php")
    assert r3.json()["id"] != sid and r3.json()["count"] == 1


def test_fatal_error_then_a_clean_request(php):
    r = php.get("/fatal.php")
    assert r.status == 500
    assert "before the error" in r.text
    assert "Call to undefined function this_function_does_not_exist()" in r.text
    for _ in range(8):  # every thread stays usable
        ok = php.get("/hello.php")
        assert (ok.status, ok.body) == (200, b"Hello, world!")


def test_uncaught_exception_is_a_500(php):
    r = php.get("/exception.php")
    assert r.status == 500
    assert "Uncaught RuntimeException: uncaught on purpose" in r.text
    assert php.get("/hello.php").status == 200


def test_php_errors_go_to_the_log_with_matching_levels(php):
    tag = uuid.uuid4().hex
    assert php.get(f"/logs.php?tag={tag}").text.endswith("logged")
    found = php.wait_log(lambda e: e.get("msg") == f"a warning {tag}")
    assert found and found[0]["level"] == "warn" and found[0]["logger"] == "php_worker"
    assert (found[0]["php_error"], found[0]["line"]) == ("Warning", 4), found[0]
    assert found[0]["file"].endswith("/logs.php") and found[0]["uri"] == f"/logs.php?tag={tag}"
    notice = php.wait_log(lambda e: e.get("msg") == f"a notice {tag}")
    assert notice and notice[0]["level"] == "info" and notice[0]["php_error"] == "Notice"
    line = php.wait_log(lambda e: e.get("msg") == f"line from error_log {tag}")
    assert line and line[0]["level"] == "info"
    assert (line[0]["source"], line[0]["line"]) == ("error_log", 2) and line[0]["file"].endswith("/logs.php")
    fatal = php.get("/fatal.php")
    assert fatal.status == 500
    assert php.wait_log(lambda e: e["level"] == "error" and "this_function_does_not_exist" in e.get("msg", "")
                        and e.get("php_error") == "Fatal error")


def test_frankenphp_log_and_a_context_that_bails_out_while_encoded(php):
    """frankenphp_log() logs at its level with the context as fields; a context whose
    jsonSerialize() throws, exit()s or exhausts memory_limit while the function encodes
    it ends as PHP ends those, logs nothing, and the server goes on serving."""
    tag = uuid.uuid4().hex
    assert php.get(f"/franken-log.php?tag={tag}").text == "logged"
    found = php.wait_log(lambda e: e.get("msg") == f"franken {tag}")
    assert found and found[0]["level"] == "error" and found[0]["source"] == "frankenphp_log"
    assert (found[0]["tag"], found[0]["n"], found[0]["list"], found[0]["obj"]) == (tag, 3, [1, 2], {"ok": True})
    listed = php.wait_log(lambda e: e.get("msg") == f"franken list {tag}")
    assert listed and listed[0]["level"] == "warn" and (listed[0]["0"], listed[0]["1"]) == ("a", ["b"]), "a list context"
    r = php.get(f"/franken-log.php?mode=throw&tag=t{tag}")
    assert (r.status, r.text) == (200, "caught: cannot encode")
    r = php.get(f"/franken-log.php?mode=exit&tag=e{tag}")
    # exit(4) in a worker's handler ends its script, and the request is a 500 there.
    assert r.text == "exited while encoding" and r.status == (200 if php.name == "default" else 500)
    r = php.get(f"/franken-log.php?mode=memory&tag=m{tag}")
    assert r.status == 500 and "Allowed memory size" in r.text
    assert not [e for e in php.log_entries() if e.get("msg") in (f"franken t{tag}", f"franken e{tag}", f"franken m{tag}")]
    assert php.get("/hello.php").text == "Hello, world!"


def test_static_file(server):
    r = server.get("/static.txt")
    assert (r.status, r.body) == (200, b"Hello from file\n")
    assert r.header("Content-Type").startswith("text/plain")
    assert r.header("X-Powered-By") is None


def test_index_fallback_front_controller(server):
    r = server.get("/some/route?x=1")
    assert (r.status, r.text) == (200, "front:/some/route?x=1|/index.php|")
    r = server.get("/missing.php")
    assert r.text == "front:/missing.php|/index.php|"
    r = server.get("/")
    assert r.text == "front:/|/index.php|"


def test_path_info_split(server):
    r = server.get("/pathinfo.php/a/b.txt?z=1")
    root = str((APP / "public").resolve())
    assert r.json() == {
        "SCRIPT_NAME": "/pathinfo.php",
        "SCRIPT_FILENAME": root + "/pathinfo.php",
        "PATH_INFO": "/a/b.txt",
        "PATH_TRANSLATED": root + "/a/b.txt",
        "PHP_SELF": "/pathinfo.php/a/b.txt",
        "DOCUMENT_URI": "/pathinfo.php",
        "REQUEST_URI": "/pathinfo.php/a/b.txt?z=1",
    }
    r = server.get("/sub/page.php")
    assert r.text == "sub page, cwd=sub", "scripts run in their own directory"


def test_directory_redirects_to_slash_form(server):
    r = server.get("/dir?x=1")
    assert r.status == 308
    assert r.header("Location") == "/dir/?x=1"
    r = server.get("/dir/")
    assert (r.status, r.text) == (200, "dir index:/dir/index.php")


def test_nul_byte_in_path_is_400(server):
    r = server.get("/hello.php%00.txt")
    assert r.status == 400
    assert server.wait_log(lambda e: e.get("msg") == "request refused" and "NUL" in e.get("reason", ""))


def test_invalid_content_length_is_400(server):
    for value in (b"abc", b"-5"):
        raw = server.raw(b"POST /echo.php HTTP/1.1\r\nHost: t\r\nContent-Length: " + value +
                         b"\r\nConnection: close\r\n\r\n")
        assert raw.startswith(b"HTTP/1.1 400"), raw[:100]


def test_path_traversal_never_leaves_the_root(server):
    for path in ("/../outside.txt", "/%2e%2e/outside.txt", "/..%2foutside.txt", "/sub/../../outside.txt",
                 "/%2e%2e%2f%2e%2e%2foutside.txt"):
        r = server.raw(f"GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode())
        assert b"secret outside the root" not in r, path
        status = int(r.split(b" ", 2)[1])
        assert status in (200, 400, 404), (path, status)
    r = server.raw(b"GET /pathinfo.php%2f..%2fhello.php HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    assert r.startswith(b"HTTP/1.1 400"), "escaped and decoded paths must select the same script"


def test_client_disconnect_frees_the_thread(start_server):
    assert_disconnect_frees_the_thread(start_server("disconnect", threads=1))


def test_stalled_request_body_frees_the_thread(start_server):
    """request_buffer off: PHP reads the body from the client as it comes."""
    assert_stalled_body_frees_the_thread(start_server(
        "body-stall", lambda port, admin: with_read_body_timeout(make_caddyfile(
            port, admin, threads=1, global_extra="\t\trequest_buffer off\n"))))


@pytest.mark.parametrize("buffering", ["on", "off"])
def test_body_over_request_body_max_size_is_413(start_server, tmp_path, buffering):
    """Caddy's request_body max_size cuts a chunked body (its length unknown in advance):
    the client gets 413. Buffered, no script runs at all; with request_buffer off the cut
    comes while PHP reads, so a PUT script sees an aborted connection, and a POST script
    still does not run on the part that fit."""
    root = f"\troot * {APP}/public\n"
    extra = "\t\trequest_buffer off\n" if buffering == "off" else ""
    srv = start_server(f"body-limit-{buffering}", lambda port, admin: make_caddyfile(port, admin, global_extra=extra).replace(
        root, root + "\trequest_body {\n\t\tmax_size 100KB\n\t}\n"))
    assert "max_size 100KB" in (srv.workdir / "Caddyfile").read_text()
    body = tmp_path / "body"
    body.write_bytes(b"x=" + b"y" * 300_000)
    put_marker, post_marker = srv.workdir / "put.txt", srv.workdir / "post.txt"
    for method, ctype, marker in (("PUT", "application/octet-stream", put_marker),
                                  ("POST", "application/x-www-form-urlencoded", post_marker)):
        p = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-X", method,
                            "-H", "Transfer-Encoding: chunked", "-H", f"Content-Type: {ctype}",
                            "--data-binary", f"@{body}", f"http://127.0.0.1:{srv.port}/body-stall.php?marker={marker}"],
                           capture_output=True, timeout=30)
        assert p.stdout == b"413", (method, p.stdout, p.stderr)
    if buffering == "on":
        time.sleep(0.5)
        assert not put_marker.exists() and not post_marker.exists(), "no script ran: the body never arrived whole"
        return
    deadline = time.time() + 10
    while not put_marker.exists() and time.time() < deadline:
        time.sleep(0.05)
    read, aborted = put_marker.read_text().split()
    assert aborted == "aborted=1" and int(read.split("=")[1]) < 300_002
    assert not post_marker.exists(), "the script must not run on the part of the body that fit"


def test_concurrent_requests_see_only_their_own_data(php):
    def one(i):
        r = php.get(f"/mine.php?id=g{i}", method="POST", body=f"id=p{i}".encode(),
                       headers={"Content-Type": "application/x-www-form-urlencoded", "Cookie": f"id=c{i}",
                                "X-Id": f"h{i}"})
        return i, r.status, r.json()

    with concurrent.futures.ThreadPoolExecutor(max_workers=100) as pool:
        results = list(pool.map(one, range(100)))
    for i, status, d in results:
        assert status == 200
        leak = d.pop("thread_leak")
        assert d == {"get": f"g{i}", "post": f"p{i}", "cookie": f"c{i}", "header": f"h{i}"}
        if php.name == "default":
            assert leak is None, "classic mode: nothing survives a request"


def test_max_wait_time_answers_503_when_no_thread_frees_up(start_server):
    srv = start_server("maxwait", threads=1, global_extra="\t\tmax_wait_time 300ms")
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        busy = pool.submit(srv.get, "/sleep.php?ms=1500")
        time.sleep(0.3)
        start = time.time()
        r = srv.get("/hello.php")
        waited = time.time() - start
        answered_before_the_thread_freed_up = not busy.done()
        assert busy.result().status == 200
    assert r.status == 503 and r.header("Retry-After") == "1"
    assert r.text == "503 Service Unavailable: no PHP thread became free within max_wait_time\n"
    assert waited >= 0.25 and answered_before_the_thread_freed_up
    assert srv.wait_log(lambda e: e.get("msg") == "request answered 503")
    assert srv.get("/hello.php").status == 200
    assert srv.stop() == 0


def test_validate_and_adapt_start_no_php(tmp_path):
    caddyfile = tmp_path / "Caddyfile"
    caddyfile.write_text(make_caddyfile(free_port(), free_port()))
    for cmd in (["validate", "--config", str(caddyfile)], ["adapt", "--config", str(caddyfile)]):
        p = subprocess.run([str(CADDY), *cmd], cwd=REPO, capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, XDG_CONFIG_HOME=str(tmp_path), XDG_DATA_HOME=str(tmp_path)))
        assert p.returncode == 0, p.stderr
        assert "PHP engine started" not in p.stdout + p.stderr, f"caddy {cmd[0]} started PHP"
    assert "php_worker" in subprocess.run([str(CADDY), "adapt", "--config", str(caddyfile)], cwd=REPO,
                                          capture_output=True, text=True, timeout=60).stdout


def test_list_modules():
    out = subprocess.run([str(CADDY), "list-modules"], capture_output=True, text=True, timeout=60).stdout.split()
    assert "php_worker" in out and "http.handlers.php_worker" in out


def test_unknown_and_future_subdirectives_are_refused(tmp_path):
    for options, message in (({"global_extra": "\t\tshared_store_size 8"}, "shared_store_size must be a size"),
                             ({"site_extra": "\t\tbogus 1"}, "unknown php_worker subdirective"),
                             ({"site_extra": "\t\tworker {\n\t\t\tfile a.php\n\t\t\tbogus\n\t\t}"}, "unknown worker subdirective")):
        caddyfile = tmp_path / "Caddyfile"
        caddyfile.write_text(make_caddyfile(free_port(), free_port(), **options))
        p = subprocess.run([str(CADDY), "adapt", "--config", str(caddyfile)], capture_output=True, text=True,
                           timeout=60, env=dict(os.environ, XDG_CONFIG_HOME=str(tmp_path)))
        assert p.returncode != 0 and message in p.stderr, p.stderr


def test_graceful_shutdown_finishes_in_flight_requests(start_server):
    srv = start_server("shutdown", threads=2)
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        pending = pool.submit(srv.get, "/sleep.php?ms=1500")
        time.sleep(0.3)
        srv.proc.send_signal(__import__("signal").SIGINT)
        r = pending.result(timeout=30)
    assert (r.status, r.body) == (200, b"slept")
    assert srv.proc.wait(timeout=30) == 0
    assert "PHP stopped" in srv.log_text()


def test_errors_are_logged_not_shown_by_default(start_server):
    """With no php.ini and no php_ini, clients see no error details and the log gets
    them all (PHP's own defaults would show them and log nothing)."""
    def caddyfile(port, admin):
        text = make_caddyfile(port, admin)
        for line in ("php_ini display_errors 1", "php_ini html_errors 0", "php_ini log_errors 1"):
            assert line in text
            text = text.replace(f"\t\t{line}\n", "")
        return text
    srv = start_server("ini-defaults", caddyfile)
    ini = srv.get("/extensions.php").json()
    assert ini["ini_files"][0] is False, "a php.ini would decide these settings, not the defaults"
    assert ini["errors"] == ["0", "1"]
    tag = uuid.uuid4().hex
    r = srv.get(f"/logs.php?tag={tag}")
    assert (r.status, r.text) == (200, "logged")
    assert srv.wait_log(lambda e: e["level"] == "warn" and f"a warning {tag}" in e.get("msg", ""))
    assert srv.wait_log(lambda e: e["level"] == "info" and f"a notice {tag}" in e.get("msg", ""))
    fatal = srv.get("/fatal.php")
    assert (fatal.status, fatal.text) == (500, "before the error\n")
    assert srv.wait_log(lambda e: e["level"] == "error" and "this_function_does_not_exist" in e.get("msg", ""))


def test_the_extensions_apps_need_are_loaded(server):
    d = server.get("/extensions.php").json()
    wanted = {"ctype", "filter", "tokenizer", "session", "mbstring", "iconv", "fileinfo", "pdo",
              "pdo_sqlite", "pdo_pgsql", "pdo_mysql", "sqlite3", "mysqli", "openssl", "curl", "zlib",
              "xml", "dom", "simplexml", "xmlreader", "xmlwriter", "bcmath", "intl", "sodium", "pcntl",
              "posix", "phar", "zip", "gd", "exif", "zend opcache"}
    assert wanted - set(d["extensions"]) == set()
    assert d["opcache"], "OPcache runs under the php_worker SAPI"
    assert d["gd"]["JPEG Support"] and d["gd"]["WebP Support"] and d["gd"]["FreeType Support"]
    assert d["mysql_socket"] == "/run/mysqld/mysqld.sock"
    assert {"sqlite", "pgsql", "mysql"} <= set(d["pdo_drivers"])


def test_invalid_header_names_and_values_are_dropped_with_a_warning(php):
    r = php.get("/bad-headers.php")
    assert (r.status, r.text, r.header("X-Fine")) == (200, "body", "kept")
    assert not [k for k, _ in r.headers if k.lower().startswith("bad") or k.lower() == "x-ctl-value"]
    # Warned once per process and name (this fixture's first request to the script).
    warned = php.wait_log(lambda e: e["level"] == "warn" and "invalid name" in e.get("msg", "")
                          and e.get("name", "").startswith("Bad"), timeout=2)
    assert sorted(e["name"] for e in warned) == sorted(["Bad Name", "Bad\x01Ctl"])
    assert php.wait_log(lambda e: e["level"] == "warn" and e.get("name") == "X-Ctl-Value")


def test_module_function_signatures(php):
    """The module's functions, as PHP's reflection sees them: the names FrankenPHP,
    php-fpm and Apache use, the stores', the tasks' and the background scripts', with
    their parameters and return types."""
    signatures = [
        "apache_request_headers(): array",
        "apache_response_headers(): array",
        "fastcgi_finish_request(): bool",
        "frankenphp_finish_request(): bool",
        "frankenphp_handle_request(callable $callback): bool",
        "frankenphp_log(string $message, int $level = FRANKENPHP_LOG_LEVEL_INFO, array $context = []): void",
        "frankenphp_request_headers(): array",
        "frankenphp_response_headers(): array",
        "getallheaders(): array",
        "headers_send(int $status = 200): int",
        "php_worker_handle_task(callable $handler): bool",
        "php_worker_on_stop(?callable $callback): void",
        "php_worker_stopping(): bool",
        "php_worker_task(string $worker, string $payload, float $timeout = 30): string",
        "php_worker_tasks(string $worker, array $payloads, float $timeout = 30): array",
        "php_worker_wait_stop(float $seconds): bool",
    ] + [sig.replace("SCOPE", scope) for scope in ("local", "shared") for sig in (
        "php_worker_SCOPE_add(string $key, mixed $value, int $ttl = 0): bool",
        "php_worker_SCOPE_count(): int",
        "php_worker_SCOPE_flush(): bool",
        "php_worker_SCOPE_forget(string $key): bool",
        "php_worker_SCOPE_get(string $key, mixed $default = null): mixed",
        "php_worker_SCOPE_increment(string $key, int $by = 1): int|false",
        "php_worker_SCOPE_put(string $key, mixed $value, int $ttl = 0): bool",
        "php_worker_SCOPE_touch(string $key, int $ttl): bool",
    )]
    assert php.get("/signatures.php").json() == sorted(signatures, key=lambda sig: sig.split("(")[0])


def test_wait_stop_in_a_request_waits_and_ends_at_the_time_limit(php):
    """php_worker_wait_stop() pauses a request that nobody tells to stop for its whole
    pause; the request's time limit still ends it (a fatal error, the server serves on)."""
    d = php.get("/wait-stop.php?seconds=0.2").json()
    assert d["stopped"] is False and d["stopping"] is False and 0.19 < d["waited"] < 1, d
    began = time.monotonic()
    r = php.get("/wait-stop.php?seconds=10&limit=1", timeout=30)
    assert r.status == 500 and "Maximum execution time of 1 second exceeded" in r.text, r.text
    assert time.monotonic() - began < 3
    assert php.get("/hello.php").text == "Hello, world!"


def test_getallheaders_gives_the_request_headers_as_they_came(start_server, tmp_path):
    """getallheaders() (and frankenphp_request_headers()) list the request's headers under
    the names the request gave them (in Go's canonical form, as FrankenPHP does), a name
    of any length, and nothing that is not a header: a site's env named HTTP_* is a
    $_SERVER value, not a header."""
    (tmp_path / "h.php").write_text("<?php header('Content-Type: application/json'); "
                                    "echo json_encode(['all' => getallheaders(), 'franken' => frankenphp_request_headers()]);")
    srv = start_server("getallheaders", app=tmp_path, threads=2, site_extra="\t\tenv HTTP_X_FROM_ENV set-by-env")
    long_name = "X-" + "Long" * 100
    d = srv.get("/h.php", headers={"X-CSRF-Token": "t", long_name: "long", "Accept": "*/*"}).json()
    all_ = d["all"]
    assert all_["X-Csrf-Token"] == "t", all_
    canonical = "X-" + ("Long" * 100).capitalize()  # as Go's server names it (textproto's canonical form)
    assert all_.get(canonical) == "long", f"a {len(long_name)}-byte name: {list(all_)}"
    assert "X-From-Env" not in all_ and all(v != "set-by-env" for v in all_.values()), all_
    assert all_["Host"] == f"127.0.0.1:{srv.port}"
    assert d["franken"] == all_
