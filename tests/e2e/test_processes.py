"""`processes N`: PHP in supervised child processes (docs/processes.md). A crashing
extension (crashext/, built with this PHP's phpize) ends one child: only the requests
running there are answered 502, the others are served, the child is replaced."""
import ctypes
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import CADDY, REPO, WORK, eventually, free_port, http_get, make_caddyfile, php_version

HERE = Path(__file__).resolve().parent
APP = HERE / "processes"
DIED = "a PHP process died; the requests it ran were answered 502, and it is replaced"
LOST = "the PHP process running this request died; answering 502"


@pytest.fixture(scope="session")
def crashext():
    """pw_crash.so, built with the phpize of the PHP the binary under test embeds (8.4's,
    or 8.2's when tests/run.sh runs this file on its PHP 8.2 build)."""
    version = "%d.%d" % php_version()
    php_config = os.environ.get("PHP_CONFIG")
    if not php_config or not subprocess.run([php_config, "--version"], capture_output=True, text=True,
                                            check=True).stdout.startswith(version + "."):
        env = {k: v for k, v in os.environ.items() if k not in ("PHP_CONFIG", "PHP_PREFIX", "PHP")}
        php_config = subprocess.run([str(REPO / "scripts" / "build-php.sh")], capture_output=True, text=True,
                                    check=True, env=dict(env, PHP_VERSION=version)).stdout.strip()
    prefix = subprocess.run([php_config, "--prefix"], capture_output=True, text=True, check=True).stdout.strip()
    build = WORK / "crashext"
    shutil.rmtree(build, ignore_errors=True)
    shutil.copytree(HERE / "crashext", build)
    for step in ([f"{prefix}/bin/phpize"], ["./configure", f"--with-php-config={php_config}"], ["make", "-j2"]):
        p = subprocess.run(step, cwd=build, capture_output=True, text=True)
        assert p.returncode == 0, f"{step}: {p.stdout[-2000:]}{p.stderr[-2000:]}"
    return build / "modules" / "pw_crash.so"


def caddyfile(crashext, processes=2, threads=4, workers=2, extra="", worker_extra=""):
    def make(port, admin):
        return make_caddyfile(port, admin, app=APP / "public", threads=threads, global_extra=f"""\t\tprocesses {processes}
		php_ini extension {crashext}
{extra}""", site_extra=f"""\t\tworker {{
			file {APP}/worker.php
			num {workers}
			match /w/*
{worker_extra}		}}""")
    return make


class Load:
    """Clients sending requests in a loop until stopped; each answer is kept with its
    time, status and the pid of the process that ran it."""

    def __init__(self, srv, paths, resend=False):
        # resend: a GET whose connection a config load closed unanswered goes again, as
        # clients do (docs/reloads-and-admin-api.md); for loads, never for crashes.
        self.srv, self.answers, self.stopped, self.resend = srv, [], threading.Event(), resend
        self.threads = [threading.Thread(target=self.loop, args=(p,), daemon=True) for p in paths]
        for t in self.threads:
            t.start()

    def loop(self, path):
        while not self.stopped.is_set():
            try:
                r = self.srv.get(path, timeout=30, resend=self.resend)
                self.answers.append((time.monotonic(), r.status, pid_of(r.text)))
            except OSError as e:
                self.answers.append((time.monotonic(), repr(e), None))

    def stop(self):
        self.stopped.set()
        for t in self.threads:
            t.join(60)
        return self.answers


class ReadyProbe:
    """/php_worker/ready, asked every 50 ms until stopped, as a load balancer does; keeps
    each status."""

    def __init__(self, srv):
        self.srv, self.statuses, self.stopped = srv, [], threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self):
        while not self.stopped.is_set():
            try:
                self.statuses.append(self.srv.admin("GET", "/php_worker/ready")[0])
            except OSError as e:
                self.statuses.append(repr(e))
            time.sleep(0.05)

    def stop(self):
        self.stopped.set()
        self.thread.join(10)
        return self.statuses


def pid_of(text):
    return int(text[4:].split()[0]) if text.startswith("pid=") else None


def http_ok(port, path):
    try:
        return http_get(port, path, timeout=5)[0] == 200
    except OSError:
        return False


def processes(srv):
    return srv.threads()["processes"]


def running_pids(srv):
    return {p["pid"] for p in processes(srv) if p["state"] == "running"}


