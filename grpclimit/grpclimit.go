// Package grpclimit rate-limits gRPC servers with the same rules as the
// HTTP middleware: it is httplimit.Middleware's Check applied to each call.
//
// A gRPC call is an HTTP/2 request, and grpclimit hands the middleware one:
// the call's full method ("/pkg.Service/Method") is its URL path, its
// incoming metadata are its header fields, and the peer's address is its
// RemoteAddr. So everything an httplimit.Rule does works unchanged: keys
// from the peer's address (httplimit.RemoteIP, the default), from trusted
// proxies' x-forwarded-for metadata (httplimit.ClientIP), from metadata
// (httplimit.Header("x-api-key")) or from a value an earlier interceptor
// stored in the context (httplimit.ContextValue); Match on r.URL.Path for
// per-method limits.
//
//	mw, err := httplimit.New([]httplimit.Rule{{Limiter: lim}})
//	...
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(mw)),
//		grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(mw)),
//	)
//
// Answers: a denial is codes.ResourceExhausted with a google.rpc.RetryInfo
// detail (the wait, at least a second) and a google.rpc.QuotaFailure naming
// the rule; a fail-closed store failure is codes.Unavailable with a
// RetryInfo; a call without a usable key is codes.InvalidArgument; a cost
// out of range (or a tier of another limiter) is codes.Internal. The RateLimit-Policy, RateLimit and
// Retry-After fields go to the client as header metadata (lower case:
// "ratelimit-policy", "ratelimit", "retry-after"). A stream is decided
// once, when it opens.
//
// This package is a module of its own, so that the SDK's go.mod does not
// depend on gRPC.
package grpclimit

import (
	"context"
	"fmt"
	"net/http"
	"net/textproto"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratelimitkit/ratelimit/httplimit"
)

// UnaryServerInterceptor returns an interceptor that decides each unary
// call by mw's rules before the handler runs.
func UnaryServerInterceptor(mw *httplimit.Middleware) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := check(ctx, mw, info.FullMethod, func(md metadata.MD) error { return grpc.SetHeader(ctx, md) }); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor returns an interceptor that decides each stream
// by mw's rules when it opens; the stream's messages are not counted.
func StreamServerInterceptor(mw *httplimit.Middleware) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := check(ss.Context(), mw, info.FullMethod, ss.SetHeader); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

// check runs mw's Check on the call and returns nil to go on, or the
// status error to answer. Header fields are passed to setHeader.
func check(ctx context.Context, mw *httplimit.Middleware, fullMethod string, setHeader func(metadata.MD) error) error {
	r, err := request(ctx, fullMethod)
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	h := make(http.Header, 4)
	v := mw.Check(r, h)
	if len(h) > 0 {
		md := make(metadata.MD, len(h))
		for k, vs := range h {
			md[strings.ToLower(k)] = vs
		}
		// The fields are advice; a call whose headers were already sent
		// goes on without them.
		_ = setHeader(md)
	}
	switch v.Status {
	case 0:
		if v.Delay > 0 {
			t := time.NewTimer(v.Delay)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
				return status.FromContextError(ctx.Err()).Err()
			}
		}
		return nil
	case http.StatusTooManyRequests:
		st := status.New(codes.ResourceExhausted, fmt.Sprintf("rate limit %q exceeded; retry in %v", v.Result.Rule, v.Result.RetryAfter))
		return withDetails(st, &errdetails.RetryInfo{RetryDelay: durationpb.New(v.Result.RetryAfter)},
			&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{
				Subject: v.Result.Rule, Description: "rate limit exceeded"}}})
	case http.StatusServiceUnavailable:
		st := status.New(codes.Unavailable, fmt.Sprintf("rate limit %q cannot be checked right now; retry in %v", v.Result.Rule, v.Result.RetryAfter))
		return withDetails(st, &errdetails.RetryInfo{RetryDelay: durationpb.New(v.Result.RetryAfter)})
	case http.StatusBadRequest:
		return status.Errorf(codes.InvalidArgument, "no usable key for rate limit %q", v.Result.Rule)
	default:
		return status.Errorf(codes.Internal, "rate limit %q: misconfigured (its cost or tier)", v.Result.Rule)
	}
}

// withDetails attaches details to st, or returns st alone when they cannot
// be marshalled (which the well-known types always can).
func withDetails(st *status.Status, details ...protoadapt.MessageV1) error {
	if sd, err := st.WithDetails(details...); err == nil {
		return sd.Err()
	}
	return st.Err()
}

// request is the HTTP/2 request that carries the call: method POST, path
// the full method, header fields the incoming metadata, RemoteAddr the
// peer's address.
func request(ctx context.Context, fullMethod string) (*http.Request, error) {
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, fullMethod, nil)
	if err != nil {
		return nil, fmt.Errorf("grpclimit: method %q: %w", fullMethod, err)
	}
	r.Proto, r.ProtoMajor, r.ProtoMinor = "HTTP/2.0", 2, 0
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		r.RemoteAddr = p.Addr.String()
	}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		for k, vs := range md {
			r.Header[textproto.CanonicalMIMEHeaderKey(k)] = vs
		}
	}
	return r, nil
}
