package testserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestStartFailureShowsLog: a server that exits before it serves fails the
// start with the end of its log, which says why.
func TestStartFailureShowsLog(t *testing.T) {
	dir := t.TempDir()
	p := &proc{
		name: "broken", bin: "sh", dir: dir, log: filepath.Join(dir, "server.log"),
		args:  []string{"-c", "echo 'FATAL: the reason it died' >&2; exit 3"},
		ready: func(context.Context, int) error { return errors.New("not yet") },
	}
	err := p.start(context.Background(), 10*time.Second)
	if err == nil {
		p.stop(0)
		t.Fatal("start of a server that exits at once succeeded")
	}
	for _, want := range []string{"broken", "exited before it served", "FATAL: the reason it died"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("start error %q does not say %q", err, want)
		}
	}
	if p.cmd != nil {
		t.Error("a failed start left the proc marked running")
	}
}

// TestStartTimeoutStopsAndShowsLog: a server that never serves is killed
// at the time-out, and the error has its log and the last reason.
func TestStartTimeoutStopsAndShowsLog(t *testing.T) {
	dir := t.TempDir()
	var pid int
	p := &proc{
		name: "stuck", bin: "sh", dir: dir, log: filepath.Join(dir, "server.log"),
		args: []string{"-c", "echo still starting; exec sleep 60"},
		ready: func(_ context.Context, p int) error {
			pid = p
			return errors.New("no answer on the port")
		},
	}
	err := p.start(context.Background(), 300*time.Millisecond)
	if err == nil {
		t.Fatal("start of a server that never serves succeeded")
	}
	for _, want := range []string{"did not serve within 300ms", "no answer on the port", "still starting"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("start error %q does not say %q", err, want)
		}
	}
	if alive(pid) {
		t.Errorf("pid %d still runs after the start timed out", pid)
	}
}

// TestRedisReadyIsTheStartedProcess: a server whose port another server
// holds is not taken for ready because the other one answers; the start
// reports the port as taken (so startOnPort tries another). A PING alone,
// as the copy in redisengine/storetest did, would have reported success.
func TestRedisReadyIsTheStartedProcess(t *testing.T) {
	other := StartRedis(t)
	bin, err := redisBinary()
	if err != nil {
		t.Fatal(err)
	}
	p := redisProc("second", bin, t.TempDir(), other.port)
	err = p.start(context.Background(), 10*time.Second)
	if err == nil {
		p.stop(0)
		t.Fatalf("a second redis on %s, where one already runs, was reported ready", other.Addr())
	}
	if !errors.Is(err, errPortTaken) {
		t.Errorf("start on a taken port = %v, want errPortTaken", err)
	}
	if got, err := redisDo(context.Background(), other.Addr(), "PING"); err != nil || got != "PONG" {
		t.Errorf("the first server after the attempt: PING = %q, %v", got, err)
	}
}

// TestFreezeStopsEveryProcessOfTheServer: Freeze stops the server's whole
// process group (PostgreSQL's backends, a shell's children), not only the
// process it started.
func TestFreezeStopsEveryProcessOfTheServer(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child.pid")
	s := startServer(t, func(port int) *proc {
		return &proc{
			name: "group", bin: "sh", dir: dir, log: filepath.Join(dir, "server.log"),
			args: []string{"-c", "sleep 60 & echo $! >" + pidFile + "; wait"},
			ready: func(context.Context, int) error {
				_, err := os.Stat(pidFile)
				return err
			},
		}
	})
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	child, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	// state waits up to a second (a signal is delivered asynchronously)
	// for the child to be stopped or not, and returns its state.
	state := func(stopped bool) byte {
		var got byte
		for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			st, err := os.ReadFile("/proc/" + strconv.Itoa(child) + "/stat")
			if err != nil {
				t.Fatalf("child %d: %v", child, err)
			}
			if got = st[strings.LastIndexByte(string(st), ')')+2]; (got == 'T') == stopped {
				break
			}
		}
		return got
	}
	s.Freeze()
	if got := state(true); got != 'T' {
		t.Errorf("the server's child after Freeze is in state %c, want T (stopped)", got)
	}
	s.Thaw()
	if got := state(false); got == 'T' {
		t.Error("the server's child is still stopped after Thaw")
	}
	s.Stop()
	for end := time.Now().Add(5 * time.Second); alive(child) && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
	if alive(child) {
		t.Errorf("the server's child %d outlived Stop", child)
	}
	if s.Running() {
		t.Error("Running after Stop")
	}
}

