package testserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is one server process: the command that starts it, the check that
// says it serves, and the log its output goes to. Every server of this
// package, private to a test or shared by `make test`, runs as a proc.
type proc struct {
	name string   // for messages: "redis", "cluster-node-2", "postgres"
	bin  string   // the program
	args []string // its arguments
	dir  string   // working directory
	log  string   // where stdout and stderr go
	// cred, when set, runs the process as another user (PostgreSQL
	// refuses to run as root).
	cred *syscall.Credential
	// ready returns nil once the process (pid) serves; until then the
	// reason it does not. It is called every few milliseconds.
	ready func(ctx context.Context, pid int) error
	// stopSig ends the process cleanly (SIGTERM when zero); SIGKILL
	// follows when it does not end in time.
	stopSig syscall.Signal
	// tied, for a test's private server, ends the process when this one
	// ends (Linux), cleanups run or not. The shared servers Up starts
	// outlive it.
	tied bool

	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
}

// errPortTaken is returned by start when the process exited because its
// port was taken in the meantime: another port may do.
var errPortTaken = errors.New("port already in use")

// portTakenRE matches what Redis, PostgreSQL and Node.js log when they
// cannot bind their port.
var portTakenRE = regexp.MustCompile(`(?i)address already in use|could not bind|EADDRINUSE`)

// start starts the process in a process group of its own (so that a
// terminal's Ctrl-C does not reach a server meant to outlive the command
// that started it, and Freeze stops every process of the server; a tied
// one dies with this process instead) and waits
// up to timeout for ready. On failure it kills what it started and returns
// an error that carries the end of the log.
func (p *proc) start(ctx context.Context, timeout time.Duration) error {
	if p.cmd != nil {
		return fmt.Errorf("%s already running", p.name)
	}
	logf, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("%s: %w", p.name, err)
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Dir = p.dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: p.cred}
	if p.tied {
		tie(cmd.SysProcAttr)
	}
	err = cmd.Start()
	logf.Close() // the child has its own copy
	if err != nil {
		return fmt.Errorf("%s: starting %s: %w", p.name, p.bin, err)
	}
	p.cmd, p.done = cmd, make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(cmd, p.done)

	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		rctx, rcancel := context.WithTimeout(ctx, time.Second)
		why := p.ready(rctx, cmd.Process.Pid)
		rcancel()
		if why == nil {
			return nil
		}
		select {
		case <-p.done:
			p.cmd = nil
			tail := tailOf(p.log)
			if portTakenRE.MatchString(tail) {
				return errPortTaken
			}
			return fmt.Errorf("%s (%s) exited before it served: %v\n%s", p.name, p.bin, cmd.ProcessState, tail)
		case <-ctx.Done():
			p.stop(0)
			if ctx.Err() == context.DeadlineExceeded {
				return fmt.Errorf("%s (%s) did not serve within %v: %v\n%s", p.name, p.bin, timeout, why, tailOf(p.log))
			}
			return fmt.Errorf("%s: %w", p.name, ctx.Err())
		case <-tick.C:
		}
	}
}

// stop ends the process and waits for it: sig first (SIGKILL when zero),
// SIGKILL when it is still there after 10 seconds. A frozen process is
// thawed first, as it must run to end. Stopping a stopped proc does
// nothing.
func (p *proc) stop(sig syscall.Signal) {
	if p.cmd == nil {
		return
	}
	pid := p.cmd.Process.Pid
	_ = signalGroup(pid, syscall.SIGCONT)
	if sig == 0 {
		sig = syscall.SIGKILL
	}
	_ = signalGroup(pid, sig)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = signalGroup(pid, syscall.SIGKILL)
		<-p.done
	}
	// The group's other processes (PostgreSQL's backends) end with
	// their leader; a SIGKILL to the group makes sure of it.
	_ = signalGroup(pid, syscall.SIGKILL)
	p.cmd = nil
}

// signal sends sig to the process group of a running proc.
func (p *proc) signal(sig syscall.Signal) error {
	if p.cmd == nil {
		return fmt.Errorf("%s is not running", p.name)
	}
	return signalGroup(p.cmd.Process.Pid, sig)
}

// signalGroup sends sig to the process group that pid leads, or to pid
// alone when it leads none (a server started by an earlier version of the
// scripts, in the shell's group).
func signalGroup(pid int, sig syscall.Signal) error {
	if pgid, err := syscall.Getpgid(pid); err == nil && pgid == pid {
		return syscall.Kill(-pid, sig)
	}
	return syscall.Kill(pid, sig)
}

// alive reports whether pid runs. A zombie, left for an init that does not
// reap to collect, counts as gone.
func alive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true // no /proc: trust kill -0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// tailOf returns the last 50 lines of the file at path, for an error
// message.
func tailOf(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 50 {
		lines = lines[len(lines)-50:]
	}
	return "---- " + path + "\n" + strings.Join(lines, "\n") + "\n----"
}

// freePort returns a loopback port nobody listens on: the kernel's choice
// when base is 0, else the first free port from base that is not in
// taken (and, with bus, whose port+10000, a Redis Cluster node's bus, is
// free too).
func freePort(base int, bus bool, taken map[int]bool) (int, error) {
	if base == 0 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port, nil
	}
	for p := base; p < base+500 && p+10000 <= 65535; p++ {
		if taken[p] || !portFree(p) || bus && !portFree(p+10000) {
			continue
		}
		return p, nil
	}
	return 0, fmt.Errorf("no free port in %d-%d", base, base+499)
}

// portFree reports whether 127.0.0.1:port can be bound now.
func portFree(port int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// startOnPort starts the proc that mk builds for a port, on the first free
// port from base (see freePort), trying the next one when the port is taken
// between the check and the server's bind. It returns the proc and its port.
func startOnPort(ctx context.Context, timeout time.Duration, base int, bus bool, taken map[int]bool, mk func(port int) *proc) (*proc, int, error) {
	for range 10 {
		port, err := freePort(base, bus, taken)
		if err != nil {
			return nil, 0, err
		}
		p := mk(port)
		switch err := p.start(ctx, timeout); {
		case err == nil:
			if taken != nil {
				taken[port] = true
			}
			return p, port, nil
		case errors.Is(err, errPortTaken):
			if base != 0 {
				base = port + 1
			}
		default:
			return nil, 0, err
		}
	}
	return nil, 0, fmt.Errorf("could not find a free port from %d", base)
}
