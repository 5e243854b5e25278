#!/usr/bin/env bash
# Fuzzes every Go native fuzz target of go-module's packages (their *fuzz_test.go) for
# a bounded time each, starting from its seeds and its corpus in the package's
# testdata/fuzz/<Name>/, and fails if any target crashes. A crash leaves its input in
# that folder: commit it, and `go test` replays it as a regression test.
#
#   tests/fuzz.sh                          every target, 20 s each
#   FUZZ_TIME=2m tests/fuzz.sh             longer (a Go duration, plain seconds, or Nx for N inputs)
#   FUZZ_PARALLEL=1 tests/fuzz.sh          one fuzzing worker (default: one per CPU)
#   tests/fuzz.sh FuzzResolve FuzzCaddyfile  some targets
#
# Prints each target's executions (the last "execs" count go test reported).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

fuzz_time=${FUZZ_TIME:-20s}
[[ $fuzz_time =~ ^[0-9]+$ ]] && fuzz_time=${fuzz_time}s
# A test binary panics after -timeout, fuzzing included: leave room past the fuzz time
# for the build and the seed corpus. A fuzzing worker that hangs is caught by go test
# itself.
timeout=0
[[ $fuzz_time =~ ^([0-9]+)s$ ]] && timeout=$((BASH_REMATCH[1] + 300))s

cd go-module
# Every target as <package dir>:<name>; a name given on the command line is looked up.
# Read from the test files go list names (those of this build's tags): `go test -list`
# would compile and link every package's test binary, PHP included, to list them.
all=()
while read -r dir files; do
	[ -n "$files" ] || continue
	for name in $(cd "$dir" && sed -n 's/^func \(Fuzz[[:alnum:]_]*\)(.*/\1/p' $files); do
		all+=(".${dir#"$PWD"}:$name")
	done
done < <(go list -f '{{.Dir}}{{range .TestGoFiles}} {{.}}{{end}}{{range .XTestGoFiles}} {{.}}{{end}}' ./...)
targets=()
if [ $# -eq 0 ]; then
	targets=("${all[@]}")
else
	for want in "$@"; do
		found=
		for t in "${all[@]}"; do
			[ "${t##*:}" = "$want" ] && { targets+=("$t"); found=1; }
		done
		[ -n "$found" ] || { echo "no fuzz target $want in go-module"; exit 1; }
	done
fi
[ ${#targets[@]} -gt 0 ] || { echo "no fuzz targets found in go-module"; exit 1; }

log=$(mktemp)
trap 'rm -f "$log"' EXIT
summary=()
failed=0
for entry in "${targets[@]}"; do
	pkg=${entry%%:*} target=${entry##*:}
	echo "== $target in $pkg ($fuzz_time)"
	# Go 1.26's fuzz coordinator can fail a target at the -fuzztime boundary with a bare
	# "context deadline exceeded" when a worker is mid-input as time runs out (on a
	# loaded machine mostly; fixed in Go 1.27): no input failed and none was written. Such
	# a target runs once more; a real failure names its input, and is never retried.
	for attempt in 1 2; do
		status=0
		go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzz_time" -timeout "$timeout" \
			${FUZZ_PARALLEL:+-parallel "$FUZZ_PARALLEL"} "$pkg" 2>&1 | tee "$log" || status=$?
		if [ "$status" -eq 0 ] || [ "$attempt" -eq 2 ] || ! grep -q 'context deadline exceeded' "$log" \
			|| grep -q 'Failing input written' "$log" || grep -Eq '^\s+(panic|.*_test\.go:[0-9]+:)' "$log"; then
			break
		fi
		echo "== $target: Go's fuzz deadline race (no failing input): once more"
	done
	execs=$(grep -o 'fuzz: elapsed: [^,]*, execs: [0-9]*' "$log" | tail -n 1 | grep -o '[0-9]*$' || true)
	if [ "$status" -ne 0 ]; then
		failed=1
		summary+=("$(printf '%-22s FAILED after %s execs' "$target" "${execs:-0}")")
		if crasher=$(grep -o "testdata/fuzz/${target}/[0-9a-zA-Z_.-]*" "$log" | tail -n 1); then
			summary+=("$(printf '%-22s   input: go-module/%s/%s' '' "${pkg#./}" "$crasher")")
		fi
	else
		summary+=("$(printf '%-22s ok, %s execs' "$target" "${execs:-no}")")
	fi
done

echo "== fuzzing summary ($fuzz_time per target)"
printf '%s\n' "${summary[@]}"
exit "$failed"
