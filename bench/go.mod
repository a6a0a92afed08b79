module github.com/ratelimitkit/ratelimit/bench

go 1.26.8

require github.com/ratelimitkit/ratelimit v0.0.0

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-redis/redis_rate/v10 v10.0.1 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/pgx/v5 v5.12.0 // indirect
	github.com/redis/go-redis/v9 v9.23.0 // indirect
	github.com/throttled/throttled/v2 v2.15.0 // indirect
	github.com/valkey-io/valkey-go v1.0.79 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.41.0 // indirect
	golang.org/x/time v0.16.0 // indirect
)

replace github.com/ratelimitkit/ratelimit => ../
