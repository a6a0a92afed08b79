package testserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// envServerTimeout bounds, in seconds (default 60), how long Up waits for
// each server to serve.
const envServerTimeout = "RATELIMIT_SERVER_TIMEOUT"

// The first port Up tries for each server; it takes the next free one when
// a port is in use.
const (
	baseRedis    = 16379
	baseValkey   = 16380
	baseCluster  = 17001
	basePostgres = 15432
	baseDynalite = 18000
)

// Up starts the servers `make test` runs the tests against, as processes
// that outlive it, and writes stateDir/env: one `export NAME='value'` line
// for each variable of this package (and RATELIMIT_CHROMIUM), for a shell
// to source. A variable already set names a server that runs, and nothing
// is started for it. Where no valkey-server is installed, the Valkey
// variable names the standalone Redis server.
//
// Every process Up starts is recorded in stateDir/started as soon as it
// runs, so Down stops exactly those, even after a failed or interrupted Up
// (which stops them itself). When stateDir already holds the record of an
// Up whose servers all still run, Up reuses them. Progress goes to logw.
func Up(ctx context.Context, stateDir string, logw io.Writer) (err error) {
	u := &upper{state: stateDir, logw: logw, taken: map[int]bool{}, timeout: 60 * time.Second}
	if v := os.Getenv(envServerTimeout); v != "" {
		n, perr := strconv.Atoi(v)
		if perr != nil || n <= 0 {
			return fmt.Errorf("%s=%q: want a number of seconds", envServerTimeout, v)
		}
		u.timeout = time.Duration(n) * time.Second
	}
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return err
	}
	if allAlive(stateDir) {
		u.logf("servers in %s already run; reusing them", stateDir)
		return nil
	}
	if err := Down(stateDir); err != nil { // leftovers of an earlier, failed or killed Up
		return err
	}
	defer func() {
		if err != nil {
			_ = Down(stateDir)
		}
	}()
	return u.up(ctx)
}

// upper is one run of Up.
type upper struct {
	state   string
	logw    io.Writer
	timeout time.Duration
	taken   map[int]bool // ports this run took
	tmp     string       // the servers' directories live here
	env     map[string]string
}

func (u *upper) logf(format string, args ...any) {
	fmt.Fprintf(u.logw, "testservers: "+format+"\n", args...)
}

