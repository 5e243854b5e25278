"""The task adapters (adapters/) in the Laravel 8 test app: PhpWorker\\Tasks::concurrently()
sends closures, serialised by laravel/serializable-closure as Octane sends them, to a
task worker that boots the app once per thread."""

from pathlib import Path

import pytest

from conftest import WORK

LARAVEL = Path(__file__).resolve().parent / "laravel"
FRAMEWORK = Path("/usr/share/php/Illuminate/autoload.php")
NAME = "laravel-tasks"


@pytest.fixture(scope="module")
def app(start_server):
    if not FRAMEWORK.exists():
        pytest.fail(f"{FRAMEWORK} is missing: install Debian's php-laravel-framework "
                    "(scripts/install-deps.sh --tests does)")
    cache = WORK / NAME / "laravel-cache"
    return start_server(NAME, app=LARAVEL / "public", threads=6, global_extra=f"""\t\ttask_worker {{
			file {LARAVEL}/task-worker.php
			name tasks
			num 3
			env LARAVEL_CACHE_DIR {cache}
		}}""", site_extra=f"""\t\troot {LARAVEL}/public
		index worker.php
		file_server off
		worker {{
			file worker.php
			num 2
			env LARAVEL_CACHE_DIR {cache}
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
