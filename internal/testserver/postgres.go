package testserver

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// postgresBinDir returns the directory of the newest PostgreSQL server
// programs: Debian keeps them in /usr/lib/postgresql/VERSION/bin, off
// PATH.
func postgresBinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgVersion(dirs[i]) > pgVersion(dirs[j]) })
	for _, d := range dirs {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if p, err = filepath.EvalSymlinks(p); err == nil && isExec(filepath.Join(filepath.Dir(p), "postgres")) {
			return filepath.Dir(p), nil
		}
	}
	return "", errors.New("no initdb and postgres found (in /usr/lib/postgresql/*/bin or on PATH): run `make test` (scripts/servers.sh installs the Debian package postgresql)")
}

// pgVersion is the major version in a /usr/lib/postgresql/VERSION/bin path.
func pgVersion(dir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return v
}

func isExec(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// postgresUser returns the credential PostgreSQL runs with: nil (this
// process's user) unless this process is root, which initdb refuses; then
// the postgres system user, or a ratelimit-pg system user created for it.
func postgresUser() (*syscall.Credential, string, error) {
	if os.Geteuid() != 0 {
		return nil, "", nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		u, err = user.Lookup("ratelimit-pg")
	}
	if err != nil {
		out, err := exec.Command("useradd", "--system", "--user-group", "--no-create-home",
			"--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", "ratelimit-pg").CombinedOutput()
		if err != nil {
			return nil, "", fmt.Errorf("useradd ratelimit-pg (initdb refuses to run as root): %v: %s", err, out)
		}
		if u, err = user.Lookup("ratelimit-pg"); err != nil {
			return nil, "", err
		}
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, u.Username, nil
}

// initPostgres creates a throwaway PostgreSQL cluster in dir/data, as cred:
// superuser ratelimit trusted on loopback, no durability, and returns the
// directory of the server programs. dir's parent must be one the user can
// enter.
func initPostgres(dir string, cred *syscall.Credential) (string, error) {
	bin, err := postgresBinDir()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return "", err
		}
	}
	log := filepath.Join(dir, "initdb.log")
	logf, err := os.Create(log)
	if err != nil {
		return "", err
	}
	cmd := exec.Command(filepath.Join(bin, "initdb"), "-D", filepath.Join(dir, "data"),
		"-U", "ratelimit", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync")
	cmd.Dir = "/" // a working directory the user can read
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	err = cmd.Run()
	logf.Close()
	if err != nil {
		return "", fmt.Errorf("initdb: %v\n%s", err, tailOf(log))
	}
	conf := fmt.Sprintf(`
# Throwaway test server: loopback only, no durability.
listen_addresses = '127.0.0.1'
unix_socket_directories = '%s'
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 200
`, dir)
	f, err := os.OpenFile(filepath.Join(dir, "data", "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return "", err
	}
	_, err = f.WriteString(conf)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return bin, err
}

// postgresProc returns the server of the cluster initPostgres made in dir,
// on port. It is ready once it accepts a session on its own socket in dir
// (so the server is this one) and on the TCP port.
func postgresProc(bin, dir string, port int, cred *syscall.Credential) *proc {
	sock := filepath.Join(dir, ".s.PGSQL."+strconv.Itoa(port))
	addr := "127.0.0.1:" + strconv.Itoa(port)
	return &proc{
		name: "postgres", bin: filepath.Join(bin, "postgres"), dir: dir, cred: cred,
		args: []string{"-D", filepath.Join(dir, "data"), "-p", strconv.Itoa(port)},
		log:  filepath.Join(dir, "server.log"),
		// Immediate shutdown: the cluster is thrown away.
		stopSig: syscall.SIGQUIT,
		ready: func(ctx context.Context, _ int) error {
			if err := pgExec(ctx, "unix", sock, "postgres", ""); err != nil {
				return err
			}
			return pgExec(ctx, "tcp", addr, "postgres", "")
		},
	}
}

// pgExec opens a session as ratelimit on database db of the PostgreSQL
// server at addr and runs sql (a simple query; none when empty). It is the
// few lines of the protocol that readiness and creating the database need,
// with trust authentication.
func pgExec(ctx context.Context, network, addr, db, sql string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	params := "user\x00ratelimit\x00database\x00" + db + "\x00\x00"
	msg := binary.BigEndian.AppendUint32(nil, uint32(8+len(params)))
	msg = binary.BigEndian.AppendUint32(msg, 3<<16) // protocol 3.0
	msg = append(msg, params...)
	if _, err := c.Write(msg); err != nil {
		return err
	}
	r := bufio.NewReader(c)
	if err := pgUntilReady(r); err != nil {
		return err
	}
	if sql != "" {
		q := append([]byte{'Q'}, binary.BigEndian.AppendUint32(nil, uint32(4+len(sql)+1))...)
		q = append(append(q, sql...), 0)
		if _, err := c.Write(q); err != nil {
			return err
		}
		if err := pgUntilReady(r); err != nil {
			return err
		}
	}
	_, _ = c.Write([]byte{'X', 0, 0, 0, 4})
	return nil
}

// pgUntilReady reads messages until ReadyForQuery, returning the first
// error the server sent, or a demand for a password.
func pgUntilReady(r *bufio.Reader) error {
	var first error
	for {
		var head [5]byte
		if _, err := io.ReadFull(r, head[:]); err != nil {
			if first != nil {
				return first
			}
			return err
		}
		n := int(binary.BigEndian.Uint32(head[1:])) - 4
		if n < 0 || n > 1<<20 {
			return fmt.Errorf("bad message length %d", n)
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(r, body); err != nil {
			return err
		}
		switch head[0] {
		case 'R':
			if len(body) < 4 || binary.BigEndian.Uint32(body) != 0 {
				return errors.New("the server asks for a password; the test cluster trusts loopback")
			}
		case 'E':
			if first == nil {
				first = errors.New(pgErrorMessage(body))
			}
		case 'Z':
			return first
		}
	}
}

// pgErrorMessage returns the M (message) field of an ErrorResponse.
func pgErrorMessage(body []byte) string {
	for _, f := range strings.Split(string(body), "\x00") {
		if strings.HasPrefix(f, "M") {
			return f[1:]
		}
	}
	return "error"
}
