package testserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// redisBinary returns the path of redis-server, or of valkey-server when
// only that is installed.
func redisBinary() (string, error) {
	if bin, err := exec.LookPath("redis-server"); err == nil {
		return bin, nil
	}
	if bin, err := exec.LookPath("valkey-server"); err == nil {
		return bin, nil
	}
	return "", errors.New("no redis-server or valkey-server on PATH: run `make test` (scripts/servers.sh installs it)")
}

// redisProc returns a Redis-compatible server bin on port, empty and
// without persistence, that keeps its files in dir. It is ready once the
// server on port says its process id is the one started, so another server
// already on the port is never taken for it.
func redisProc(name, bin, dir string, port int, extra ...string) *proc {
	args := append([]string{
		"--bind", "127.0.0.1", "--port", strconv.Itoa(port),
		"--dir", dir, "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--logfile", "",
	}, extra...)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	return &proc{
		name: name, bin: bin, args: args, dir: dir, log: filepath.Join(dir, "server.log"),
		ready: func(ctx context.Context, pid int) error {
			info, err := redisDo(ctx, addr, "INFO", "server")
			if err != nil {
				return err
			}
			if !strings.Contains(info, "\nprocess_id:"+strconv.Itoa(pid)+"\r") {
				return fmt.Errorf("the server on %s is not process %d", addr, pid)
			}
			return nil
		},
	}
}

// redisDo sends one command to the Redis-compatible server at addr and
// returns its reply as text: a status, an integer or a bulk string. An
// error reply is returned as an error. It is the few lines of the protocol
// that starting, checking and forming a cluster need.
func redisDo(ctx context.Context, addr string, args ...string) (string, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(c, b.String()); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", fmt.Errorf("bad bulk reply %q", line)
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("unexpected reply %q", line)
}
