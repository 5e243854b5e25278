"""`processes N` with `cpu_affinity`: each child on CPUs of its own, the Caddy process
and the child of debugged requests on all of them (docs/processes.md#cpus). The
crashing extension is test_processes.py's."""
import os
import signal
from pathlib import Path

import pytest

from test_processes import caddyfile, crashext, pid_of, processes, running_pids  # noqa: F401
from conftest import eventually

STARTED = "PHP process started"


def cpus_of(pid):
    """The Cpus_allowed_list of each thread of a process, by thread id."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            for line in (task / "status").read_text().splitlines():
                if line.startswith("Cpus_allowed_list:"):
                    out[int(task.name)] = expand(line.split(":", 1)[1].strip())
        except FileNotFoundError:
            pass  # a thread that ended meanwhile
    return out


def expand(cpu_list):
    """A kernel CPU list ("0-2,5") as a frozenset of CPU numbers."""
    cpus = set()
    for part in cpu_list.split(","):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return frozenset(cpus)


def one_set(pid):
    """The CPUs every thread of a process may use, asserted to be the same for all."""
    sets = set(cpus_of(pid).values())
    assert len(sets) == 1, f"process {pid}: its threads differ: {sets}"
    return sets.pop()


@pytest.fixture
def server_cpus():
    cpus = expand(Path("/proc/self/status").read_text().split("Cpus_allowed_list:")[1].split()[0])
    if len(cpus) < 2:
        pytest.skip("one CPU: a child has nothing of its own to run on")
    return cpus


def test_each_child_runs_on_cpus_of_its_own(start_server, crashext, server_cpus):
    """processes 2 with the default cpu_affinity (auto): every thread of each child,
    PHP's and Go's alike, runs on that child's CPUs, the two children's apart, and their
    log line says which. The Caddy process's threads keep every CPU (the thread that
    forked a child was moved back). A child that dies is replaced on its slot's CPUs.
    The child of debugged requests runs on every CPU. Both children serve."""
    srv = start_server("processes-cpus", caddyfile(crashext, threads=4, workers=2,
                                                   extra="\t\tdebug_triggers PW_DEBUG"))
    assert one_set(srv.proc.pid) == server_cpus
    procs = processes(srv)
    shares = [one_set(p["pid"]) for p in procs]
    assert all(shares) and not shares[0] & shares[1] and shares[0] | shares[1] <= server_cpus, shares
    logged = {e["pid"]: e.get("cpus") for e in srv.log_entries() if e.get("msg") == STARTED}
    for p, share in zip(procs, shares):
        assert logged[p["pid"]] and expand(logged[p["pid"]]) == share, (p, logged)
    served = {pid_of(srv.get(f"/w/sleep?ms=200&n={i}").text) for i in range(8)}
    assert served <= {p["pid"] for p in procs}

    # A replacement takes its slot's CPUs.
    killed = procs[1]["pid"]
    os.kill(killed, signal.SIGKILL)
    assert eventually(lambda: len(running_pids(srv)) == 2 and killed not in running_pids(srv), timeout=15)
    replacement = processes(srv)[1]["pid"]
    assert one_set(replacement) == shares[1]

    # The debug child is not pinned: it runs now and then, beside both.
    r = srv.get("/w/sleep?PW_DEBUG=1")
    assert r.status == 200, r.text
    assert one_set(pid_of(r.text)) == server_cpus
    assert one_set(srv.proc.pid) == server_cpus
    assert srv.stop() == 0


def test_cpu_affinity_off_and_its_change_on_a_reload(start_server, crashext, server_cpus):
    """cpu_affinity off: the children run on every CPU, and their log line names none. A
    reload to auto restarts PHP (a setting of the processes, as processes is), and the
    new children run on CPUs of their own."""
    srv = start_server("processes-cpus-off", caddyfile(crashext, extra="\t\tcpu_affinity off"))
    first = running_pids(srv)
    assert len(first) == 2 and all(one_set(pid) == server_cpus for pid in first)
    assert all(e.get("cpus") is None for e in srv.log_entries() if e.get("msg") == STARTED)
    # A value it does not know is refused at load; the running children serve on.
    status, body = srv.load(caddyfile(crashext, extra="\t\tcpu_affinity sometimes")(srv.port, srv.admin_port))
    assert status == 400 and "cpu_affinity must be auto or off" in body, (status, body)
    assert running_pids(srv) == first and srv.get("/w/sleep?ms=1").status == 200
    status, body = srv.load(caddyfile(crashext)(srv.port, srv.admin_port))
    assert status == 200, body
    assert eventually(lambda: len(running_pids(srv)) == 2 and not running_pids(srv) & first, timeout=30)
    assert srv.wait_log(lambda e: e.get("msg") == "cpu_affinity changed: restarting PHP; requests wait for it")
    shares = [one_set(pid) for pid in running_pids(srv)]
    assert all(len(s) < len(server_cpus) for s in shares) and not shares[0] & shares[1], shares
    assert srv.get("/w/sleep?ms=1").status == 200
    assert srv.stop() == 0


def test_more_children_than_cpus_run_where_the_kernel_puts_them(start_server, crashext, server_cpus):
    """One child more than there are CPUs: pinning would give one CPU two children and
    another one, so none is pinned, and the log says why."""
    n = len(server_cpus) + 1
    if n > 8:
        pytest.skip(f"{n} children are too many for this test")
    srv = start_server("processes-cpus-many", caddyfile(crashext, processes=n, threads=n + 1, workers=n))
    assert eventually(lambda: len(running_pids(srv)) == n, timeout=30)
    assert all(one_set(pid) == server_cpus for pid in running_pids(srv))
    why = srv.wait_log(lambda e: e.get("msg") == "cpu_affinity: fewer CPUs than PHP processes; the kernel places them")
    assert why[0]["cpus"] == len(server_cpus) and why[0]["processes"] == n, why
    assert srv.stop() == 0
