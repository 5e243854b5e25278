"""Whether the embedded PHP is current, as the binary says it: `caddy version`, the warning
at start-up, the status page's ?data=php and the php_worker_php_info metric all say what the
PHP build found (its <prefix>/.currency, scripts/php-currency.py: the newer releases of
the branch Debian lists) and what today's date makes of the branch's end of life
(go-module/php-eol.txt). The tests hold whether the build is behind or not."""
import datetime
import json
import re
import subprocess
from pathlib import Path

from conftest import CADDY, REPO, make_caddyfile


def caddy(*args):
    return subprocess.run([str(CADDY), *args], capture_output=True, text=True, timeout=60, check=True).stdout


def linked_prefix():
    """The PHP build the binary linked: its CGO_LDFLAGS line names <prefix>/lib."""
    m = re.search(r"CGO_LDFLAGS=.*?-L(\S+/php-[0-9.]+-zts[^/\s]*)/lib\b", caddy("build-info"))
    return Path(m.group(1)) if m else None


def stamped():
    """What the build stamped into the binary (xcaddy.sh's -X flags), as {name: value}."""
    info = caddy("build-info")
    return dict(re.findall(r"-X github\.com/php-worker/php_worker/go-module\.(phpListed\w+)=([^\s'\"]*)", info))


def record():
    """The PHP build's record, as {key: value}, or None (a PHP of your own)."""
    prefix = linked_prefix()
    path = prefix / ".currency" if prefix else None
    if not path or not path.exists():
        return None
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line and not line.startswith("#"))


def eol_of(branch):
    for line in (REPO / "go-module" / "php-eol.txt").read_text().splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) == 2 and fields[0] == branch:
            return fields[1]
    return ""


def expected():
    """(PHP version, its branch, the newer releases listed, whether the build checked,
    the end of life, whether it has passed) as the build's record and the date say."""
    php = subprocess.run([str(CADDY), "php-cli", "-n", "-r", "echo PHP_VERSION;"], capture_output=True, text=True,
                         timeout=60).stdout.strip()
    branch = ".".join(php.split(".")[:2])
    rec = record()
    stamp = stamped()
    newer = rec["listed_newer"].split() if rec else []
    if not stamp.get("phpListedChecked"):
        # Linked without the build's stamps (scripts/asan.sh's build, a PHP of your own):
        # the binary says it was not checked, whatever the record says.
        newer = []
    elif rec:
        assert rec["version"] == php, f"the record is of PHP {rec['version']}, the binary links {php}"
        # The record is checked again at every build-php.sh run; the binary holds what it
        # said when the binary was linked (tests/run.sh links it just before this).
        assert stamp.get("phpListedNewer", "").split(",") == (newer or [""]), \
            f"the binary was linked before the record changed: rebuild it (./xcaddy.sh). record {rec}, binary {stamp}"
    checked = stamp.get("phpListedChecked", "")
    eol = eol_of(branch)
    passed = bool(eol) and datetime.datetime.now(datetime.timezone.utc).date() > datetime.date.fromisoformat(eol)
    return php, branch, newer, checked, eol, passed


def test_caddy_version_says_whether_php_is_current():
    php, branch, newer, checked, eol, passed = expected()
    line = caddy("version").splitlines()[0]
    if not checked:
        assert "[not checked against Debian's releases" in line, line
    elif newer:
        assert f") [behind: Debian listed {', '.join(newer)} on {checked}" in line, line
    else:
        assert f") [the newest release Debian listed on {checked}" in line, line
    if eol:
        assert (f"; end of life since {eol}]" if passed else f"; security support until {eol}]") in line, line
    assert line.startswith("php_worker v") and f", PHP {php} (ZTS, " in line and "; caddy v2." in line, line


def test_start_up_warns_once_status_page_and_metric_agree(start_server):
    php, branch, newer, checked, eol, passed = expected()
    caddyfile = lambda port, admin: make_caddyfile(port, admin).replace(  # noqa: E731
        "\tbind 127.0.0.1\n", "\tbind 127.0.0.1\n\thandle /php-status* {\n\t\tphp_worker_status\n\t}\n", 1)
    srv = start_server("php-currency", caddyfile)

    def warnings():
        return [e for e in srv.log_entries() if e.get("logger") == "php_worker" and e.get("level") == "warn"
                and "php_version" in e]

    logged = warnings()
    behind = [e for e in logged if " is embedded, but Debian listed " in e["msg"]]
    ended = [e for e in logged if " reached its end of life on " in e["msg"]]
    if newer and checked:
        assert len(behind) == 1, logged
        e = behind[0]
        assert e["msg"].startswith(f"PHP {php} is embedded, but Debian listed ")
        assert e["msg"].endswith(f"of PHP {branch} when this binary was built ({checked}): {', '.join(newer)}; "
                                 f"it lacks {'its' if len(newer) == 1 else 'their'} fixes"), e["msg"]
        assert (e["php_version"], e["listed_newer"], e["newest_listed"], e["checked"]) == (php, newer, newer[-1], checked)
    else:
        assert behind == [], "no warning for a PHP the build found current (or did not check)"
    if passed:
        assert [e["msg"] for e in ended] == [f"PHP {branch} reached its end of life on {eol}: it gets no security fixes any more"]
    else:
        assert ended == []

    # The status page's data.
    data = json.loads(srv.get("/php-status?data=php").text)
    assert (data["version"], data["branch"], data["listed_newer"], data["eol"], data["eol_passed"]) == \
        (php, branch, newer, eol, passed), data
    assert data["current"] == ((not newer) if checked else None), data
    assert data["newest_listed"] == ((newer[-1] if newer else php) if checked else ""), data
    assert data["warnings"] == [e["msg"] for e in behind + ended], "the page says what the log said"

    # The metric.
    status, metrics = srv.admin("GET", "/metrics")
    assert status == 200
    series = [line for line in metrics.splitlines() if line.startswith("php_worker_php_info{")]
    assert len(series) == 1, series
    labels = dict(re.findall(r'(\w+)="([^"]*)"', series[0]))
    assert labels == {"version": php, "newest_listed": data["newest_listed"],
                      "current": {None: "unknown", True: "true", False: "false"}[data["current"]],
                      "eol": eol, "supported": ("false" if passed else "true") if eol else "unknown"}, series[0]
    assert series[0].endswith("} 1")

    # Once per process: a reload says nothing more.
    active = lambda e: e.get("msg") == "new config active"  # noqa: E731
    before = len([e for e in srv.log_entries() if active(e)])
    status, body = srv.load(caddyfile(srv.port, srv.admin_port).replace("num_threads 4", "num_threads 3"))
    assert status == 200, body
    assert len(srv.wait_log(active, timeout=10, count=before + 1)) == before + 1, "the new config took over"
    assert warnings() == logged
