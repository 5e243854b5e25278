"""The stores' PHP adapters (adapters/) in a Laravel app: the php_worker cache driver
and PhpWorker\\Table, served in worker mode by two threads that share one table.

The app (tests/e2e/laravel) runs on Debian's php-laravel-framework: Laravel 8 and a
current Laravel (conftest.laravel)."""

import concurrent.futures
import json
import time
import uuid
from pathlib import Path
from urllib.parse import urlencode

import pytest

from conftest import LARAVEL_INI, WORK

LARAVEL = Path(__file__).resolve().parent / "laravel"


@pytest.fixture(scope="module")
def app(start_server, laravel):
    version, root = laravel
    name = f"laravel{version}-store"
    srv = start_server(name, app=LARAVEL / "public", threads=4, global_extra=LARAVEL_INI, site_extra=f"""\t\troot {LARAVEL}/public
		index worker.php
		file_server off
		worker {{
			file worker.php
			num 2
			env LARAVEL_CACHE_DIR {WORK / name / "laravel-cache"}
			env LARAVEL_PHP_ROOT {root}
		}}""")
    r = srv.get("/raw?k=probe")
    assert r.status == 200, f"the Laravel app does not answer: {r.status} {r.text[:2000]}\n{srv.log_text()[-3000:]}"
    assert r.json()["store"] == "PhpWorker\\Laravel\\PhpWorkerStore"
    return srv


def call(srv, path, **query):
    """GET path?query, decoded; the app answers JSON."""
    url = path + ("?" + urlencode(query) if query else "")
    r = srv.get(url)
    assert r.status == 200, f"{url}: {r.status} {r.text[:2000]}"
    return r.json()


def key():
    return uuid.uuid4().hex[:12]


def test_values_round_trip(app):
    for type_, v in (("string", "hello wörld"), ("int", "42"), ("float", "1.5"), ("bool", "true"),
                     ("array", "x"), ("object", "y"), ("carbon", "2024-05-06 07:08:09")):
        k = key()
        assert call(app, "/put", k=k, type=type_, v=v, ttl=60)["stored"] is True
        got = call(app, "/get", k=k, type=type_, v=v)
        assert got["equal"] is True, (type_, got)
        if type_ in ("object", "carbon"):
            assert got["type"] in ("stdClass", "Illuminate\\Support\\Carbon"), got
        else:
            assert got["identical"] is True, (type_, got)  # stored natively
    assert call(app, "/get", k=k)["value"] == "2024-05-06T07:08:09.000000Z"

    k = key()
    assert call(app, "/forever", k=k, type="array", v="z")["stored"] is True
    assert call(app, "/get", k=k, type="array", v="z")["identical"] is True

    # The store's keys are its prefix (config/cache.php: "lt"), a colon and the key.
    raw = call(app, "/raw", k=f"lt:{k}")
    assert raw["prefix"] == "lt:" and raw["value"]["v"] == "z"

    long_key = "k" * 300  # over the table's 250 bytes: stored under its hash
    assert call(app, "/put", k=long_key, v="long", ttl=60)["stored"] is True
    assert call(app, "/get", k=long_key)["value"] == "long"


def test_ttl_expires(app):
    k = key()
    assert call(app, "/put", k=k, v="brief", ttl=1)["stored"] is True
    assert call(app, "/get", k=k)["value"] == "brief"
    time.sleep(2.1)
    assert call(app, "/get", k=k)["type"] == "null"
    # Laravel forgets a key put with a TTL of 0 and never adds one.
    assert call(app, "/put", k=k, v="x")["stored"] is True
    call(app, "/put", k=k, v="gone", ttl=0)
    assert call(app, "/get", k=k)["type"] == "null"
    assert call(app, "/add", k=k, v="x", ttl=0)["added"] is False


