package doccheck

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/doc/comment"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// snippet is one block of Go from the documentation.
type snippet struct {
	file string // relative to the repository root
	line int    // of the block's first line of code
	text string
}

func (s snippet) String() string { return fmt.Sprintf("%s:%d", s.file, s.line) }

// imports are the package names a snippet may use without importing them,
// and what they stand for. A snippet that needs another package imports it
// itself (it is then a whole file, with a package clause).
var imports = map[string]string{
	"ratelimit":   "github.com/ratelimitkit/ratelimit",
	"algorithms":  "github.com/ratelimitkit/ratelimit/algorithms",
	"clock":       "github.com/ratelimitkit/ratelimit/clock",
	"conformance": "github.com/ratelimitkit/ratelimit/conformance",
	"lease":       "github.com/ratelimitkit/ratelimit/lease",
	"httplimit":   "github.com/ratelimitkit/ratelimit/httplimit",
	"memory":      "github.com/ratelimitkit/ratelimit/store/memory",
	"store":       "github.com/ratelimitkit/ratelimit/store",
	"statefile":   "github.com/ratelimitkit/ratelimit/statefile",
	"postgres":    "github.com/ratelimitkit/ratelimit/store/postgres",
	"dynamo":      "github.com/ratelimitkit/ratelimit/store/dynamo",
	"rlredis":     "github.com/ratelimitkit/ratelimit/store/redis",
	"rlvalkey":    "github.com/ratelimitkit/ratelimit/store/valkey",
	"redis":       "github.com/redis/go-redis/v9",
	"valkey":      "github.com/valkey-io/valkey-go",
	"pgx":         "github.com/jackc/pgx/v5",
	"pgxpool":     "github.com/jackc/pgx/v5/pgxpool",
	"aws":         "github.com/aws/aws-sdk-go-v2/aws",
	"dynamodb":    "github.com/aws/aws-sdk-go-v2/service/dynamodb",
	"context":     "context",
	"errors":      "errors",
	"fmt":         "fmt",
	"fs":          "io/fs",
	"http":        "net/http",
	"httptest":    "net/http/httptest",
	"log":         "log",
	"slog":        "log/slog",
	"math":        "math",
	"os":          "os",
	"strconv":     "strconv",
	"strings":     "strings",
	"sync":        "sync",
	"testing":     "testing",
	"time":        "time",
}

// preamble declares the names a snippet may use without defining them,
// each standing for what the application around the snippet would have.
// A declaration is added to a snippet that uses its name and does not
// declare it.
var preamble = map[string]string{
	"ctx":       "var ctx context.Context // the request's context",
	"userID":    "var userID string // the caller's key",
	"w":         "var w http.ResponseWriter // in an HTTP handler",
	"r":         "var r *http.Request // in an HTTP handler",
	"cfg":       "var cfg aws.Config // from config.LoadDefaultConfig",
	"store":     "var store = memory.MustNew() // the store the application built",
	"obs":       "var obs ratelimit.Observer // an observer, such as otellimit's",
	"lim":       "var lim *ratelimit.Limiter",
	"mux":       "var mux *http.ServeMux // the application's routes",
	"addr":      "var addr string // the address to listen on",
	"mw":        "var mw *httplimit.Middleware // from httplimit.New",
	"rules":     "var rules []httplimit.Rule",
	"perIP":     "var perIP *ratelimit.Limiter",
	"perUser":   "var perUser *ratelimit.Limiter",
	"writes":    "var writes *ratelimit.Limiter",
	"userKey":   "type userKey struct{} // the context key an auth middleware uses",
	"sessionID": "var sessionID string // the key a lease protects",
	"worker":    "var worker string // who holds the lease",
	"msgs":      "var msgs []string",
	"transcript": `// transcript stands for the resource a lease protects, which refuses a fence below the last it accepted.
var transcript interface {
	Append(ctx context.Context, session string, fence int64, worker string, msgs []string) error
}`,
	"appendMessages": "func appendMessages(ctx context.Context, session string, fence int64, msgs []string) error { return nil }",
	"myStore": `// myStore stands for a store of your own.
type myStore struct{ store.Store }

func (*myStore) listExpiries(context.Context) ([]conformance.Expiry, error) { return nil, nil }`,
	"newMyStore":    "func newMyStore(*testing.T) store.Store { return nil }",
	"newEmptyStore": "func newEmptyStore(*testing.T) *myStore { return nil }",
}

// noCompile is the info-string word that exempts a ```go block.
const noCompile = "nocompile"

// repoRoot returns the repository's root: the directory of go.mod above
// this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatal(err)
	}
	return root
}

