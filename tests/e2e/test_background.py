"""Background work inside the server: background workers (scripts with a loop of their
own), task workers (tasks fanned out to booted threads) and scheduled jobs."""

import json
import signal
import socket
import threading
import time
import urllib.parse

from conftest import APP, eventually, make_caddyfile

# A background script that counts in the shared table until it is told to stop. It
# notes how many copies run at once (never more than one: "overlap"), its code version,
# and dies on a fatal error when the crash file exists.
COUNTER = """<?php
$version = '%(version)s';
register_shutdown_function(function () {
    php_worker_shared_increment('bg:running', -1);
    file_put_contents('%(dir)s/stopped.log', "stopped " . php_worker_stopping() . "\\n", FILE_APPEND);
});
if (php_worker_shared_increment('bg:running') > 1) {
    php_worker_shared_put('bg:overlap', true);
}
php_worker_shared_increment('bg:starts');
php_worker_shared_put('bg:version', $version);
php_worker_shared_put('bg:env', getenv('BG_ENV'));
php_worker_shared_put('bg:time_limit', ini_get('max_execution_time'));
echo "counter $version started\\n";
while (!php_worker_wait_stop(0.02)) {
    php_worker_shared_increment('bg:ticks');
    if (file_exists('%(dir)s/crash')) {
        unlink('%(dir)s/crash');
        undefined_function_to_crash();
    }
}
echo "counter $version stopping\\n";
"""

# A background script that never looks at whether it must stop: only its stop timeout
# ends it. It registers an on_stop callback that records the callback ran.
STUBBORN = """<?php
php_worker_on_stop(function () {
    file_put_contents('%(dir)s/on_stop.log', "on_stop\\n", FILE_APPEND);
});
php_worker_shared_put('stubborn:started', microtime(true));
while (true) {
    usleep(20000);
}
"""

# Reads the shared table for the tests.
READER = """<?php
header('Content-Type: application/json');
echo json_encode(array_combine($_GET['k'] ?? [], array_map('php_worker_shared_get', $_GET['k'] ?? [])));
"""


def shared(srv, *keys):
    """The shared table's values of keys. Sent again if its connection closes unanswered:
    the tests read it right after config loads too (see Server.request)."""
    query = "&".join(f"k[]={k}" for k in keys)
    return srv.get(f"/bg-read.php?{query}", resend=True).json()


def background_caddyfile(tmp_path, extra=""):
    def caddyfile(port, admin):
        return make_caddyfile(port, admin, threads=3, app=tmp_path, global_extra=f"""\t\tshutdown_timeout 2s
		background {{
			file {tmp_path}/counter.php
			name counter
			env BG_ENV from-config
		}}
{extra}""")
    return caddyfile


