module github.com/ratelimitkit/ratelimit/grpclimit

go 1.26.0

replace github.com/ratelimitkit/ratelimit => ../

require (
	github.com/dunglas/httpsfv v1.1.2
	github.com/ratelimitkit/ratelimit v0.0.0-00010101000000-000000000000
	github.com/redis/go-redis/v9 v9.23.0
	google.golang.org/genproto/googleapis/rpc v0.0.0-20261026165753-2ffab32bce7e
	google.golang.org/grpc v1.85.0
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
)
