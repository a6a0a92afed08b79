package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The resource side of the lease: the transcript checks the fence of every
// write, and refuses a fence below the last one it accepted. This is what
// makes a worker that paused past its lease harmless.

// ErrStaleFence is returned by Append when a newer lease has written to the
// session since: the caller's lease is gone, and its write was refused.
var ErrStaleFence = errors.New("chatsession: stale fence")

// Message is one line of a session's transcript.
type Message struct {
	Seq    int
	Fence  int64
	Worker string
	Body   string
}

// Transcript is a session's transcript with a fence check.
type Transcript interface {
	// Append adds msgs to session's transcript in one step, if fence is at
	// least the highest fence that wrote to it; otherwise it writes nothing
	// and returns ErrStaleFence.
	Append(ctx context.Context, session string, fence int64, worker string, msgs []string) error
	// Read returns session's transcript in order.
	Read(ctx context.Context, session string) ([]Message, error)
}

// PostgresTranscript keeps transcripts in two PostgreSQL tables: one row
// per session holding the highest fence seen, and the messages.
type PostgresTranscript struct {
	db       *pgxpool.Pool
	sessions string // quoted table names
	messages string
}

// NewPostgresTranscript creates the tables <prefix>_sessions and
// <prefix>_messages if they do not exist.
func NewPostgresTranscript(ctx context.Context, db *pgxpool.Pool, prefix string) (*PostgresTranscript, error) {
	t := &PostgresTranscript{db: db, sessions: pgx.Identifier{prefix + "_sessions"}.Sanitize(), messages: pgx.Identifier{prefix + "_messages"}.Sanitize()}
	_, err := db.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+t.sessions+` (session text PRIMARY KEY, fence bigint NOT NULL, next_seq int NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS `+t.messages+` (session text, seq int, fence bigint NOT NULL, worker text NOT NULL, body text NOT NULL, PRIMARY KEY (session, seq))`)
	return t, err
}

// Append implements Transcript. The fence check and the writes are one
// transaction: the upsert takes the session row's lock and raises its fence
// only when ours is not below it, so no older holder can write after a
// newer one has.
func (t *PostgresTranscript) Append(ctx context.Context, session string, fence int64, worker string, msgs []string) error {
	return pgx.BeginFunc(ctx, t.db, func(tx pgx.Tx) error {
		var seq int
		err := tx.QueryRow(ctx, `INSERT INTO `+t.sessions+` AS s (session, fence) VALUES ($1, $2)
ON CONFLICT (session) DO UPDATE SET fence = EXCLUDED.fence WHERE s.fence <= EXCLUDED.fence
RETURNING s.next_seq`, session, fence).Scan(&seq)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: fence %d for session %q", ErrStaleFence, fence, session)
		}
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if _, err := tx.Exec(ctx, `INSERT INTO `+t.messages+` (session, seq, fence, worker, body) VALUES ($1, $2, $3, $4, $5)`, session, seq, fence, worker, m); err != nil {
				return err
			}
			seq++
		}
		_, err = tx.Exec(ctx, `UPDATE `+t.sessions+` SET next_seq = $2 WHERE session = $1`, session, seq)
		return err
	})
}

// Read implements Transcript.
func (t *PostgresTranscript) Read(ctx context.Context, session string) ([]Message, error) {
	rows, err := t.db.Query(ctx, `SELECT seq, fence, worker, body FROM `+t.messages+` WHERE session = $1 ORDER BY seq`, session)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Message, error) {
		var m Message
		err := r.Scan(&m.Seq, &m.Fence, &m.Worker, &m.Body)
		return m, err
	})
}

// DynamoTranscript keeps each session's transcript in one DynamoDB item:
// the highest fence seen and the list of messages.
type DynamoTranscript struct {
	db    *dynamodb.Client
	table string
}

// NewDynamoTranscript creates the table if it does not exist.
func NewDynamoTranscript(ctx context.Context, db *dynamodb.Client, table string) (*DynamoTranscript, error) {
	_, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            &table,
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("session"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("session"), KeyType: types.KeyTypeHash}},
	})
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return nil, err
	}
	w := dynamodb.NewTableExistsWaiter(db, func(o *dynamodb.TableExistsWaiterOptions) { o.MinDelay = 50 * time.Millisecond })
	if err := w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: &table}, time.Minute); err != nil {
		return nil, err
	}
	return &DynamoTranscript{db: db, table: table}, nil
}

// Append implements Transcript with one conditional UpdateItem: the
// condition expression refuses a fence below the item's.
func (t *DynamoTranscript) Append(ctx context.Context, session string, fence int64, worker string, msgs []string) error {
	list := make([]types.AttributeValue, len(msgs))
	for i, m := range msgs {
		list[i] = &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
			"fence":  &types.AttributeValueMemberN{Value: strconv.FormatInt(fence, 10)},
			"worker": &types.AttributeValueMemberS{Value: worker},
			"body":   &types.AttributeValueMemberS{Value: m},
		}}
	}
	_, err := t.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:           &t.table,
		Key:                 map[string]types.AttributeValue{"session": &types.AttributeValueMemberS{Value: session}},
		ConditionExpression: aws.String("attribute_not_exists(fence) OR fence <= :fence"),
		UpdateExpression:    aws.String("SET fence = :fence, messages = list_append(if_not_exists(messages, :empty), :msgs)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":fence": &types.AttributeValueMemberN{Value: strconv.FormatInt(fence, 10)},
			":msgs":  &types.AttributeValueMemberL{Value: list},
			":empty": &types.AttributeValueMemberL{Value: []types.AttributeValue{}},
		},
	})
	var failed *types.ConditionalCheckFailedException
	if errors.As(err, &failed) {
		return fmt.Errorf("%w: fence %d for session %q", ErrStaleFence, fence, session)
	}
	return err
}

// Read implements Transcript.
func (t *DynamoTranscript) Read(ctx context.Context, session string) ([]Message, error) {
	out, err := t.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      &t.table,
		Key:            map[string]types.AttributeValue{"session": &types.AttributeValueMemberS{Value: session}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, err
	}
	l, _ := out.Item["messages"].(*types.AttributeValueMemberL)
	if l == nil {
		return nil, nil
	}
	msgs := make([]Message, 0, len(l.Value))
	for i, v := range l.Value {
		m, ok := v.(*types.AttributeValueMemberM)
		if !ok {
			return nil, fmt.Errorf("chatsession: message %d of %q is not a map", i, session)
		}
		f, _ := m.Value["fence"].(*types.AttributeValueMemberN)
		w, _ := m.Value["worker"].(*types.AttributeValueMemberS)
		b, _ := m.Value["body"].(*types.AttributeValueMemberS)
		if f == nil || w == nil || b == nil {
			return nil, fmt.Errorf("chatsession: message %d of %q lacks fence, worker or body", i, session)
		}
		fence, err := strconv.ParseInt(f.Value, 10, 64)
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, Message{Seq: i, Fence: fence, Worker: w.Value, Body: b.Value})
	}
	return msgs, nil
}
