package testserver

import (
	"context"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// Freezer freezes the connections of a client to a server that the test
// cannot stop with SIGSTOP (a shared server, or a cluster whose nodes the
// client finds by itself): a client dials through Dial (go-redis's
// Options.Dialer, pgx's ConnConfig.DialFunc), and after Freeze every
// connection it has or opens behaves as one to a frozen server: the dial
// succeeds (the kernel accepts it), what the client writes is kept, and
// nothing is answered, reads waiting until their deadline (a net.Error
// whose Timeout is true, as a socket's) or the connection's close. Thaw
// sends what was kept and lets the replies through, as SIGCONT does. The
// server itself never stops, so other tests on it go on. A Freezer thaws
// when the test ends.
type Freezer struct {
	mu     sync.Mutex
	frozen bool
	thawed chan struct{} // closed at Thaw; replaced at Freeze
	dialer net.Dialer
}

// NewFreezer returns a Freezer, thawed, that thaws when t ends.
func NewFreezer(t testing.TB) *Freezer {
	f := &Freezer{thawed: make(chan struct{})}
	close(f.thawed)
	t.Cleanup(f.Thaw)
	return f
}

// Freeze stops every connection of the Freezer's from answering, until
// Thaw.
func (f *Freezer) Freeze() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.frozen {
		f.frozen, f.thawed = true, make(chan struct{})
	}
}

// Thaw lets the connections answer again.
func (f *Freezer) Thaw() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.frozen {
		f.frozen = false
		close(f.thawed)
	}
}

// state returns whether the connections are frozen, and the channel closed
// when they thaw.
func (f *Freezer) state() (bool, chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.frozen, f.thawed
}

// Dial dials addr on network and returns the connection, which Freeze
// freezes.
func (f *Freezer) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := f.dialer.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &frozenConn{Conn: c, f: f, changed: make(chan struct{}, 1), closed: make(chan struct{})}, nil
}

// frozenConn is a connection of a Freezer.
type frozenConn struct {
	net.Conn
	f *Freezer

	mu      sync.Mutex
	kept    []byte    // written while frozen, sent at the thaw
	readBy  time.Time // the read deadline, as the client set it
	changed chan struct{}
	closed  chan struct{}
	once    sync.Once
}

func (c *frozenConn) Write(p []byte) (int, error) {
	frozen, _ := c.f.state()
	c.mu.Lock()
	if frozen {
		c.kept = append(c.kept, p...)
		c.mu.Unlock()
		return len(p), nil
	}
	kept := c.kept
	c.kept = nil
	c.mu.Unlock()
	if len(kept) > 0 {
		if _, err := c.Conn.Write(kept); err != nil {
			return 0, err
		}
	}
	return c.Conn.Write(p)
}

func (c *frozenConn) Read(p []byte) (int, error) {
	for {
		frozen, thawed := c.f.state()
		if !frozen {
			break
		}
		c.mu.Lock()
		by := c.readBy
		c.mu.Unlock()
		var expired <-chan time.Time
		var t *time.Timer
		if !by.IsZero() {
			d := time.Until(by)
			if d <= 0 {
				return 0, os.ErrDeadlineExceeded
			}
			t = time.NewTimer(d)
			expired = t.C
		}
		var err error
		select {
		case <-thawed:
		case <-expired:
			err = os.ErrDeadlineExceeded
		case <-c.changed:
		case <-c.closed:
			err = net.ErrClosed
		}
		if t != nil {
			t.Stop()
		}
		if err != nil {
			return 0, err
		}
	}
	c.mu.Lock()
	kept := c.kept
	c.kept = nil
	c.mu.Unlock()
	if len(kept) > 0 {
		if _, err := c.Conn.Write(kept); err != nil {
			return 0, err
		}
	}
	return c.Conn.Read(p)
}

func (c *frozenConn) setReadBy(t time.Time) {
	c.mu.Lock()
	c.readBy = t
	c.mu.Unlock()
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

func (c *frozenConn) SetDeadline(t time.Time) error {
	c.setReadBy(t)
	return c.Conn.SetDeadline(t)
}

func (c *frozenConn) SetReadDeadline(t time.Time) error {
	c.setReadBy(t)
	return c.Conn.SetReadDeadline(t)
}

func (c *frozenConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}