def test_background_worker_counts_survives_a_crash_and_a_reload_and_stops_on_time(start_server, tmp_path):
    (tmp_path / "counter.php").write_text(COUNTER % {"version": "v1", "dir": tmp_path})
    (tmp_path / "bg-read.php").write_text(READER)
    caddyfile = background_caddyfile(tmp_path)
    srv = start_server("background", caddyfile)

    # It runs, counts, with its env, no time limit, and its output in the log under its name.
    assert eventually(lambda: (shared(srv, "bg:ticks")["bg:ticks"] or 0) > 10), "the background script counts"
    d = shared(srv, "bg:version", "bg:env", "bg:time_limit", "bg:starts")
    assert d == {"bg:version": "v1", "bg:env": "from-config", "bg:time_limit": "0", "bg:starts": 1}
    started = srv.wait_log(lambda e: e.get("msg") == "counter v1 started")
    assert started and started[0].get("worker") == "counter", started
    pool = [p for p in srv.threads()["pools"] if p["worker"] == "counter"]
    assert pool and pool[0]["kind"] == "background" and pool[0]["threads"] == 1, pool

    # A fatal error ends the script; it runs again and counts on.
    (tmp_path / "crash").write_text("")
    assert eventually(lambda: shared(srv, "bg:starts")["bg:starts"] == 2), "restarted after its crash"
    assert srv.wait_log(lambda e: e.get("msg") == "background worker crashed; restarting it"
                        and e.get("worker") == "counter" and e.get("exit_status") == 255)
    ticks = shared(srv, "bg:ticks")["bg:ticks"]
    assert eventually(lambda: shared(srv, "bg:ticks")["bg:ticks"] > ticks + 5)

    # A reload with new code: the running copy is told to stop, ends, and the new code
    # runs; never two copies at once.
    (tmp_path / "counter.php").write_text(COUNTER % {"version": "v2", "dir": tmp_path})
    status, body = srv.load(caddyfile(srv.port, srv.admin_port), force=True)
    assert status == 200, body
    assert eventually(lambda: shared(srv, "bg:version")["bg:version"] == "v2"), "the reload runs the new code"
    assert srv.wait_log(lambda e: e.get("msg") == "counter v1 stopping")
    assert shared(srv, "bg:overlap", "bg:starts") == {"bg:overlap": None, "bg:starts": 3}
    assert (tmp_path / "stopped.log").read_text().count("stopped 1") == 1, "it saw php_worker_stopping()"

    # A config that fails to load (a site on a port in use) leaves it running as it was,
    # and so does one that would turn it into a task worker (a pool keeps its kind).
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    busy = f"\n:{blocker.getsockname()[1]} {{\n\tbind 127.0.0.1\n\trespond busy\n}}\n"
    status, body = srv.load(caddyfile(srv.port, srv.admin_port) + busy)
    blocker.close()
    assert status != 200, "the load must fail"
    retyped = caddyfile(srv.port, srv.admin_port).replace("\t\tbackground {", "\t\ttask_worker {\n\t\t\tnum 1")
    status, body = srv.load(retyped)
    assert status != 200 and "cannot become a task worker" in body, body
    ticks = shared(srv, "bg:ticks")["bg:ticks"]
    assert eventually(lambda: shared(srv, "bg:ticks")["bg:ticks"] > ticks + 5)
    assert shared(srv, "bg:starts", "bg:version") == {"bg:starts": 3, "bg:version": "v2"}

    # The admin API's restart restarts it too.
    status, body = srv.admin("POST", "/php_worker/workers/restart")
    assert status == 200, body
    assert eventually(lambda: shared(srv, "bg:starts")["bg:starts"] == 4)
    assert srv.get("/bg-read.php").status == 200, "the server serves throughout"

    # The server stops: the script is told to, and ends well within shutdown_timeout.
    began = time.monotonic()
    assert srv.stop() == 0
    assert time.monotonic() - began < 2
    assert (tmp_path / "stopped.log").read_text().count("stopped 1") == 3
    assert "counter v2 stopping" in srv.log_path.read_text()


def test_a_background_worker_that_ignores_the_stop_is_ended_after_the_timeout(start_server, tmp_path):
    (tmp_path / "counter.php").write_text(COUNTER % {"version": "v1", "dir": tmp_path})
    (tmp_path / "stubborn.php").write_text(STUBBORN % {"dir": tmp_path})
    (tmp_path / "bg-read.php").write_text(READER)
    extra = f"\t\tbackground {tmp_path}/stubborn.php\n"
    caddyfile = background_caddyfile(tmp_path, extra)
    srv = start_server("background-stubborn", caddyfile)
    assert eventually(lambda: shared(srv, "stubborn:started")["stubborn:started"] is not None)
    first = shared(srv, "stubborn:started")["stubborn:started"]

    # A reload: the script ignores php_worker_stopping(); its on_stop callback runs at
    # its next instruction, and the watchdog ends it after shutdown_timeout (2s).
    began = time.time()
    status, body = srv.load(caddyfile(srv.port, srv.admin_port), force=True)
    assert status == 200, body
    assert eventually(lambda: (shared(srv, "stubborn:started")["stubborn:started"] or 0) > first, timeout=15)
    restarted_after = shared(srv, "stubborn:started")["stubborn:started"] - began
    assert 1.5 < restarted_after < 8, f"the new copy started {restarted_after:.1f}s after the reload"
    assert srv.wait_log(lambda e: e.get("msg") == "background worker did not stop within its stop timeout: stopping it")
    assert (tmp_path / "on_stop.log").read_text() == "on_stop\n", "the callback ran once"
    assert shared(srv, "bg:overlap")["bg:overlap"] is None
    assert srv.get("/bg-read.php").status == 200


