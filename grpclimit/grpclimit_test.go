package grpclimit_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/grpclimit"
	"github.com/ratelimitkit/ratelimit/httplimit"
	"github.com/ratelimitkit/ratelimit/store/memory"
	"github.com/ratelimitkit/ratelimit/store/redis"
)

// start runs a real gRPC server with the health service behind the
// interceptors on a loopback listener, and returns a real client for it.
func start(t *testing.T, rules []httplimit.Rule, opts ...httplimit.Option) healthpb.HealthClient {
	t.Helper()
	mw, err := httplimit.New(rules, opts...)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(mw)),
		grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(mw)),
	)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return healthpb.NewHealthClient(conn)
}

func limiter(t *testing.T, alg algorithms.Algorithm, opts ...ratelimit.Option) *ratelimit.Limiter {
	t.Helper()
	lim, err := ratelimit.New(memory.MustNew(), alg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// retryDelay returns the RetryInfo detail of err's status, or -1.
func retryDelay(err error) time.Duration {
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return -1
}

func TestUnary(t *testing.T) {
	client := start(t, []httplimit.Rule{{Limiter: limiter(t, algorithms.FixedWindow(2, time.Hour)), Name: "calls"}})
	ctx := context.Background()
	for i := range 2 {
		var header metadata.MD
		if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&header)); err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
		list, err := httpsfv.UnmarshalList(header.Get("ratelimit"))
		if err != nil || len(list) != 1 {
			t.Fatalf("call %d: ratelimit metadata %q: %v", i+1, header.Get("ratelimit"), err)
		}
		r, _ := list[0].(httpsfv.Item).Params.Get("r")
		if r != int64(1-i) {
			t.Errorf("call %d: r=%v, want %d", i+1, r, 1-i)
		}
		if p := header.Get("ratelimit-policy"); len(p) != 1 || p[0] != `"calls";q=2;w=3600` {
			t.Errorf("call %d: ratelimit-policy %q", i+1, p)
		}
	}
	_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("third call: %v, want ResourceExhausted", err)
	}
	if d := retryDelay(err); d < time.Second || d > time.Hour {
		t.Errorf("RetryInfo delay %v, want between 1s and 1h", d)
	}
	var quota *errdetails.QuotaFailure
	for _, d := range status.Convert(err).Details() {
		if q, ok := d.(*errdetails.QuotaFailure); ok {
			quota = q
		}
	}
	if quota == nil || quota.GetViolations()[0].GetSubject() != "calls" {
		t.Errorf("QuotaFailure %v, want a violation of \"calls\"", quota)
	}
}

func TestStream(t *testing.T) {
	client := start(t, []httplimit.Rule{{Limiter: limiter(t, algorithms.GCRA(1, time.Hour, 1))}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Recv(); err != nil {
		t.Fatalf("first stream: %v", err)
	}
	second, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = second.Recv()
	if status.Code(err) != codes.ResourceExhausted || retryDelay(err) < time.Second {
		t.Errorf("second stream: %v (retry %v), want ResourceExhausted with a RetryInfo", err, retryDelay(err))
	}
}

// TestPerMethodAndKey: rules match on the full method, and key by metadata.
func TestPerMethodAndKey(t *testing.T) {
	client := start(t, []httplimit.Rule{{
		Limiter: limiter(t, algorithms.FixedWindow(1, time.Hour)),
		Key:     httplimit.Header("x-api-key"),
		Match:   func(r *http.Request) bool { return r.URL.Path == "/grpc.health.v1.Health/Check" },
	}})
	ctx := context.Background()
	withKey := func(k string) context.Context { return metadata.AppendToOutgoingContext(ctx, "x-api-key", k) }
	codesOf := func(ctxs ...context.Context) []codes.Code {
		var out []codes.Code
		for _, c := range ctxs {
			_, err := client.Check(c, &healthpb.HealthCheckRequest{})
			out = append(out, status.Code(err))
		}
		return out
	}
	got := codesOf(withKey("a"), withKey("a"), withKey("b"), ctx)
	want := []codes.Code{codes.OK, codes.ResourceExhausted, codes.OK, codes.InvalidArgument}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("calls with keys a, a, b, none = %v, want %v", got, want)
			break
		}
	}
	// Watch is another method: no rule applies.
	w, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Errorf("Watch, which no rule matches: %v", err)
	}
}

// TestPeerKeyAndProxies: the default key is the peer's address; behind a
// trusted proxy, its x-forwarded-for metadata is walked like the header.
func TestPeerKeyAndProxies(t *testing.T) {
	key, err := httplimit.ClientIP(httplimit.TrustProxies("127.0.0.0/8"))
	if err != nil {
		t.Fatal(err)
	}
	client := start(t, []httplimit.Rule{{Limiter: limiter(t, algorithms.FixedWindow(1, time.Hour)), Key: key}})
	ctx := context.Background()
	from := func(xff string) codes.Code {
		_, err := client.Check(metadata.AppendToOutgoingContext(ctx, "x-forwarded-for", xff), &healthpb.HealthCheckRequest{})
		return status.Code(err)
	}
	got := []codes.Code{from("203.0.113.1"), from("6.6.6.6, 203.0.113.1"), from("203.0.113.2")}
	if got[0] != codes.OK || got[1] != codes.ResourceExhausted || got[2] != codes.OK {
		t.Errorf("203.0.113.1, the same behind a spoofed hop, 203.0.113.2 = %v, want OK, ResourceExhausted, OK", got)
	}
}

// TestStoreFailure: a dead store answers Unavailable with a retry delay
// when the limiter fails closed, and lets the call through when it fails
// open; the hook sees the error either way.
func TestStoreFailure(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	store, err := redis.New(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, policy := range []ratelimit.FailurePolicy{ratelimit.FailClosed, ratelimit.FailOpen} {
		lim, err := ratelimit.New(store, algorithms.GCRA(10, time.Second, 10), ratelimit.WithFailurePolicy(policy))
		if err != nil {
			t.Fatal(err)
		}
		var hooked atomic.Int32
		client := start(t, []httplimit.Rule{{Limiter: lim}}, httplimit.WithErrorHook(func(_ *http.Request, err error) {
			var op *net.OpError
			if errors.As(err, &op) {
				hooked.Add(1)
			}
		}))
		_, err = client.Check(context.Background(), &healthpb.HealthCheckRequest{})
		switch policy {
		case ratelimit.FailClosed:
			if status.Code(err) != codes.Unavailable || retryDelay(err) != 5*time.Second {
				t.Errorf("fail closed: %v (retry %v), want Unavailable with a 5s RetryInfo", err, retryDelay(err))
			}
		case ratelimit.FailOpen:
			if err != nil {
				t.Errorf("fail open: %v, want the call to go through", err)
			}
		}
		if hooked.Load() != 1 {
			t.Errorf("policy %v: hook saw %d connection errors, want 1", policy, hooked.Load())
		}
	}
}

func TestBadMethod(t *testing.T) {
	// A method name is a path; one that is not a URL path is refused
	// before any rule runs. The interceptor is called directly here with
	// what a broken server could pass it.
	mw, err := httplimit.New([]httplimit.Rule{{Limiter: limiter(t, algorithms.FixedWindow(1, time.Hour))}})
	if err != nil {
		t.Fatal(err)
	}
	icpt := grpclimit.UnaryServerInterceptor(mw)
	_, err = icpt(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "%zz"}, func(context.Context, any) (any, error) {
		t.Error("handler ran")
		return nil, nil
	})
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "grpclimit") {
		t.Errorf("method %%zz: %v, want Internal", err)
	}
}
