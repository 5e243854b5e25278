"""The stores owned by the Rust core: php_worker_local_* (one per PHP thread, outliving
worker restarts) and php_worker_shared_* (one per process), in classic and worker mode."""

import json
import re
import threading
import time
import uuid

import pytest

from conftest import APP, REPO

SCOPES = ["local", "shared"]


def case(srv, name, scope="shared", timeout=30, **params):
    query = "&".join(f"{k}={v}" for k, v in {"case": name, "scope": scope, **params}.items())
    r = srv.get(f"/stores.php?{query}", timeout=timeout)
    assert r.status == 200, (r.status, r.text[:500])
    return json.loads(r.text)


@pytest.mark.parametrize("scope", SCOPES)
def test_values_come_back_identical_and_objects_equal(php, scope):
    out = case(php, "roundtrip", scope, prefix=uuid.uuid4().hex[:8])
    assert out == {name: True for name in out}, {k: v for k, v in out.items() if not v}
    assert {"binary", "nested", "order", "max", "min", "date", "mixed"} <= set(out)


@pytest.mark.parametrize("scope", SCOPES)
def test_every_function(php, scope):
    out = case(php, "api", scope, prefix=uuid.uuid4().hex[:8])
    assert out == {
        "missing": None, "default": "fallback", "put": True, "get": "v1", "add_existing": False, "still": "v1",
        "forget": True, "forget_again": False, "add_missing": True, "after_add": "v3",
        "inc_new": 1, "inc_by": 11, "dec": 7, "inc_string": False, "inc_float": False, "inc_overflow": False,
        "get_int": 7, "count_grows": 1, "flush": True, "count_after_flush": 0, "gone": "gone",
    }


@pytest.mark.parametrize("scope", SCOPES)
def test_errors_name_the_key(php, scope):
    out = case(php, "errors", scope)
    fn = f"php_worker_{scope}_"
    assert out["closure"] == f'TypeError: {fn}put(): Argument #2 ($value) cannot be stored: it holds a Closure (key "with-closure")'
    assert out["nested_closure"].startswith("TypeError:") and 'Closure (key "nested")' in out["nested_closure"]
    assert out["resource"] == f'TypeError: {fn}add(): Argument #2 ($value) cannot be stored: it holds a resource (key "res")'
    assert out["empty_key"] == f"ValueError: {fn}put(): Argument #1 ($key) must be a non-empty string of at most 250 bytes"
    assert out["long_key"] == f"ValueError: {fn}get(): Argument #1 ($key) must be a non-empty string of at most 250 bytes"
    assert out["longest_key"] == "no error"
    assert out["negative_ttl"] == f"ValueError: {fn}put(): Argument #3 ($ttl) must be greater than or equal to 0"
    assert out["refused_not_stored"] == "absent"


@pytest.mark.parametrize("scope", SCOPES)
def test_expired_entries_are_never_returned(server, scope):
    out = case(server, "ttl", scope, prefix=uuid.uuid4().hex[:8])
    assert out == {"put": True, "now": "short", "later": "expired", "count_drop": 1, "add_after_expiry": True,
                   "inc_after_expiry": 1, "touch": True, "touch_missing": False, "touched": ["kept", "forever"],
                   "touch_expired": False}


@pytest.fixture(scope="module")
def stores(start_server):
    """The app's fixtures run by worker executors: one thread restarted every 2 requests,
    and two threads that live on; small stores."""
    return start_server("stores", threads=5, global_extra="\t\tshared_store_size 8MiB\n\t\tlocal_store_size 64KiB\n"
                        "\t\tphp_ini memory_limit 256M", site_extra=f"""\t\tworker {{
			file {APP}/executor.php
			name recycled
			num 1
			max_requests 2
			match /recycled/*
		}}
		worker {{
			file {APP}/executor.php
			name pair
			num 2
			match /pair/*
		}}""")


def test_the_local_store_outlives_worker_restarts_on_its_thread(stores):
    seen = [json.loads(stores.get("/recycled/stores.php?case=counter").text) for _ in range(6)]
    assert len({s["thread"] for s in seen}) == 1, "one thread"
    assert [s["local"] for s in seen] == [1, 2, 3, 4, 5, 6], "max_requests 2 restarted the script twice; the store stayed"


