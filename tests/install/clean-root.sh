#!/usr/bin/env bash
# Takes the portable binary (dist/php_worker/) and the Debian package (dist/*.deb) into a
# clean Debian 12 root made with `debootstrap --variant=minbase` (none of the build's
# packages; cached as a tarball in ~/.cache/php_worker/) and checks there:
#   - `caddy version` and `caddy php-cli -m` from the copied folder;
#   - the demo served and answered; php-cli running tests/install/check.php (PDO SQLite,
#     intl, GD, mbstring, OpenSSL, zip, sodium, timezones, curl against the demo, then
#     every other extension: tests/extensions/checks.php); the developer extensions
#     loaded by name from beside the binary;
#   - the package: install (user, files, unit), the unit's ExecStart run as systemd would
#     run it (its user, CAP_NET_BIND_SERVICE), the default page, ExecReload and a
#     reinstall (the upgrade path) under load with no failed request, SIGTERM's graceful
#     stop, then removal and purge.
# Systemd itself does not run in the root (a container has no init there), so
# enabling and starting through systemctl is not exercised; `systemd-analyze verify`
# checks the unit on the host.
#
# Builds what is missing (scripts/build-deb.sh); needs root (chroot, mount).
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD

log() { echo "clean-root: $*"; }
fail() { echo "clean-root: FAIL: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || fail "needs root (debootstrap, chroot, mount)"

version=$(cat VERSION)
deb=dist/php-worker_${version}_amd64.deb
[ -f "$deb" ] && [ dist/php_worker/bin/caddy -ot "$deb" ] || scripts/build-deb.sh
scripts/install-deps.sh --install-test >/dev/null

cache=${PHP_WORKER_CACHE:-$HOME/.cache/php_worker}
rootfs=$cache/rootfs-bookworm-minbase-r1.tar
if [ ! -f "$rootfs" ]; then
	log "debootstrap --variant=minbase bookworm (once; cached in $rootfs)"
	tmp=$(mktemp -d)
	debootstrap --variant=minbase bookworm "$tmp" http://deb.debian.org/debian >"$tmp.log" 2>&1 ||
		{ tail -n 20 "$tmp.log" >&2; exit 1; }
	tar -C "$tmp" -cf "$rootfs.part" . && mv "$rootfs.part" "$rootfs"
	rm -rf "$tmp" "$tmp.log"
fi

root=$(mktemp -d /tmp/php_worker-root.XXXXXX)
cleanup() {
	pkill -KILL -f "^/opt/php_worker/bin/caddy|^/usr/bin/php_worker" 2>/dev/null || true
	umount "$root/proc" 2>/dev/null || true
	rm -rf "$root"
}
trap cleanup EXIT
tar -C "$root" -xf "$rootfs"
chmod 755 "$root" # mktemp makes 0700 (and the tarball keeps it): the service's user must see /
mount -t proc proc "$root/proc"
# debootstrap writes no /etc/hosts (the installer does); Caddy's admin API listens on
# localhost.
printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "$@"; }

# What the root lacks: none of the libraries the build linked.
for pkg in libicu72 libxml2 libssl3 libcurl4 libpq5 libsqlite3-0 libonig5 libzip4 libsodium23 libgd3 php8.2-common ca-certificates; do
	if in_root dpkg-query -W -f '${Status}' "$pkg" 2>/dev/null | grep -q '^install ok installed'; then
		fail "the clean root has $pkg"
	fi
done
log "the root has glibc $(in_root ldd --version | head -n1 | awk '{print $NF}') and none of the build's libraries"

# Waits until $1 (host:port) answers HTTP with a 200 for path $2.
wait_http() {
	python3 - "$@" <<'PY'
import sys, time, urllib.request
url = f"http://{sys.argv[1]}{sys.argv[2]}"
for _ in range(150):
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            if r.status == 200:
                sys.exit(0)
    except Exception:
        time.sleep(0.2)
sys.exit(f"no answer from {url}")
PY
}

log "the portable binary, copied to /opt/php_worker"
cp -a dist/php_worker "$root/opt/php_worker"
in_root /opt/php_worker/bin/caddy version
modules=$(in_root /opt/php_worker/bin/caddy php-cli -m)
for m in Core curl gd intl mbstring openssl pdo_pgsql pdo_sqlite sodium zip "Zend OPcache"; do
	grep -qx "$m" <<<"$modules" || fail "php-cli -m lacks $m"
