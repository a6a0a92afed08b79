package testserver

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// sourceDir is this package's directory at build time.
var sourceDir = func() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}()

// moduleRoot returns the repository's root directory, found from this
// package's path at build time: the dynalite the scripts install lives
// there.
func moduleRoot() string { return filepath.Join(sourceDir, "..", "..") }

// dynaliteCLI returns the path of the dynalite that scripts/servers.sh
// installs (npm ci in scripts/dynalite, the version its lockfile pins), and
// checks that node is on PATH to run it.
func dynaliteCLI() (string, error) {
	cli := filepath.Join(moduleRoot(), "scripts", "dynalite", "node_modules", "dynalite", "cli.js")
	if _, err := os.Stat(cli); err != nil {
		return "", fmt.Errorf("no dynalite at %s: run `make test` (scripts/servers.sh installs it with npm ci)", cli)
	}
	if _, err := exec.LookPath("node"); err != nil {
		return "", fmt.Errorf("no node on PATH to run %s: run `make test` (scripts/servers.sh installs it)", cli)
	}
	return cli, nil
}

// dynaliteProc returns a dynalite on port that keeps its tables in memory
// and makes them ACTIVE at once (instead of after 500ms). It is ready once
// its log says it listens (so the server on the port is this one) and it
// answers ListTables.
func dynaliteProc(cli, dir string, port int) *proc {
	log := filepath.Join(dir, "server.log")
	url := "http://127.0.0.1:" + strconv.Itoa(port)
	return &proc{
		name: "dynalite", bin: "node", dir: dir, log: log,
		args: []string{cli, "--host", "127.0.0.1", "--port", strconv.Itoa(port),
			"--createTableMs", "0", "--deleteTableMs", "0", "--updateTableMs", "0"},
		ready: func(ctx context.Context, _ int) error {
			if b, _ := os.ReadFile(log); !strings.Contains(string(b), "listening at") {
				return fmt.Errorf("%s has not said it listens yet", log)
			}
			return dynamoPing(ctx, url)
		},
	}
}

// pingClient closes its connections after each request, so that no idle
// connection outlives a check (tests count goroutines).
var pingClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// dynamoPing asks the DynamoDB endpoint at url for its tables, with a
// request dynalite accepts (it checks that a signature is present, not
// that it is right).
func dynamoPing(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/", strings.NewReader("{}"))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-amz-json-1.0")
	req.Header.Set("X-Amz-Target", "DynamoDB_20120810.ListTables")
	req.Header.Set("X-Amz-Date", time.Now().UTC().Format("20060102T150405Z"))
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=test/20200101/us-east-1/dynamodb/aws4_request, SignedHeaders=host;x-amz-date, Signature=0")
	resp, err := pingClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"TableNames"`) {
		return fmt.Errorf("ListTables on %s: %s: %s", url, resp.Status, b)
	}
	return nil
}
