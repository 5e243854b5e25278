#!/usr/bin/env bash
# Fuzzes every Go native fuzz target of go-module (go-module/*fuzz_test.go) for a
# bounded time each, starting from its seeds and its corpus in
# go-module/testdata/fuzz/<Name>/, and fails if any target crashes. A crash leaves its
# input in that folder: commit it, and `go test` replays it as a regression test.
#
#   tests/fuzz.sh                          every target, 20 s each
#   FUZZ_TIME=2m tests/fuzz.sh             longer (a Go duration, plain seconds, or Nx for N inputs)
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
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
	mapfile -t targets < <(go test -list '^Fuzz' . | grep '^Fuzz' || true)
fi
[ ${#targets[@]} -gt 0 ] || { echo "no fuzz targets found in go-module"; exit 1; }

log=$(mktemp)
trap 'rm -f "$log"' EXIT
summary=()
failed=0
for target in "${targets[@]}"; do
	echo "== $target ($fuzz_time)"
	status=0
	go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzz_time" -timeout "$timeout" . 2>&1 | tee "$log" || status=$?
	execs=$(grep -o 'fuzz: elapsed: [^,]*, execs: [0-9]*' "$log" | tail -n 1 | grep -o '[0-9]*$' || true)
	if [ "$status" -ne 0 ]; then
		failed=1
		summary+=("$(printf '%-22s FAILED after %s execs' "$target" "${execs:-0}")")
		if crasher=$(grep -o "testdata/fuzz/${target}/[0-9a-zA-Z_.-]*" "$log" | tail -n 1); then
			summary+=("$(printf '%-22s   input: go-module/%s' '' "$crasher")")
		fi
	else
		summary+=("$(printf '%-22s ok, %s execs' "$target" "${execs:-no}")")
	fi
done

echo "== fuzzing summary ($fuzz_time per target)"
printf '%s\n' "${summary[@]}"
exit "$failed"
