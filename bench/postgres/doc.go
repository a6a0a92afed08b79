// Package postgres benchmarks the PostgreSQL store against a bare
// single-statement upsert on the same pool and server. The benchmarks read
// RATELIMIT_POSTGRES_URL and skip when it is unset.
package postgres