# A queue worker's signal handling, as Laravel's queue:work and Symfony Messenger set it
# up: pcntl handlers for the signals that ask it to end, one for SIGALRM with an alarm (a
# job's timeout), and a loop that ends once a handler said so.
PCNTL = """<?php
pcntl_async_signals(true);
$quit = false;
foreach ([SIGTERM, SIGINT, SIGQUIT] as $signal) {
    pcntl_signal($signal, function (int $signo, $info) use (&$quit) {
        $quit = true;
        file_put_contents('%(dir)s/signals.log', json_encode([$signo, $info]) . "\\n", FILE_APPEND);
    });
}
pcntl_signal(SIGALRM, function () {
    file_put_contents('%(dir)s/signals.log', "alarm\\n", FILE_APPEND);
});
pcntl_signal(SIGUSR2, SIG_IGN);
pcntl_alarm(1);
try {
    pcntl_signal(0, SIG_DFL);
} catch (ValueError $e) {
    php_worker_shared_put('pcntl:error', $e->getMessage());
}
php_worker_shared_increment('pcntl:starts');
while (!$quit) {
    usleep(20000);
}
file_put_contents('%(dir)s/signals.log', "ended\\n", FILE_APPEND);
"""


def test_a_background_workers_pcntl_stop_handlers_run_at_its_stop_and_leave_the_servers_signals_alone(
        start_server, tmp_path):
    """PHP's pcntl_signal() sets the whole process's handler: a queue worker's SIGTERM
    handler took SIGTERM from Caddy, and the server crashed at its next SIGTERM (every
    deploy). In the server, the handlers for SIGTERM, SIGINT and SIGQUIT run when the
    script is told to stop (a reload, the server's stop), once each, as a supervisor's
    SIGTERM would have them run; other handlers and alarms never reach the process."""
    (tmp_path / "counter.php").write_text(COUNTER % {"version": "v1", "dir": tmp_path})
    (tmp_path / "pcntl.php").write_text(PCNTL % {"dir": tmp_path})
    (tmp_path / "bg-read.php").write_text(READER)
    caddyfile = background_caddyfile(tmp_path, f"\t\tbackground {tmp_path}/pcntl.php\n")
    srv = start_server("background-pcntl", caddyfile)
    log = tmp_path / "signals.log"
    assert eventually(lambda: shared(srv, "pcntl:starts")["pcntl:starts"] == 1)
    assert shared(srv, "pcntl:error")["pcntl:error"].startswith("pcntl_signal(): Argument #1 ($signal) must be")
    time.sleep(1.5)
    assert not log.exists(), "no handler ran before the stop, the alarm's neither"

    # A reload tells the script to stop: its handlers run, SIGTERM's first, and it ends.
    status, body = srv.load(caddyfile(srv.port, srv.admin_port), force=True)
    assert status == 200, body
    assert eventually(lambda: shared(srv, "pcntl:starts")["pcntl:starts"] == 2, timeout=15)
    assert log.read_text().splitlines() == ['[15,{"signo":15}]', '[2,{"signo":2}]', '[3,{"signo":3}]', "ended"]
    assert not srv.wait_log(lambda e: e.get("msg") == "background worker did not stop within its stop timeout: stopping it",
                            timeout=0.5)

    # SIGTERM stops the server as always, the handlers run again in the new copy.
    log.unlink()
    srv.proc.send_signal(signal.SIGTERM)
    assert srv.proc.wait(timeout=30) == 0, srv.log_text()[-3000:]
    assert log.read_text().splitlines()[-1] == "ended"
    assert "PHP engine stopped" in srv.log_text()


# A task worker: each task is JSON naming what to do.
TASKS = """<?php
$booted = bin2hex(random_bytes(8)); // tells the threads apart
while (php_worker_handle_task(function (string $payload) use ($booted) {
    $t = json_decode($payload, true);
    switch ($t['op']) {
        case 'sleep':
            usleep($t['ms'] * 1000);
            return json_encode(['slept' => $t['ms'], 'booted' => $booted]);
        case 'echo':
            echo "task says hello\\n";
            return $payload . '|' . file_get_contents('php://input') . '|' . $_SERVER['REQUEST_METHOD'];
        case 'throw':
            throw new DomainException('bad task');
        case 'int':
            return 42;
        case 'fatal':
            undefined_function_in_a_task();
        case 'exit':
            exit(3);
        case 'memory':
            return str_repeat('x', 1 << 30);
        case 'self':
            return php_worker_task('tasks', '{"op":"echo"}');
        case 'handle_request':
            return frankenphp_handle_request(fn () => null) ? 'yes' : 'no';
    }
    return 'unknown';
})) {
}
"""

