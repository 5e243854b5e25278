"""The Kubernetes manifests (packaging/kubernetes/, docs/kubernetes.md), checked offline
against the Caddyfile they ship: no cluster runs here. tests/kubernetes/ checks every
document against Kubernetes' API types; this module checks what the values mean to
php_worker: the probes reach php_worker's readiness and liveness probes on the port they
name, the Service reaches the site, the grace period outlasts `shutdown_delay` and
`shutdown_timeout`, the memory limit gives `max_threads auto` room above `num_threads`,
and the ConfigMap's Caddyfile, run, answers the probes and stops on SIGTERM as the pod's
life needs (readiness 503 while the site still serves, then an exit with status 0 within
the grace period)."""

import http.client
import json
import re
import signal
import subprocess
import time

import pytest
import yaml

from conftest import APP, CADDY, REPO, WORK, eventually, free_port

MANIFESTS = REPO / "packaging" / "kubernetes" / "php_worker.yaml"


@pytest.fixture(scope="module")
def manifests():
    docs = [d for d in yaml.safe_load_all(MANIFESTS.read_text()) if d]
    by_kind = {}
    for d in docs:
        assert d["kind"] not in by_kind, f"two {d['kind']}s"
        by_kind[d["kind"]] = d
    return by_kind


@pytest.fixture(scope="module")
def pod(manifests):
    return manifests["Deployment"]["spec"]["template"]["spec"]


@pytest.fixture(scope="module")
def container(pod):
    (c,) = pod["containers"]
    return c


@pytest.fixture(scope="module")
def caddyfile(manifests, pod, container):
    """The Caddyfile the container serves: the file $CADDYFILE names, in the ConfigMap
    volume mounted there."""
    env = {e["name"]: e["value"] for e in container.get("env", [])}
    path = env["CADDYFILE"]
    mount = next(m for m in container["volumeMounts"] if path.startswith(m["mountPath"] + "/"))
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    config_map = manifests["ConfigMap"]
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]
    return config_map["data"][path[len(mount["mountPath"]) + 1:]]