// TestDownSparesReusedPID: a recorded pid that now names another program
// is not signalled.
func TestDownSparesReusedPID(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	state := t.TempDir()
	if err := os.WriteFile(filepath.Join(state, "started"), []byte("pid "+strconv.Itoa(cmd.Process.Pid)+" redis\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Down(state); err != nil {
		t.Fatal(err)
	}
	if !alive(cmd.Process.Pid) {
		t.Error("Down killed a process that is not a server it started (the pid was reused)")
	}
}

// TestDownStopsScriptState: Down stops what the shell scripts before it
// recorded (servers in the shell's process group) and removes their
// directory, so `make servers-down` works on servers started before Up
// existed.
func TestDownStopsScriptState(t *testing.T) {
	bin, err := redisBinary()
	if err != nil {
		missing(t, err.Error())
	}
	tmp, err := os.MkdirTemp("", "ratelimit-servers.")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	port, err := freePort(0, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	// As servers.sh started it: no process group of its own.
	cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", tmp, "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	state := t.TempDir()
	started := "tmpdir " + tmp + "\npid " + strconv.Itoa(cmd.Process.Pid) + " redis\n"
	if err := os.WriteFile(filepath.Join(state, "started"), []byte(started), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, "env"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Down(state); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Down returned and the recorded redis-server still runs")
	}
	for _, f := range []string{tmp, filepath.Join(state, "started"), filepath.Join(state, "env")} {
		if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still there after Down (%v)", f, err)
		}
	}
	if err := Down(state); err != nil {
		t.Errorf("Down twice: %v", err)
	}
}

// TestReuseScriptState: a state directory the shell scripts before Up
// wrote (a "postgres USER BINDIR DATADIR" line among them) whose servers
// run is reused, not restarted; once one is gone, it is not.
func TestReuseScriptState(t *testing.T) {
	srv := StartRedis(t)
	pid := srv.proc.cmd.Process.Pid
	state, data := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(data, "postmaster.pid"), []byte(strconv.Itoa(pid)+"\n"+data+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	started := "tmpdir /nonexistent/ratelimit-servers.x\npid " + strconv.Itoa(pid) + " redis\npostgres postgres /usr/lib/postgresql/15/bin " + data + "\n"
	for name, body := range map[string]string{"started": started, "env": "export RATELIMIT_REDIS_ADDR='" + srv.Addr() + "'\n"} {
		if err := os.WriteFile(filepath.Join(state, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if !allAlive(state) {
		t.Fatal("allAlive = false for a script's state whose servers run")
	}
	var log strings.Builder
	if err := Up(context.Background(), state, &log); err != nil || !strings.Contains(log.String(), "reusing") {
		t.Fatalf("Up on a running script's state = %v, log %q; want it reused", err, log.String())
	}
	if !srv.Running() {
		t.Fatal("Up stopped a server of the state it should reuse")
	}
	srv.Stop()
	if allAlive(state) {
		t.Error("allAlive = true after the recorded server stopped")
	}
}

// TestPrivateServerDiesWithTest: a test binary killed before its cleanups
// run (SIGKILL, a time-out's panic) does not leave its private servers
// running.
func TestPrivateServerDiesWithTest(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the parent-death signal is Linux's")
	}
	if os.Getenv("TESTSERVER_HELPER") != "" {
		srv := StartRedis(t)
		fmt.Println("pid", srv.proc.cmd.Process.Pid)
		time.Sleep(time.Minute)
		return
	}
	if _, err := redisBinary(); err != nil {
		missing(t, err.Error())
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestPrivateServerDiesWithTest$", "-test.count=1")
	cmd.Env = append(os.Environ(), "TESTSERVER_HELPER=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var pid int
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if n, ok := strings.CutPrefix(sc.Text(), "pid "); ok {
			pid, _ = strconv.Atoi(n)
			break
		}
	}
	if pid == 0 {
		t.Fatal("the helper test printed no server pid")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	for end := time.Now().Add(5 * time.Second); alive(pid) && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
	if alive(pid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("the private redis-server (pid %d) outlived the test process killed with SIGKILL", pid)
	}
}