done
log "php-cli -m: $(grep -vc '^\[\|^$' <<<"$modules") modules, OPcache included"
binary=$(in_root /opt/php_worker/bin/php -r 'echo PHP_BINARY;')
[ "$binary" = /opt/php_worker/bin/php ] || fail "bin/php's PHP_BINARY: $binary"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -p "$root/srv/demo"
cp -a demo "$root/srv/demo/"
sed "s/^:8080 {/:$port {/" Caddyfile >"$root/srv/demo/Caddyfile"
cp tests/install/check.php tests/extensions/checks.php "$root/srv/"
chroot "$root" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root sh -c \
	"cd /srv/demo && exec /opt/php_worker/bin/caddy run --config Caddyfile" >"$root/srv/demo.log" 2>&1 &
demo=$!
wait_http "127.0.0.1:$port" / || { cat "$root/srv/demo.log" >&2; fail "the demo does not answer"; }
log "the demo answers on 127.0.0.1:$port"
in_root /opt/php_worker/bin/caddy php-cli -d apc.enable_cli=1 /srv/check.php "http://127.0.0.1:$port/" ||
	fail "php-cli check.php"
# The developer extensions beside the binary load by name, every extension line of them.
loaded=$(in_root /opt/php_worker/bin/caddy php-cli -d extension=pcov -d extension=excimer -r \
	'echo phpversion("pcov"), " ", phpversion("excimer");')
[[ "$loaded" =~ ^[0-9.]+\ [0-9.]+$ ]] || fail "pcov and excimer do not load from lib/php_worker/: $loaded"
log "pcov and excimer load from lib/php_worker/ ($loaded)"
kill -TERM "$demo"
wait "$demo" || fail "the demo did not stop cleanly on SIGTERM (status $?)"

log "the package: dpkg -i"
cp "$deb" "$root/tmp/php-worker.deb"
in_root dpkg -i /tmp/php-worker.deb
in_root getent passwd php_worker | grep -q ':/var/lib/php_worker:/usr/sbin/nologin$' || fail "no php_worker system user"
for f in /usr/bin/php_worker /usr/lib/php_worker/opcache.so /etc/php_worker/Caddyfile /etc/php_worker/php.ini \
	/usr/share/php_worker/www/index.php /lib/systemd/system/php_worker.service; do
	[ -e "$root$f" ] || fail "the package did not install $f"
done
[ "$(in_root stat -c %U /var/lib/php_worker)" = php_worker ] || fail "/var/lib/php_worker is not the user's"
in_root php_worker version
binary=$(in_root php -r 'echo PHP_BINARY, " ", PHP_SAPI;')
[ "$binary" = "/usr/bin/php cli" ] || fail "php is not the package's PHP, or PHP_BINARY is not /usr/bin/php: $binary"
log "php is the package's PHP (update-alternatives), PHP_BINARY $binary"
ini=$(in_root php_worker php-cli -r 'echo php_ini_loaded_file(), " ", ini_get("error_reporting");')
[ "$ini" = "/etc/php_worker/php.ini 22527" ] || fail "php-cli does not read /etc/php_worker/php.ini: $ini"

unit=$root/lib/systemd/system/php_worker.service
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
exec_reload=$(sed -n 's/^ExecReload=//p' "$unit")
[ -n "$exec_start" ] && [ -n "$exec_reload" ] || fail "the unit has no ExecStart or ExecReload"
log "ExecStart as the unit runs it: User=php_worker, CAP_NET_BIND_SERVICE: $exec_start"
as_service=(chroot "$root" setpriv --reuid=php_worker --regid=php_worker --init-groups
	--inh-caps=+net_bind_service --ambient-caps=+net_bind_service
	/usr/bin/env -i PATH=/usr/bin:/bin HOME=/var/lib/php_worker LANG=C.UTF-8)
