package testserver

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"
)

// do sends one inline command to addr and returns the first line of the
// reply, or the error that ended the exchange.
func do(addr, cmd string, timeout time.Duration) (string, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return "", err
	}
	if _, err := c.Write([]byte(cmd + "\r\n")); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

func TestPrivateRedis(t *testing.T) {
	r := StartRedis(t)
	if got, err := do(r.Addr(), "SET k v", time.Second); err != nil || got != "+OK" {
		t.Fatalf("SET k v = %q, %v; want +OK", got, err)
	}
	if got, err := do(r.Addr(), "EXISTS k", time.Second); err != nil || got != ":1" {
		t.Fatalf("EXISTS k = %q, %v; want :1", got, err)
	}

	r.Freeze()
	if got, err := do(r.Addr(), "PING", 200*time.Millisecond); err == nil {
		t.Fatalf("PING to a frozen server = %q, want a timeout", got)
	}
	r.Thaw()
	if got, err := do(r.Addr(), "PING", time.Second); err != nil || got != "+PONG" {
		t.Fatalf("PING after Thaw = %q, %v; want +PONG", got, err)
	}

	r.Restart()
	if got, err := do(r.Addr(), "EXISTS k", time.Second); err != nil || got != ":0" {
		t.Fatalf("EXISTS k after Restart = %q, %v; want :0 (a restart loses the data)", got, err)
	}

	r.Stop()
	if _, err := do(r.Addr(), "PING", 200*time.Millisecond); err == nil {
		t.Fatal("PING to a stopped server succeeded")
	}
	r.Stop() // twice is harmless
}
