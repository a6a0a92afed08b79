// Command chatsession is the seed scenario of the lease package: several
// workers may receive messages of one chat session at once, and must never
// process it concurrently. Each worker appends its batch to the session's
// transcript under the session's lease, passing the lease's fence, and the
// transcript refuses a fence below the last one it accepted. A worker that
// pauses past its lease (shown on a fake clock) is refused, so the
// transcript stays in order with no interleaving.
//
// It runs against PostgreSQL (the lease's store and the transcript) and,
// when an endpoint is given, DynamoDB (a second transcript, with the fence
// check as a condition expression):
//
//	go run ./examples/chatsession -postgres "$RATELIMIT_POSTGRES_URL" -dynamodb "$RATELIMIT_DYNAMODB_ENDPOINT"
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ratelimitkit/ratelimit/clock"
	"github.com/ratelimitkit/ratelimit/lease"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/memory"
	"github.com/ratelimitkit/ratelimit/store/postgres"
)

func main() {
	pgURL := flag.String("postgres", os.Getenv("RATELIMIT_POSTGRES_URL"), "PostgreSQL URL (required)")
	ddb := flag.String("dynamodb", os.Getenv("RATELIMIT_DYNAMODB_ENDPOINT"), "DynamoDB endpoint (optional)")
	flag.Parse()
	if *pgURL == "" {
		log.Fatal("chatsession: give -postgres URL (or set RATELIMIT_POSTGRES_URL); `make servers-up` starts one")
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, *pgURL)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store, err := postgres.New(pool, postgres.WithTable("chatsession_leases"))
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	session := fmt.Sprintf("session-%d", time.Now().UnixNano())
	pgt, err := NewPostgresTranscript(ctx, pool, "chatsession")
	if err != nil {
		log.Fatal(err)
	}
	transcripts := []struct {
		name string
		tr   Transcript
	}{{"PostgreSQL", pgt}}
	if *ddb != "" {
		dt, err := NewDynamoTranscript(ctx, newDynamoClient(*ddb), "chatsession")
		if err != nil {
			log.Fatal(err)
		}
		transcripts = append(transcripts, struct {
			name string
			tr   Transcript
		}{"DynamoDB", dt})
	}
	for _, t := range transcripts {
		if err := demo(ctx, os.Stdout, t.name, store, t.tr, session); err != nil {
			log.Fatal(err)
		}
	}
}

func newDynamoClient(endpoint string) *dynamodb.Client {
	return dynamodb.NewFromConfig(aws.Config{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("local", "local", ""),
	}, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(endpoint) })
}

// demo runs both halves of the scenario on one transcript and reports.
func demo(ctx context.Context, out io.Writer, name string, store store.Store, tr Transcript, session string) error {
	const workers, batches, size = 4, 3, 3
	locker, err := lease.New(store, 10*time.Second, lease.WithName("chat-session"), lease.WithPollInterval(5*time.Millisecond))
	if err != nil {
		return err
	}
	if err := runWorkers(ctx, locker, tr, session+"-workers", workers, batches, size); err != nil {
		return err
	}
	msgs, err := tr.Read(ctx, session+"-workers")
	if err != nil {
		return err
	}
	if err := checkTranscript(msgs, workers*batches, size); err != nil {
		return err
	}
	fmt.Fprintf(out, "%s: %d workers appended %d batches of %d messages: in order, no batch interleaved\n", name, workers, workers*batches, size)

	stale, err := pausedWorker(ctx, memory.MustNew(), tr, session+"-paused")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%s: a worker that paused past its lease was refused: %v\n", name, stale)
	return nil
}

// runWorkers runs workers that each append batches of size messages to
// session, one message at a time, every batch under the session's lease.
func runWorkers(ctx context.Context, locker *lease.Locker, tr Transcript, session string, workers, batches, size int) error {
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := 0; b < batches; b++ {
				msgs := make([]string, size)
				for m := range msgs {
					msgs[m] = fmt.Sprintf("w%d-b%d-m%d", w, b, m)
				}
				// One message at a time, as a worker processes them:
				// only the lease keeps another worker's messages from
				// landing between them.
				err := locker.Do(ctx, session, func(ctx context.Context, l *lease.Lease) error {
					for _, m := range msgs {
						if err := tr.Append(ctx, session, l.Fence(), fmt.Sprintf("w%d", w), []string{m}); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					errs <- fmt.Errorf("worker %d batch %d: %w", w, b, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return errors.Join(<-errs) // nil when the channel is empty
}

// checkTranscript checks that msgs holds n batches of size messages, each
// batch contiguous and in order, with fences that never go down.
func checkTranscript(msgs []Message, n, size int) error {
	if len(msgs) != n*size {
		return fmt.Errorf("transcript holds %d messages, want %d", len(msgs), n*size)
	}
	for i, m := range msgs {
		if i > 0 && m.Fence < msgs[i-1].Fence {
			return fmt.Errorf("message %d (%s) has fence %d, below the previous %d", i, m.Body, m.Fence, msgs[i-1].Fence)
		}
		batch := msgs[i-i%size]
		prefix := batch.Body[:strings.LastIndex(batch.Body, "-m")]
		if want := fmt.Sprintf("%s-m%d", prefix, i%size); m.Body != want || m.Fence != batch.Fence {
			return fmt.Errorf("message %d is %q (fence %d), want %q (fence %d): batches interleaved", i, m.Body, m.Fence, want, batch.Fence)
		}
	}
	return nil
}

// pausedWorker plays a worker that stops (a long GC pause, a frozen VM)
// while holding the lease, on a fake clock: its lease runs out, another
// worker takes the session and writes, and the paused worker's late write
// is refused by the transcript's fence check. It returns that refusal.
func pausedWorker(ctx context.Context, store store.Store, tr Transcript, session string) (error, error) {
	c := clock.NewFake(time.Now())
	const ttl = 10 * time.Second
	locker, err := lease.New(store, ttl, lease.WithName("chat-session"), lease.WithClock(c))
	if err != nil {
		return nil, err
	}
	a, err := locker.TryAcquire(ctx, session)
	if err != nil {
		return nil, err
	}
	if err := tr.Append(ctx, session, a.Fence(), "a", []string{"a-1"}); err != nil {
		return nil, err
	}
	c.Advance(ttl + time.Second) // worker a pauses past its lease
	b, err := locker.TryAcquire(ctx, session)
	if err != nil {
		return nil, fmt.Errorf("takeover after the pause: %w", err)
	}
	if err := tr.Append(ctx, session, b.Fence(), "b", []string{"b-1"}); err != nil {
		return nil, err
	}
	stale := tr.Append(ctx, session, a.Fence(), "a", []string{"a-2, written after the pause"})
	if !errors.Is(stale, ErrStaleFence) {
		return nil, fmt.Errorf("the paused worker's write with fence %d after fence %d = %v, want ErrStaleFence", a.Fence(), b.Fence(), stale)
	}
	msgs, err := tr.Read(ctx, session)
	if err != nil {
		return nil, err
	}
	if len(msgs) != 2 || msgs[0].Body != "a-1" || msgs[1].Body != "b-1" {
		return nil, fmt.Errorf("transcript after the pause = %+v, want a-1 then b-1", msgs)
	}
	return stale, nil
}
