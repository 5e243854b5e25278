"""`processes N` under faults, with a load running over HTTP/1.1 and HTTP/2 (h2c): a
crash after flush(), a 100 MiB readfile(), a slow client of a 256 MiB response, a crash
while a program the script started lives on, a child stopped with SIGSTOP, a crash during
a php_ini roll, and pcntl_alarm() in a background worker. Every request of the load
writes its id to a ledger before it answers: the suite counts that no request ran twice,
that every 200 is whole and ran once, and that a response cut short never looks
complete."""
import hashlib
import os
import signal
import subprocess
import threading
import time
import uuid

import pytest

from conftest import eventually, global_options
from test_processes import crashext, running_pids  # noqa: F401
from test_processes_lifecycle import DIED
from test_processes_routing import CUT_OFF
from test_slow_clients import slow_readers

# 16 KiB and an end marker: a whole answer has both.
LEDGER = """<?php
$id = $_GET['id'];
$f = fopen(getenv('LEDGER_FILE'), 'a');
flock($f, LOCK_EX);
fwrite($f, $id . "\\n");
fclose($f);
usleep(random_int(0, 20000));
echo 'pid=' . getmypid() . ' ' . str_repeat('.', 16384) . ' END';
"""
CRASH_AFTER_FLUSH = """<?php
echo str_repeat('a', 200000);
flush();
usleep(200000);
pw_crash('segv');
"""
READFILE = "<?php\nheader('Content-Type: application/octet-stream');\nreadfile($_GET['f']);\n"
STREAM = """<?php
$chunk = str_repeat('z', 1 << 20);
for ($i = 0; $i < (int) $_GET['mb']; $i++) {
    echo $chunk;
}
"""
ORPHAN_CRASH = """<?php
exec('sleep 120.4242 > /dev/null 2>&1 &');
pw_crash('segv');
"""
SLEEP = "<?php usleep((int) ($_GET['ms'] ?? 0) * 1000); echo 'pid=' . getmypid();\n"
# pcntl_alarm() as Laravel's queue:work arms it around every job, one that fires.
ALARM_BACKGROUND = """<?php
while (!php_worker_wait_stop(0.05)) {
    pcntl_alarm(1);
    usleep(1200000);
    file_put_contents(getenv('ALARMS_FILE'), "survived\\n", FILE_APPEND);
}
"""
WHOLE = 16384 + len(" END")


class LedgerLoad:
    """Clients posting to the ledger in a loop, each request with an id of its own: two
    over HTTP/1.1 (http.client), one over h2c (curl). Keeps each id's outcome: 200 with
    a whole body, a status, or how the connection ended."""

    def __init__(self, srv):
        self.srv, self.outcomes, self.stopped = srv, {}, threading.Event()
        self.threads = [threading.Thread(target=self.loop, args=(h2,), daemon=True) for h2 in (False, False, True)]
        for t in self.threads:
            t.start()

    def loop(self, h2):
        while not self.stopped.is_set():
            rid = uuid.uuid4().hex
            path = f"/ledger.php?id={rid}"
            if h2:
                p = subprocess.run(["curl", "-sS", "--http2-prior-knowledge", "-o", "-", "-w", "\n%{http_code}",
                                    f"http://127.0.0.1:{self.srv.port}{path}"], capture_output=True, timeout=60)
                body, _, status = p.stdout.rpartition(b"\n")
                outcome = ("curl", p.returncode) if p.returncode else (int(status), body)
            else:
                try:
                    r = self.srv.request(path, timeout=60)
                    outcome = (r.status, r.body)
                except Exception as e:  # noqa: BLE001 (the outcome is what is counted)
                    outcome = ("error", repr(e))
            self.outcomes[rid] = outcome

    def stop(self):
        self.stopped.set()
        for t in self.threads:
            t.join(90)
        return self.outcomes


