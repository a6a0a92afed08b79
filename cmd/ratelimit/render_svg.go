package main

import "io"

func renderSVG(w io.Writer, r *result) error  { return nil }
func renderHTML(w io.Writer, r *result) error { return nil }