# A request that sends tasks and answers what came back, with its timing.
SENDER = """<?php
header('Content-Type: application/json');
$ops = json_decode($_GET['ops'], true);
$timeout = (float) ($_GET['timeout'] ?? 30);
$worker = $_GET['worker'] ?? 'tasks';
if (isset($_GET['limit'])) {
    set_time_limit((int) $_GET['limit']);
}
$start = microtime(true);
$out = [];
if (isset($_GET['one'])) {
    try {
        $out[] = ['ok' => php_worker_task($worker, json_encode($ops[0]), $timeout)];
    } catch (Throwable $e) {
        $out[] = ['error' => get_class($e), 'message' => $e->getMessage()];
    }
} else {
    foreach (php_worker_tasks($worker, array_map('json_encode', $ops), $timeout) as $key => $r) {
        $out[$key] = is_string($r) ? ['ok' => $r] : ['error' => get_class($r), 'message' => $r->getMessage()];
    }
}
echo json_encode(['results' => $out, 'ms' => (microtime(true) - $start) * 1000]);
"""


def tasks_caddyfile(tmp_path, num=3):
    def caddyfile(port, admin):
        return make_caddyfile(port, admin, threads=num + 2, app=tmp_path, global_extra=f"""\t\ttask_worker {{
			file {tmp_path}/tasks.php
			name tasks
			num {num}
		}}""")
    return caddyfile


def send(srv, ops, **params):
    query = urllib.parse.urlencode(dict(params, ops=json.dumps(ops)))
    r = srv.get(f"/send.php?{query}", timeout=60)
    assert r.status == 200, r.text
    return r.json()


def test_tasks_fan_out_to_booted_threads(start_server, tmp_path):
    (tmp_path / "tasks.php").write_text(TASKS)
    (tmp_path / "send.php").write_text(SENDER)
    srv = start_server("tasks", tasks_caddyfile(tmp_path))
    send(srv, [{"op": "sleep", "ms": 1}] * 3)  # every thread booted

    # Three tasks of 300 ms from one request take about 300 ms, not 900.
    fanned = send(srv, [{"op": "sleep", "ms": 300}] * 3)
    assert [json.loads(r["ok"])["slept"] for r in fanned["results"]] == [300, 300, 300]
    assert 290 < fanned["ms"] < 600, fanned["ms"]
    assert len({json.loads(r["ok"])["booted"] for r in fanned["results"]}) == 3, "on three booted threads"
    sequential = 0
    for _ in range(3):
        sequential += send(srv, [{"op": "sleep", "ms": 300}], one=1)["ms"]
    assert sequential > 880

    # The payload is the task's argument and its php://input; its output goes to the log.
    echo = send(srv, [{"op": "echo"}], one=1)["results"][0]["ok"]
    assert echo == '{"op":"echo"}|{"op":"echo"}|TASK'
    assert srv.wait_log(lambda e: e.get("msg") == "task says hello" and e.get("worker") == "tasks")

    # Keys are kept; errors come back in place as exceptions naming the task.
    r = send(srv, {"a": {"op": "echo"}, "b": {"op": "throw"}, "c": {"op": "int"}})["results"]
    assert r["a"]["ok"].startswith('{"op":"echo"}')
    assert r["b"] == {"error": "PhpWorker\\TaskException",
                      "message": "task b on worker tasks failed: DomainException: bad task"}
    assert r["c"]["message"] == "task c on worker tasks failed: its handler returned int, not a string"