def in_background(srv, path, into, key=None):
    def run():
        try:
            r = srv.get(path, timeout=60)
            into[key or path] = (r.status, pid_of(r.text))
        except OSError as e:
            into[key or path] = (repr(e), None)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def busy_in(srv, process):
    return [t for t in srv.threads()["threads"] if t.get("process") == process and t["state"] == "busy"]


def test_threads_divide_among_processes_and_both_serve(start_server, crashext):
    """num_threads 5 and a worker's num 3 with processes 2: 5 threads in all, as in one
    process; the worker's 3 divide 2 and 1, the 2 classic threads 1 and 1.
    /php_worker/threads says which child runs each thread. Requests are served by both
    children, in both modes."""
    srv = start_server("processes-divide", caddyfile(crashext, threads=5, workers=3))
    snapshot = srv.threads()
    procs = snapshot["processes"]
    assert [(p["process"], p["state"]) for p in procs] == [(0, "running"), (1, "running")], procs
    pids = {p["pid"] for p in procs}
    assert len(pids) == 2 and srv.proc.pid not in pids
    by = {}
    for t in snapshot["threads"]:
        kind = "classic" if t["pool"] == 0 else "worker"
        by[(t["process"], kind)] = by.get((t["process"], kind), 0) + 1
    assert by == {(0, "classic"): 1, (1, "classic"): 1, (0, "worker"): 2, (1, "worker"): 1}, by
    for path in ("/sleep.php?ms=300", "/w/sleep?ms=300"):
        answers = {}
        started = [in_background(srv, path, answers, key=i) for i in range(4)]
        for t in started:
            t.join(30)
        assert [a[0] for a in answers.values()] == [200] * 4, answers
        assert {a[1] for a in answers.values()} == pids, f"{path}: {answers}"
    assert srv.stop() == 0


@pytest.mark.parametrize("mode,how", [("classic", "segv"), ("classic", "abort"), ("classic", "stack"),
                                      ("classic", "exit"), ("worker", "segv"), ("worker", "abort")])
def test_a_crash_costs_only_the_requests_of_its_process(start_server, crashext, mode, how):
    """One classic and one worker thread per child; in each child one of them busy: a crash in one (a fault, an abort, a C stack
    overflow, an exit from C). The crashing request gets a 502 and a log line naming it;
    the requests queued behind it in that child, which no thread had taken, are served by
    the other; the other child's own request is served. The log line of the death says
    how it ended and names the PHP code, from the crash trail; the child is replaced."""
    srv = start_server(f"processes-crash-{mode}-{how}", caddyfile(crashext, threads=4, workers=2))
    before = running_pids(srv)
    prefix = "/w/" if mode == "worker" else "/"
    crash = f"{prefix}crash{'' if mode == 'worker' else '.php'}?ms=600&how={how}"
    answers = {}
    jobs = [in_background(srv, crash, answers, key="crash")]
    assert eventually(lambda: sum(len(busy_in(srv, p)) for p in (0, 1)) == 1)
    jobs.append(in_background(srv, f"{prefix}sleep{'' if mode == 'worker' else '.php'}?ms=1200", answers, key="slow"))
    assert eventually(lambda: all(len(busy_in(srv, p)) == 1 for p in (0, 1)))
    crashing = next(p for p in (0, 1) if "crash" in busy_in(srv, p)[0]["uri"])
    # Both children busy: each takes two more, which wait in its queue.
    for i in range(4):
        jobs.append(in_background(srv, f"{prefix}sleep{'' if mode == 'worker' else '.php'}?ms=10", answers, key=f"queued{i}"))
    assert eventually(lambda: sum(p["requests"] for p in processes(srv)) == 6)
    # Least-loaded routing splits them 2:2 unless two arrive at once (then 3:1): the
    # crashing child's own count says how many it held.
    held = next(p["requests"] for p in processes(srv) if p["process"] == crashing)
    for t in jobs:
        t.join(60)
    assert answers.pop("crash") == (502, None)
    assert all(status == 200 for status, _ in answers.values()), answers
    survivor = {pid for _, pid in answers.values()}
    assert len(survivor) == 1 and survivor < before, answers
    died = srv.wait_log(lambda e: e.get("msg") == DIED)
    assert len(died) == 1, srv.log_text()[-3000:]
    d = died[0]
    assert d["process"] == crashing and d["requests_lost"] == 1 and d["requests_moved"] == held - 1, (d, held)
    want = {"segv": ("killed by SIGSEGV", 139), "abort": ("killed by SIGABRT", 134), "stack": ("killed by SIGSEGV", 139),
            "exit": ("exit status 3", 3)}[how]
    assert (d["how"], d["status"]) == want, d
    if how != "exit":  # _exit() leaves no trail: no signal
        assert d["uri"] == crash and d["php_file"].endswith("crash.php" if mode == "classic" else "worker.php"), d
        assert isinstance(d["php_line"], int) and d["php_line"] > 0, d
    lost = [e for e in srv.log_entries() if e.get("msg") == LOST]
    assert [e["uri"] for e in lost] == [crash], lost
    # Replaced: two children run again, one of them new, and both serve.
    assert eventually(lambda: len(running_pids(srv)) == 2 and running_pids(srv) != before, timeout=15)
    assert srv.threads()["process_crashes"] == 1
    assert all(http_get(srv.port, "/sleep.php")[0] == 200 for _ in range(10))
    assert srv.stop() == 0


