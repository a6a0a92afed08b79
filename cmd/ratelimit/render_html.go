package main

import (
	"bytes"
	"fmt"
	"html/template"
	"io"
)

// htmlPage is the page renderHTML writes: the SVG timeline, then the
// summary table.
var htmlPage = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>ratelimit compare: {{.Traffic}}</title>
<style>
  body { font-family: system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #222; max-width: 1040px; margin: 2rem auto; padding: 0 1rem; line-height: 1.45; }
  h1 { font-size: 1.5rem; margin-bottom: .2rem; }
  .params { color: #555; margin-top: 0; }
  svg { max-width: 100%; height: auto; border: 1px solid #e3e6ea; border-radius: 6px; }
  table { border-collapse: collapse; margin: 1rem 0; font-size: .95rem; }
  th, td { padding: .35rem .7rem; border-bottom: 1px solid #e3e6ea; text-align: left; vertical-align: top; }
  th { border-bottom: 2px solid #ccd; }
  td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
  td.over { color: #c62828; font-weight: 600; }
  code { background: #f3f4f6; padding: .1rem .3rem; border-radius: 3px; }
  .note { color: #555; font-size: .9rem; }
</style>
</head>
<body>
<h1>ratelimit compare</h1>
<p class="params">{{.Traffic}}<br>limit {{.Limit}} per {{.Period}}, burst {{.Burst}} (token bucket, GCRA), capacity {{.Burst}} (leaky bucket)</p>
{{.SVG}}
<h2>Summary</h2>
<table>
<thead><tr>{{range $i, $h := .Header}}<th{{if and (gt $i 0) (lt $i 5)}} class="num"{{end}}>{{$h}}</th>{{end}}</tr></thead>
<tbody>
{{- range .Rows}}
<tr><td><code>{{.Name}}</code></td><td class="num">{{.Admitted}}</td><td class="num">{{.Denied}}</td><td class="num{{if .Over}} over{{end}}">{{.Peak}}</td><td class="num">{{.Delay}}</td><td>{{.Note}}</td></tr>
{{- end}}
</tbody>
</table>
<p class="note">max/period is the most requests that went ahead within any {{.Period}}; for the leaky bucket they are counted when they proceed, after their delay. The limit is {{.Limit}}.</p>
<p class="note">Reproduce: <code>{{.Command}}</code></p>
</body>
</html>
`))

// htmlRow is one row of the summary table.
type htmlRow struct {
	Name, Admitted, Denied, Peak, Delay, Note string
	Over                                      bool // the busiest period passed more than the limit
}

// renderHTML writes a page holding the SVG timeline and the summary table.
func renderHTML(w io.Writer, r *result) error {
	var svg bytes.Buffer
	if err := renderSVG(&svg, r); err != nil {
		return err
	}
	rows := tableRows(r)
	data := struct {
		Traffic, Period, Command string
		Limit, Burst             int64
		SVG                      template.HTML
		Header                   []string
		Rows                     []htmlRow
	}{
		Traffic: r.traffic,
		Period:  fmtDur(r.cfg.period),
		Command: r.cfg.commandLine(),
		Limit:   r.cfg.limit,
		Burst:   r.cfg.burst,
		// renderSVG escapes every piece of text it writes.
		SVG:    template.HTML(svg.String()),
		Header: rows[0],
	}
	for i, row := range rows[1:] {
		data.Rows = append(data.Rows, htmlRow{
			Name: row[0], Admitted: row[1], Denied: row[2], Peak: row[3], Delay: row[4], Note: row[5],
			Over: r.lanes[i].peak > int(r.cfg.limit),
		})
	}
	if err := htmlPage.Execute(w, data); err != nil {
		return fmt.Errorf("html: %w", err)
	}
	return nil
}