@pytest.fixture(scope="module")
def adapted(caddyfile, tmp_path_factory):
    """The Caddyfile adapted to JSON by ./caddy, as Caddy reads it at start."""
    path = tmp_path_factory.mktemp("k8s") / "Caddyfile"
    path.write_text(caddyfile)
    p = subprocess.run([str(CADDY), "adapt", "--config", str(path), "--adapter", "caddyfile"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def container_port(container, port):
    """A probe's or a Service's port (a number or a port's name) as a number."""
    if isinstance(port, int):
        return port
    return next(p["containerPort"] for p in container["ports"] if p["name"] == port)


def handlers_at(adapted, port, path):
    """The handlers that serve `path` on the server listening on `port`, in order."""
    servers = [s for s in adapted["apps"]["http"]["servers"].values() if f":{port}" in s["listen"]]
    assert len(servers) == 1, f"no one server listens on :{port}: {adapted['apps']['http']['servers']}"
    found = []

    def walk(routes):
        for route in routes:
            paths = [p for m in route.get("match", []) for p in m.get("path", [])]
            if paths and not any(p == path or (p.endswith("*") and path.startswith(p[:-1])) for p in paths):
                continue
            for h in route.get("handle", []):
                if h["handler"] == "subroute":
                    walk(h["routes"])
                else:
                    found.append(h)

    walk(servers[0]["routes"])
    return found


def seconds(duration_ns):
    return duration_ns / 1e9


def test_probes_reach_php_workers_readiness_and_liveness(adapted, container):
    expected = {"readinessProbe": "ready", "livenessProbe": "live", "startupProbe": "live"}
    for probe, kind in expected.items():
        get = container[probe]["httpGet"]
        handlers = handlers_at(adapted, container_port(container, get["port"]), get["path"])
        assert handlers and handlers[0]["handler"] == "php_worker_health", f"{probe} reaches {handlers}"
        assert handlers[0].get("probe", "ready") == kind, f"{probe} asks php_worker's {handlers[0]} probe"
    probes_port = container_port(container, container["readinessProbe"]["httpGet"]["port"])
    assert probes_port != 80


def test_the_service_reaches_the_site(manifests, adapted, container, pod):
    service = manifests["Service"]
    labels = manifests["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    (port,) = service["spec"]["ports"]
    target = container_port(container, port["targetPort"])
    assert any(h["handler"] == "php_worker" for h in handlers_at(adapted, target, "/index.php"))
    probes_port = container_port(container, container["readinessProbe"]["httpGet"]["port"])
    assert target != probes_port, "the probes' port stays inside the cluster network's pod IPs"
    assert manifests["HorizontalPodAutoscaler"]["spec"]["scaleTargetRef"]["name"] == \
        manifests["Deployment"]["metadata"]["name"]
    assert manifests["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_the_grace_period_outlasts_the_delay_and_the_timeout(adapted, pod, container):
    delay = seconds(adapted["apps"]["http"].get("shutdown_delay", 0))
    timeout = seconds(adapted["apps"]["php_worker"].get("shutdown_timeout", 30e9))
    grace = pod.get("terminationGracePeriodSeconds", 30)
    assert delay >= container["readinessProbe"]["periodSeconds"] * container["readinessProbe"]["failureThreshold"], \
        "readiness is seen failing before the listeners close"
    assert grace >= delay + timeout + 5, f"grace {grace}s < shutdown_delay {delay}s + shutdown_timeout {timeout}s + 5s"
    assert "preStop" not in container.get("lifecycle", {}), "shutdown_delay plays preStop's part"


def test_the_memory_limit_fits_max_threads_auto(adapted, container):
    php = adapted["apps"]["php_worker"]
    assert php.get("max_threads") == "auto"
    limit = container["resources"]["limits"]["memory"]
    units = {"Gi": 1 << 30, "Mi": 1 << 20}
    number, unit = re.fullmatch(r"(\d+)(Gi|Mi)", limit).groups()
    memory_limit = php["php_ini"]["memory_limit"]
    assert memory_limit.endswith("M")
    threads = int(0.8 * int(number) * units[unit] // (int(memory_limit[:-1]) << 20))
    assert threads >= php["num_threads"] + 2, f"max_threads auto would give {threads} for num_threads {php['num_threads']}"


def get(port, path):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def test_the_caddyfile_serves_and_stops_as_the_pod_expects(caddyfile, container, pod):
    """The ConfigMap's Caddyfile run as is, but for its ports (free ones) and the app's root
    (the test app): the probes answer 200, SIGTERM turns readiness to 503 while the site
    still serves for shutdown_delay, then the server exits 0 within the grace period."""
    site, probes, admin = free_port(), free_port(), free_port()
    text = caddyfile.replace(":8081 {", f":{probes} {{\n\tbind 127.0.0.1").replace(":80 {", f":{site} {{\n\tbind 127.0.0.1")
    text = text.replace("/app/public", str(APP / "public"))
    text = text.replace("{\n\t# After", f"{{\n\tadmin 127.0.0.1:{admin}\n\tpersist_config off\n\t# After", 1)
    assert f":{site} {{" in text and f":{probes} {{" in text and f"127.0.0.1:{admin}" in text
    workdir = WORK / "kubernetes"
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "Caddyfile").write_text(text)
    log = open(workdir / "caddy.log", "wb")
    proc = subprocess.Popen([str(CADDY), "run", "--config", str(workdir / "Caddyfile"), "--adapter", "caddyfile"],
                            stdout=log, stderr=subprocess.STDOUT,
                            env={"PATH": "/usr/bin:/bin", "HOME": str(workdir), "XDG_CONFIG_HOME": str(workdir),
                                 "XDG_DATA_HOME": str(workdir)})
    try:
        def answers(path, status):
            try:
                return get(probes, path)[0] == status
            except OSError:
                return False

        assert eventually(lambda: answers("/ready", 200), timeout=30), (workdir / "caddy.log").read_text()[-3000:]
        assert answers("/live", 200)
        assert get(site, "/hello.php") == (200, b"Hello, world!")

        proc.send_signal(signal.SIGTERM)
        stopped = time.monotonic()
        assert eventually(lambda: answers("/ready", 503), timeout=2), "readiness fails at once after SIGTERM"
        assert get(site, "/hello.php")[0] == 200, "the site serves on during shutdown_delay"
        status = proc.wait(timeout=pod["terminationGracePeriodSeconds"])
        took = time.monotonic() - stopped
        assert status == 0
        assert took < pod["terminationGracePeriodSeconds"]
        assert took >= 4, f"stopped {took:.1f}s after SIGTERM, before shutdown_delay ended"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
