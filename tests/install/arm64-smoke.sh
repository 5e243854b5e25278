#!/usr/bin/env bash
# Smoke-tests an arm64 php_worker under qemu-user on an x86-64 host (scripts/build-arm64.sh
# runs it after the build): PHP's command line (-v, the extension list), a worker serving
# hello world, a reload with new worker settings, and a stop by SIGTERM.
#
#   tests/install/arm64-smoke.sh <arm64 caddy> <arm64 sysroot>
set -euo pipefail
caddy=$(realpath "$1")
sysroot=$2
run=(qemu-aarch64-static -L "$sysroot" "$caddy")
log() { echo "arm64-smoke: $*"; }
fail() { echo "arm64-smoke: FAILED: $*" >&2; exit 1; }

work=$(mktemp -d)
pid=
cleanup() {
	[ -z "$pid" ] || kill -9 "$pid" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

log "php-cli -v"
version=$("${run[@]}" php-cli -v)
echo "$version" | sed 's/^/  /'
grep -q '^PHP 8\.4\..* (cli) .*ZTS' <<<"$version" || fail "not PHP 8.4's ZTS command line"
"${run[@]}" php-cli -r 'echo php_uname("m"), "\n";' | grep -qx aarch64 || fail "PHP does not run as aarch64"

log "php-cli -m"
modules=$("${run[@]}" php-cli -m | grep -v '^\[' | grep -v '^$' | sort -u)
echo "  $(wc -l <<<"$modules") modules: $(tr '\n' ' ' <<<"$modules")"
for m in Core curl dom gd intl mbstring openssl pdo_pgsql pdo_sqlite sodium zip \
	igbinary msgpack apcu redis memcached imagick amqp ssh2 yaml zstd ast; do
	grep -qx "$m" <<<"$modules" || fail "extension $m is missing"
done

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
admin=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -p "$work/public"
cat >"$work/public/worker.php" <<'EOF'
<?php
$booted = getmypid() . '-' . bin2hex(random_bytes(3));
while (frankenphp_handle_request(function () use ($booted) {
    header('Content-Type: application/json');
    echo json_encode(['hello' => $_SERVER['GREETING'] ?? null, 'arch' => php_uname('m'),
        'opcache' => function_exists('opcache_get_status') && opcache_get_status(false) !== false, 'booted' => $booted]);
})) {
}
EOF
caddyfile() {
	cat <<EOF
{
	admin 127.0.0.1:$admin
	persist_config off
	php_worker {
		num_threads 3
	}
}
:$port {
	bind 127.0.0.1
	root * $work/public
	php_worker {
		worker {
			file $work/public/worker.php
			num 2
			env GREETING $1
		}
	}
}
EOF
}
caddyfile "world" >"$work/Caddyfile"
log "a worker serving hello world"
HOME=$work XDG_CONFIG_HOME=$work XDG_DATA_HOME=$work "${run[@]}" run --config "$work/Caddyfile" --adapter caddyfile >"$work/caddy.log" 2>&1 &
pid=$!
answer=
for _ in $(seq 300); do
	answer=$(curl -fsS "http://127.0.0.1:$port/worker.php" 2>/dev/null) && break
	kill -0 "$pid" 2>/dev/null || { tail -n 30 "$work/caddy.log" >&2; fail "the server exited"; }
	sleep 0.2
done
echo "  $answer"
grep -q '"hello":"world","arch":"aarch64","opcache":true' <<<"$answer" || { tail -n 30 "$work/caddy.log" >&2; fail "hello world: $answer"; }

log "a reload with a new greeting"
caddyfile "reloaded" | curl -fsS -X POST -H 'Content-Type: text/caddyfile' --data-binary @- "http://127.0.0.1:$admin/load" ||
	fail "the reload was refused"
for _ in $(seq 150); do
	answer=$(curl -fsS "http://127.0.0.1:$port/worker.php") || fail "a request failed after the reload"
	grep -q '"hello":"reloaded"' <<<"$answer" && break
	sleep 0.2
done
echo "  $answer"
grep -q '"hello":"reloaded"' <<<"$answer" || fail "the reload did not reach the worker: $answer"
curl -fsS "http://127.0.0.1:$admin/php_worker/ready" | grep -q '"status":"ok"' || fail "not ready after the reload"

log "SIGTERM"
kill -TERM "$pid"
status=0
wait "$pid" || status=$?
pid=
[ "$status" = 0 ] || { tail -n 30 "$work/caddy.log" >&2; fail "exit status $status after SIGTERM"; }
grep -q '"PHP engine stopped"' "$work/caddy.log" || fail "PHP did not stop cleanly"
log "ok"
