package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"
	vk "github.com/valkey-io/valkey-go"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store/dynamo"
	"github.com/ratelimitkit/ratelimit/store/memory"
	"github.com/ratelimitkit/ratelimit/store/postgres"
	"github.com/ratelimitkit/ratelimit/store/redis"
	"github.com/ratelimitkit/ratelimit/store/valkey"
)

// storeSchemes is what -store accepts, for help and errors.
const storeSchemes = "memory, redis://, valkey://, postgres:// (or postgresql://), dynamodb:// (http) or dynamodbs:// (https)"

// openStore returns the store that spec names and a function that
// releases its client. spec is "memory" or a URL:
//
//	redis://[user:password@]host:port[/db]        go-redis (rediss:// for TLS)
//	valkey://[user:password@]host:port[/db]       valkey-go
//	postgres://user@host:port/db?sslmode=disable  pgx pool; creates the table
//	dynamodb://host:port[?table=T&region=R]       an http endpoint (dynalite,
//	dynamodbs://host[?table=T&region=R]           DynamoDB Local); https for AWS;
//	                                              creates the table
//
// DynamoDB credentials come from AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY, or are a placeholder a local endpoint accepts.
func openStore(ctx context.Context, spec string, getenv func(string) string) (ratelimit.Store, func(), error) {
	if spec == "" || spec == "memory" {
		return memory.MustNew(), func() {}, nil
	}
	u, err := url.Parse(spec)
	if err != nil || u.Scheme == "" {
		return nil, nil, fmt.Errorf("-store %q is not a URL; use one of %s", spec, storeSchemes)
	}
	switch u.Scheme {
	case "redis", "rediss":
		opts, err := goredis.ParseURL(spec)
		if err != nil {
			return nil, nil, fmt.Errorf("-store: %w", err)
		}
		c := goredis.NewClient(opts)
		s, err := redis.New(c)
		if err != nil {
			c.Close()
			return nil, nil, err
		}
		return s, func() { c.Close() }, nil
	case "valkey", "valkeys":
		opts, err := vk.ParseURL("redis" + strings.TrimPrefix(spec, "valkey"))
		if err != nil {
			return nil, nil, fmt.Errorf("-store: %w", err)
		}
		c, err := vk.NewClient(opts)
		if err != nil {
			return nil, nil, fmt.Errorf("-store %s: %w", u.Redacted(), err)
		}
		s, err := valkey.New(c)
		if err != nil {
			c.Close()
			return nil, nil, err
		}
		return s, c.Close, nil
	case "postgres", "postgresql":
		pool, err := pgxpool.New(ctx, spec)
		if err != nil {
			return nil, nil, fmt.Errorf("-store %s: %w", u.Redacted(), err)
		}
		s, err := postgres.New(pool)
		if err == nil {
			err = s.Migrate(ctx)
		}
		if err != nil {
			pool.Close()
			return nil, nil, fmt.Errorf("-store %s: %w", u.Redacted(), err)
		}
		return s, pool.Close, nil
	case "dynamodb", "dynamodbs":
		if u.Host == "" {
			return nil, nil, fmt.Errorf("-store %q: name the endpoint's host", spec)
		}
		q := u.Query()
		table, region := q.Get("table"), q.Get("region")
		if table == "" {
			table = "ratelimit"
		}
		if region == "" {
			region = "us-east-1"
		}
		id, secret := getenv("AWS_ACCESS_KEY_ID"), getenv("AWS_SECRET_ACCESS_KEY")
		if id == "" || secret == "" {
			id, secret = "local", "local"
		}
		scheme := "http"
		if u.Scheme == "dynamodbs" {
			scheme = "https"
		}
		client := dynamodb.NewFromConfig(aws.Config{
			Region:      region,
			Credentials: credentials.NewStaticCredentialsProvider(id, secret, getenv("AWS_SESSION_TOKEN")),
		}, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(scheme + "://" + u.Host) })
		if _, err := dynamo.CreateTable(ctx, client, table); err != nil {
			return nil, nil, fmt.Errorf("-store %s: %w", spec, err)
		}
		s, err := dynamo.New(client, dynamo.WithTable(table))
		if err != nil {
			return nil, nil, err
		}
		return s, func() {}, nil
	}
	return nil, nil, fmt.Errorf("-store %q: unknown scheme %q; use one of %s", spec, u.Scheme, storeSchemes)
}
