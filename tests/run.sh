#!/usr/bin/env bash
# Builds everything and runs every test, on PHP 8.4 (the default build): the build
# and test scripts' unit tests (tests/scripts), rust-core's unit tests (property tests included)
# and header check, the Go module's unit tests and fuzz targets, the end-to-end suite
# against the built ./caddy, a quick pass of the benchmark suite as a smoke check, and the
# install test: the portable binary and the .deb in a clean Debian root
# (tests/install/clean-root.sh), and the OCI image run as a container would run it
# (tests/install/image.sh).
#
# Then on PHP 8.2, built apart at -O1 (target/php-8.2-tests/caddy; the benchmark's build,
# target/php-8.2/caddy, stays at -O2): the security, fault, survival, worker, reload,
# processes, CLI, extension, FrankenPHP-parity, Xdebug and profiler tests.
#
# What only later stages need is built in the background, at a low CPU and the lowest
# disk priority, from the first minute: the end-to-end suite's Python modules, PHP 8.2
# and its Caddy, and the static libraries, the portable binary and the .deb, which the
# install and image tests then run on. They use what the stages in front leave idle.
#
#   tests/run.sh                 everything
#   tests/run.sh -k session      pytest arguments select end-to-end tests (PHP 8.4 only;
#                                no install test)
#   PHP_WORKER_INSTALL_TEST=0    skips the install and image tests (=1, the default, builds what they need)
#   PHP_WORKER_PHP82=0           skips the PHP 8.2 stage
#   PHP_WORKER_E2E_JOBS=n        end-to-end test files run n at a time (default 2)
#
# Each stage's time is printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

