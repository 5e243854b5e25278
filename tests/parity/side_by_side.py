#!/usr/bin/env python3
"""FrankenPHP's own test fixtures, served by php_worker and by FrankenPHP side by side.

    python3 tests/parity/side_by_side.py --frankenphp PATH [--caddy PATH] [--php-config PATH]
                                         [--tarball FRANKENPHP.tar.gz] [--only TEXT] [--json REPORT]

PATH is what the bench's --frankenphp takes: a FrankenPHP binary, or a folder holding
build-frankenphp.sh and frankenphp-<version>.tar.gz (built once against --php-config's PHP and
cached under ~/.cache/php_worker/peer/, by the bench's own code). The fixtures (FrankenPHP's
testdata/) are read from that tarball at run time; they are FrankenPHP's and stay out of this
repository.

Both servers get the same Caddyfile (the one FrankenPHP's Go test wrote, or the equivalent of
what its Go API test set up), the same environment and the same PHP build; each case's requests
go to both, one after the other, and their answers are compared after normalising only what
must differ between two processes: ports, work folders, remote ports, timestamps, random
session ids. What a server says about itself (SERVER_SOFTWARE, phpinfo's Server API) is
compared as it is: a difference there is reported, then judged in the docs.

Prints the count of cases that answer the same and, for each difference, both answers; writes
the whole run as JSON (default tests/.work/parity/report.json). Python 3.11, stdlib only.
"""

import argparse
import dataclasses
import difflib
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WORK = REPO / "tests" / ".work" / "parity"

# The bench builds and checks the FrankenPHP peer; this tool reuses that, not a copy of it.
sys.path.insert(0, str(REPO / "tests" / "bench"))
sys.dont_write_bytecode = True  # no __pycache__ left in tests/ by a run
import bench  # noqa: E402


def log(*args):
    print(*args, flush=True)


# ---- HTTP ----------------------------------------------------------------------------------
#
# A raw client rather than http.client: the cases send what FrankenPHP's Go tests send, which
# http.client refuses or rewrites (a '#' or '<' in the query, a header value with a NUL, a
# second Cookie header), and they look at what it hides (103 Early Hints, the chunks a flush()
# makes, a client that leaves right after sending).

@dataclasses.dataclass
class Request:
    method: str = "GET"
    path: str = "/"
    headers: tuple = ()            # (name, value) pairs, sent in order, repeats allowed
    body: bytes = b""
    host: str | None = None        # Host header; None: the site's own (localhost:<port>)
    site: str | None = None        # which of the config's sites; None: its first
    abort: bool = False            # send, then close at once without reading
    timeout: float = 30


@dataclasses.dataclass
class Response:
    status: int
    headers: list                  # (lower-case name, value)
    body: bytes
    interim: list                  # [(status, headers)] of 1xx answers before the final one
    chunks: list | None            # chunk payloads when chunked
    framing: str                   # chunked, length or close

    def header(self, name):
        return [v for k, v in self.headers if k == name.lower()]


def send(port, req, host):
    """One request on a fresh connection: a Response, or None for an aborted request."""
    head = [f"{req.method} {req.path} HTTP/1.1", f"Host: {host}"]
    head += [f"{k}: {v}" for k, v in req.headers]
    if req.body or req.method in ("POST", "PUT", "PATCH"):
        if not any(k.lower() == "content-length" for k, _ in req.headers):
            head.append(f"Content-Length: {len(req.body)}")
    if not req.abort:
        head.append("Connection: close")
    data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + req.body
    s = socket.create_connection(("127.0.0.1", port), timeout=req.timeout)
    try:
        s.sendall(data)
        if req.abort:
            # Reset rather than close: the server learns at once that the client is gone,
            # whether it reads or writes next, so which of the two it does first (a race
            # with a plain close) does not decide the answer.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return None
        return read_response(s.makefile("rb"), req.method)
    finally:
        s.close()


def read_response(f, method):
    interim = []
    while True:
        line = f.readline()
        if not line:
            raise ConnectionError("connection closed before any answer")
        status = int(line.split(b" ", 2)[1])
        headers = []
        while (h := f.readline()) not in (b"\r\n", b"\n", b""):
            k, _, v = h.decode("latin-1").partition(":")
            headers.append((k.strip().lower(), v.strip()))
        if 100 <= status < 200 and status != 101:
            interim.append((status, headers))
            continue
        break
    te = [v.lower() for k, v in headers if k == "transfer-encoding"]
    cl = [v for k, v in headers if k == "content-length"]
    chunks = None
    if method == "HEAD" or status in (204, 304):
        body, framing = b"", "none"
    elif te and "chunked" in te[-1]:
        chunks, framing = [], "chunked"
        while True:
            size = int(f.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while f.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                break
            chunks.append(f.read(size))
            f.readline()
        body = b"".join(chunks)
    elif cl:
        body, framing = f.read(int(cl[0])), "length"
    else:
        body, framing = f.read(), "close"
    return Response(status, headers, body, interim, chunks, framing)


_HANDED_OUT = set()


def free_port():
    """A loopback port nobody listens on and that this run has not handed out before. The
    kernel may give the same free port to two calls in a row (a site and its admin port),
    and Caddy binds with SO_REUSEPORT, so both listeners would get it and split the
    connections between them."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


# ---- servers -------------------------------------------------------------------------------

@dataclasses.dataclass
class Config:
    """One Caddyfile (or JSON config) for both servers. Markers filled per server:
    <<site>> is the port of that site, <<admin>> the admin port, <<ini>> the php_ini lines only
    FrankenPHP gets (its OPcache: php_worker loads the same build's OPcache by itself)."""
    name: str
    text: str
    sites: tuple = ("main",)
    source: str = ""               # FrankenPHP test(s) the config comes from
    json: bool = False
    cwd: str = "caddy"             # relative to the fixtures: FrankenPHP's caddy tests run in caddy/


class Server:
    def __init__(self, label, binary, extra_ini, work, fixtures, env):
        self.label, self.binary, self.extra_ini = label, binary, extra_ini
        self.work, self.fixtures, self.env = work, fixtures, env
        self.dir = work / "servers" / label
        self.proc, self.error, self.ports, self.admin = None, None, {}, 0

    def render(self, cfg):
        if cfg.json:
            conf = json.loads(cfg.text.replace("<<admin>>", str(self.admin)))
            for srv in conf["apps"]["http"]["servers"].values():
                srv["listen"] = [f"127.0.0.1:{self.ports[a[2:-2]]}" if a.startswith("<<") else a for a in srv["listen"]]
            if self.extra_ini:
                conf["apps"]["frankenphp"].setdefault("php_ini", {}).update(self.extra_ini)
            return json.dumps(conf, indent=1)
        text = cfg.text.replace("<<admin>>", str(self.admin)).replace("<<fixtures>>", str(self.fixtures))
        for s, p in self.ports.items():
            text = text.replace(f"<<{s}>>", str(p))
        ini = "".join(f"\t\tphp_ini {k} {v}\n" for k, v in self.extra_ini.items())
        return text.replace("\t\t<<ini>>\n", ini).replace("<<ini>>", ini.strip())

    def start(self, cfg):
        self.cfg, self.ports, self.admin = cfg, {site: free_port() for site in cfg.sites}, free_port()
        shutil.rmtree(self.dir, ignore_errors=True)
        (self.dir / "config").mkdir(parents=True)
        path = self.dir / ("caddy.json" if cfg.json else "Caddyfile")
        path.write_text(self.render(cfg))
        self.log_path = self.dir / "server.log"
        env = dict(self.env, XDG_CONFIG_HOME=str(self.dir / "config"), XDG_DATA_HOME=str(self.dir / "config"))
        args = [str(self.binary), "run", "--config", str(path)] + ([] if cfg.json else ["--adapter", "caddyfile"])
        with open(self.log_path, "wb") as out:
            self.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env,
                                         cwd=str(self.fixtures / cfg.cwd), start_new_session=True)
        self.error = None
        try:
            self.wait_ready()
        except RuntimeError as e:
            self.error = str(e)
            self.stop()

    def wait_ready(self):
        # Ports open, Caddy's "serving initial configuration", and FrankenPHP's own "started"
        # line: before it, FrankenPHP can accept a request that then waits forever (the bench
        # found this too). php_worker queues requests until its threads are up.
        deadline = time.time() + 60
        wanted = [b"serving initial configuration"] + ([b"FrankenPHP started"] if self.label == "frankenphp" else [])
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"exited with {self.proc.returncode}: {self.first_error()}")
            text = self.log_path.read_bytes()
            if all(w in text for w in wanted) and all(self.port_open(p) for p in self.ports.values()):
                return
            if time.time() > deadline:
                raise RuntimeError(f"not ready within 60 s: {self.first_error()}")
            time.sleep(0.05)

    @staticmethod
    def port_open(port):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return True
        except OSError:
            return False

    def first_error(self):
        for line in self.log_path.read_text(errors="replace").splitlines():
            if '"level":"error"' in line or "Error:" in line or line.startswith("Error"):
                try:
                    return json.loads(line).get("error") or json.loads(line).get("msg")
                except ValueError:
                    return line[:300]
        return self.log_path.read_text(errors="replace")[-300:]

    def log_text(self):
        return self.log_path.read_text(errors="replace") if self.proc else ""

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# ---- steps ---------------------------------------------------------------------------------
#
# A case is a list of steps run against one server; a step returns a JSON-able answer. The
# answers of both servers, once normalised, are compared.

