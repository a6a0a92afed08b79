package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"
)

// svgLanes parses doc as XML, failing the test if it is not well formed,
// and returns the root element's name and the data-algorithm of every
// <g class="lane">, in order.
func svgLanes(t *testing.T, doc string) (root xml.Name, lanes []string) {
	t.Helper()
	dec := xml.NewDecoder(strings.NewReader(doc))
	depth := 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			if depth == 0 {
				root = el.Name
			}
			depth++
			var class, alg string
			for _, a := range el.Attr {
				switch a.Name.Local {
				case "class":
					class = a.Value
				case "data-algorithm":
					alg = a.Value
				}
			}
			if el.Name.Local == "g" && class == "lane" {
				lanes = append(lanes, alg)
			}
		case xml.EndElement:
			depth--
		}
	}
	if depth != 0 {
		t.Fatalf("SVG ends with %d elements open", depth)
	}
	return root, lanes
}

// TestSVG renders sparse (dots and arcs) and dense (ticks) traffic and
// checks that the result is well-formed SVG with one lane per algorithm.
func TestSVG(t *testing.T) {
	for _, args := range [][]string{
		{"-pattern", "boundary-burst"},
		{"-pattern", "steady", "-n", "1"},
		{"-pattern", "steady", "-spacing", "0", "-n", "12"},
		{"-pattern", "random", "-n", "600", "-seed", "9"},
		{"-pattern", "burst", "-limit", "20", "-period", "1m", "-burst", "5"},
		{"-pattern", "steady", "-limit", "2", "-period", "1h", "-spacing", "10m", "-n", "500"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			r := mustSimulate(t, args...)
			var buf bytes.Buffer
			if err := renderSVG(&buf, r); err != nil {
				t.Fatalf("renderSVG: %v", err)
			}
			doc := buf.String()
			root, lanes := svgLanes(t, doc)
			if root.Local != "svg" || root.Space != "http://www.w3.org/2000/svg" {
				t.Errorf("root element is %v, want svg in the SVG namespace", root)
			}
			if strings.Join(lanes, " ") != strings.Join(laneOrder, " ") {
				t.Errorf("lanes %v, want %v", lanes, laneOrder)
			}
			if !strings.Contains(doc, `<title id="title">`) {
				t.Errorf("SVG has no <title>")
			}
			for _, want := range []string{r.traffic, "window boundary", "$ " + r.cfg.commandLine()} {
				if !strings.Contains(doc, esc(want)) {
					t.Errorf("SVG lacks %q", want)
				}
			}
			if strings.Contains(doc, "NaN") || strings.Contains(doc, "Inf") {
				t.Errorf("SVG holds a NaN or Inf coordinate")
			}
		})
	}
}

func TestHTML(t *testing.T) {
	r := mustSimulate(t, "-pattern", "boundary-burst")
	var buf bytes.Buffer
	if err := renderHTML(&buf, r); err != nil {
		t.Fatalf("renderHTML: %v", err)
	}
	page := buf.String()
	start, end := strings.Index(page, "<svg"), strings.Index(page, "</svg>")
	if start < 0 || end < start {
		t.Fatalf("HTML page holds no <svg>…</svg>")
	}
	if _, lanes := svgLanes(t, page[start:end+len("</svg>")]); len(lanes) != len(laneOrder) {
		t.Errorf("the page's SVG has lanes %v, want %v", lanes, laneOrder)
	}
	for _, want := range append([]string{"<table>", "<th class=\"num\">max/period</th>", "the boundary burst"}, laneOrder...) {
		if !strings.Contains(page, want) {
			t.Errorf("HTML page lacks %q", want)
		}
	}
}

