"""`processes N` with outputs of any size: responses, log lines and shared table values
larger than one frame of the wire, and responses larger than the memory bounds, cross
from a child as they do in one process (docs/processes.md)."""
import hashlib
import os
import subprocess

import pytest

from conftest import eventually, global_options
from test_operations import metric, scrape
from test_processes import LOST, running_pids
from test_processes_lifecycle import DIED
from test_slow_clients import busy_threads, served, slow_readers, spill_files

SCRIPTS = {
    # One PHP write of the whole file (readfile maps it and writes it at once).
    "readfile.php": "<?php\nheader('Content-Type: application/octet-stream');\nreadfile($_GET['f']);\n",
    # One echo of 65 MiB, past the wire's 64 MiB frame.
    "echo.php": "<?php\necho str_repeat('y', 65 << 20);\n",
    # A log line of 70 MiB.
    "log.php": "<?php\nerror_log('begin ' . str_repeat('L', 70 << 20));\necho 'logged';\n",
    # A shared table value of 70 MiB, in a table that has room for it.
    "store.php": """<?php
$big = php_worker_shared_put('big', str_repeat('s', 70 << 20));
$small = php_worker_shared_put('small', 'v');
echo json_encode([$big, $small, php_worker_shared_get('small'), php_worker_shared_get('big') === null]);
""",
    # 64 KiB writes, each flushed: the response streams while the script runs.
    "stream.php": """<?php
$chunk = str_repeat('z', 65536);
for ($i = 0, $n = (int) $_GET['mb'] * 16; $i < $n; $i++) {
    echo $chunk;
    flush();
}
""",
}


# The scripts hold a few copies of 70 MiB strings.
MEMORY = "\t\tphp_ini memory_limit 512M"


def site(root, global_extra):
    """A php_worker site serving root, with 2 threads and the global options given."""
    def make(port, admin):
        return global_options(admin, threads=2, global_extra=f"{global_extra}\n{MEMORY}") + f"""
:{port} {{
	bind 127.0.0.1
	root * {root}
	php_worker
}}
"""
    return make


def two_processes(root, extra=""):
    return site(root, f"\t\tprocesses 2\n{extra}")


