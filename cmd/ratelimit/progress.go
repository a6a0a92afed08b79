package main

import (
	"fmt"
	"io"
	"sync/atomic"
	"time"
)

// progress reports a move's progress on stderr every so often: keys read,
// of the total when it is known, with the percentage, the rate and the time
// left. On a terminal it rewrites one line (\r); elsewhere (a file, a pipe,
// a CI log) it writes plain lines.
type progress struct {
	w      io.Writer
	every  time.Duration // 0: never
	dryRun bool
	tty    bool
	start  time.Time
	last   time.Time
	total  atomic.Int64 // -1 until known; set from another goroutine
	shown  bool         // a refreshed line is on the terminal
}

func newProgress(w io.Writer, every time.Duration, dryRun bool) *progress {
	p := &progress{w: w, every: every, dryRun: dryRun, tty: isTerminal(w), start: time.Now()}
	p.last = p.start
	p.total.Store(-1)
	return p
}

// setTotal sets how many keys the move will read, once counted.
func (p *progress) setTotal(n int64) { p.total.Store(n) }

// report shows st when the interval has passed since the last report.
func (p *progress) report(st moveStats, force bool) {
	if p.every == 0 {
		return
	}
	now := time.Now()
	if !force && now.Sub(p.last) < p.every {
		return
	}
	p.last = now
	line := p.line(st, now)
	if p.tty {
		fmt.Fprintf(p.w, "\r%s\x1b[K", line)
		p.shown = true
		return
	}
	fmt.Fprintln(p.w, line)
}

// end ends the refreshed line, if one is shown.
func (p *progress) end() {
	if p.shown {
		fmt.Fprintln(p.w)
		p.shown = false
	}
}

// line is one report: "1200 of 10000 keys read (12.0%), 3400 keys/s,
// 3s left; 1100 written, 100 kept".
func (p *progress) line(st moveStats, now time.Time) string {
	elapsed := now.Sub(p.start)
	rate := 0.0
	if elapsed > 0 {
		rate = float64(st.read) / elapsed.Seconds()
	}
	verb := "read"
	if p.dryRun {
		verb = "counted"
	}
	s := fmt.Sprintf("%d keys %s", st.read, verb)
	if total := p.total.Load(); total >= 0 {
		pct, left := 100.0, time.Duration(0)
		if int64(st.read) < total {
			pct = 100 * float64(st.read) / float64(total)
			if rate > 0 {
				left = time.Duration(float64(total-int64(st.read)) / rate * float64(time.Second))
			}
		}
		s = fmt.Sprintf("%d of %d keys %s (%.1f%%)", st.read, total, verb, pct)
		if rate > 0 {
			s += fmt.Sprintf(", %.0f keys/s, %v left", rate, left.Round(time.Second))
		}
	} else if rate > 0 {
		s += fmt.Sprintf(", %.0f keys/s", rate)
	}
	if !p.dryRun {
		s += fmt.Sprintf("; %d written, %d kept", st.written, st.kept)
	}
	return s
}