def test_sigkill_of_a_process_under_load_loses_only_its_running_requests(start_server, crashext):
    """Four clients in a loop, classic and worker requests, while one child gets SIGKILL
    from outside (as the OOM killer sends): every answer is a 200 but those the log
    counts as lost with the dead child, and answers never stop while it is replaced."""
    srv = start_server("processes-sigkill", caddyfile(crashext, threads=8, workers=4))
    victim = processes(srv)[0]["pid"]
    load = Load(srv, ["/sleep.php?ms=20", "/w/sleep?ms=20", "/sleep.php?ms=5", "/w/sleep?ms=5"])
    time.sleep(1.5)
    counted = served_counters(srv)
    killed = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    assert eventually(lambda: len(running_pids(srv)) == 2 and victim not in running_pids(srv), timeout=15)
    # The dead child's counts stay in the counters: Prometheus would read a drop as a reset.
    assert counted and all(served_counters(srv)[k] >= v for k, v in counted.items()), (counted, served_counters(srv))
    time.sleep(1.0)
    answers = load.stop()
    died = srv.wait_log(lambda e: e.get("msg") == DIED)
    assert len(died) == 1 and died[0]["how"] == "killed by SIGKILL" and died[0]["status"] == 137, died
    bad = [a for a in answers if a[1] != 200]
    assert all(a[1] == 502 for a in bad), bad
    assert len(bad) == died[0]["requests_lost"], (bad, died)
    assert len([e for e in srv.log_entries() if e.get("msg") == LOST]) == len(bad)
    # No gap: answers kept coming right after the kill, from the other child.
    after = sorted(t for t, status, _ in answers if status == 200 and t > killed)
    assert after and after[0] - killed < 0.5, after[:3]
    assert max(b - a for a, b in zip(after, after[1:])) < 0.5
    assert len({pid for t, status, pid in answers if status == 200 and t < killed}) == 2
    assert srv.stop() == 0


def served_counters(srv):
    """The counters of requests served, from /metrics: name{labels} -> value."""
    _, text = srv.admin("GET", "/metrics")
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line.startswith(("php_worker_classic_requests_total", "php_worker_worker_requests_total"))}


def test_a_crash_loop_backs_off_while_the_other_process_serves(start_server, crashext):
    """A child killed each time it comes back: the pause before its replacement doubles
    each time, and the other child serves every request meanwhile."""
    srv = start_server("processes-loop", caddyfile(crashext, threads=4, workers=2))
    load = Load(srv, ["/sleep.php?ms=2"])
    pauses = []
    for round in range(4):
        assert eventually(lambda: len(running_pids(srv)) == 2, timeout=20)
        victim = next(p["pid"] for p in processes(srv) if p["process"] == 0)
        os.kill(victim, signal.SIGKILL)
        died = srv.wait_log(lambda e: e.get("msg") == DIED, count=round + 1, timeout=10)
        assert len(died) == round + 1, srv.log_text()[-3000:]
        pauses.append(died[round]["restart_in"])
    answers = load.stop()
    assert pauses == sorted(pauses) and pauses[-1] >= 4 * pauses[0], pauses
    lost = sum(d["requests_lost"] for d in srv.wait_log(lambda e: e.get("msg") == DIED, count=4))
    assert sum(1 for a in answers if a[1] != 200) == lost and all(a[1] in (200, 502) for a in answers)
    assert sum(1 for a in answers if a[1] == 200) > 50
    assert srv.threads()["process_crashes"] == 4
    status, metrics = srv.admin("GET", "/metrics")
    assert "php_worker_process_crashes_total 4" in metrics, metrics[-500:]
    assert srv.stop() == 0


