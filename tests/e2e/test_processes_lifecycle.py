"""`processes N`: the life of a child process (docs/processes.md). A program a script
starts holds none of the child's descriptors, and the child's death is seen whatever
holds its socket; the signals that stop a server do not end a child; a child's
php://stdout is the server's standard output; a child is the image the server runs,
even once an upgrade replaced its file."""
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

from conftest import CADDY, REPO, eventually, free_port, http_get, make_caddyfile, stop_process

DIED = "a PHP process died; the requests it ran were answered 502, and it is replaced"

SLEEP = """<?php
// Sleeps ?ms= milliseconds and names the process that ran it.
usleep((int) ($_GET['ms'] ?? 0) * 1000);
echo "pid=" . getmypid();
"""

# Starts a program that outlives the script (its output to /dev/null, as a script that
# launches a daemon does), notes its pid and the child's in ?marker=, then the child
# dies with it running.
ORPHAN = """<?php
$orphan = trim(exec('sleep 300 > /dev/null 2>&1 & echo $!'));
file_put_contents($_GET['marker'], $orphan . ' ' . getmypid());
posix_kill(getmypid(), 9); // SIGKILL
sleep(10);
"""


def app(tmp_path, **scripts):
    """A site root in tmp_path with sleep.php and the scripts given (name: source)."""
    root = tmp_path / "public"
    root.mkdir(exist_ok=True)
    (root / "sleep.php").write_text(SLEEP)
    for name, source in scripts.items():
        (root / f"{name}.php").write_text(source)
    return root


def caddyfile(root, processes=2, threads=4, extra=""):
    def make(port, admin):
        return make_caddyfile(port, admin, app=root, threads=threads,
                              global_extra=f"\t\tprocesses {processes}\n{extra}")
    return make


def pid_of(text):
    return int(text[4:].split()[0]) if text.startswith("pid=") else None


def running_pids(threads):
    return {p["pid"] for p in threads["processes"] if p["state"] == "running"}


def in_background(call):
    """Runs call() on a thread; the returned dict gets "result" or "error"."""
    out = {}

    def run():
        try:
            out["result"] = call()
        except Exception as e:  # noqa: BLE001 (kept for the assertion)
            out["error"] = repr(e)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    out["thread"] = t
    return out


def socket_descriptors(pid):
    """The sockets and memfds among the open descriptors of a process: {fd: target}."""
    found = {}
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:") or target.startswith("/memfd:"):
            found[int(fd.name)] = target
    return found