def http(method="GET", path="/", headers=(), body=b"", norm=None, keep=("status", "headers", "body"), **kw):
    """A request; its answer is the status, the response headers that matter, the body run
    through `norm` (a function of (text, ctx)), and what `keep` asks for besides."""
    if isinstance(body, str):
        body = body.encode()
    req = Request(method, path, tuple(headers), body, **kw)

    def step(srv, ctx):
        host = req.host or f"localhost:{srv.ports[req.site or srv.cfg.sites[0]]}"
        port = srv.ports[req.site or srv.cfg.sites[0]]
        try:
            r = send(port, req, host)
        except (OSError, ConnectionError, ValueError) as e:
            return {"error": type(e).__name__ + (f": {e}" if str(e) else "")}
        if req.abort:
            return {"aborted": True}
        ctx.cookies(r)
        text = r.body.decode("utf-8", errors="replace")
        answer = {}
        if "status" in keep:
            answer["status"] = r.status
        if "headers" in keep:
            answer["headers"] = compared_headers(r.headers)
        if "body" in keep:
            answer["body"] = (norm or normalise)(text, ctx)
        if "interim" in keep or r.interim:
            answer["interim"] = [[s, compared_headers(h)] for s, h in r.interim]
        if "chunks" in keep:
            answer["chunks"] = [c.decode(errors="replace") for c in (r.chunks or [r.body])]
        answer["_framing"] = r.framing  # reported, not compared: invisible to the application
        return answer
    step.describe = f"{req.method} {req.path}" + (" (client leaves at once)" if req.abort else "")
    return step


# Response headers left out of the comparison: Date changes, Server names the binary (Caddy vs
# "FrankenPHP Caddy", a build flag of the bench's FrankenPHP), the framing (Content-Length or
# chunked) depends on whether a server buffers a response, which no PHP code can see, and
# file_server's ETag format changed between the two servers' Caddy versions (2.11.4 in the
# peer: "<mtime><size>", later: "<mtime>-<size>").
DROPPED_HEADERS = {"date", "server", "content-length", "transfer-encoding", "connection", "etag"}


def compared_headers(headers):
    out = {}
    for k, v in headers:
        if k in DROPPED_HEADERS:
            continue
        if k == "set-cookie":
            v = re.sub(r"PHPSESSID=[^;]+", "PHPSESSID={sid}", v)
        out.setdefault(k, []).append(v)
    return dict(sorted(out.items()))


def sleep(seconds):
    def step(srv, ctx):
        time.sleep(seconds)
        return None
    step.describe = f"wait {seconds}s"
    return step


def log_has(*patterns, wait=3.0, whole=False):
    """What the server's log says after the earlier steps (or, `whole`, since it started: a
    worker logs while it boots): for each regex, its first group (or True) once it shows up
    within `wait` seconds, else None. error_log() and frankenphp_log() lines land in the
    log, in each server's format; only the text is looked at."""
    def step(srv, ctx):
        deadline = time.time() + wait
        found = {}
        while True:
            text = srv.log_text()[0 if whole else ctx.log_start:]
            for p in patterns:
                m = re.search(p, text)
                found[p] = (m.group(1) if m.groups() else True) if m else None
            if all(v is not None for v in found.values()) or time.time() > deadline:
                return {"log": found}
            time.sleep(0.05)
    step.describe = "log: " + ", ".join(patterns)
    return step


def admin(method, path):
    def step(srv, ctx):
        req = Request(method, path)
        try:
            r = send(srv.admin, req, f"127.0.0.1:{srv.admin}")
        except OSError as e:
            return {"error": str(e)}
        return {"status": r.status, "body": r.body.decode(errors="replace")}
    step.describe = f"admin {method} {path}"
    return step


