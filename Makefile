# Entry points; the real work is in scripts/ so that CI (.ci/run) and
# developers run the same commands.
# To add a target: give it a line in .PHONY and a recipe below.

GO ?= go

.PHONY: all deps demo test image reliability bench bench-quick leases

all: test

deps: ## install redis-server, faketime and gcc (apt-get, as root)
	scripts/install-deps.sh

demo: ## run the live Redlock demo on five local masters: redis-server if in PATH (make deps), else in-process ones; installs nothing
	cd cmd/redlock && $(GO) run . demo

test: ## gofmt, vet and the whole test suite with -race (the CI command)
	scripts/test.sh

image: ## build redlock-redis:local for the container backend (docker import of Debian's redis-server)
	scripts/build-image.sh

reliability: deps ## run every nemesis scenario and rewrite RELIABILITY.md (about 20 min)
	cd cmd/reliability && $(GO) run . -o ../../RELIABILITY.md

bench: ## run the benchmark suites and write BENCHMARKS.md and docs/bench/*.png (about 10 min)
	cd bench && $(GO) run ./cmd/benchreport

bench-quick: ## a one-minute smoke run of the same (numbers not meaningful)
	cd bench && $(GO) run ./cmd/benchreport -quick -noprofile

leases: ## hold 20,000 (2s TTL) and 100,000 (10s TTL) auto-renewed locks for 60s each on five local masters (about 5 min; run on a quiet machine)
	cd integration && $(GO) test -run 'TestManyLeases' -leases.long -timeout 30m -v .
