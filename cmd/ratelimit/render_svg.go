package main

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// SVG geometry, in pixels.
const (
	svgWidth     = 1000
	svgPlotLeft  = 220 // lanes' labels sit left of it
	svgPlotRight = 970
	svgLanesTop  = 152
	svgLaneH     = 66
	// svgProceedRow is how far below the lane's line a lane shows when
	// its delayed requests proceed; such a lane is that much taller.
	svgProceedRow = 40
	// denseRadius is the mark radius below which requests are drawn as
	// ticks rather than dots.
	denseRadius = 2.8
)

// SVG colours.
const (
	colAdmitted = "#2e9e44"
	colDenied   = "#d43c3c"
	colDelayed  = "#e08e00"
	colInk      = "#222"
	colMuted    = "#666"
	colGrid     = "#9aa3ad"
	colPeak     = "#dfe8f6" // busiest period within the limit
	colPeakOver = "#fbe0de" // busiest period above the limit
)

const svgFont = `font-family="system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif"`

// maxTooltips bounds the requests that get a hover tooltip, to keep large
// pictures small.
const maxTooltips = 400

// esc escapes s for XML text and attribute values.
func esc(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s)) // writes to a strings.Builder never fail
	return b.String()
}

// timeScale maps offsets from the origin to x coordinates.
type timeScale struct {
	min, max float64 // microseconds
}

func (s timeScale) x(t time.Duration) float64 {
	f := (float64(t.Microseconds()) - s.min) / (s.max - s.min)
	return svgPlotLeft + f*(svgPlotRight-svgPlotLeft)
}

// newTimeScale spans every arrival and every moment a delayed request goes
// ahead, with a little room either side.
func newTimeScale(r *result) timeScale {
	lo, hi := r.times[0], r.times[len(r.times)-1]
	for i := range r.lanes {
		for j := range r.times {
			hi = max(hi, r.lanes[i].proceedAt(r.times, j))
		}
	}
	span := float64((hi - lo).Microseconds())
	if span == 0 {
		span = float64(r.cfg.period.Microseconds())
	}
	pad := span * 0.03
	return timeScale{min: float64(lo.Microseconds()) - pad, max: float64(lo.Microseconds()) + span + pad}
}

// tickSteps are the round steps the time axis may use, in microseconds.
var tickSteps = func() []int64 {
	var steps []int64
	for unit := int64(1); unit < 1e6; unit *= 10 {
		steps = append(steps, unit, 2*unit, 5*unit)
	}
	for _, d := range []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second,
		15 * time.Second, 30 * time.Second, time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute,
		15 * time.Minute, 30 * time.Minute, time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour,
		12 * time.Hour, 24 * time.Hour, 48 * time.Hour, 7 * 24 * time.Hour, 30 * 24 * time.Hour, 365 * 24 * time.Hour} {
		steps = append(steps, d.Microseconds())
	}
	return steps
}()

// tickStep returns the smallest round step, in microseconds, that gives
// at most ten ticks across the scale with room for every label.
func tickStep(sc timeScale) int64 {
	pxPerMicro := (svgPlotRight - svgPlotLeft) / (sc.max - sc.min)
	for _, step := range tickSteps {
		if (sc.max-sc.min)/float64(step) > 10 {
			continue
		}
		// The widest label is about the last one; allow 7px a character.
		label := "+" + fmtDur(time.Duration(int64(sc.max)/step*step)*time.Microsecond)
		if float64(step)*pxPerMicro >= float64(7*len(label)+14) {
			return step
		}
	}
	return tickSteps[len(tickSteps)-1]
}

// svgWriter writes SVG elements, remembering the first write error.
type svgWriter struct {
	w   *bufio.Writer
	err error
}

func (s *svgWriter) printf(format string, args ...any) {
	if s.err == nil {
		_, s.err = fmt.Fprintf(s.w, format, args...)
	}
}

// renderSVG writes the timeline picture: a lane per algorithm on a shared
// time axis, with window boundaries, each request's fate, the leaky
// bucket's delays and each lane's busiest period.
func renderSVG(w io.Writer, r *result) error {
	s := &svgWriter{w: bufio.NewWriter(w)}
	writeSVG(s, r)
	if s.err != nil {
		return s.err
	}
	return s.w.Flush()
}