def parallel(*timed, summary=None):
    """Steps started together (each after its delay); their answers in order, or `summary`
    of them when only an aggregate is deterministic (which of 10 queued requests gets a 503)."""
    def step(srv, ctx):
        answers = [None] * len(timed)

        def run(i, delay, inner):
            time.sleep(delay)
            answers[i] = inner(srv, ctx)
        threads = [threading.Thread(target=run, args=(i, d, s)) for i, (d, s) in enumerate(timed)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        return summary(answers) if summary else answers
    step.describe = f"{len(timed)} requests at once"
    return step


def cli(*args, norm=None):
    """`<binary> php-cli ARGS` in the fixtures' folder: exit code and output."""
    def step(srv, ctx):
        p = subprocess.run([str(srv.binary), "php-cli", *args], capture_output=True, text=True, timeout=60,
                           cwd=str(srv.fixtures), env=srv.env)
        out = p.stdout + p.stderr
        return {"exit": p.returncode, "output": norm(out, ctx) if norm else out}
    step.describe = "php-cli " + " ".join(args)
    return step


@dataclasses.dataclass
class Case:
    id: str
    config: str
    steps: list
    source: str = ""


class Context:
    """Per case and server: the cookie jar of its requests, where its log began, and the
    values to normalise (this server's ports and folders)."""

    def __init__(self, srv):
        self.srv, self.jar, self.log_start = srv, {}, len(srv.log_text())
        self.labels = {}

    def cookies(self, r):
        for v in r.header("set-cookie"):
            name, _, rest = v.partition("=")
            self.jar[name.strip()] = rest.split(";")[0]

    def jar_header(self):
        return "; ".join(f"{k}={v}" for k, v in self.jar.items())

    def label(self, value):
        """A stable name (A, B, ...) for a random value, in order of first appearance."""
        return self.labels.setdefault(value, chr(ord("A") + len(self.labels)))


def with_jar(step_factory):
    """A request that carries the cookies earlier steps of the case received (a cookie jar)."""
    def step(srv, ctx):
        return step_factory(ctx.jar_header())(srv, ctx)
    step.describe = step_factory("").describe + " (with the cookies so far)"
    return step


# ---- normalisation ---------------------------------------------------------------------------

def normalise(text, ctx):
    """What must differ between the two processes, and only that."""
    srv = ctx.srv
    for name, port in sorted(srv.ports.items(), key=lambda kv: -len(str(kv[1]))):
        text = re.sub(rf"(?<!\d){port}(?!\d)", f"{{port:{name}}}", text)
    if srv.admin:  # php-cli cases have none
        text = re.sub(rf"(?<!\d){srv.admin}(?!\d)", "{admin}", text)
    text = text.replace(str(srv.dir), "{server_dir}")
    text = text.replace(str(srv.fixtures.resolve()), "{fixtures}").replace(str(srv.fixtures), "{fixtures}")
    # Upload temporary files, REMOTE_PORT, request times: per request, by nature.
    text = re.sub(r"/tmp/php[A-Za-z0-9]{6,}", "/tmp/php{upload}", text)
    text = re.sub(r"(\[REMOTE_PORT\] => |'REMOTE_PORT' => '|\[\"REMOTE_PORT\"\]=>\n\s+string\(\d+\) \")\d+",
                  r"\g<1>{remote_port}", text)
    text = re.sub(r"(?<![\d.])1[6-9]\d{8}(\.\d+)?(?![\d.])", "{time}", text)
    # A new session's id (session-leak.php prints it): random.
    text = re.sub(r"session_id=[0-9a-zA-Z,-]{20,}", "session_id={sid}", text)
    return text


def sort_dump(text, ctx=None):
    """normalise(), then the entries of every print_r / var_export / var_dump array sorted by
    key: the order in which a server registers $_SERVER's variables (or a Go map hands out
    request headers) is not something PHP code may rely on, and it is not compared.

    An array's entries are the lines that start with a key at one indentation (its base);
    the lines below an entry, more indented or not a key, belong to it (nested arrays,
    var_dump's value lines); a non-blank line less indented than the base ends the array."""
    text = normalise(text, ctx) if ctx else text
    out, entries, base = [], [], None

    def flush():
        entries.sort(key=lambda e: ENTRY.match(e[0]).group(1))
        out.extend(line for e in entries for line in e)
        entries.clear()

    for line in text.split("\n"):
        indent = len(line) - len(line.lstrip())
        is_entry = ENTRY.match(line) is not None
        if base is not None and line.strip() and indent < base:
            flush()
            base = None
        if is_entry and (base is None or indent == base):
            base = indent
            entries.append([line])
        elif base is not None:
            entries[-1].append(line)
        else:
            out.append(line)
    flush()
    return "\n".join(out)


ENTRY = re.compile(r"^\s*(\[[^\]]*\]|'(?:[^'\\]|\\.)*'|\[\"[^\"]*\"\])\s*=>")


def phpinfo_summary(text, ctx):
    """phpinfo()'s page differs in build details nobody compares; what FrankenPHP's test looks
    at (the word frankenphp, the query) and what the server says it is (Server API)."""
    api = re.search(r"Server API\s*</td><td class=\"v\">([^<]*)<", text) or re.search(r"Server API => (.*)", text)
    return json.dumps({"server_api": api and api.group(1).strip(), "mentions frankenphp": "frankenphp" in text,
                       "has the query": bool(re.search(r"i=\d+", text)),
                       "frankenphp section": bool(re.search(r'<a name="module_frankenphp"', text))})


def instance_labels(text, ctx):
    """worker-counter-persistent.php's random instance id, named A, B, ... in order."""
    return re.sub(r"instance:([0-9a-f]{16})", lambda m: "instance:" + ctx.label(m.group(1)), text)


def some_503(answers):
    """TestMaxWaitTime's check: at least one of the requests was turned away (503); which
    ones is a race."""
    statuses = [a.get("status") for a in answers]
    return {"some 503": 503 in statuses, "others": sorted(set(s for s in statuses if s != 503))}


# ---- configs ---------------------------------------------------------------------------------
#
# Each comes from a FrankenPHP Go test: the Caddyfile its caddy/ test writes (site addresses as
# http://localhost:<port>, its http_port/https_port/skip_install_trust dropped, all on 127.0.0.1),
# or, for the tests of the Go API in frankenphp_test.go and worker_test.go, the Caddyfile that
# sets up what runTest() does: `php { root testdata }` (WithRequestDocumentRoot), workers from
# WithWorkers, php_ini from WithPhpIni, env from WithRequestEnv.

GLOBAL = """{
	admin 127.0.0.1:<<admin>>
	persist_config off
	default_bind 127.0.0.1
	auto_https off
	log {
		format json
	}
"""

CONFIGS = {}


def config(name, text, sites=("main",), source="", **kw):
    CONFIGS[name] = Config(name, text, tuple(sites), source, **kw)


# frankenphp_test.go's module tests (runTest without a worker), and the benchmarks' requests.
config("module", GLOBAL + """	frankenphp {
		<<ini>>
	}
}

http://:<<main>> {
	route {
		php {
			root ../testdata
		}
	}
}

# TestPreparedEnv*: WithRequestEnv
http://:<<env>> {
	route {
		php {
			root ../testdata
			env FRANKENPHP_TEST_PHP_SERVER_ENV_IN_GETENV hello
			env FRANKENPHP_PREPARED prepared_value
		}
	}
}

# TestPathInfo: the Go handler rewrites the path and keeps the original REQUEST_URI
http://:<<pathinfo>> {
	route {
		rewrite * /server-variable.php/pathinfo
		php {
			root ../testdata
		}
	}
}
""", sites=("main", "env", "pathinfo"), source="frankenphp_test.go (module)")

# Fatal errors with display_errors set the same way on both (each server's default differs,
# see the cases on the default configs): what is left is what each server does with the
# status and the output of a request that dies.
for _shown in ("1", "0"):
    config(f"display_errors-{_shown}", GLOBAL + """	frankenphp {
		php_ini display_errors %s
		<<ini>>
	}
}

http://:<<main>> {
	route {
		php {
			root ../testdata
		}
	}
}

http://:<<worker>> {
	route {
		php {
			root ../testdata
			worker {
				file exception.php
				num 1
			}
		}
	}
}
""" % _shown, sites=("main", "worker"), source=f"display_errors {_shown} on both")

config("abort", GLOBAL + """	frankenphp {
		num_threads 1
		<<ini>>
	}
}

http://:<<main>> {
	route {
		php {
			root ../testdata
		}
	}
}
""", source="TestConnectionAbort (module)")

# The fixtures frankenphp_test.go and worker_test.go run as workers, each its own worker
# (WithWorkers), one thread each so that counters go as in the Go tests.
WORKER_FILES = [
    "index.php", "finish-request.php", "server-variable.php", "headers.php", "response-headers.php",
    "input.php", "super-globals.php", "request-superglobal.php", "request-superglobal-conditional.php",
    "cookies.php", "session.php", "phpinfo.php", "persistent-object.php", "autoloader.php",
    "log-error_log.php", "log-frankenphp_log.php", "connection_status.php", "exception.php",
    "early-hints.php", "flush.php", "large-request.php", "fiber-no-cgo.php", "fiber-basic.php",
    "request-headers.php", "env/test-env.php", "env/remember-env.php", "env/prepared-env-getenv.php",
    "env/prepared-env-survives-putenv.php", "env/overwrite-env.php", "file-upload.php", "only-headers.php",
    "file-stream.php", "session-handler.php", "worker-with-session-handler.php", "session-leak.php",
    "worker.php", "die.php", "worker-with-counter.php", "transition-worker-1.php", "transition-worker-2.php",
    "message-worker.php",
]
WORKER_ENV = {"worker-getopt.php": {"FOO": "bar"}, "worker-env.php": {"FOO": "bar"}}
config("worker", GLOBAL + """	frankenphp {
		num_threads %d
		<<ini>>
%s	}
}

http://:<<main>> {
	route {
		php {
			root ../testdata
		}
	}
}

http://:<<env>> {
	route {
		php {
			root ../testdata
			env FRANKENPHP_TEST_PHP_SERVER_ENV_IN_GETENV hello
			env FRANKENPHP_PREPARED prepared_value
		}
	}
}
""" % (len(WORKER_FILES) + len(WORKER_ENV) + 2, "".join(
    f"\t\tworker {{\n\t\t\tfile ../testdata/{f}\n\t\t\tnum 1\n"
    + "".join(f"\t\t\tenv {k} {v}\n" for k, v in WORKER_ENV.get(f, {}).items()) + "\t\t}\n"
    for f in WORKER_FILES + list(WORKER_ENV))), sites=("main", "env"), source="frankenphp_test.go, worker_test.go (worker)")

config("gpcs", GLOBAL + """	frankenphp {
		php_ini variables_order GPCS
		<<ini>>
	}
}

http://:<<main>> {
	route {
		php {
			root ../testdata
			env FRANKENPHP_TEST_PHP_SERVER_ENV_IN_GETENV hello
		}
	}
}
""", source="TestPreparedEnvIsNotInEnvWithoutVariablesOrderE")

config("ini-env", GLOBAL + """	frankenphp {
		php_ini opcache.enable ${LITERAL_ZERO}
		<<ini>>
	}
}

http://:<<main>> {
	route {
		php {
			root ../testdata
		}
	}
}
""", source="TestEnvVarsInPhpIni")

for _mode in ("module", "worker"):
    config(f"maxreq-{_mode}", GLOBAL + """	frankenphp {
		num_threads 2
		max_requests 5
		<<ini>>
%s	}
}

http://:<<main>> {
	route {
		php {
			root ../testdata
		}
	}
}
""" % ("\t\tworker {\n\t\t\tfile ../testdata/worker-counter-persistent.php\n\t\t\tnum 1\n\t\t}\n" if _mode == "worker" else ""),
        source="TestWorkerMaxRequests" if _mode == "worker" else "TestModuleMaxRequests")

    config(f"preload-{_mode}", GLOBAL + """	frankenphp {
		php_ini opcache.enable 1
		php_ini opcache.preload ../testdata/preload.php
		php_ini opcache.preload_user root
		<<ini>>
%s	}
}

http://:<<main>> {
	route {
		php {
			root ../testdata
		}
	}
}
""" % ("\t\tworker {\n\t\t\tfile ../testdata/preload-check.php\n\t\t\tnum 1\n\t\t\tenv TEST 123\n\t\t}\n"
       if _mode == "worker" else "\t\tnum_threads 2\n"), source=f"TestOpcachePreload_{_mode}")

# frankenphp_test.go's TestNonWorkerModeAlwaysWorks, and the fixtures no Go test serves over
# HTTP, whose plain answer is still worth comparing.
config("beside-worker", GLOBAL + """	frankenphp {
		worker ../testdata/phpinfo.php 1
		<<ini>>
	}
}

http://:<<main>> {
	route {
		php {
			root ../testdata
		}
	}
}
""", source="TestNonWorkerModeAlwaysWorks")

# caddy/caddy_test.go, one config per test (several tests share one when they can).
config("caddy-php", GLOBAL + """	frankenphp {
		<<ini>>
	}
}

http://localhost:<<main>> {
	route {
		php {
			root ../testdata
		}
	}
}
""", source="TestPHP, TestLargeRequest")

config("caddy-worker", GLOBAL + """	frankenphp {
		worker ../testdata/index.php 2
		<<ini>>
	}
}

http://localhost:<<main>> {
	route {
		php {
			root ../testdata
		}
	}
}
""", source="TestWorker")

config("global-and-module-worker", GLOBAL + """	frankenphp {
		worker {
			file ../testdata/worker-with-env.php
			num 1
			env APP_ENV global
		}
		<<ini>>
	}
}

http://localhost:<<one>> {
	route {
		php {
			root ../testdata
			worker {
				file worker-with-env.php
				num 2
				env APP_ENV module
			}
		}
	}
}

http://localhost:<<two>> {
	route {
		php {
			root ../testdata
		}
	}
}
""", sites=("one", "two"), source="TestGlobalAndModuleWorker")

config("module-worker-inherits-env", GLOBAL + """	frankenphp {
		<<ini>>
	}
}

http://localhost:<<main>> {
	route {
		php {
			root ../testdata
			env APP_ENV inherit_this
			worker worker-with-env.php
		}
	}
}
""", source="TestModuleWorkerInheritsEnv")

config("named-module-workers", GLOBAL + """	frankenphp {
		<<ini>>
	}
}

http://localhost:<<one>> {
	route {
		php {
			root ../testdata
			worker {
				file worker-with-env.php
				num 2
				env APP_ENV one
				name module1
			}
		}
	}
}

http://localhost:<<two>> {
	route {
		php {
			root ../testdata
			worker {
				file worker-with-env.php
				num 1
				env APP_ENV two
				name module2
			}
		}
	}
}
""", sites=("one", "two"), source="TestNamedModuleWorkers")

config("env", GLOBAL + """	frankenphp {
		worker {
			file ../testdata/worker-env.php
			num 1
			env FOO bar
		}
		<<ini>>
	}
}

http://localhost:<<main>> {
	route {
		php {
			root ../testdata
			env FOO baz
		}
	}
}

# worker_test.go's TestWorkerEnv: the same worker, a site without env
http://localhost:<<plain>> {
	route {
		php {
			root ../testdata
		}
	}
}
""", sites=("main", "plain"), source="TestEnv, TestWorkerEnv")

config("json-env", json.dumps({
    "admin": {"listen": "127.0.0.1:<<admin>>"},
    "apps": {
        "frankenphp": {"workers": [{"env": {"FOO": "bar"}, "file_name": "../testdata/worker-env.php", "num": 1}]},
        "http": {"servers": {"srv0": {"listen": ["<<main>>"], "automatic_https": {"disable": True}, "routes": [{
            "handle": [{"handler": "subroute", "routes": [{"handle": [{"handler": "subroute", "routes": [{
                "handle": [{"env": {"FOO": "baz"}, "handler": "php", "root": "../testdata"}]}]}]}]}],
            "match": [{"host": ["localhost"]}], "terminal": True}]}}},
    },
}), json=True, source="TestJsonEnv")

config("custom-caddy-vars", GLOBAL + """	frankenphp {
		worker {
			file ../testdata/worker-env.php
			num 1
			env FOO world
		}
		<<ini>>
	}
}

http://localhost:<<main>> {
	route {
		map 1 {my_customvar} {
			default "hello "
		}
		php {
			root ../testdata
			env FOO {my_customvar}
		}
	}
}
""", source="TestCustomCaddyVariablesInEnv")

config("php-server", GLOBAL + """	frankenphp {
		<<ini>>
	}
}

http://localhost:<<main>> {
	root ../testdata
	php_server
}
""", source="TestPHPServerDirective")

config("php-server-no-file-server", GLOBAL + """	order php_server before respond
	frankenphp {
		<<ini>>
	}
}

http://localhost:<<main>> {
	root ../testdata
	php_server {
		file_server off
	}
	respond "Not found" 404
}
""", source="TestPHPServerDirectiveDisableFileServer")

config("php-server-globals", GLOBAL + """	frankenphp {
		<<ini>>
	}
}

http://localhost:<<main>> {
	root ../testdata
	php_server {
		index server-globals.php
	}
}
""", source="TestPHPServerGlobals")

config("worker-php-server-globals", GLOBAL + """	frankenphp {
		worker {
			file ../testdata/server-globals.php
			num 1
		}
		<<ini>>
	}
}

http://localhost:<<one>> {
	php_server {
		root ../testdata
		index server-globals.php
	}
}

http://localhost:<<two>> {
	php_server {
		root ../testdata
		index server-globals.php
		worker {
			file server-globals.php
			num 1
		}
	}
}

http://localhost:<<three>> {
	php_server {
		root ./
		index server-globals.php
		worker {
			file ../testdata/server-globals.php
			num 1
			match *
		}
	}
}
""", sites=("one", "two", "three"), source="TestWorkerPHPServerGlobals")

config("all-vars", GLOBAL + """	frankenphp {
		<<ini>>
	}
}

http://localhost:<<main>> {
	route {
		root ../testdata
		# rewrite to test that the original path is passed as $REQUEST_URI
		rewrite /server-all-vars-ordered.php/path
		php
	}
}
""", source="TestAllDefinedServerVars")

config("ini", GLOBAL + """	frankenphp {
		num_threads 2
		worker ../testdata/ini.php 1
		php_ini upload_max_filesize 100M
		php_ini memory_limit 10000000
		<<ini>>
	}
}

http://localhost:<<main>> {
	route {
		root ../testdata
		php
	}
}
""", source="TestPHPIniConfiguration")

config("ini-block", GLOBAL + """	frankenphp {
		num_threads 1
		php_ini {
			upload_max_filesize 100M
			memory_limit 20000000
		}
		<<ini>>
	}
}

http://localhost:<<main>> {
	route {
		root ../testdata
		php
	}
}
""", source="TestPHPIniBlockConfiguration")

config("os-env", GLOBAL + """	frankenphp {
		num_threads 2
		php_ini variables_order "EGPCS"
		worker ../testdata/env/env.php 1
		<<ini>>
	}
}

http://localhost:<<main>> {
	route {
		root ../testdata
		php
	}
}
""", source="TestOsEnv")

config("max-wait", GLOBAL + """	frankenphp {
		num_threads 1
		max_wait_time 1ns
		<<ini>>
	}
}

http://localhost:<<main>> {
	route {
		root ../testdata
		php
	}
}
""", source="TestMaxWaitTime")

config("max-wait-worker", GLOBAL + """	frankenphp {
		num_threads 2
		max_wait_time 1ns
		worker {
			num 1
			name service
			file ../testdata/sleep.php
		}
		<<ini>>
	}
}

http://localhost:<<main>> {
	route {
		root ../testdata
		php
	}
}
""", source="TestMaxWaitTimeWorker")

config("worker-match", GLOBAL + """	frankenphp {
		<<ini>>
	}
}

http://localhost:<<main>> {
	php_server {
		root ../testdata/files
		worker {
			file ../worker-with-counter.php
			match /matched-path*
			num 1
		}
	}
}
""", source="TestWorkerMatchDirective")

config("worker-match-multiple", GLOBAL + """	frankenphp {
		<<ini>>
	}
}

http://localhost:<<main>> {
	php_server {
		root ../testdata
		worker {
			file worker-with-counter.php
			match /counter/*
			num 1
		}
		worker {
			file index.php
			match /index/*
			num 1
		}
	}
}
""", source="TestWorkerMatchDirectiveWithMultipleWorkers")

config("worker-match-no-file-server", GLOBAL + """	frankenphp {
		<<ini>>
	}
}

http://localhost:<<main>> {
	route {
		php_server {
			index off
			file_server off
			root ../testdata/files
			worker {
				file ../worker-with-counter.php
				match /some-path
			}
		}

		respond "Request falls through" 404
	}
}
""", source="TestWorkerMatchDirectiveWithoutFileServer")

config("dedup", GLOBAL + """	frankenphp {
		<<ini>>
	}
}

http://localhost:<<main>> {
	php_server {
		root ../testdata
		worker {
			file ../testdata/dedup-match-worker.php
			num 1
			match /match/*
		}
		worker {
			file ../testdata/dedup-plain-worker.php
			num 1
		}
	}
}
""", source="TestPhpServerWorkerMatchPoolCount")

# TestDd's Caddyfile leaves its site block open (caddytest tolerates it); closed here.
config("dd", GLOBAL + """	frankenphp {
		<<ini>>
	}
}

http://localhost:<<main>> {
	php {
		worker ../testdata/dd.php 1 {
			match *
		}
	}
}
""", source="TestDd")

config("opcache-reset", GLOBAL + """	frankenphp {
		num_threads 6
		php_ini {
			opcache.enable 1
			opcache.log_verbosity_level 4
			max_execution_time 30s
		}
		<<ini>>
	}
}

http://localhost:<<main>> {
	php {
		root ../testdata
		worker {
			file sleep.php
			match /sleep*
			num 3
		}
	}
}
""", source="TestOpcacheReset (sequential, 6 threads instead of 40)")

config("log", GLOBAL + """	frankenphp {
		<<ini>>
	}
}

http://localhost:<<main>> {
	log {
		output stdout
		format json
	}

	root ../testdata
	php_server {
		worker ../testdata/log-frankenphp_log.php
	}
}
""", source="TestLog")

config("worker-restart", GLOBAL + """	frankenphp {
		worker {
			name service
			file ../testdata/worker-restart.php
			num 1
			env EVERY 3
		}
		<<ini>>
	}
}

http://localhost:<<main>> {
	route {
		php {
			root ../testdata
		}
	}
}
""", source="TestWorkerRestart")

config("admin-restart", GLOBAL + """	frankenphp {
		worker ../testdata/worker-with-counter.php 1
		<<ini>>
	}
}

http://localhost:<<main>> {
	route {
		root ../testdata
		rewrite worker-with-counter.php
		php
	}
}
""", source="TestRestartWorkerViaAdminApi")

config("session-lock", GLOBAL + """	frankenphp {
		num_threads 2
		max_threads 2
		<<ini>>
	}
}

http://localhost:<<main>> {
	route {
		php {
			root ../testdata
		}
	}
}
""", source="TestSessionLockReleaseOnAbortInUserSaveHandler")

# FrankenPHP's symlink tests give the root as an absolute path (with a relative one, FrankenPHP
# 1.12.7 does not resolve a php block's worker file through the symlink, and serves it classic).
PUBLIC = "<<fixtures>>/testdata/symlinks/public"
for _name, _global in (("symlink-neighbouring", f"worker {PUBLIC}/index.php 1"),
                       ("symlink-nested", f"worker {PUBLIC}/nested/index.php 1"),
                       ("symlink-outside", f"worker {{\n\t\t\tname outside_worker\n\t\t\tfile {PUBLIC}/index.php\n\t\t\tnum 1\n\t\t}}"),
                       ("symlink-specified-root",
                        f"worker {{\n\t\t\tname specified_root_worker\n\t\t\tfile {PUBLIC}/index.php\n\t\t\tnum 1\n\t\t}}"),
                       ("symlink-resolve-root", f"worker {PUBLIC}/document-root.php 1")):
    config(_name, GLOBAL + f"""	frankenphp {{
		{_global}
		<<ini>>
	}}
}}

http://localhost:<<main>> {{
	route {{
		php {{
			root {PUBLIC}
			resolve_root_symlink true
		}}
	}}
}}
""", source="TestSymlinkWorkerPaths, TestSymlinkResolveRoot")

config("symlink-classic", GLOBAL + f"""	frankenphp {{
		<<ini>>
	}}
}}

http://localhost:<<main>> {{
	route {{
		php {{
			root {PUBLIC}
			resolve_root_symlink false
		}}
	}}
}}

http://localhost:<<plain>> {{
	route {{
		php {{
			root {PUBLIC}
		}}
	}}
}}
""", sites=("main", "plain"), source="TestSymlinkResolveRoot/NoResolveRootSymlink, TestSymlinkWorkerBehavior")

config("symlink-module-worker", GLOBAL + f"""	frankenphp {{
		<<ini>>
	}}
}}

http://localhost:<<main>> {{
	route {{
		php {{
			root {PUBLIC}
			resolve_root_symlink true
			worker index.php 1
		}}
	}}
}}
""", source="TestSymlinkWorkerBehavior/MultipleRequests")

# testdata/Caddyfile (FrankenPHP's development Caddyfile): its root is the folder it sits in;
# the peer has no `br` encoder (its Go proxy refuses caddy-cbrotli), so both get zstd and gzip.
config("testdata-caddyfile", GLOBAL + """	debug
	frankenphp {
		<<ini>>
	}
}

http://:<<main>> {
	log
	route {
		root .
		# Add trailing slash for directory requests
		@canonicalPath {
			file {path}/index.php
			not path */
		}
		redir @canonicalPath {path}/ 308

		# If the requested file does not exist, try index files
		@indexFiles file {
			try_files {path} {path}/index.php index.php
			split_path .php
		}
		rewrite @indexFiles {http.matchers.file.relative}

		encode zstd gzip

		# FrankenPHP!
		@phpFiles path *.php
		php @phpFiles
		file_server

		respond 404
	}
}
""", cwd="testdata", source="testdata/Caddyfile")

config("benchmark-caddyfile", GLOBAL + """	frankenphp {
		<<ini>>
	}
}

http://:<<main>> {
	route {
		root .

		encode zstd gzip

		php {
			file_server off
			resolve_root_symlink false
		}
	}
}
""", cwd="testdata", source="testdata/benchmark.Caddyfile")


# ---- cases -----------------------------------------------------------------------------------

CASES = []


def case(id, cfg, *steps, source=""):
    CASES.append(Case(id, cfg, list(steps), source or CONFIGS.get(cfg, Config("", "")).source))


EX = "example.com"  # the Host the Go API tests use (httptest.NewRequest's default)
BASIC = ("Authorization", "Basic a2V2aW46cGFzc3dvcmQ=")  # kevin:password
FORM = ("Content-Type", "application/x-www-form-urlencoded")


def multipart(name, filename, content):
    boundary = "parityboundary1234"
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"; filename=\"{filename}\"\r\n"
            f"Content-Type: application/octet-stream\r\n\r\n{content}\r\n--{boundary}--\r\n")
    return ("Content-Type", f"multipart/form-data; boundary={boundary}"), body


