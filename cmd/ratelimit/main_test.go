package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMain lets tests run the real main in a child process, to see its
// exit status: with RATELIMIT_CMD_TEST_MAIN set, the test binary is the
// command.
func TestMain(m *testing.M) {
	if os.Getenv("RATELIMIT_CMD_TEST_MAIN") == "1" {
		os.Args = append([]string{"ratelimit"}, strings.Fields(os.Getenv("RATELIMIT_CMD_TEST_ARGS"))...)
		main()
		return
	}
	os.Exit(m.Run())
}

func noEnv(string) string { return "" }

// TestRunExitCodes checks usage errors exit 2 with a clear message, and
// help exits 0.
func TestRunExitCodes(t *testing.T) {
	cases := []struct {
		args       []string
		code       int
		stderrHas  string
		stdoutHas  string
		whatChecks string
	}{
		{nil, exitUsage, "Usage:", "", "no command prints usage to stderr"},
		{[]string{"help"}, exitOK, "", "Examples:", "help"},
		{[]string{"-h"}, exitOK, "", "Usage:", "-h"},
		{[]string{"compare", "-h"}, exitOK, "", "-pattern P", "compare -h"},
		{[]string{"frobnicate"}, exitUsage, `unknown command "frobnicate"`, "", "unknown command"},
		{[]string{"compare", "-limit", "0"}, exitUsage, "ratelimit: invalid parameters: fixed window limit 0 must be positive", "", "the limiter's own error, as is"},
		{[]string{"compare", "-period", "-1s"}, exitUsage, "ratelimit: invalid parameters: fixed window period -1s must be positive", "", "negative period"},
		{[]string{"compare", "-burst", "0"}, exitUsage, "ratelimit: invalid parameters: token bucket burst 0 must be positive", "", "an explicit zero burst is not the default"},
		{[]string{"compare", "-limit", "9007199254740993"}, exitUsage, "too large", "", "overflowing limit"},
		{[]string{"compare", "-limit", "ten"}, exitUsage, `invalid value "ten" for flag -limit`, "", "non-numeric limit"},
		{[]string{"compare", "-pattern", "sawtooth"}, exitUsage, "choose one of steady, burst, boundary-burst, random", "", "unknown pattern"},
		{[]string{"compare", "-color", "sometimes"}, exitUsage, "must be auto, always or never", "", "bad -color"},
		{[]string{"compare", "-n", "0"}, exitUsage, "-n 0 must be between 1 and 10000", "", "zero requests"},
		{[]string{"compare", "-n", "10001"}, exitUsage, "-n 10001 must be between 1 and 10000", "", "too many requests"},
		{[]string{"compare", "-spacing", "-5ms"}, exitUsage, "must not be negative", "", "negative spacing"},
		{[]string{"compare", "-spacing", "100000h"}, exitUsage, "exceeds the maximum", "", "spacing beyond any period"},
		{[]string{"compare", "-spacing", "1500ns"}, exitUsage, "whole number of microseconds", "", "sub-microsecond spacing"},
		{[]string{"compare", "-start", "1s"}, exitUsage, "-start 1s must be less than -period 1s", "", "start outside the window"},
		{[]string{"compare", "-svg", "x", "-html", "x"}, exitUsage, "name the same file", "", "one file for both outputs"},
		{[]string{"compare", "steady"}, exitUsage, `unexpected argument "steady"`, "", "a stray argument"},
		{[]string{"compare", "-nope"}, exitUsage, "flag provided but not defined: -nope", "", "unknown flag"},
		{[]string{"compare", "-pattern", "steady", "-spacing", "87600h", "-n", "10000"}, exitUsage, "run past what the clock can hold", "", "traffic beyond the clock"},
		{[]string{"compare", "-color", "never"}, exitOK, "", "fixed_window", "the default comparison"},
	}
	for _, c := range cases {
		var stdout, stderr bytes.Buffer
		code := run(c.args, &stdout, &stderr, noEnv)
		if code != c.code {
			t.Errorf("%s: ratelimit %s exited %d, want %d; stderr:\n%s", c.whatChecks, strings.Join(c.args, " "), code, c.code, stderr.String())
		}
		if !strings.Contains(stderr.String(), c.stderrHas) {
			t.Errorf("%s: ratelimit %s: stderr lacks %q:\n%s", c.whatChecks, strings.Join(c.args, " "), c.stderrHas, stderr.String())
		}
		if !strings.Contains(stdout.String(), c.stdoutHas) {
			t.Errorf("%s: ratelimit %s: stdout lacks %q", c.whatChecks, strings.Join(c.args, " "), c.stdoutHas)
		}
		if c.code == exitUsage && c.args != nil && !strings.Contains(stderr.String(), "ratelimit help") {
			t.Errorf("%s: ratelimit %s: a usage error should point to 'ratelimit help'", c.whatChecks, strings.Join(c.args, " "))
		}
	}
}

