package redisengine

import (
	"fmt"
	"strings"

	"github.com/ratelimitkit/ratelimit/algorithms"
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
// runs, and nothing else: before the coalesced form touches any key it
// asks the node about each (EXISTS, through redis.pcall, which answers an
// error instead of failing the script for a key the node does not serve:
// a slot moved away, or migrating with the key already gone, or importing
// without ASKING, which a call that declares no keys never carries). A
// key the node does not serve gets one error item, NotLocal, and nothing
// is written for it; the engine sends its decisions again, each as its own
// call of the single form with its key declared, through the cluster
// client, which follows MOVED and ASK as it does for every call. EXISTS
// may itself delete a key whose TTL has passed, after which a migrating
// slot no longer serves it: the coalesced form's first touch of each key
// is a read through redis.pcall, which then fails without writing, and the
// node form turns such a failure (any but the CORRUPT and WRONGTYPE of
// state it cannot read) into NotLocal too; so no key is written that the
// node does not serve, and no run fails half done. A run is one script,
// so no slot can start or finish moving during it: each key is decided on
// the one node that holds it, and no decision is counted twice or on a
// copy of the state.

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
// ARGV: n, the n keys, then many's ARGV (the clock flag, the packed
// requests, and slack, parameters and number of requests of each key);
// KEYS: none. Its reply is many's, with one NotLocal error item for each
// key the node does not serve, in its place.
func nodeForm(name, many string) string {
	return fmt.Sprintf(`-- %[1]s across the slots of one cluster node: the coalesced form
-- (algorithms/lua/many/%[1]s.lua, below as the function many) on the keys
-- this node serves, and one %[2]s error item for each other key, untouched
-- (internal/redisengine/node.go).
--   KEYS   none
--   ARGV   n, the n keys, then the coalesced form's ARGV for them
local function many(KEYS, ARGV)
%[3]s
end

local n = tonumber(ARGV[1])
if not n or n < 1 or #ARGV ~= 4 * n + 3 then
  return redis.error_reply('ratelimit: node call of ' .. tostring(ARGV[1]) .. ' keys and ' .. #ARGV .. ' arguments')
end
local reqs = ARGV[n + 3]
local keys, argv, here = {}, {ARGV[n + 2], reqs}, {}
local parts = nil -- the requests of the keys served here, once one is not
local at, all = 0, true
for k = 1, n do
  local key, a = ARGV[k + 1], n + 3 * k + 1
  local c = tonumber(ARGV[a + 2]) or 0
  if type(redis.pcall('EXISTS', key)) == 'number' then
    here[k] = true
    keys[#keys + 1] = key
    local m = #argv
    argv[m + 1] = ARGV[a]
    argv[m + 2] = ARGV[a + 1]
    argv[m + 3] = ARGV[a + 2]
    if parts then parts[#parts + 1] = string.sub(reqs, at + 1, at + 24 * c) end
  elseif all then
    all = false
    parts = {string.sub(reqs, 1, at)}
  end
  at = at + 24 * c
end
local res = {}
if #keys > 0 then
  if not all then argv[2] = table.concat(parts) end
  res = many(keys, argv)
  if res.err then return res end
end
-- A key whose first read failed for another reason than its state (a
-- redirection: see above) is the node's to give back, not its error.
for i = 1, #res do
  local item = res[i]
  if type(item) == 'table' and not (item.err:find('^CORRUPT') or item.err:find('^WRONGTYPE')) then
    res[i] = {err = '%[2]s ' .. item.err}
  end
end
if all then return res end
local out, i = {}, 1
for k = 1, n do
  if here[k] then
    local item = res[i]
    if type(item) == 'table' then
      out[#out + 1] = item
      i = i + 1
    else
      local c = %[4]d * tonumber(ARGV[n + 3 * k + 3])
      for j = i, i + c - 1 do out[#out + 1] = res[j] end
      i = i + c
    end
  else
    out[#out + 1] = {err = '%[2]s ' .. ARGV[k + 1]}
  end
end
return out
`, name, NotLocal, strings.TrimRight(many, "\n"), algorithms.LuaReplyLen)
}