// markdownSnippets returns the ```go blocks of README.md and docs/**/*.md,
// and how many were exempted with the nocompile word.
func markdownSnippets(t *testing.T, root string) (list []snippet, exempt []string) {
	t.Helper()
	files := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, _ := filepath.Rel(root, path)
			files = append(files, rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		f, err := os.Open(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		var cur *snippet
		var b strings.Builder
		fence := ""
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			trimmed := strings.TrimLeft(line, " \t")
			switch {
			case cur == nil && fence == "" && strings.HasPrefix(trimmed, "```"):
				fence = trimmed[:len(trimmed)-len(strings.TrimLeft(trimmed, "`"))]
				info := strings.Fields(strings.TrimPrefix(trimmed, fence))
				if len(info) > 0 && info[0] == "go" {
					if slices.Contains(info, noCompile) {
						exempt = append(exempt, fmt.Sprintf("%s:%d", name, n))
						continue
					}
					cur = &snippet{file: name, line: n + 1}
					b.Reset()
				}
			case fence != "" && strings.HasPrefix(trimmed, fence) && strings.TrimSpace(strings.TrimLeft(trimmed, "`")) == "":
				if cur != nil {
					cur.text = b.String()
					list = append(list, *cur)
					cur = nil
				}
				fence = ""
			case cur != nil:
				b.WriteString(line)
				b.WriteByte('\n')
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return list, exempt
}

// docSnippets returns the code blocks in the package doc comments of the
// module's non-main packages (a command's doc shows its usage, not Go).
func docSnippets(t *testing.T, root string) []snippet {
	t.Helper()
	var list []snippet
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		name := d.Name()
		if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
			return filepath.SkipDir
		}
		if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil && path != root {
			return filepath.SkipDir // another module (bench/)
		}
		fset := token.NewFileSet()
		pkgs, err := parser.ParseDir(fset, path, func(fi os.FileInfo) bool {
			return !strings.HasSuffix(fi.Name(), "_test.go")
		}, parser.ParseComments|parser.PackageClauseOnly)
		if err != nil {
			return err
		}
		for _, pkg := range pkgs {
			if pkg.Name == "main" {
				continue
			}
			for fname, f := range pkg.Files {
				if f.Doc == nil {
					continue
				}
				rel, _ := filepath.Rel(root, fname)
				var p comment.Parser
				for _, block := range p.Parse(f.Doc.Text()).Content {
					if code, ok := block.(*comment.Code); ok {
						line := fset.Position(f.Doc.Pos()).Line
						if i := strings.Index(f.Doc.Text(), code.Text[:strings.IndexByte(code.Text+"\n", '\n')]); i >= 0 {
							line += strings.Count(f.Doc.Text()[:i], "\n")
						}
						list = append(list, snippet{file: rel, line: line, text: code.Text})
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return list
}

var (
	elidedLine  = regexp.MustCompile(`(?m)^[ \t]*\.\.\.[ \t]*$`)
	elidedBlock = regexp.MustCompile(`\{[ \t]*\.\.\.[ \t]*\}`)
)

// source turns a snippet into a Go file and returns it with the line of
// the file that holds the snippet's first line.
func source(s snippet) (string, int, error) {
	text := elidedLine.ReplaceAllString(s.text, "")
	text = elidedBlock.ReplaceAllString(text, "{}")
	var src string
	first := 1
	switch {
	case strings.HasPrefix(strings.TrimSpace(stripComments(text)), "package "):
		src = text
	case parses("package snippet\n" + text):
		src, first = "package snippet\n"+text, 2
	default:
		src, first = "package snippet\n\nfunc _() error {\n"+text+"\nreturn nil\n}\n", 4
		if !parses(src) {
			_, err := parser.ParseFile(token.NewFileSet(), "", src, 0)
			return "", 0, err
		}
	}
	return complete(src), first, nil
}

// stripComments drops leading comment lines.
func stripComments(text string) string {
	lines := strings.Split(text, "\n")
	for len(lines) > 0 && (strings.HasPrefix(strings.TrimSpace(lines[0]), "//") || strings.TrimSpace(lines[0]) == "") {
		lines = lines[1:]
	}
	return strings.Join(lines, "\n")
}

func parses(src string) bool {
	_, err := parser.ParseFile(token.NewFileSet(), "", src, 0)
	return err == nil
}

// complete appends the preamble declarations src uses and does not make,
// then adds the imports of the packages it uses and does not import.
func complete(src string) string {
	for {
		f, err := parser.ParseFile(token.NewFileSet(), "", src, 0)
		if err != nil {
			return src // the build reports it
		}
		declared, used := names(f)
		var add []string
		for name, decl := range preamble {
			if name == "store" && usesStorePackage(f) {
				continue // the package, not a store the application built
			}
			if used[name] && !declared[name] {
				add = append(add, decl)
			}
		}
		if len(add) == 0 {
			break
		}
		sort.Strings(add)
		src += "\n" + strings.Join(add, "\n\n") + "\n"
	}
	f, _ := parser.ParseFile(token.NewFileSet(), "", src, 0)
	declared, _ := names(f)
	have := map[string]bool{}
	for _, spec := range f.Imports {
		path, _ := strconv.Unquote(spec.Path.Value)
		name := path[strings.LastIndex(path, "/")+1:]
		if spec.Name != nil {
			name = spec.Name.Name
		}
		have[name] = true
	}
	need := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if x, ok := sel.X.(*ast.Ident); ok && imports[x.Name] != "" && !have[x.Name] && !declared[x.Name] {
				need[x.Name] = true
			}
		}
		return true
	})
	if len(need) == 0 {
		return src
	}
	var specs []string
	for name := range need {
		specs = append(specs, fmt.Sprintf("%s %q", name, imports[name]))
	}
	sort.Strings(specs)
	// After the package clause, on the same line, so that line numbers
	// stay as they are.
	i := strings.Index(src, "\n")
	if i < 0 {
		i = len(src)
	}
	return src[:i] + "; import (" + strings.Join(specs, "; ") + ")" + src[i:]
}

// storeNames are package store's exported names.
var storeNames = map[string]bool{
	"Key": true, "MaxKeyLen": true, "Store": true, "UpdateFunc": true, "Decider": true,
	"ErrUnsupported": true, "ServerClocker": true, "Entry": true, "Exporter": true,
	"Importer": true, "ParseKey": true,
}

// usesStorePackage reports whether f names one of package store's names
// (store.Key, say): its store is then the package, which the preamble's
// variable of that name would shadow.
func usesStorePackage(f *ast.File) bool {
	found := false
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == "store" && storeNames[sel.Sel.Name] {
				found = true
			}
		}
		return !found
	})
	return found
}