def check_ledger(outcomes, ledger):
    """Nothing ran twice; every 200 is whole and ran once; the rest are 502s, cut-off
    connections or 503s, never a 200 that is not whole."""
    runs = {}
    for line in ledger.read_text().splitlines():
        runs[line] = runs.get(line, 0) + 1
    twice = [rid for rid, n in runs.items() if n > 1]
    assert not twice, f"{len(twice)} requests ran twice: {twice[:3]}"
    ok = [rid for rid, (status, _) in outcomes.items() if status == 200]
    assert ok, "the load got no answer at all"
    for rid in ok:
        body = outcomes[rid][1]
        assert body.endswith(b" END") and len(body.split(b" ", 1)[1]) == WHOLE, f"a 200 that is not whole: {body[-40:]}"
        assert runs.get(rid) == 1, f"a 200 whose request did not run once: {rid} ran {runs.get(rid, 0)} times"
    others = {rid: o for rid, o in outcomes.items() if o[0] != 200}
    for rid, (status, detail) in others.items():
        assert status in (502, 503, "curl", "error"), f"{rid}: {status} {detail!r:.200}"
    return len(ok), len(others)


@pytest.fixture(scope="module")
def suite(start_server, crashext, tmp_path_factory):  # noqa: F811 (the fixture)
    root = tmp_path_factory.mktemp("crash-suite")
    ledger, alarms = root / "ledger", root / "alarms"
    ledger.write_text("")
    for name, text in {"ledger.php": LEDGER, "crash_after_flush.php": CRASH_AFTER_FLUSH, "readfile.php": READFILE,
                       "stream.php": STREAM, "orphan_crash.php": ORPHAN_CRASH, "sleep.php": SLEEP,
                       "alarm.php": ALARM_BACKGROUND}.items():
        (root / name).write_text(text)
    data = os.urandom(1 << 20) * 100
    (root / "data.bin").write_bytes(data)
    servers = "\tservers {\n\t\tprotocols h1 h2 h2c\n\t}\n"

    def make(memory):
        def caddyfile(port, admin):
            return global_options(admin, threads=6, servers=servers, global_extra=f"""\t\tprocesses 2
		php_ini extension {crashext}
		php_ini memory_limit {memory}
		shutdown_timeout 5s
		response_buffer 1MB
		response_buffer_total 8MB
		background {{
			file {root}/alarm.php
			env ALARMS_FILE {alarms}
		}}""") + f"""
:{port} {{
	bind 127.0.0.1
	root * {root}
	php_worker {{
		env LEDGER_FILE {ledger}
	}}
}}
"""
        return caddyfile
    srv = start_server("processes-crash-suite", make("256M"))
    assert eventually(lambda: len(running_pids(srv)) == 2, timeout=15)
    yield srv, root, ledger, alarms, data, make
    srv.stop()