FIREFOX = (  # BenchmarkServerSuperGlobal / BenchmarkUncommonHeaders
    ("Accept", "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"),
    ("Accept-Encoding", "gzip, deflate, br"), ("Accept-Language", "fr,fr-FR;q=0.8,en-US;q=0.5,en;q=0.3"),
    ("Cache-Control", "no-cache"), ("Cookie", "user_session=myrandomuuid; dotcom_user=dunglas; tz=Europe%2FParis"),
    ("DNT", "1"), ("Pragma", "no-cache"), ("Sec-Fetch-Dest", "document"), ("Upgrade-Insecure-Requests", "1"),
    ("User-Agent", "Mozilla/5.0 (Macintosh; Intel Mac OS X 10.15; rv:122.0) Gecko/20100101 Firefox/122.0"),
    ("X-Super-Custom", "Foo"), ("Super-Super-Custom", "Foo"), ("Super-Super-Custom", "Bar"), ("Very-Custom", "1"),
)

# frankenphp_test.go and worker_test.go: each _module/_worker pair, in both modes.
for mode in ("module", "worker"):
    m = f" ({mode})"
    case("hello world" + m, mode, http(path="/index.php?i=7", host=EX), http(path="/index.php", host=EX))
    case("finish_request: output, then the log line after it" + m, mode,
         http(path="/finish-request.php?i=3", host=EX), log_has(r"reached after finish_request 3"))
    case("server variables (POST, basic auth, path info, #hash)" + m, mode,
         http("POST", "/server-variable.php/baz/bat?foo=a&bar=b&i=5#hash", [BASIC, ("Content-Type", "text/plain")],
              "foo", host=EX, norm=sort_dump))
    case("headers" + m, mode, http(path="/headers.php?i=4", host=EX))
    for i in (0, 101, 102):
        case(f"response headers, i={i}" + m, mode, http(path=f"/response-headers.php?i={i}", host=EX, norm=sort_dump))
    case("input" + m, mode, http("POST", "/input.php", body="post data 9", host=EX))
    case("POST superglobals" + m, mode,
         http("POST", "/super-globals.php?foo=bar&iG=2", [FORM], "baz=bat&i=2", host=EX, norm=sort_dump))
    case("$_REQUEST" + m, mode,
         http("POST", "/request-superglobal.php?get_key=get_value_1", [FORM], "post_key=post_value_1", host=EX))
    case("cookies" + m, mode, http(path="/cookies.php", headers=[("Cookie", "foo=bar; i=6")], host=EX))
    case("session over two requests" + m, mode, http(path="/session.php"),
         with_jar(lambda jar: http(path="/session.php", headers=[("Cookie", jar)])))
    case("phpinfo" + m, mode, http(path="/phpinfo.php?i=8", host=EX, norm=phpinfo_summary))
    case("persistent object" + m, mode, http(path="/persistent-object.php?i=1", host=EX),
         http(path="/persistent-object.php?i=2", host=EX))
    case("autoloader" + m, mode, http(path="/autoloader.php?i=1", host=EX), http(path="/autoloader.php?i=2", host=EX))
    case("error_log() reaches the log" + m, mode, http(path="/log-error_log.php?i=11", host=EX),
         log_has(r"request 11"))
    case("frankenphp_log() reaches the log" + m, mode, http(path="/log-frankenphp_log.php?i=12", host=EX),
         log_has(r"some info message 12", r"some warn message 12", r"some error message 12"),
         log_has(r"default level message", whole=True))
    for finish in ("0", "1"):
        case(f"connection_status(), client stays, finish={finish}" + m, mode,
             http(path=f"/connection_status.php?i=3{finish}&finish={finish}", host=EX),
             log_has(rf"request 3{finish}: (\d)"))
    case("uncaught exception" + m, mode, http(path="/exception.php?i=3", host=EX, norm=normalise))
    case("early hints" + m, mode, http(path="/early-hints.php?i=5", host=EX, keep=("status", "headers", "body", "interim")))
    case("flush: two chunks" + m, mode, http(path="/flush.php?i=6", host=EX, keep=("status", "headers", "chunks")))
    case("large request body (6,048,576 bytes)" + m, mode,
         http("POST", "/large-request.php?i=1", body=b"f" * 6_048_576, host=EX))
    case("fiber, suspended" + m, mode, http(path="/fiber-no-cgo.php?i=4", host=EX))
    case("fiber" + m, mode, http(path="/fiber-basic.php?i=4", host=EX))
    case("request headers" + m, mode,
         http(path="/request-headers.php?i=3", headers=[("Content-Type", "text/plain"), ("Frankenphp-I", "3")],
              host=EX, norm=sort_dump))
    case("putenv/getenv/$_ENV/$_SERVER" + m, mode, http(path="/env/test-env.php?var=1", host=EX))
    case("env from the site in getenv, $_SERVER, $_ENV" + m, mode,
         http(path="/env/prepared-env-getenv.php", host=EX, site="env"))
    case("site env survives putenv" + m, mode, http(path="/env/prepared-env-survives-putenv.php", host=EX, site="env"))
    case("file upload" + m, mode, http("POST", "/file-upload.php", [multipart("file", "foo.txt", "bar")[0]],
                                       multipart("file", "foo.txt", "bar")[1], host=EX))
    for value in ("-1", "something"):
        case(f"invalid Content-Length {value}" + m, mode,
             http(path="/headers.php", headers=[("Content-Length", value)], host=EX))
    case("headers only, 204" + m, mode, http(path="/only-headers.php", host=EX))
    case("benchmark: echo a JSON body" + m, mode,
         http("POST", "/echo.php", [("Content-Type", "application/json")], '{"squadName": "Super hero squad"}', host=EX))
    case("benchmark: browser headers, a repeated header" + m, mode,
         http(path="/server-variable.php", headers=FIREFOX, host=EX, norm=sort_dump))
    # FuzzRequest's seeds, sent as a real client must (percent-encoded where raw would not parse).
    for n, seed in enumerate(["hello%20world", "%F0%9F%98%80%F0%9F%98%85", "%00%11%22", "%01%02%03"]):
        case(f"fuzz seed {n + 1}" + m, mode,
             http(path=f"/server-variable.php/{seed}?test={seed}", headers=[("Fuzzed", seed), ("Content-Type", seed)],
                  host=EX, norm=sort_dump))

