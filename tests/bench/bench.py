#!/usr/bin/env python3
"""php_worker's benchmark suite: php_worker against nginx + php-fpm (and bare Caddy as
the ceiling) on the workloads that matter, on loopback.

    tests/bench/run.sh            the full suite (about 15 minutes on 2 cores); writes
                                  tests/bench/RESULTS.md and tests/bench/results.png
    tests/bench/run.sh --quick    every workload briefly, asserting that every server
                                  answered correctly (no timing assertions)
    PHP_WORKER_CADDY=path python3 tests/bench/bench.py --only processes
                                  one workload, on another build than ./caddy

Servers and load generator (oha) share the machine's cores; RESULTS.md says so and
reports the generator's CPU share. Adding a server configuration to a workload is one
line in its list below.
"""

import argparse
import array
import datetime
import hashlib
import http.client
import json
import os
import platform
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import quickload

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "tests" / "bench"
APPS = BENCH / "apps"
WORK = BENCH / ".work"
CADDY = Path(os.environ.get("PHP_WORKER_CADDY", REPO / "caddy")).resolve()  # another build: PHP_WORKER_CADDY
QUICK = False  # the smoke pass (--quick)
BASELINE = None  # --baseline's binary, named in RESULTS.md's versions
PG_PORT = 5544
PG_BIN = Path("/usr/lib/postgresql/15/bin")
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def log(*args):
    print(*args, flush=True)


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


def wait_port(port, proc=None, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"port {port} never opened")


def http_get(port, path, timeout=30):
    """One request on a fresh connection: (status, body)."""
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def proc_tree(pid):
    """pid and all its descendants."""
    children = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    pids, todo = [], [pid]
    while todo:
        p = todo.pop()
        pids.append(p)
        todo += children.get(p, [])
    return pids


def cpu_seconds(pids):
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime + stime
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total / CLK_TCK


def private_mb(pid):
    """The memory only pid maps (Private_Clean and Private_Dirty): what it costs beyond
    the pages it shares with other processes."""
    total = 0
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                total += int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError):
        pass
    return total / 2**20


def pss_mb(pids):
    """The proportional set size of pids: pages shared between them (the binary's text,
    shared memory) counted once in all, where RSS counts them in each."""
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) * 1024
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total / 2**20


