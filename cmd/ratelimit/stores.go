package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
	vk "github.com/valkey-io/valkey-go"

	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/dynamo"
	"github.com/ratelimitkit/ratelimit/store/memory"
	"github.com/ratelimitkit/ratelimit/store/postgres"
	"github.com/ratelimitkit/ratelimit/store/redis"
	"github.com/ratelimitkit/ratelimit/store/valkey"
)

// The clients' own bounds, set on every client the command builds unless
// the store URL sets them: a store that does not answer fails a command in
// seconds, not after the clients' defaults (go-redis v9.23 dials 5 times
// with a 5s timeout and retries a command 3 times, each read waiting up to
// 5s). A decision's call is bounded sooner by its context, whose deadline
// is the limiter's store budget (one second by default): go-redis
// honours it only with ContextTimeoutEnabled, which the command sets.
const (
	clientDialTimeout = 2 * time.Second // one connection attempt
	clientIOTimeout   = 3 * time.Second // a read or write without a context deadline
)

// quietRedis silences go-redis's own log lines (a failed dial, a pool
// error), which would otherwise fill the terminal while a store is down:
// every error reaches the command through the call that met it.
var quietRedis = sync.OnceFunc(func() { goredis.SetLogger(&logging.VoidLogger{}) })

// boundRedis sets o's bounds where the URL left them unset.
func boundRedis(o *goredis.Options) {
	o.ContextTimeoutEnabled = true
	if o.DialTimeout == 0 {
		o.DialTimeout = clientDialTimeout
	}
	if o.DialerRetries == 0 {
		o.DialerRetries = 1
	}
	if o.ReadTimeout == 0 {
		o.ReadTimeout = clientIOTimeout
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = clientIOTimeout
	}
	if o.MaxRetries == 0 {
		o.MaxRetries = 1
	}
}

// storeSchemes is what -store accepts, for help and errors.
const storeSchemes = "memory, redis://, redis+cluster://, valkey://, postgres:// (or postgresql://), dynamodb:// (http) or dynamodbs:// (https)"

// openStore returns the store that spec names and a function that
// releases its client, creating the table of a PostgreSQL or DynamoDB store
// when it is missing; see openStoreFor.
func openStore(ctx context.Context, spec string, getenv func(string) string) (store.Store, func(), error) {
	return openStoreFor(ctx, spec, getenv, true)
}

