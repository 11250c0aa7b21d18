#!/usr/bin/env bash
# The project's test command (`make test`, `.ci/run`): installs the system
# dependencies, checks formatting and vet, then runs every test with the race
# detector. REDLOCK_REQUIRE_INTEGRATION=1 makes a missing redis-server fail
# the integration tests instead of skipping them.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

started=$SECONDS
step=""
run_step() { # run_step NAME CMD...: announce and run one step
	step=$1
	shift
	echo "==> $step"
	"$@"
}
finish() {
	local status=$?
	if [ "$status" -eq 0 ]; then
		echo "test.sh: PASS (deps, gofmt, vet, go test -race on processes and containers, bench vet) in $((SECONDS - started))s"
	else
		echo "test.sh: FAIL at step '$step' (exit $status) after $((SECONDS - started))s" >&2
	fi
}
trap finish EXIT

check_gofmt() {
	local unformatted
	unformatted=$(gofmt -l .)
	if [ -n "$unformatted" ]; then
		echo "gofmt: these files need formatting (run gofmt -w):" >&2
		echo "$unformatted" >&2
		return 1
	fi
}

run_step "install-deps" scripts/install-deps.sh
run_step "gofmt" check_gofmt
run_step "go vet" go vet ./...
run_step "go test -race" env REDLOCK_REQUIRE_INTEGRATION=1 go test -race -count=1 -p 1 -timeout 15m ./...

# The same integration tests again, on five containerized masters (an image
# built locally from Debian's redis-server: nothing can be pulled here).
run_step "build image" scripts/build-image.sh
run_step "go test -race (container backend)" env REDLOCK_BACKEND=container \
	REDLOCK_REDIS_IMAGE=redlock-redis:local REDLOCK_REQUIRE_INTEGRATION=1 \
	go test -race -count=1 -p 1 -timeout 15m ./integration/ ./mutex/ ./rwmutex/ ./cmd/redlock/
run_step "go vet (bench module)" bash -c 'cd bench && go vet ./...'