def test_a_background_worker_runs_once_in_all_processes_and_its_crash_is_contained(start_server, crashext, tmp_path):
    """A background worker of num 1 runs in one child, not in each. When it crashes its
    process, only the HTTP requests running there are lost, the other child serves, and
    the new child runs the background worker again."""
    marker = tmp_path / "background.txt"
    extra = f"""\t\tbackground {{
			file {APP}/background.php
			env MARKER {marker}
			env CRASH_AFTER_MS 1500
		}}"""
    srv = start_server("processes-background", caddyfile(crashext, threads=4, workers=2, extra=extra))
    snapshot = srv.threads()
    background = [p["id"] for p in snapshot["pools"] if p["kind"] == "background"]
    assert len(background) == 1, snapshot["pools"]
    assert len([t for t in snapshot["threads"] if t["pool"] == background[0]]) == 1, snapshot["threads"]
    load = Load(srv, ["/sleep.php?ms=5", "/w/sleep?ms=5"])
    died = srv.wait_log(lambda e: e.get("msg") == DIED, count=2, timeout=30)
    answers = load.stop()
    assert len(died) >= 2, srv.log_text()[-3000:]
    assert died[0]["php_file"].endswith("background.php"), died[0]
    # The HTTP requests the crashed child was running at that moment are the only losses.
    assert all(a[1] in (200, 502) for a in answers), [a for a in answers if a[1] not in (200, 502)]
    assert sum(1 for a in answers if a[1] == 502) == sum(d["requests_lost"] for d in died), died
    pids = [int(x) for x in marker.read_text().split()]
    assert len(pids) >= 2 and len(set(pids)) == len(pids), pids  # one copy at a time, in a new process each time
    srv.stop()


def test_a_crash_in_a_task_thread_costs_the_request_that_waited_for_it(start_server, crashext):
    """Task workers run in every child, and a request's tasks run in its own child. A
    task that crashes its process: the request waiting for it gets a 502, the other
    child serves on, and the replacement runs tasks again."""
    extra = f"""\t\ttask_worker {{
			file {APP}/tasks.php
			name tasks
			num 2
		}}"""
    srv = start_server("processes-task", caddyfile(crashext, threads=6, workers=2, extra=extra))
    r = srv.get("/task.php?payload=hello")
    assert r.status == 200 and r.text.split()[1] == f"task={pid_of(r.text)}", r.text
    load = Load(srv, ["/sleep.php?ms=5", "/w/sleep?ms=5"])
    time.sleep(0.5)
    assert srv.get("/task.php?payload=crash").status == 502
    died = srv.wait_log(lambda e: e.get("msg") == DIED)
    assert len(died) == 1 and died[0]["php_function"] == "pw_crash" and died[0]["php_file"].endswith("tasks.php"), died
    assert eventually(lambda: len(running_pids(srv)) == 2, timeout=15)
    time.sleep(0.3)
    answers = load.stop()
    assert all(a[1] in (200, 502) for a in answers)
    assert sum(1 for a in answers if a[1] == 502) == died[0]["requests_lost"] - 1, (died, answers[-5:])
    for _ in range(6):
        r = srv.get("/task.php?payload=hello")
        assert r.status == 200 and pid_of(r.text) in running_pids(srv), r.text
    assert srv.stop() == 0


def test_a_crash_during_a_rolling_reload(start_server, crashext):
    """A child killed while a php_ini reload replaces the children one at a time: the
    reload still ends with every slot running a child on the new settings, and the only
    requests lost are those the log counts with the death."""
    srv = start_server("processes-roll-crash", caddyfile(crashext))
    before = processes(srv)
    # resend: the reload may close a connection the old listener accepted, unanswered
    # (a crash answers 502; it closes no connection here, as no response streams).
    load = Load(srv, ["/sleep.php?ms=5", "/w/sleep?ms=5", "/sleep.php?ms=30"], resend=True)
    time.sleep(0.5)
    text = caddyfile(crashext, extra="\t\tphp_ini max_input_vars 4321")(srv.port, srv.admin_port)
    result = {}

    def reload():
        result["load"] = srv.admin("POST", "/load", body=text.encode(), headers={"Content-Type": "text/caddyfile"})
    reloading = threading.Thread(target=reload, daemon=True)
    reloading.start()
    # Once the first slot runs its new child, kill the second slot's old one.
    old = {p["pid"] for p in before}
    assert eventually(lambda: bool(running_pids(srv) - old), timeout=30)
    os.kill(before[1]["pid"], signal.SIGKILL)
    reloading.join(60)
    assert result["load"][0] == 200, result
    assert eventually(lambda: len(running_pids(srv)) == 2 and not running_pids(srv) & old, timeout=30)
    time.sleep(0.5)
    answers = load.stop()
    died = [e for e in srv.log_entries() if e.get("msg") == DIED]
    assert all(a[1] in (200, 502) for a in answers), [a for a in answers if a[1] not in (200, 502)][:5]
    assert sum(1 for a in answers if a[1] == 502) == sum(d["requests_lost"] for d in died), (died, answers[-5:])
    seen = {}
    for _ in range(20):
        r = srv.get("/ini.php?key=max_input_vars").json()
        seen[r["pid"]] = r["value"]
    assert seen == {pid: "4321" for pid in running_pids(srv)}, seen
    assert srv.stop() == 0