def test_local_stores_are_separate_between_threads_and_the_shared_one_is_seen_by_all(stores):
    results, lock = [], threading.Lock()

    def client():
        for _ in range(20):
            r = json.loads(stores.get("/pair/stores.php?case=counter").text)
            with lock:
                results.append(r)

    before = json.loads(stores.get("/stores.php?case=get&key=hits").text) or 0
    threads = [threading.Thread(target=client) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    by_thread = {}
    for r in results:
        by_thread.setdefault(r["thread"], []).append(r["local"])
    assert len(by_thread) == 2, "both threads of the pair served"
    for counts in by_thread.values():
        assert sorted(counts) == list(range(min(counts), min(counts) + len(counts))), \
            "each thread's local counter counts only its own requests"
    after = json.loads(stores.get("/stores.php?case=get&key=hits").text)
    assert after == before + 80, "the shared counter saw every thread's increment, worker and classic alike"


def test_increments_and_adds_are_atomic_across_threads(stores):
    key = f"atomic-{uuid.uuid4().hex[:8]}"
    errors = []

    def client(path):
        for _ in range(5):
            r = stores.get(f"{path}?case=inc&key={key}&n=200")
            if r.status != 200:
                errors.append(r.status)

    paths = ["/pair/stores.php", "/pair/stores.php", "/stores.php", "/stores.php", "/recycled/stores.php"]
    threads = [threading.Thread(target=client, args=(p,)) for p in paths for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert json.loads(stores.get(f"/stores.php?case=get&key={key}").text) == 10 * 5 * 200
    assert json.loads(stores.get(f"/stores.php?case=get&key={key}-once").text) is not False


@pytest.mark.parametrize("scope,capacity,size", [("shared", 8 << 20, 32 << 10), ("local", 64 << 10, 1 << 10)])
def test_a_full_store_refuses_puts_and_evicts_nothing(stores, scope, capacity, size):
    prefix = uuid.uuid4().hex[:8]
    out = case(stores, "fill", scope, prefix=prefix, n=400, size=size)
    assert 0 < out["stored"] < 400, out
    assert out["stored"] * size <= capacity, "the capacity bounds what is stored"
    assert out["first"], "no live entry was evicted to make room"
    line = stores.wait_log(lambda e: e.get("msg") == "a store is full: puts are refused until entries expire or are forgotten"
                           and e.get("store") == scope)
    assert line and line[0]["level"] == "warn" and line[0]["setting"] == f"{scope}_store_size"
    assert case(stores, "api", scope, prefix=prefix)["flush"], "flush empties it"
    assert case(stores, "put", scope, key="after-flush", value="ok") is True


def test_a_memory_limit_bailout_while_reading_a_big_value_leaves_the_store_usable(stores):
    assert case(stores, "flush", "shared") is not None
    assert case(stores, "put", "shared", key="big", size=5 << 20, timeout=60) is True
    r = stores.get("/stores.php?case=big-get&scope=shared&key=big&limit=4M")
    assert r.status == 500, "a 4M memory_limit is hit while the 5 MB value is rebuilt in PHP"
    for path in ["/stores.php", "/pair/stores.php", "/pair/stores.php", "/recycled/stores.php"]:
        assert json.loads(stores.get(f"{path}?case=get&scope=shared&key=big").text) == {"len": 5 << 20}
        assert case(stores, "put", "shared", key="still", value="writable") is True


def test_the_shared_table_survives_a_reload_and_a_php_restart(stores):
    key = f"reload-{uuid.uuid4().hex[:8]}"
    assert case(stores, "put", "shared", key=key, value="kept") is True
    config = (stores.workdir / "Caddyfile").read_text()
    status, body = stores.load(config, force=True)
    assert status == 200, body
    # The first request after a load may meet a connection the old listener accepted
    # and closed (docs/reloads-and-admin-api.md): send it again, as clients do.
    assert json.loads(stores.get(f"/pair/stores.php?case=get&key={key}", resend=True).text) == "kept"
    # A php_ini change restarts PHP itself: the table belongs to the process.
    status, body = stores.load(config.replace("memory_limit 256M", "memory_limit 200M"))
    assert status == 200, body
    assert stores.wait_log(lambda e: e.get("msg") == "php_ini changed: restarting PHP; requests wait for it")
    assert json.loads(stores.get(f"/pair/stores.php?case=get&key={key}", resend=True).text) == "kept"
    assert json.loads(stores.get(f"/stores.php?case=get&key={key}").text) == "kept"


def test_no_memory_growth_after_100000_put_forget_cycles(server):
    case(server, "churn", "shared", timeout=120)
    case(server, "churn", "local", timeout=120)
    before = server.rss_kb()
    for scope in SCOPES * 2:
        assert case(server, "churn", scope, timeout=120)["count"] >= 0
    growth = server.rss_kb() - before
    assert growth < 4096, f"RSS grew {growth} KB over 400,000 more put/forget cycles"


def test_the_demo_shows_its_counters_thread_and_worker(start_server):
    """The repository's Caddyfile serves the demo in worker mode, with its counters."""
    demo = (REPO / "Caddyfile").read_text()

    def config(port, admin):
        first = "{\n\tphp_worker {"
        assert first in demo
        return demo.replace(":8080 {", f":{port} {{").replace(
            first, f"{{\n\tadmin 127.0.0.1:{admin}\n\tpersist_config off\n\tlog {{\n\t\tformat json\n\t}}\n\tphp_worker {{", 1)

    srv = start_server("demo", config)
    rows = []
    for _ in range(4):
        r = srv.get("/")
        assert r.status == 200
        rows.append(dict(re.findall(r"<tr><th align=left>(.*?)</th><td>(.*?)</td></tr>", r.text)))
    assert all(r["Mode"].startswith("worker") for r in rows)
    shared = [int(r["Requests served by the shared table (all threads)"]) for r in rows]
    assert shared == list(range(shared[0], shared[0] + 4)), "the shared counter counts every request"
    by_thread = {}
    for r in rows:
        by_thread.setdefault(r["PHP thread"], []).append(int(r["Requests served by this thread (its local store)"]))
    assert sum(len(v) for v in by_thread.values()) == 4
    for counts in by_thread.values():
        assert counts == sorted(counts), "each thread counts its own requests"
    assert all(int(r["Requests served by this booted worker script"]) >= 1 for r in rows)
    assert srv.get("/info.php").status == 200
    assert srv.get("/style.css").status == 200