// TestTerminal checks the terminal view: rows and table, escape codes only
// with colour, a boundary column where the window changes.
func TestTerminal(t *testing.T) {
	for _, args := range [][]string{
		{"-pattern", "boundary-burst"},
		{"-pattern", "random", "-n", "300"},   // time slices with boundaries
		{"-pattern", "random", "-n", "10000"}, // one window per cell
	} {
		r := mustSimulate(t, args...)
		for _, color := range []bool{false, true} {
			var buf bytes.Buffer
			if err := renderTerminal(&buf, r, color); err != nil {
				t.Fatalf("renderTerminal: %v", err)
			}
			out := buf.String()
			if hasEsc := strings.Contains(out, "\x1b"); hasEsc != color {
				t.Errorf("compare %s with color=%v: output has escape codes = %v", strings.Join(args, " "), color, hasEsc)
			}
			for _, name := range laneOrder {
				if strings.Count(out, "\n"+name+" ") != 2 { // a timeline row and a table row
					t.Errorf("compare %s: %s does not appear in both timeline and table:\n%s", strings.Join(args, " "), name, out)
				}
			}
		}
	}

	r := mustSimulate(t, "-pattern", "boundary-burst")
	var buf bytes.Buffer
	if err := renderTerminal(&buf, r, false); err != nil {
		t.Fatal(err)
	}
	// The default boundary burst: 10 admitted, the boundary, 10 more.
	const want = "fixed_window    ██████████│██████████  20/20\n" +
		"sliding_log     ██████████│xxxxxxxxxx  10/20\n"
	if !strings.Contains(buf.String(), want) {
		t.Errorf("terminal output lacks\n%s\ngot:\n%s", want, buf.String())
	}
	if !strings.Contains(buf.String(), "leaky_bucket    █▒▒▒▒▒▒▒▒▒│") {
		t.Errorf("the leaky bucket's delayed requests are not marked ▒:\n%s", buf.String())
	}
}

func TestLayoutColumns(t *testing.T) {
	r := mustSimulate(t, "-pattern", "steady", "-n", "2000", "-spacing", "10ms")
	cols, cell := layoutColumns(r.times, r.cfg.period)
	if cell != "500ms of time" {
		t.Errorf("2000 requests over 20s: each cell is %q, want 500ms of time", cell)
	}
	n, boundaries := 0, 0
	for _, c := range cols {
		if c.boundary {
			boundaries++
			continue
		}
		if c.from != n {
			t.Fatalf("cell starts at request %d, want %d", c.from, n)
		}
		n = c.to
	}
	if n != len(r.times) || boundaries != 19 {
		t.Errorf("cells cover %d requests with %d boundaries, want %d and 19", n, boundaries, len(r.times))
	}
}

func TestGlyph(t *testing.T) {
	l := lane{outcomes: []outcome{
		{allowed: true}, {allowed: true, delay: 5}, {allowed: false}, {allowed: false}, {allowed: true},
	}}
	cases := []struct {
		from, to int
		want     string
	}{
		{0, 0, glyphEmpty},
		{0, 1, glyphAdmitted},
		{0, 2, glyphDelayed},
		{2, 4, glyphDenied},
		{3, 5, "▄"}, // half admitted
		{1, 4, "▃"}, // a third admitted, rounded up to 3/8
	}
	for _, c := range cases {
		if got, _ := l.glyph(c.from, c.to); got != c.want {
			t.Errorf("glyph(%d, %d) = %q, want %q", c.from, c.to, got, c.want)
		}
	}
}

func TestFormat(t *testing.T) {
	cases := map[string]string{
		fmtDur(0):                          "0s",
		fmtDur(1500 * 1e6):                 "1.5s",
		fmtDur(60 * 1e9):                   "1m",
		fmtDur(90 * 60 * 1e9):              "1h30m",
		fmtDur(3 * 3600 * 1e9):             "3h",
		fmtDurRound(482142857):             "482ms",
		fmtDurRound(1234567890):            "1.23s",
		plural(1, "request"):               "1 request",
		plural(2, "request"):               "2 requests",
		config{pattern: "x"}.commandLine(): "ratelimit compare -pattern x -limit 0 -period 0s -burst 0 -n 0 -spacing 0s",
	}
	for got, want := range cases {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}