def test_debugged_requests_run_in_a_process_of_their_own(start_server, crashext):
    """A debug trigger makes a worker request run in a request of its own; with processes
    above 1 it runs in a child of its own, started at the first such request: a debugger
    or profiler extension that crashes takes only the debugged request with it."""
    srv = start_server("processes-debug", caddyfile(crashext, extra="\t\tdebug_triggers PW_DEBUG"))
    children = running_pids(srv)
    r = srv.get("/w/sleep?PW_DEBUG=1")
    assert r.status == 200, r.text
    debug_pid = pid_of(r.text)
    assert debug_pid not in children
    procs = processes(srv)
    assert [(p["process"], p["pid"]) for p in procs][-1] == (2, debug_pid), procs
    assert srv.get("/w/sleep?PW_DEBUG=1").text == r.text, "the same child serves the next one"
    load = Load(srv, ["/sleep.php?ms=5", "/w/sleep?ms=5"])
    assert srv.get("/w/crash?PW_DEBUG=1&how=segv").status == 502
    died = srv.wait_log(lambda e: e.get("msg", "").startswith("the PHP process of debugged requests died"))
    assert len(died) == 1 and died[0]["requests_lost"] == 1 and died[0]["php_file"].endswith("worker.php"), died
    r = srv.get("/w/sleep?PW_DEBUG=1")
    assert r.status == 200 and pid_of(r.text) not in children | {debug_pid}, r.text
    answers = load.stop()
    assert answers and all(a[1] == 200 for a in answers), [a for a in answers if a[1] != 200][:5]
    assert {p["pid"] for p in processes(srv)[:2]} == children, "the other children live on"
    assert not [e for e in srv.log_entries() if e.get("msg") == DIED]
    # Debugged requests run side by side, on the child's classic threads.
    side = {}
    jobs = [in_background(srv, "/w/sleep?ms=1500&PW_DEBUG=1", side, key=f"side{i}") for i in range(2)]
    assert eventually(lambda: len(busy_in(srv, 2)) == 2, timeout=5), processes(srv)
    for job in jobs:
        job.join(10)
    assert [side[f"side{i}"][0] for i in range(2)] == [200, 200], side
    # A debugged request running when the server stops finishes, as the others do.
    debugged = {}
    job = in_background(srv, "/w/sleep?ms=1500&PW_DEBUG=1", debugged, key="debugged")
    assert eventually(lambda: processes(srv)[-1]["requests"] == 1)
    assert srv.stop() == 0
    job.join(10)
    assert debugged["debugged"][0] == 200, debugged


def test_max_wait_time_withdraws_queued_requests_from_a_process(start_server, crashext):
    """max_wait_time with processes 2: a request queued in a child whose threads stay
    busy is withdrawn from it and answered 503 with Retry-After; the busy requests finish
    with 200, and the children serve on."""
    srv = start_server("processes-wait", caddyfile(crashext, extra="\t\tmax_wait_time 300ms"))
    answers = {}
    jobs = [in_background(srv, "/sleep.php?ms=1500", answers, key=f"busy{i}") for i in range(2)]
    assert eventually(lambda: sum(len(busy_in(srv, p)) for p in (0, 1)) == 2)
    started = time.monotonic()
    waits = [srv.get("/sleep.php?ms=1") for _ in range(2)]
    assert [r.status for r in waits] == [503, 503] and all(r.header("Retry-After") for r in waits)
    assert time.monotonic() - started < 1.4, "withdrawn at max_wait_time, not when a thread came free"
    for t in jobs:
        t.join(30)
    assert {k: v[0] for k, v in answers.items()} == {"busy0": 200, "busy1": 200}
    assert all(srv.get("/sleep.php").status == 200 for _ in range(6))
    assert not [e for e in srv.log_entries() if e.get("msg") == DIED]
    assert srv.stop() == 0