def test_a_program_a_script_starts_holds_no_wire_and_the_death_is_seen(start_server, tmp_path):
    """A script starts `sleep 300 &`, then its child dies (SIGKILL) while it runs. The
    program holds neither the child's socket (descriptor 3) nor its taken table (4): the
    death is logged at once, the request is answered 502, the child is replaced, and
    the server serves and answers its admin API."""
    marker = tmp_path / "orphan.txt"
    srv = start_server("lifecycle-orphan", caddyfile(app(tmp_path, orphan=ORPHAN)))
    before = running_pids(srv.threads())
    started = time.monotonic()
    answer = in_background(lambda: srv.get(f"/orphan.php?marker={marker}", timeout=20).status)
    orphan = None
    try:
        assert eventually(lambda: marker.exists() and len(marker.read_text().split()) == 2)
        orphan, victim = (int(x) for x in marker.read_text().split())
        died = srv.wait_log(lambda e: e.get("msg") == DIED, timeout=5)
        assert died, f"no death logged {time.monotonic() - started:.1f}s after the child was killed"
        assert died[0]["pid"] == victim and died[0]["how"] == "killed by SIGKILL", died
        answer["thread"].join(10)
        assert answer.get("result") == 502, answer
        assert Path(f"/proc/{orphan}").exists(), "the program the script started lives on"
        assert socket_descriptors(orphan) == {}, "the program holds the child's wire or taken table"
        assert eventually(lambda: len(running_pids(srv.threads())) == 2
                          and victim not in running_pids(srv.threads()), timeout=15)
        assert running_pids(srv.threads()) != before
        assert all(http_get(srv.port, "/sleep.php")[0] == 200 for _ in range(10))
    finally:
        if orphan:
            try:
                os.kill(orphan, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert srv.stop() == 0


def test_a_process_lives_through_the_signals_that_stop_a_server(start_server, tmp_path):
    """`pkill php_worker` signals the children too: a child that gets SIGTERM, SIGINT,
    SIGHUP and SIGQUIT while it runs a request finishes it (200) and serves on; only the
    Caddy process decides when a child ends."""
    srv = start_server("lifecycle-signals", caddyfile(app(tmp_path)))
    children = running_pids(srv.threads())
    answer = in_background(lambda: srv.get("/sleep.php?ms=2500", timeout=20))
    assert eventually(lambda: any(p["requests"] == 1 for p in srv.threads()["processes"]))
    busy = next(p["pid"] for p in srv.threads()["processes"] if p["requests"] == 1)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
        try:
            os.kill(busy, sig)
        except ProcessLookupError:
            raise AssertionError(f"the child died before {sig.name}: {srv.log_text()[-2000:]}") from None
        time.sleep(0.2)
    answer["thread"].join(20)
    r = answer.get("result")
    assert r is not None and (r.status, pid_of(r.text)) == (200, busy), answer
    assert not [e for e in srv.log_entries() if e.get("msg") == DIED], srv.log_text()[-3000:]
    assert running_pids(srv.threads()) == children
    served = {pid_of(srv.get("/sleep.php").text) for _ in range(10)}
    assert served == children, served
    assert srv.stop() == 0


HUNG = "a PHP process answered no ping; killing it as hung"


def test_a_process_that_stops_answering_is_killed_and_replaced(start_server, tmp_path):
    """A child stopped with SIGSTOP (a debugger, the cgroup freezer) answers nothing.
    Snapshots wait at most 2 s for it and show it as not answering, readiness holds
    while the other child runs, and after 10 s without an answer to its pings it is
    killed and replaced. Requests sent to it while it was stopped ran nowhere yet:
    they run in the other child, 200."""
    srv = start_server("lifecycle-hung", caddyfile(app(tmp_path)))
    children = running_pids(srv.threads())
    victim = min(children)
    os.kill(victim, signal.SIGSTOP)
    try:
        answers = [in_background(lambda: srv.get("/sleep.php", timeout=40)) for _ in range(4)]
        started = time.monotonic()
        threads = srv.threads()
        took = time.monotonic() - started
        assert took < 4, f"the thread list waited {took:.1f} s for a stopped child"
        states = {p["pid"]: p["state"] for p in threads["processes"]}
        assert states[victim] == "not_answering", states
        assert srv.admin("GET", "/php_worker/ready")[0] == 200, "the other child serves"
        hung = srv.wait_log(lambda e: e.get("msg") == HUNG, timeout=20)
        assert hung and hung[0]["pid"] == victim, srv.log_text()[-3000:]
        died = srv.wait_log(lambda e: e.get("msg") == DIED, timeout=5)
        assert died and died[0]["pid"] == victim and died[0]["how"] == "killed by SIGKILL", died
        for answer in answers:
            answer["thread"].join(30)
            r = answer.get("result")
            assert r is not None and r.status == 200 and pid_of(r.text) != victim, answer
    finally:
        try:
            os.kill(victim, signal.SIGCONT)
        except ProcessLookupError:
            pass
    assert eventually(lambda: len(running_pids(srv.threads())) == 2 and victim not in running_pids(srv.threads()),
                      timeout=15)
    assert srv.stop() == 0


# A background worker that notes when each copy starts and ends, with its pid; told to
# stop, it takes a second to finish its work, as a queue consumer finishing a job does.
NOTED_BACKGROUND = """<?php
$log = getenv('NOTES');
file_put_contents($log, sprintf("start %d %.6f\\n", getmypid(), microtime(true)), FILE_APPEND | LOCK_EX);
while (!php_worker_wait_stop(0.1)) {
}
usleep(1000000);
file_put_contents($log, sprintf("end %d %.6f\\n", getmypid(), microtime(true)), FILE_APPEND | LOCK_EX);
"""


def test_a_roll_never_runs_two_copies_of_a_single_background_worker(start_server, tmp_path):
    """A `num 1` background worker with processes 2, and a php_ini reload, which starts
    a new child per slot and retires the old one: the new child's copy starts only once
    the old child's copy ended, as a worker restart does in one process."""
    (tmp_path / "bg.php").write_text(NOTED_BACKGROUND)
    notes = tmp_path / "notes"

    def make(memory):
        def caddyfile_(port, admin):
            return make_caddyfile(port, admin, app=app(tmp_path), threads=4, global_extra=f"""\t\tprocesses 2
		shutdown_timeout 3s
		php_ini memory_limit {memory}
		background {{
			file {tmp_path}/bg.php
			env NOTES {notes}
		}}""")
        return caddyfile_
    srv = start_server("lifecycle-roll-background", make("128M"))
    assert eventually(lambda: notes.exists() and notes.read_text().count("start") == 1, timeout=15)
    before = running_pids(srv.threads())
    status, body = srv.load(make("256M")(srv.port, srv.admin_port))
    assert status == 200, body
    after = set()
    assert eventually(lambda: (after := running_pids(srv.threads())) and not after & before, timeout=30)

    def events():
        return [(kind, int(pid), float(at)) for kind, pid, at in (line.split() for line in notes.read_text().splitlines())]
    # The load restarts the copy in its old child first (a new config), then the roll
    # moves it to the slot's new child.
    assert eventually(lambda: any(kind == "start" and pid not in before for kind, pid, _ in events()), timeout=15), \
        notes.read_text()
    running = 0
    for kind, _pid, _at in sorted(events(), key=lambda e: e[2]):
        running += 1 if kind == "start" else -1
        assert running <= 1, f"two copies ran at once: {notes.read_text()}"
    assert srv.stop() == 0


class Started:
    """A server run from `binary` with a Caddyfile, its standard output and standard
    error each in a file of its own (conftest's Server merges them)."""

    def __init__(self, workdir, make, binary=CADDY):
        self.port, self.admin_port, self.workdir = free_port(), free_port(), workdir
        config = workdir / "Caddyfile"
        config.write_text(make(self.port, self.admin_port))
        self.out_path, self.err_path = workdir / "stdout.log", workdir / "stderr.log"
        self.out, self.err = open(self.out_path, "wb"), open(self.err_path, "wb")
        self.proc = subprocess.Popen([str(binary), "run", "--config", str(config), "--adapter", "caddyfile"],
                                     stdout=self.out, stderr=self.err, cwd=str(REPO),
                                     env=dict(os.environ, HOME=str(workdir), XDG_CONFIG_HOME=str(workdir),
                                              XDG_DATA_HOME=str(workdir)))
        ready = eventually(lambda: self.proc.poll() is not None or "PHP engine started" in self.stderr(), timeout=30)
        if not ready or self.proc.poll() is not None:
            self.stop()
            raise RuntimeError(f"the server did not start:\n{self.stderr()[-3000:]}")

    def stdout(self):
        return self.out_path.read_text(errors="replace")

    def stderr(self):
        return self.err_path.read_text(errors="replace")

    def php_lines(self):
        """The lines of standard error that are not the admin API's request log."""
        return "\n".join(line for line in self.stderr().splitlines() if '"logger":"admin.api"' not in line)

    def threads(self):
        status, body, _ = http_get(self.admin_port, "/php_worker/threads")
        assert status == 200, body
        return json.loads(body)

    def stop(self):
        status = stop_process(self.proc)
        self.out.close()
        self.err.close()
        return status


# A background worker and a scheduled job that write a line to php://stdout.
STDOUT_BACKGROUND = """<?php
file_put_contents('php://stdout', "background-stdout-marker " . getmypid() . "\\n");
while (!php_worker_wait_stop(5)) {
}
"""
STDOUT_JOB = """<?php
file_put_contents('php://stdout', "job-stdout-marker " . getmypid() . "\\n");
"""


def test_the_stdout_of_a_process_is_the_servers_standard_output(tmp_path):
    """A background worker and a scheduled job in children write to php://stdout: the
    lines come out on the server's standard output, as with processes 1, and not on
    its standard error."""
    (tmp_path / "background.php").write_text(STDOUT_BACKGROUND)
    (tmp_path / "job.php").write_text(STDOUT_JOB)
    extra = f"""\t\tbackground {tmp_path}/background.php
		schedule "@every 1s" {tmp_path}/job.php
"""
    srv = Started(tmp_path, caddyfile(app(tmp_path), extra=extra))
    try:
        children = running_pids(srv.threads())
        assert eventually(lambda: "background-stdout-marker" in srv.stdout() and "job-stdout-marker" in srv.stdout(),
                          timeout=10), f"stdout: {srv.stdout()[-1000:]!r}; in stderr: " \
                                       f"{[line for line in srv.stderr().splitlines() if 'stdout-marker' in line]}"
        assert "stdout-marker" not in srv.stderr()
        writers = {int(line.split()[1]) for line in srv.stdout().splitlines() if "stdout-marker" in line}
        assert writers and writers <= children, (writers, children)
    finally:
        assert srv.stop() == 0


def test_a_new_process_runs_the_servers_image_after_its_file_is_replaced(tmp_path):
    """The server runs from a file an upgrade then replaces (renamed over, as dpkg
    does). A child that dies is replaced by a child of the image the server runs, the
    replaced file's, not of the new file at that path: it serves, and its
    /proc/<pid>/exe is the old (deleted) file; its command line and name are the path's."""
    binary = tmp_path / "php_worker"
    shutil.copy2(CADDY, binary)
    image = os.stat(binary)
    srv = Started(tmp_path, caddyfile(app(tmp_path)), binary=binary)
    try:
        before = sorted(srv.threads()["processes"], key=lambda p: p["process"])
        assert len(before) == 2
        upgrade = tmp_path / "php_worker.new"
        upgrade.write_text("#!/bin/sh\necho 'the new file at the path ran' >&2\nexit 3\n")
        upgrade.chmod(0o755)
        os.rename(upgrade, binary)
        victim = before[0]["pid"]
        os.kill(victim, signal.SIGKILL)
        assert eventually(lambda: len(running_pids(srv.threads())) == 2
                          and victim not in running_pids(srv.threads()), timeout=15), srv.php_lines()[-3000:]
        assert "the new file at the path ran" not in srv.stderr()
        new = (running_pids(srv.threads()) - {p["pid"] for p in before}).pop()
        exe = Path(f"/proc/{new}/exe")
        assert os.readlink(exe) == f"{binary} (deleted)", os.readlink(exe)
        assert (os.stat(exe).st_ino, os.stat(exe).st_dev) == (image.st_ino, image.st_dev)
        assert Path(f"/proc/{new}/cmdline").read_bytes().split(b"\0")[:2] == [str(binary).encode(), b"php-worker-child"]
        assert Path(f"/proc/{new}/comm").read_text().strip() == "php_worker"
        served = {pid_of(http_get(srv.port, "/sleep.php")[1].decode()) for _ in range(10)}
        assert new in served, served
    finally:
        assert srv.stop() == 0