# TestConnectionAbort: the Go test cancels the request before PHP sees it. Over a socket, the
# request waits for the only PHP thread (busy with a sleep) while its client resets the
# connection, so the server knows the client is gone before the script runs, every time.
for finish in ("0", "1"):
    case(f"connection_status(), client gone before the script runs, finish={finish}", "abort",
         parallel((0, http(path="/sleep.php?sleep=500", keep=("status",))),
                  (0.2, http(path=f"/connection_status.php?i=2{finish}&finish={finish}", host=EX, abort=True))),
         log_has(rf"request 2{finish}: (\d)", wait=5))
case("malformed cookies (module)", "module",
     http(path="/cookies.php", headers=[("Cookie", "foo =bar; ===;;==;  .dot.=val  ; PHPSESSID=1234"),
                                        ("Cookie", "secondCookie=test; secondCookie=overwritten")], host=EX))
case("malformed cookies with a NUL (module)", "module",
     http(path="/cookies.php", headers=[("Cookie", "foo =bar; ===;;==;  .dot.=val  ;\x00 ; PHPSESSID=1234")], host=EX))
case("path info from a rewrite (module)", "module", http(path="/pathinfo/4", site="pathinfo", host=EX, norm=sort_dump))
case("path info from a rewrite (worker)", "worker", http(path="/server-variable.php/pathinfo", host=EX, norm=sort_dump))
case("non-worker.php: frankenphp_handle_request() outside a worker (module)", "module",
     http(path="/non-worker.php", host=EX, norm=normalise))
