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
	local t0=$SECONDS
	"$@"
	echo "    ($((SECONDS - t0))s)"
}
finish() {
	local status=$?
	if [ "$status" -eq 0 ]; then
		echo "test.sh: PASS (deps, gofmt, vet, go test -race of every module, on processes and containers) in $((SECONDS - started))s"
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

# The library (root) and the nested modules that hold the harness, the
# tests against real masters, the commands, the benchmarks, the adapters
# with dependencies of their own (rueidis, OpenTelemetry), and the test kit
# with its example user module.
modules=(. integration cmd/redlock cmd/reliability bench rueidisadapter otelredlock redlocktest redlocktest/example)

vet_all() {
	local m
	for m in "${modules[@]}"; do (cd "$m" && go vet ./...) || return 1; done
}

# staticcheck, pinned, built from the Go module proxy.
staticcheck_all() {
	local m
	for m in "${modules[@]}"; do
		(cd "$m" && go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...) || return 1
	done
}

# The root module is what users import: it may require nothing but these.
check_root_requires() {
	local extra
	extra=$(go list -m -f '{{if not .Indirect}}{{if not .Main}}{{.Path}}{{end}}{{end}}' all |
		grep -v -x -e github.com/redis/go-redis/v9 -e golang.org/x/sync \
			-e github.com/google/uuid -e github.com/stretchr/testify || true)
	if [ -n "$extra" ]; then
		echo "go.mod: the root module must require only go-redis, x/sync, uuid and testify; also requires:" >&2
		echo "$extra" >&2
		return 1
	fi
}

race() { # race DIR PACKAGES...: go test -race in one module
	local dir=$1
	shift
	(cd "$dir" && env REDLOCK_REQUIRE_INTEGRATION=1 go test -race -count=1 -p 1 -timeout 15m "$@")
}

run_step "install-deps" scripts/install-deps.sh
run_step "gofmt" check_gofmt
run_step "root go.mod" check_root_requires
run_step "go vet (every module)" vet_all
run_step "staticcheck (every module)" staticcheck_all
run_step "go test -race (library, examples)" race . ./...
run_step "go test -race (integration, processes)" race integration ./...
run_step "go test -race (demo, operations commands)" race cmd/redlock ./...
run_step "go test -race (OpenTelemetry adapter)" race otelredlock ./...
run_step "go test -race (redlocktest: conformance on the kit and on redis-server)" race redlocktest ./...

# A user's test with redlocktest needs no Redis binary: run the example
# module with a PATH that holds only go (and no cgo, so no C compiler).
example_without_redis() {
	local bin
	bin=$(mktemp -d)
	ln -s "$(command -v go)" "$bin/go"
	if env PATH="$bin" /bin/sh -c 'command -v redis-server' >/dev/null; then
		echo "redis-server is still on the test PATH" >&2
		rm -rf "$bin"
		return 1
	fi
	local rc=0
	(cd redlocktest/example && env PATH="$bin" CGO_ENABLED=0 go test -count=1 ./...) || rc=$?
	rm -rf "$bin"
	return $rc
}
run_step "go test (redlocktest example, no redis-server on PATH)" example_without_redis
run_step "go test -race (bench helpers)" race bench ./...

# Integration tests on five containerized masters (an image
# built locally from Debian's redis-server: nothing can be pulled here).
run_step "build image" scripts/build-image.sh
containers() { REDLOCK_BACKEND=container REDLOCK_REDIS_IMAGE=redlock-redis:local race "$@"; }
# On containers, the integration package runs the tests whose mechanics
# differ per backend (they kill, pause, restart or stop masters, or test the
# containers themselves) and two baselines; every other test there only talks
# to the masters, and has run on processes above. The whole package runs on
# both backends with REDLOCK_CONTAINER_TESTS=all (about 4 minutes more).
backend_tests='^Test(Container\w*|Failover\w*|AcquireReleaseOnAllFive|ContendingClientsNeverOverlap'
backend_tests+='|AcquireWithdrawnFromMasterThatIsBehind|AutoRenewKeepsAnExtendedTTL|AutoRenewKeepsLockThroughFiveTTLs'
backend_tests+='|CancelledAcquireLeavesNoKey|CancelledAcquiresLeaveNoKeyWhenStalledMastersLoseScripts|CloseEndsPendingCleanup'
backend_tests+='|ErrorTextNamesEachMastersPart|FailedShorterExtendNeverShortens|FenceKeysExpire|FencingTokensGrowAcrossEmptyRestarts'
backend_tests+='|LostSignalWhenQuorumIsGone|PausedHolderLateWriteIsRejected|PausedMasterDoesNotHoldAcquireBack'
backend_tests+='|RefusedAcquireDoesNotWaitForPausedMaster|ReleaseAfterRepairOfWithdrawnMaster|ReplicaDoesNotCount'
backend_tests+='|RestartedMasterIsIdentifiedAgain|ThreeDeadMastersFailAndLeaveNothing|TwoDeadMastersStillAcquire'
backend_tests+='|VerifyIsBoundedWhenAMasterIsPaused)$'
# Every test the list names must exist: a renamed one would drop out of -run
# silently.
check_backend_tests() {
	missing=0
	for name in $(printf '%s' "$backend_tests" | sed 's/^\^Test(//; s/)\$$//' | tr '|' '\n' | grep -v '\\w'); do
		if ! grep -q "^func Test$name(" integration/*_test.go; then
			echo "test.sh: backend_tests names Test$name, which integration/ does not have" >&2
			missing=1
		fi
	done
	return $missing
}
run_step "container test list names existing tests" check_backend_tests
if [ "${REDLOCK_CONTAINER_TESTS:-}" = all ]; then backend_tests=.; fi
run_step "go test -race (integration, containers)" containers integration -run "$backend_tests" .
run_step "go test -race (mutex and rwmutex, containers)" containers integration ./mutextest ./rwmutextest