def test_task_failures_timeouts_and_refusals_come_back_as_exceptions(start_server, tmp_path):
    (tmp_path / "tasks.php").write_text(TASKS)
    (tmp_path / "send.php").write_text(SENDER)
    srv = start_server("tasks-failures", tasks_caddyfile(tmp_path, num=1))

    r = send(srv, [{"op": "throw"}], one=1)["results"][0]
    assert r == {"error": "PhpWorker\\TaskException", "message": "task 0 on worker tasks failed: DomainException: bad task"}

    # A task that outlives its timeout: TaskTimeoutException, at the timeout.
    r = send(srv, [{"op": "sleep", "ms": 1500}], one=1, timeout=0.3)
    assert r["results"][0]["error"] == "PhpWorker\\TaskTimeoutException", r
    assert 280 < r["ms"] < 900, r["ms"]

    # A fatal error, exit() or memory_limit in a task fails it and restarts the task
    # worker's script.
    time.sleep(1.3)  # the sleeping task ends
    for op in ("fatal", "exit", "memory"):
        r = send(srv, [{"op": op}], one=1)["results"][0]
        assert r["error"] == "PhpWorker\\TaskException" and "failed" in r["message"], r
        assert send(srv, [{"op": "echo"}], one=1)["results"][0]["ok"].startswith('{"op":"echo"}')

    # The sender's own time limit ends its wait (the task runs on, its answer dropped).
    r = srv.get("/send.php?" + urllib.parse.urlencode({"ops": json.dumps([{"op": "sleep", "ms": 2500}]), "one": 1,
                                                       "limit": 1}), timeout=30)
    assert r.status == 500 and "Maximum execution time of 1 second exceeded" in r.text, r.text
    time.sleep(1.6)

    # Refusals: no such worker; a task worker sending to itself (its threads could all
    # wait for each other); frankenphp_handle_request() in a task worker.
    r = send(srv, [{"op": "echo"}], one=1, worker="nope")["results"][0]
    assert r["message"] == 'task 0 on worker nope was refused: no task worker is named "nope"'
    r = send(srv, [{"op": "self"}], one=1)["results"][0]
    assert "cannot wait for a task of its own worker" in r["message"], r
    r = send(srv, [{"op": "handle_request"}], one=1)["results"][0]
    assert "frankenphp_handle_request() called in a task worker" in r["message"], r
    assert srv.get("/send.php?ops=[]").json()["results"] == []


def test_a_busy_task_pool_does_not_deadlock(start_server, tmp_path):
    """One task thread, busy: tasks queue behind it and run in turn; a sender whose
    timeout passes first gets TaskTimeoutException and the task never runs; the server
    serves throughout."""
    (tmp_path / "tasks.php").write_text(TASKS)
    (tmp_path / "send.php").write_text(SENDER)
    srv = start_server("tasks-busy", tasks_caddyfile(tmp_path, num=1))
    queued = send(srv, [{"op": "sleep", "ms": 200}] * 3)
    assert all("ok" in r for r in queued["results"]) and 590 < queued["ms"] < 1500, queued

    busy = threading.Thread(target=lambda: send(srv, [{"op": "sleep", "ms": 1500}], one=1))
    busy.start()
    time.sleep(0.3)
    r = send(srv, [{"op": "echo"}], one=1, timeout=0.3)
    assert r["results"][0]["error"] == "PhpWorker\\TaskTimeoutException" and r["ms"] < 1000, r
    busy.join()
    assert send(srv, [{"op": "echo"}], one=1)["results"][0]["ok"].startswith('{"op":"echo"}')
    assert srv.get("/bg-read.php").status in (200, 404)


# A scheduled job: records its $argv and when it ran, and sleeps as long as its args say.
JOB = """<?php
$start = microtime(true);
usleep((int) ($argv[2] ?? 0) * 1000);
file_put_contents('%(dir)s/runs.log', json_encode(['argv' => $argv, 'server_argv' => $_SERVER['argv'],
    'start' => $start, 'end' => microtime(true)]) . "\\n", FILE_APPEND);
echo "job ran\\n";
exit((int) ($argv[3] ?? 0));
"""


