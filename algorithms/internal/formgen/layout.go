package main

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Layout: the generated SQL's expressions are built as documents that are
// written on one line when they fit in lineWidth columns and otherwise
// broken at their groups' line breaks (a compact form of Wadler's
// "prettier printer"), so that a reviewer reads no line much longer than
// lineWidth. Only whitespace differs between a broken and a flat
// expression: PostgreSQL prepares the same expression either way.

// lineWidth is the column the layout keeps lines within where it can;
// maxLine is the length no generated line may exceed (TestLineLength).
const (
	lineWidth = 100
	maxLine   = 120
)

// doc is a document: text, a line break (a space, or nothing when soft,
// when its group fits on the line), a concatenation, an indented part, or
// a group, written flat when it fits and broken otherwise.
type doc struct {
	kind dkind
	text string
	n    int // nest: the added indentation
	kids []doc
}

type dkind uint8

const (
	dText dkind = iota
	dLine       // " " when flat
	dSoft       // "" when flat
	dCat
	dNest
	dGroup
)

func txt(s string) doc               { return doc{kind: dText, text: s} }
func cat(ds ...doc) doc              { return doc{kind: dCat, kids: ds} }
func indent(n int, ds ...doc) doc    { return doc{kind: dNest, n: n, kids: ds} }
func group(ds ...doc) doc            { return doc{kind: dGroup, kids: ds} }
func txtf(f string, args ...any) doc { return txt(fmt.Sprintf(f, args...)) }
func line() doc                      { return doc{kind: dLine} }
func soft() doc                      { return doc{kind: dSoft} }
func join(ds []doc, sep ...doc) doc  { return cat(interleave(ds, sep)...) }
func parens(d doc, wrap bool) doc {
	return map[bool]doc{true: cat(txt("("), d, txt(")")), false: d}[wrap]
}
func interleave(ds, sep []doc) []doc {
	var out []doc
	for i, d := range ds {
		if i > 0 {
			out = append(out, sep...)
		}
		out = append(out, d)
	}
	return out
}

// flat returns d written on one line.
func (d doc) flat() string {
	var b strings.Builder
	d.writeFlat(&b)
	return b.String()
}

func (d doc) writeFlat(b *strings.Builder) {
	switch d.kind {
	case dText:
		b.WriteString(d.text)
	case dLine:
		b.WriteByte(' ')
	case dSoft:
	default:
		for _, k := range d.kids {
			k.writeFlat(b)
		}
	}
}

// printer writes documents, tracking the column.
type printer struct {
	b     *strings.Builder
	col   int
	width int
}

// layout writes d starting at column col, breaking lines to the
// indentation ind (plus its nests), within width minus trail, the length of
// the text that follows d on its last line.
func layout(b *strings.Builder, d doc, col, ind, trail int) {
	p := &printer{b: b, col: col, width: lineWidth - trail}
	p.print(d, ind, false)
}

func (p *printer) print(d doc, ind int, flat bool) {
	switch d.kind {
	case dText:
		p.b.WriteString(d.text)
		p.col += utf8.RuneCountInString(d.text)
	case dLine, dSoft:
		if flat {
			if d.kind == dLine {
				p.b.WriteByte(' ')
				p.col++
			}
			return
		}
		p.b.WriteString("\n" + strings.Repeat(" ", ind))
		p.col = ind
	case dCat:
		for _, k := range d.kids {
			p.print(k, ind, flat)
		}
	case dNest:
		for _, k := range d.kids {
			p.print(k, ind+d.n, flat)
		}
	case dGroup:
		fits := flat || p.col+utf8.RuneCountInString(d.flat()) <= p.width
		for _, k := range d.kids {
			p.print(k, ind, fits)
		}
	}
}

// comment returns the lines of a SQL or Lua comment (prefix "-- ") at the
// indentation in, of text wrapped at spaces to lineWidth. A SQL function's
// name counts with the version versionSQL will add to it (_1a2b3c4d).
func comment(in, text string) string {
	var b strings.Builder
	lineStart := in + "-- "
	cur := lineStart
	n := utf8.RuneCountInString
	for _, w := range strings.Fields(text) {
		wn := n(w)
		if strings.HasPrefix(w, "ratelimit_") {
			wn += 9
		}
		if cur != lineStart && n(cur)+1+wn > lineWidth {
			b.WriteString(cur + "\n")
			cur = lineStart + "   "
		} else if cur != lineStart {
			cur += " "
		}
		cur += w
	}
	b.WriteString(cur + "\n")
	return b.String()
}

// trace is the comment text that names the Go source of a generated step:
// file:line (or file:line-end for a step that spans lines) and the Go
// line's text, as the Go compiler's rewrite*.go names the rule of each
// block in a "// match:" line.
func trace(at ...goLine) string {
	var parts []string
	for _, a := range at {
		if a.file == "" {
			continue
		}
		pos := fmt.Sprintf("%s:%d", a.file, a.line)
		if a.end > a.line {
			pos += fmt.Sprintf("-%d", a.end)
		}
		parts = append(parts, pos+": "+a.text)
	}
	return strings.Join(parts, "; ")
}
