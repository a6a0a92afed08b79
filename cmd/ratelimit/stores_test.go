package main

import "testing"

func TestParseStoreURL(t *testing.T) {
	for _, tc := range []struct {
		spec, host, redacted string
	}{
		{"redis://127.0.0.1:6379/0?prefix=p", "127.0.0.1:6379", "redis://127.0.0.1:6379/0?prefix=p"},
		{"redis+cluster://a:7001,b:7002,c:7003", "a:7001,b:7002,c:7003", "redis+cluster://a:7001,b:7002,c:7003"},
		{"redis+cluster://u:secret@a:7001,b:7002/?prefix=p", "a:7001,b:7002", "redis+cluster://u:xxxxx@a:7001,b:7002/?prefix=p"},
		{"redis+cluster://a:7001,[::1]:7002?clock=request", "a:7001,[::1]:7002", "redis+cluster://a:7001,[::1]:7002?clock=request"},
	} {
		u, err := parseStoreURL(tc.spec)
		if err != nil {
			t.Errorf("parseStoreURL(%q): %v", tc.spec, err)
			continue
		}
		if u.Host != tc.host || u.Redacted() != tc.redacted {
			t.Errorf("parseStoreURL(%q): host %q, redacted %q; want %q, %q", tc.spec, u.Host, u.Redacted(), tc.host, tc.redacted)
		}
	}
	for _, spec := range []string{
		"redis+cluster://a:7001,,b:7002",
		"redis+cluster://a:7001,b:port",
		"redis+cluster://a:7001,b:7002%zz",
	} {
		if u, err := parseStoreURL(spec); err == nil {
			t.Errorf("parseStoreURL(%q) = host %q, want an error", spec, u.Host)
		}
	}
}
