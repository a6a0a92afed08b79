package forms

import (
	"testing"
	"time"
)

// TestManifestArities holds the arities formgen wrote in its manifest to
// the Go forms: a generated form takes as many parameters as its
// algorithm's ServerArgs, and every built-in has an entry.
func TestManifestArities(t *testing.T) {
	for _, b := range Builtins() {
		e := manifestEntry(b.Name)
		if e.name != b.Name {
			t.Errorf("%s has no entry in formgen's manifest", b.Name)
			continue
		}
		if n := len(b.New(1, time.Second, 1).(ServerForm).ServerArgs()); e.generated && e.args != n {
			t.Errorf("%s: the manifest says its forms take %d parameters; ServerArgs has %d", b.Name, e.args, n)
		}
	}
}
