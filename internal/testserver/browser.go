package testserver

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// EnvChromium names the headless browser binary, Debian's chromium;
// scripts/servers.sh installs it and Up sets the variable. When it is unset,
// Chromium looks for chromium on PATH.
const EnvChromium = "RATELIMIT_CHROMIUM"

// Chromium returns the path of a Chromium binary, from RATELIMIT_CHROMIUM or
// PATH. When there is none, the test skips (or fails in CI).
func Chromium(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(EnvChromium); p != "" {
		return p
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	unavailable(t, EnvChromium, "a headless browser (apt-get install chromium)", "/usr/bin/chromium")
	return ""
}

// Headless runs the browser at path headless on url with extra flags
// (such as --screenshot=FILE or --dump-dom) and returns its standard
// output. The browser gets a fresh profile in a temporary directory and the
// flags that keep it off the network: it loads url and nothing else.
func Headless(t testing.TB, path, url string, flags ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := append([]string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-default-apps", "--disable-extensions", "--no-first-run", "--no-default-browser-check",
		"--hide-scrollbars", "--user-data-dir=" + filepath.Join(t.TempDir(), "profile"),
	}, flags...)
	cmd := exec.CommandContext(ctx, path, append(args, url)...)
	cmd.WaitDelay = 5 * time.Second
	var stderr limitedBuffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", path, flags, err, stderr.b)
	}
	return out
}

// limitedBuffer keeps the last 8 KiB written to it: Chromium's stderr is
// chatty (D-Bus, GPU) and only its end matters when it fails.
type limitedBuffer struct{ b []byte }

func (l *limitedBuffer) Write(p []byte) (int, error) {
	l.b = append(l.b, p...)
	if len(l.b) > 8<<10 {
		l.b = l.b[len(l.b)-8<<10:]
	}
	return len(p), nil
}
