"""The lease keys of scheduled jobs with default names (docs/background-work.md): two apps
whose jobs have the same default name (`job.php`, each in its own folder) and lease in
one Redis database run every time of each app, while the two instances of one of them
still share its times. The jobs run every second (`@every 1s`)."""
import json
import time

from conftest import eventually, make_caddyfile

JOB = """<?php
// One line per run: the time it was due and who ran it.
file_put_contents(getenv('RUNS'), json_encode(['due' => (int) getenv('PHP_WORKER_SCHEDULE_DUE'),
    'pid' => getmypid()]) . "\\n", FILE_APPEND | LOCK_EX);
"""


def runs(path):
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def results(srv, job):
    """The server's php_worker_schedule_runs_total of job, by result."""
    _, text = srv.admin("GET", "/metrics")
    out = {}
    for line in text.splitlines():
        if line.startswith(f'php_worker_schedule_runs_total{{job="{job}"'):
            out[line.split('result="')[1].split('"')[0]] = float(line.rsplit(" ", 1)[1])
    return out


def test_two_apps_with_the_same_default_job_name_each_run_every_time(start_server, redis, tmp_path):
    lease = f"redis://127.0.0.1:{redis}/0"

    def app(name):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "job.php").write_text(JOB)
        log = tmp_path / f"{name}.jsonl"
        block = (f"\t\tschedule \"@every 1s\" {folder / 'job.php'} {{\n\t\t\tenv RUNS {log}\n"
                 f"\t\t\tlease {lease}\n\t\t}}")
        return log, lambda port, admin: make_caddyfile(port, admin, threads=2, global_extra=block)

    log_a, config_a = app("app-a")
    log_b, config_b = app("app-b")
    a1, a2 = start_server("keys-a1", config_a), start_server("keys-a2", config_a)
    b = start_server("keys-b", config_b)
    started = int(time.time()) + 1
    window = range(started + 1, started + 7)
    assert eventually(lambda: all(max([r["due"] for r in runs(log)], default=0) > window[-1] for log in (log_a, log_b)),
                      timeout=20), (runs(log_a), runs(log_b))
    time.sleep(1)  # let the runs of the last times end
    dues_a, dues_b = [r["due"] for r in runs(log_a)], [r["due"] for r in runs(log_b)]
    assert set(window) <= set(dues_a), f"times of app a that ran nowhere: {sorted(set(window) - set(dues_a))}"
    assert set(window) <= set(dues_b), f"times of app b that ran nowhere: {sorted(set(window) - set(dues_b))}"
    assert len(dues_a) == len(set(dues_a)), f"the two instances of app a ran a time twice: {sorted(dues_a)}"
    assert len(dues_b) == len(set(dues_b)), sorted(dues_b)
    # The only instance of app b lost no time to another; those of app a shared theirs.
    counts_a, counts_b = [results(s, "job.php") for s in (a1, a2)], results(b, "job.php")
    assert counts_b.get("elsewhere", 0) == 0 and counts_b.get("ok", 0) == len(dues_b), counts_b
    assert sum(c.get("ok", 0) for c in counts_a) == len(dues_a), counts_a
    assert sum(c.get("elsewhere", 0) for c in counts_a) > 0, counts_a
    for s in (a1, a2, b):
        assert s.stop() == 0