case("putenv is reset across requests (module)", "module",
     http(path="/env/putenv.php?key=test&put=3", host=EX), http(path="/env/putenv.php?key=test", host=EX))
case("putenv is kept across worker requests (worker)", "worker",
     http(path="/env/remember-env.php?index=3", host=EX), http(path="/env/remember-env.php", host=EX))
case("$_ENV set at boot persists (worker)", "worker",
     *[http(path="/env/overwrite-env.php", host=EX) for _ in range(3)])
case("$_REQUEST accessed only on some requests (worker)", "worker",
     *[http(path=f"/request-superglobal-conditional.php?{'use_request=1&' if i % 2 else ''}val={i}", host=EX)
       for i in range(4)])
case("a worker's streams survive across requests (worker)", "worker",
     *[http(path="/file-stream.php", host=EX) for _ in range(3)])
case("session handler set in a request, then none (worker)", "worker",
     http(path="/session-handler.php?action=set_handler_and_start&value=test1"),
     http(path="/session-handler.php?action=start_without_handler"))
case("session handler set before the loop (worker)", "worker",
     http(path="/worker-with-session-handler.php?action=check"),
     http(path="/worker-with-session-handler.php?action=use_session"),
     http(path="/worker-with-session-handler.php?action=check"))
case("no session data leaks between clients (worker)", "worker",
     http(path="/session-leak.php?action=set&value=secret_A&client_id=clientA"),
     http(path="/session-leak.php?action=check_empty"), http(path="/session-leak.php?action=get"))
case("no session data leaks after exit() (worker)", "worker",
     http(path="/session-leak.php?action=set_and_exit&value=exit_secret&client_id=exitClient"),
     sleep(0.5), http(path="/session-leak.php?action=check_empty"), http(path="/session-leak.php?action=get"))
case("worker: two POSTs, counter and superglobals", "worker",
     http("POST", "/worker.php?foo=bar", [FORM], "baz=bat", host=EX, norm=sort_dump),
     http("POST", "/worker.php?foo2=bar2", [FORM], "baz2=bat2", host=EX, norm=sort_dump))
case("die() after each request restarts the worker", "worker", *[http(path="/die.php", host=EX) for _ in range(3)])
case("worker env and getopt()", "worker",
     http(path="/worker-getopt.php?i=2", headers=[("Request", "2")], host=EX, norm=sort_dump),
     log_has(r"exit_status\D{0,4}([1-9])", wait=0.5))
case("worker env only at boot", "worker", http(path="/worker-env.php?i=3", host=EX))
case("a client that leaves does not stop the worker", "worker",
     http(path="/worker-with-counter.php", abort=True), sleep(0.5), http(path="/worker-with-counter.php"))
case("a message worker serving HTTP", "worker", http(path="/message-worker.php", norm=normalise))
case("transition workers", "worker", http(path="/transition-worker-1.php"), http(path="/transition-worker-2.php"))
case("env not in $_ENV without E in variables_order", "gpcs", http(path="/env/prepared-env-getenv.php", host=EX))
case("php_ini value with an ${ENV} reference", "ini-env", http(path="/ini.php?key=opcache.enable", host=EX))
case("max_requests 5: worker instances", "maxreq-worker",
     *[http(path="/worker-counter-persistent.php", norm=instance_labels) for _ in range(12)])
case("max_requests 5: classic threads answer throughout", "maxreq-module",
     *[http(path="/index.php", keep=("status", "body")) for _ in range(12)])
case("OPcache preload (module)", "preload-module", http(path="/preload-check.php"))
case("OPcache preload (worker)", "preload-worker", http(path="/preload-check.php"))
case("a classic script beside a worker", "beside-worker", http(path="/index.php"))

