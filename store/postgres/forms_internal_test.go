package postgres

import "maps"

// WithSQLForm is, in tests, an option that makes the store install text as
// the SQL form of the built-in algorithm alg and call function, a function
// text defines, from its decide function: a form of another version.
func WithSQLForm(alg, text, function string) Option {
	return func(s *Store) error {
		s.forms.alg = maps.Clone(s.forms.alg)
		s.forms.alg[alg] = sqlForm{text, function}
		return nil
	}
}
