package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/clock"
	"github.com/ratelimitkit/ratelimit/store/postgres"
)

// A store is built on a pool. Neither pgxpool.New nor postgres.New talks to
// the server, so this runs without one. By default the store decides by the
// server's clock, so a limiter on it takes no clock of its own.
func ExampleNew() {
	pool, err := pgxpool.New(context.Background(), "postgres://app@localhost:5432/app")
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	store, err := postgres.New(pool, postgres.WithTable("limits"))
	if err != nil {
		panic(err)
	}
	fmt.Println("table:", store.Table(), "server clock:", store.ServerClock())

	_, err = ratelimit.New(store, algorithms.GCRA(100, time.Minute, 20), ratelimit.WithClock(clock.NewFake(time.Unix(0, 0))))
	fmt.Println("fake clock refused:", errors.Is(err, ratelimit.ErrInvalidParams))

	// A catalog table name would resolve to pg_catalog first.
	_, err = postgres.New(pool, postgres.WithTable("pg_class"))
	fmt.Println(errors.Is(err, ratelimit.ErrInvalidParams))
	// Output:
	// table: "limits" server clock: true
	// fake clock refused: true
	// true
}

// SchemaSQL is what Migrate runs, for teams that apply migrations with
// their own tools: the table, a few helper functions, every algorithm's
// SQL form and the table's decide functions.
func ExampleStore_SchemaSQL() {
	pool, err := pgxpool.New(context.Background(), "postgres://app@localhost:5432/app")
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	store, err := postgres.New(pool, postgres.WithTable("limits"), postgres.WithUnlogged())
	if err != nil {
		panic(err)
	}
	for _, line := range strings.Split(store.SchemaSQL(), "\n") {
		if strings.HasPrefix(line, "CREATE") && strings.Contains(line, "TABLE") || strings.Contains(line, "FUNCTION \"limits_decide_") {
			fmt.Println(line)
		}
	}
	// Output:
	// CREATE UNLOGGED TABLE IF NOT EXISTS "limits" (
	// CREATE OR REPLACE FUNCTION "limits_decide_fixed_window"(
	// CREATE OR REPLACE FUNCTION "limits_decide_sliding_log"(
	// CREATE OR REPLACE FUNCTION "limits_decide_sliding_window"(
	// CREATE OR REPLACE FUNCTION "limits_decide_token_bucket"(
	// CREATE OR REPLACE FUNCTION "limits_decide_gcra"(
	// CREATE OR REPLACE FUNCTION "limits_decide_leaky_bucket"(
	// CREATE OR REPLACE FUNCTION "limits_decide_all"(
}
