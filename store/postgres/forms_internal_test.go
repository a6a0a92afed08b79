package postgres

import (
	"maps"
	"regexp"
)

// WithSQLForm is, in tests, an option that makes the store install text as
// the SQL form of the built-in algorithm alg and call function, a function
// text defines, from its decide function: a form of another version. Its
// one-statement decision calls the row form text defines, if any
// (ratelimit_<alg>_row, versioned or not), else function.
func WithSQLForm(alg, text, function string) Option {
	return func(s *Store) error {
		s.forms.alg = maps.Clone(s.forms.alg)
		row := ""
		if m := regexp.MustCompile(`CREATE OR REPLACE FUNCTION (ratelimit_` + alg + `_row(?:_[0-9a-f]{8})?)\(`).FindStringSubmatch(text); m != nil {
			row = m[1]
		}
		s.forms.alg[alg] = sqlForm{text, function, row}
		return nil
	}
}