# Fixtures no Go test requests over HTTP: their plain answer, classic mode.
for path in ("/hello.php", "/hello.txt", "/large-response.php", "/transition-regular.php", "/dirindex/index.php",
             "/short-status-line.php", "/custom-status-line.php", "/read-input.php", "/files/static.txt",
             "/file-stream.txt", "/_executor.php"):
    case(f"GET {path} (module)", "module", http(path=path, host=EX, norm=normalise))
case("read-input.php with a body (module)", "module", http("POST", "/read-input.php", body="12345", host=EX))
case("finish_request, then read the body (module)", "module",
     http("POST", "/finish-then-read-input.php", body="hello world", host=EX))
case("max_execution_time in an endless loop (module)", "module", http(path="/timeout.php?i=1", host=EX, norm=normalise))
case("a worker-only script in classic mode (module)", "module", http(path="/die.php", host=EX, norm=normalise))
for _shown in ("1", "0"):
    _c = f"display_errors-{_shown}"
    case(f"uncaught exception, display_errors={_shown} (module)", _c, http(path="/exception.php?i=3", host=EX))
    case(f"uncaught exception, display_errors={_shown} (worker)", _c,
         http(path="/exception.php?i=3", host=EX, site="worker"))
    case(f"max_execution_time, display_errors={_shown} (module)", _c, http(path="/timeout.php?i=1", host=EX))
    case(f"fatal error before any output, display_errors={_shown} (module)", _c, http(path="/non-worker.php", host=EX))
case("php-cli: a script with arguments", "cli", cli("testdata/command.php", "foo", "bar", norm=sort_dump))
case("php-cli: -r", "cli", cli("-r", "echo 'Hello World';"))
case("php-cli: pcntl signals", "cli", cli("testdata/command-pcntl.php"))

# caddy/caddy_test.go
case("TestPHP", "caddy-php", http(path="/index.php?i=1"), http(path="/index.php?i=2"))
case("TestLargeRequest", "caddy-php", http("POST", "/large-request.php", body=b"f" * 1_048_576))
case("TestSessionLockRelease: a third request after a timed-out lock waiter", "session-lock",
     parallel((0, http(path="/session_deadlock.php", timeout=10, keep=("status",))),
              (0.3, http(path="/session_deadlock.php", timeout=10, keep=("status",))),
              (0.4, http(path="/session_deadlock.php", timeout=5, keep=("status", "body")))))
case("TestWorker", "caddy-worker", http(path="/index.php?i=1"), http(path="/index.php?i=2"))
case("TestGlobalAndModuleWorker", "global-and-module-worker",
     http(path="/worker-with-env.php", site="one"), http(path="/worker-with-env.php", site="two"))
case("TestModuleWorkerInheritsEnv", "module-worker-inherits-env", http(path="/worker-with-env.php"))
case("TestNamedModuleWorkers", "named-module-workers",
     http(path="/worker-with-env.php", site="one"), http(path="/worker-with-env.php", site="two"))
case("TestEnv", "env", http(path="/worker-env.php"))
case("TestWorkerEnv", "env", http(path="/worker-env.php?i=4", site="plain"))
case("TestJsonEnv", "json-env", http(path="/worker-env.php"))
case("TestCustomCaddyVariablesInEnv", "custom-caddy-vars", http(path="/worker-env.php"))
case("TestPHPServerDirective", "php-server", http(path="/"), http(path="/hello.txt"), http(path="/not-found.txt"))
case("php_server: a directory with an index.php", "php-server", http(path="/dirindex"), http(path="/dirindex/"))
case("php_server: a script with path info", "php-server", http(path="/hello.php/some/path"))
case("TestPHPServerDirectiveDisableFileServer", "php-server-no-file-server",
     http(path="/"), http(path="/not-found.txt"))
case("TestPHPServerGlobals", "php-server-globals", http(path="/en", norm=normalise),
     http(path="/server-globals.php/en", norm=normalise))
case("TestWorkerPHPServerGlobals", "worker-php-server-globals",
     *[http(path=p, site=s, norm=normalise) for s in ("one", "two", "three") for p in ("/en", "/server-globals.php/en")])
case("TestAllDefinedServerVars", "all-vars",
     http("POST", "/original-path?specialChars=%3E\\x00%00</>",
          [("Authorization", "Basic dXNlcjo="), FORM, ("Special-Chars", "<%00>"), ("X-Empty-Header", "")],
          "foo=bar", norm=normalise))
case("TestPHPIniConfiguration", "ini",
     *[http(path=f"/ini.php?key={k}") for k in ("upload_max_filesize", "memory_limit") for _ in range(2)])
case("TestPHPIniBlockConfiguration", "ini-block",
     *[http(path=f"/ini.php?key={k}") for k in ("upload_max_filesize", "memory_limit") for _ in range(2)])
case("TestOsEnv", "os-env", http(path="/env/env.php?keys[]=ENV1&keys[]=ENV2"))
case("TestMaxWaitTime", "max-wait",
     parallel(*[(0, http(path="/sleep.php?sleep=10", keep=("status",))) for _ in range(10)], summary=some_503))
case("TestMaxWaitTimeWorker", "max-wait-worker",
     parallel(*[(0, http(path="/sleep.php?sleep=10&iteration=1", keep=("status",))) for _ in range(10)],
              summary=some_503))
case("TestWorkerMatchDirective", "worker-match",
     http(path="/matched-path"), http(path="/matched-path/anywhere"), http(path="/elsewhere"), http(path="/static.txt"))
case("TestWorkerMatchDirectiveWithMultipleWorkers", "worker-match-multiple",
     *[http(path=p) for p in ("/counter/sub-path", "/index/sub-path", "/files/static.txt", "/hello.php", "/index.php",
                              "/not-matched")])
case("TestWorkerMatchDirectiveWithoutFileServer", "worker-match-no-file-server",
     http(path="/some-path"), http(path="/static.txt"))
case("TestPhpServerWorkerMatchPoolCount", "dedup", http(path="/match/anything"), http(path="/dedup-plain-worker.php"))
case("TestDd", "dd", http(path="/some-path?output=dump123"))
case("TestOpcacheReset", "opcache-reset",
     http(path="/sleep.php?sleep=5&work=5"), http(path="/opcache_reset.php"), http(path="/sleep.php?sleep=7&work=7"),
     http(path="/opcache_reset.php"))
case("TestLog", "log", http(path="/log-frankenphp_log.php?i=0"),
     log_has(r"some info message 0", r"some warn message 0", r"some error message 0"),
     log_has(r"default level message", whole=True))
case("TestWorkerRestart", "worker-restart", *[http(path=f"/worker-restart.php?i={i}") for i in range(10)])
case("TestRestartWorkerViaAdminApi", "admin-restart",
     admin("POST", "/frankenphp/workers/restart"), http(path="/"), http(path="/"),
     admin("POST", "/frankenphp/workers/restart"), http(path="/"))
case("TestSymlinkWorkerPaths/NeighboringWorkerScript", "symlink-neighbouring", http(path="/index.php"))
case("TestSymlinkWorkerPaths/NestedWorkerScript", "symlink-nested", http(path="/nested/index.php"))
case("TestSymlinkWorkerPaths/OutsideSymlinkedFolder", "symlink-outside", http(path="/index.php"))
case("TestSymlinkWorkerPaths/SpecifiedRootDirectory", "symlink-specified-root", http(path="/index.php"))
case("TestSymlinkResolveRoot/ResolveRootSymlink", "symlink-resolve-root", http(path="/document-root.php", norm=normalise))
case("TestSymlinkResolveRoot/NoResolveRootSymlink", "symlink-classic", http(path="/document-root.php", norm=normalise))
case("TestSymlinkWorkerBehavior/WorkerScriptFailsWithoutWorkerMode", "symlink-classic",
     http(path="/index.php", site="plain"))
case("TestSymlinkWorkerBehavior/MultipleRequests", "symlink-module-worker",
     *[http(path="/index.php") for _ in range(5)])
case("testdata/Caddyfile", "testdata-caddyfile",
     *[http(path=p, norm=normalise) for p in ("/", "/hello.php", "/hello.txt", "/dirindex", "/dirindex/", "/nope",
                                              "/files/static.txt", "/index.php/extra")])
case("testdata/benchmark.Caddyfile", "benchmark-caddyfile",
     http(path="/index.php?i=1"), http(path="/hello.txt"))


# ---- running -------------------------------------------------------------------------------

def run_case(c, srv):
    if srv.error:
        # Both refusing a config is the same answer, whatever their messages say.
        return [{"server did not start": True, "_error": srv.error}]
    ctx = Context(srv)
    answers = []
    for step in c.steps:
        a = step(srv, ctx)
        if a is not None:
            answers.append(a)
    if srv.proc and srv.proc.poll() is not None:
        # The server died on this case (a crash is an answer too); the config's next cases
        # get a fresh one.
        tail = srv.log_text()[ctx.log_start:]
        crash = re.search(r"^(panic: .*|.*(?:SIGSEGV|fatal error).*)$", tail, re.M)
        answers.append({"server exited": srv.proc.returncode, "_log": crash.group(0) if crash else tail[-300:]})
        srv.start(srv.cfg)
    return answers


