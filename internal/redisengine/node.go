package redisengine

import (
	"fmt"
	"strings"

	"github.com/ratelimitkit/ratelimit/algorithms/forms"
)

// Runs across the slots of one cluster node.
//
// On a cluster a script run may touch the keys of one hash slot only when
// it declares them, and 10,000 keys spread over 16,384 slots share none:
// coalescing by slot alone leaves one script run per decision. A script
// that declares no keys may touch any key its node serves (Redis's and
// Valkey's scripts without a shebang may, in cluster mode, access keys of
// several slots as long as the node serves each), so a backend that can
// say which node serves a key (Router) gets one run per node and batch:
// the node form of the algorithm's coalesced form (Script.Node), sent to
// that node (Call.Node), its keys in ARGV.
//
// The node form decides only the keys the node serves at the moment it
// runs, and writes nothing else. The coalesced form's first touch of each
// key is a read through redis.pcall, which answers an error, instead of
// failing the script, for a key the node does not serve (a slot moved
// away, or migrating with the key already gone, or importing without
// ASKING, which a call that declares no keys never carries); that key gets
// that error as its item and nothing is written for it. The node form
// turns every such item (any error but the CORRUPT and WRONGTYPE of state
// the script cannot read) into NotLocal. One case remains: the read may
// itself delete a key whose TTL has passed, after which a migrating slot
// no longer serves it, and the coalesced form's write of that key then
// fails the script (redis.call raises). The node form runs the coalesced
// form under pcall and, when it fails, keeps the keys decided before (their
// decisions and writes are done: a script's writes are not undone), and
// gives NotLocal to the key whose write failed (its items are the last in
// the reply; nothing was written for it) and to every key after it (not
// touched). The engine sends a NotLocal key's decisions again, each as its
// own call of the single form with its key declared, through the cluster
// client, which follows MOVED and ASK as it does for every call. A run is
// one script, so no slot can start or finish moving during it: each key is
// decided on the one node that holds it, and no decision is counted twice
// or on a copy of the state.

// NotLocal starts the error item the node form gives a key its node does
// not serve.
const NotLocal = "RLNOTLOCAL"

// Router is what a cluster backend's Pipeliner may add: which node serves
// a key, as far as the client knows, so that the keys of several slots on
// one node share a script run.
type Router interface {
	// Node returns the node that serves key's slot as the client last saw
	// the cluster, as a comparable value the backend's Pipeline accepts
	// in Call.Node, or nil when it cannot tell (that key is then coalesced
	// by its slot alone). A stale answer costs a second round trip for
	// the key's decisions, never a wrong decision.
	Node(key string) any
	// Missed tells the backend that a node did not serve a key Node said
	// it does: its view of the cluster is stale (a resharding, a
	// failover).
	Missed()
}

// nodeForm returns the node form of many, an algorithm's coalesced form.
// ARGV: many's ARGV (the clock flag, the packed requests, and slack,
// parameters and number of requests of each key), then the n keys; KEYS:
// none. The form takes the keys off the end of ARGV, so that many runs on
// ARGV itself, uncopied. Its reply is many's; an error item of a key this
// node does not serve is the server's error as the key's read or write
// met it (spread turns every error item of a node run but CORRUPT and
// WRONGTYPE into NotLocal), and a key the form did not reach, after a
// write failed part way, gets a NotLocal item. It returns false, and the
// engine coalesces by slot alone, for a coalesced form that does not start
// its reply with manyResult (TestNodeForms holds every built-in's to it).
func nodeForm(name, many string) (string, bool) {
	if strings.Count(many, manyResult) != 1 {
		return "", false
	}
	body := strings.Replace(strings.TrimRight(many, "\n"), manyResult, "\nlocal res = RES\n", 1)
	return fmt.Sprintf(`-- %[1]s across the slots of one cluster node: the coalesced form
-- (algorithms/forms/lua/many/%[1]s.lua, below as the function many, its reply
-- built in RES) on the keys, which the engine reads each error item of as
-- the key's, or as one this node does not serve (internal/redisengine/node.go).
--   KEYS   none
--   ARGV   the coalesced form's ARGV for the n keys, then the n keys
local function many(KEYS, ARGV, RES)
%[3]s
end

local m = #ARGV
local n = (m - 2) / 4
if n < 1 or n %% 1 ~= 0 then
  return redis.error_reply('ratelimit: node call of ' .. m .. ' arguments')
end
local keys = {}
for k = 1, n do
  keys[k] = ARGV[m - n + k]
  ARGV[m - n + k] = nil
end
local res = {}
local ok, ret = pcall(many, keys, ARGV, res)
if ok then return ret end
-- A write failed part way: keep the keys decided before the last one
-- with decisions in the reply, whose write it was.
local i, k = 1, 1
while k <= n and i <= #res do
  local size = 1
  if type(res[i]) ~= 'table' then size = %[4]d * tonumber(ARGV[3 * k + 2]) end
  if size > 1 and i + size - 1 >= #res then break end
  i, k = i + size, k + 1
end
for j = #res, i, -1 do res[j] = nil end
for j = k, n do res[#res + 1] = {err = '%[2]s ' .. keys[j]} end
return res
`, name, NotLocal, body, forms.LuaReplyLen), true
}

// manyResult is the line of a coalesced form that starts its reply, which
// the node form replaces so that the reply stays readable when the form
// fails part way.
const manyResult = "\nlocal res = {}\n"

// stateErr reports whether err, an error item of a run's reply, is about
// the key's state (CORRUPT: the form cannot read it; WRONGTYPE: the key
// holds another type), which the key's decisions get as their error. A
// node run's other error items are of keys the node does not serve.
func stateErr(err error) bool {
	m := err.Error()
	return strings.HasPrefix(m, "CORRUPT") || strings.HasPrefix(m, "WRONGTYPE")
}