// TestMainExitStatus runs main itself in a child process.
func TestMainExitStatus(t *testing.T) {
	for _, c := range []struct {
		args string
		code int
	}{
		{"compare -limit 0", exitUsage},
		{"compare -pattern nope", exitUsage},
		{"compare -color never -n 5", exitOK},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "RATELIMIT_CMD_TEST_MAIN=1", "RATELIMIT_CMD_TEST_ARGS="+c.args)
		out, err := cmd.CombinedOutput()
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatalf("running ratelimit %s: %v", c.args, err)
		}
		if code != c.code {
			t.Errorf("ratelimit %s exited %d, want %d; output:\n%s", c.args, code, c.code, out)
		}
	}
}

func TestUseColor(t *testing.T) {
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	cases := []struct {
		mode     string
		env      func(string) string
		terminal bool
		want     bool
	}{
		{"auto", noEnv, true, true},
		{"auto", noEnv, false, false},
		{"auto", env("NO_COLOR", "1"), true, false},
		{"auto", env("TERM", "dumb"), true, false},
		{"always", env("NO_COLOR", "1"), false, true}, // a flag overrides the environment
		{"never", noEnv, true, false},
	}
	for _, c := range cases {
		if got := useColor(c.mode, c.env, c.terminal); got != c.want {
			t.Errorf("useColor(%q, NO_COLOR=%q TERM=%q, terminal=%v) = %v, want %v",
				c.mode, c.env("NO_COLOR"), c.env("TERM"), c.terminal, got, c.want)
		}
	}
}

// TestRunAuto checks -color=auto writes no escape codes to a pipe or file.
func TestRunAuto(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"compare"}, &stdout, &stderr, noEnv); code != exitOK {
		t.Fatalf("ratelimit compare exited %d: %s", code, stderr.String())
	}
	if strings.Contains(stdout.String(), "\x1b") {
		t.Errorf("-color=auto wrote escape codes to a buffer")
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if isTerminal(f) {
		t.Errorf("isTerminal(regular file) = true")
	}
}

// TestRunWritesFiles checks -svg and -html write their files, and that an
// unwritable path is an error (exit 1), not a usage error.
func TestRunWritesFiles(t *testing.T) {
	dir := t.TempDir()
	svgPath, htmlPath := filepath.Join(dir, "out.svg"), filepath.Join(dir, "out.html")
	var stdout, stderr bytes.Buffer
	code := run([]string{"compare", "-color", "never", "-svg", svgPath, "-html", htmlPath}, &stdout, &stderr, noEnv)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	svg, err := os.ReadFile(svgPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, lanes := svgLanes(t, string(svg)); len(lanes) != 6 {
		t.Errorf("written SVG has %d lanes, want 6", len(lanes))
	}
	if page, err := os.ReadFile(htmlPath); err != nil || !bytes.Contains(page, []byte("<svg")) {
		t.Errorf("written HTML page: %v, holds <svg>: %v", err, bytes.Contains(page, []byte("<svg")))
	}
	if !strings.Contains(stdout.String(), "wrote "+svgPath) {
		t.Errorf("stdout does not say it wrote %s", svgPath)
	}

	stderr.Reset()
	code = run([]string{"compare", "-svg", filepath.Join(dir, "missing", "out.svg")}, &stdout, &stderr, noEnv)
	if code != exitError {
		t.Errorf("-svg into a missing directory exited %d, want %d", code, exitError)
	}
	if !strings.Contains(stderr.String(), "no such file or directory") {
		t.Errorf("stderr lacks the cause: %s", stderr.String())
	}
}
