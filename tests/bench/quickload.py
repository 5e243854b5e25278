"""The smoke pass's load generator (tests/bench/run.sh --quick): a fixed number of
requests over a few keep-alive connections, answered in the shape of oha's JSON summary,
so that bench.py reads both alike.

The smoke pass checks answers, not speed. Building oha takes about 7 minutes of CPU on a
fresh machine, which the test command (tests/run.sh) would spend on this pass alone; the
full benchmark keeps oha, whose client costs far less CPU per request than this one.

It takes the part of oha's command line bench.py uses: -c, -n, -q, and in the extra
arguments -m (method), -T (content type), -D (a file as the body) and -H (a header).
"""

import http.client
import statistics
import threading
import time
from urllib.parse import urlsplit


def parse_extra(extra):
    """oha's extra arguments: (method, headers, body)."""
    method, headers, body = "GET", {}, None
    args = list(extra)
    while args:
        flag = args.pop(0)
        if not args:
            raise ValueError(f"quickload: {flag} needs a value")
        value = args.pop(0)
        if flag == "-m":
            method = value
        elif flag == "-T":
            headers["Content-Type"] = value
        elif flag == "-D":
            with open(value, "rb") as f:
                body = f.read()
        elif flag == "-H":
            name, _, v = value.partition(":")
            headers[name.strip()] = v.strip()
        else:
            raise ValueError(f"quickload: oha's {flag} is not supported here")
    return method, headers, body


def run(url, *, conns, requests, rate=None, extra=(), timeout=60):
    """Sends `requests` requests to url over `conns` connections (at most one request per
    1/rate seconds when rate is given); returns oha's JSON summary's fields bench.py
    reads: summary.requestsPerSec and .average, statusCodeDistribution,
    errorDistribution and latencyPercentiles."""
    method, headers, body = parse_extra(extra)
    u = urlsplit(url)
    target = u.path + (f"?{u.query}" if u.query else "")
    lock = threading.Lock()
    issued = 0
    codes, errors, latencies = {}, {}, []
    started = time.monotonic()

    def ticket():
        nonlocal issued
        with lock:
            if issued >= requests:
                return None
            issued += 1
            return issued - 1

    def client():
        conn = None
        while (i := ticket()) is not None:
            if rate:
                delay = started + i / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            t = time.monotonic()
            try:
                if conn is None:
                    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
                conn.request(method, target, body=body, headers=headers)
                resp = conn.getresponse()
                resp.read()
                outcome = ("code", resp.status)
                if resp.will_close:
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException) as e:
                outcome = ("error", f"{type(e).__name__}: {e}")
                if conn is not None:
                    conn.close()
                conn = None
            took = time.monotonic() - t
            with lock:
                kind, key = outcome
                table = codes if kind == "code" else errors
                table[key] = table.get(key, 0) + 1
                latencies.append(took)
        if conn is not None:
            conn.close()

    threads = [threading.Thread(target=client, daemon=True) for _ in range(max(1, min(conns, requests)))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.monotonic() - started
    latencies.sort()

    def pct(p):
        return latencies[min(len(latencies) - 1, int(p / 100 * len(latencies)))] if latencies else None

    return {
        "summary": {"requestsPerSec": len(latencies) / wall if wall else 0,
                    "average": statistics.fmean(latencies) if latencies else None},
        "statusCodeDistribution": {str(k): v for k, v in codes.items()},
        "errorDistribution": errors,
        "latencyPercentiles": {"p50": pct(50), "p90": pct(90), "p95": pct(95), "p99": pct(99), "p99.9": pct(99.9)},
    }
