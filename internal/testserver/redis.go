package testserver

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// Redis is a private redis-server process that one test owns: it can stop
// it, start it again on the same port (with nothing persisted, so the data
// is gone, as after a restart of a server without persistence), and freeze
// and thaw it (SIGSTOP, SIGCONT), which a client sees as a server that
// accepts connections and never answers. Tests that need none of that use
// the shared server of RedisAddr instead.
type Redis struct {
	t    testing.TB
	bin  string
	port int
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
}

// StartRedis starts a private redis-server (or valkey-server) on a free
// loopback port in a temporary directory and stops it when the test ends.
// Without a server binary on PATH the test skips, or fails when CI is set;
// `make test` installs one.
func StartRedis(t testing.TB) *Redis {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		bin, err = exec.LookPath("valkey-server")
	}
	if err != nil {
		msg := "no redis-server or valkey-server on PATH: run `make test` (scripts/servers.sh installs it)"
		if os.Getenv(EnvCI) != "" {
			t.Fatal(msg + " (CI is set, so a missing server fails instead of skipping)")
		}
		t.Skip(msg)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	r := &Redis{t: t, bin: bin, port: port, dir: t.TempDir()}
	r.Start()
	t.Cleanup(r.Stop)
	return r
}

// Addr returns the server's host:port.
func (r *Redis) Addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }

// Start starts the server on its port, empty. Starting a running server
// fails the test.
func (r *Redis) Start() {
	r.t.Helper()
	if r.cmd != nil {
		r.t.Fatal("testserver: redis already running")
	}
	logPath := filepath.Join(r.dir, "redis.log")
	r.cmd = exec.Command(r.bin,
		"--bind", "127.0.0.1", "--port", strconv.Itoa(r.port),
		"--dir", r.dir, "--save", "", "--appendonly", "no",
		"--logfile", logPath, "--daemonize", "no")
	if err := r.cmd.Start(); err != nil {
		r.cmd = nil
		r.t.Fatalf("testserver: starting %s: %v", r.bin, err)
	}
	r.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(r.cmd, r.done)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", r.Addr(), 100*time.Millisecond); err == nil {
			c.Close()
			return
		}
		select {
		case <-r.done:
			b, _ := os.ReadFile(logPath)
			r.cmd = nil
			r.t.Fatalf("testserver: %s exited at start: %s", r.bin, b)
		default:
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("testserver: %s did not listen on %s within 30s", r.bin, r.Addr())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Stop kills the server and waits for it to exit; its data is lost.
// Stopping a stopped server does nothing.
func (r *Redis) Stop() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGCONT) // a frozen process must run to die
	_ = r.cmd.Process.Kill()
	<-r.done
	r.cmd = nil
}

// Restart stops the server and starts an empty one on the same port.
func (r *Redis) Restart() {
	r.t.Helper()
	r.Stop()
	r.Start()
}

// Freeze stops the server process (SIGSTOP) without closing its sockets:
// connections stay open and requests get no answer until Thaw.
func (r *Redis) Freeze() { r.signal(syscall.SIGSTOP) }

// Thaw resumes a frozen server (SIGCONT).
func (r *Redis) Thaw() { r.signal(syscall.SIGCONT) }

func (r *Redis) signal(sig syscall.Signal) {
	r.t.Helper()
	if r.cmd == nil {
		r.t.Fatal("testserver: redis is not running")
	}
	if err := r.cmd.Process.Signal(sig); err != nil {
		r.t.Fatal(fmt.Errorf("testserver: signal %v to redis: %w", sig, err))
	}
}
