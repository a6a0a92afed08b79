package main

// SQL returns the PL/pgSQL form of f.
func SQL(f *form) (string, error) { return "", nil }