def test_worker_limits_and_autoscaling_work_in_each_process(start_server, crashext):
    """A worker's max_requests restarts its script in whichever child runs it, and the
    global max_threads, divided among the children, lets each add classic threads while
    requests wait."""
    srv = start_server("processes-limits", caddyfile(crashext, extra="\t\tmax_threads 10",
                                                     worker_extra="\t\t\tmax_requests 3\n"))
    assert all(srv.get("/w/sleep").status == 200 for _ in range(20))
    worker = next(p for p in srv.threads()["pools"] if p["id"] != 0)
    assert worker["restarts"] >= 4, worker  # 20 requests, 3 per script, in 2 children
    def classic_threads():
        counts = {0: 0, 1: 0}
        for t in srv.threads()["threads"]:
            if t["pool"] == 0:
                counts[t["process"]] += 1
        return counts
    assert classic_threads() == {0: 1, 1: 1}
    answers = {}
    jobs = [in_background(srv, "/sleep.php?ms=3000", answers, key=i) for i in range(8)]
    assert eventually(lambda: min(classic_threads().values()) > 1, timeout=10), classic_threads()
    most = 0
    while any(t.is_alive() for t in jobs):
        most = max(most, len(srv.threads()["threads"]))
        time.sleep(0.05)
    assert [a[0] for a in answers.values()] == [200] * 8
    assert most <= 10, f"{most} threads: past max_threads, which the children divide"
    assert srv.stop() == 0


def test_the_shared_table_is_one_for_every_process(start_server, crashext):
    """The shared table lives in the Caddy process: a value put by one child is read by
    the other, increments from both add up atomically, add and forget see the other's
    entries, and the table outlives a child's crash."""
    srv = start_server("processes-shared", caddyfile(crashext))

    def op(query, process=None):
        # Until the answer comes from the wanted child (requests go to the least busy):
        # for operations that may run more than once.
        for _ in range(50):
            r = srv.get(f"/shared.php?{query}").json()
            if process is None or r["pid"] == process:
                return r
        raise AssertionError(f"no answer from process {process}")

    a, b = sorted(running_pids(srv))
    assert op("op=put&key=greeting&value=%7B%22x%22%3A%5B1%2C2%5D%7D", a)["ok"] is True
    assert op("op=get&key=greeting", b)["value"] == {"x": [1, 2]}
    assert op("op=add&key=greeting&value=no", b)["ok"] is False  # refused wherever it runs
    assert op("op=count", b)["value"] == 1

    answers = {}
    jobs = [in_background(srv, f"/shared.php?op=incr&key=hits&x={i}", answers, key=i) for i in range(40)]
    for t in jobs:
        t.join(30)
    values = sorted(json.loads(v) for v in [srv.get("/shared.php?op=get&key=hits").text])
    assert values[0]["value"] == 40, values

    # A crash of a child does not touch the table.
    assert srv.get("/crash.php?how=segv").status == 502
    assert srv.wait_log(lambda e: e.get("msg") == DIED)
    assert eventually(lambda: len(running_pids(srv)) == 2, timeout=15)
    for pid in running_pids(srv):
        assert op("op=get&key=hits", pid)["value"] == 40
    assert op("op=forget&key=greeting")["ok"] is True
    assert all(op("op=get&key=greeting", pid)["value"] == "missing" for pid in running_pids(srv))
    assert srv.stop() == 0


def test_the_profile_covers_every_process(start_server, crashext, tmp_path):
    """GET /php_worker/profile with processes 2: one pprof profile, merged from both
    children. Two spinning requests, one per child (each goes to the least busy), both
    show up in it."""
    from test_profile import admin_get, labels, top_rows
    srv = start_server("processes-profile", caddyfile(crashext))
    answers = {}
    jobs = [in_background(srv, "/spin.php?s=2.5", answers)]
    assert eventually(lambda: sum(p["requests"] for p in processes(srv)) == 1)
    jobs.append(in_background(srv, "/w/spin?s=2.5", answers))
    assert eventually(lambda: all(p["requests"] == 1 for p in processes(srv)))
    status, body = admin_get(srv, "/php_worker/profile?seconds=1")
    for t in jobs:
        t.join(30)
    assert status == 200, body[:500]
    out = tmp_path / "merged.pprof"
    out.write_bytes(body)
    assert labels(out)["route"] == {"/spin.php", "/w/spin"}
    assert sum(r[0] for r in top_rows(out) if r[1] == "spin") > 50
    assert {a[0] for a in answers.values()} == {200}
    assert srv.stop() == 0


