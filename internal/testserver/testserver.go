// Package testserver owns every server process the tests talk to: the
// one place that picks a free loopback port, starts a server, decides that
// it serves, shows its log when it fails, and stops, restarts, freezes and
// thaws it.
//
// Tests in this module use real Redis, Valkey, PostgreSQL and
// DynamoDB-compatible servers, never mocks, in two ways:
//
//   - Shared servers, for most tests. `make test` (scripts/test.sh, through
//     scripts/with-servers.sh and scripts/servers.sh, which install the
//     programs) runs Up, which starts a standalone Redis, a 3-master Redis
//     Cluster, Valkey when installed, a throwaway PostgreSQL cluster and
//     dynalite, and writes their addresses as RATELIMIT_* variables for the
//     tests; Down stops them. Tests read the variables with RedisAddr,
//     RedisClusterAddrs, ValkeyAddr, PostgresURL and DynamoDBEndpoint.
//     Anyone can instead point the tests at servers of their own by setting
//     those variables: a variable that is set names a server that runs, and
//     Up starts nothing for it.
//   - Private servers, for the tests that stop, restart or freeze one:
//     StartRedis and StartDynalite start one that the test alone uses and
//     that stops when it ends. Never freeze or stop a shared server: other
//     packages' tests (and other people) use it at the same time.
//
// When a variable is empty or a server program is missing, the test skips
// with a message saying how to get a server, unless the CI variable is
// non-empty: in CI a missing server fails the test, so CI can never pass by
// skipping.
package testserver

import (
	"os"
	"strings"
	"testing"
)

// The environment variables read by this package. Up writes them; a
// variable that is already set names a server that is running, and Up does
// not start another one.
const (
	// EnvRedisAddr is a standalone Redis server, as host:port.
	EnvRedisAddr = "RATELIMIT_REDIS_ADDR"
	// EnvRedisClusterAddrs lists the nodes of a Redis Cluster, as
	// comma-separated host:port pairs.
	EnvRedisClusterAddrs = "RATELIMIT_REDIS_CLUSTER_ADDRS"
	// EnvValkeyAddr is a Valkey server (or a wire-compatible Redis), as
	// host:port.
	EnvValkeyAddr = "RATELIMIT_VALKEY_ADDR"
	// EnvPostgresURL is a PostgreSQL connection URL, such as
	// postgres://ratelimit@127.0.0.1:15432/ratelimit?sslmode=disable.
	EnvPostgresURL = "RATELIMIT_POSTGRES_URL"
	// EnvDynamoDBEndpoint is the base URL of a DynamoDB-compatible endpoint,
	// such as http://127.0.0.1:18000.
	EnvDynamoDBEndpoint = "RATELIMIT_DYNAMODB_ENDPOINT"
	// EnvCI, when non-empty, turns a missing server from a skip into a
	// failure.
	EnvCI = "CI"
)

// RedisAddr returns the host:port of the standalone Redis server named by
// RATELIMIT_REDIS_ADDR. When it is unset, the test skips (or fails in CI).
func RedisAddr(t testing.TB) string {
	t.Helper()
	return lookup(t, EnvRedisAddr, "a Redis server", "host:port")
}

// RedisClusterAddrs returns the host:port of each Redis Cluster node named by
// RATELIMIT_REDIS_CLUSTER_ADDRS. When it is unset, the test skips (or fails
// in CI).
func RedisClusterAddrs(t testing.TB) []string {
	t.Helper()
	const what, form = "a Redis Cluster", "host:port,host:port,..."
	addrs := splitList(os.Getenv(EnvRedisClusterAddrs))
	if len(addrs) == 0 {
		unavailable(t, EnvRedisClusterAddrs, what, form)
	}
	return addrs
}

// ValkeyAddr returns the host:port of the Valkey server named by
// RATELIMIT_VALKEY_ADDR. Where Valkey is not installed, the scripts point it
// at the standalone Redis server, which speaks the same protocol. When it is
// unset, the test skips (or fails in CI).
func ValkeyAddr(t testing.TB) string {
	t.Helper()
	return lookup(t, EnvValkeyAddr, "a Valkey (or Redis) server", "host:port")
}

// PostgresURL returns the connection URL of the PostgreSQL database named by
// RATELIMIT_POSTGRES_URL. When it is unset, the test skips (or fails in CI).
func PostgresURL(t testing.TB) string {
	t.Helper()
	return lookup(t, EnvPostgresURL, "a PostgreSQL database", "postgres://user@host:port/db?sslmode=disable")
}

// DynamoDBEndpoint returns the base URL of the DynamoDB-compatible endpoint
// named by RATELIMIT_DYNAMODB_ENDPOINT. When it is unset, the test skips (or
// fails in CI).
func DynamoDBEndpoint(t testing.TB) string {
	t.Helper()
	return lookup(t, EnvDynamoDBEndpoint, "a DynamoDB endpoint", "http://host:port")
}

// lookup returns the trimmed value of the variable env. When it is empty it
// reports the server as unavailable and returns "".
func lookup(t testing.TB, env, what, form string) string {
	t.Helper()
	v := strings.TrimSpace(os.Getenv(env))
	if v == "" {
		unavailable(t, env, what, form)
	}
	return v
}

// unavailable skips the test because env is unset, saying how to get what
// (a server) and the form the variable takes; when CI is set it fails the
// test instead. Both stop the test, so only a fake testing.TB returns.
func unavailable(t testing.TB, env, what, form string) {
	t.Helper()
	msg := env + " is not set: run `make test` to start " + what +
		" for the tests, or set " + env + "=" + form + " to use one that is running"
	if os.Getenv(EnvCI) != "" {
		t.Fatal(msg + " (CI is set, so a missing server fails instead of skipping)")
		return
	}
	t.Skip(msg)
}

// splitList splits a comma-separated list, trimming spaces and dropping
// empty elements.
func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
