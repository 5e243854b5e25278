"""Three instances behind a load balancer, as teams run php_worker once one machine is not
enough (docs/instances.md): Caddy's own reverse_proxy in front, its active health check on
each instance's readiness probe, and one Redis for what must be shared.

Each instance serves the Laravel test app in worker mode, keeps its sessions and its queue
in Redis (phpredis), consumes the queue with `artisan queue:work` in a background worker,
and runs a scheduled job every second under a lease in Redis. Visitors keep sending
requests while the instances are restarted one by one with new code, each stopped by
SIGTERM with `shutdown_delay`: not one request fails, every session goes on counting
wherever its requests land, every job pushed runs exactly once, and every tick of the
schedule runs once across the three."""

import concurrent.futures
import http.client
import json
import signal
import threading
import time

from conftest import CADDY, LARAVEL_APP, WORK, Server, eventually, free_port, laravel_root, start_service

INSTANCES = "abc"
LARAVEL_VERSION = "8"  # Debian 12's, which the PHP 8.2 build runs too

TICK = """<?php
// One line per run of the scheduled job: the time it was due, and the instance.
file_put_contents(getenv('RUNS'), json_encode(['due' => (int) getenv('PHP_WORKER_SCHEDULE_DUE'),
    'instance' => getenv('INSTANCE')]) . "\\n", FILE_APPEND | LOCK_EX);
"""


def instance_caddyfile(port, admin_port, letter, code, redis_port, tick, ticks):
    env = "\n".join(f"\t\t\tenv {k} {v}" for k, v in {
        "LARAVEL_PHP_ROOT": laravel_root(LARAVEL_VERSION),
        "LARAVEL_CACHE_DIR": WORK / "instances" / f"{letter}-laravel-cache",
        "REDIS_PORT": redis_port,
        "SESSION_DRIVER": "redis",
        "QUEUE_CONNECTION": "redis",
        "INSTANCE": letter,
        "CODE_VERSION": code,
    }.items())
    return f"""{{
	admin 127.0.0.1:{admin_port}
	persist_config off
	shutdown_delay 1s
	log {{
		format json
		level INFO
	}}
	php_worker {{
		num_threads 5
		shutdown_timeout 10s
		php_ini display_errors 0
		background {{
			file {LARAVEL_APP}/queue-worker.php
			name queue
{env}
		}}
		schedule "@every 1s" {tick} {{
			name tick
			env RUNS {ticks}
			env INSTANCE {letter}
			lease redis://127.0.0.1:{redis_port}
		}}
	}}
}}

:{port} {{
	bind 127.0.0.1
	handle /ready {{
		php_worker_health ready
	}}
	php_worker {{
		root {LARAVEL_APP}/public
		index worker.php
		file_server off
		worker {{
			file worker.php
			num 2
{env}
		}}
	}}
}}
"""


def balancer_caddyfile(port, admin_port, upstreams):
    return f"""{{
	admin 127.0.0.1:{admin_port}
	persist_config off
}}

:{port} {{
	bind 127.0.0.1
	reverse_proxy {" ".join(f"127.0.0.1:{p}" for p in upstreams)} {{
		lb_policy round_robin
		lb_try_duration 5s
		lb_try_interval 100ms
		health_uri /ready
		health_interval 200ms
		health_timeout 2s
		health_fails 1
		health_passes 1
	}}
}}
"""


class Visitor:
    """One user: a session cookie of its own, a visit counter kept in the session, and a
    job pushed at every visit. Counts what it sent and what failed."""

    def __init__(self, port, n, run):
        self.port, self.n, self.run = port, n, run
        self.cookie = None
        self.visits = 0
        self.requests = 0
        self.failures = []
        self.pushed = []
        self.seen = set()  # (instance, code) pairs that answered its session

    def get(self, path):
        self.requests += 1
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request("GET", path, headers={"Cookie": self.cookie} if self.cookie else {})
            r = conn.getresponse()
            body = r.read()
            if r.status != 200:
                self.failures.append((path, r.status, body[:300]))
                return None
            for c in r.headers.get_all("Set-Cookie") or []:
                if c.startswith("laravel_session="):
                    self.cookie = c.split(";", 1)[0]
            return json.loads(body)
        except (OSError, http.client.HTTPException, ValueError) as e:
            self.failures.append((path, type(e).__name__, str(e)[:300]))
            return None
        finally:
            conn.close()

    def visit(self):
        answer = self.get("/redis/session")
        if answer is None:
            return
        self.visits += 1
        if answer["n"] != self.visits:
            self.failures.append(("/redis/session", "session lost", answer))
            self.visits = answer["n"]
        self.seen.add((answer["instance"], answer["code"]))
        job = f"{self.run}-{self.n}-{self.visits}"
        if self.get(f"/redis/queue/push?id={job}") is not None:
            self.pushed.append(job)


