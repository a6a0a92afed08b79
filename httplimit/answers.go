package httplimit

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// problem is an RFC 9457 problem details object with one extension
// member, retry_after, in seconds.
type problem struct {
	Type       string `json:"type"`
	Title      string `json:"title"`
	Status     int    `json:"status"`
	Detail     string `json:"detail"`
	RetryAfter int64  `json:"retry_after,omitempty"`
}

// writeProblem answers with status and an application/problem+json body.
func writeProblem(w http.ResponseWriter, status int, title, detail string, retryAfter int64) {
	body, _ := json.Marshal(problem{Type: "about:blank", Title: title, Status: status, Detail: detail, RetryAfter: retryAfter})
	h := w.Header()
	h["Content-Type"] = []string{"application/problem+json"}
	h["Content-Length"] = []string{strconv.Itoa(len(body) + 1)}
	h["Cache-Control"] = []string{"no-store"}
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
}

// denied is the default answer to a denied request: 429.
func denied(w http.ResponseWriter, r *http.Request) {
	res, _ := ResultFrom(r.Context())
	secs := int64(res.RetryAfter.Seconds())
	writeProblem(w, http.StatusTooManyRequests, "Too Many Requests",
		fmt.Sprintf("Rate limit %q exceeded; retry in %s.", res.Rule, plural(secs, "second")), secs)
}

// unavailable is the default answer when a fail-closed store fails: 503.
// The store's error stays on the server (the error hook); the client
// learns only when to come back.
func unavailable(w http.ResponseWriter, r *http.Request) {
	res, _ := ResultFrom(r.Context())
	secs := int64(res.RetryAfter.Seconds())
	writeProblem(w, http.StatusServiceUnavailable, "Service Unavailable",
		fmt.Sprintf("Rate limit %q cannot be checked right now; retry in %s.", res.Rule, plural(secs, "second")), secs)
}

// noKey is the default answer to a request whose key cannot be
// determined: 400.
func noKey(w http.ResponseWriter, r *http.Request) {
	res, _ := ResultFrom(r.Context())
	writeProblem(w, http.StatusBadRequest, "Bad Request",
		fmt.Sprintf("The request carries no usable key for rate limit %q.", res.Rule), 0)
}

func plural(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.FormatInt(n, 10) + " " + noun + "s"
}