def comparable(answers):
    """The answers without what is reported but not compared (keys starting with _)."""
    if isinstance(answers, dict):
        return {k: comparable(v) for k, v in answers.items() if not k.startswith("_")}
    if isinstance(answers, list):
        return [comparable(a) for a in answers]
    return answers


def dump_entries(text):
    """The entries of the arrays a fixture printed (print_r, var_export, var_dump), by key:
    {key: the entry's text}. Empty when the body is no such dump."""
    entries, key = {}, None
    for line in text.split("\n"):
        m = ENTRY.match(line)
        if m and len(line) - len(line.lstrip()) <= 4:
            key = m.group(1).strip("[]'\"")
            entries[key] = line.strip()
        elif key and line.startswith("      "):
            entries[key] += " " + line.strip()  # a nested array, a var_dump value line
        else:
            key = None
    return entries


def differences(mine, theirs, width=110):
    """What one server answered where the other answered otherwise, as short lines, step by
    step; for a dump of $_SERVER and the like, the entries only one has or both have with
    different values. Also returns those entries' keys (for the summary)."""
    lines, keys = [], []
    for i, (a, b) in enumerate(zip(mine, theirs)):
        if a == b:
            continue
        prefix = f"step {i + 1}: " if len(mine) > 1 else ""
        if not isinstance(a, dict) or not isinstance(b, dict):
            lines.append(prefix + json.dumps(a)[:width * 2])
            continue
        for k in sorted(a.keys() | b.keys()):
            v, w = a.get(k), b.get(k)
            if v == w:
                continue
            if k == "body" and isinstance(v, str) and isinstance(w, str):
                ours, other = dump_entries(v), dump_entries(w)
                if ours and other:
                    changed = sorted(key for key in ours.keys() | other.keys() if ours.get(key) != other.get(key))
                    keys += changed
                    shown = [ours[key] for key in changed if key in ours]
                    lines.append(f"{prefix}body: " + (" | ".join(shown) or "(has none of these)")[:width * 2]
                                 + ("" if v.split("\n")[0] == w.split("\n")[0] else f" [first line: {v.split(chr(10))[0][:60]!r}]"))
                    continue
                diff = [d[1:].strip() for d in difflib.unified_diff(w.split("\n"), v.split("\n"), lineterm="", n=0)
                        if d.startswith("+") and not d.startswith("+++")]
                text = " | ".join(diff[:4]) if diff else repr(v[:width])
                lines.append(f"{prefix}body: {text[:width * 2]}")
            elif k == "headers" and isinstance(v, dict) and isinstance(w, dict):
                hd = {h: v.get(h) for h in sorted(v.keys() | w.keys()) if v.get(h) != w.get(h)}
                lines.append(f"{prefix}headers: {json.dumps(hd)[:width * 2]}")
            else:
                lines.append(f"{prefix}{k}: {json.dumps(v)[:width * 2]}")
    for i, a in enumerate(mine[len(theirs):], start=len(theirs)):
        lines.append(f"step {i + 1}: {json.dumps(a)[:width * 2]}")  # only this server has it
    return lines, keys


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--frankenphp", required=True, help="FrankenPHP binary, or a folder with build-frankenphp.sh and its tarball")
    p.add_argument("--caddy", default=str(REPO / "caddy"), help="php_worker binary (default ./caddy)")
    p.add_argument("--php-config", help="php-config of the PHP build FrankenPHP is built against "
                                        "(default: the build php_worker's `version` names, under ~/.cache/php_worker)")
    p.add_argument("--tarball", help="FrankenPHP's source tarball, for its fixtures (default: the one in --frankenphp's folder)")
    p.add_argument("--only", help="only the cases whose id or config contains this text")
    p.add_argument("--json", default=str(WORK / "report.json"), help="where to write the report")
    args = p.parse_args()

    caddy = Path(args.caddy).resolve()
    version = subprocess.run([str(caddy), "version"], capture_output=True, text=True).stdout.strip()
    php_config = args.php_config
    if not php_config:
        m = re.search(r"build (php-[\w.-]+)\)", version)
        php_config = m and str(Path.home() / ".cache" / "php_worker" / m.group(1) / "bin" / "php-config")
    if not php_config or not Path(php_config).exists():
        sys.exit("no php-config: give --php-config")
    os.environ["PHP_CONFIG"] = php_config

    spec = Path(args.frankenphp).expanduser()
    tarball = Path(args.tarball) if args.tarball else None
    if not tarball and spec.is_dir():
        tarballs = sorted(spec.glob("frankenphp-*.tar.gz"))
        tarball = tarballs[-1] if tarballs else None
    if not tarball or not tarball.exists():
        sys.exit("no FrankenPHP source tarball for the fixtures: give --tarball (or a folder as --frankenphp)")
    peer = bench.frankenphp_peer(str(spec))
    if not peer:
        sys.exit("FrankenPHP could not be had (see above)")

    # The fixtures, unpacked from the tarball for this run. caddy/ is where FrankenPHP's caddy
    # tests run (their configs say ../testdata); it holds nothing the cases use.
    fixtures = WORK / "fixtures"
    shutil.rmtree(fixtures, ignore_errors=True)
    (fixtures / "caddy").mkdir(parents=True)
    with tarfile.open(tarball) as tar:
        members = [m for m in tar.getmembers() if m.name.lstrip("./").startswith("testdata/")]
        kw = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tar.extractall(fixtures, members=members, **kw)

    # One environment for both, with what FrankenPHP's TestMain functions set.
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(WORK), "LANG": "C.UTF-8",
           "GODEBUG": "cgocheck=0", "CUSTOM_OS_ENV_VARIABLE": "custom_env_variable_value", "LITERAL_ZERO": "0",
           "ENV1": "value1", "ENV2": "value2", "EMPTY": "", "test": "", "index": ""}
    servers = [Server("php_worker", caddy, {}, WORK, fixtures, env),
               Server("frankenphp", Path(peer["binary"]), {k: v for k, v in peer["ini"].items() if k != "memory_limit"},
                      WORK, fixtures, env)]
    log(f"php_worker: {version.splitlines()[0] if version else caddy}")
    log(f"FrankenPHP: {peer['version_line']} ({peer['binary']})")
    log(f"fixtures:   {tarball} -> {fixtures}/testdata")

    cases = [c for c in CASES if not args.only or args.only in c.id or args.only in c.config]
    results = []
    by_config = {}
    for c in cases:
        by_config.setdefault(c.config, []).append(c)
    for name, group in by_config.items():
        cfg = CONFIGS.get(name)
        try:
            for srv in servers:
                if cfg:
                    srv.start(cfg)
                else:  # php-cli cases: no server
                    srv.error, srv.ports, srv.admin, srv.proc = None, {}, 0, None
            for c in group:
                a, b = (run_case(c, srv) for srv in servers)
                same = comparable(a) == comparable(b)
                results.append({"id": c.id, "config": c.config, "source": c.source, "same": same,
                                "steps": [getattr(s, "describe", "") for s in c.steps],
                                "php_worker": a, "frankenphp": b})
                log(f"  {'same' if same else 'DIFF'}  {c.id}")
        finally:
            for srv in servers:
                srv.stop()

    same = sum(r["same"] for r in results)
    log(f"\n{same} of {len(results)} cases answer the same.\n")
    # Each $_SERVER-like entry that differs, with the cases it differs in: one cause (a CGI
    # variable one server sets) shows in every dump, and is one line here.
    by_entry = {}
    for r in results:
        if r["same"]:
            continue
        a, b = comparable(r["php_worker"]), comparable(r["frankenphp"])
        log(f"- {r['id']}  [{r['config']}: {r['source']}]")
        log("    " + "; ".join(r["steps"])[:200])
        mine, keys = differences(a, b)
        theirs, _ = differences(b, a)
        for line in mine:
            log(f"    php_worker: {line}")
        for line in theirs:
            log(f"    FrankenPHP: {line}")
        for key in dict.fromkeys(keys):
            by_entry.setdefault(key, []).append(r["id"])
        r["differing_entries"] = sorted(set(keys))
    if by_entry:
        log("\nArray entries that differ (printed $_SERVER, headers...), and in how many cases:")
        for key, ids in sorted(by_entry.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            log(f"  {key}: {len(ids)}")
    report = {"php_worker": version, "frankenphp": peer["version_line"], "fixtures": str(tarball),
              "same": same, "total": len(results), "cases": results}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=1))
    log(f"\nreport: {args.json}")


if __name__ == "__main__":
    main()