def test_three_instances_behind_a_balancer_through_a_rolling_deploy(tmp_path, redis):
    tick = tmp_path / "tick.php"
    tick.write_text(TICK)
    ticks = tmp_path / "ticks.jsonl"
    ports = {letter: free_port() for letter in INSTANCES}

    def start(letter, code):
        admin = free_port()
        workdir = WORK / "instances" / f"{letter}-{code}"
        workdir.mkdir(parents=True, exist_ok=True)
        return Server(f"instance-{letter}-{code}",
                      instance_caddyfile(ports[letter], admin, letter, code, redis, tick, ticks),
                      ports[letter], admin, workdir)

    instances = {letter: start(letter, "v1") for letter in INSTANCES}
    balancer_port, balancer_admin = free_port(), free_port()
    workdir = WORK / "instances" / "balancer"
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "Caddyfile").write_text(balancer_caddyfile(balancer_port, balancer_admin, ports.values()))
    balancer = start_service([str(CADDY), "run", "--config", str(workdir / "Caddyfile"), "--adapter", "caddyfile"],
                             balancer_port, workdir, "balancer")
    stopped_with = {}
    try:
        run = f"r{int(time.time())}"
        # Visitors outside the deploy push their jobs under other run names.
        warm = Visitor(balancer_port, "warm", "warm-up")
        assert eventually(lambda: warm.visit() or len({i for i, _ in warm.seen}) == 3, timeout=30), \
            f"the balancer reaches every instance: {warm.seen} {warm.failures}"

        deployed = threading.Event()
        visitors = [Visitor(balancer_port, n, run) for n in range(6)]

        def keep_visiting(v):
            while not deployed.is_set():
                v.visit()

        with concurrent.futures.ThreadPoolExecutor(len(visitors)) as pool:
            futures = [pool.submit(keep_visiting, v) for v in visitors]
            time.sleep(2)
            for letter in INSTANCES:
                # As an orchestrator's rolling update does: SIGTERM, wait for the end, start
                # the new code, wait until the balancer sends it requests, then the next.
                old = instances[letter]
                old.proc.send_signal(signal.SIGTERM)
                stopped_with[letter] = old.proc.wait(timeout=30)
                old.log_file.close()
                instances[letter] = start(letter, "v2")
                probe = Visitor(balancer_port, letter, "probe")
                assert eventually(lambda: probe.visit() or (letter, "v2") in probe.seen, timeout=30), \
                    f"instance {letter}'s new code never answered through the balancer: {probe.failures}"
            deployed_at = int(time.time())
            time.sleep(2)
            deployed.set()
            for f in futures:
                f.result()

        requests = sum(v.requests for v in visitors)
        failures = [f for v in visitors for f in v.failures]
        assert requests > 100, f"only {requests} requests were sent during the deploy"
        assert failures == [], f"{len(failures)} of {requests} requests failed: {failures[:5]}"
        assert stopped_with == {letter: 0 for letter in INSTANCES}, "each old instance stopped cleanly"
        for v in visitors:
            instances_seen = {i for i, _ in v.seen}
            assert len(instances_seen) >= 2, f"visitor {v.n}'s session stayed on {instances_seen}"
            assert v.visits > 5 and v.failures == []

        # The deploy is done: every instance runs the new code, and the sessions carry on.
        after = Visitor(balancer_port, "after", run)
        for _ in range(9):
            after.visit()
        assert {c for _, c in after.seen} == {"v2"} and {i for i, _ in after.seen} == set(INSTANCES), after.seen

        # Every job pushed ran once, on the queue workers of every instance.
        pushed = [j for v in visitors + [after] for j in v.pushed]

        def runs():
            answer = after.get(f"/redis/queue/runs?run={run}-")
            return answer or {"times": {}, "where": {}}

        assert eventually(lambda: len(runs()["times"]) == len(pushed), timeout=30), \
            f"{len(pushed) - len(runs()['times'])} of {len(pushed)} jobs never ran"
        done = runs()
        assert set(done["times"]) == set(pushed)
        doubled = {j: n for j, n in done["times"].items() if n != 1}
        assert doubled == {}, f"jobs that ran more than once: {doubled}"
        assert set(done["where"]) == set(INSTANCES), f"jobs ran on {done['where']}"

        # Every second of the schedule ran once, on whichever instances were up, and it goes
        # on after the deploy: wait for ticks due after every old instance had stopped.
        def tick_lines():
            return [json.loads(line) for line in ticks.read_text().splitlines() if line.strip()]

        assert eventually(lambda: max((e["due"] for e in tick_lines()), default=0) >= deployed_at + 3,
                          timeout=15), f"the schedule stopped after the deploy: {tick_lines()[-3:]}"
        lines = tick_lines()
        dues = [e["due"] for e in lines]
        assert len(dues) > 5 and len(set(dues)) == len(dues), f"a tick ran twice: {sorted(dues)}"
        missing = sorted(set(range(min(dues), max(dues) + 1)) - set(dues))
        assert missing == [], f"ticks that ran nowhere: {missing}"
        assert len({e["instance"] for e in lines}) >= 2
        print(f"\nrolling deploy: {requests} requests, {len(failures)} failed; {len(pushed)} jobs, each ran once "
              f"({done['where']}); {len(dues)} ticks, each once ({len(missing)} missing)")
    finally:
        balancer.terminate()
        balancer.wait(10)
        for srv in instances.values():
            if srv.proc.poll() is None:
                srv.stop()