def test_scheduled_jobs_run_on_time_with_argv_and_never_twice_at_once(start_server, tmp_path, monkeypatch):
    """Every minute, on a clock sped up 60 times by the test hook: a minute is a second."""
    monkeypatch.setenv("PHP_WORKER_SCHEDULE_CLOCK_SPEED", "60")
    (tmp_path / "job.php").write_text(JOB % {"dir": tmp_path})
    (tmp_path / "bg-read.php").write_text(READER)

    def caddyfile(port, admin):
        return make_caddyfile(port, admin, threads=2, app=tmp_path, global_extra=f"""\t\tschedule "* * * * *" {tmp_path}/job.php quick 0
		schedule "* * * * *" {tmp_path}/job.php slow 2500 {{
			name slow
		}}
		schedule "*/2 * * * *" {tmp_path}/job.php failing 0 3""")
    srv = start_server("schedule", caddyfile)
    runs_log = tmp_path / "runs.log"

    def runs(kind):
        if not runs_log.exists():
            return []
        return [r for r in map(json.loads, runs_log.read_text().splitlines()) if r["argv"][1] == kind]

    assert eventually(lambda: len(runs("quick")) >= 4 and len(runs("slow")) >= 2, timeout=20)
    quick = runs("quick")
    assert quick[0]["argv"] == [str(tmp_path / "job.php"), "quick", "0"] == quick[0]["server_argv"]
    gaps = [b["start"] - a["start"] for a, b in zip(quick, quick[1:])]
    assert all(0.5 < g < 1.6 for g in gaps), gaps

    # The slow job (2.5 s every "minute") never runs twice at once: the times that come
    # while it runs are skipped, and logged.
    slow = runs("slow")
    assert all(b["start"] >= a["end"] for a, b in zip(slow, slow[1:])), slow
    assert srv.wait_log(lambda e: e.get("msg") == "scheduled job skipped: its previous run has not ended"
                        and e.get("job") == "slow")

    ended = srv.wait_log(lambda e: e.get("msg") == "scheduled job ended" and e.get("job") == "job.php quick 0")
    assert ended and ended[0]["exit_status"] == 0 and ended[0]["duration_ms"] >= 0
    assert srv.wait_log(lambda e: e.get("msg") == "job ran" and e.get("worker") == "job.php quick 0")
    failed = srv.wait_log(lambda e: e.get("msg") == "scheduled job failed" and e.get("job") == "job.php failing 0 3",
                          timeout=10)
    assert failed and failed[0]["exit_status"] == 3
    status, metrics = srv.admin("GET", "/metrics")
    assert 'php_worker_schedule_runs_total{job="slow",result="skipped"}' in metrics
    assert 'php_worker_schedule_run_seconds_count{job="job.php quick 0"}' in metrics
    assert srv.get("/bg-read.php").status == 200, "requests are served meanwhile"


# PhpWorker\Ticker (adapters/) in a background worker: two ticks on their own rhythms;
# run() returns when the script must stop.
TICKER = """<?php
require '%(adapters)s/autoload.php';
(new PhpWorker\\Ticker())
    ->tick('fast', fn () => php_worker_shared_increment('tick:fast'), seconds: 0.1, immediate: true)
    ->tick('slow', fn () => php_worker_shared_increment('tick:slow'), seconds: 0.5)
    ->tick('broken', fn () => throw new RuntimeException('tick broke'), seconds: 0.5)
    ->run();
php_worker_shared_put('tick:returned', true);
"""


def test_ticker_runs_ticks_on_time_until_the_script_must_stop(start_server, tmp_path):
    (tmp_path / "ticker.php").write_text(TICKER % {"adapters": APP.parents[2] / "adapters"})
    (tmp_path / "bg-read.php").write_text(READER)

    def caddyfile(port, admin):
        return make_caddyfile(port, admin, threads=2, app=tmp_path,
                              global_extra=f"\t\tbackground {tmp_path}/ticker.php")
    srv = start_server("ticker", caddyfile)
    time.sleep(1.2)
    d = shared(srv, "tick:fast", "tick:slow", "tick:returned")
    assert 8 <= d["tick:fast"] <= 14 and 1 <= d["tick:slow"] <= 3 and d["tick:returned"] is None, d
    assert srv.wait_log(lambda e: "tick broken failed: RuntimeException: tick broke" in e.get("msg", ""))
    status, body = srv.load(caddyfile(srv.port, srv.admin_port), force=True)
    assert status == 200, body
    assert eventually(lambda: shared(srv, "tick:returned")["tick:returned"] is True), "run() returned on the stop"


def test_task_workers_autoscale(start_server, tmp_path):
    """A task worker of one thread with max_threads 3: tasks that wait in its queue make
    the autoscaler add threads, and three tasks then run at once."""
    (tmp_path / "tasks.php").write_text(TASKS)
    (tmp_path / "send.php").write_text(SENDER)

    def caddyfile(port, admin):
        return make_caddyfile(port, admin, threads=3, app=tmp_path, global_extra=f"""\t\ttask_worker {{
			file {tmp_path}/tasks.php
			name tasks
			num 1
			max_threads 3
		}}""")
    srv = start_server("tasks-autoscale", caddyfile)
    pool = lambda: [p for p in srv.threads()["pools"] if p["worker"] == "tasks"][0]
    assert pool()["kind"] == "task" and pool()["threads"] == 1
    assert eventually(lambda: send(srv, [{"op": "sleep", "ms": 300}] * 3)["ms"] < 600, timeout=20), \
        "the autoscaler gave the task worker threads"
    assert pool()["threads"] == 3, pool()


