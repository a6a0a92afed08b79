package testserver

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// recorder is a testing.TB that records Skip and Fatal instead of stopping
// the test, so the missing-server paths can be checked.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper()           {}
func (r *recorder) Skip(args ...any)  { r.skipped = fmt.Sprint(args...) }
func (r *recorder) Fatal(args ...any) { r.failed = fmt.Sprint(args...) }

// getters maps each variable to a function that reads it, with results
// joined so the cluster's list compares as a string.
var getters = []struct {
	env string
	get func(testing.TB) string
}{
	{EnvRedisAddr, RedisAddr},
	{EnvRedisClusterAddrs, func(t testing.TB) string { return strings.Join(RedisClusterAddrs(t), ",") }},
	{EnvValkeyAddr, ValkeyAddr},
	{EnvPostgresURL, PostgresURL},
	{EnvDynamoDBEndpoint, DynamoDBEndpoint},
}

func TestReadsSetVariable(t *testing.T) {
	for _, g := range getters {
		t.Run(g.env, func(t *testing.T) {
			t.Setenv(g.env, " 127.0.0.1:1234 ")
			if got := g.get(t); got != "127.0.0.1:1234" {
				t.Errorf("%s=%q: got %q, want the trimmed value %q", g.env, " 127.0.0.1:1234 ", got, "127.0.0.1:1234")
			}
		})
	}
}

func TestRedisClusterAddrsSplits(t *testing.T) {
	t.Setenv(EnvRedisClusterAddrs, "127.0.0.1:17001, 127.0.0.1:17002,,127.0.0.1:17003,")
	want := []string{"127.0.0.1:17001", "127.0.0.1:17002", "127.0.0.1:17003"}
	if got := RedisClusterAddrs(t); !reflect.DeepEqual(got, want) {
		t.Errorf("RedisClusterAddrs = %q, want %q", got, want)
	}
}

func TestMissingSkipsOutsideCI(t *testing.T) {
	for _, g := range getters {
		t.Run(g.env, func(t *testing.T) {
			t.Setenv(EnvCI, "")
			t.Setenv(g.env, "")
			r := &recorder{TB: t}
			g.get(r)
			if r.failed != "" {
				t.Errorf("without CI, a missing %s failed the test: %s", g.env, r.failed)
			}
			for _, want := range []string{g.env + " is not set", "make test"} {
				if !strings.Contains(r.skipped, want) {
					t.Errorf("skip message %q does not say %q", r.skipped, want)
				}
			}
		})
	}
}

func TestRedisClusterAddrsEmptyListIsMissing(t *testing.T) {
	t.Setenv(EnvCI, "")
	t.Setenv(EnvRedisClusterAddrs, " , ")
	r := &recorder{TB: t}
	if got := RedisClusterAddrs(r); got != nil || r.skipped == "" {
		t.Errorf("RedisClusterAddrs with %s=%q = %q, skipped %q; want nil and a skip", EnvRedisClusterAddrs, " , ", got, r.skipped)
	}
}

func TestMissingFailsInCI(t *testing.T) {
	for _, g := range getters {
		t.Run(g.env, func(t *testing.T) {
			t.Setenv(EnvCI, "true")
			t.Setenv(g.env, "")
			r := &recorder{TB: t}
			g.get(r)
			if r.skipped != "" {
				t.Errorf("with CI set, a missing %s skipped the test: %s", g.env, r.skipped)
			}
			if !strings.Contains(r.failed, g.env+" is not set") {
				t.Errorf("failure message %q does not name %s", r.failed, g.env)
			}
		})
	}
}
