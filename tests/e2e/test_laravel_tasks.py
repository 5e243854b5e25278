"""Background work in the Laravel test app (Laravel 8 and a current one, conftest.laravel): the task adapters (adapters/), where
PhpWorker\\Tasks::concurrently() sends closures, serialised by laravel/serializable-closure
as Octane sends them, to a task worker that boots the app once per thread; and artisan
schedule:run as a scheduled job."""

import json
from pathlib import Path

import pytest

from conftest import LARAVEL_INI, WORK, eventually

LARAVEL = Path(__file__).resolve().parent / "laravel"


@pytest.fixture(scope="module")
def app(start_server, laravel):
    version, root = laravel
    name = f"laravel{version}-tasks"
    cache = WORK / name / "laravel-cache"
    return start_server(name, app=LARAVEL / "public", threads=6, global_extra=LARAVEL_INI + f"""\t\ttask_worker {{
			file {LARAVEL}/task-worker.php
			name tasks
			num 3
			env LARAVEL_CACHE_DIR {cache}
			env LARAVEL_PHP_ROOT {root}
		}}""", site_extra=f"""\t\troot {LARAVEL}/public
		index worker.php
		file_server off
		worker {{
			file worker.php
			num 2
			env LARAVEL_CACHE_DIR {cache}
			env LARAVEL_PHP_ROOT {root}
		}}""")


def test_concurrently_runs_closures_on_booted_task_threads(app):
    r = app.get("/concurrently?ms=300", timeout=30)
    assert r.status == 200, r.text[:3000]
    d = r.json()
    assert "error" not in d, d
    results = d["results"]
    assert results["sum"] == 6 and results["slow1"] == results["slow2"] == "slept"
    assert results["config"].startswith("php_worker Laravel test on task-"), "the closure ran in the task worker's booted app"
    assert 290 < d["ms"] < 800, f"two 300 ms closures at once took {d['ms']:.0f} ms"


def test_concurrently_rethrows_a_failing_closure(app):
    d = app.get("/concurrently?ms=1&fail=1", timeout=30).json()
    assert d["error"] == "PhpWorker\\TaskException", d
    assert d["message"] == "task bad on worker tasks failed: DomainException: no such order"
    assert "results" in app.get("/concurrently?ms=1").json(), "the task worker goes on"


def test_artisan_schedule_run_as_a_scheduled_job(start_server, laravel, tmp_path, monkeypatch):
    """`schedule "* * * * *" artisan schedule:run` replaces the crontab line: Laravel's
    scheduler runs its due events (here a closure, every minute) in the job's run. The
    clock runs 60 times faster (a test hook): a minute is a second."""
    monkeypatch.setenv("PHP_WORKER_SCHEDULE_CLOCK_SPEED", "60")
    version, root = laravel
    runs = tmp_path / "schedule.log"
    srv = start_server(f"laravel{version}-schedule", app=LARAVEL / "public", threads=2,
                       global_extra=LARAVEL_INI + f"""\t\tschedule "* * * * *" {LARAVEL}/artisan schedule:run {{
			env APP_RUNNING_IN_CONSOLE true
			env SCHEDULE_LOG {runs}
			env LARAVEL_CACHE_DIR {WORK / f"laravel{version}-schedule" / "laravel-cache"}
			env LARAVEL_PHP_ROOT {root}
		}}""")
    assert eventually(lambda: runs.exists() and len(runs.read_text().splitlines()) >= 2, timeout=20), srv.log_text()[-3000:]
    assert json.loads(runs.read_text().splitlines()[0])["app"] == "php_worker Laravel test"
    ended = srv.wait_log(lambda e: e.get("msg") == "scheduled job ended" and e.get("job") == "artisan schedule:run")
    assert ended and ended[0]["exit_status"] == 0, srv.log_text()[-3000:]
    assert "#!/usr/bin/env php" not in srv.log_text(), "artisan's shebang line is skipped, as the CLI does"