// openStoreFor returns the store that spec names and a function that
// releases its client. spec is "memory" or a URL:
//
//	redis://[user:password@]host:port[/db]        go-redis (rediss:// for TLS)
//	redis+cluster://host:port,host:port,...       a go-redis cluster client
//	valkey://[user:password@]host:port[/db]       valkey-go (a cluster is found)
//	postgres://user@host:port/db?sslmode=disable  a pgx pool
//	dynamodb://host:port[?table=T&region=R]       an http endpoint (dynalite,
//	dynamodbs://host[?table=T&region=R]           DynamoDB Local); https for AWS
//
// and these query parameters, which the clients do not see:
//
//	prefix=P       the key prefix (Redis, Valkey, DynamoDB)
//	table=T        the table (PostgreSQL, DynamoDB; default ratelimit)
//	clock=request  decide by the limiter's clock, not the server's (Redis,
//	               Valkey, PostgreSQL)
//
// With create, a PostgreSQL or DynamoDB store's table is created when it
// is missing. DynamoDB credentials come from AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY, or are a placeholder a local endpoint accepts.
func openStoreFor(ctx context.Context, spec string, getenv func(string) string, create bool) (store.Store, func(), error) {
	if spec == "" || spec == "memory" {
		return memory.MustNew(), func() {}, nil
	}
	u, err := parseStoreURL(spec)
	if err != nil || u.Scheme == "" {
		return nil, nil, fmt.Errorf("-store %q is not a URL; use one of %s", spec, storeSchemes)
	}
	// Take the store's own parameters out of the URL the client parses.
	q := u.Query()
	prefix, table, clock := q.Get("prefix"), q.Get("table"), q.Get("clock")
	q.Del("prefix")
	q.Del("clock")
	if u.Scheme == "postgres" || u.Scheme == "postgresql" {
		q.Del("table")
	}
	u.RawQuery = q.Encode()
	client := u.String()
	if clock != "" && clock != "request" && clock != "server" {
		return nil, nil, fmt.Errorf("-store %s: clock=%q, want request or server", u.Redacted(), clock)
	}
	serverClock := clock != "request"
	switch u.Scheme {
	case "redis", "rediss", "redis+cluster":
		opts := []redis.Option{redis.WithServerClock(serverClock)}
		if prefix != "" {
			opts = append(opts, redis.WithPrefix(prefix))
		}
		quietRedis()
		var c goredis.UniversalClient
		if u.Scheme == "redis+cluster" {
			var one goredis.Options
			boundRedis(&one)
			c = goredis.NewClusterClient(&goredis.ClusterOptions{
				Addrs: strings.Split(u.Host, ","), ContextTimeoutEnabled: true,
				DialTimeout: one.DialTimeout, DialerRetries: one.DialerRetries,
				ReadTimeout: one.ReadTimeout, WriteTimeout: one.WriteTimeout, MaxRetries: one.MaxRetries,
			})
		} else {
			o, err := goredis.ParseURL(client)
			if err != nil {
				return nil, nil, fmt.Errorf("-store: %w", err)
			}
			boundRedis(o)
			c = goredis.NewClient(o)
		}
		s, err := redis.New(c, opts...)
		if err != nil {
			c.Close()
			return nil, nil, err
		}
		return s, func() { c.Close() }, nil
	case "valkey", "valkeys":
		opts := []valkey.Option{valkey.WithServerClock(serverClock)}
		if prefix != "" {
			opts = append(opts, valkey.WithPrefix(prefix))
		}
		o, err := vk.ParseURL("redis" + strings.TrimPrefix(client, "valkey"))
		if err != nil {
			return nil, nil, fmt.Errorf("-store: %w", err)
		}
		if o.Dialer.Timeout == 0 {
			o.Dialer.Timeout = clientDialTimeout
		}
		if o.ConnWriteTimeout == 0 {
			o.ConnWriteTimeout = clientIOTimeout
		}
		c, err := vk.NewClient(o)
		if err != nil {
			return nil, nil, fmt.Errorf("-store %s: %w", u.Redacted(), err)
		}
		s, err := valkey.New(c, opts...)
		if err != nil {
			c.Close()
			return nil, nil, err
		}
		return s, c.Close, nil
	case "postgres", "postgresql":
		var opts []postgres.Option
		if table != "" {
			opts = append(opts, postgres.WithTable(table))
		}
		if !serverClock {
			opts = append(opts, postgres.WithRequestClock())
		}
		cfg, err := pgxpool.ParseConfig(client)
		if err != nil {
			return nil, nil, fmt.Errorf("-store %s: %w", u.Redacted(), err)
		}
		if q.Get("connect_timeout") == "" {
			cfg.ConnConfig.ConnectTimeout = clientDialTimeout
		}
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return nil, nil, fmt.Errorf("-store %s: %w", u.Redacted(), err)
		}
		s, err := postgres.New(pool, opts...)
		if err == nil && create {
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
		region := q.Get("region")
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
		if create {
			if _, err := dynamo.CreateTable(ctx, client, table); err != nil {
				return nil, nil, fmt.Errorf("-store %s: %w", spec, err)
			}
		}
		opts := []dynamo.Option{dynamo.WithTable(table)}
		if prefix != "" {
			opts = append(opts, dynamo.WithKeyPrefix(prefix))
		}
		s, err := dynamo.New(client, opts...)
		if err != nil {
			return nil, nil, err
		}
		return s, func() {}, nil
	}
	return nil, nil, fmt.Errorf("-store %q: unknown scheme %q; use one of %s", spec, u.Scheme, storeSchemes)
}

// parseStoreURL parses a store URL. A cluster URL's authority lists several
// host:port pairs, which net/url refuses (from Go 1.26 it checks that a port
// is digits), so the list is set aside while the rest is parsed and put back
// as the URL's Host; each pair must parse on its own.
func parseStoreURL(spec string) (*url.URL, error) {
	scheme, rest, ok := strings.Cut(spec, "://")
	if !ok {
		return url.Parse(spec)
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	userinfo, hosts := "", rest[:end]
	if i := strings.LastIndex(hosts, "@"); i >= 0 {
		userinfo, hosts = hosts[:i+1], hosts[i+1:]
	}
	if !strings.Contains(hosts, ",") {
		return url.Parse(spec)
	}
	for _, h := range strings.Split(hosts, ",") {
		if h == "" {
			return nil, fmt.Errorf("parse %q: an empty host in the list", spec)
		}
		if _, err := url.Parse("//" + h); err != nil {
			return nil, fmt.Errorf("parse %q: %w", spec, err)
		}
	}
	u, err := url.Parse(scheme + "://" + userinfo + "cluster" + rest[end:])
	if err != nil {
		return nil, err
	}
	u.Host = hosts
	return u, nil
}