# shellcheck disable=SC2086 # the unit's command line, split as systemd splits it
"${as_service[@]}" $exec_start >"$root/tmp/service.log" 2>&1 &
service=$!
wait_http 127.0.0.1:80 / || { cat "$root/tmp/service.log" >&2; fail "the service does not answer on :80"; }
page=$(in_root php_worker php-cli -r 'echo file_get_contents("http://127.0.0.1/");')
grep -q 'php_worker is running' <<<"$page" || fail "the default page: $page"
grep -q 'OPcache on' <<<"$page" || fail "OPcache is off in the service: $page"
log "the default page answers: $(grep -o 'PHP [^,]*, OPcache on' <<<"$page")"
grep -q '"msg":"PHP engine started"' "$root/tmp/service.log" || fail "the service's log (stderr, the journal's) lacks its start line"

# The upgrade path under load: dpkg reinstalls (postinst with the old version), then
# systemd's reload runs ExecReload; no request may fail, and PHP keeps running.
log "reinstall and ExecReload under load"
python3 - "$root" "$exec_reload" <<'PY'
import http.client, subprocess, sys, threading, time
root, reload_cmd = sys.argv[1], sys.argv[2]
stop, failures, served, resent = threading.Event(), [], [0], [0]
# A new connection per request. Caddy may close one its old server accepted unanswered
# (docs/reloads-and-admin-api.md): then the GET is sent again, as HTTP clients do, and counted.
def client():
    while not stop.is_set():
        for attempt in range(3):
            c = http.client.HTTPConnection("127.0.0.1", 80, timeout=10)
            try:
                c.request("GET", "/")
                r = c.getresponse()
                body = r.read()
                if r.status != 200 or b"php_worker is running" not in body:
                    failures.append(r.status)
                served[0] += 1
                break
            except (http.client.RemoteDisconnected, ConnectionResetError) as e:
                if attempt == 2:
                    failures.append(repr(e))
                resent[0] += 1
            except Exception as e:
                failures.append(repr(e))
                break
            finally:
                c.close()
threads = [threading.Thread(target=client) for _ in range(4)]
for t in threads:
    t.start()
time.sleep(1)
env = ["/usr/bin/env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"]
subprocess.run(["chroot", root, *env, "dpkg", "-i", "/tmp/php-worker.deb"], check=True, stdout=subprocess.DEVNULL)
subprocess.run(["chroot", root, *env, *reload_cmd.split()], check=True)
time.sleep(1)
stop.set()
for t in threads:
    t.join()
print(f"clean-root: {served[0]} requests during the reinstall and the reload, {len(failures)} failed {failures[:5]}"
      f" ({resent[0]} sent again after their connection closed unanswered)")
sys.exit(1 if failures or served[0] == 0 else 0)
PY
[ "$(grep -c '"msg":"PHP engine started"' "$root/tmp/service.log")" = 1 ] || fail "the reload restarted PHP"

log "SIGTERM: graceful stop"
kill -TERM "$service"
wait "$service" || fail "the service did not stop cleanly on SIGTERM (status $?)"

log "dpkg -r, then dpkg -P"
in_root dpkg -r php-worker >/dev/null
[ ! -e "$root/usr/bin/php_worker" ] || fail "dpkg -r left /usr/bin/php_worker"
[ ! -e "$root/usr/bin/php" ] && [ ! -L "$root/usr/bin/php" ] || fail "dpkg -r left the php alternative"
[ -e "$root/etc/php_worker/Caddyfile" ] || fail "dpkg -r removed the conffile /etc/php_worker/Caddyfile"
in_root dpkg -P php-worker >/dev/null
[ ! -e "$root/etc/php_worker" ] || fail "dpkg -P left /etc/php_worker"
[ ! -e "$root/var/lib/php_worker" ] || fail "dpkg -P left /var/lib/php_worker"
log "installed, served, reloaded, stopped, removed and purged"

# The unit as systemd reads it: any complaint but the binary's absence from the host.
if command -v systemd-analyze >/dev/null; then
	dpkg-deb -x "$deb" "$root/unpacked"
	complaints=$(systemd-analyze verify "$root/unpacked/lib/systemd/system/php_worker.service" 2>&1 |
		grep -v 'Command /usr/bin/php_worker is not executable' || true)
	[ -z "$complaints" ] || fail "systemd-analyze verify: $complaints"
	log "systemd-analyze verify: the unit parses"
fi
log "passed"
