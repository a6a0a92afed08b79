package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/store"
)

// BenchmarkDecide measures one caller's decisions (Store.Decide, server
// clock) on one key with a limit no run reaches, beside a bare upsert on the
// same pool: run it with -benchmem to see the client's allocations per call,
// and with -memprofile to see where they are.
func BenchmarkDecide(b *testing.B) {
	p := newTestPool(b, 1)
	ctx := context.Background()
	key := store.Key{Namespace: "bench", ID: "hot"}
	b.Run("upsert", func(b *testing.B) {
		t := pgx.Identifier{newTable(b, p, "rl_bench")}.Sanitize()
		if _, err := p.Exec(ctx, "CREATE TABLE "+t+" (k text PRIMARY KEY, n bigint NOT NULL)"); err != nil {
			b.Fatal(err)
		}
		q := "INSERT INTO " + t + " AS c (k, n) VALUES ($1, 1) ON CONFLICT (k) DO UPDATE SET n = c.n + 1 RETURNING n"
		b.ReportAllocs()
		for b.Loop() {
			var n int64
			if err := p.QueryRow(ctx, q, key.ID).Scan(&n); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, alg := range []algorithms.Algorithm{
		algorithms.GCRA(1_000_000_000, time.Second, 1_000_000_000),
		algorithms.FixedWindow(1_000_000_000, time.Second),
	} {
		b.Run(alg.Name(), func(b *testing.B) {
			s := newStore(b, p)
			req := algorithms.Request{Now: time.Now().UnixMicro(), Cost: 1}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Decide(ctx, key, alg, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
