package testserver

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// dynamoCall sends one DynamoDB request (target, JSON body) to url and
// returns the status and the body.
func dynamoCall(ctx context.Context, url, target, body string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/", strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/x-amz-json-1.0")
	req.Header.Set("X-Amz-Target", "DynamoDB_20120810."+target)
	req.Header.Set("X-Amz-Date", time.Now().UTC().Format("20060102T150405Z"))
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=test/20200101/us-east-1/dynamodb/aws4_request, SignedHeaders=host;x-amz-date, Signature=0")
	resp, err := pingClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func TestPrivateDynalite(t *testing.T) {
	srv := StartDynalite(t)
	url := "http://" + srv.Addr()
	ctx := context.Background()
	const table = `{"TableName":"tbl","AttributeDefinitions":[{"AttributeName":"k","AttributeType":"S"}],` +
		`"KeySchema":[{"AttributeName":"k","KeyType":"HASH"}],"BillingMode":"PAY_PER_REQUEST"}`
	if code, body, err := dynamoCall(ctx, url, "CreateTable", table); err != nil || code != 200 {
		t.Fatalf("CreateTable = %d %s, %v", code, body, err)
	}

	srv.Freeze()
	fctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, _, err := dynamoCall(fctx, url, "ListTables", "{}")
	cancel()
	if err == nil {
		t.Fatal("ListTables on a frozen dynalite answered")
	}
	srv.Thaw()
	if _, body, err := dynamoCall(ctx, url, "ListTables", "{}"); err != nil || !strings.Contains(body, `"tbl"`) {
		t.Fatalf("ListTables after Thaw = %s, %v; want table tbl", body, err)
	}

	srv.Restart()
	if _, body, err := dynamoCall(ctx, url, "ListTables", "{}"); err != nil || strings.Contains(body, `"tbl"`) {
		t.Fatalf("ListTables after Restart = %s, %v; want no table (in memory, lost)", body, err)
	}
	if !srv.Running() {
		t.Error("Running() = false for a running server")
	}
	srv.Stop()
	if srv.Running() {
		t.Error("Running() = true after Stop")
	}
	if err := dynamoPing(ctx, url); err == nil {
		t.Error("a stopped dynalite answered")
	}
}

// readEnv parses the export lines Up writes.
func readEnv(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, v, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "export "), "=")
		if !ok || len(v) < 2 || v[0] != '\'' || v[len(v)-1] != '\'' {
			t.Fatalf("%s: line %q is not export NAME='value'", path, sc.Text())
		}
		env[name] = strings.ReplaceAll(v[1:len(v)-1], `'\''`, "'")
	}
	return env
}

// TestUpDown starts every kind of server as `make test` does, in a state
// directory of its own, checks that each serves, that a second Up reuses
// them and that a variable already set starts nothing; then Down stops
// them all and leaves nothing behind.
func TestUpDown(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis, a 3-node cluster, PostgreSQL and dynalite")
	}
	for _, check := range []func() (string, error){redisBinary, postgresBinDir, dynaliteCLI} {
		if _, err := check(); err != nil {
			missing(t, err.Error())
		}
	}
	for _, v := range envOrder {
		t.Setenv(v, "")
	}
	// Set: names a server that runs; nothing is started for it.
	const given = "http://127.0.0.1:1/it's given"
	t.Setenv(EnvDynamoDBEndpoint, given)
	state := t.TempDir()
	var log strings.Builder
	ctx := context.Background()
	t.Cleanup(func() { _ = Down(state) })
	if err := Up(ctx, state, &log); err != nil {
		t.Fatalf("Up: %v\n%s", err, log.String())
	}
	env := readEnv(t, filepath.Join(state, "env"))
	if len(env) != len(envOrder) {
		t.Errorf("env file has %d variables, want %d: %v", len(env), len(envOrder), env)
	}
	if env[EnvDynamoDBEndpoint] != given {
		t.Errorf("%s = %q, want the given %q", EnvDynamoDBEndpoint, env[EnvDynamoDBEndpoint], given)
	}
	if !strings.Contains(log.String(), "dynalite: using "+EnvDynamoDBEndpoint) {
		t.Errorf("log does not say the given endpoint is used:\n%s", log.String())
	}

	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, v := range []string{EnvRedisAddr, EnvValkeyAddr} {
		if got, err := redisDo(rctx, env[v], "PING"); err != nil || got != "PONG" {
			t.Errorf("%s=%s: PING = %q, %v", v, env[v], got, err)
		}
	}
	nodes := strings.Split(env[EnvRedisClusterAddrs], ",")
	if len(nodes) != 3 {
		t.Errorf("%s = %q, want 3 nodes", EnvRedisClusterAddrs, env[EnvRedisClusterAddrs])
	}
	// A key lands on its slot's node: the cluster routes.
	if _, err := redisDo(rctx, nodes[0], "SET", "{a}", "1"); err != nil && !strings.HasPrefix(err.Error(), "MOVED ") {
		t.Errorf("SET on cluster node %s: %v (want OK or MOVED)", nodes[0], err)
	}
	if err := clusterWhole(rctx, nodes, []string{"cluster_state:ok", "cluster_slots_assigned:16384", "cluster_known_nodes:3"}); err != nil {
		t.Errorf("cluster: %v", err)
	}
	pgAddr := strings.TrimSuffix(strings.TrimPrefix(env[EnvPostgresURL], "postgres://ratelimit@"), "/ratelimit?sslmode=disable")
	if err := pgExec(rctx, "tcp", pgAddr, "ratelimit", "CREATE TABLE t (k text)"); err != nil {
		t.Errorf("%s: %v", env[EnvPostgresURL], err)
	}

	started, err := os.ReadFile(filepath.Join(state, "started"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(started), "\npid "); n != 5 { // redis, 3 nodes, postgres
		t.Errorf("started records %d processes, want 5:\n%s", n, started)
	}
	log.Reset()
	if err := Up(ctx, state, &log); err != nil {
		t.Fatalf("second Up: %v", err)
	}
	if again, _ := os.ReadFile(filepath.Join(state, "started")); string(again) != string(started) || !strings.Contains(log.String(), "reusing") {
		t.Errorf("a second Up did not reuse the running servers: %s\n%s", log.String(), again)
	}

	lines, err := readStarted(state)
	if err != nil {
		t.Fatal(err)
	}
	if err := Down(state); err != nil {
		t.Fatalf("Down: %v", err)
	}
	for _, l := range lines {
		switch l.kind {
		case "pid":
			if alive(l.pid()) {
				t.Errorf("%v still runs after Down", l.fields)
			}
		case "tmpdir":
			if _, err := os.Stat(l.fields[0]); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s still there after Down (%v)", l.fields[0], err)
			}
		}
	}
	for _, f := range []string{"env", "started"} {
		if _, err := os.Stat(filepath.Join(state, f)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still there after Down (%v)", f, err)
		}
	}
}