// names returns the names f declares at the top level and every identifier
// it uses.
func names(f *ast.File) (declared, used map[string]bool) {
	declared, used = map[string]bool{}, map[string]bool{}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil {
				declared[d.Name.Name] = true
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch spec := spec.(type) {
				case *ast.TypeSpec:
					declared[spec.Name.Name] = true
				case *ast.ValueSpec:
					for _, n := range spec.Names {
						declared[n.Name] = true
					}
				}
			}
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok {
			used[id.Name] = true
		}
		return true
	})
	return declared, used
}

// buildError is one compiler error: "s3/snippet.go:12:2: message".
var buildError = regexp.MustCompile(`^(?:\./)?s(\d+)/snippet\.go:(\d+):\d+: (.*)$`)

// TestSnippetsCompile compiles every snippet in a module of its own that
// uses this repository through a replace directive. A snippet may leave
// variables unused ("declared and not used" is ignored: a snippet shows a
// step, not a whole program); every other compiler error fails the test,
// named by the snippet's file and line.
func TestSnippetsCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the documentation's snippets: not with -short")
	}
	root := repoRoot(t)
	md, exempt := markdownSnippets(t, root)
	all := append(md, docSnippets(t, root)...)
	if len(md) == 0 {
		t.Fatal("found no ```go blocks in README.md and docs/")
	}
	t.Logf("%d snippets (%d in Markdown, %d in package docs); %d exempted with %q: %v", len(all), len(md), len(all)-len(md), len(exempt), noCompile, exempt)

	dir := t.TempDir()
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	modText := regexp.MustCompile(`(?m)^module .*$`).ReplaceAllString(string(mod), "module doccheck")
	modText += fmt.Sprintf("\nrequire github.com/ratelimitkit/ratelimit v0.0.0\n\nreplace github.com/ratelimitkit/ratelimit => %s\n", root)
	write(t, filepath.Join(dir, "go.mod"), modText)
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "go.sum"), string(sum))

	first := make([]int, len(all))
	for i, s := range all {
		src, line, err := source(s)
		if err != nil {
			t.Errorf("%s: the snippet is not Go: %v\n%s", s, err, s.text)
			continue
		}
		first[i] = line
		if err := os.MkdirAll(filepath.Join(dir, fmt.Sprintf("s%d", i)), 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dir, fmt.Sprintf("s%d", i), "snippet.go"), src)
	}

	cmd := exec.Command("go", "build", "-gcflags=-e", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	out, err := cmd.CombinedOutput()
	if err == nil {
		return
	}
	reported := false
	for _, line := range strings.Split(string(out), "\n") {
		m := buildError.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if strings.HasPrefix(m[3], "declared and not used") {
			continue
		}
		i, _ := strconv.Atoi(m[1])
		n, _ := strconv.Atoi(m[2])
		s := all[i]
		t.Errorf("%s:%d: %s\n%s", s.file, s.line+n-first[i], m[3], s.text)
		reported = true
	}
	if !reported && !onlyUnused(string(out)) {
		t.Fatalf("go build of the snippets: %v\n%s", err, out)
	}
}

// onlyUnused reports whether every compiler error in out is "declared and
// not used".
func onlyUnused(out string) bool {
	for _, line := range strings.Split(out, "\n") {
		if line == "" || strings.HasPrefix(line, "# ") {
			continue
		}
		m := buildError.FindStringSubmatch(line)
		if m == nil || !strings.HasPrefix(m[3], "declared and not used") {
			return false
		}
	}
	return true
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}