def union_mb(pids):
    """The memory pids take together: every page any of them maps, counted once, whoever
    else maps it. Unlike the PSS, it does not move with what other processes run (the
    bench keeps two servers of one binary up at once, and the PSS would divide the
    binary's pages among both). From /proc/<pid>/pagemap's page frame numbers, which only
    root reads; None otherwise."""
    frames = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/pagemap", "rb", buffering=0) as pagemap:
                for line in maps:
                    fields = line.split()
                    if fields[-1] == "[vsyscall]":
                        continue
                    start, end = (int(x, 16) for x in fields[0].split("-"))
                    pagemap.seek(start // PAGE * 8)
                    entries = array.array("Q")
                    entries.frombytes(pagemap.read((end - start) // PAGE * 8))
                    # Bit 63: present; bits 0-54: the frame number (0 unless root).
                    frames.update(e & (1 << 55) - 1 for e in entries if e >> 63)
        except (FileNotFoundError, ProcessLookupError):
            pass
    frames.discard(0)
    return len(frames) * PAGE / 2**20 if frames else None


def rss_mb(pids):
    total = 0
    for pid in pids:
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total / 2**20


# ---- CPU split -------------------------------------------------------------------------

# With enough CPUs (--cpu-split), the servers run on one set of CPUs and the bench itself,
# with the load generator and the databases it starts, on the other: neither steals the
# other's time, and a server's CPU per request is its own. None: everything shares.
SERVER_CPUS = None


def cpu_list(text):
    """"0-3,8" -> [0, 1, 2, 3, 8]."""
    cpus = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        cpus += range(int(first), int(last or first) + 1)
    return cpus


def cpu_split(spec, count=None):
    """(server CPUs, generator CPUs) for --cpu-split: "auto" halves a machine of 8 CPUs
    or more (and shares a smaller one: None), "off" shares, "S:G" names both lists."""
    count = count or len(os.sched_getaffinity(0))
    if spec == "off" or (spec == "auto" and count < 8):
        return None
    if spec == "auto":
        cpus = sorted(os.sched_getaffinity(0))
        return cpus[:count // 2], cpus[count // 2:]
    server, _, generator = spec.partition(":")
    server, generator = cpu_list(server), cpu_list(generator)
    check(server and generator and not set(server) & set(generator), f"--cpu-split {spec}: two disjoint CPU lists")
    return server, generator


def on_server_cpus(cmd):
    """cmd, run on the servers' CPUs when the bench splits them."""
    return ["taskset", "-c", ",".join(map(str, SERVER_CPUS)), *cmd] if SERVER_CPUS else cmd


# ---- servers -------------------------------------------------------------------------

class Server:
    name = "server"

    def __init__(self):
        self.port = free_port()
        self.proc = None
        self.workdir = None

    def url(self, path="/"):
        return f"http://127.0.0.1:{self.port}{path}"

    def pids(self):
        return proc_tree(self.proc.pid) if self.proc and self.proc.poll() is None else []

    def start(self):
        raise NotImplementedError

    def stop(self):
        if self.proc and self.proc.poll() is None:
            caddy = isinstance(self, (PhpWorker, CaddyRespond, FrankenPhp))
            self.proc.send_signal(signal.SIGINT if caddy else signal.SIGQUIT)
            try:
                self.proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                log(f"  {self.name} did not stop within 40 s" + (": goroutine dump in its log" if caddy else ""))
                if caddy:
                    self.proc.send_signal(signal.SIGQUIT)  # Go prints every goroutine, then exits
                    try:
                        self.proc.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        pass
                self.proc.kill()
                self.proc.wait()

    def _workdir(self, label):
        d = WORK / f"{label}-{self.port}"
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        self.workdir = d
        return d


class PhpWorker(Server):
    """./caddy with php_worker: worker mode when `worker` names a script, else classic."""

    def __init__(self, app, threads, worker=None, max_requests=0, env=None, label=None, binary=CADDY,
                 max_threads=0, unbuffered=False, unbuffered_requests=False, ini=None, admin=False, processes=1, cpu_affinity=None):
        super().__init__()
        self.cpu_affinity = cpu_affinity  # the cpu_affinity option, if set
        self.processes = processes  # PHP in this many child processes (the processes option)
        self.ini = ini or {}  # php_ini settings over the defaults
        self.app, self.threads, self.worker, self.max_requests = app, threads, worker, max_requests
        self.unbuffered = unbuffered  # response_buffer off
        self.unbuffered_requests = unbuffered_requests  # request_buffer off
        self.env = env or {}
        self.binary = binary
        self.max_threads = max_threads  # autoscaling up to this many threads for the worker (or classic)
        self.admin_port = free_port() if admin else None
        mode = "worker" if worker else "classic"
        scaling = f", autoscaling to {max_threads}" if max_threads else ""
        self.name = label or f"php_worker {mode}, {threads} threads{scaling}"

    def php_threads(self):
        """The PHP threads running now (from the admin API), or None without it."""
        if not self.admin_port:
            return None
        status, body = http_get(self.admin_port, "/php_worker/threads", timeout=5)
        return len(json.loads(body)["threads"]) if status == 200 else None

    def start(self):
        d = self._workdir("php_worker")
        root = APPS / self.app / "public"
        env_lines = "".join(f"\t\t\tenv {k} {v}\n" for k, v in self.env.items())
        if self.worker:
            # Every dynamic request goes to the worker; classic threads stay for the rest.
            site = f"""		index off
		worker {{
			file {APPS / self.app / self.worker}
			num {self.threads}
			match /*
{f"			max_requests {self.max_requests}" if self.max_requests else ""}
{f"			max_threads {self.max_threads}" if self.max_threads else ""}
{env_lines}		}}
"""
            total = self.threads + 1
        else:
            site = "".join(f"\t\tenv {k} {v}\n" for k, v in self.env.items())
            total = self.threads
        scaling = ""
        if self.max_threads and not self.admin_port:
            # The admin API tells how many threads autoscaling reached.
            self.admin_port = free_port()
            scaling = f"\t\tmax_threads {total - self.threads + self.max_threads}\n"
        admin = f"admin 127.0.0.1:{self.admin_port}" if self.admin_port else "admin off"
        ini_lines = "".join(f"\t\tphp_ini {k} {v}\n" for k, v in self.ini.items())
        buffering = "\t\tresponse_buffer off\n" if self.unbuffered else ""
        buffering += "\t\trequest_buffer off\n" if self.unbuffered_requests else ""
        buffering += f"\t\tprocesses {self.processes}\n" if self.processes > 1 else ""
        buffering += f"\t\tcpu_affinity {self.cpu_affinity}\n" if self.cpu_affinity else ""
        (d / "Caddyfile").write_text(f"""{{
	{admin}
	persist_config off
	log {{
		format json
		level INFO
	}}
	php_worker {{
		num_threads {total}
{scaling}{buffering}		php_ini memory_limit 128M
{ini_lines}	}}
}}

:{self.port} {{
	bind 127.0.0.1
	root * {root}
	php_worker {{
		root {root}
{site}	}}
}}
""")
        self.log_file = open(d / "caddy.log", "wb")
        env = dict(os.environ, PHP_WORKER_COUNT_CROSSINGS="1", XDG_CONFIG_HOME=str(d), XDG_DATA_HOME=str(d),
                   **{k: str(v) for k, v in self.env.items()})
        self.proc = subprocess.Popen(on_server_cpus([str(self.binary), "run", "--config", str(d / "Caddyfile"), "--adapter",
                                      "caddyfile"]), stdout=self.log_file, stderr=subprocess.STDOUT, env=env, cwd=str(d))
        wait_port(self.port, self.proc)

    def crossings(self):
        """(calls into the core, callbacks from it), from the log line at engine stop."""
        for line in (self.workdir / "caddy.log").read_text().splitlines():
            if '"PHP engine stopped"' in line:
                e = json.loads(line)
                return e.get("calls_into_core"), e.get("callbacks_from_core")
        return None


class CaddyRespond(Server):
    """The same ./caddy answering with `respond`: the ceiling of the HTTP path."""
    name = "Caddy respond (ceiling)"

    def start(self):
        d = self._workdir("caddy")
        (d / "Caddyfile").write_text(f"""{{
	admin off
	persist_config off
}}
:{self.port} {{
	bind 127.0.0.1
	respond "Hello, world!"
}}
""")
        self.proc = subprocess.Popen(on_server_cpus([str(CADDY), "run", "--config", str(d / "Caddyfile"), "--adapter", "caddyfile"]),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=str(d),
                                     env=dict(os.environ, XDG_CONFIG_HOME=str(d), XDG_DATA_HOME=str(d)))
        wait_port(self.port, self.proc)


class NginxFpm(Server):
    """nginx + php8.2-fpm from Debian, pm static, OPcache on."""

    def __init__(self, app, children, env=None, label=None):
        super().__init__()
        self.app, self.children, self.env = app, children, env or {}
        self.name = label or f"nginx + php-fpm, {children} children"
        self.fpm = None

    def pids(self):
        pids = super().pids()
        if self.fpm and self.fpm.poll() is None:
            pids += proc_tree(self.fpm.pid)
        return pids

    def start(self):
        d = self._workdir("fpm")
        root = APPS / self.app / "public"
        env_lines = "".join(f'env[{k}] = "{v}"\n' for k, v in self.env.items())
        (d / "php-fpm.conf").write_text(f"""[global]
pid = {d}/fpm.pid
error_log = {d}/fpm.log
daemonize = no

[bench]
listen = {d}/fpm.sock
listen.mode = 0666
listen.backlog = 4096
pm = static
pm.max_children = {self.children}
pm.max_requests = 0
clear_env = no
catch_workers_output = yes
php_admin_value[opcache.enable] = 1
php_admin_value[memory_limit] = 128M
php_admin_value[display_errors] = 0
{env_lines}""")
        (d / "nginx.conf").write_text(f"""user root;
worker_processes auto;
error_log {d}/nginx-error.log;
pid {d}/nginx.pid;
events {{ worker_connections 4096; }}
http {{
	access_log off;
	client_body_temp_path {d}/body;
	fastcgi_temp_path {d}/fastcgi;
	proxy_temp_path {d}/proxy;
	uwsgi_temp_path {d}/uwsgi;
	scgi_temp_path {d}/scgi;
	keepalive_requests 1000000;
	client_max_body_size 64m;
	server {{
		listen 127.0.0.1:{self.port} backlog=4096;
		root {root};
		index index.php;
		location / {{ try_files $uri /index.php$is_args$args; }}
		location ~ \\.php$ {{
			fastcgi_pass unix:{d}/fpm.sock;
			include /etc/nginx/fastcgi_params;
			fastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name;
		}}
	}}
}}
""")
        env = dict(os.environ, **{k: str(v) for k, v in self.env.items()})
        out = open(d / "fpm.out", "wb")
        self.fpm = subprocess.Popen(on_server_cpus(["php-fpm8.2", "-R", "-F", "-y", str(d / "php-fpm.conf")]),
                                    stdout=out, stderr=subprocess.STDOUT, env=env)
        deadline = time.time() + 20
        while not (d / "fpm.sock").exists():
            if time.time() > deadline or self.fpm.poll() is not None:
                raise RuntimeError("php-fpm did not start: " + (d / "fpm.out").read_text(errors="replace"))
            time.sleep(0.05)
        self.proc = subprocess.Popen(on_server_cpus(["nginx", "-c", str(d / "nginx.conf"), "-g", "daemon off;"]),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port, self.proc)

    def stop(self):
        super().stop()
        if self.fpm and self.fpm.poll() is None:
            self.fpm.send_signal(signal.SIGQUIT)
            try:
                self.fpm.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.fpm.kill()


class FrankenPhp(Server):
    """FrankenPHP (--frankenphp), side by side with php_worker: worker mode when `worker`
    names a script, else classic. The same thread counts and memory_limit as php_worker,
    OPcache loaded, and its performance guide applied (file_server off, match *,
    GODEBUG=cgocheck=0)."""

    def __init__(self, peer, app, threads, worker=None, env=None, label=None):
        super().__init__()
        self.peer, self.app, self.threads, self.worker, self.env = peer, app, threads, worker, env or {}
        mode = "worker" if worker else "classic"
        self.name = label or f"{peer['name']} {mode}, {threads} threads (PHP {peer['php']})"

    def start(self):
        d = self._workdir("frankenphp")
        root = APPS / self.app / "public"
        env_lines = "".join(f"\t\t\tenv {k} {v}\n" for k, v in self.env.items())
        if self.worker:
            # Every request goes to the worker; num_threads must exceed the workers' threads.
            # Absolute paths: a relative worker file resolves against php_server's root.
            site = f"""		worker {{
			file {APPS / self.app / self.worker}
			num {self.threads}
			match *
{env_lines}		}}
"""
            total = self.threads + 1
        else:
            site = "".join(f"\t\tenv {k} {v}\n" for k, v in self.env.items())
            total = self.threads
        ini_lines = "".join(f"\t\tphp_ini {k} {v}\n" for k, v in self.peer["ini"].items())
        (d / "Caddyfile").write_text(f"""{{
	admin off
	persist_config off
	frankenphp {{
		num_threads {total}
{ini_lines}	}}
}}

:{self.port} {{
	bind 127.0.0.1
	root * {root}
	php_server {{
		root {root}
		file_server off
{site}	}}
}}
""")
        self.log_file = open(d / "caddy.log", "wb")
        env = dict(os.environ, GODEBUG="cgocheck=0", XDG_CONFIG_HOME=str(d), XDG_DATA_HOME=str(d),
                   **{k: str(v) for k, v in self.env.items()})
        self.proc = subprocess.Popen(on_server_cpus([self.peer["binary"], "run", "--config", str(d / "Caddyfile"), "--adapter",
                                      "caddyfile"]), stdout=self.log_file, stderr=subprocess.STDOUT, env=env, cwd=str(d))
        wait_port(self.port, self.proc)
        # Caddy may open the port before FrankenPHP's threads are up, and a request that
        # comes in between can wait forever (FrankenPHP 1.12.7; seen here with Laravel's
        # workers, whose boot makes the window longer): wait for its own "started" line.
        deadline = time.time() + 60
        while b'"FrankenPHP started' not in (d / "caddy.log").read_bytes():
            if self.proc.poll() is not None:
                raise RuntimeError(f"FrankenPHP exited with {self.proc.returncode}")
            if time.time() > deadline:
                raise RuntimeError("FrankenPHP did not log that it started within 60 s")
            time.sleep(0.05)


PEER_CACHE = Path.home() / ".cache" / "php_worker" / "peer"


def frankenphp_peer(spec):
    """The FrankenPHP peer for --frankenphp: {binary, name, php, version_line, how, ini},
    or None, after one line saying why, when it cannot be had (the bench goes on without
    it). `spec` is a FrankenPHP binary, or a folder holding build-frankenphp.sh and a
    frankenphp-<version>.tar.gz, built once against the PHP of ./caddy (PHP_CONFIG) and
    cached under ~/.cache/php_worker/peer/."""
    try:
        return _frankenphp_peer(Path(spec).expanduser())
    except Exception as e:  # whatever goes wrong with the peer, the bench goes on
        log(f"FrankenPHP: {e}; going on without it")
        return None


def _frankenphp_peer(path):
    php_config = os.environ.get("PHP_CONFIG")
    if path.is_file():
        if not os.access(path, os.X_OK):
            raise RuntimeError(f"{path} is not executable")
        binary, how = path.resolve(), "the binary given with --frankenphp"
    elif path.is_dir():
        binary = build_frankenphp(path, php_config)
        build = Path(php_config).resolve().parents[1].name
        how = f"built by the bench from its source and linked with ./caddy's PHP build ({build})"
    else:
        raise RuntimeError(f"{path} is neither a FrankenPHP binary nor a folder holding build-frankenphp.sh")
    try:
        p = subprocess.run([str(binary), "version"], capture_output=True, text=True, timeout=60)
    except OSError as e:
        raise RuntimeError(f"{binary} does not run ({e.strerror})")
    line = (p.stdout or p.stderr).strip().splitlines()[0] if (p.stdout or p.stderr).strip() else ""
    m = re.search(r"FrankenPHP v?(\S+)", line)
    if p.returncode != 0 or not m:
        raise RuntimeError(f"{binary} is not a FrankenPHP binary (`version` said {line[:200]!r})")
    php = re.search(r"\bPHP (\d+\.\d+\.\d+)", line)
    php = php.group(1) if php else run_php(binary, "echo PHP_VERSION;")
    ini = {"memory_limit": "128M"}  # as php_worker's rows
    # OPcache, a shared object in php_worker's PHP build, is loaded as php_worker loads it.
    if run_php(binary, "echo extension_loaded('Zend OPcache') ? 1 : 0;") != "1":
        so = None
        # A binary built on another build of the same PHP (./caddy's with profile-guided
        # optimisation, the peer's without) loads that build's OPcache.
        php_config = os.environ.get("FRANKENPHP_PHP_CONFIG") or php_config
        if php_config:
            ext_dir = subprocess.run([php_config, "--extension-dir"], capture_output=True, text=True).stdout.strip()
            version = subprocess.run([php_config, "--version"], capture_output=True, text=True).stdout.strip()
            so = Path(ext_dir) / "opcache.so" if version == php else None
        if not so or not so.exists():
            raise RuntimeError(f"{binary} has no OPcache, and PHP_CONFIG's PHP has none for PHP {php}")
        ini["zend_extension"] = str(so)
    peer = {"binary": str(binary), "name": f"FrankenPHP {m.group(1)}", "php": php, "version_line": line,
            "how": how, "ini": ini}
    # Both modes start and run PHP as set up here, so the workloads' rounds do not fail
    # on the peer (and do not measure it without OPcache).
    app = WORK / "frankenphp-probe"
    (app / "public").mkdir(parents=True, exist_ok=True)
    probe = ("echo json_encode(['opcache' => function_exists('opcache_get_status') && "
             "((opcache_get_status(false) ?: [])['opcache_enabled'] ?? false), "
             "'memory_limit' => ini_get('memory_limit')]);")
    (app / "public" / "index.php").write_text(f"<?php\n{probe}\n")
    (app / "worker.php").write_text(f"<?php\nwhile (frankenphp_handle_request(function () {{ {probe} }})) {{}}\n")
    want = {"opcache": True, "memory_limit": ini["memory_limit"]}
    for worker in ("worker.php", None):
        server = FrankenPhp(peer, app, threads=1, worker=worker)
        try:
            try:
                server.start()
                status, body = http_get(server.port, "/")
            except (OSError, RuntimeError) as e:
                raise RuntimeError(f"{server.name} did not answer ({e}; log: {server.workdir}/caddy.log)")
            try:
                ok = status == 200 and json.loads(body) == want
            except ValueError:
                ok = False
            if not ok:
                raise RuntimeError(f"{server.name} answered {status} {body[:200]!r}, not {json.dumps(want)} "
                                   f"(log: {server.workdir}/caddy.log)")
        finally:
            server.stop()
    log(f"FrankenPHP: {line} ({binary})")
    return peer


def run_php(binary, code):
    """What `<binary> php-cli -r <code>` prints (FrankenPHP's PHP CLI)."""
    p = subprocess.run([str(binary), "php-cli", "-r", code], capture_output=True, text=True, timeout=60)
    return p.stdout.strip()


def build_frankenphp(folder, php_config):
    """Builds FrankenPHP from folder's frankenphp-<version>.tar.gz against php_config's PHP,
    once: the binary is cached under ~/.cache/php_worker/peer/frankenphp-<version>-<hash of
    the PHP build's path and version>/. The folder's build-frankenphp.sh prepares the
    source: run as `build-frankenphp.sh prepare` with FRANKENPHP_SNAPSHOT (the tarball),
    PHP_CONFIG and PEER_DIR set, it unpacks it into $PEER_DIR/src, patches it and fetches
    its Go modules, for the Go build tags its `TAGS=` line names. The link is done here:
    ./caddy's PHP is a static embed SAPI (libphp.a, no libphp.so), which FrankenPHP links
    whole, exporting PHP's symbols for OPcache's shared object, as ./caddy does (a PHP
    with a libphp.so links too)."""
    script = folder / "build-frankenphp.sh"
    tarballs = sorted(folder.glob("frankenphp-*.tar.gz"),
                      key=lambda t: [int(x) if x.isdigit() else x for x in re.split(r"[.-]", t.name)])
    if not script.is_file() or not tarballs:
        raise RuntimeError(f"{folder} holds no build-frankenphp.sh and frankenphp-<version>.tar.gz")
    if not php_config:
        raise RuntimeError("PHP_CONFIG is not set (tests/bench/run.sh sets it through scripts/env.sh)")
    tarball = tarballs[-1]
    version = tarball.name[len("frankenphp-"):-len(".tar.gz")].lstrip("v")
    config = lambda *a: subprocess.run([php_config, *a], capture_output=True, text=True, check=True).stdout.strip()
    php_version = config("--version")
    key = hashlib.sha256(f"{Path(php_config).resolve()}\n{php_version}".encode()).hexdigest()[:8]
    dest = PEER_CACHE / f"frankenphp-{version}-{key}"
    binary = dest / "frankenphp"
    if binary.exists():
        return binary
    tags = re.search(r"^TAGS=(\S+)", script.read_text(), re.M)
    if not tags:
        raise RuntimeError(f"no TAGS= line in {script}")
    go = shutil.which("go") or "/usr/local/go/bin/go"
    dest.mkdir(parents=True, exist_ok=True)
    build_log = dest / "build.log"
    log(f"FrankenPHP: building {version} against PHP {php_version} into {dest} (several minutes, once; "
        f"log in {build_log.name})")
    started = time.time()
    env = dict(os.environ, FRANKENPHP_SNAPSHOT=str(tarball), PHP_CONFIG=php_config, PEER_DIR=str(dest),
               PATH=f"{Path(go).parent}:{os.environ.get('PATH', '')}")
    with open(build_log, "wb") as out:
        p = subprocess.run(["bash", str(script), "prepare"], stdout=out, stderr=subprocess.STDOUT, env=env,
                           timeout=3600)
        if p.returncode != 0:
            raise RuntimeError(f"build-frankenphp.sh prepare failed (exit {p.returncode}, see {build_log})")
        prefix = config("--prefix")
        env.update(
            CGO_ENABLED="1", GOTOOLCHAIN="local", GOFLAGS="-mod=mod -buildvcs=false",
            CGO_CFLAGS=f"-DFRANKENPHP_VERSION={version} {config('--includes')}",
            CGO_LDFLAGS=f"-L{prefix}/lib -Wl,-rpath,{prefix}/lib -Wl,--export-dynamic {config('--ldflags')} "
                        f"{config('--libs')}")
        ldflags = (f"-w -s -X 'github.com/caddyserver/caddy/v2.CustomVersion=FrankenPHP {version} PHP {php_version} "
                   "Caddy' -X 'github.com/caddyserver/caddy/v2.CustomBinaryName=frankenphp' "
                   "-X 'github.com/caddyserver/caddy/v2/modules/caddyhttp.ServerHeader=FrankenPHP Caddy'")
        tmp = dest / "frankenphp.tmp"
        p = subprocess.run([go, "build", "-trimpath", "-tags", tags.group(1), "-o", str(tmp), "-ldflags", ldflags, "."],
                           cwd=dest / "src" / "caddy" / "frankenphp", stdout=out, stderr=subprocess.STDOUT, env=env,
                           timeout=3600)
    if p.returncode != 0:
        raise RuntimeError(f"go build of FrankenPHP failed (exit {p.returncode}, see {build_log})")
    tmp.rename(binary)  # only a whole build is reused
    log(f"FrankenPHP: built in {time.time() - started:.0f} s")
    return binary


# ---- load ----------------------------------------------------------------------------

class ThreadSampler:
    """Samples a server's PHP thread count (php_worker with its admin API) during a run."""

    def __init__(self, server):
        import threading
        self.server, self.peak, self.stop = server, None, threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while not self.stop.is_set():
            try:
                n = self.server.php_threads()
            except OSError:
                n = None
            if n is not None:
                self.peak = max(self.peak or 0, n)
            self.stop.wait(0.1)

    def __enter__(self):
        if getattr(self.server, "admin_port", None):
            self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join()


# The throughput rounds of hello world and the Laravel page. This machine's speed drifts
# by 10% and more within a minute, so a round visits the servers in turn, in reverse order
# every other round (no server always comes after another), and each row is the median
# of its rounds.
ROUNDS, ROUND_SECONDS = 5, 5


def middle(items, key=None):
    """The median item of items (the upper one of an even count), by key."""
    return sorted(items, key=key)[len(items) // 2]


def round_order(servers, i):
    """The servers in the order round i visits them."""
    return servers if i % 2 == 0 else servers[::-1]


def oha(server, path, *, conns=64, duration=None, rate=None, requests=None, extra=()):
    """Runs oha against the server (in the smoke pass, quickload.py in its place); returns
    its summary plus the server's and the generator's CPU seconds during the run (and the
    most PHP threads it ran, when the server can tell)."""
    if QUICK and duration and not requests:
        # The smoke pass checks answers, not speed: a count of requests (each connection
        # gets two) rather than a time, which a slow page could pass with none answered.
        duration, requests = None, max(5, int(rate * Quick.short)) if rate else 2 * conns
    args = ["oha", "--no-tui", "--output-format", "json", "-c", str(conns)]
    if duration:
        args += ["-z", f"{duration}s"]
    if requests:
        args += ["-n", str(requests)]
    if rate:
        args += ["-q", str(rate), "--latency-correction"]
    args += list(extra)
    # The generator's CPU: oha's, a child's; quickload's, this process's own.
    generator = resource.RUSAGE_SELF if QUICK else resource.RUSAGE_CHILDREN
    pids = server.pids()
    gen_before = resource.getrusage(generator)
    before, started = cpu_seconds(pids), time.time()
    with ThreadSampler(server) as sampler:
        if QUICK:
            d = quickload.run(server.url(path), conns=conns, requests=requests, rate=rate, extra=extra)
        else:
            p = subprocess.run(args + [server.url(path)], capture_output=True, text=True,
                               timeout=(duration or 60) + 120)
            if p.returncode != 0:
                raise RuntimeError(f"oha failed: {p.stderr}")
            d = json.loads(p.stdout)
    wall = time.time() - started
    after = cpu_seconds(pids)
    gen_after = resource.getrusage(generator)
    gen_cpu = (gen_after.ru_utime + gen_after.ru_stime) - (gen_before.ru_utime + gen_before.ru_stime)
    codes = {int(k): v for k, v in (d.get("statusCodeDistribution") or {}).items()}
    # Requests still in flight when a timed run ends are cut off by oha, not failed.
    errors = sum(v for k, v in (d.get("errorDistribution") or {}).items() if k != "aborted due to deadline")
    ok = codes.get(200, 0)
    pct = d.get("latencyPercentiles") or {}
    return {
        "rps": d["summary"]["requestsPerSec"] or 0,
        "ok_rps": ok / wall if wall else 0,
        "ok": ok,
        "bad": sum(v for k, v in codes.items() if k != 200) + errors,
        "codes": codes,
        "errors": d.get("errorDistribution") or {},
        "mean_ms": (d["summary"]["average"] or 0) * 1000,
        "p50_ms": (pct.get("p50") or 0) * 1000,
        "p90_ms": (pct.get("p90") or 0) * 1000,
        "p95_ms": (pct.get("p95") or 0) * 1000,
        "p99_ms": (pct.get("p99") or 0) * 1000,
        "p999_ms": (pct.get("p99.9") or 0) * 1000,
        "server_cpu_s": after - before,
        "gen_cpu_s": gen_cpu,
        "wall_s": wall,
        "rss_mb": rss_mb(server.pids()),
        "php_threads": sampler.peak,
    }


def check_answered(r, name):
    """Every run must get answers: a run where none came back means a stalled server (or
    a stalled machine), and its figures would be meaningless."""
    check(r["ok"] > 0, f"{name}: no request was answered during the run ({r['errors']})")
    check(r["bad"] == 0, f"{name}: {r['bad']} failed requests {r['codes']} {r['errors']}")


def check(cond, message):
    if not cond:
        raise AssertionError(message)


class Run:
    """Starts a server, proves it answers correctly, yields it, stops it."""

    def __init__(self, server, probe_path, probe):
        self.server, self.path, self.probe = server, probe_path, probe

    def __enter__(self):
        log(f"  starting {self.server.name}")
        self.server.start()
        status, body = http_get(self.server.port, self.path)
        check(status == 200 and self.probe(body),
              f"{self.server.name}: {self.path} answered {status} {body[:300]!r}")
        return self.server

    def __exit__(self, *exc):
        self.server.stop()


# ---- workloads -----------------------------------------------------------------------

class SlowUploaders:
    """n clients each uploading `size` bytes at `rate` bytes/s to path, on connections of
    their own, until stopped (an upload that ends starts again)."""

    def __init__(self, server, n, path="/upload.php", size=2 << 20, rate=64 << 10):
        import threading
        self.server, self.path, self.size, self.rate = server, path, size, rate
        self.stopping = threading.Event()
        self.completed = 0
        self.threads = [threading.Thread(target=self.client, daemon=True) for _ in range(n)]

    def client(self):
        piece = 16 << 10
        while not self.stopping.is_set():
            try:
                with socket.create_connection(("127.0.0.1", self.server.port), timeout=120) as s:
                    s.sendall(f"POST {self.path} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/octet-stream\r\n"
                              f"Content-Length: {self.size}\r\nConnection: close\r\n\r\n".encode())
                    start = time.monotonic()
                    for sent in range(0, self.size, piece):
                        if self.stopping.wait(max(0.0, start + sent / self.rate - time.monotonic())):
                            return
                        s.sendall(b"u" * min(piece, self.size - sent))
                    if s.recv(4096):
                        self.completed += 1
            except OSError:
                if self.stopping.wait(0.1):
                    return

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stopping.set()
        for t in self.threads:
            t.join(5)


def probe_latency(server, seconds, timeout=10):
    """GETs / on a new connection, one after another, for `seconds`: latencies (ms) of the
    answered ones, how many got no answer within `timeout`, and the server's peak RSS."""
    latencies, unanswered, peak_rss = [], 0, 0.0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        start = time.monotonic()
        try:
            status, body = http_get(server.port, "/", timeout=timeout)
            check(status == 200 and is_hello(body), f"{server.name}: / answered {status} during the uploads")
            latencies.append((time.monotonic() - start) * 1000)
        except OSError:
            unanswered += 1
        peak_rss = max(peak_rss, rss_mb(server.pids()))
        time.sleep(0.05)
    latencies.sort()
    pick = (lambda f: latencies[min(len(latencies) - 1, int(f * len(latencies)))]) if latencies else (lambda f: None)
    return {"answered": len(latencies), "unanswered": unanswered, "p50_ms": pick(0.5), "p99_ms": pick(0.99),
            "max_ms": latencies[-1] if latencies else None, "rss_mb": peak_rss}


def upload_servers(baseline=None):
    servers = [
        PhpWorker("hello", threads=4, label="php_worker, 4 threads (request_buffer 1MB, the default)"),
        PhpWorker("hello", threads=4, unbuffered_requests=True, label="php_worker, 4 threads, request_buffer off"),
        NginxFpm("hello", children=4),
    ]
    if baseline:
        servers.insert(2, PhpWorker("hello", threads=4, binary=baseline, label="php_worker, 4 threads (baseline build)"))
    return servers


def workload_uploads(q, baseline=None):
    """Slow uploads: 8 and 64 clients upload 2 MB at 64 KB/s each (phones on a bad network)
    to 4 PHP threads while one client GETs hello world over and over on new connections:
    its latency, how many of its requests got no answer within 10 s, and the server's RSS.
    Then upload throughput: 1 MB bodies read whole by PHP, closed loop, 16 connections.
    Servers one at a time (the uploaders load the machine)."""
    body = WORK / "upload-1mb.bin"
    body.write_bytes(b"u" * (1 << 20))
    rows = []
    for server in upload_servers(baseline):
        with Run(server, "/", is_hello):
            row = {"server": server.name, "idle": probe_latency(server, q.short if q else 3)}
            for n in ((8,) if q else (8, 64)):
                with SlowUploaders(server, n):
                    time.sleep(1)
                    row[f"slow{n}"] = probe_latency(server, q.short if q else 10, timeout=2 if q else 10)
                time.sleep(2)  # the uploads' requests end
            r = oha(server, "/upload.php", conns=16, duration=q.short if q else 8,
                    extra=["-m", "POST", "-T", "application/octet-stream", "-D", str(body)])
            check_answered(r, f"{server.name} (1 MB uploads)")
            row["upload"] = r
            rows.append(row)
            log(f"  {server.name}: idle p50 {row['idle']['p50_ms']:.1f} ms; " + "; ".join(
                f"{n} slow uploaders: p50 {fmt_ms(row[f'slow{n}']['p50_ms'])}, p99 {fmt_ms(row[f'slow{n}']['p99_ms'])}, "
                f"{row[f'slow{n}']['unanswered']} unanswered, RSS {row[f'slow{n}']['rss_mb']:.0f} MB"
                for n in ((8,) if q else (8, 64))) + f"; 1 MB uploads {r['ok_rps']:.0f}/s")
    return {"rows": rows}


def fmt_ms(x):
    return "–" if x is None else f"{x:.1f} ms"



def hello_servers(baseline=None, peer=None):
    servers = [
        PhpWorker("hello", threads=4, worker="worker.php"),
        PhpWorker("hello", threads=4),
        NginxFpm("hello", children=4),
        CaddyRespond(),
    ]
    if baseline:
        # Another build of php_worker (an earlier commit), measured in the same rounds.
        servers.insert(1, PhpWorker("hello", threads=4, worker="worker.php", binary=baseline,
                                    label="php_worker worker, 4 threads (baseline build)"))
    if peer:
        # FrankenPHP, the same scripts and thread counts, in the same rounds.
        at = len(servers) - 2
        servers[at:at] = [FrankenPhp(peer, "hello", threads=4, worker="worker.php"),
                          FrankenPhp(peer, "hello", threads=4)]
    return servers


def is_hello(body):
    return body == b"Hello, world!"


def workload_hello(q, baseline=None, peer=None):
    """Hello world: maximum throughput (closed loop, 64 connections), then latency at a
    fixed rate of half each server's maximum. The servers run side by side and the
    maximum is the median of rounds that visit each in turn, so a slow minute of a
    shared machine does not land on one server only."""
    servers = hello_servers(baseline, peer)
    runs = [Run(server, "/", is_hello) for server in servers]
    for run in runs:
        run.__enter__()
    try:
        seen = {s.name: 1 for s in servers}  # the probe
        peaks = {s.name: [] for s in servers}
        for server in servers:
            warmup = oha(server, "/", duration=q.short if q else 2)  # OPcache, connections, threads
            seen[server.name] += warmup["ok"] + warmup["bad"]
        for i in range(1 if q else ROUNDS):
            for server in round_order(servers, i):
                peak = oha(server, "/", duration=q.short if q else ROUND_SECONDS)
                check_answered(peak, server.name)
                peaks[server.name].append(peak)
                seen[server.name] += peak["ok"] + peak["bad"]
        rows, cost = [], []
        for server in servers:
            ordered = sorted(peaks[server.name], key=lambda r: r["ok_rps"])
            peak = ordered[len(ordered) // 2]
            half = max(50, int(peak["ok_rps"] / 2))
            steady = oha(server, "/", rate=half, duration=q.short if q else 10)
            check_answered(steady, f"{server.name} at {half} req/s")
            seen[server.name] += steady["ok"] + steady["bad"]
            row = {"server": server.name, "peak": peak, "peaks": [r["ok_rps"] for r in ordered], "rate": half,
                   "steady": steady}
            if not q and isinstance(server, PhpWorker) and server.worker and server.binary == CADDY:
                row["profile"] = profile(server)
                seen[server.name] += row["profile"].get("requests", 0)
            rows.append(row)
            cost.append({"server": server.name, "cpu_us": peak["server_cpu_s"] / max(1, peak["ok"]) * 1e6,
                         "gen_share": peak["gen_cpu_s"] / max(1e-9, peak["gen_cpu_s"] + peak["server_cpu_s"])})
    finally:
        for run in runs:
            run.__exit__(None, None, None)
    for server, c in zip(servers, cost):
        if isinstance(server, PhpWorker):
            c["crossings"] = server.crossings()
            c["requests_seen"] = seen[server.name]
    # On servers of their own, so the crossings counted above stay hello world's.
    large = hello_servers(baseline)
    large.insert(1, PhpWorker("hello", threads=4, worker="worker.php", unbuffered=True,
                              label="php_worker worker, 4 threads, response_buffer off"))
    return {"rows": rows, "cost": cost, "large": large_responses(large, q), "frankenphp": peer_note(peer)}


LARGE_PATH = "/?large=1"


def is_large(body):
    return len(body) == 1 << 20 and body.count(b"x") == 1 << 20


def large_responses(servers, q):
    """1 MB responses, each in one echo: closed loop, 8 connections, the median of rounds
    that visit the PHP servers in turn. What a response costs on its way from PHP to the
    client (buffering, copies, writes) shows here, where hello world hides it."""
    php = [s for s in servers if not isinstance(s, CaddyRespond)]
    runs = [Run(server, LARGE_PATH, is_large) for server in php]
    for run in runs:
        run.__enter__()
    try:
        for server in php:
            oha(server, LARGE_PATH, conns=8, duration=1)  # warm-up
        rounds = {s.name: [] for s in php}
        for _ in range(1 if q else 5):
            for server in php:
                r = oha(server, LARGE_PATH, conns=8, duration=q.short if q else 5)
                check_answered(r, f"{server.name} (1 MB responses)")
                rounds[server.name].append(r["ok_rps"])
    finally:
        for run in runs:
            run.__exit__(None, None, None)
    return [{"server": name, "rps": middle(v), "rounds": v} for name, v in rounds.items()]


def profile(server, path="/", seconds=6, conns=64, extra=(), flame="profile.svg",
            title="php_worker worker mode, hello world"):
    """Where the server's CPU goes under a closed-loop load of `path`: perf samples
    (software clock) grouped by thread, by function, by component and by binary. Empty
    when perf is missing."""
    if not shutil.which("perf"):
        return {}
    data = server.workdir / "perf.data"
    load = subprocess.Popen(["oha", "--no-tui", "--output-format", "json", "-c", str(conns), "-z", f"{seconds + 2}s",
                             *extra, server.url(path)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    time.sleep(1)
    subprocess.run(["perf", "record", "-F", "499", "-g", "-p", str(server.proc.pid), "-o", str(data), "--",
                    "sleep", str(seconds)], capture_output=True)
    out, _ = load.communicate()
    requests = sum(json.loads(out).get("statusCodeDistribution", {}).values())

    def report(*args):
        p = subprocess.run(["perf", "report", "-i", str(data), "--stdio", "-g", "none", *args],
                           capture_output=True, text=True)
        rows = []
        for line in p.stdout.splitlines():
            parts = line.split()
            if not parts or not parts[0].endswith("%") or line.startswith("#"):
                continue
            # "share [self share] [.]|[k] symbol" or "share comm"
            rest = [x for x in parts[1:] if not x.endswith("%") and x not in ("[.]", "[k]")]
            rows.append((float(parts[0][:-1]), " ".join(rest)))
        return rows

    threads = {}
    for share, comm in report("--no-children", "--sort", "comm"):
        group = "PHP threads" if comm.startswith("php-") else "Go (Caddy, net/http, php_worker's handler)"
        threads[group] = threads.get(group, 0) + share
    php_comms = ",".join(sorted({c for _, c in report("--no-children", "--sort", "comm") if c.startswith("php-")}))
    switching = sum(share for share, sym in report("--no-children", "--comm", php_comms, "--sort", "sym")
                    if "finish_task_switch" in sym or "schedule" in sym) if php_comms else 0
    components, folded = split_by_component(data)
    flame = BENCH / flame
    if folded and shutil.which("inferno-flamegraph"):
        svg = subprocess.run(["inferno-flamegraph", "--minwidth", "1", "--title", title],
                             input="".join(f"{stack} {n}\n" for stack, n in folded.items()),
                             capture_output=True, text=True)
        if svg.returncode == 0:
            flame.write_text(svg.stdout)
    generic = ("runtime.goexit", "gowrap", "entry_SYSCALL", "do_syscall_64", "start_thread", "clone3",
               "runtime.mstart", "runtime.cgocallback", "_cgoexp_", "crosscall2", "runtime.cgocallbackg")
    top = [(share, sym) for share, sym in report("--children", "--sort", "sym")
           if not any(g in sym for g in generic)][:40]
    # By binary: unlike the call stacks, this holds without frame pointers in PHP's build.
    binaries = {}
    for share, dso in report("--no-children", "--sort", "dso"):
        name = ("PHP (libphp: the app's own work)" if "libphp" in dso else
                "./caddy (Caddy, Go, php_worker)" if dso == "caddy" else
                "kernel" if "kernel" in dso else
                "libc and other libraries")
        binaries[name] = binaries.get(name, 0) + share
    return {"threads": threads, "php_switching": switching, "top": top, "requests": requests,
            "components": components, "binaries": sorted(((v, k) for k, v in binaries.items()), reverse=True),
            "flame_graph": flame.exists() and bool(folded), "flame_file": flame.name}


# The parts of a request's cost, tried in order: a sample belongs to the first component
# one of whose patterns names a frame of its call stack.
COMPONENTS = [
    ("PHP request start and end (superglobals, output layer, timer)",
     ("pw_worker_request_startup", "pw_worker_request_shutdown", "php_request_startup", "php_request_shutdown",
      "zend_set_timeout", "timer_settime")),
    ("output: the PHP thread hands the response over",
     ("goPhpWorkerRespond", "pw_rs_ub_write", "pw_sapi_ub_write", "RequestContext::finish", "RequestContext::transmit",
      "Completions::push")),
    ("the PHP script", ("execute_ex", "zend_call_function", "zend_execute")),
    ("queue and wake-ups on PHP threads", ("next_job", "crossbeam_channel", "pw_rs_worker_wait", "__sched_yield")),
    ("Go side of the completions", ("deliverCompletions", "takeCompletions")),
    ("submit: Go to Rust", ("php_worker_request_submit", "runtime.cgocall", "runtime.asmcgocall")),
    ("php_worker's Go handler (CGI variables, waiting, writing)", ("php_worker/go-module.",)),
    ("Caddy and net/http", ("caddyhttp.", "net/http.", "internal/poll.", "net.(", "bufio.", "syscall.")),
    ("Go runtime (GC, scheduler, sysmon)", ("runtime.",)),
]


def split_by_component(data):
    """Shares of the samples per COMPONENTS entry, and the folded stacks (root first) for
    a flame graph."""
    p = subprocess.run(["perf", "script", "-i", str(data), "-F", "comm,ip,sym"], capture_output=True, text=True)
    counts, folded, frames, comm, total = {}, {}, [], "", 0

    def done():
        nonlocal total
        if not frames:
            return
        name = "other (kernel and libc outside the above)"
        for component, patterns in COMPONENTS:
            if any(pat in f for f in frames for pat in patterns):
                name = component
                break
        counts[name] = counts.get(name, 0) + 1
        stack = ";".join([comm.rstrip("0123456789-")] + [f.replace(";", ":") for f in reversed(frames)])
        folded[stack] = folded.get(stack, 0) + 1
        total += 1

    for line in p.stdout.splitlines():
        if not line.strip():
            done()
            frames = []
        elif line[0] in " \t":
            frames.append(line.split(None, 1)[-1].strip())
        else:
            comm = line.split()[0] if line.split() else ""
    done()
    shares = sorted(((100 * n / total, name) for name, n in counts.items()), reverse=True) if total else []
    return shares, folded


LARAVEL_APP = REPO / "tests" / "e2e" / "laravel"
LARAVEL_PAGE = "/page"


def is_laravel_page(body):
    return b"<h1>php_worker on Laravel</h1>" in body and body.count(b"<li>") == 20


def binary_php_version(binary):
    out = subprocess.run([str(binary), "php-cli", "-n", "-r", "echo PHP_MAJOR_VERSION, ' ', PHP_MINOR_VERSION;"],
                         capture_output=True, text=True, timeout=60).stdout
    return tuple(int(x) for x in out.split())


def current_laravel():
    """The PHP folder of Laravel 13 from sid, unpacked by scripts/fetch-php-app.py."""
    p = subprocess.run(["python3", str(REPO / "scripts" / "fetch-php-app.py"), "--suite", "sid", "php-laravel-framework"],
                       capture_output=True, text=True, timeout=900)
    check(p.returncode == 0, f"could not unpack Laravel 13 from sid: {p.stderr[-2000:]}")
    return p.stdout.strip()


def laravel_servers(baseline=None, peer=None):
    """Debian's Laravel 8 (the test app of tests/e2e/laravel) and, on PHP 8.3+, the same
    app on Laravel 13 from sid; 4 PHP threads or children each; every server keeps its
    sessions and compiled views in a folder of its own. With a baseline build, its worker
    mode on Laravel 8 runs in the same rounds; with FrankenPHP, its worker mode too."""
    def env(name, root=None):
        return {"LARAVEL_CACHE_DIR": str(WORK / f"laravel-{name}"), **({"LARAVEL_PHP_ROOT": root} if root else {})}
    current = []
    if binary_php_version(CADDY) >= (8, 3):
        root = current_laravel()
        current = [PhpWorker(LARAVEL_APP, threads=4, worker="public/worker.php", env=env("worker13", root),
                             label="Laravel 13, php_worker worker, 4 threads")]
    if baseline:
        minor = ".".join(map(str, binary_php_version(baseline)))
        current.append(PhpWorker(LARAVEL_APP, threads=4, worker="public/worker.php", env=env("baseline"), binary=baseline,
                                 label=f"Laravel 8, php_worker worker, 4 threads (baseline build, PHP {minor})"))
    peers = []
    if peer:
        peers = [FrankenPhp(peer, LARAVEL_APP, threads=4, worker="public/worker.php", env=env("frankenphp"),
                            label=f"Laravel 8, {peer['name']} worker, 4 threads (PHP {peer['php']})")]
    return current + [
        PhpWorker(LARAVEL_APP, threads=4, worker="public/worker.php", env=env("worker"),
                  label="Laravel 8, php_worker worker, 4 threads"),
        *peers,
        # Without the tracing JIT php_worker turns on by default on PHP 8.4: the same PHP as
        # FrankenPHP, which leaves it off.
        PhpWorker(LARAVEL_APP, threads=4, worker="public/worker.php", env=env("nojit"),
                  ini={"opcache.jit": "disable"}, label="Laravel 8, php_worker worker, 4 threads, JIT off"),
        PhpWorker(LARAVEL_APP, threads=4, env=env("classic"), label="Laravel 8, php_worker classic, 4 threads"),
        NginxFpm(LARAVEL_APP, children=4, env=env("fpm"), label="Laravel 8, nginx + php-fpm, 4 children"),
    ]


def session_cookie(server):
    """The cookies of a first visit to the page: the load then runs as one returning
    visitor, so each request reads and writes one session file."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.request("GET", LARAVEL_PAGE)
        r = conn.getresponse()
        r.read()
        cookies = [v.split(";", 1)[0] for k, v in r.getheaders() if k.lower() == "set-cookie"]
    finally:
        conn.close()
    check(any(c.startswith("laravel_session=") for c in cookies), f"{server.name}: no session cookie ({cookies})")
    return "; ".join(cookies)


def workload_laravel(q, baseline=None, peer=None):
    """A real framework: a Laravel 8 page through the `web` middleware group (encrypted
    cookies, a file session, CSRF, a Blade view), closed loop at 32 connections, the
    median of rounds that visit each server in turn. Then where php_worker's worker mode
    spends its CPU on it."""
    servers = laravel_servers(baseline, peer)
    runs = [Run(server, LARAVEL_PAGE, is_laravel_page) for server in servers]
    for run in runs:
        run.__enter__()
    try:
        headers = {s.name: ("-H", f"Cookie: {session_cookie(s)}") for s in servers}
        for server in servers:
            oha(server, LARAVEL_PAGE, conns=32, duration=q.short if q else 3, extra=headers[server.name])
        peaks = {s.name: [] for s in servers}
        for i in range(1 if q else ROUNDS):
            for server in round_order(servers, i):
                r = oha(server, LARAVEL_PAGE, conns=32, duration=q.short if q else ROUND_SECONDS,
                        extra=headers[server.name])
                check_answered(r, server.name)
                peaks[server.name].append(r)
        rows = []
        for server in servers:
            ordered = sorted(peaks[server.name], key=lambda r: r["ok_rps"])
            peak = ordered[len(ordered) // 2]
            row = {"server": server.name, "peak": peak, "peaks": [r["ok_rps"] for r in ordered],
                   "cpu_us": peak["server_cpu_s"] / max(1, peak["ok"]) * 1e6}
            if isinstance(server, PhpWorker):
                # The JIT is on by default from PHP 8.4 (go-module/bundle.go), unless php_ini says not.
                want = server.ini.get("opcache.jit") != "disable" and binary_php_version(server.binary) >= (8, 4)
                status, body = http_get(server.port, "/opcache/jit")
                jit = json.loads(body).get("jit") if status == 200 else None
                check(status == 200 and bool(jit and jit.get("on")) == want,
                      f"{server.name}: the JIT should be {'on' if want else 'off'} ({status} {body[:300]!r})")
                if want:
                    row["jit_buffer_used"] = jit.get("buffer_size", 0) - jit.get("buffer_free", 0)
            if not q and isinstance(server, PhpWorker) and server.name.startswith("Laravel 8, php_worker worker, 4 threads") \
                    and not server.ini and server.binary == CADDY:
                row["profile"] = profile(server, LARAVEL_PAGE, conns=32, extra=headers[server.name],
                                         flame="profile-laravel.svg", title="php_worker worker mode, Laravel 8 page")
            log(f"    {server.name}: median {peak['ok_rps']:,.0f} req/s, {row['cpu_us']:,.0f} µs of CPU per request")
            rows.append(row)
    finally:
        for run in runs:
            run.__exit__(None, None, None)
    return {"rows": rows, "frankenphp": peer_note(peer)}


def peer_note(peer):
    """What RESULTS.md says of the FrankenPHP rows' binary and PHP, or None."""
    return peer and {k: peer[k] for k in ("name", "php", "version_line", "how")}


# ---- classic mode on the same PHP ------------------------------------------------------

class MariaDB:
    """A throwaway MariaDB on a Unix socket only (no TCP), run as the mysql user."""

    def __init__(self):
        self.dir = Path("/tmp/php_worker_bench_mariadb")
        self.socket = self.dir / "mysqld.sock"
        self.proc = None

    def start(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        shutil.chown(self.dir, "mysql", "mysql")
        data = self.dir / "data"
        p = subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={data}", "--user=mysql", "--skip-test-db",
                            "--auth-root-authentication-method=socket"], capture_output=True, text=True)
        check(p.returncode == 0, f"mariadb-install-db failed: {p.stdout[-1000:]} {p.stderr[-1000:]}")
        # Durability off, as the PostgreSQL of the I/O workload: the bench measures PHP.
        self.proc = subprocess.Popen(["mariadbd", "--no-defaults", f"--datadir={data}", f"--socket={self.socket}",
                                      "--skip-networking", "--user=mysql", f"--pid-file={self.dir / 'mariadb.pid'}",
                                      f"--log-error={self.dir / 'error.log'}", "--skip-log-bin",
                                      "--innodb-flush-log-at-trx-commit=0", "--innodb-buffer-pool-size=256M",
                                      "--max-connections=200"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        while self.sql("SELECT 1", check_ok=False).returncode != 0:
            if self.proc.poll() is not None or time.time() > deadline:
                log_file = self.dir / "error.log"
                check(False, "MariaDB did not start: " + (log_file.read_text(errors="replace")[-2000:]
                                                          if log_file.exists() else "no error log"))
            time.sleep(0.2)
        self.sql("CREATE DATABASE wordpress; CREATE USER wordpress@localhost IDENTIFIED BY 'wordpress'; "
                 "GRANT ALL ON wordpress.* TO wordpress@localhost")

    def sql(self, statements, check_ok=True):
        p = subprocess.run(["mariadb", "--no-defaults", "-S", str(self.socket), "-u", "root", "-e", statements],
                           capture_output=True, text=True)
        if check_ok:
            check(p.returncode == 0, f"MariaDB refused {statements!r}: {p.stderr}")
        return p

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


WORDPRESS_APP = WORK / "wordpress"  # the site's copy: WORDPRESS_APP/public


def wordpress_site(db, binary):
    """Debian 12's WordPress 6.1 and its default theme (unpacked by
    scripts/fetch-php-app.py), copied into WORDPRESS_APP/public with the bench's
    wp-config.php, then installed into db by binary's PHP with one post of 20 comments.
    Returns the environment its servers need and the post's path."""
    p = subprocess.run(["python3", str(REPO / "scripts" / "fetch-php-app.py"), "--suite", "bookworm", "--also",
                        "wordpress-theme-twentytwentythree", "wordpress"], capture_output=True, text=True, timeout=900)
    check(p.returncode == 0, f"could not unpack WordPress: {p.stderr[-2000:]}")
    source = Path(p.stdout.strip()).parent / "wordpress"
    public = WORDPRESS_APP / "public"
    shutil.rmtree(WORDPRESS_APP, ignore_errors=True)
    # Debian links getid3 and the JavaScript libraries from other packages: the copy
    # takes the files the unpacked root has and leaves out the rest (no page needs them).
    shutil.copytree(source, public, ignore_dangling_symlinks=True)
    shutil.copy(APPS / "wordpress" / "wp-config.php", public / "wp-config.php")
    env = {"WORDPRESS_DB_SOCKET": str(db.socket)}
    p = subprocess.run([str(binary), "php-cli", str(APPS / "wordpress" / "install.php"), str(public)],
                       capture_output=True, text=True, timeout=300, env=dict(os.environ, **env))
    # The post's ID is the last line (a newer PHP may print deprecation notices before it).
    post = (p.stdout.strip().splitlines() or [""])[-1]
    check(p.returncode == 0 and post.isdigit(), f"WordPress did not install: {p.stdout[-1000:]} {p.stderr[-2000:]}")
    return env, f"/?p={post}"


def is_wordpress_front(body):
    return b"<title>php_worker bench</title>" in body and b"</html>" in body


def is_wordpress_post(body):
    return b"A post with comments" in body and body.count(b"Benchmark comment ") == 20 and b"</html>" in body


def php82_binary():
    """php_worker on PHP 8.2, php-fpm's version: PHP_WORKER_BENCH_PHP82, else the build
    tests/run.sh and tests/bench/run.sh make (target/php-8.2/caddy); None if missing."""
    path = Path(os.environ.get("PHP_WORKER_BENCH_PHP82") or REPO / "target" / "php-8.2" / "caddy")
    return path if path.exists() else None


def thread_split(server, path, extra=(), seconds=5, conns=32):
    """The server's CPU per request on its PHP threads (php_worker) or PHP processes
    (php-fpm), and on the rest (Caddy, Go and php_worker's handler; nginx), from perf
    samples by thread name under a closed-loop load. None without perf."""
    if not shutil.which("perf"):
        return None
    data = server.workdir / "perf-split.data"
    pids = ",".join(str(p) for p in server.pids())
    rec = subprocess.Popen(["perf", "record", "-F", "499", "-o", str(data), "-p", pids, "--", "sleep", str(seconds)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    r = oha(server, path, conns=conns, duration=seconds, extra=extra)
    rec.wait()
    p = subprocess.run(["perf", "report", "-i", str(data), "--stdio", "--no-children", "--sort", "comm"],
                       capture_output=True, text=True)
    php = other = 0.0
    for line in p.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].endswith("%"):
            share = float(parts[0][:-1])
            if parts[1].startswith("php"):  # php-N threads; php-fpm8.2 processes
                php += share
            else:
                other += share
    cpu_us = r["server_cpu_s"] / max(1, r["ok"]) * 1e6
    total = php + other
    return total and {"php_us": cpu_us * php / total, "server_us": cpu_us * other / total, "cpu_us": cpu_us}


def zts_cost(binary, minor, q):
    """PHP's own speed, ZTS (binary's php-cli) against Debian's NTS php8.2 on the same
    CPU-bound script without OPcache, in interleaved rounds: the median milliseconds."""
    script = str(APPS / "cpu" / "cpu.php")
    runs = {f"ZTS (php_worker's PHP {minor})": [str(binary), "php-cli", "-n", script],
            "NTS (Debian's php8.2)": ["php8.2", "-n", script]}
    times = {k: [] for k in runs}
    for i in range(1 if q else 7):
        for name, cmd in (runs.items() if i % 2 == 0 else reversed(runs.items())):
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            check(p.returncode == 0 and p.stdout.strip().isdigit(), f"{name}: {p.stdout} {p.stderr}")
            times[name].append(int(p.stdout))
    return {name: {"median_ms": middle(t), "rounds": sorted(t)} for name, t in times.items()}


def workload_classic(q):
    """Classic mode against php-fpm on the same PHP version (8.2): hello world, the
    Laravel 8 page and WordPress 6.1 (its front page and a post with 20 comments, on the
    bench's MariaDB), closed loop, the median of rounds that visit the two servers in
    turn; then where each server's CPU goes (PHP threads or the HTTP side) and the cost
    of ZTS alone."""
    binary = php82_binary()
    if binary is None:
        check(q is not None, "target/php-8.2/caddy is missing: tests/bench/run.sh builds it")
        # The smoke pass runs before tests/run.sh builds PHP 8.2: ./caddy checks the setup.
        log("  target/php-8.2/caddy is not built yet: the smoke pass runs ./caddy instead")
        binary = CADDY
    minor = ".".join(map(str, binary_php_version(binary)))
    db = MariaDB()
    db.start()
    full = subprocess.run([str(binary), "php-cli", "-n", "-r", "echo PHP_VERSION;"], capture_output=True, text=True).stdout
    fpm = subprocess.run(["php-fpm8.2", "-v"], capture_output=True, text=True).stdout.split(" (")[0].replace("PHP ", "")
    results = {"php": minor, "apps": [], "versions": {"php_worker": full.strip(), "php-fpm": fpm.strip()}}
    try:
        wp_env, post = wordpress_site(db, binary)
        laravel_env = lambda name: {"LARAVEL_CACHE_DIR": str(WORK / f"laravel-classic-{name}")}
        apps = [
            ("hello world", "hello", "/", is_hello, {}, 64),
            ("Laravel 8 page", LARAVEL_APP, LARAVEL_PAGE, is_laravel_page, None, 32),
            # Tens of milliseconds of CPU per page: 8 connections keep 4 PHP threads busy,
            # and a round of the smoke pass still completes requests.
            ("WordPress front page", WORDPRESS_APP, "/", is_wordpress_front, wp_env, 8),
            ("WordPress post, 20 comments", WORDPRESS_APP, post, is_wordpress_post, wp_env, 8),
        ]
        for title, app, path, probe, env, conns in apps:
            log(f"  {title}")
            servers = [PhpWorker(app, threads=4, binary=binary, env=env if env is not None else laravel_env("worker"),
                                 label=f"php_worker classic, 4 threads (PHP {minor}, ZTS)"),
                       NginxFpm(app, children=4, env=env if env is not None else laravel_env("fpm"),
                                label="nginx + php-fpm, 4 children (PHP 8.2, NTS)")]
            runs = [Run(s, path, probe) for s in servers]
            for run in runs:
                run.__enter__()
            try:
                extra = {s.name: ("-H", f"Cookie: {session_cookie(s)}") if app == LARAVEL_APP else () for s in servers}
                for s in servers:
                    oha(s, path, conns=conns, duration=q.short if q else 5, extra=extra[s.name])
                peaks = {s.name: [] for s in servers}
                for i in range(1 if q else ROUNDS):
                    for s in round_order(servers, i):
                        r = oha(s, path, conns=conns, duration=q.short if q else ROUND_SECONDS, extra=extra[s.name])
                        check_answered(r, f"{title}, {s.name}")
                        peaks[s.name].append(r)
                rows = []
                for s in servers:
                    peak = middle(peaks[s.name], key=lambda r: r["ok_rps"])
                    rows.append({"server": s.name, "rps": peak["ok_rps"], "rounds": sorted(r["ok_rps"] for r in peaks[s.name]),
                                 "cpu_us": peak["server_cpu_s"] / max(1, peak["ok"]) * 1e6,
                                 "p50_ms": peak["p50_ms"], "p99_ms": peak["p99_ms"],
                                 "split": None if q else thread_split(s, path, extra[s.name], conns=conns)})
                    status, body = http_get(s.port, path)
                    check(status == 200 and probe(body), f"{title}, {s.name}: answered {status} after the load")
                    log(f"    {s.name}: median {peak['ok_rps']:,.0f} req/s, {rows[-1]['cpu_us']:,.0f} µs of CPU per request")
                results["apps"].append({"app": title, "rows": rows})
            finally:
                for run in runs:
                    run.__exit__(None, None, None)
    finally:
        db.stop()
    results["zts"] = zts_cost(binary, minor, q)
    for name, t in results["zts"].items():
        log(f"  {name}: median {t['median_ms']} ms")
    return results


def go_tool():
    """Go's binary, for `go tool pprof`."""
    return shutil.which("go") or "/usr/local/go/bin/go"


def workload_profiler(q):
    """What the built-in profiler costs while it runs: hello world and the Laravel page in
    worker mode, closed loop, rounds alternating no profile and a profile at the default
    rate (100 Hz, wall time) taken over the whole round; then the Laravel profile's top
    frames."""
    servers = [
        (PhpWorker("hello", threads=4, worker="worker.php", admin=True, label="hello world, php_worker worker, 4 threads"),
         "/", is_hello, ()),
        (PhpWorker(LARAVEL_APP, threads=4, worker="public/worker.php", admin=True,
                   env={"LARAVEL_CACHE_DIR": str(WORK / "laravel-profiler")},
                   label="Laravel 8 page, php_worker worker, 4 threads"), LARAVEL_PAGE, is_laravel_page, None),
    ]
    runs = [Run(server, path, probe) for server, path, probe, _ in servers]
    for run in runs:
        run.__enter__()
    rows = []
    try:
        seconds = 1 if q else 8
        for server, path, _, extra in servers:
            extra = extra if extra is not None else ("-H", f"Cookie: {session_cookie(server)}")
            oha(server, path, conns=32, duration=1, extra=extra)
            plain, profiled, profile_body = [], [], None
            for _ in range(1 if q else 3):
                plain.append(oha(server, path, conns=32, duration=seconds, extra=extra)["ok_rps"])
                answer = {}
                taker = threading.Thread(target=lambda: answer.update(
                    r=http_get(server.admin_port, f"/php_worker/profile?seconds={seconds + 1}", timeout=seconds + 60)))
                taker.start()
                time.sleep(0.3)  # the profile is running before the load starts
                profiled.append(oha(server, path, conns=32, duration=seconds, extra=extra)["ok_rps"])
                taker.join()
                status, profile_body = answer["r"]
                check(status == 200, f"{server.name}: the profile failed: {status} {profile_body[:300]!r}")
            plain.sort()
            profiled.sort()
            row = {"server": server.name, "plain": plain, "profiled": profiled,
                   "overhead_pct": 100 * (1 - profiled[len(profiled) // 2] / plain[len(plain) // 2])}
            if profile_body:
                out = WORK / f"profile-{server.port}.pb.gz"
                out.write_bytes(profile_body)
                top = subprocess.run([go_tool(), "tool", "pprof", "-top", "-cum", "-nodecount=12", str(out)],
                                     capture_output=True, text=True, timeout=120)
                check(top.returncode == 0, f"go tool pprof failed: {top.stderr[-1000:]}")
                row["top"] = [line for line in top.stdout.splitlines() if line.strip()][-12:]
            log(f"    {server.name}: {row['plain']} req/s without a profile, {row['profiled']} with one "
                f"({row['overhead_pct']:+.1f}%)")
            rows.append(row)
    finally:
        for run in runs:
            run.__exit__(None, None, None)
    return {"rows": rows}


def is_boot_json(body):
    try:
        return json.loads(body).get("app") == "boot-cost"
    except ValueError:
        return False


def workload_boot(q):
    """An app whose bootstrap costs 200 ms: cold (20 requests at concurrency 1 right after
    start) and warm (1,000 requests at concurrency 20)."""
    servers = [
        PhpWorker("boot", threads=4, worker="worker.php", max_requests=500),
        PhpWorker("boot", threads=20, label="php_worker classic, 20 threads"),
        NginxFpm("boot", children=20),
    ]
    rows = []
    for server in servers:
        server.start()
        try:
            log(f"  started {server.name}")
            cold = oha(server, "/?name=cold", conns=1, requests=4 if q else 20)
            status, body = http_get(server.port, "/?name=probe")
            check(status == 200 and is_boot_json(body), f"{server.name}: {status} {body[:200]!r}")
            n = 40 if q else 1000
            if isinstance(server, PhpWorker) and not server.worker or isinstance(server, NginxFpm):
                n = 40 if q else 300  # booting on every request: 300 requests say enough
            warm = oha(server, "/?name=warm", conns=20, requests=n)
            check_answered(cold, f"{server.name} cold")
            check_answered(warm, f"{server.name} warm")
            rows.append({"server": server.name, "cold": cold, "warm": warm, "requests": n})
        finally:
            server.stop()
    return {"rows": rows}


class Postgres:
    """A throwaway PostgreSQL 15 cluster on loopback, owned by the postgres user."""

    def __init__(self):
        self.dir = Path("/tmp/php_worker_bench_pg")

    def run(self, *args, **kw):
        return subprocess.run(["runuser", "-u", "postgres", "--", *args], check=True, capture_output=True,
                              text=True, **kw)

    def start(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        shutil.chown(self.dir, "postgres", "postgres")
        self.run(str(PG_BIN / "initdb"), "-D", str(self.dir / "data"), "-A", "trust", "-U", "postgres")
        conf = self.dir / "data" / "postgresql.conf"
        conf.write_text(conf.read_text() + f"""
listen_addresses = '127.0.0.1'
port = {PG_PORT}
unix_socket_directories = '{self.dir}'
max_connections = 200
shared_buffers = 256MB
fsync = off
synchronous_commit = off
full_page_writes = off
""")
        self.run(str(PG_BIN / "pg_ctl"), "-D", str(self.dir / "data"), "-l", str(self.dir / "pg.log"), "-w", "start")
        self.psql("CREATE ROLE bench LOGIN PASSWORD 'bench'", db="postgres")
        self.psql("CREATE DATABASE bench OWNER bench", db="postgres")
        self.seed()

    def psql(self, sql, db="bench", user="postgres"):
        return self.run(str(PG_BIN / "psql"), "-h", "127.0.0.1", "-p", str(PG_PORT), "-U", user, "-d", db,
                        "-v", "ON_ERROR_STOP=1", "-q", "-c", sql)

    def seed(self):
        self.run(str(PG_BIN / "psql"), "-h", "127.0.0.1", "-p", str(PG_PORT), "-U", "bench", "-d", "bench",
                 "-v", "ON_ERROR_STOP=1", "-q", "-f", str(APPS / "io" / "schema.sql"))

    def pids(self):
        try:
            pid = int((self.dir / "data" / "postmaster.pid").read_text().split()[0])
        except (FileNotFoundError, ValueError):
            return []
        return proc_tree(pid)

    def stop(self):
        if (self.dir / "data" / "postmaster.pid").exists():
            subprocess.run(["runuser", "-u", "postgres", "--", str(PG_BIN / "pg_ctl"), "-D", str(self.dir / "data"),
                            "-m", "fast", "-w", "stop"], capture_output=True)


def is_io_json(body):
    try:
        d = json.loads(body)
        return d.get("queries") == 10 and d.get("total_users") == 100 and d.get("user", "").startswith("user ")
    except ValueError:
        return False


def io_servers(env, q):
    """The I/O workload's configurations; add a line to add one."""
    threads = [4, 16] if q else [4, 8, 16, 32]
    servers = [PhpWorker("io", threads=n, worker="worker.php", env=env) for n in threads]
    servers.append(PhpWorker("io", threads=4, worker="worker.php", env=env, max_threads=64))
    servers.append(NginxFpm("io", children=16, env=dict(env, BENCH_PG_PERSISTENT="1")))
    return servers


def workload_io(q, pg, variant):
    """Ten SQL statements per request over one connection per thread; constant arrival
    rates swept upward until each server saturates."""
    env = {"BENCH_PG_DSN": f"pgsql:host=127.0.0.1;port={PG_PORT};dbname=bench"}
    if variant == "pg_sleep":
        # 5 ms per statement, 50 ms per request: waiting dominates the ~2.5 ms of CPU a
        # request costs here, as in the TrueAsync setup (23 ms of SQL wait, 5 ms of CPU,
        # 16 cores). Sixteen blocking workers then top out near 16 / 0.053 = 300 req/s,
        # well below what the CPUs could serve.
        env["BENCH_PG_SLEEP"] = "0.005"
        rates = [50, 100] if q else [100, 200, 300, 400, 500, 600]
    else:
        rates = [50, 100] if q else [100, 200, 400, 600, 800, 1000, 1200]
    results = []
    for server in io_servers(env, q):
        pg.psql("TRUNCATE post_views; UPDATE posts SET views = 0")
        with Run(server, "/?user=7", is_io_json):
            idle = oha(server, "/", conns=1, requests=5 if q else 50)
            check(idle["bad"] == 0, f"{server.name}: failed requests {idle['codes']} {idle['errors']}")
            points, saturated = [], 0
            for rate in rates:
                r = oha(server, "/", conns=max(200, rate), rate=rate, duration=q.short if q else 8)
                r["offered"] = rate
                r["pg_rss_mb"] = rss_mb(pg.pids())
                points.append(r)
                log(f"    {rate:5d} req/s offered: {r['ok_rps']:7.0f} ok/s, p50 {r['p50_ms']:8.1f} ms, "
                    f"p99 {r['p99_ms']:8.1f} ms, failed {r['bad']}")
                check(r["ok"] > 0, f"{server.name}: nothing answered at {rate} req/s")
                if q:
                    check(r["bad"] == 0, f"{server.name}: {r['bad']} failed requests {r['codes']} {r['errors']}")
                if r["ok_rps"] < 0.85 * rate or r["p50_ms"] > 2000:
                    saturated += 1
                    if saturated >= 2:
                        break
        results.append({"server": server.name, "idle": idle, "points": points})
    return {"variant": variant, "results": results}


def workload_processes(q):
    """`processes 2` against `processes 1`: hello world and the Laravel page in worker mode
    (4 threads), the same rounds visiting each in turn; the hand-over to a child process
    is on every request; and `processes 2` with `cpu_affinity off`, the children where the
    kernel puts them. Then the memory an added child costs, once warm."""
    env = {"LARAVEL_CACHE_DIR": str(WORK / "laravel-processes")}
    # processes 1; processes 2 as configured by default (each child on a CPU of its own);
    # and processes 2 with the kernel placing every thread, for what the CPUs give.
    shapes = [(1, None, ""), (2, None, ""), (2, "off", ", cpu_affinity off")]
    pairs = [
        ("hello world", "/", is_hello, 64, [], [PhpWorker("hello", threads=4, worker="worker.php", processes=n, cpu_affinity=a,
                                                          label=f"hello, worker, 4 threads, processes {n}{label}")
                                                for n, a, label in shapes]),
        ("Laravel page", LARAVEL_PAGE, is_laravel_page, 32, None,
         [PhpWorker(LARAVEL_APP, threads=4, worker="public/worker.php", processes=n, cpu_affinity=a,
                    env=dict(env, LARAVEL_CACHE_DIR=str(WORK / f"laravel-processes-{n}{a or ''}")),
                    label=f"Laravel 8, worker, 4 threads, processes {n}{label}") for n, a, label in shapes]),
    ]
    out = []
    for what, path, probe, conns, extra, servers in pairs:
        runs = [Run(server, path, probe) for server in servers]
        for run in runs:
            run.__enter__()
        try:
            extras = {s.name: extra if extra is not None else ("-H", f"Cookie: {session_cookie(s)}") for s in servers}
            for server in servers:
                oha(server, path, conns=conns, duration=q.short if q else 3, extra=extras[server.name])
            peaks = {s.name: [] for s in servers}
            for i in range(1 if q else ROUNDS):
                for server in round_order(servers, i):
                    r = oha(server, path, conns=conns, duration=q.short if q else ROUND_SECONDS, extra=extras[server.name])
                    check_answered(r, server.name)
                    peaks[server.name].append(r)
            rows = []
            for server in servers:
                ordered = sorted(peaks[server.name], key=lambda r: r["ok_rps"])
                peak = ordered[len(ordered) // 2]
                # The children are the Caddy process's PHP processes (php-worker-child).
                children = [pid for pid in server.pids() if pid != server.proc.pid]
                shape = f"{server.processes}" + (f", cpu_affinity {server.cpu_affinity}" if server.cpu_affinity else "")
                rows.append({"server": server.name, "processes": shape, "rps": peak["ok_rps"],
                             "rounds": [r["ok_rps"] for r in ordered],
                             "cpu_us": peak["server_cpu_s"] / max(1, peak["ok"]) * 1e6,
                             "rss_mb": rss_mb(server.pids()), "pss_mb": pss_mb(server.pids()),
                             "mem_mb": union_mb(server.pids()),
                             "child_private_mb": sum(map(private_mb, children)) / len(children) if children else None})
                log(f"    {server.name}: median {peak['ok_rps']:,.0f} req/s, {rows[-1]['cpu_us']:,.0f} µs of CPU "
                    f"per request, {fmt_mb(rows[-1]['mem_mb'])} MB of memory, {rows[-1]['pss_mb']:.0f} MB PSS "
                    f"({rows[-1]['rss_mb']:.0f} MB RSS)")
            one, two, off = rows
            # What the added child costs: the servers' memory, each page counted once
            # (union_mb); the PSS's difference, where union_mb cannot read (not root).
            added = f"{two['mem_mb'] - one['mem_mb']:.0f} MB" if one["mem_mb"] and two["mem_mb"] else \
                f"{two['pss_mb'] - one['pss_mb']:.0f} MB (PSS)"
            log(f"  {what}: processes 2 at {100 * two['rps'] / one['rps']:.0f}% of processes 1 in throughput, "
                f"{100 * one['cpu_us'] / two['cpu_us']:.0f}% in CPU per request; "
                f"{added} for the added child, "
                f"each child {two['child_private_mb'] or 0:.0f} MB of its own (private memory)")
            log(f"  {what}, cpu_affinity off: processes 2 at {100 * off['rps'] / one['rps']:.0f}% of processes 1 in "
                f"throughput, {100 * one['cpu_us'] / off['cpu_us']:.0f}% in CPU per request")
            out.append({"workload": what, "rows": rows})
        finally:
            for run in runs:
                run.__exit__(None, None, None)
    return out


def workload_memory(q, peer=None):
    """RSS with 1, 4 and 16 worker threads; RSS drift over 200,000 requests. With a peer,
    FrankenPHP's RSS with 4 and 16 worker threads, measured the same way. The cost of an
    added thread, (RSS₁₆ − RSS₄) / 12, moves by a tenth of a megabyte from one start to the
    next (Go's heap, glibc's arenas): it is the median of five rounds that visit both
    servers in turn."""

    def rss_after_load(server):
        with Run(server, "/", is_hello):
            oha(server, "/", requests=2000 if not q else 200, conns=16)
            time.sleep(0.5)
            return rss_mb(server.pids())

    def per_thread(by_threads):
        return (by_threads[-1]["rss_mb"] - by_threads[-2]["rss_mb"]) / 12

    rounds, peer_rounds = [], []
    for i in range(1 if q else ROUNDS):
        counts = [1, 4, 16] if i == 0 else [4, 16]
        rounds.append([{"threads": n, "rss_mb": rss_after_load(PhpWorker("hello", threads=n, worker="worker.php"))}
                       for n in counts])
        if peer:
            peer_rounds.append([{"threads": n, "rss_mb": rss_after_load(FrankenPhp(peer, "hello", threads=n,
                                                                                   worker="worker.php"))}
                                for n in [4, 16]])
    # The reported round is the one whose per-thread cost is the median.
    ours = middle(rounds, key=per_thread)
    by_threads = rounds[0][:1] + ours[-2:]
    per_thread_mb = per_thread(ours)
    peer_rss = None
    if peer:
        peer_middle = middle(peer_rounds, key=per_thread)
        peer_rss = {"name": peer["name"], "by_threads": peer_middle, "per_thread_mb": per_thread(peer_middle),
                    "rounds": [per_thread(r) for r in peer_rounds]}
    drift = []
    server = PhpWorker("hello", threads=4, worker="worker.php")
    total = 5_000 if q else 200_000
    chunk = total // 10
    with Run(server, "/", is_hello):
        done = 0
        while done < total:
            r = oha(server, "/", requests=chunk, conns=64)
            check_answered(r, "drift run")
            done += chunk
            drift.append({"requests": done, "rss_mb": rss_mb(server.pids())})
    return {"by_threads": by_threads, "per_thread_mb": per_thread_mb, "rounds": [per_thread(r) for r in rounds],
            "drift": drift, "peer": peer_rss}


# ---- report ----------------------------------------------------------------------------

def store_ops(server, path, clients, seconds):
    """Runs batches of store operations from `clients` concurrent connections for
    `seconds`; returns operations per second: every batch's operations over the wall
    time of the run (each batch is large enough for HTTP to be a small part of it)."""
    import threading
    counts, stop = [], time.time() + seconds

    def client():
        ops = 0
        while time.time() < stop:
            status, body = http_get(server.port, path)
            check(status == 200, f"{path}: {status} {body[:200]!r}")
            ops += int(body.split()[0])
        counts.append(ops)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    started = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.time() - started)


def workload_stores(q):
    """get and put from PHP: the shared table, the thread-local store and a plain PHP
    array, with 1, 2 and 8 threads at once (8 classic threads serve them)."""
    server = PhpWorker("stores", threads=8, label="php_worker classic, 8 threads")
    rows = []
    with Run(server, "/ops.php?store=shared&op=get&n=10", lambda b: b.split()[0] == b"10"):
        for store in ["shared", "local", "array"]:
            for op in ["get", "put"]:
                row = {"store": store, "op": op}
                for clients in [1, 2, 8]:
                    path = f"/ops.php?store={store}&op={op}&n={2000 if q else 20000}"
                    row[str(clients)] = store_ops(server, path, clients, q.short if q else 3)
                log(f"    {store:6s} {op}: " + ", ".join(f"{c} threads {row[str(c)]:,.0f} ops/s" for c in [1, 2, 8]))
                rows.append(row)
    # The same operations through Laravel's cache (Debian's Laravel 8, the test app of
    # tests/e2e/laravel in worker mode): the php_worker store, and Laravel's array store
    # (per thread, what Octane uses under FrankenPHP).
    laravel = REPO / "tests" / "e2e" / "laravel"
    server = PhpWorker(laravel, threads=8, worker="public/worker.php", label="Laravel 8, php_worker worker, 8 threads",
                       env={"LARAVEL_CACHE_DIR": str(WORK / "laravel-cache")})
    with Run(server, "/bench?store=php_worker&op=get&n=10", lambda b: b.split()[0] == b"10"):
        for store in ["php_worker", "array"]:
            for op in ["get", "put"]:
                row = {"store": f"laravel-{store}", "op": op}
                for clients in [1, 2, 8]:
                    path = f"/bench?store={store}&op={op}&n={500 if q else 5000}"
                    row[str(clients)] = store_ops(server, path, clients, q.short if q else 3)
                log(f"    Laravel {store} {op}: " + ", ".join(f"{c} threads {row[str(c)]:,.0f} ops/s" for c in [1, 2, 8]))
                rows.append(row)
    return {"rows": rows}


def versions():
    def first_line(cmd):
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
            return (p.stdout or p.stderr).strip().splitlines()[0]
        except (OSError, IndexError, subprocess.TimeoutExpired):
            return "?"
    php_config = os.environ.get("PHP_CONFIG", "php-config")
    return {
        "php_worker PHP": first_line([php_config, "--version"]) + " (ZTS, embed, from Debian's source)",
        "php-fpm": first_line(["php-fpm8.2", "-v"]),
        "nginx": first_line(["nginx", "-v"]),
        "Caddy": first_line([str(CADDY), "version"]),
        "PostgreSQL": first_line([str(PG_BIN / "postgres"), "--version"]),
        "oha": first_line(["oha", "--version"]),
        "Go": first_line(["go", "version"]),
        "Rust": first_line(["rustc", "--version"]),
        **({"the baseline build's rows:": first_line([BASELINE, "version"])} if BASELINE else {}),
    }


def machine():
    model = "?"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    mem = int(Path("/proc/meminfo").read_text().split()[1]) // 1024
    return f"{os.cpu_count()} cores ({model}), {mem // 1024} GiB RAM, Linux {platform.release()}"


def fmt(x, digits=0):
    return f"{x:,.{digits}f}"


def fmt_mb(x):
    """Megabytes, or a dash when not measured."""
    return "–" if x is None else f"{x:.0f}"


def component_table(w, components, cpu_us):
    """The profile's shares by component, with what each costs per request."""
    w("| component | share | µs per request |")
    w("|---|---:|---:|")
    for share, name in components:
        w(f"| {name} | {share:.1f}% | {share * cpu_us / 100:.1f} |")
    w("")


def peer_lines(w, peer):
    """Which FrankenPHP the table's FrankenPHP rows ran, and how it was set up."""
    if peer:
        w(f"FrankenPHP rows: `{peer['version_line']}`, {peer['how']}; the same scripts and PHP threads as "
          "php_worker's rows (in worker mode num_threads 5, 4 of them the worker's), php_ini memory_limit 128M, "
          "OPcache, and its performance guide's `file_server off`, `match *` and GODEBUG=cgocheck=0.\n")


def write_laravel(w, laravel):
    w("## 2. A real framework: a Laravel 8 page\n")
    w("Debian's Laravel 8 (php-laravel-framework, no Composer), the test app of tests/e2e/laravel: `GET /page` "
      "goes through the `web` middleware group (encrypted cookies, a file session that counts the visits, "
      "CSRF, route bindings) and renders a Blade view of 20 items. One returning visitor: every request "
      "carries the cookies of a first visit, so each reads and writes one session file. Closed loop, 32 "
      "connections, 5 s, the median of five rounds that visit the servers in turn, in reverse order every other "
      "round. Classic mode and php-fpm "
      "boot the app on every request (OPcache on); worker mode boots it once per thread. php_worker turns on "
      "PHP's tracing JIT by default from PHP 8.4; the \"JIT off\" row turns it off (`php_ini opcache.jit disable`), "
      "which makes the same PHP as FrankenPHP's, which leaves it off. The run checks through `opcache_get_status()` "
      "that each php_worker row has the JIT it says.\n")
    rows = laravel["rows"]
    fpm = next((r for r in rows if "php-fpm" in r["server"]), None)
    w("| server | req/s (median) | rounds | × php-fpm | CPU µs per request | p50 ms | p99 ms | failed |")
    w("|---|---:|---|---:|---:|---:|---:|---:|")
    for r in rows:
        p = r["peak"]
        ratio = f"{p['ok_rps'] / fpm['peak']['ok_rps']:.1f}×" if fpm else "–"
        w(f"| {r['server']} | {fmt(p['ok_rps'])} | {' / '.join(fmt(x) for x in r['peaks'])} | {ratio} | "
          f"{r['cpu_us']:,.0f} | {p['p50_ms']:.1f} | {p['p99_ms']:.1f} | {p['bad']} |")
    w("")
    peer_lines(w, laravel.get("frankenphp"))
    prof = next((r["profile"] for r in rows if r.get("profile")), None)
    if prof:
        w("Where worker mode's CPU goes on this page (perf, by binary; PHP's build has no frame pointers, "
          "so this split is the reliable one):\n")
        w("| binary | share of samples |")
        w("|---|---:|")
        for share, name in prof.get("binaries", []):
            w(f"| {name} | {share:.1f}% |")
        w("")
        if prof.get("components"):
            cpu = next(r["cpu_us"] for r in rows if r.get("profile") is prof)
            w(f"And by component (first match on the call stack, as for hello world), with the share of the "
              f"{cpu:,.0f} µs of server CPU per request:\n")
            component_table(w, prof["components"], cpu)
        if prof.get("flame_graph"):
            w(f"Flame graph: [{prof['flame_file']}]({prof['flame_file']}).\n")


def peer_ratios(results):
    """php_worker's and FrankenPHP's requests per second where both ran, as (what, ours,
    theirs): hello world in worker and classic mode, the Laravel page in worker mode."""
    lines = []
    for workload, what, ours, theirs in (
            ("hello", "hello world in worker mode", "php_worker worker, 4 threads", r"FrankenPHP \S+ worker, 4 threads"),
            ("hello", "hello world in classic mode", "php_worker classic, 4 threads",
             r"FrankenPHP \S+ classic, 4 threads"),
            ("laravel", "the Laravel 8 page in worker mode", "Laravel 8, php_worker worker, 4 threads",
             r"Laravel 8, FrankenPHP \S+ worker, 4 threads"),
            ("laravel", "the same with php_worker's JIT off (the same PHP as FrankenPHP's)",
             "Laravel 8, php_worker worker, 4 threads, JIT off", r"Laravel 8, FrankenPHP \S+ worker, 4 threads")):
        rows = (results.get(workload) or {}).get("rows", [])
        a = next((r["peak"]["ok_rps"] for r in rows if r["server"] == ours), None)
        b = next((r["peak"]["ok_rps"] for r in rows if re.match(theirs, r["server"])), None)
        if a and b:
            lines.append((what, a, b))
    return lines


def write_classic(w, classic):
    """The section of the classic workload: classic mode against php-fpm, same PHP."""
    w(f"## 2b. Classic mode against php-fpm on the same PHP ({classic['php']})\n")
    v = classic.get("versions") or {}
    w(f"php_worker's PHP 8.2 build ({v.get('php_worker', '?')}, ZTS, embed SAPI, linked into the binary) against "
      f"Debian's php8.2-fpm ({v.get('php-fpm', '?')}, NTS) behind nginx, 4 PHP threads or children each, OPcache on in both, the same scripts. Hello world (64 connections), "
      "the Laravel 8 page of section 2 (32 connections, one returning visitor) and Debian 12's WordPress 6.1 with its "
      "default theme (8 connections): its front page, and a post with 20 comments, on a MariaDB the bench starts "
      "(its CPU is not counted: both servers query the same database). Closed loop, the median of five 5 s rounds "
      "that visit the two servers in turn. PHP / HTTP side: a sixth 5 s run under perf, its CPU per request split by "
      "thread name: PHP threads or php-fpm processes, and the rest (Caddy, Go and php_worker's handler; nginx).\n")
    w("| page | server | req/s (median) | rounds | × php-fpm | CPU µs per request | × php-fpm (CPU) | PHP side µs | HTTP side µs | p50 ms | p99 ms |")
    w("|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for app in classic["apps"]:
        _, fpm = classic_pair(app)
        for r in app["rows"]:
            split = r.get("split") or {}
            w(f"| {app['app']} | {r['server']} | {fmt(r['rps'])} | {' / '.join(fmt(x) for x in r['rounds'])} | "
              f"{r['rps'] / fpm['rps']:.2f}× | {fmt(r['cpu_us'])} | {fpm['cpu_us'] / r['cpu_us']:.2f}× | "
              f"{fmt(split.get('php_us', 0))} | {fmt(split.get('server_us', 0))} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} |")
    w("")
    zts = classic["zts"]
    w("ZTS alone: the same CPU-bound script (tests/bench/apps/cpu/cpu.php: calls, arrays, strings, objects; "
      "no OPcache) run by php_worker's PHP 8.2 (`caddy php-cli`) and Debian's NTS php8.2, seven interleaved runs:\n")
    w("| PHP | median ms | runs |")
    w("|---|---:|---|")
    for name, t in zts.items():
        w(f"| {name} | {t['median_ms']} | {' / '.join(str(x) for x in t['rounds'])} |")
    w("")


def write_results(results, elapsed):
    hello, boot, io, mem = results["hello"], results["boot"], results["io"], results["memory"]
    by = {r["server"]: r for r in hello["rows"]}
    worker = next(r for r in hello["rows"] if r["server"].startswith("php_worker worker"))
    fpm = next(r for r in hello["rows"] if r["server"].startswith("nginx"))
    ceiling = by["Caddy respond (ceiling)"]
    out = []
    w = out.append
    w("# php_worker benchmark results\n")
    split = results.get("cpu_split")
    if split:
        sharing = (f"The servers run on CPUs {','.join(map(str, split[0]))}; the load generator (oha), the bench's "
                   f"own clients and the databases on CPUs {','.join(map(str, split[1]))} (`--cpu-split`), on loopback; "
                   "the server CPU time per request (from /proc) is the fairest comparison.\n")
    else:
        sharing = ("Servers, the databases and the load generator (oha) share these cores on loopback: the generator's "
                   "CPU is not the servers', so absolute numbers are lower than on separate machines, and the server "
                   "CPU time per request (from /proc) is the fairest comparison.\n")
    w(f"Run on {datetime.date.today().isoformat()} with `tests/bench/run.sh` ({elapsed / 60:.1f} minutes). "
      f"Machine: {machine()}. " + sharing)
    w("Versions: " + "; ".join(f"{k} {v}" if not v.startswith(k) else v for k, v in versions().items()) + ".\n")
    w("![results](results.png)\n")

    w("## Headline\n")
    w(f"- Hello world, worker mode: **{worker['peak']['ok_rps'] / fpm['peak']['ok_rps']:.1f}×** nginx + php-fpm's "
      f"requests per second and **{100 * worker['peak']['ok_rps'] / ceiling['peak']['ok_rps']:.0f}%** of bare "
      "Caddy's.")
    bw = next(r for r in boot["rows"] if r["server"].startswith("php_worker worker"))
    bf = next(r for r in boot["rows"] if r["server"].startswith("nginx"))
    w(f"- 200 ms bootstrap, warm: **{bw['warm']['ok_rps'] / bf['warm']['ok_rps']:.0f}×** php-fpm "
      f"({fmt(bw['warm']['ok_rps'])} vs {fmt(bf['warm']['ok_rps'], 1)} req/s).")
    if results.get("laravel"):
        lr = results["laravel"]["rows"]
        lw = next((r for r in lr if r["server"] == "Laravel 8, php_worker worker, 4 threads"),
                  next(r for r in lr if r["server"].startswith("Laravel 8, php_worker worker, 4 threads")))
        lf = next(r for r in lr if "php-fpm" in r["server"])
        w(f"- A Laravel 8 page through the `web` middleware, worker mode: **{lw['peak']['ok_rps'] / lf['peak']['ok_rps']:.1f}×** "
          f"php-fpm ({fmt(lw['peak']['ok_rps'])} vs {fmt(lf['peak']['ok_rps'])} req/s).")
    if results.get("classic"):
        pairs = []
        for app in results["classic"]["apps"]:
            pw = next(r for r in app["rows"] if r["server"].startswith("php_worker"))
            fp = next(r for r in app["rows"] if "php-fpm" in r["server"])
            pairs.append(f"{app['app']} **{pw['rps'] / fp['rps']:.2f}×**")
        w(f"- Classic mode against php-fpm on the same PHP ({results['classic']['php']}), requests per second: "
          + "; ".join(pairs) + ".")
    ratios = peer_ratios(results)
    if ratios:
        peer = (hello.get("frankenphp") or (results.get("laravel") or {}).get("frankenphp"))["name"]
        w(f"- php_worker / {peer}, requests per second (same scripts and PHP threads): " +
          "; ".join(f"{what} **{a / b:.2f}×**" for what, a, b in ratios) + ".")
    w(f"- Memory: **{mem['per_thread_mb']:.1f} MB** of RSS per added worker thread.\n")

    w("## 1. Hello world\n")
    w("Maximum throughput: closed loop, 64 connections, 5 s, the median of five rounds that visit the "
      "servers in turn, in reverse order every other round (all rounds listed). Latency: constant arrival rate at half of each server's maximum, "
      "10 s, corrected for coordinated omission.\n")
    w("| server | max req/s (median) | rounds | at rate (req/s) | p50 ms | p90 ms | p99 ms | p99.9 ms | failed |")
    w("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    for r in hello["rows"]:
        s = r["steady"]
        rounds = " / ".join(fmt(x) for x in r.get("peaks", [r["peak"]["ok_rps"]]))
        w(f"| {r['server']} | {fmt(r['peak']['ok_rps'])} | {rounds} | {fmt(r['rate'])} | {s['p50_ms']:.2f} | "
          f"{s['p90_ms']:.2f} | {s['p99_ms']:.2f} | {s['p999_ms']:.2f} | {r['peak']['bad'] + s['bad']} |")
    w("")
    peer_lines(w, hello.get("frankenphp"))
    if hello.get("large"):
        w("Large responses: 1 MB, sent by PHP in one echo; closed loop, 8 connections, 5 s, the median of five "
          "rounds that visit the PHP servers in turn. By default php_worker copies the body out of the PHP "
          "thread into its response buffer, so the thread never waits on the client; with `response_buffer "
          "off` the PHP thread writes to the client itself (no copy, but a slow client holds the thread: for "
          "servers behind a buffering proxy). php-fpm's response goes through a socket to nginx, which "
          "buffers it too.\n")
        w("| server | 1 MB responses per second (median) | rounds |")
        w("|---|---:|---|")
        for r in hello["large"]:
            w(f"| {r['server']} | {fmt(r['rps'])} | {' / '.join(fmt(x) for x in r['rounds'])} |")
        w("")

    if results.get("laravel"):
        write_laravel(w, results["laravel"])
    if results.get("classic"):
        write_classic(w, results["classic"])

    w("## 3. Framework boot cost (200 ms bootstrap)\n")
    w("Cold: 20 requests at concurrency 1 right after start. Warm: requests at concurrency 20 (1,000 for worker "
      "mode; 300 where the bootstrap runs on every request). php_worker worker mode: 4 threads, max_requests 500.\n")
    w("| server | cold mean ms | cold p95 ms | warm req/s | warm mean ms | warm p95 ms |")
    w("|---|---:|---:|---:|---:|---:|")
    for r in boot["rows"]:
        c, h = r["cold"], r["warm"]
        w(f"| {r['server']} | {c['mean_ms']:.0f} | {c['p95_ms']:.0f} | {fmt(h['ok_rps'], 1)} | {h['mean_ms']:.1f} "
          f"| {h['p95_ms']:.1f} |")
    w("\nFor scale, the Octane/FrankenPHP talk measured php-fpm + nginx at 22 req/s (p95 896 ms) and Octane on "
      "FrankenPHP at 1,745 req/s (p95 15 ms) on this workload.\n")

    for variant in io:
        title = "real queries" if variant["variant"] == "queries" else "each statement waits 5 ms (pg_sleep)"
        w(f"## 4. I/O-bound: 10 SQL statements per request, {title}\n")
        w("PostgreSQL 15 on the same machine, seeded with 100 users and 1,000 posts; one connection per PHP "
          "thread or php-fpm child. Constant arrival rates, 8 s each, raised until the server saturates.\n")
        w("| server | idle p50 ms | offered req/s | achieved req/s | p50 ms | p95 ms | p99 ms | failed | "
          "PHP threads | server RSS MB |")
        w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for res in variant["results"]:
            for i, p in enumerate(res["points"]):
                idle = f"{res['idle']['p50_ms']:.1f}" if i == 0 else ""
                w(f"| {res['server'] if i == 0 else ''} | {idle} | {p['offered']} | {fmt(p['ok_rps'])} | "
                  f"{p['p50_ms']:.1f} | {p['p95_ms']:.1f} | {p['p99_ms']:.1f} | {p['bad']} | {php_threads(res, p)} | "
                  f"{p['rss_mb']:.0f} |")
        w("")
        w("PHP threads: the configured count, or for autoscaling the most threads seen during the rate's run "
          "(sampled every 100 ms from the admin API); php-fpm's children.\n")
        w(io_target(variant) + "\n")
        scaled = autoscaling_target(variant)
        if scaled:
            w(scaled["text"] + "\n")

    w("## 5. Memory\n")
    w("| worker threads | RSS MB |")
    w("|---:|---:|")
    for r in mem["by_threads"]:
        w(f"| {r['threads']} | {r['rss_mb']:.1f} |")
    def rounds(r):
        return f" (rounds: {' / '.join(f'{x:.2f}' for x in r['rounds'])})" if len(r.get("rounds", [])) > 1 else ""
    w(f"\nPer added worker thread: (RSS₁₆ − RSS₄) / 12 = **{mem['per_thread_mb']:.2f} MB**, the median of the "
      f"rounds{rounds(mem)}; the table shows that round.\n")
    if mem.get("peer"):
        p = mem["peer"]
        rss = " and ".join(f"{r['rss_mb']:.1f} MB with {r['threads']}" for r in p["by_threads"])
        w(f"{p['name']}, the same hello-world worker after the same load, in the same rounds: {rss} worker "
          f"threads, **{p['per_thread_mb']:.2f} MB** per added thread{rounds(p)}.\n")
    first, last = mem["drift"][0], mem["drift"][-1]
    w(f"Drift over {fmt(last['requests'])} requests (4 worker threads): {first['rss_mb']:.1f} MB after "
      f"{fmt(first['requests'])} requests, {last['rss_mb']:.1f} MB at the end "
      f"({100 * (last['rss_mb'] - first['rss_mb']) / first['rss_mb']:+.1f}%).\n")

    w("## 6. Stores\n")
    w("Operations per second from PHP: requests that each run 20,000 gets or puts of 100-byte strings over 100 "
      "keys, sent by 1, 2 and 8 clients at once to 8 classic threads for 3 s; all operations over the run's wall "
      "time (HTTP is a few percent of it). The machine has 2 cores, so 8 threads share them. The shared table is "
      "one per process (64 locks); the local store and the plain PHP array belong to one thread. The Laravel rows "
      "run the same loops through Laravel 8's cache repository (5,000 operations per request) in the test app of "
      "tests/e2e/laravel, served in worker mode.\n")
    w("| store | op | 1 thread | 2 threads | 8 threads |")
    w("|---|---|---:|---:|---:|")
    names = {"shared": "php_worker_shared_*", "local": "php_worker_local_*", "array": "plain PHP array",
             "laravel-php_worker": "Laravel Cache::store('php_worker') (the shared table)",
             "laravel-array": "Laravel Cache::store('array') (per thread)"}
    for r in results["stores"]["rows"]:
        w(f"| {names.get(r['store'], r['store'])} | {r['op']} | {fmt(r['1'])} | {fmt(r['2'])} | {fmt(r['8'])} |")
    w("")

    w("## 7. Cost per request\n")
    w("Server CPU time (user + system, every process of the server, from /proc) divided by the requests of the "
      "median maximum-throughput hello-world run; Go↔Rust crossings counted by php_worker "
      "(PHP_WORKER_COUNT_CROSSINGS=1) over the whole server run.\n")
    w("| server | CPU µs per request | Go→Rust calls per request | Rust→Go callbacks per request | "
      "load generator's share of CPU |")
    w("|---|---:|---:|---:|---:|")
    for c in hello["cost"]:
        cross = c.get("crossings")
        share = f"{100 * c['gen_share']:.0f}%"
        if cross and cross[0] is not None:
            n = c["requests_seen"]
            w(f"| {c['server']} | {c['cpu_us']:.1f} | {cross[0] / n:.2f} | {cross[1] / n:.2f} | {share} |")
        else:
            w(f"| {c['server']} | {c['cpu_us']:.1f} | – | – | {share} |")
    w("")

    prof = worker.get("profile") or {}
    if prof:
        w("## Profile: php_worker worker mode, hello world\n")
        w("`perf record` (software clock, call graphs) on the server during a closed-loop hello-world run. "
          "Share of the server's CPU samples by thread group:\n")
        w("| threads | share |")
        w("|---|---:|")
        for group, share in sorted(prof["threads"].items(), key=lambda kv: -kv[1]):
            w(f"| {group} | {share:.1f}% |")
        w(f"\nOf the PHP threads' share, {prof['php_switching']:.1f} points are samples in the kernel's context "
          "switch (a PHP thread sleeps on its queue between requests and is woken for each one; how much of that "
          "a VM's clock attributes there varies from run to run).\n")
        if prof.get("components"):
            cpu = next((c["cpu_us"] for c in results["hello"]["cost"] if c["server"] == worker["server"]), 0)
            w(f"By component (each sample goes to the first component, in this order, that a frame of its call "
              f"stack belongs to), with the share of the {cpu:.1f} µs of server CPU per request:\n")
            component_table(w, prof["components"], cpu)
            if prof.get("flame_graph"):
                w("Flame graph of the same samples: [profile.svg](profile.svg).\n")
        w("Functions with the largest inclusive share (children included):\n")
        w("| share | function |")
        w("|---:|---|")
        for share, sym in prof["top"][:25]:
            w(f"| {share:.1f}% | `{sym[:110]}` |")
        w("")

    if results.get("uploads"):
        w("## 8. Slow uploads\n")
        w("8 and 64 clients upload 2 MB each at 64 KB/s (uploads that end start again) to 4 PHP threads, while "
          "one client GETs hello world on a new connection every 50 ms for 10 s (10 s timeout): its latency, how "
          "many of its requests got no answer, and the server's peak RSS meanwhile. Then 1 MB uploads read whole "
          "by PHP (php://input), closed loop, 16 connections, 8 s. With `request_buffer off` PHP reads each body "
          "from the client as it comes, as it did before request buffering; nginx buffers bodies for php-fpm "
          "(memory, then a temporary file).\n")
        w("| server | idle p50 ms | 8 uploaders: p50 / p99 ms | unanswered | RSS MB | 64 uploaders: p50 / p99 ms | "
          "unanswered | RSS MB | 1 MB uploads/s |")
        w("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in results["uploads"]["rows"]:
            cells = []
            for n in (8, 64):
                p = r.get(f"slow{n}")
                cells += [f"{fmt_ms(p['p50_ms'])} / {fmt_ms(p['p99_ms'])}", str(p["unanswered"]), f"{p['rss_mb']:.0f}"] \
                    if p else ["–", "–", "–"]
            w(f"| {r['server']} | {r['idle']['p50_ms']:.1f} | " + " | ".join(cells) + f" | {r['upload']['ok_rps']:.0f} |")
        w("")

    if results.get("profiler"):
        w("## 9. The profiler's cost\n")
        w("Hello world and the Laravel page in worker mode, 32 connections, rounds alternating no profile and "
          "`GET /php_worker/profile` at its default rate (100 Hz, wall time) over the whole round.\n")
        w("| workload | req/s without (rounds) | req/s while profiling (rounds) | cost |")
        w("|---|---:|---:|---:|")
        for r in results["profiler"]["rows"]:
            w(f"| {r['server']} | {' · '.join(fmt(x) for x in r['plain'])} | {' · '.join(fmt(x) for x in r['profiled'])} "
              f"| {r['overhead_pct']:+.1f}% |")
        laravel = next((r for r in results["profiler"]["rows"] if r["server"].startswith("Laravel") and r.get("top")), None)
        if laravel:
            w("\nThe Laravel profile's top frames (`go tool pprof -top -cum`):\n")
            w("```")
            w("\n".join(laravel["top"]))
            w("```")
        w("")
    if results.get("processes"):
        w("## 10. processes 2 against processes 1\n")
        w("Worker mode, 4 PHP threads (2 per child with `processes 2`, each child on a CPU of its own unless "
          "`cpu_affinity off`), the same rounds visiting each in turn; "
          "CPU is the whole process tree's. Memory is the tree's once warm, every page its processes map counted "
          "once (the binary's code among them): the difference is what the added child costs (its own PHP, "
          "OPcache and APCu). The PSS beside it divides the pages both servers share between them, since they "
          "run at once, so it moves with the other server.\n")
        w("| workload | processes | req/s (median) | rounds | CPU µs per request | memory MB | PSS MB | vs processes 1 |")
        w("|---|---:|---:|---|---:|---:|---:|---:|")
        for pair in results["processes"]:
            one = pair["rows"][0]
            for r in pair["rows"]:
                ratio = f"{100 * r['rps'] / one['rps']:.0f}% req/s, {100 * one['cpu_us'] / r['cpu_us']:.0f}% CPU"
                w(f"| {pair['workload']} | {r['processes']} | {fmt(r['rps'])} | {' · '.join(fmt(x) for x in r['rounds'])} "
                  f"| {r['cpu_us']:.0f} | {fmt_mb(r.get('mem_mb'))} | {r['pss_mb']:.0f} | {ratio if r is not one else '–'} |")
        w("")
    w("## Targets\n")
    w(targets(results))
    w(analysis(results))
    (BENCH / "RESULTS.md").write_text("\n".join(out) + "\n")


def php_threads(res, point):
    """What the PHP threads column shows for a point of an I/O result."""
    if point.get("php_threads") is not None:
        return str(point["php_threads"])
    m = re.search(r"(\d+) (threads|children)", res["server"])
    return m.group(1) if m else "–"


def autoscaling_target(variant):
    """The autoscaling target: the autoscaled pool (4 threads, up to 64) keeps its P50
    within 2x of its idle latency at every rate where the fixed 32-thread pool does.
    Returns {ok, text}, or None when either was not measured."""
    results = {r["server"]: r for r in variant["results"]}
    scaled = next((r for r in variant["results"] if "autoscaling" in r["server"]), None)
    fixed = results.get("php_worker worker, 32 threads")
    if not scaled or not fixed:
        return None
    fixed_ok = [p["offered"] for p in fixed["points"] if p["p50_ms"] <= 2 * fixed["idle"]["p50_ms"]]
    if not fixed_ok:
        return None
    up_to = max(fixed_ok)
    points = {p["offered"]: p for p in scaled["points"]}
    idle = scaled["idle"]["p50_ms"]
    worst = max(((points[r]["p50_ms"] / idle, r) for r in fixed_ok if r in points), default=None)
    if worst is None or any(r not in points for r in fixed_ok):
        return {"ok": False, "text": f"Autoscaling target not measured at every rate up to {up_to} req/s."}
    ok = worst[0] <= 2
    reached = max((p.get("php_threads") or 0) for p in scaled["points"])
    return {"ok": ok, "ratio": worst[0], "up_to": up_to,
            "text": f"Autoscaling target {'met' if ok else 'missed'}: the fixed 32-thread pool keeps its P50 within "
                    f"2× of idle up to {up_to} req/s; at those rates {scaled['server']} stays within "
                    f"{worst[0]:.2f}× of its idle P50 ({idle:.1f} ms; worst at {worst[1]} req/s), with at most "
                    f"{reached} PHP threads."}


def io_comparison(variant):
    """Where php-fpm's P50 first passes 1 s, php_worker's best configuration at that rate:
    {rate, fpm_p50, server, p50, idle, ratio}, or a reason string when there is none."""
    fpm = next(r for r in variant["results"] if r["server"].startswith("nginx"))
    cross = next((p for p in fpm["points"] if p["p50_ms"] > 1000), None)
    if cross is None:
        return (f"php-fpm's P50 stayed under 1 s up to {fpm['points'][-1]['offered']} req/s: the target's "
                "comparison point was not reached on this machine.")
    rate = cross["offered"]
    best = None
    for res in variant["results"]:
        if res["server"].startswith("nginx"):
            continue
        p = next((p for p in res["points"] if p["offered"] == rate), None)
        if p and (best is None or p["p50_ms"] < best[1]["p50_ms"]):
            best = (res, p)
    if best is None:
        return f"php-fpm's P50 passed 1 s at {rate} req/s, where no php_worker configuration was measured."
    res, p = best
    return {"rate": rate, "fpm_p50": cross["p50_ms"], "server": res["server"], "p50": p["p50_ms"],
            "idle": res["idle"]["p50_ms"], "ratio": p["p50_ms"] / res["idle"]["p50_ms"]}


def io_target(variant):
    """The I/O target: where php-fpm's P50 passes 1 s, php_worker's best thread count keeps
    its P50 within 2x of its idle single-request latency."""
    c = io_comparison(variant)
    if isinstance(c, str):
        return c
    verdict = "met" if c["ratio"] <= 2 else "missed"
    return (f"Target {verdict}: php-fpm's P50 passed 1 s at {c['rate']} req/s ({c['fpm_p50']:.0f} ms); there "
            f"{c['server']} had P50 {c['p50']:.1f} ms, {c['ratio']:.1f}× its idle latency "
            f"({c['idle']:.1f} ms); the target is 2×.")


def targets(results):
    hello, boot, mem = results["hello"], results["boot"], results["memory"]
    rows = {r["server"]: r for r in hello["rows"]}
    worker = next(r for r in hello["rows"] if r["server"].startswith("php_worker worker"))
    fpm = next(r for r in hello["rows"] if r["server"].startswith("nginx"))
    ceiling = rows["Caddy respond (ceiling)"]
    bw = next(r for r in boot["rows"] if r["server"].startswith("php_worker worker"))
    bf = next(r for r in boot["rows"] if r["server"].startswith("nginx"))
    lines = ["| target | reached | |", "|---|---:|---|"]

    def row(name, value, ok):
        lines.append(f"| {name} | {value} | {'met' if ok else 'missed'} |")

    x = worker["peak"]["ok_rps"] / fpm["peak"]["ok_rps"]
    row("worker hello ≥ 3× php-fpm req/s", f"{x:.1f}×", x >= 3)
    y = worker["peak"]["ok_rps"] / ceiling["peak"]["ok_rps"]
    row("worker hello ≥ 80% of bare Caddy", f"{100 * y:.0f}%", y >= 0.8)
    classic = next(r for r in hello["rows"] if r["server"].startswith("php_worker classic"))
    yc = classic["peak"]["ok_rps"] / ceiling["peak"]["ok_rps"]
    row("classic hello ≥ 70% of bare Caddy", f"{100 * yc:.0f}%", yc >= 0.7)
    z = bw["warm"]["ok_rps"] / bf["warm"]["ok_rps"]
    row("boot-cost warm ≥ 50× php-fpm", f"{z:.0f}×", z >= 50)
    for variant in results["io"]:
        c = io_comparison(variant)
        name = f"I/O ({variant['variant']}): P50 ≤ 2× idle where php-fpm's P50 passes 1 s"
        if isinstance(c, str):
            lines.append(f"| {name} | comparison point not reached | – |")
        else:
            row(name, f"{c['ratio']:.1f}× at {c['rate']} req/s ({c['server']})", c["ratio"] <= 2)
    for variant in results["io"]:
        scaled = autoscaling_target(variant)
        if scaled and "ratio" in scaled:
            row(f"I/O ({variant['variant']}): autoscaled P50 ≤ 2× idle wherever the fixed 32-thread pool's is",
                f"{scaled['ratio']:.2f}× up to {scaled['up_to']} req/s", scaled["ok"])
    row("≤ 6 MB RSS per added worker thread", f"{mem['per_thread_mb']:.2f} MB", mem["per_thread_mb"] <= 6)
    # Against FrankenPHP, when it ran in the same rounds.
    ratios = {what: a / b for what, a, b in peer_ratios(results)}
    for what, name, goal in (
            ("the Laravel 8 page in worker mode", "Laravel worker ≥ 1.3× FrankenPHP (the binary we ship)", 1.3),
            ("the same with php_worker's JIT off (the same PHP as FrankenPHP's)",
             "Laravel worker ≥ 1.1× FrankenPHP on the same PHP (JIT off)", 1.1),
            ("hello world in worker mode", "worker hello ≥ 2× FrankenPHP", 2)):
        if what in ratios:
            row(name, f"{ratios[what]:.2f}×", ratios[what] >= goal)
    if ratios:
        row("worker hello ≥ 70% of bare Caddy", f"{100 * y:.0f}%", y >= 0.7)
    # Classic mode against php-fpm on the same PHP, and worker hello kept ahead of FrankenPHP
    # and close to bare Caddy while classic mode catches up.
    for app, rps, cpu, _ in classic_ratios(results):
        row(f"classic {app} ≥ 1.0× php-fpm on the same PHP (req/s, CPU per request)",
            f"{rps:.2f}×, {cpu:.2f}×", rps >= 1 and cpu >= 1)
    if "hello world in worker mode" in ratios:
        x = ratios["hello world in worker mode"]
        row("worker hello ≥ 1.6× FrankenPHP", f"{x:.2f}×", x >= 1.6)
        row("worker hello ≥ 65% of bare Caddy", f"{100 * y:.0f}%", y >= 0.65)
    if mem.get("peer"):
        theirs = mem["peer"]["per_thread_mb"]
        row("RSS per added worker thread ≤ FrankenPHP's", f"{mem['per_thread_mb']:.2f} MB against {theirs:.2f} MB",
            mem["per_thread_mb"] <= theirs)
    return "\n".join(lines) + "\n"


def classic_pair(app):
    """php_worker's row and php-fpm's of one page of the classic workload."""
    return (next(r for r in app["rows"] if r["server"].startswith("php_worker")),
            next(r for r in app["rows"] if "php-fpm" in r["server"]))


def classic_ratios(results):
    """(page, php_worker/php-fpm requests per second, php-fpm/php_worker CPU per request,
    its pair of rows) for the real apps of the classic workload (hello world has its own
    targets)."""
    out = []
    for app in (results.get("classic") or {}).get("apps", []):
        if app["app"] != "hello world":
            ours, fpm = classic_pair(app)
            out.append((app["app"], ours["rps"] / fpm["rps"], fpm["cpu_us"] / ours["cpu_us"], (ours, fpm)))
    return out


def classic_vs_fpm(results, out):
    """Why classic mode misses php-fpm on a real app, when it does: the CPU per request
    split into PHP threads and the HTTP side, and ZTS alone."""
    pages = classic_ratios(results)
    missed = [(app, rps, cpu) for app, rps, cpu, _ in pages if rps < 1 or cpu < 1]
    if not missed:
        return
    parts, php_gaps, shares = [], [], []
    for app, _, _, (ours, fpm) in pages:
        a, b = ours.get("split"), fpm.get("split")
        if a and b:
            parts.append(f"{app}: PHP side {a['php_us']:,.0f} against {b['php_us']:,.0f} µs, HTTP side "
                         f"{a['server_us']:,.0f} against {b['server_us']:,.0f} µs")
            php_gaps.append(100 * (a["php_us"] / b["php_us"] - 1))
            shares.append(100 * a["server_us"] / a["cpu_us"])
    text = ("**Classic mode vs php-fpm on the same PHP: "
            + "; ".join(f"{app} {rps:.2f}× (CPU {cpu:.2f}×)" for app, rps, cpu in missed) + ", short of 1.0×.** ")
    if parts:
        text += ("Per request, php_worker against nginx + php-fpm: " + "; ".join(parts) + f". PHP's own side differs by "
                 f"{min(php_gaps):+.0f} to {max(php_gaps):+.0f}% between the two servers in this run. ")
    zts = list((results["classic"].get("zts") or {}).values())
    if len(zts) == 2:
        z, n = zts[0]["median_ms"], zts[1]["median_ms"]
        text += (f"ZTS alone {'costs nothing measurable' if z <= n * 1.03 else f'costs {100 * (z / n - 1):.0f}%'} "
                 f"({z} against {n} ms on the CPU-bound script). ")
    text += ("What php_worker spends more on every page is its HTTP side, Caddy's net/http and Go's scheduler against "
             "nginx's event loop: Go parks and wakes its threads and polls the network several times per request "
             "(the counts, and the allocators measured, are in docs/performance.md). ")
    if shares:
        text += (f"The HTTP side is {min(shares):.0f} to {max(shares):.0f}% of php_worker's CPU on these pages, so "
                 "the ratios move a few per cent either side of 1.0× from run to run.")
    out.append(text)


def analysis(results):
    """Why a target is missed, from the numbers and the profile above."""
    hello = results["hello"]
    worker = next(r for r in hello["rows"] if r["server"].startswith("php_worker worker"))
    fpm = next(r for r in hello["rows"] if r["server"].startswith("nginx"))
    ceiling = next(r for r in hello["rows"] if r["server"].startswith("Caddy"))
    cost = {c["server"]: c["cpu_us"] for c in hello["cost"]}
    out = []
    ratio = worker["peak"]["ok_rps"] / fpm["peak"]["ok_rps"]
    if ratio < 3:
        w_us, f_us, c_us = cost[worker["server"]], cost[fpm["server"]], cost[ceiling["server"]]
        prof = worker.get("profile") or {}
        php_share = prof.get("threads", {}).get("PHP threads", 0)
        gen_w = next(c["gen_share"] for c in hello["cost"] if c["server"] == worker["server"])
        gen_f = next(c["gen_share"] for c in hello["cost"] if c["server"] == fpm["server"])
        out.append(
            f"**Worker hello world vs php-fpm: {ratio:.1f}×, {100 * (1 - ratio / 3):.0f}% short of 3×.** "
            f"Per request php_worker spends {w_us:.0f} µs of server CPU against php-fpm's {f_us:.0f} µs "
            f"({f_us / w_us:.1f}×). The ratio of requests per second is lower than the ratio of costs because "
            f"the load generator shares the 2 cores and takes more of them from a faster server "
            f"({100 * gen_w:.0f}% of the CPU against php-fpm {100 * gen_f:.0f}%). Of php_worker's {w_us:.0f} µs, "
            f"bare Caddy's HTTP path alone is {c_us:.0f}; the profile puts {php_share:.0f}% of the samples on "
            "the PHP threads (request set-up and reset, the script, waiting on the queue) and the rest in Go, "
            "mostly net/http and Caddy's handler chain. nginx + php-fpm is fast on this machine "
            f"({fmt(fpm['peak']['ok_rps'])} req/s on 2 cores, where published figures give 2,500–4,200 per "
            "core). Since then a small response no longer calls back into Go at all: it leaves the PHP "
            "thread as a completion, queued with an eventfd signal and taken in batches by one goroutine, "
            "because a callback from a PHP thread held one of Go's Ps after it returned (13 to 28% more "
            "requests per second in interleaved rounds). Tried and dropped: parking idle PHP threads on a "
            "futex of their own instead of the queue's spin-then-yield (8 to 15% fewer requests per second "
            "on 2 cores), and one extra Go P per PHP thread (within the noise). The next costs to cut are in "
            "the table above: Go's runtime, the Go handler, and the queue's wake-ups.")
    share = worker["peak"]["ok_rps"] / ceiling["peak"]["ok_rps"]
    if share < 0.8:
        out.append(
            f"**Worker hello world vs bare Caddy: {100 * share:.0f}%, short of 80%.** A request that php_worker "
            "serves takes Caddy's whole HTTP path plus the Go handler (resolving the script, writing the CGI "
            "variables) plus a hand-over to a PHP thread and back; PHP itself is a few percent of the profile. "
            "Throwaway builds measured each part's floor in interleaved rounds (see docs/architecture.md, "
            "\"The cost of a request\"): the Go handler answering without submitting reached 81% of bare "
            "Caddy in worker mode, and the hand-over to a PHP thread that answers without running PHP stayed "
            "at the level of real PHP requests (about 60%). So 80% needs the hand-over itself gone (PHP "
            "running on the request's own thread), which worker mode, whose script waits on its own thread's "
            "stack, cannot do.")
    laravel_vs_peer(results, out)
    hello_and_memory_vs_peer(results, out)
    classic_vs_fpm(results, out)
    for variant in results["io"]:
        verdict = io_target(variant)
        if "Target met" in verdict:
            continue
        if variant["variant"] == "queries":
            out.append(
                "**I/O with real queries.** Here every server is bound by the 2 cores, which PostgreSQL, PHP, "
                "the HTTP servers and the load generator share: beyond about 800 req/s none keeps up, whatever "
                "its thread count, so no configuration holds its idle latency where php-fpm's passes 1 s. "
                "php_worker sustains more requests per second than php-fpm at the same rates (see the table). "
                "The target's situation, threads waiting on the database, is the pg_sleep variant.")
        else:
            out.append(f"**I/O with waits.** {verdict}")
    return "\n\n".join(out) + ("\n" if out else "")


# The profile components that are php_worker's own code (the rest a Laravel request spends
# in PHP, the kernel, Go's runtime and net/http is FrankenPHP's to spend too).
OWN_COMPONENTS = ("PHP request start and end", "output: the PHP thread hands", "queue and wake-ups", "Go side of the completions",
                  "submit: Go to Rust", "php_worker's Go handler")


def laravel_vs_peer(results, out):
    """Why the Laravel page misses 1.3× FrankenPHP (1.1× on the same PHP), from the CPU per
    request and the share of php_worker's own code in the profile."""
    ratios = {what: a / b for what, a, b in peer_ratios(results)}
    shipped = ratios.get("the Laravel 8 page in worker mode")
    same = ratios.get("the same with php_worker's JIT off (the same PHP as FrankenPHP's)")
    if shipped is None or (shipped >= 1.3 and (same is None or same >= 1.1)):
        return
    rows = {r["server"]: r for r in results["laravel"]["rows"]}
    ours = rows.get("Laravel 8, php_worker worker, 4 threads")
    nojit = rows.get("Laravel 8, php_worker worker, 4 threads, JIT off")
    peer = next((r for r in rows.values() if re.match(r"Laravel 8, FrankenPHP \S+ worker", r["server"])), None)
    if not (ours and peer):
        return
    text = (f"**The Laravel page vs FrankenPHP: {shipped:.2f}× with the binary we ship (JIT on)"
            + (f", {same:.2f}× on the same PHP (JIT off)" if same is not None else "")
            + ", short of 1.3× and 1.1×.** "
            f"Per request php_worker spends {ours['cpu_us']:,.0f} µs of server CPU"
            + (f" ({nojit['cpu_us']:,.0f} µs with the JIT off)" if nojit else "")
            + f" against FrankenPHP's {peer['cpu_us']:,.0f} µs. ")
    components = (ours.get("profile") or {}).get("components") or []
    if components:
        own = sum(share for share, name in components if name.startswith(OWN_COMPONENTS))
        own_us = own / 100 * ours["cpu_us"]
        text += (f"In the profile of php_worker's worker mode (section 2), php_worker's own code (its Go handler, "
                 f"the hand-over both ways, request start and end) is {own:.1f}% of a request, {own_us:,.0f} µs; the "
                 "rest is PHP running Laravel, the kernel (the session file, file checks, sockets), Go's runtime and "
                 "net/http, which FrankenPHP spends as well. A server around PHP that cost nothing would be at most "
                 f"{ours['cpu_us'] / max(1.0, ours['cpu_us'] - own_us):.2f}× this one on the same PHP. ")
    text += ("What is left is making PHP itself faster: the tracing JIT, now on by default, is the gain of the "
             "shipped binary; profile-guided optimisation of PHP and of Go, a higher CPU baseline and the Rust "
             "core's LTO measured within the noise (docs/building.md, \"Build your own Caddy\" and \"How PHP is built\").")
    out.append(text)


def hello_and_memory_vs_peer(results, out):
    """Why hello world misses 2× FrankenPHP or RSS per thread misses FrankenPHP's, when
    they do: how far apart the rounds are, and the CPU per request."""
    hello = {r["server"]: r for r in results["hello"]["rows"]}
    ours = hello.get("php_worker worker, 4 threads")
    peer = next((r for name, r in hello.items() if re.match(r"FrankenPHP \S+ worker", name)), None)
    cost = {c["server"]: c["cpu_us"] for c in results["hello"].get("cost", [])}
    if ours and peer and ours["peak"]["ok_rps"] < 2 * peer["peak"]["ok_rps"]:
        lo = min(ours["peaks"]) / max(peer["peaks"])
        hi = max(ours["peaks"]) / min(peer["peaks"])
        text = (f"**Hello world vs FrankenPHP: {ours['peak']['ok_rps'] / peer['peak']['ok_rps']:.2f}×, short of 2×.** "
                f"Round by round the ratio of any of ours to any of FrankenPHP's spans {lo:.2f}× to {hi:.2f}×. ")
        ceiling = cost.get("Caddy respond (ceiling)")
        if ours["server"] in cost and peer["server"] in cost:
            o, f = cost[ours["server"]], cost[peer["server"]]
            text += f"Server CPU per request: {o:.0f} µs against FrankenPHP's {f:.0f} µs ({f / o:.2f}×). "
            if ceiling:
                text += (f"Both pay Caddy's HTTP path ({ceiling:.0f} µs for bare Caddy's `respond`), so what a PHP "
                         f"server adds is {o - ceiling:.0f} µs for php_worker against {f - ceiling:.0f} µs for "
                         f"FrankenPHP ({(f - ceiling) / max(1.0, o - ceiling):.1f}×): half FrankenPHP's CPU per request "
                         f"would leave php_worker {max(0.0, f / 2 - ceiling):.0f} µs. ")
        text += ("Its part is the Go handler and the hand-over to a PHP thread and back, split in the hello-world "
                 "profile after section 7 and measured part by part in docs/architecture.md.")
        out.append(text)
    mem = results["memory"]
    if mem.get("peer") and mem["per_thread_mb"] > mem["peer"]["per_thread_mb"]:
        p = mem["peer"]
        out.append(
            f"**RSS per added thread: {mem['per_thread_mb']:.2f} MB against FrankenPHP's {p['per_thread_mb']:.2f} MB.** "
            f"php_worker's rounds span {min(mem['rounds']):.2f} to {max(mem['rounds']):.2f} MB and FrankenPHP's "
            f"{min(p['rounds']):.2f} to {max(p['rounds']):.2f} MB. Most of an added thread is PHP's own: each thread "
            "copies PHP's function and class tables and builds its executor and compiler globals when it starts "
            "(ZTS), and keeps its request heap; FrankenPHP's threads do the same with the same PHP. php_worker's "
            "own part, the signal stack, is now a mapping whose pages become resident only when a signal uses them.")


def write_chart(results):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 5))
    hello = results["hello"]["rows"]
    names = [r["server"].replace(", ", "\n") for r in hello]
    axes[0].bar(names, [r["peak"]["ok_rps"] for r in hello], color=["#2a9d8f", "#8ab17d", "#e76f51", "#999999"])
    axes[0].set_title("Hello world: max req/s (64 connections)")
    axes[0].tick_params(axis="x", labelsize=7)
    boot = results["boot"]["rows"]
    axes[1].bar([r["server"].replace(", ", "\n") for r in boot], [r["warm"]["ok_rps"] for r in boot],
                color=["#2a9d8f", "#8ab17d", "#e76f51"])
    axes[1].set_yscale("log")
    axes[1].set_title("200 ms bootstrap, warm: req/s (log)")
    axes[1].tick_params(axis="x", labelsize=7)
    variant = results["io"][-1]
    for res in variant["results"]:
        axes[2].plot([p["offered"] for p in res["points"]], [p["p50_ms"] for p in res["points"]], marker="o",
                     label=res["server"])
    axes[2].set_yscale("log")
    axes[2].set_xlabel("offered req/s")
    axes[2].set_ylabel("p50 ms (log)")
    axes[2].set_title(f"I/O-bound ({variant['variant']}): p50 latency")
    axes[2].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(BENCH / "results.png", dpi=110)


# ---- main ------------------------------------------------------------------------------

WORKLOADS = ["hello", "laravel", "classic", "boot", "io", "memory", "stores", "uploads", "profiler", "processes"]


class Quick:
    """The smoke pass (--quick): every workload and every server, each load for `short`
    seconds, enough to check every answer; its numbers say nothing about speed."""
    short = 0.3


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a short smoke pass of every workload")
    parser.add_argument("--only", nargs="*", choices=WORKLOADS, help="run these workloads")
    parser.add_argument("--baseline", metavar="CADDY", type=lambda p: Path(p).resolve(),
                        help="also measure hello world and the Laravel page in worker mode (and the slow uploads) "
                             "with this other php_worker build, in the same rounds (with --only hello laravel: a "
                             "before/after comparison, or PHP 8.4 against 8.2)")
    parser.add_argument("--frankenphp", metavar="PATH",
                        help="also measure FrankenPHP in hello world (worker and classic) and the Laravel page "
                             "(worker), in the same rounds: PATH is a FrankenPHP binary, or a folder holding "
                             "build-frankenphp.sh and frankenphp-<version>.tar.gz, built once against ./caddy's PHP "
                             "and cached in ~/.cache/php_worker/peer/ (when that fails, the bench says why and goes on "
                             "without FrankenPHP)")
    parser.add_argument("--cpu-split", default="auto", metavar="auto|off|SERVER:GENERATOR",
                        help="run the servers on some CPUs and the load generator (and databases) on the others: "
                             "auto halves a machine of 8 CPUs or more; SERVER:GENERATOR names the lists (0-7:8-15)")
    parser.add_argument("--report-only", action="store_true",
                        help="rewrite RESULTS.md and the chart from the last full run's .work/results.json")
    args = parser.parse_args()
    global BASELINE
    BASELINE = args.baseline
    if args.report_only:
        results = json.loads((WORK / "results.json").read_text())
        write_results(results, results["elapsed_s"])
        write_chart(results)
        return 0
    q = Quick() if args.quick else None
    global QUICK
    QUICK = bool(q)
    check(CADDY.exists(), "./caddy is missing: run ./xcaddy.sh")
    global SERVER_CPUS
    split = cpu_split(args.cpu_split)
    if split:
        SERVER_CPUS = split[0]
        os.sched_setaffinity(0, split[1])  # oha, the bench's own clients and the databases inherit it
        log(f"CPU split: servers on CPUs {','.join(map(str, split[0]))}, load generator on {','.join(map(str, split[1]))}")
    WORK.mkdir(parents=True, exist_ok=True)
    selected = args.only or WORKLOADS
    peer = None
    if args.frankenphp and {"hello", "laravel", "memory"} & set(selected):
        log("== FrankenPHP")
        peer = frankenphp_peer(args.frankenphp)
    started = time.time()
    results = {}
    if "hello" in selected:
        log("== hello world")
        results["hello"] = workload_hello(q, args.baseline, peer)
        if args.baseline or peer:
            shown = ("php_worker", "FrankenPHP") if peer else ("php_worker worker",)
            for row in results["hello"]["rows"]:
                if row["server"].startswith(shown):
                    log(f"  {row['server']}: median {row['peak']['ok_rps']:,.0f} req/s, rounds "
                        f"{[round(x) for x in row['peaks']]}, p50 {row['steady']['p50_ms']:.2f} ms / p99 "
                        f"{row['steady']['p99_ms']:.2f} ms at {row['rate']} req/s")
            for row in results["hello"]["large"] if args.baseline else []:
                log(f"  1 MB responses, {row['server']}: median {row['rps']:,.0f} req/s, rounds "
                    f"{[round(x) for x in row['rounds']]}")
    if "laravel" in selected:
        log("== Laravel page")
        results["laravel"] = workload_laravel(q, args.baseline, peer)
    if "classic" in selected:
        log("== classic mode against php-fpm on the same PHP")
        results["classic"] = workload_classic(q)
    if peer:
        for what, a, b in peer_ratios(results):
            log(f"  php_worker / FrankenPHP, {what}: {a / b:.2f}× ({a:,.0f} vs {b:,.0f} req/s)")
    if "boot" in selected:
        log("== framework boot cost")
        results["boot"] = workload_boot(q)
    if "io" in selected:
        log("== I/O-bound")
        pg = Postgres()
        pg.start()
        try:
            results["io"] = [workload_io(q, pg, "queries"), workload_io(q, pg, "pg_sleep")]
        finally:
            pg.stop()
    if "memory" in selected:
        log("== memory")
        results["memory"] = workload_memory(q, peer)
        if results["memory"]["peer"]:
            log(f"  RSS per added worker thread: php_worker {results['memory']['per_thread_mb']:.2f} MB, "
                f"FrankenPHP {results['memory']['peer']['per_thread_mb']:.2f} MB")
    if "stores" in selected:
        log("== stores")
        results["stores"] = workload_stores(q)
    if "uploads" in selected:
        log("== slow uploads")
        results["uploads"] = workload_uploads(q, args.baseline)
    if "profiler" in selected:
        log("== the profiler's cost")
        results["profiler"] = workload_profiler(q)
    if "processes" in selected:
        log("== processes 2 against 1")
        results["processes"] = workload_processes(q)
    elapsed = time.time() - started
    results["elapsed_s"] = elapsed
    results["cpu_split"] = split
    # A quick pass keeps its own file: --report-only documents the last full run.
    if q:
        (WORK / "results-quick.json").write_text(json.dumps(results, indent=1, default=str))
        log(f"quick benchmark pass: every server answered correctly ({elapsed:.0f} s)")
        return 0
    # A partial run replaces its workloads in the last full run's results.
    path = WORK / "results.json"
    if set(selected) != set(WORKLOADS) and path.exists():
        results = dict(json.loads(path.read_text()), **{k: v for k, v in results.items() if k != "elapsed_s"})
    path.write_text(json.dumps(results, indent=1, default=str))
    if all(w in results for w in WORKLOADS):
        write_results(results, results["elapsed_s"])
        write_chart(results)
        log(f"wrote {BENCH / 'RESULTS.md'} and results.png ({elapsed / 60:.1f} minutes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
