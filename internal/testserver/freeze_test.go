package testserver

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// TestFreezer: through a Freezer's connections to the shared Redis, a PING
// is answered before the freeze; after it, an open connection and a new
// one both answer nothing (the read ends at its deadline with a timeout),
// and after the thaw both answer again, the frozen connection's kept PING
// first.
func TestFreezer(t *testing.T) {
	addr := RedisAddr(t)
	f := NewFreezer(t)
	ctx := context.Background()
	ping := func(c net.Conn) (string, error) {
		if _, err := c.Write([]byte("PING\r\n")); err != nil {
			return "", err
		}
		c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		return bufio.NewReader(c).ReadString('\n')
	}
	open, err := f.Dial(ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	if got, err := ping(open); err != nil || !strings.HasPrefix(got, "+PONG") {
		t.Fatalf("PING before the freeze: %q, %v; want +PONG", got, err)
	}
	f.Freeze()
	fresh, err := f.Dial(ctx, "tcp", addr)
	if err != nil {
		t.Fatalf("dial while frozen: %v, want the connection (the kernel accepts it)", err)
	}
	defer fresh.Close()
	for name, c := range map[string]net.Conn{"open": open, "new": fresh} {
		start := time.Now()
		got, err := ping(c)
		var ne net.Error
		if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
			t.Errorf("PING on the %s connection while frozen: %q, %v; want a timeout at the read deadline", name, got, err)
		}
		if took := time.Since(start); took < 150*time.Millisecond || took > 2*time.Second {
			t.Errorf("PING on the %s connection while frozen ended after %v, want at its 200ms deadline", name, took)
		}
	}
	f.Thaw()
	for name, c := range map[string]net.Conn{"open": open, "new": fresh} {
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		r := bufio.NewReader(c)
		if _, err := c.Write([]byte("PING\r\n")); err != nil {
			t.Fatal(err)
		}
		for i := range 2 { // the kept PING's reply, then this one's
			if got, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(got, "+PONG") {
				t.Errorf("reply %d on the %s connection after the thaw: %q, %v; want +PONG", i, name, got, err)
			}
		}
	}
}
