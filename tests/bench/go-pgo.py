#!/usr/bin/env python3
"""Collects the CPU profile Go's profile-guided optimisation builds Caddy with
(go-module/default.pgo, passed by xcaddy.sh as -pgo).

The training set is the bench's own workloads, on ./caddy: hello world in worker mode
and in classic mode, and the Laravel page in worker mode. Each server runs under a
closed-loop load while Go's profiler (the admin API's /debug/pprof/profile) records
its CPU; the profiles are merged into one. The Go side of a request (HTTP, the hand-over
to the core, the response) is much the same in every mode, so a small set covers it.

    tests/bench/run.sh --go-pgo     (builds ./caddy if needed, then writes default.pgo)

Regenerate it when the Go request path changes a lot; a stale profile still builds,
it only optimises less.
"""

import subprocess
import sys
import threading

import bench
from bench import LARAVEL_APP, LARAVEL_PAGE, REPO, WORK, PhpWorker, Run, http_get, is_hello, is_laravel_page, log

SECONDS = 12
OUT = REPO / "go-module" / "default.pgo"


def training():
    """(server, path, probe, oha's extra arguments or None for a session cookie)."""
    return [
        (PhpWorker("hello", threads=4, worker="worker.php", admin=True, label="hello world, worker mode"),
         "/", is_hello, ()),
        (PhpWorker("hello", threads=4, admin=True, label="hello world, classic mode"), "/", is_hello, ()),
        (PhpWorker(LARAVEL_APP, threads=4, worker="public/worker.php", admin=True,
                   env={"LARAVEL_CACHE_DIR": str(WORK / "laravel-pgo")}, label="Laravel 8 page, worker mode"),
         LARAVEL_PAGE, is_laravel_page, None),
    ]


def main():
    WORK.mkdir(parents=True, exist_ok=True)
    profiles = []
    for server, path, probe, extra in training():
        with Run(server, path, probe):
            extra = extra if extra is not None else ("-H", f"Cookie: {bench.session_cookie(server)}")
            got = {}
            taker = threading.Thread(target=lambda: got.update(r=http_get(
                server.admin_port, f"/debug/pprof/profile?seconds={SECONDS}", timeout=SECONDS + 60)))
            taker.start()
            bench.oha(server, path, conns=32, duration=SECONDS + 1, extra=extra)
            taker.join()
            status, body = got["r"]
            bench.check(status == 200 and body[:2] == b"\x1f\x8b",
                        f"{server.name}: no CPU profile from the admin API: {status} {body[:200]!r}")
            out = WORK / f"pgo-{len(profiles)}.pprof"
            out.write_bytes(body)
            profiles.append(out)
            log(f"  {server.name}: {len(body) // 1024} KB of profile")
    # As recorded: re-symbolizing would drop the functions' start lines, which Go's PGO needs.
    merged = subprocess.run([bench.go_tool(), "tool", "pprof", "-symbolize=none", "-proto", *map(str, profiles)],
                            capture_output=True, timeout=300)
    bench.check(merged.returncode == 0, f"go tool pprof could not merge the profiles: {merged.stderr[-1000:]!r}")
    OUT.write_bytes(merged.stdout)
    log(f"wrote {OUT} ({len(merged.stdout) // 1024} KB, {len(profiles)} workloads)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