func writeSVG(s *svgWriter, r *result) {
	cfg := r.cfg
	sc := newTimeScale(r)
	// Lanes' top edges; the last entry is the bottom of the last lane.
	tops := []int{svgLanesTop}
	for i := range r.lanes {
		tops = append(tops, tops[i]+laneHeight(&r.lanes[i]))
	}
	lanesBottom := tops[len(r.lanes)]
	height := lanesBottom + 78
	title := fmt.Sprintf("Six rate limiters, same traffic: %d per %s", cfg.limit, fmtDur(cfg.period))

	s.printf(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-labelledby="title" %s>`+"\n",
		svgWidth, height, svgWidth, height, svgFont)
	s.printf("<title id=\"title\">%s</title>\n", esc(title+" · "+r.traffic))
	s.printf(`<defs><clipPath id="plot"><rect x="%d" y="%d" width="%d" height="%d"/></clipPath></defs>`+"\n",
		svgPlotLeft-8, svgLanesTop-30, svgPlotRight-svgPlotLeft+16, lanesBottom-svgLanesTop+30)
	s.printf(`<rect width="%d" height="%d" fill="#fff"/>`+"\n", svgWidth, height)

	// Title and parameters.
	s.printf(`<text x="20" y="34" font-size="21" font-weight="600" fill="%s">%s</text>`+"\n", colInk, esc(title))
	s.printf(`<text x="20" y="58" font-size="13.5" fill="%s">%s</text>`+"\n", colInk, esc(r.traffic))
	s.printf(`<text x="20" y="78" font-size="12.5" fill="%s">%s</text>`+"\n", colMuted,
		esc(fmt.Sprintf("limit %d per %s · burst %d (token bucket, GCRA) · capacity %d (leaky bucket) · each on its own memory store with a fake clock",
			cfg.limit, fmtDur(cfg.period), cfg.burst, cfg.burst)))
	writeLegend(s, 20, 106, markRadius(r.times, sc) < denseRadius)

	// Lane backgrounds, busiest periods, the grid, then the marks on top.
	for i := range r.lanes {
		top := tops[i]
		fill := "#f6f7f9"
		if i%2 == 1 {
			fill = "#fff"
		}
		s.printf(`<rect x="10" y="%d" width="%d" height="%d" fill="%s"/>`+"\n", top, svgWidth-20, laneHeight(&r.lanes[i]), fill)
	}
	for i := range r.lanes {
		writePeak(s, r, &r.lanes[i], sc, tops[i])
	}
	writeAxis(s, r, sc, lanesBottom)
	for i := range r.lanes {
		writeLane(s, r, &r.lanes[i], sc, tops[i])
	}

	s.printf(`<text x="20" y="%d" font-size="11.5" fill="%s">%s</text>`+"\n", height-14, colMuted,
		esc("$ "+cfg.commandLine()))
	s.printf("</svg>\n")
}

// writeLegend draws the key to the marks at (x, y): dots, or the ticks of
// dense lanes.
func writeLegend(s *svgWriter, x, y int, dense bool) {
	item := func(mark, label string, width int) {
		s.printf(`<g transform="translate(%d %d)">%s<text x="16" y="4.5" font-size="12.5" fill="%s">%s</text></g>`+"\n",
			x, y, mark, colInk, esc(label))
		x += width
	}
	tick := func(color string, y0, y1 int) string {
		return fmt.Sprintf(`<line x1="5" y1="%d" x2="5" y2="%d" stroke="%s" stroke-width="2"/>`, y0, y1, color)
	}
	if dense {
		item(tick(colAdmitted, 4, -8), "admitted (up)", 122)
		item(tick(colDelayed, 4, -8), "admitted, waits for its turn", 200)
		item(fmt.Sprintf(`<circle cx="5" cy="0" r="2.5" fill="none" stroke="%s" stroke-width="1.3"/>`, colDelayed), "when it proceeds", 136)
		item(tick(colDenied, -4, 8), "denied (down)", 118)
	} else {
		item(fmt.Sprintf(`<circle cx="5" cy="0" r="5" fill="%s"/>`, colAdmitted), "admitted", 96)
		item(fmt.Sprintf(`<path d="M5 -5.5 L10.5 0 L5 5.5 L-0.5 0 Z" fill="%s"/>`, colDelayed), "admitted, waits for its turn", 196)
		item(fmt.Sprintf(`<circle cx="5" cy="0" r="3.5" fill="#fff" stroke="%s" stroke-width="1.6"/>`, colDelayed), "when it proceeds", 136)
		item(crossMark(5, 0, 4.5), "denied", 78)
	}
	item(fmt.Sprintf(`<line x1="5" y1="-8" x2="5" y2="8" stroke="%s" stroke-width="1.2" stroke-dasharray="4 3"/>`, colGrid), "window boundary", 136)
	item(fmt.Sprintf(`<rect x="-2" y="-7" width="14" height="14" fill="%s" stroke="#c9d4e6"/>`, colPeak), "busiest period", 120)
}

// crossMark is a denied request's ×, centred on (x, y).
func crossMark(x, y, r float64) string {
	return fmt.Sprintf(`<path d="M%.1f %.1fL%.1f %.1fM%.1f %.1fL%.1f %.1f" stroke="%s" stroke-width="2" stroke-linecap="round"/>`,
		x-r, y-r, x+r, y+r, x-r, y+r, x+r, y-r, colDenied)
}

// writeAxis draws the time axis under the lanes, its ticks, and the window
// boundaries across the lanes.
func writeAxis(s *svgWriter, r *result, sc timeScale, bottom int) {
	period := r.cfg.period.Microseconds()
	s.printf(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s"/>`+"\n", svgPlotLeft-8, bottom, svgPlotRight+8, bottom, colMuted)

	step := tickStep(sc)
	for t := int64(math.Ceil(max(sc.min, 0)/float64(step))) * step; float64(t) <= sc.max; t += step {
		x := sc.x(time.Duration(t) * time.Microsecond)
		s.printf(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s"/>`, x, bottom, x, bottom+5, colMuted)
		s.printf(`<text x="%.1f" y="%d" font-size="11.5" fill="%s" text-anchor="middle">+%s</text>`+"\n",
			x, bottom+19, colMuted, esc(fmtDur(time.Duration(t)*time.Microsecond)))
	}
	s.printf(`<text x="%d" y="%d" font-size="11.5" fill="%s" text-anchor="end">time since the first window began →</text>`+"\n",
		svgPlotRight, bottom+37, colMuted)

	first := int64(math.Ceil(max(sc.min, 0) / float64(period)))
	last := int64(math.Floor(sc.max / float64(period)))
	if last-first+1 > 60 {
		s.printf(`<text x="%d" y="%d" font-size="11.5" fill="%s">(%d window boundaries, too many to draw)</text>`+"\n",
			svgPlotLeft, bottom+37, colMuted, last-first+1)
		return
	}
	for k := first; k <= last; k++ {
		x := sc.x(time.Duration(k*period) * time.Microsecond)
		s.printf(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-width="1.2" stroke-dasharray="4 3"/>`+"\n",
			x, svgLanesTop-12, x, bottom, colGrid)
		if last-first < 12 {
			s.printf(`<text x="%.1f" y="%d" font-size="11" fill="%s" text-anchor="middle">window boundary</text>`+"\n",
				x, svgLanesTop-16, colMuted)
		}
	}
}

// laneHeight is the height of l's lane: taller when it has a row for
// delayed requests.
func laneHeight(l *lane) int {
	if l.delayed > 0 {
		return svgLaneH + svgProceedRow - 8
	}
	return svgLaneH
}

// peakColors are the text and band colours of l's busiest period: red
// when it passed more than the limit.
func peakColors(r *result, l *lane) (text, band string) {
	if l.peak > int(r.cfg.limit) {
		return colDenied, colPeakOver
	}
	return colMuted, colPeak
}

// writePeak shades l's busiest period, [peakStart, peakStart+period), in
// the lane whose top edge is at top.
func writePeak(s *svgWriter, r *result, l *lane, sc timeScale, top int) {
	if l.peak == 0 {
		return
	}
	text, band := peakColors(r, l)
	x0, x1 := sc.x(l.peakStart), sc.x(l.peakStart+r.cfg.period)
	s.printf(`<g clip-path="url(#plot)"><rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"/>`,
		x0, top+4, max(x1-x0, 1), laneHeight(l)-8, band)
	s.printf(`<text x="%.1f" y="%d" font-size="11" fill="%s">%d in %s</text></g>`+"\n",
		x0+4, top+16, text, l.peak, esc(fmtDur(r.cfg.period)))
}

// writeLane draws one algorithm's lane, its top edge at top.
func writeLane(s *svgWriter, r *result, l *lane, sc timeScale, top int) {
	cfg := r.cfg
	y := float64(top) + svgLaneH/2 + 6
	s.printf(`<g class="lane" data-algorithm="%s">`+"\n", esc(l.name))
	s.printf(`<text x="22" y="%d" font-size="15" font-weight="600" fill="%s">%s<title>%s</title></text>`+"\n",
		top+24, colInk, esc(l.name), esc(l.spec))
	s.printf(`<text x="22" y="%d" font-size="12" fill="%s">%d of %d admitted</text>`+"\n", top+42, colMuted, l.admitted, len(r.times))
	peakCol, _ := peakColors(r, l)
	s.printf(`<text x="22" y="%d" font-size="12" fill="%s">busiest %s: %d</text>`+"\n", top+58, peakCol, esc(fmtDur(cfg.period)), l.peak)

	rad := markRadius(r.times, sc)
	tips := len(r.times) <= maxTooltips
	tip := func(i int, what string) string {
		if !tips {
			return ""
		}
		return "<title>" + esc(fmt.Sprintf("request %d at +%s: %s", i+1, fmtDur(r.times[i]), what)) + "</title>"
	}
	writeProceeds(s, r, l, sc, y, rad < denseRadius)
	if rad < denseRadius {
		writeDenseMarks(s, r, l, sc, y, tip)
		s.printf("</g>\n")
		return
	}
	for i, o := range l.outcomes {
		x := sc.x(r.times[i])
		switch {
		case !o.allowed:
			s.printf(`<g>%s%s</g>`+"\n", crossMark(x, y, rad*0.85), tip(i, "denied"))
		case o.delay > 0:
			s.printf(`<path d="M%.1f %.1fL%.1f %.1fL%.1f %.1fL%.1f %.1fZ" fill="%s">%s</path>`+"\n",
				x, y-rad*1.1, x+rad*1.1, y, x, y+rad*1.1, x-rad*1.1, y, colDelayed,
				tip(i, "admitted, waits "+fmtDurRound(o.delay)))
		default:
			s.printf(`<circle cx="%.1f" cy="%.1f" r="%.1f" fill="%s">%s</circle>`+"\n", x, y, rad, colAdmitted, tip(i, "admitted"))
		}
	}
	s.printf("</g>\n")
}

// writeProceeds draws, on a row under the lane's line, when each of the
// leaky bucket's delayed requests proceeds, joined to its arrival by a
// faint line: arrivals come in bursts, departures one interval apart.
func writeProceeds(s *svgWriter, r *result, l *lane, sc timeScale, y float64, dense bool) {
	if l.delayed == 0 {
		return
	}
	row := y + svgProceedRow
	s.printf(`<text x="%d" y="%.1f" font-size="10" fill="%s" text-anchor="end">proceeds</text>`+"\n", svgPlotLeft-6, row+3, colDelayed)
	opacity, rad := 0.45, 2.6
	if dense {
		opacity, rad = 0.2, 1.8
	}
	for i, o := range l.outcomes {
		if o.allowed && o.delay > 0 {
			x0, x1 := sc.x(r.times[i]), sc.x(r.times[i]+o.delay)
			s.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="0.9" stroke-opacity="%.2f"/>`,
				x0, y, x1, row, colDelayed, opacity)
			s.printf(`<circle cx="%.1f" cy="%.1f" r="%.1f" fill="#fff" stroke="%s" stroke-width="1.2"/>`+"\n",
				x1, row, rad, colDelayed)
		}
	}
}

// writeDenseMarks draws requests too close together for dots as ticks:
// admitted ones rise above the lane's line, denied ones hang below it,
// and the leaky bucket's delayed requests proceed on a row of their own.
func writeDenseMarks(s *svgWriter, r *result, l *lane, sc timeScale, y float64, tip func(int, string) string) {
	s.printf(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#c4c9d0" stroke-width="0.8"/>`+"\n", svgPlotLeft, y, svgPlotRight, y)
	for i, o := range l.outcomes {
		x := sc.x(r.times[i])
		switch {
		case !o.allowed:
			s.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.2">%s</line>`+"\n", x, y+1, x, y+9, colDenied, tip(i, "denied"))
		case o.delay > 0:
			s.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.2">%s</line>`+"\n", x, y-1, x, y-11, colDelayed, tip(i, "admitted, waits "+fmtDurRound(o.delay)))
		default:
			s.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.2">%s</line>`+"\n", x, y-1, x, y-11, colAdmitted, tip(i, "admitted"))
		}
	}
}

// markRadius sizes the marks to the typical (median) gap between requests
// on screen, so neighbours rarely overlap.
func markRadius(times []time.Duration, sc timeScale) float64 {
	if len(times) < 2 {
		return 5
	}
	gaps := make([]float64, 0, len(times)-1)
	for i := 1; i < len(times); i++ {
		gaps = append(gaps, sc.x(times[i])-sc.x(times[i-1]))
	}
	slices.Sort(gaps)
	return min(max(0.4*gaps[len(gaps)/2], 1.6), 5.5)
}

// commandLine is the compare command that reproduces cfg, with every
// default spelled out.
func (c config) commandLine() string {
	parts := []string{"ratelimit compare", "-pattern " + c.pattern,
		fmt.Sprintf("-limit %d", c.limit), "-period " + fmtDur(c.period), fmt.Sprintf("-burst %d", c.burst),
		fmt.Sprintf("-n %d", c.n), "-spacing " + fmtDur(c.spacing)}
	if c.startSet {
		parts = append(parts, "-start "+fmtDur(c.start))
	}
	if c.pattern == "random" {
		parts = append(parts, fmt.Sprintf("-seed %d", c.seed))
	}
	return strings.Join(parts, " ")
}
