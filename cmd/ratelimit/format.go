package main

import (
	"fmt"
	"strings"
	"time"
)

// fmtDur formats d for people: "250ms", "1.5s", "2m", "1h30m".
func fmtDur(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// fmtDurRound formats d to about three significant digits: "482ms",
// "1.25s", "37.5µs".
func fmtDurRound(d time.Duration) string {
	unit := time.Duration(1)
	for u := d; u >= 1000; u /= 10 {
		unit *= 10
	}
	return fmtDur(d.Round(unit))
}

// plural returns "1 request" or "n requests".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
