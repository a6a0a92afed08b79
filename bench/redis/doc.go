// Package redis benchmarks the SDK's Redis and Valkey stores against peer
// libraries and a bare script round trip, on the same server with the same
// client settings, in one process: store/redis against
// github.com/go-redis/redis_rate/v10, github.com/throttled/throttled/v2,
// github.com/ulule/limiter/v3's Redis store and INCR+PEXPIRE in one Lua
// script, all through one go-redis client; store/valkey against the same
// script sent through valkey-go. It also counts over-admission on a hot key.
//
// The benchmarks read RATELIMIT_REDIS_ADDR and RATELIMIT_VALKEY_ADDR and
// skip when they are unset; scripts/with-servers.sh sets them. Run
//
//	bash scripts/with-servers.sh bash -c 'cd bench && go test -run ^$ -bench . -benchmem ./redis/'
//
// for the raw figures, and with RATELIMIT_BENCH_REPORT=1 and -run TestReport
// for the table of ratios in docs/benchmarks.md. With RATELIMIT_BENCH_FORMS=1
// and -run TestFormsReport it compares the generated Lua forms with a frozen
// copy of the hand-written ones they replaced (bench/internal/handforms).
package redis