@pytest.fixture
def scripts(tmp_path):
    for name, text in SCRIPTS.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def download(srv, path):
    """The response's status and the SHA-256 and size of its body, via curl."""
    p = subprocess.run(f"curl -sS -o - -w '\\n%{{http_code}}' 'http://127.0.0.1:{srv.port}{path}'",
                       shell=True, capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr
    body, _, status = p.stdout.rpartition(b"\n")
    return int(status), hashlib.sha256(body).hexdigest(), len(body)


def assert_no_process_died(srv, pids):
    entries = srv.log_entries()
    assert not [e for e in entries if e.get("msg") in (DIED, LOST)], srv.log_text()[-3000:]
    assert running_pids(srv) == pids, "the PHP processes that served are the ones that started"


def test_responses_larger_than_a_frame_cross_whole(start_server, scripts):
    """readfile() of 100 MiB and an echo of 65 MiB are each one PHP write, past the
    wire's 64 MiB frame: they arrive whole, and the process that sent them lives on."""
    data = os.urandom(1 << 20) * 100
    (scripts / "data.bin").write_bytes(data)
    srv = start_server("processes-large-responses", two_processes(scripts))
    assert eventually(lambda: len(running_pids(srv)) == 2, timeout=15)
    pids = running_pids(srv)
    assert download(srv, f"/readfile.php?f={scripts}/data.bin") == (200, hashlib.sha256(data).hexdigest(), len(data))
    want = b"y" * (65 << 20)
    assert download(srv, "/echo.php") == (200, hashlib.sha256(want).hexdigest(), len(want))
    assert_no_process_died(srv, pids)
    assert srv.stop() == 0


def test_a_huge_log_line_is_cut_and_the_process_lives(start_server, scripts):
    """A 70 MiB error_log() line reaches the log cut to a bound, with how much was cut;
    the process that wrote it serves on."""
    srv = start_server("processes-large-log", two_processes(scripts))
    assert eventually(lambda: len(running_pids(srv)) == 2, timeout=15)
    pids = running_pids(srv)
    r = srv.get("/log.php", timeout=60)
    assert (r.status, r.text) == (200, "logged")
    line = srv.wait_log(lambda e: str(e.get("msg", "")).startswith("begin LLL"), timeout=10)
    assert line, srv.log_text()[-2000:]
    msg = line[0]["msg"]
    assert len(msg) < 2 << 20 and msg.endswith("bytes cut]"), msg[-200:]
    assert_no_process_died(srv, pids)
    assert srv.stop() == 0


def test_a_shared_value_larger_than_a_frame_is_refused_and_the_process_lives(start_server, scripts):
    """shared_store_size has room for a 70 MiB value, but a child's value crosses the
    wire in one frame: the put fails (false, as a put past the table's capacity does)
    with a warning, and the table and the process work on."""
    srv = start_server("processes-large-store", two_processes(scripts, "\t\tshared_store_size 256MB"))
    assert eventually(lambda: len(running_pids(srv)) == 2, timeout=15)
    pids = running_pids(srv)
    r = srv.get("/store.php", timeout=60)
    assert (r.status, r.json()) == (200, [False, True, "v", True]), r.text[:500]
    assert srv.wait_log(lambda e: "shared table" in str(e.get("msg", "")) and e.get("level") == "warn"), \
        srv.log_text()[-2000:]
    assert_no_process_died(srv, pids)
    assert srv.stop() == 0


def test_a_response_to_a_stalled_client_keeps_to_the_memory_bounds(start_server, scripts):
    """response_buffer 1MB, response_buffer_total 4MB, three clients that do not read
    64 MiB responses streamed from children: the scripts end, the Caddy process keeps
    at most the bounds in memory and the rest in spill files, as one process does; a
    client that reads at last gets every byte."""
    srv = start_server("processes-response-bounds", two_processes(
        scripts, "\t\tresponse_buffer 1MB\n\t\tresponse_buffer_total 4MB"))
    assert eventually(lambda: len(running_pids(srv)) == 2, timeout=15)
    rss_before = srv.rss_kb()
    done = served(srv)
    socks = slow_readers(srv, 3, "/stream.php?mb=64", close=True)
    try:
        assert eventually(lambda: served(srv) >= done + 3 and not busy_threads(srv), timeout=60), \
            "the scripts ran to their end: no child waits on a client"
        samples = scrape(srv)
        held = metric(samples, "php_worker_response_buffered_bytes")
        assert held <= 4 << 20, f"{held} bytes in memory, past response_buffer_total"
        assert metric(samples, "php_worker_response_spills_total") >= 3
        assert len(spill_files(srv)) == 3
        grown_mb = (srv.rss_kb() - rss_before) / 1024
        assert grown_mb < 48, f"3 × 64 MiB responses held in the Caddy process's memory: RSS +{grown_mb:.0f} MB"
        s = socks.pop()
        s.settimeout(30)
        received = bytearray()
        while chunk := s.recv(1 << 20):
            received += chunk
        s.close()
        head, _, body = bytes(received).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head[:200]
        # Chunked: the payload bytes are all z, framing aside.
        assert body.count(b"z") == 64 << 20, "every byte arrived, from memory and the spill file"
    finally:
        for s in socks:
            s.close()
    assert eventually(lambda: not spill_files(srv), timeout=15), "the spill files go with their clients"
    assert srv.stop() == 0


def test_processes_run_the_large_outputs_of_one_process(start_server, scripts):
    """The same scripts in one process, for the record: what the children must match."""
    srv = start_server("one-process-large", site(scripts, "\t\tshared_store_size 256MB"))
    want = b"y" * (65 << 20)
    assert download(srv, "/echo.php") == (200, hashlib.sha256(want).hexdigest(), len(want))
    assert srv.get("/log.php", timeout=60).text == "logged"
    # One process stores the value: the table had room for it.
    assert srv.get("/store.php", timeout=60).json() == [True, True, "v", False]
    assert srv.stop() == 0