def test_a_watched_background_worker_restarts_with_the_changed_file(start_server, tmp_path):
    (tmp_path / "counter.php").write_text(COUNTER % {"version": "v1", "dir": tmp_path})
    (tmp_path / "bg-read.php").write_text(READER)

    def caddyfile(port, admin):
        return make_caddyfile(port, admin, threads=2, app=tmp_path, global_extra=f"""\t\tbackground {{
			file {tmp_path}/counter.php
			name counter
			watch
		}}""")
    srv = start_server("background-watch", caddyfile)
    assert eventually(lambda: shared(srv, "bg:version")["bg:version"] == "v1")
    (tmp_path / "counter.php").write_text(COUNTER % {"version": "v2", "dir": tmp_path})
    assert eventually(lambda: shared(srv, "bg:version")["bg:version"] == "v2"), "the file change restarted it"
    assert srv.wait_log(lambda e: e.get("msg") == "files changed: restarting worker" and e.get("worker") == "counter")
    assert shared(srv, "bg:overlap", "bg:starts") == {"bg:overlap": None, "bg:starts": 2}


def test_an_opcache_reset_restarts_a_background_worker_on_the_fresh_cache(start_server, tmp_path):
    """opcache_reset() from a deploy script: OPcache restarts only once every script has
    left PHP, so the background script is asked to stop, ends, and runs again on the
    fresh cache; requests are served throughout."""
    (tmp_path / "counter.php").write_text(COUNTER % {"version": "v1", "dir": tmp_path})
    (tmp_path / "bg-read.php").write_text(READER)
    (tmp_path / "reset.php").write_text("<?php echo opcache_reset() ? 'reset' : 'not reset';")

    def caddyfile(port, admin):
        return make_caddyfile(port, admin, threads=3, app=tmp_path, global_extra=f"""\t\tphp_ini opcache.enable 1
		background {{
			file {tmp_path}/counter.php
			name counter
		}}""")
    srv = start_server("background-opcache", caddyfile)
    assert eventually(lambda: shared(srv, "bg:starts")["bg:starts"] == 1)
    assert srv.get("/reset.php").text == "reset"
    assert eventually(lambda: shared(srv, "bg:starts")["bg:starts"] == 2), "it ran again after the reset"
    assert srv.wait_log(lambda e: e.get("msg") == "background worker ended for an OPcache restart; restarting it")
    opcache = srv.threads()["opcache"]
    assert opcache["restarts_opcache_reset"] >= 1 and opcache["holds_timed_out"] == 0, opcache
    assert shared(srv, "bg:overlap")["bg:overlap"] is None


# Sends one large task after another to the task worker "tasks" until one is not
# answered with a result; answers how many came back and how the last call ended. A large
# payload takes a while to copy into its task: a reload that removes the worker then
# often lands between the moment the sender finds the worker and the moment the task is
# queued.
DRAIN_SENDER = """<?php
header('Content-Type: application/json');
$payload = str_repeat('x', 64 << 20);
$answered = 0;
$deadline = microtime(true) + 25;
while (microtime(true) < $deadline) {
    $start = microtime(true);
    try {
        php_worker_task('tasks', $payload, 30);
        $answered++;
    } catch (Throwable $e) {
        echo json_encode(['answered' => $answered, 'error' => get_class($e), 'message' => $e->getMessage(),
            'ms' => (microtime(true) - $start) * 1000]);
        return;
    }
}
echo json_encode(['answered' => $answered, 'error' => null]);
"""

# A task worker whose handler answers the payload's length.
LENGTH_TASKS = """<?php
while (php_worker_handle_task(fn (string $payload) => (string) strlen($payload))) {
}
"""


