package testserver

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// startTimeout bounds how long a private server may take to serve.
const startTimeout = 30 * time.Second

// Server is a private server process that one test owns: it can stop it,
// start it again on the same port (with nothing persisted, so the data is
// gone, as after a restart of a server without persistence), and freeze and
// thaw it (SIGSTOP, SIGCONT), which a client sees as a server that accepts
// connections and never answers. The server is stopped when the test ends;
// when the test failed, the end of the server's log is in the test's
// output. Tests that need none of that use the shared servers of
// RedisAddr, DynamoDBEndpoint and the others instead.
type Server struct {
	t    testing.TB
	port int
	proc *proc
}

// Redis is the Server that StartRedis returns.
type Redis = Server

// StartRedis starts a private redis-server (or valkey-server) on a free
// loopback port in a temporary directory and stops it when the test ends.
// Without a server binary on PATH the test skips, or fails when CI is set;
// `make test` installs one.
func StartRedis(t testing.TB) *Redis {
	t.Helper()
	bin, err := redisBinary()
	if err != nil {
		missing(t, err.Error())
	}
	dir := t.TempDir()
	return startServer(t, func(port int) *proc { return redisProc("redis", bin, dir, port) })
}

// StartDynalite starts a private dynalite (DynamoDB on Node.js, the copy
// scripts/servers.sh installs) on a free loopback port and stops it when
// the test ends; its tables live in memory, so Restart loses them. The
// endpoint is "http://" + Addr(). Without node or the installed dynalite
// the test skips, or fails when CI is set.
func StartDynalite(t testing.TB) *Server {
	t.Helper()
	cli, err := dynaliteCLI()
	if err != nil {
		missing(t, err.Error())
	}
	dir := t.TempDir()
	return startServer(t, func(port int) *proc { return dynaliteProc(cli, dir, port) })
}

// startServer starts the proc mk builds on a free port, for t.
func startServer(t testing.TB, mk func(port int) *proc) *Server {
	t.Helper()
	tied := func(port int) *proc {
		p := mk(port)
		p.tied = true
		return p
	}
	p, port, err := startOnPort(context.Background(), startTimeout, 0, false, nil, tied)
	if err != nil {
		t.Fatalf("testserver: %v", err)
	}
	s := &Server{t: t, port: port, proc: p}
	t.Cleanup(func() {
		running := s.proc.cmd != nil
		s.Stop()
		if t.Failed() && running {
			t.Logf("testserver: the %s on %s, stopped at the end of the failed test:\n%s", s.proc.name, s.Addr(), tailOf(s.proc.log))
		}
	})
	return s
}

// missing skips the test because a server program is not installed, or
// fails it when CI is set.
func missing(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv(EnvCI) != "" {
		t.Fatal(msg + " (CI is set, so a missing server fails instead of skipping)")
	}
	t.Skip(msg)
}

// Addr returns the server's host:port, the same across restarts.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Start starts the server on its port, empty. Starting a running server
// fails the test.
func (s *Server) Start() {
	s.t.Helper()
	if s.proc.cmd != nil {
		s.t.Fatalf("testserver: %s already running", s.proc.name)
	}
	if err := s.proc.start(context.Background(), startTimeout); err != nil {
		s.t.Fatalf("testserver: starting %s again on %s: %v", s.proc.name, s.Addr(), err)
	}
}

// Stop kills the server and waits for it to exit; its data is lost.
// Stopping a stopped server does nothing.
func (s *Server) Stop() { s.proc.stop(syscall.SIGKILL) }

// Restart stops the server and starts an empty one on the same port.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.Start()
}

// Freeze stops the server's processes (SIGSTOP) without closing their
// sockets: connections stay open and requests get no answer until Thaw.
func (s *Server) Freeze() { s.signal(syscall.SIGSTOP) }

// Thaw resumes a frozen server (SIGCONT).
func (s *Server) Thaw() { s.signal(syscall.SIGCONT) }

// Running reports whether the server's process runs: false once Stop
// stopped it, and once it exited or crashed by itself.
func (s *Server) Running() bool {
	if s.proc.cmd == nil {
		return false
	}
	select {
	case <-s.proc.done:
		return false
	default:
		return true
	}
}

func (s *Server) signal(sig syscall.Signal) {
	s.t.Helper()
	if err := s.proc.signal(sig); err != nil {
		s.t.Fatal(fmt.Errorf("testserver: signal %v: %w", sig, err))
	}
}