def test_reloads_change_processes_with_no_failed_request(start_server, crashext):
    """Under load, a reload from processes 2 to 3, then to 1, then to 2: no request fails."""
    srv = start_server("processes-reload", caddyfile(crashext, threads=4, workers=2))
    load = Load(srv, ["/sleep.php?ms=5", "/w/sleep?ms=5"], resend=True)
    ready = ReadyProbe(srv)
    for n in (3, 1, 2):
        text = caddyfile(crashext, processes=n, threads=4, workers=2)(srv.port, srv.admin_port)
        status, body = srv.admin("POST", "/load", body=text.encode(), headers={"Content-Type": "text/caddyfile"})
        assert status == 200, body
        if n > 1:
            assert eventually(lambda: len(running_pids(srv)) == n, timeout=30)
        else:
            assert eventually(lambda: "processes" not in srv.threads(), timeout=30)
        time.sleep(0.5)
    answers = load.stop()
    statuses = ready.stop()
    assert answers and all(a[1] == 200 for a in answers), [a for a in answers if a[1] != 200][:5]
    print(f"\nreadiness during the reloads: {len(statuses)} probes, not 200: {[s for s in statuses if s != 200]}")
    # A processes change restarts PHP as a whole: readiness says so while it restarts,
    # in one stretch per reload (how long a stretch is depends on the machine's load, so
    # it is not asserted), and is ready again at the end.
    assert set(statuses) <= {200, 503} and statuses[-1] == 200, statuses
    stretches = sum(1 for i, s in enumerate(statuses) if s == 503 and (i == 0 or statuses[i - 1] != 503))
    assert stretches <= 3, f"readiness went back and forth {stretches} times for 3 reloads: {statuses}"
    assert srv.stop() == 0


def test_a_php_ini_reload_restarts_processes_one_at_a_time(start_server, crashext):
    """Under load, a reload that changes php_ini: the children are replaced one at a time
    (a new one boots before an old one drains), so no request fails or waits for PHP to
    start again, and every new child runs the new setting."""
    srv = start_server("processes-roll", caddyfile(crashext))
    before = running_pids(srv)
    load = Load(srv, ["/sleep.php?ms=5", "/w/sleep?ms=5", "/sleep.php?ms=50"], resend=True)
    ready = ReadyProbe(srv)
    time.sleep(0.5)
    text = caddyfile(crashext, extra="\t\tphp_ini max_input_vars 1234")(srv.port, srv.admin_port)
    status, body = srv.admin("POST", "/load", body=text.encode(), headers={"Content-Type": "text/caddyfile"})
    assert status == 200, body
    assert eventually(lambda: len(running_pids(srv)) == 2 and not running_pids(srv) & before, timeout=30)
    time.sleep(0.5)
    answers = load.stop()
    statuses = ready.stop()
    assert answers and all(a[1] == 200 for a in answers), [a for a in answers if a[1] != 200][:5]
    assert len(statuses) > 10 and set(statuses) == {200}, f"ready throughout the roll: {statuses}"
    seen = {}
    for _ in range(20):
        r = srv.get("/ini.php?key=max_input_vars").json()
        seen[r["pid"]] = r["value"]
    assert seen == {pid: "1234" for pid in running_pids(srv)}, seen
    log = srv.log_text()
    assert "restarting PHP's processes one at a time" in log
    assert "requests wait for it" not in log, "PHP stopped as a whole"
    assert srv.stop() == 0