def test_a_task_sent_while_its_worker_stops_is_answered_not_left_to_time_out(start_server, tmp_path):
    """Reloads stop a task worker while tasks keep coming: one that removes the worker,
    one that changes php_ini (PHP restarts). Each task is served by a thread of the
    worker or refused at once, never left queued where no thread will take it until the
    sender's timeout (30 s here), nor dropped without a word."""
    (tmp_path / "tasks.php").write_text(LENGTH_TASKS)
    (tmp_path / "drain-send.php").write_text(DRAIN_SENDER)

    def caddyfile(with_worker=True, memory="1G"):
        worker = f"""\t\ttask_worker {{
			file {tmp_path}/tasks.php
			name tasks
			num 3
		}}""" if with_worker else ""
        extra = f"\t\tphp_ini memory_limit {memory}\n" + worker
        return lambda port, admin: make_caddyfile(port, admin, threads=5, app=tmp_path, global_extra=extra)
    srv = start_server("tasks-drain", caddyfile())
    ready = lambda: any(p["worker"] == "tasks" and p["ready"] == 3 for p in srv.threads()["pools"])
    for attempt in range(6):
        removes = attempt % 2 == 0
        result = {}

        def sender():
            r = srv.get("/drain-send.php", timeout=90)
            result.update(r.json() if r.status == 200 else {"status": r.status, "body": r.text})
        sending = threading.Thread(target=sender)
        sending.start()
        time.sleep(0.5 + 0.1 * attempt)  # tasks flow meanwhile
        stopping = caddyfile(with_worker=False) if removes else caddyfile(memory=f"{1024 + attempt}M")
        status, body = srv.load(stopping(srv.port, srv.admin_port))
        assert status == 200, body
        sending.join()
        assert result.get("error") == "PhpWorker\\TaskException", result
        assert "was refused" in result["message"] and "dropped" not in result["message"], result
        assert result["ms"] < 10_000, result
        if removes:
            status, body = srv.load(caddyfile()(srv.port, srv.admin_port))
            assert status == 200, body
        assert eventually(ready, timeout=20)


# A task worker that passes its task on: the payload lists the task workers still to
# go through; each adds its name to what the rest answered, or to why it could not send.
RELAY_TASKS = """<?php
$me = getenv('WORKER_NAME');
while (php_worker_handle_task(function (string $payload) use ($me) {
    $via = json_decode($payload, true);
    if (!$via) {
        return $me;
    }
    try {
        return $me . ' > ' . php_worker_task(array_shift($via), json_encode($via), 30);
    } catch (PhpWorker\\TaskException $e) {
        return $me . ' > ' . get_class($e) . ': ' . $e->getMessage();
    }
})) {
}
"""

# Sends a task through the task workers of ?via=a,b,...
RELAY_SENDER = """<?php
header('Content-Type: application/json');
$via = explode(',', $_GET['via']);
$start = microtime(true);
try {
    $answer = php_worker_task(array_shift($via), json_encode($via), 30);
} catch (PhpWorker\\TaskException $e) {
    $answer = get_class($e) . ': ' . $e->getMessage();
}
echo json_encode(['answer' => $answer, 'ms' => (microtime(true) - $start) * 1000]);
"""


def test_task_workers_sending_to_each_other_in_a_cycle_are_refused_at_once(start_server, tmp_path):
    """Task workers a and b, one thread each. A task that goes a -> b -> a would leave a's
    only thread waiting for b and b's for a until their timeouts (30 s): the send that
    closes the cycle is refused at once, naming it. Chains without a cycle run."""
    (tmp_path / "relay.php").write_text(RELAY_TASKS)
    (tmp_path / "relay-send.php").write_text(RELAY_SENDER)
    workers = "\n".join(f"""\t\ttask_worker {{
			file {tmp_path}/relay.php
			name {name}
			num 1
			env WORKER_NAME {name}
		}}""" for name in ("a", "b"))
    srv = start_server("tasks-cycle", lambda port, admin: make_caddyfile(port, admin, threads=4, app=tmp_path,
                                                                        global_extra=workers))

    def relay(via):
        r = srv.get(f"/relay-send.php?via={via}", timeout=90)
        assert r.status == 200, r.text
        return r.json()

    assert relay("a,b")["answer"] == "a > b"
    assert relay("b,a")["answer"] == "b > a", "either way round, as long as no worker comes back"

    r = relay("a,b,a")
    assert r["answer"] == ("a > b > PhpWorker\\TaskException: task 0 on worker a was refused: "
                           "tasks cannot go round a cycle of task workers (a → b → a): "
                           "their threads could all end up waiting for each other"), r
    assert r["ms"] < 10_000, r
    r = relay("b,a,b")
    assert r["answer"].endswith("(b → a → b): their threads could all end up waiting for each other") and r["ms"] < 10_000, r

    # A worker sending to itself is the shortest cycle, refused as before.
    r = relay("a,a")
    assert r["answer"] == ("a > PhpWorker\\TaskException: task 0 on worker a was refused: a thread of task worker a "
                           "cannot wait for a task of its own worker (its threads could all wait for each other)"), r
    assert relay("a,b")["answer"] == "a > b", "both workers serve on"