// record appends a line to stateDir/started: "pid PID NAME" or
// "tmpdir DIR".
func (u *upper) record(line string) error {
	f, err := os.OpenFile(filepath.Join(u.state, "started"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(f, line)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// envOrder is the order of stateDir/env's lines.
var envOrder = []string{EnvRedisAddr, EnvRedisClusterAddrs, EnvValkeyAddr, EnvPostgresURL, EnvDynamoDBEndpoint, EnvChromium}

func (u *upper) up(ctx context.Context) error {
	var err error
	if u.tmp, err = os.MkdirTemp("", "ratelimit-servers."); err != nil {
		return err
	}
	if err := u.record("tmpdir " + u.tmp); err != nil {
		return err
	}
	// Other users (PostgreSQL's, when this runs as root) must enter it.
	if err := os.Chmod(u.tmp, 0o755); err != nil {
		return err
	}
	u.env = map[string]string{}
	for _, v := range envOrder {
		u.env[v] = strings.TrimSpace(os.Getenv(v))
	}
	steps := []struct {
		env, what string
		start     func(context.Context) (string, error)
	}{
		{EnvRedisAddr, "redis", u.startRedis},
		{EnvRedisClusterAddrs, "redis cluster", u.startCluster},
		{EnvValkeyAddr, "valkey", u.startValkey},
		{EnvPostgresURL, "postgres", u.startPostgres},
		{EnvDynamoDBEndpoint, "dynalite", u.startDynalite},
	}
	for _, s := range steps {
		if u.env[s.env] != "" {
			u.logf("%s: using %s=%s", s.what, s.env, redactURL(u.env[s.env]))
			continue
		}
		v, err := s.start(ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", s.what, err)
		}
		u.env[s.env] = v
	}
	if u.env[EnvChromium] == "" {
		if p, err := exec.LookPath("chromium"); err == nil {
			u.env[EnvChromium] = p
		} else {
			u.logf("browser: no chromium on PATH; the page test will skip (scripts/servers.sh installs it)")
		}
	}
	if err := writeEnv(u.state, u.env); err != nil {
		return err
	}
	u.logf("ready; environment in %s", filepath.Join(u.state, "env"))
	return nil
}

// startProc starts the proc mk builds from base (see startOnPort), records
// it, and logs where it listens.
func (u *upper) startProc(ctx context.Context, base int, bus bool, mk func(port int) *proc) (int, error) {
	p, port, err := startOnPort(ctx, u.timeout, base, bus, u.taken, mk)
	if err != nil {
		return 0, err
	}
	pid := p.cmd.Process.Pid
	if err := u.record(fmt.Sprintf("pid %d %s", pid, p.name)); err != nil {
		p.stop(p.stopSig)
		return 0, err
	}
	u.logf("%s: 127.0.0.1:%d (pid %d)", p.name, port, pid)
	return port, nil
}

func (u *upper) startRedis(ctx context.Context) (string, error) {
	return u.startRedisLike(ctx, "redis", "", baseRedis)
}

func (u *upper) startValkey(ctx context.Context) (string, error) {
	if _, err := exec.LookPath("valkey-server"); err != nil {
		u.logf("valkey: valkey-server not on PATH; using the Redis server %s (wire-compatible)", u.env[EnvRedisAddr])
		return u.env[EnvRedisAddr], nil
	}
	return u.startRedisLike(ctx, "valkey", "valkey-server", baseValkey)
}

// startRedisLike starts bin (redis-server or valkey-server when empty) as
// name in a directory of its own, from port base.
func (u *upper) startRedisLike(ctx context.Context, name, bin string, base int, extra ...string) (string, error) {
	if bin == "" {
		var err error
		if bin, err = redisBinary(); err != nil {
			return "", err
		}
	}
	dir := filepath.Join(u.tmp, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	bus := slices.Contains(extra, "--cluster-enabled") // a cluster node needs port+10000 too
	port, err := u.startProc(ctx, base, bus, func(port int) *proc { return redisProc(name, bin, dir, port, extra...) })
	if err != nil {
		return "", err
	}
	return "127.0.0.1:" + strconv.Itoa(port), nil
}

func (u *upper) startCluster(ctx context.Context) (string, error) {
	var addrs []string
	for i := 1; i <= 3; i++ {
		a, err := u.startRedisLike(ctx, "cluster-node-"+strconv.Itoa(i), "", baseCluster, clusterNodeArgs...)
		if err != nil {
			return "", err
		}
		addrs = append(addrs, a)
	}
	fctx, cancel := context.WithTimeout(ctx, u.timeout)
	defer cancel()
	if err := formCluster(fctx, addrs); err != nil {
		for i := 1; i <= 3; i++ {
			fmt.Fprintln(u.logw, tailOf(filepath.Join(u.tmp, "cluster-node-"+strconv.Itoa(i), "server.log")))
		}
		return "", err
	}
	v := strings.Join(addrs, ",")
	u.logf("redis cluster: %s (cluster_state:ok)", v)
	return v, nil
}

func (u *upper) startPostgres(ctx context.Context) (string, error) {
	cred, name, err := postgresUser()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(u.tmp, "postgres")
	bin, err := initPostgres(dir, cred)
	if err != nil {
		return "", err
	}
	port, err := u.startProc(ctx, basePostgres, false, func(port int) *proc { return postgresProc(bin, dir, port, cred) })
	if err != nil {
		return "", err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	cctx, cancel := context.WithTimeout(ctx, u.timeout)
	defer cancel()
	if err := pgExec(cctx, "tcp", addr, "postgres", "CREATE DATABASE ratelimit"); err != nil {
		return "", fmt.Errorf("CREATE DATABASE ratelimit: %w", err)
	}
	if name != "" {
		u.logf("postgres: runs as %s (%s)", name, bin)
	}
	return "postgres://ratelimit@" + addr + "/ratelimit?sslmode=disable", nil
}

func (u *upper) startDynalite(ctx context.Context) (string, error) {
	cli, err := dynaliteCLI()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(u.tmp, "dynalite")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	port, err := u.startProc(ctx, baseDynalite, false, func(port int) *proc { return dynaliteProc(cli, dir, port) })
	if err != nil {
		return "", err
	}
	return "http://127.0.0.1:" + strconv.Itoa(port), nil
}

// passwordRE matches the password of a URL's user information.
var passwordRE = regexp.MustCompile(`://([^:/@]*):[^@/]*@`)

// redactURL hides a password in a URL for the log.
func redactURL(v string) string { return passwordRE.ReplaceAllString(v, "://$1:xxx@") }

// writeEnv writes stateDir/env atomically, each value single-quoted.
func writeEnv(stateDir string, env map[string]string) error {
	var b strings.Builder
	for _, v := range envOrder {
		fmt.Fprintf(&b, "export %s='%s'\n", v, strings.ReplaceAll(env[v], "'", `'\''`))
	}
	tmp := filepath.Join(stateDir, "env.tmp")
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(stateDir, "env"))
}

// startedLine is one line of stateDir/started.
type startedLine struct {
	kind   string   // "pid", "tmpdir", or "postgres" (written by the shell scripts before Up)
	fields []string // the rest
}

func readStarted(stateDir string) ([]startedLine, error) {
	f, err := os.Open(filepath.Join(stateDir, "started"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var lines []startedLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) > 0 {
			lines = append(lines, startedLine{f[0], f[1:]})
		}
	}
	return lines, sc.Err()
}

// pid returns the process id of a "pid" line, or of the postmaster of a
// "postgres USER BINDIR DATADIR" line; 0 for others.
func (l startedLine) pid() int {
	switch {
	case l.kind == "pid" && len(l.fields) > 0:
		n, _ := strconv.Atoi(l.fields[0])
		return n
	case l.kind == "postgres" && len(l.fields) > 2:
		b, _ := os.ReadFile(filepath.Join(l.fields[2], "postmaster.pid"))
		first, _, _ := strings.Cut(string(b), "\n")
		n, _ := strconv.Atoi(strings.TrimSpace(first))
		return n
	}
	return 0
}

// allAlive reports whether stateDir records an Up whose processes all run.
func allAlive(stateDir string) bool {
	if _, err := os.Stat(filepath.Join(stateDir, "env")); err != nil {
		return false
	}
	lines, err := readStarted(stateDir)
	if err != nil || len(lines) == 0 {
		return false
	}
	for _, l := range lines {
		if l.kind != "tmpdir" && !alive(l.pid()) {
			return false
		}
	}
	return true
}

// ourServer matches the command line of a process Up (or the scripts
// before it) started: a pid that now names another program is left alone.
var ourServer = regexp.MustCompile(`redis|valkey|node|postgres`)

// Down stops exactly the processes stateDir/started records, newest first,
// removes the directories it records, and removes stateDir/env and
// stateDir/started. It is safe to run twice, and on a directory no Up
// wrote.
func Down(stateDir string) error {
	lines, err := readStarted(stateDir)
	if err != nil {
		return err
	}
	var errs []error
	for _, l := range slices.Backward(lines) {
		switch l.kind {
		case "pid", "postgres":
			sig := syscall.SIGTERM
			if l.kind == "postgres" || len(l.fields) > 1 && l.fields[1] == "postgres" {
				sig = syscall.SIGQUIT // immediate shutdown: the cluster is thrown away
			}
			if err := stopPID(l.pid(), sig); err != nil {
				errs = append(errs, err)
			}
		case "tmpdir":
			if len(l.fields) == 1 && strings.HasPrefix(filepath.Base(l.fields[0]), "ratelimit-servers.") {
				if err := os.RemoveAll(l.fields[0]); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	if len(errs) == 0 {
		for _, f := range []string{"started", "env", "env.tmp"} {
			if err := os.Remove(filepath.Join(stateDir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// stopPID ends a server process Up started (not a child of this process):
// sig to its group, SIGKILL after 10 seconds.
func stopPID(pid int, sig syscall.Signal) error {
	if !alive(pid) {
		return nil
	}
	cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if !ourServer.Match(cmdline) {
		return nil // the pid was reused by another program
	}
	_ = signalGroup(pid, syscall.SIGCONT) // a frozen process must run to end
	if err := signalGroup(pid, sig); err != nil {
		return fmt.Errorf("stopping pid %d: %w", pid, err)
	}
	for deadline := time.Now().Add(10 * time.Second); alive(pid) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	if alive(pid) {
		_ = signalGroup(pid, syscall.SIGKILL)
		for deadline := time.Now().Add(5 * time.Second); alive(pid) && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
		}
		if alive(pid) {
			return fmt.Errorf("pid %d did not end on SIGKILL", pid)
		}
	}
	return nil
}
