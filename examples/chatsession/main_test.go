package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/store/postgres"
)

// The scenario against the real servers: PostgreSQL holds the leases; the
// transcript is in PostgreSQL, then in DynamoDB.
func TestChatSession(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, testserver.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	suffix := fmt.Sprintf("%d", time.Now().UnixNano())
	drop := func(tables ...string) {
		for _, tb := range tables {
			if _, err := pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+pgx.Identifier{tb}.Sanitize()); err != nil {
				t.Errorf("drop %s: %v", tb, err)
			}
		}
	}
	t.Cleanup(func() { drop("cs_leases_"+suffix, "cs_"+suffix+"_sessions", "cs_"+suffix+"_messages") })
	store, err := postgres.New(pool, postgres.WithTable("cs_leases_"+suffix))
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	pgt, err := NewPostgresTranscript(ctx, pool, "cs_"+suffix)
	if err != nil {
		t.Fatal(err)
	}
	ddb := newDynamoClient(testserver.DynamoDBEndpoint(t))
	dt, err := NewDynamoTranscript(ctx, ddb, "cs-"+suffix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := ddb.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String("cs-" + suffix)}); err != nil {
			t.Errorf("delete table: %v", err)
		}
	})
	for _, c := range []struct {
		name string
		tr   Transcript
	}{{"PostgreSQL", pgt}, {"DynamoDB", dt}} {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := demo(ctx, &out, c.name, store, c.tr, "s"); err != nil {
				t.Fatalf("demo: %v", err)
			}
			if !strings.Contains(out.String(), "no batch interleaved") || !strings.Contains(out.String(), "stale fence") {
				t.Errorf("demo printed:\n%s", out.String())
			}

			// The paused worker again, with the leases in PostgreSQL on
			// the fake clock.
			fake, err := postgres.New(pool, postgres.WithTable("cs_leases_"+suffix), postgres.WithRequestClock())
			if err != nil {
				t.Fatal(err)
			}
			stale, err := pausedWorker(ctx, fake, c.tr, "paused-pg-lease-"+c.name)
			if err != nil || !errors.Is(stale, ErrStaleFence) {
				t.Errorf("pausedWorker with PostgreSQL leases = %v, %v; want ErrStaleFence", stale, err)
			}

			// The fence check alone: equal is accepted, lower refused.
			if err := c.tr.Append(ctx, "direct", 10, "x", []string{"1"}); err != nil {
				t.Fatal(err)
			}
			if err := c.tr.Append(ctx, "direct", 10, "x", []string{"2"}); err != nil {
				t.Errorf("Append with the same fence = %v, want nil (one holder writes several times)", err)
			}
			if err := c.tr.Append(ctx, "direct", 9, "y", []string{"3"}); !errors.Is(err, ErrStaleFence) {
				t.Errorf("Append with a lower fence = %v, want ErrStaleFence", err)
			}
			msgs, err := c.tr.Read(ctx, "direct")
			if err != nil || len(msgs) != 2 {
				t.Errorf("Read after a refused Append = %d messages, %v; want 2", len(msgs), err)
			}
		})
	}
}