def test_add_only_when_absent(app):
    k = key()
    assert call(app, "/add", k=k, v="first", ttl=60)["added"] is True
    assert call(app, "/add", k=k, v="second", ttl=60)["added"] is False
    assert call(app, "/get", k=k)["value"] == "first"

    # Concurrent adds of one key, served by both threads: exactly one wins.
    k = key()
    with concurrent.futures.ThreadPoolExecutor(max_workers=10) as pool:
        results = list(pool.map(lambda i: (i, call(app, "/add", k=k, v=f"v{i}", ttl=60)), range(40)))
    winners = [i for i, d in results if d["added"]]
    assert len(winners) == 1, results
    assert len({d["boot"] for _, d in results}) == 2, "both worker threads served"
    assert call(app, "/get", k=k)["value"] == f"v{winners[0]}"


def test_increment_and_decrement(app):
    k = key()
    assert call(app, "/inc", k=k)["value"] == 1, "a missing key starts at 0"
    assert call(app, "/inc", k=k, by=5)["value"] == 6
    assert call(app, "/dec", k=k, by=2)["value"] == 4
    assert call(app, "/dec", k=k)["value"] == 3
    assert call(app, "/get", k=k, type="int", v="3")["identical"] is True
    s = key()
    call(app, "/put", k=s, v="abc", ttl=60)
    assert call(app, "/inc", k=s)["value"] is False, "not an integer"

    # Increments from both threads at once are never lost.
    k = key()
    with concurrent.futures.ThreadPoolExecutor(max_workers=10) as pool:
        results = list(pool.map(lambda _: call(app, "/inc", k=k), range(100)))
    assert sorted(d["value"] for d in results) == list(range(1, 101))
    assert len({d["boot"] for d in results}) == 2
    assert call(app, "/get", k=k)["value"] == 100


def test_many_and_put_many(app):
    p = key() + "."
    assert call(app, "/putmany", p=p, ttl=60)["stored"] is True
    values = call(app, "/many", keys=f"{p}a,{p}b,{p}c,{p}missing")["values"]
    assert values == {f"{p}a": 1, f"{p}b": "two", f"{p}c": {"three": 3}, f"{p}missing": None}
    p = key() + "."
    assert call(app, "/putmany", p=p)["stored"] is True  # forever
    assert call(app, "/many", keys=f"{p}b")["values"] == {f"{p}b": "two"}


def test_forget(app):
    k = key()
    call(app, "/put", k=k, v="x", ttl=60)
    assert call(app, "/forget", k=k)["forgotten"] is True
    assert call(app, "/forget", k=k)["forgotten"] is False
    assert call(app, "/get", k=k)["type"] == "null"


def test_every_thread_sees_what_one_put(app):
    k = key()
    put = call(app, "/put", k=k, type="array", v="shared", ttl=60)
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        gets = list(pool.map(lambda _: call(app, "/get", k=k, type="array", v="shared"), range(60)))
    assert all(d["identical"] for d in gets), gets
    boots = {d["boot"] for d in gets}
    assert len(boots) == 2 and put["boot"] in boots, "the other thread read it too"

    # Cache::remember computes once; the other thread gets the stored value.
    r = key()
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        first = call(app, "/remember", k=r)
        rest = list(pool.map(lambda _: call(app, "/remember", k=r), range(30)))
    assert all(d["value"] == first["value"] for d in rest)
    assert {d["boot"] for d in rest} - {first["value"]["computed_by"]}, "a thread that did not compute it read it"


def table(srv, op, **query):
    return call(srv, f"/table/{op}", **query)["result"]


