package ratelimit

// CheckName reports whether name may name a limiter or a lease locker:
// 1 to 64 characters of [A-Za-z0-9_.-]. what names it in the error, which
// wraps ErrInvalidParams.
func CheckName(what, name string) error { return checkName(what, name) }

// CheckKey reports whether key may be a Key.ID: 1 to MaxKeyLen bytes. The
// error wraps ErrInvalidKey.
func CheckKey(key string) error { return checkKey(key) }
