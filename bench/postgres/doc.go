// Package postgres benchmarks the PostgreSQL store against a bare
// single-statement upsert on the same pool and server. The benchmarks read
// RATELIMIT_POSTGRES_URL and skip when it is unset. With
// RATELIMIT_BENCH_FORMS=1, TestFormsReport compares the generated SQL forms
// with a frozen copy of the hand-written ones they replaced
// (bench/internal/handforms).
package postgres
