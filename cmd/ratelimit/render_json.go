package main

import (
	"encoding/json"
	"fmt"
	"io"
)

// jsonResult is a comparison as JSON: the parameters, then one entry per
// algorithm with its summary and, per request, whether it was admitted.
// Times and delays are integer microseconds from the timeline's origin (a
// window boundary).
type jsonResult struct {
	Traffic   string     `json:"traffic"`
	Command   string     `json:"command"`
	Pattern   string     `json:"pattern"`
	Limit     int64      `json:"limit"`
	PeriodUS  int64      `json:"period_us"`
	Burst     int64      `json:"burst"`
	N         int        `json:"n"`
	SpacingUS int64      `json:"spacing_us"`
	TimesUS   []int64    `json:"times_us"`
	Lanes     []jsonLane `json:"algorithms"`
}

type jsonLane struct {
	Name        string `json:"name"`
	Spec        string `json:"spec"`
	Admitted    int    `json:"admitted"`
	Denied      int    `json:"denied"`
	Delayed     int    `json:"delayed"`
	Peak        int    `json:"max_per_period"`
	MeanDelayUS int64  `json:"mean_delay_us"`
	MaxDelayUS  int64  `json:"max_delay_us"`
	Note        string `json:"note"`
	// Allowed and DelayUS have one entry per request, in TimesUS order.
	Allowed []bool  `json:"allowed"`
	DelayUS []int64 `json:"delay_us"`
}

// renderJSON writes r as one JSON object.
func renderJSON(w io.Writer, r *result) error {
	out := jsonResult{
		Traffic: r.traffic, Command: r.cfg.commandLine(), Pattern: r.cfg.pattern,
		Limit: r.cfg.limit, PeriodUS: r.cfg.period.Microseconds(), Burst: r.cfg.burst,
		N: len(r.times), SpacingUS: r.cfg.spacing.Microseconds(),
	}
	for _, t := range r.times {
		out.TimesUS = append(out.TimesUS, t.Microseconds())
	}
	for _, l := range r.lanes {
		jl := jsonLane{
			Name: l.name, Spec: l.spec, Admitted: l.admitted, Denied: l.denied, Delayed: l.delayed,
			Peak: l.peak, MeanDelayUS: l.meanDelay.Microseconds(), MaxDelayUS: l.maxDelay.Microseconds(), Note: l.note,
		}
		for _, o := range l.outcomes {
			jl.Allowed = append(jl.Allowed, o.allowed)
			jl.DelayUS = append(jl.DelayUS, o.delay.Microseconds())
		}
		out.Lanes = append(out.Lanes, jl)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return fmt.Errorf("json: %w", err)
	}
	return nil
}
