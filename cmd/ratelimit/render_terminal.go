package main

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// maxCells is the widest timeline, in cells, the terminal view draws. With
// more requests than this, each cell is a slice of time instead of one
// request.
const maxCells = 64

// Glyphs of the terminal timeline. Each reads without colour too.
const (
	glyphAdmitted = "█"
	glyphDelayed  = "▒"
	glyphDenied   = "x"
	glyphEmpty    = " "
	glyphBoundary = "│"
)

// ANSI colours for the glyphs.
const (
	ansiReset  = "\x1b[0m"
	ansiBold   = "\x1b[1m"
	ansiDim    = "\x1b[2m"
	ansiGreen  = "\x1b[32m"
	ansiRed    = "\x1b[31m"
	ansiYellow = "\x1b[33m"
	// Time slices where some requests were admitted and some denied: the
	// admitted share as a green (or, having waited, yellow) bar on red.
	ansiMixed        = "\x1b[32;41m"
	ansiMixedDelayed = "\x1b[33;41m"
)

// glyphMixed are the bars of a time slice where some requests were admitted
// and some denied, by the admitted share in eighths (1/8 to 7/8).
var glyphMixed = []string{"▁", "▂", "▃", "▄", "▅", "▆", "▇"}

var glyphColor = map[string]string{
	glyphAdmitted: ansiGreen,
	glyphDelayed:  ansiYellow,
	glyphDenied:   ansiRed,
	glyphBoundary: ansiDim,
}

func colorOf(g string, waited bool) string {
	if c, ok := glyphColor[g]; ok {
		return c
	}
	if waited {
		return ansiMixedDelayed
	}
	return ansiMixed
}

// column is one column of the terminal timeline: a window boundary, or a
// cell holding the requests from..to-1.
type column struct {
	boundary bool
	label    string // axis label placed at this column, if any
	from, to int
}

// layoutColumns lays the requests out one per cell, or in slices of time
// when there are more than maxCells, with a boundary column wherever a
// window ends. It also returns what one cell stands for.
func layoutColumns(times []time.Duration, period time.Duration) ([]column, string) {
	window := func(t time.Duration) int64 { return int64(t / period) }
	var cols []column
	if len(times) <= maxCells {
		cols = append(cols, column{label: "+" + fmtDur(times[0]), from: 0, to: 1})
		for i := 1; i < len(times); i++ {
			if w := window(times[i]); w != window(times[i-1]) {
				cols = append(cols, column{boundary: true, label: "+" + fmtDur(time.Duration(w)*period)})
			}
			cols = append(cols, column{from: i, to: i + 1})
		}
		return cols, "one request"
	}

	first, last := window(times[0]), window(times[len(times)-1])
	periods := last - first + 1
	origin := time.Duration(first) * period
	if perPeriod := slicesPerPeriod(period, maxCells/periods); perPeriod >= 2 {
		// perPeriod cells per window, so boundaries fall between cells.
		cells := periods * perPeriod
		cols = make([]column, 0, cells+periods)
		i := 0
		for c := range cells {
			if c > 0 && c%perPeriod == 0 {
				cols = append(cols, column{boundary: true, label: "+" + fmtDur(origin+time.Duration(c/perPeriod)*period)})
			}
			col := column{from: i}
			if c == 0 {
				col.label = "+" + fmtDur(origin)
			}
			// Cell c covers [origin + c·period/perPeriod, origin + (c+1)·period/perPeriod).
			for i < len(times) && int64(times[i]-origin)*perPeriod < (c+1)*int64(period) {
				i++
			}
			col.to = i
			cols = append(cols, col)
		}
		return cols, fmtDur(period/time.Duration(perPeriod)) + " of time"
	}
	// Too many periods to slice: one or more whole windows per cell, no
	// boundaries drawn.
	per := (periods + maxCells - 1) / maxCells
	i := 0
	for c := int64(0); c*per < periods; c++ {
		col := column{from: i}
		if c%10 == 0 {
			col.label = "+" + fmtDur(origin+time.Duration(c*per)*period)
		}
		end := origin + time.Duration((c+1)*per)*period
		for i < len(times) && times[i] < end {
			i++
		}
		col.to = i
		cols = append(cols, col)
	}
	if per == 1 {
		return cols, "one window of " + fmtDur(period)
	}
	return cols, fmt.Sprintf("%d windows of %s", per, fmtDur(period))
}

// slicesPerPeriod returns the most slices, at most most, that divide
// period into round durations (1s into 20 × 50ms, not 3 × 333.3ms), or 0.
func slicesPerPeriod(period time.Duration, most int64) int64 {
	for _, k := range []int64{60, 50, 40, 30, 25, 20, 15, 12, 10, 8, 6, 5, 4, 3, 2, 1} {
		if k <= most && period%time.Duration(k) == 0 {
			return k
		}
	}
	return 0
}