def curl(srv, path, protocol, out="/dev/null"):
    flag = "--http1.1" if protocol == "http1.1" else "--http2-prior-knowledge"
    return subprocess.run(["curl", "-sS", flag, "-o", out, "-w", "%{http_code} %{size_download}",
                           f"http://127.0.0.1:{srv.port}{path}"], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("protocol", ["http1.1", "h2c"])
def test_under_load_a_crash_after_flush_cuts_its_response_and_nothing_runs_twice(suite, protocol):
    srv, _, ledger, _, _, _ = suite
    load = LedgerLoad(srv)
    time.sleep(0.5)
    p = curl(srv, "/crash_after_flush.php", protocol)
    assert p.returncode in CUT_OFF[protocol], f"curl exit {p.returncode} {p.stdout} {p.stderr}: complete?"
    assert eventually(lambda: len(running_pids(srv)) == 2, timeout=15)
    time.sleep(0.5)
    ok, other = check_ledger(load.stop(), ledger)
    print(f"\n{protocol}: {ok} answered 200, {other} lost with the crashed process")


@pytest.mark.parametrize("protocol", ["http1.1", "h2c"])
def test_under_load_a_100_mib_readfile_arrives_whole(suite, protocol, tmp_path):
    srv, root, ledger, _, data, _ = suite
    pids = running_pids(srv)
    load = LedgerLoad(srv)
    out = tmp_path / "download"
    p = curl(srv, f"/readfile.php?f={root}/data.bin", protocol, out=str(out))
    assert p.returncode == 0 and p.stdout == f"200 {len(data)}", (p.stdout, p.stderr)
    assert hashlib.sha256(out.read_bytes()).digest() == hashlib.sha256(data).digest()
    check_ledger(load.stop(), ledger)
    assert running_pids(srv) == pids, "no process died"


def test_under_load_a_slow_client_of_256_mib_costs_disk_not_memory(suite):
    srv, _, ledger, _, _, _ = suite
    load = LedgerLoad(srv)
    rss = srv.rss_kb()
    s = slow_readers(srv, 1, "/stream.php?mb=256", close=True)[0]
    try:
        # The script ends while the client reads nothing: its response waits in the
        # Caddy process's buffer (8 MB at most) and its spill file.
        time.sleep(8)
        grown = (srv.rss_kb() - rss) / 1024
        assert grown < 96, f"a 256 MiB response held in the Caddy process's memory: RSS +{grown:.0f} MB"
        s.settimeout(60)
        received = 0
        while chunk := s.recv(1 << 20):
            received += chunk.count(b"z")
        assert received == 256 << 20, f"{received} bytes of 256 MiB arrived"
    finally:
        s.close()
    check_ledger(load.stop(), ledger)


def test_under_load_a_crash_while_a_program_it_started_lives_is_seen(suite):
    srv, _, ledger, _, _, _ = suite
    load = LedgerLoad(srv)
    deaths = len([e for e in srv.log_entries() if e.get("msg") == DIED])
    started = time.monotonic()
    assert srv.get("/orphan_crash.php", timeout=30).status == 502
    took = time.monotonic() - started
    assert took < 10, f"the death of a process whose program lives on took {took:.1f} s to be seen"
    assert srv.wait_log(lambda e: e.get("msg") == DIED, count=deaths + 1)
    assert eventually(lambda: len(running_pids(srv)) == 2, timeout=15)
    check_ledger(load.stop(), ledger)
    # Its whole command line, and only it: nothing else on the machine is touched.
    subprocess.run(["pkill", "-KILL", "-x", "-f", "sleep 120.4242"], check=False)


def test_under_load_a_stopped_process_is_replaced_and_its_requests_run_elsewhere(suite):
    srv, _, ledger, _, _, _ = suite
    load = LedgerLoad(srv)
    time.sleep(0.5)
    victim = min(running_pids(srv))
    os.kill(victim, signal.SIGSTOP)
    try:
        assert eventually(lambda: victim not in running_pids(srv), timeout=25)
    finally:
        try:
            os.kill(victim, signal.SIGCONT)
        except ProcessLookupError:
            pass
    assert eventually(lambda: len(running_pids(srv)) == 2, timeout=15)
    time.sleep(0.5)
    # Those it had not started moved to the other process; those running when it stopped
    # were lost with it (502), having run once at most.
    check_ledger(load.stop(), ledger)


def test_under_load_a_crash_during_a_roll_loses_only_its_own_requests(suite):
    srv, _, ledger, _, _, make = suite
    load = LedgerLoad(srv)
    time.sleep(0.5)
    crashed = {}

    def crash():
        time.sleep(0.3)
        crashed["p"] = curl(srv, "/crash_after_flush.php", "http1.1")
    t = threading.Thread(target=crash)
    t.start()
    status, body = srv.load(make("320M")(srv.port, srv.admin_port))
    t.join(30)
    assert status == 200, body
    assert eventually(lambda: len(running_pids(srv)) == 2, timeout=30)
    time.sleep(0.5)
    check_ledger(load.stop(), ledger)
    assert srv.get("/ledger.php?id=after-roll").status == 200


def test_pcntl_alarm_in_a_background_worker_ends_no_process(suite):
    """The background worker arms pcntl_alarm(1) and sleeps past it, again and again: the
    process-directed SIGALRM must not kill the child (PHP threads block the host's
    signals; Go's threads drop it)."""
    srv, _, _, alarms, _, _ = suite
    pids = running_pids(srv)
    deaths = len([e for e in srv.log_entries() if e.get("msg") == DIED])
    assert eventually(lambda: alarms.exists() and alarms.read_text().count("survived") >= 3, timeout=20)
    assert running_pids(srv) == pids
    assert len([e for e in srv.log_entries() if e.get("msg") == DIED]) == deaths