def test_worker_restarts_and_opcache_resets_reach_the_processes_under_load(start_server, crashext):
    """Under load: the admin API's worker restart replaces the worker's threads in every
    child with no failed request, and the metrics count each; an opcache_reset() empties
    the OPcache of the child that ran it, and /php_worker/threads says which."""
    srv = start_server("processes-restart", caddyfile(crashext, extra="\t\tphp_ini opcache.enable 1"))
    load = Load(srv, ["/sleep.php?ms=5", "/w/sleep?ms=5", "/w/sleep?ms=20"])
    time.sleep(0.5)

    def restarts():
        _, text = srv.admin("GET", "/metrics")
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("php_worker_worker_restarts_total{"))

    before = restarts()
    status, body = srv.admin("POST", "/php_worker/workers/restart")
    assert status == 200, body
    assert eventually(lambda: restarts() - before >= 2, timeout=15), (before, restarts())
    time.sleep(0.5)
    answers = load.stop()
    assert answers and all(a[1] == 200 for a in answers), [a for a in answers if a[1] != 200][:5]
    assert len({a[2] for a in answers}) == 2, "both processes served throughout"
    assert restarts() - before == 2, "one worker thread in each of the 2 processes"

    reset = srv.get("/reset.php").json()
    assert reset["reset"] is True, reset
    slot = next(p["process"] for p in processes(srv) if p["pid"] == reset["pid"])

    def resets():
        return {o["process"]: o["opcache"].get("restarts_opcache_reset", 0) for o in srv.threads()["opcache_by_process"]}

    # OPcache restarts once no script of that child runs: at its next request.
    assert eventually(lambda: srv.get("/sleep.php").status == 200 and resets()[slot] >= 1, timeout=10), resets()
    assert all(n == 0 for s, n in resets().items() if s != slot), "the other child's OPcache is its own"
    assert srv.stop() == 0


def test_a_php_ini_that_php_refuses_leaves_the_processes_on_the_previous_one(start_server, crashext):
    """Under load, a reload whose php_ini makes an extension abort while PHP starts: the
    first new child dies starting, the log says PHP refused the new php_ini, and the
    running children serve on, unchanged, with no failed request. A later good php_ini
    still rolls out."""
    srv = start_server("processes-refused", caddyfile(crashext))
    before = running_pids(srv)
    load = Load(srv, ["/sleep.php?ms=5", "/w/sleep?ms=5"], resend=True)
    ready = ReadyProbe(srv)
    time.sleep(0.3)
    bad = caddyfile(crashext, extra="\t\tphp_ini pw_crash.at_startup 1")(srv.port, srv.admin_port)
    status, body = srv.admin("POST", "/load", body=bad.encode(), headers={"Content-Type": "text/caddyfile"})
    assert status == 200, body  # the config is valid; PHP refuses it when it starts
    refused = srv.wait_log(lambda e: e.get("msg") == "PHP does not start with the new php_ini; its processes keep the previous one",
                           timeout=30)
    assert refused and refused[0]["level"] == "error", srv.log_text()[-3000:]
    assert "killed by SIGABRT" in refused[0]["error"], refused[0]
    time.sleep(0.5)
    answers = load.stop()
    statuses = ready.stop()
    assert answers and all(a[1] == 200 for a in answers), [a for a in answers if a[1] != 200][:5]
    assert set(statuses) == {200}, statuses
    assert running_pids(srv) == before, "the running children are the same ones"
    assert {srv.get("/ini.php?key=pw_crash.at_startup").json()["value"] for _ in range(6)} == {"0"}

    good = caddyfile(crashext, extra="\t\tphp_ini max_input_vars 1234")(srv.port, srv.admin_port)
    status, body = srv.admin("POST", "/load", body=good.encode(), headers={"Content-Type": "text/caddyfile"})
    assert status == 200, body
    assert eventually(lambda: len(running_pids(srv)) == 2 and not running_pids(srv) & before, timeout=30)
    assert {srv.get("/ini.php?key=max_input_vars").json()["value"] for _ in range(6)} == {"1234"}
    assert srv.stop() == 0


def test_a_crash_in_a_process_does_not_end_pid_1(tmp_path, crashext):
    """As a container's PID 1 (unshare --pid --fork), with processes 2: a crash in a child
    costs its request and the child; the server serves on, and SIGTERM ends it with 0."""
    port, admin = free_port(), free_port()
    (tmp_path / "Caddyfile").write_text(caddyfile(crashext)(port, admin))
    log = open(tmp_path / "caddy.log", "wb")
    proc = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", str(CADDY), "run", "--config",
                             str(tmp_path / "Caddyfile"), "--adapter", "caddyfile"], stdout=log, stderr=subprocess.STDOUT,
                            cwd=str(REPO), env=dict(os.environ, HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path),
                                                    XDG_DATA_HOME=str(tmp_path)))
    try:
        assert eventually(lambda: http_ok(port, "/sleep.php"), timeout=30), \
            (tmp_path / "caddy.log").read_text()[-2000:]
        assert http_get(port, "/crash.php?how=segv")[0] == 502
        assert eventually(lambda: DIED in (tmp_path / "caddy.log").read_text())
        assert all(http_get(port, "/sleep.php")[0] == 200 for _ in range(20))
        assert proc.poll() is None
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        os.kill(int(children[0]), signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
