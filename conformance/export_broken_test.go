package conformance_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/ratelimitkit/ratelimit/conformance"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

// brokenExporter is a memory store whose Export has a defect.
type brokenExporter struct {
	*memory.Store
	defect string
}

func (s brokenExporter) Export(ctx context.Context, namespace string, now int64, yield func(store.Entry) error) error {
	first := true
	return s.Store.Export(ctx, "", now, func(e store.Entry) error {
		switch s.defect {
		case "export-loses-key":
			if e.Key.Namespace == namespace && first {
				first = false
				return nil
			}
		case "export-ignores-namespace":
			return yield(e)
		case "export-twice":
			if e.Key.Namespace == namespace {
				if err := yield(e); err != nil {
					return err
				}
			}
		case "export-expiry-early":
			e.Expires = now + 1
		}
		if namespace != "" && e.Key.Namespace != namespace {
			return nil
		}
		return yield(e)
	})
}

// TestBrokenExporterHelper runs the Export group on the store named by
// CONFORMANCE_EXPORT_DEFECT. It does nothing in a normal test run.
func TestBrokenExporterHelper(t *testing.T) {
	defect, ok := os.LookupEnv("CONFORMANCE_EXPORT_DEFECT")
	if !ok {
		t.Skip("runs only as the child process of TestExportGroupCatchesBrokenExporters")
	}
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		return conformance.Harness{Store: brokenExporter{memory.MustNew(), defect}}
	})
}

// TestExportGroupCatchesBrokenExporters runs the Export group on exporters
// that lose a key, yield other namespaces' keys, yield a key twice, or
// shorten a state's expiry (so the moved key is forgotten too soon); each
// must fail it, and the correct one pass.
func TestExportGroupCatchesBrokenExporters(t *testing.T) {
	for _, c := range []struct{ defect, rule string }{
		{"", ""},
		{"export-loses-key", "every live key is exported"},
		{"export-ignores-namespace", "only the namespace's keys are exported"},
		{"export-twice", "each key is exported once"},
		{"export-expiry-early", "a moved key decides as in the source"},
	} {
		t.Run("defect="+c.defect, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestBrokenExporterHelper$/^Export$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), "CONFORMANCE_EXPORT_DEFECT="+c.defect)
			b, err := cmd.CombinedOutput()
			if _, isExit := err.(*exec.ExitError); err != nil && !isExit {
				t.Fatalf("running the Export group in a child process: %v", err)
			}
			out := string(b)
			switch {
			case c.defect == "" && err != nil:
				t.Fatalf("the Export group fails a correct exporter:\n%s", failures(out))
			case c.defect == "" && !strings.Contains(out, "--- PASS: TestBrokenExporterHelper/Export/gcra"):
				t.Fatalf("the Export group ran no passing subtest on a correct exporter:\n%s", out)
			case c.defect != "" && err == nil:
				t.Fatalf("the Export group passes an exporter with defect %q (rule: %s)", c.defect, c.rule)
			}
		})
	}
}
