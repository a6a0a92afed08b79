package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// The hand-written composite parts: an algorithm whose server forms are
// written by hand (the sliding log's keep an array of pairs, which the
// subset does not express) is still a part the composite forms hold. Its
// Lua function is written by hand beside its Go form, in a file that
// defines decide_<name> and valid_<name> as the generated functions are
// called (see luaFunction and luaValid), which formgen copies into
// lua/all.lua; the composite SQL form calls its hand-written SQL function
// (handWrittenSQL) as it calls a generated form's. Both keep the part's
// state as the Go form keeps it, a variable number of int64 fields.
type handPart struct {
	src  string // the hand-written Lua file, in the algorithms package
	name string // the algorithm's Name
	args int    // how many ServerArgs it takes
}

// handParts are the hand-written composite parts.
var handParts = []handPart{{src: "slidinglog_part.lua", name: "sliding_log", args: 2}}

// luaPart is a hand-written part with its Lua text.
type luaPart struct {
	handPart
	text string
}

// readHandParts reads the hand-written parts' Lua files found in dir.
func readHandParts(dir string) ([]luaPart, error) {
	var out []luaPart
	for _, h := range handParts {
		b, err := os.ReadFile(filepath.Join(dir, h.src))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		text := string(b)
		for _, fn := range []string{"decide_" + h.name, "valid_" + h.name} {
			if !strings.Contains(text, "local function "+fn+"(") {
				return nil, fmt.Errorf("formgen: %s defines no local function %s", h.src, fn)
			}
		}
		out = append(out, luaPart{h, text})
	}
	return out, nil
}
