module github.com/go-redlock/redlock/cmd/redlock

go 1.26.0

replace (
	github.com/go-redlock/redlock => ../..
	github.com/go-redlock/redlock/redlocktest => ../../redlocktest
)

require (
	github.com/go-redlock/redlock v0.0.0-00010101000000-000000000000
	github.com/go-redlock/redlock/redlocktest v0.0.0-00010101000000-000000000000
	github.com/redis/go-redis/v9 v9.23.0
	github.com/stretchr/testify v1.12.1
	go.uber.org/goleak v1.3.0
	golang.org/x/sync v0.24.0
)

require (
	github.com/alicebob/miniredis/v2 v2.40.0 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.48.0 // indirect
)