// glyph is the glyph for requests from..to-1 of l, and whether any of the
// admitted ones waited.
func (l *lane) glyph(from, to int) (string, bool) {
	var ok, waited, denied int
	for _, o := range l.outcomes[from:to] {
		switch {
		case !o.allowed:
			denied++
		case o.delay > 0:
			waited++
		default:
			ok++
		}
	}
	switch {
	case to == from:
		return glyphEmpty, false
	case denied == 0 && waited > 0:
		return glyphDelayed, true
	case denied == 0:
		return glyphAdmitted, false
	case ok+waited == 0:
		return glyphDenied, false
	}
	// The admitted share in eighths, rounded up, at most 7/8.
	eighths := min((8*(ok+waited)+to-from-1)/(to-from), 7)
	return glyphMixed[eighths-1], waited > 0
}

// renderTerminal writes the timeline and the summary table. With color
// set it uses ANSI colours; without, it writes no escape codes at all.
func renderTerminal(out io.Writer, r *result, color bool) error {
	w := bufio.NewWriter(out)
	paint := func(code, s string) string {
		if !color || code == "" {
			return s
		}
		return code + s + ansiReset
	}
	cfg := r.cfg
	cols, cell := layoutColumns(r.times, cfg.period)

	fmt.Fprintf(w, "%s\n", paint(ansiBold, "ratelimit compare · "+r.traffic))
	fmt.Fprintf(w, "limit %d per %s, burst %d · each cell is %s", cfg.limit, fmtDur(cfg.period), cfg.burst, cell)
	if slices.ContainsFunc(cols, func(c column) bool { return c.boundary }) {
		fmt.Fprintf(w, " · %s marks a window boundary", glyphBoundary)
	}
	fmt.Fprint(w, "\n\n")

	const nameWidth = 16
	// The time axis: labels at the first column and at boundaries, where
	// they fit.
	axis := []rune(strings.Repeat(" ", len(cols)+24))
	next := 0
	for c, col := range cols {
		if col.label == "" || c < next {
			continue
		}
		copy(axis[c:], []rune(col.label))
		next = c + utf8.RuneCountInString(col.label) + 1
	}
	fmt.Fprintf(w, "%-*s%s\n", nameWidth, "", paint(ansiDim, strings.TrimRight(string(axis), " ")))

	for i := range r.lanes {
		l := &r.lanes[i]
		var row strings.Builder
		run, runGlyph, runColor := 0, "", ""
		flush := func() {
			if run > 0 {
				row.WriteString(paint(runColor, strings.Repeat(runGlyph, run)))
			}
		}
		for _, col := range cols {
			g, waited := glyphBoundary, false
			if !col.boundary {
				g, waited = l.glyph(col.from, col.to)
			}
			if c := colorOf(g, waited); g != runGlyph || c != runColor {
				flush()
				run, runGlyph, runColor = 0, g, c
			}
			run++
		}
		flush()
		fmt.Fprintf(w, "%-*s%s  %d/%d\n", nameWidth, l.name, row.String(), l.admitted, len(r.times))
	}

	fmt.Fprintf(w, "\n%-*s%s admitted   %s admitted, told to wait   %s denied",
		nameWidth, "", paint(ansiGreen, glyphAdmitted), paint(ansiYellow, glyphDelayed), paint(ansiRed, glyphDenied))
	if cell != "one request" {
		fmt.Fprintf(w, "   %s%s%s share admitted", paint(ansiMixed, glyphMixed[0]), paint(ansiMixed, glyphMixed[3]), paint(ansiMixed, glyphMixed[6]))
	}
	fmt.Fprint(w, "\n\n")

	writeTable(w, r, paint)
	return w.Flush()
}

// tableRows returns the summary table, header first, as text cells.
func tableRows(r *result) [][]string {
	rows := [][]string{{"algorithm", "admitted", "denied", "max/period", "mean delay", "note"}}
	for _, l := range r.lanes {
		delay := "-"
		if l.delayed > 0 {
			delay = fmtDurRound(l.meanDelay)
		}
		rows = append(rows, []string{
			l.name,
			fmt.Sprint(l.admitted),
			fmt.Sprint(l.denied),
			fmt.Sprint(l.peak),
			delay,
			l.note,
		})
	}
	return rows
}

// writeTable writes the summary table with aligned columns, numbers to the
// right.
func writeTable(w io.Writer, r *result, paint func(code, s string) string) {
	rows := tableRows(r)
	widths := make([]int, len(rows[0]))
	for _, row := range rows {
		for c, cell := range row {
			widths[c] = max(widths[c], utf8.RuneCountInString(cell))
		}
	}
	for i, row := range rows {
		var b strings.Builder
		for c, cell := range row {
			pad := strings.Repeat(" ", widths[c]-utf8.RuneCountInString(cell))
			switch {
			case c == len(row)-1:
				b.WriteString(cell)
			case c == 0:
				b.WriteString(cell + pad + "  ")
			default:
				b.WriteString(pad + cell + "  ")
			}
		}
		line := strings.TrimRight(b.String(), " ")
		if i == 0 {
			line = paint(ansiBold, line)
		}
		fmt.Fprintln(w, line)
	}
	fmt.Fprintf(w, "\nmax/period: the most requests that went ahead within any %s (the leaky bucket's count\nwhen they proceed, after their delay). limit is %d.\n",
		fmtDur(r.cfg.period), r.cfg.limit)
}