def test_table(app):
    t = "t" + key()
    assert table(app, "count", t=t) == 0
    assert table(app, "get", t=t, key="ann") is False
    row = {"name": "Ann", "votes": 3, "score": 1.5}
    assert table(app, "set", t=t, key="ann", row=json.dumps(row)) is True
    assert table(app, "get", t=t, key="ann") == row
    assert table(app, "get", t=t, key="ann", col="name") == "Ann"
    assert table(app, "get", t=t, key="ann", col="votes") == 3
    assert table(app, "get", t=t, key="ann", col="nope") is False
    assert table(app, "exists", t=t, key="ann") is True
    assert table(app, "exists", t=t, key="bob") is False
    assert table(app, "incr", t=t, key="ann", col="votes") == 4
    assert table(app, "incr", t=t, key="ann", col="votes", by=10) == 14
    assert table(app, "decr", t=t, key="ann", col="votes", by=4) == 10
    assert table(app, "incr", t=t, key="ann", col="score", by="0.25") == 1.75
    assert table(app, "incr", t=t, key="ann", col="name") is False, "not a number"
    # set() on an existing row replaces the columns given, as Swoole\Table does.
    assert table(app, "set", t=t, key="ann", row=json.dumps({"name": "Anne"})) is True
    assert table(app, "get", t=t, key="ann") == {"name": "Anne", "votes": 10, "score": 1.75}
    assert table(app, "count", t=t) == 1
    assert table(app, "incr", t=t, key="bob", col="visits", by=2) == 2, "incr creates the row"
    assert table(app, "count", t=t) == 2
    assert table(app, "get", t=t, key="bob") == {"visits": 2}
    assert table(app, "del", t=t, key="ann") is True
    assert table(app, "del", t=t, key="ann") is False
    assert table(app, "get", t=t, key="ann") is False
    assert table(app, "exists", t=t, key="ann") is False
    assert table(app, "count", t=t) == 1
    other = "t" + key()
    assert table(app, "count", t=other) == 0, "each table counts its own rows"

    # The layout in the shared table (adapters/src/Table.php).
    assert call(app, "/raw", k=f"table:{t}")["value"] == 1
    assert call(app, "/raw", k=f"table:{t}:bob:visits")["value"] == 2


def test_table_concurrent_increments(app):
    t = "t" + key()
    with concurrent.futures.ThreadPoolExecutor(max_workers=10) as pool:
        results = list(pool.map(lambda _: call(app, "/table/incr", t=t, key="row", col="hits"), range(100)))
    assert sorted(d["result"] for d in results) == list(range(1, 101))
    assert len({d["boot"] for d in results}) == 2
    assert table(app, "get", t=t, key="row") == {"hits": 100}
    assert table(app, "count", t=t) == 1, "the row was created once"


def test_flush_empties_the_table(app):
    k = key()
    call(app, "/put", k=k, v="x", ttl=60)
    t = "t" + key()
    table(app, "set", t=t, key="r", row=json.dumps({"a": 1}))
    assert call(app, "/flush")["flushed"] is True
    assert call(app, "/get", k=k)["type"] == "null"
    assert table(app, "exists", t=t, key="r") is False
    assert table(app, "count", t=t) == 0, "flush empties the whole table, tables included"


def test_a_web_page_keeps_its_session_across_worker_threads(app):
    """/page goes through the `web` middleware group: encrypted cookies, a file session,
    a CSRF token and a Blade view. Its session count goes on whichever thread serves it."""
    first = app.get("/page")
    assert first.status == 200, first.text[:2000]
    assert first.header("Content-Type").startswith("text/html")
    assert "<h1>php_worker on Laravel</h1>" in first.text and "Visit 1 of this session." in first.text
    assert first.text.count("<li>") == 20 and "Item 20: 25.00" in first.text
    cookies = {c.split("=", 1)[0]: c.split(";", 1)[0] for c in first.headers_all("Set-Cookie")}
    assert set(cookies) >= {"laravel_session", "XSRF-TOKEN"}, first.headers_all("Set-Cookie")
    jar = "; ".join(cookies.values())
    for visit in range(2, 6):
        r = app.get("/page", headers={"Cookie": jar})
        assert r.status == 200 and f"Visit {visit} of this session." in r.text, r.text[:2000]
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        rest = list(pool.map(lambda _: app.get("/page", headers={"Cookie": jar}), range(40)))
    assert all(r.status == 200 and "Visit " in r.text for r in rest), [r.status for r in rest]
    assert len({r.header("X-Boot") for r in rest}) == 2, "both worker threads served the session"
    # Laravel's file sessions do not lock: concurrent visits may count once, not lose it.
    last = app.get("/page", headers={"Cookie": jar}).text
    assert int(last.split("Visit ")[1].split(" ")[0]) > 6, last[:500]
    fresh = app.get("/page")
    assert "Visit 1 of this session." in fresh.text, "a client without the cookie starts a new session"