timings=()
background_pids=() # the background jobs (see background below) not waited for yet, as pid:name
background_all=()  # every background job, as pid:name
background_cpu=0   # the CPU seconds of the background jobs that ended so far
declare -A background_counted # those jobs, by pid
mkdir -p target/logs
children_cpu() { # file: sets cpu_now to the CPU seconds (user + system) of the processes this shell has reaped
	# `times` here, not in $(...): that subshell would have reaped none of them.
	times >"$1"
	cpu_now=$(awk 'NR == 2 { n = 0; for (i = 1; i <= 2; i++) { split($i, t, /[ms]/); n += t[1] * 60 + t[2] }; printf "%d", n + 0.5 }' "$1")
}
stage_start=$SECONDS
stage_cpu=0
stage() { # ends the stage running (its time and CPU are kept) and names the next
	local cpu job
	children_cpu target/logs/.times
	# Bash reaps a background job as soon as it ends, whatever runs then: its CPU joins
	# the children's, and is not the stage's. (Its pid is gone once it is reaped.)
	for job in "${background_all[@]}"; do
		[ -z "${background_counted[${job%%:*}]:-}" ] && [ -f "target/logs/${job#*:}.cpu" ] &&
			! kill -0 "${job%%:*}" 2>/dev/null || continue
		background_counted[${job%%:*}]=1
		background_cpu=$((background_cpu + $(cut -d' ' -f3 "target/logs/${job#*:}.cpu")))
	done
	cpu=$((cpu_now - background_cpu))
	[ -z "${stage_name:-}" ] || timings+=("$(printf '%5ds %6ds  %s' $((SECONDS - stage_start)) $((cpu - stage_cpu)) "$stage_name")")
	stage_name=$1
	stage_start=$SECONDS
	stage_cpu=$cpu
	[ -z "$1" ] || echo "== $1"
}
report() { # the time and CPU per stage, then per background job
	printf '%s\n' "== time per stage (wall, then CPU seconds, user and system)" "${timings[@]}"
	local f printed=
	for f in target/logs/*.cpu; do
		[ -f "$f" ] || continue
		[ -n "$printed" ] || { echo "== background jobs (started, ended, CPU seconds)"; printed=1; }
		printf '%5ds %5ds %6ds  %s\n' $(cat "$f") "$(basename "$f" .cpu)"
	done
}
# At the end, the time per stage; after a failure, the background jobs are stopped too.
rm -f target/logs/*.cpu
trap 'stage ""; report; stop_background' EXIT

install_test=${PHP_WORKER_INSTALL_TEST:-1}
if [ $# -gt 0 ]; then install_test=0; fi            # a selection of tests
if [ "$(id -u)" != 0 ]; then install_test=0; fi     # the chroot needs root
php82=${PHP_WORKER_PHP82:-1}
e2e_jobs=${PHP_WORKER_E2E_JOBS:-2}
if [ $# -gt 0 ]; then php82=0; fi
for v in "$install_test" "$php82"; do
	[[ $v == [01] ]] || { echo "PHP_WORKER_INSTALL_TEST and PHP_WORKER_PHP82 must be 0 or 1" >&2; exit 2; }
done
[[ $e2e_jobs =~ ^[1-9][0-9]?$ ]] || { echo "PHP_WORKER_E2E_JOBS must be a number from 1 to 99" >&2; exit 2; }

# Before 15 minutes of building: how the build picks PHP's source and what it says when
# PHP is behind, which packages the image takes, and the smoke check's load generator
# (fakes and loopback, no network).
stage "build and test scripts: fetch-source.py's choice, php-currency.py's warnings, the image's packages, the smoke check's load generator (tests/scripts)"
python3 -m unittest discover -s tests/scripts

# Builds that only later stages need run in the background from here on, at a low CPU
# and the lowest disk priority: they take what the stages in front leave idle (the
# end-to-end suite mostly waits on servers, timers and sockets), and barely slow those
# stages down.
# Each logs to target/logs/<name>.log, shown if it fails.
background() { # [-n niceness] name, then the command (a function too): runs it niced (19 unless -n), its output in target/logs/<name>.log
	local nice=19
	if [ "$1" = -n ]; then
		nice=$2
		shift 2
	fi
	local name=$1
	shift
	(
		renice -n "$nice" -p "$BASHPID" >/dev/null
		ionice -c 3 -p "$BASHPID"
		started=$SECONDS
		status=0
		"$@" || status=$?
		# When it started and ended (seconds into the run), and the CPU it took.
		children_cpu "target/logs/$name.times"
		echo "$started $SECONDS $cpu_now" >"target/logs/$name.cpu"
		exit $status
	) >"target/logs/$name.log" 2>&1 &
	background_pids+=("$!:$name")
	background_all+=("$!:$name")
}
wait_background() { # [name...]: waits for those background jobs (all without a name); fails if one did
	local failed=0 job rest=()
	for job in "${background_pids[@]}"; do
		if [ $# -gt 0 ] && [[ " $* " != *" ${job#*:} "* ]]; then
			rest+=("$job")
			continue
		fi
		wait "${job%%:*}" || { echo "== ${job#*:} failed:"; tail -n 60 "target/logs/${job#*:}.log"; failed=1; }
	done
	background_pids=("${rest[@]}")
	return $failed
}
kill_tree() { # a process and its descendants
	local child
	for child in $(pgrep -P "$1"); do kill_tree "$child"; done
	kill "$1" 2>/dev/null || true
}
stop_background() { # kills what is left of the background jobs
	local job
	for job in "${background_pids[@]}"; do kill_tree "${job%%:*}"; done
}
build82() { # PHP 8.2 at -O1, then rust-core and Caddy on it, as target/php-8.2-tests/caddy
	# -O1: this build is the critical path of a fresh machine's run, and the 8.2 stage
	# checks behaviour, not speed.
	PHP_WORKER_PHP_OPT=1 PHP_VERSION=8.2 scripts/build-php.sh
	mkdir -p target/php-8.2-tests
	# Not the PHP 8.4 build's environment (scripts/env.sh): a fresh one for 8.2.
	env -u PHP_CONFIG -u PHP_PREFIX -u PHP -u CGO_LDFLAGS PHP_WORKER_PHP_OPT=1 PHP_VERSION=8.2 \
		CARGO_TARGET_DIR="$PWD/target/php-8.2-tests" CADDY_OUTPUT=target/php-8.2-tests/caddy ./xcaddy.sh
	[[ $(target/php-8.2-tests/caddy version) == *", PHP 8.2."* ]] || { echo "target/php-8.2-tests/caddy is not on PHP 8.2"; return 1; }
}
install_test_run() { # the static libraries, the portable binary and the .deb; then the install and image tests
	scripts/build-static-deps.sh && scripts/build-portable.sh && scripts/build-deb.sh &&
		tests/install/clean-root.sh && tests/install/image.sh
}
pip_install() { # module, then pip's requirement
	python3 -c "import $1" 2>/dev/null || python3 -m pip install --quiet "$2"
}
python_modules() { # the end-to-end suite's Python modules
	pip_install pytest pytest &&
		pip_install xdist pytest-xdist==3.8.0 &&                    # the suite in two processes, a file at a time in each
		pip_install opentelemetry.proto opentelemetry-proto==1.45.2 && # the OTLP messages test_traces.py decodes
		pip_install aioquic aioquic==1.7.2 &&                          # the HTTP/3 tests' client (Debian's curl has none)
		pip_install h2 h2==4.2.0 &&                                    # the security suite's HTTP/2 client
		pip_install yaml PyYAML==6.0.3                                 # the Kubernetes manifests' test
}

stage "build: Debian packages and PHP 8.4 (cached); PHP 8.2, the portable build and the Python modules start in the background"
# Every package the stages need, in one apt run: the background jobs would otherwise
# run apt at once and wait on each other's lock.
deps=(--tests --portable --bench)
[ "$install_test" = 0 ] || deps+=(--deb --install-test --image)
scripts/install-deps.sh "${deps[@]}"
# The Python modules go first among the background jobs (a nice of 10 against the builds'
# 19 weighs about 7 to 1): the end-to-end suite needs them long before anything needs
# PHP 8.2 or the portable build.
background -n 10 python-modules python_modules
# PHP 8.4 before the jobs that build on it (the portable build's PHP is the same build).
scripts/build-php.sh >/dev/null
# PHP 8.2 ahead of the install test (a nice of 10 against 19): on a fresh machine the
# run waits for PHP 8.2 once the smoke check ends, while the install test has until the
# end, and the PHP 8.2 stage leaves it more than a CPU.
[ "$php82" = 0 ] || background -n 10 php-8.2-build build82
[ "$install_test" = 0 ] || background install-test install_test_run

stage "build: rust-core and ./caddy on PHP 8.4"
./xcaddy.sh
source scripts/env.sh

stage "rust-core: unit tests and header check"
cargo test --locked -p php-worker-core
python3 scripts/check-call-graphs.py # no cycle between csrc/*.c files nor Rust modules

stage "rust-core: clippy, warnings denied (every unsafe block documented)"
if cargo clippy --version >/dev/null 2>&1; then
	cargo clippy --locked -p php-worker-core --all-targets -- -D warnings
else
	echo "skipped: this Rust toolchain has no clippy (rustup component add clippy)"
fi

stage "go-module: formatting, vet, and unit tests under the race detector"
unformatted=$(cd go-module && gofmt -l .)
[ -z "$unformatted" ] || { echo "gofmt would change: $unformatted"; exit 1; }
(cd go-module && go vet ./... && go test -race -count=1 ./...)

stage "Kubernetes manifests: every document against Kubernetes' API types (tests/kubernetes/)"
(cd tests/kubernetes && go vet ./... && go test -count=1 ./...)

stage "go-module: fuzz targets, 10 s each from their corpora (tests/fuzz.sh)"
# A worker per CPU: gathering the baseline coverage of a target's corpus (its seeds and
# the inputs earlier runs found, kept in Go's cache) counts in the 10 s, and one worker
# alone would spend it all there as the corpus grows.
FUZZ_TIME=${FUZZ_TIME:-10s} tests/fuzz.sh

stage "waiting for the end-to-end suite's Python modules"
wait_background python-modules

stage "end to end (PHP $("$PHP_CONFIG" --version))"
# Two processes, each running one file's tests at a time (pytest-xdist): the suite mostly
# waits on servers, timers and sockets, so a second process halves its time on 2 cores.
# Each has its own work folder and ports (tests/e2e/conftest.py).
python3 -m pytest -q -n "$e2e_jobs" --dist loadfile tests/e2e "$@"

stage "benchmark smoke check (every workload briefly, every server must answer correctly)"
SKIP_BUILD=1 tests/bench/run.sh --quick

[ "$install_test" != 0 ] || echo "== install and image tests: skipped (PHP_WORKER_INSTALL_TEST=0, pytest arguments, or not root)"

if [ "$php82" = 0 ]; then
	echo "== PHP 8.2: skipped (pytest arguments, or PHP_WORKER_PHP82=0)"
else
	stage "waiting for the PHP 8.2 build"
	wait_background php-8.2-build
	stage "PHP 8.2 (beside the install and image tests): security, faults, survival, workers, reloads, processes, the command line, extensions, parity, Xdebug and the profiler, end to end"
	# The tests that build an extension (phpize) build it for the PHP this Caddy embeds:
	# the -O1 build, which build82 left cached (its php-config, at once).
	php82_config=$(env -u PHP_CONFIG -u PHP_PREFIX -u PHP PHP_WORKER_PHP_OPT=1 PHP_VERSION=8.2 scripts/build-php.sh)
	PHP_CONFIG=$php82_config PHP_WORKER_CADDY=$PWD/target/php-8.2-tests/caddy python3 -m pytest -q -n "$e2e_jobs" --dist loadfile tests/e2e/test_security.py tests/e2e/test_faults.py \
		tests/e2e/test_survival.py tests/e2e/test_worker.py tests/e2e/test_reload.py tests/e2e/test_processes.py \
		tests/e2e/test_cli.py tests/e2e/test_extensions.py tests/e2e/test_parity.py tests/e2e/test_debug.py \
		tests/e2e/test_profile.py
fi

stage "install test (the portable binary and the .deb in a clean Debian 12 root) and image test (the OCI image, unpacked and run as PID 1 of its own namespaces): what is left of them"
[ "$install_test" = 0 ] || { wait_background install-test && cat target/logs/install-test.log; }
