package main

import (
	"fmt"
	"sort"
	"strings"
)

// The composite forms: one Lua script and one PL/pgSQL function that decide
// a composite of several forms (algorithms.All) in one call, by calling
// each part's decide as a function in two phases, check (a peek) then
// commit, as the Go form does (algorithms/composite.go). The forms'
// functions are pure (state in, decision and next state out), so a later
// script can call the same functions to decide several requests in one run.

// files lists the Go files the forms come from (and the hand-written
// files, if any), for the header.
func files(forms []*form, hand ...string) string {
	seen := map[string]bool{}
	var out []string
	for _, f := range forms {
		if !seen[f.file] {
			seen[f.file] = true
			out = append(out, f.file)
		}
	}
	for _, h := range hand {
		if !seen[h] {
			seen[h] = true
			out = append(out, h)
		}
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// luaFunction writes f's decide as a Lua function, decide_<name>(now, cost,
// peek, live, sv_, av_, max_delay, refund, act), of the state's fields (the table sv_) and the
// parameters (the table av_). It returns the decision's fields (allowed as
// a boolean), the TTL, and the next state's fields as a table, or nil when
// nothing is to be stored.
func luaFunction(b *strings.Builder, f *form) {
	g := &luaGen{f: f, declared: map[string]bool{}, alias: map[string]string{}, fn: true, indent: 1}
	var sv, sx, av, ax []string
	for i, s := range f.state {
		v := "s_" + s.name
		g.declared[v] = true
		sv = append(sv, v)
		sx = append(sx, fmt.Sprintf("sv_[%d]", i+1))
	}
	for i, a := range f.args {
		av = append(av, luaName(a))
		ax = append(ax, fmt.Sprintf("av_[%d]", i+1))
	}
	fmt.Fprintf(b, "-- %s.decide (%s)\n", f.goType, f.file)
	fmt.Fprintf(b, "local function decide_%s(now, cost, peek, live, sv_, av_, max_delay, refund, act)\n", f.name)
	fmt.Fprintf(b, "  local %s = %s\n", strings.Join(sv, ", "), strings.Join(sx, ", "))
	fmt.Fprintf(b, "  local %s = %s\n", strings.Join(av, ", "), strings.Join(ax, ", "))
	g.block(f.body, nil)
	b.WriteString(g.b.String())
	b.WriteString("end\n\n")
}

// luaFlatFunction writes f's decide as a Lua function of locals, for the
// coalesced form (many.go), which calls it once per request and so makes
// no table per call: decide_<name>(now, cost, peek, live, the state's
// fields, the parameters, max_delay, refund, act). It returns the decision's fields (allowed as a
// boolean), the TTL, whether to store, and then the next state's fields
// (none when there is nothing to store).
func luaFlatFunction(b *strings.Builder, f *form) {
	g := &luaGen{f: f, declared: map[string]bool{}, alias: map[string]string{}, fn: true, flat: true, indent: 1}
	params := []string{"now", "cost", "peek", "live"}
	for _, s := range f.state {
		v := "s_" + s.name
		g.declared[v] = true
		params = append(params, v)
	}
	for _, a := range f.args {
		params = append(params, luaName(a))
	}
	params = append(params, "max_delay", "refund", "act")
	fmt.Fprintf(b, "-- %s.decide (%s)\n", f.goType, f.file)
	b.WriteString(wrapLua("local function decide_"+f.name+"(", params, ")", "    "))
	g.block(f.body, nil)
	b.WriteString(g.b.String())
	b.WriteString("end\n\n")
}

// wrapLua writes head, the items separated by commas, and tail as lines of
// at most 100 characters, the lines after the first indented by indent.
func wrapLua(head string, items []string, tail, indent string) string {
	var b strings.Builder
	line := head
	for i, it := range items {
		if i < len(items)-1 {
			it += ","
		} else {
			it += tail
		}
		switch {
		case i == 0:
			line += it
		case len(line)+1+len(it) > 100:
			b.WriteString(line + "\n")
			line = indent + it
		default:
			line += " " + it
		}
	}
	b.WriteString(line + "\n")
	return b.String()
}

// luaFlatValid is luaValid as a function of the state's fields.
func luaFlatValid(f *form) string {
	var sv []string
	for _, s := range f.state {
		sv = append(sv, "s_"+s.name)
	}
	v := luaValid(f)
	body := v[strings.Index(v, "\n    return "):]
	return "function(" + strings.Join(sv, ", ") + ")" + body
}

// luaValid is the Lua function that checks a state's fields, as the
// single form's prelude does: every field in 0..MAX, then valid().
func luaValid(f *form) string {
	g := &luaGen{f: f, declared: map[string]bool{}, alias: map[string]string{}}
	var sv, sx, checks []string
	for i, s := range f.state {
		v := "s_" + s.name
		sv = append(sv, v)
		sx = append(sx, fmt.Sprintf("sv_[%d]", i+1))
		checks = append(checks, fmt.Sprintf("%s >= 0 and %s <= MAX", v, v))
	}
	if f.valid != nil {
		var pre []string
		v, _ := g.expr(f.valid, &pre)
		if len(pre) > 0 {
			panic("formgen: valid with a division")
		}
		checks = append(checks, "("+v+")")
	}
	return fmt.Sprintf("function(sv_)\n    local %s = %s\n    return %s\n  end",
		strings.Join(sv, ", "), strings.Join(sx, ", "), strings.Join(checks, "\n      and "))
}

// LuaAll returns the composite Lua form of forms and of the hand-written
// parts hand.
func LuaAll(forms []*form, hand []luaPart) string {
	var b strings.Builder
	luaAllFunctions(&b, forms, hand, luaAllDoc)
	b.WriteString(luaRequest)
	b.WriteString(luaAllDriver)
	return b.String()
}

// LuaManyAll returns the coalesced composite Lua form, lua/many/all.lua:
// the composite form's functions driven as the coalesced forms drive a
// form's (many.go), deciding the requests of several keys, each key's in
// order, each key a composite with its own parts.
func LuaManyAll(forms []*form, hand []luaPart) string {
	var b strings.Builder
	luaAllFunctions(&b, forms, hand, luaManyAllDoc)
	b.WriteString(luaManyAllDriver)
	return b.String()
}

// luaAllFunctions writes what both composite Lua forms share: the header,
// doc, every form's function, the table of forms by name, and the
// composite's own functions (luaAllCommon).
func luaAllFunctions(b *strings.Builder, forms []*form, hand []luaPart, doc string) {
	var srcs []string
	for _, h := range hand {
		srcs = append(srcs, h.src)
	}
	fmt.Fprintf(b, "-- Code generated by formgen from %s; DO NOT EDIT.\n\n", files(forms, srcs...))
	b.WriteString(doc)
	b.WriteString("local MAX = 9007199254740992 -- algorithms.MaxExact\n")
	b.WriteString("local floor, max, min, tonumber = math.floor, math.max, math.min, tonumber\n\n")
	for _, f := range forms {
		luaFunction(b, f)
	}
	for _, h := range hand {
		fmt.Fprintf(b, "-- %s, written by hand: copied from algorithms/%s\n\n", h.name, h.src)
		b.WriteString(h.text)
	}
	b.WriteString("-- The forms by name: decide, the number of state fields (n; false for\n")
	b.WriteString("-- a state of any number of pairs of fields) and of parameters (na), and\n")
	b.WriteString("-- the state's check.\n")
	b.WriteString("local FORMS = {\n")
	for _, f := range forms {
		fmt.Fprintf(b, "  %s = {decide = decide_%s, n = %d, na = %d, valid = %s},\n",
			f.name, f.name, len(f.state), len(f.args), luaValid(f))
	}
	for _, h := range hand {
		fmt.Fprintf(b, "  %s = {decide = decide_%s, n = false, na = %d, valid = valid_%s},\n",
			h.name, h.name, h.args, h.name)
	}
	b.WriteString("}\n")
	b.WriteString(luaAllCommon)
}

const luaAllDoc = `-- all: the Lua form of a composite (algorithms.All, composite.go) of the
-- forms below, each the function of its algorithm's decide.
-- Calling convention: see algorithms/forms/forms.go (CompositeLua).
--   KEYS[1]  state: little-endian doubles: when the key's state expires
--            (the latest of its parts'), -1, then for each part that has
--            state: its ID, when the part's state expires, its length in
--            bytes (8 per field), and its fields (for the sliding log, the
--            Go form's: the header (-1, total), then (time, cost) pairs);
--            a state of before parts were keyed (no -1; for each part by
--            place: expiry, length, fields) is read too
--   ARGV     now, cost, peek, server_clock, slack, the parts (ARGV[6]),
--            [max_delay, refund, act]; the parts: their
--            algorithm names, separated by spaces, a newline, then
--            packed(for each part in order, its ID and its parameters)
--   reply    for each part: {allowed, limit, remaining, retry_after,
--            reset_after, delay}

`

const luaManyAllDoc = `-- all, coalesced: the requests of several keys, each a composite
-- (algorithms.All, composite.go) of the forms below, decided in one run,
-- each key's in order, each exactly as all.lua decides it run right after
-- the one before on that key. Calling convention: see algorithms/forms/lua.go.
--   KEYS     the keys, each holding state as all.lua keeps it
--   ARGV     server_clock, packed(now, cost, peek of each request, by key
--            in KEYS order, each key's in order), then for each key:
--            slack, its parts (as all.lua's ARGV[6]), its number of requests
--   reply    flat, for each key in order: for each of its requests, each
--            part's allowed, limit, remaining, retry_after, reset_after,
--            delay; or one item, the CORRUPT error reply, when its state
--            cannot be read

`

// luaAllCommon is the composite's own functions, which both drivers call:
// parse reads the parts, read a key's stored state, decide one request
// (check, then commit, as the Go form does), write the parts' states.
const luaAllCommon = `
-- The parts of spec (the parts' names, separated by spaces, a newline,
-- then, for each part, its ID and its parameters, packed), each with no
-- state; or nil and an error.
local function parse(spec)
  local sep = string.find(spec, '\n', 1, true)
  if not sep then
    return nil, 'ratelimit: composite parts without their names'
  end
  local packed = string.sub(spec, sep + 1)
  local parts, apos = {}, 1
  for name in string.gmatch(string.sub(spec, 1, sep - 1), '[^ ]+') do
    local f = FORMS[name]
    if not f then
      return nil, 'ratelimit: no composite Lua form for ' .. name
    end
    if apos + 8 * (1 + f.na) > #packed + 1 then
      return nil, 'ratelimit: composite parameters of ' .. #packed .. ' bytes'
    end
    local id
    id, apos = struct.unpack('<d', packed, apos)
    local a = {struct.unpack('<' .. string.rep('d', f.na), packed, apos)}
    apos = table.remove(a)
    local zero = {}
    if f.n then
      for j = 1, f.n do zero[j] = 0 end
    end
    parts[#parts + 1] = {f = f, a = a, id = id, zero = zero, has = false, e = 0, s = zero}
  end
  if #parts == 0 or apos ~= #packed + 1 then
    return nil, 'ratelimit: composite parameters of ' .. #packed .. ' bytes'
  end
  return parts
end

-- Reads part p's state of len bytes from raw at pos, expiring at e, into
-- p (has: it has one, live or not). A state live at now is checked. It
-- returns the position after it, or nil and the error of a state it cannot
-- read.
local function read_part(raw, pos, p, e, len, now, what)
  if len ~= 0 and (p.f.n and len ~= 8 * p.f.n or not p.f.n and len % 16 ~= 0) then
    return nil, 'CORRUPT composite part ' .. what
  end
  if len > 0 then
    local s
    if p.f.n then
      s = {struct.unpack('<' .. string.rep('d', p.f.n), raw, pos)}
      pos = table.remove(s)
    else
      -- A state of any length, read a field at a time (unpacking it
      -- whole could pass Lua's limit on a call's results).
      s = {}
      for j = 1, len / 8 do s[j], pos = struct.unpack('<d', raw, pos) end
    end
    if now < e and not p.f.valid(s) then
      return nil, 'CORRUPT composite part ' .. what .. ' state'
    end
    p.has, p.e, p.s = true, e, s
  end
  return pos
end

-- Reads raw, a key's stored state (or false for none), into parts: each
-- part's state and expiry (has: it has one, live or not), found by the
-- part's ID (a state keyed by part: the mark -1, then for each part with
-- state its ID, expiry, length and fields; the entries of IDs no part has
-- go to parts.carry, live or not, which decide carries while they live),
-- or by its place (a state of before parts were keyed: for each part its
-- expiry, length and fields). A part whose state is live at now is
-- checked. It returns nil, or the error of a state it cannot read.
local function read(raw, parts, now)
  for _, p in ipairs(parts) do
    p.has, p.e, p.s = false, 0, p.zero
  end
  parts.carry = {}
  if not raw then
    return nil
  end
  if #raw < 8 or #raw % 8 ~= 0 then
    return 'CORRUPT composite state of ' .. #raw .. ' bytes'
  end
  local top, pos = struct.unpack('<d', raw)
  if not (top >= 0 and top <= MAX) then
    return 'CORRUPT composite state of ' .. #raw .. ' bytes'
  end
  local err
  if #raw >= 16 and struct.unpack('<d', raw, pos) == -1 then
    pos = pos + 8
    local seen, k = {}, 0
    while pos <= #raw do
      k = k + 1
      if pos + 23 > #raw then
        return 'CORRUPT composite state entry ' .. k .. ' ends in its header'
      end
      local id, e, len
      id, e, len, pos = struct.unpack('<ddd', raw, pos)
      if not (id >= 0 and id < MAX / 2 and e >= 1 and e <= MAX and len > 0 and len % 8 == 0)
        or pos + len > #raw + 1 or seen[id] or k > 16 then
        return 'CORRUPT composite state entry ' .. k
      end
      seen[id] = true
      local p = nil
      for _, q in ipairs(parts) do
        if q.id == id then p = q end
      end
      if p then
        pos, err = read_part(raw, pos, p, e, len, now, k)
        if not pos then return err end
      else
        local c = {id = id, e = e, s = {}}
        for j = 1, len / 8 do c.s[j], pos = struct.unpack('<d', raw, pos) end
        parts.carry[#parts.carry + 1] = c
      end
    end
    return nil
  end
  for i, p in ipairs(parts) do
    if pos + 15 > #raw then
      return 'CORRUPT composite state ends before part ' .. i
    end
    local e, len
    e, len, pos = struct.unpack('<dd', raw, pos)
    if not (e >= 0 and e <= MAX) or pos + len > #raw + 1 then
      return 'CORRUPT composite part ' .. i
    end
    pos, err = read_part(raw, pos, p, e, len, now, i)
    if not pos then return err end
  end
  if pos ~= #raw + 1 then
    return 'CORRUPT composite state of ' .. #raw .. ' bytes'
  end
  return nil
end

-- Part i's decision, into out after base.
local function put(out, base, i, allowed, limit, remaining, retry_after, reset_after, delay)
  local k = base + 6 * (i - 1)
  out[k + 1], out[k + 2], out[k + 3] = allowed and 1 or 0, limit, remaining
  out[k + 4], out[k + 5], out[k + 6] = retry_after, reset_after, delay
  return allowed
end

-- Decides one request on parts, appending every part's decision to out.
-- Check: every part decides it as a peek. Commit, unless a part denies or
-- it is a peek: every part decides it for real. A refund has no check:
-- every part gives back what it can. It returns true and the
-- latest of the parts' expiries when the key is to hold the parts' next
-- states (each part's new state, or its state as it was) and the entries
-- of parts.carry live at now (at most 16 entries in all), and false when
-- nothing is to be written.
local function decide(parts, now, cost, peek, out, max_delay, refund, act)
  max_delay, act = max_delay or 0, act or 0
  local base = #out
  local ok = true
  for i, p in ipairs(parts) do
    p.live = p.has and now < p.e
    p.cur = p.zero
    if p.live then p.cur = p.s end
    if not refund then
      ok = put(out, base, i, p.f.decide(now, cost, true, p.live, p.cur, p.a, max_delay, false, act)) and ok
    end
  end
  if not ok or peek and not refund then
    return false
  end
  local top, written = 0, 0
  for i, p in ipairs(parts) do
    local r = {p.f.decide(now, cost, false, p.live, p.cur, p.a, max_delay, refund, act)}
    ok = (put(out, base, i, r[1], r[2], r[3], r[4], r[5], r[6]) or refund) and ok
    if r[8] then
      p.ne, p.ns = now + max(r[7], 1), r[8]
    elseif p.live then
      p.ne, p.ns = p.e, p.s
    else
      p.ne, p.ns = 0, nil
    end
    top = max(top, p.ne)
    if p.ns and #p.ns > 0 then written = written + 1 end
  end
  local keep = {}
  for _, c in ipairs(parts.carry) do
    if now < c.e and written + #keep < 16 then
      keep[#keep + 1] = c
      top = max(top, c.e)
    end
  end
  if not ok or top <= now then
    return false
  end
  for _, p in ipairs(parts) do
    p.has, p.e, p.s = p.ns ~= nil, p.ne, p.ns or p.zero
  end
  parts.carry = keep
  return true, top
end

-- Writes the parts' states to key, keyed by part (the mark -1, then for
-- each part with state its ID, expiry, length and fields, then the
-- entries carried for parts it does not have), expiring
-- top - now µs from now (in whole ms rounded up) plus slack ms.
local function write(key, parts, top, now, slack)
  local vals = {top, -1}
  for _, p in ipairs(parts) do
    if p.has and #p.s > 0 then
      vals[#vals + 1] = p.id
      vals[#vals + 1] = p.e
      vals[#vals + 1] = 8 * #p.s
      for j = 1, #p.s do vals[#vals + 1] = p.s[j] end
    end
  end
  for _, c in ipairs(parts.carry) do
    vals[#vals + 1] = c.id
    vals[#vals + 1] = c.e
    vals[#vals + 1] = 8 * #c.s
    for j = 1, #c.s do vals[#vals + 1] = c.s[j] end
  end
  local r999 = top - now + 999
  local q = floor(r999 / 1000)
  if q * 1000 > r999 then q = q - 1 elseif (q + 1) * 1000 <= r999 then q = q + 1 end
  -- Packed in runs of at most 256 fields, within Lua's limit on a call's
  -- arguments.
  local packed = {}
  for j = 1, #vals, 256 do
    local k = min(j + 255, #vals)
    packed[#packed + 1] = struct.pack('<' .. string.rep('d', k - j + 1), unpack(vals, j, k))
  end
  redis.call('SET', key, table.concat(packed), 'PX', max(q, 1) + slack)
end

`

const luaAllDriver = `
if #ARGV ~= 6 and #ARGV ~= 9 then
  return redis.error_reply('ratelimit: composite call of ' .. #ARGV .. ' arguments')
end
local parts, perr = parse(ARGV[6])
if not parts then
  return redis.error_reply(perr)
end
local err = read(redis.call('GET', KEYS[1]), parts, now)
if err then
  return redis.error_reply(err)
end
local out = {}
local w, top = decide(parts, now, cost, peek, out, max_delay, refund, act)
if w then
  write(KEYS[1], parts, top, now, slack)
end
return out
`

const luaManyAllDriver = `
-- One key's n requests, from the request at index first of reqs, in order,
-- on the state the one before left: their decisions, appended to res, or
-- the error reply of the state it cannot read.
local function one(key, slack, parts, reqs, first, n, clock, now, res)
  -- A key of another type fails its own requests (WRONGTYPE), not the run.
  local raw = redis.pcall('GET', key)
  if type(raw) == 'table' then
    return raw
  end
  if not clock then now = struct.unpack('<d', reqs, 24 * first + 1) end
  local err = read(raw, parts, now)
  if err then
    return {err = err}
  end
  local top, at = nil, 0
  for i = first, first + n - 1 do
    local t, cost, peek = struct.unpack('<ddd', reqs, 24 * i + 1)
    if not clock then now = t end
    local w, tp = decide(parts, now, cost, peek == 1, res)
    if w then top, at = tp, now end
  end
  if top then
    write(key, parts, top, at, slack)
  end
  return nil
end

` + luaManyPrologue + `local spec, parts, perr = nil, nil, nil
local first = 0
for k = 1, #KEYS do
  local a = 3 * k
  if ARGV[a + 1] ~= spec then
    spec = ARGV[a + 1]
    parts, perr = parse(spec)
  end
  local n = tonumber(ARGV[a + 2])
  local err
  if parts then
    err = one(KEYS[k], tonumber(ARGV[a]), parts, reqs, first, n, clock, now, res)
  else
    err = {err = perr}
  end
  if err then
    res[#res + 1] = err
  end
  first = first + n
end
return res
`

// sqlAllFunction is the composite SQL form's function, and sqlAllDefines
// every function sql/all.sql defines, unversioned.
const sqlAllFunction = "ratelimit_all"

var sqlAllDefines = []string{sqlCorrupt, "ratelimit_all_nargs", "ratelimit_all_part", sqlAllFunction}

// SQLAll returns the composite SQL form of forms: ratelimit_all, which
// calls each part's SQL form (ratelimit_<name>) through ratelimit_all_part.
//
// The hand-written parts (hand) are called through their hand-written SQL
// forms (handWrittenSQL), ratelimit_<name>, the same way.
func SQLAll(forms []*form, hand []luaPart) string {
	var b strings.Builder
	var srcs []string
	for _, h := range hand {
		for src, name := range handWrittenSQL {
			if name == h.name {
				srcs = append(srcs, src)
			}
		}
	}
	fmt.Fprintf(&b, "-- Code generated by formgen from %s; DO NOT EDIT.\n\n", files(forms, srcs...))
	b.WriteString(sqlAllDoc)
	b.WriteString(sqlPrelude)
	b.WriteString(`
DO $$ BEGIN
    CREATE TYPE ratelimit_all_step AS (next_state bigint[], ttl bigint, decisions bigint[]);
EXCEPTION WHEN duplicate_object THEN NULL;
END $$;

-- The number of parameters of the form named name, or NULL when it has
-- none that a composite can call.
CREATE OR REPLACE FUNCTION ratelimit_all_nargs(name text) RETURNS int
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE name`)
	for _, f := range forms {
		fmt.Fprintf(&b, "\n        WHEN '%s' THEN %d", f.name, len(f.args))
	}
	for _, h := range hand {
		fmt.Fprintf(&b, "\n        WHEN '%s' THEN %d", h.name, h.args)
	}
	b.WriteString(` END
$$;

-- The decision of the form named name.
CREATE OR REPLACE FUNCTION ratelimit_all_part(
    name text, state bigint[], now_us bigint, cost bigint, peek boolean, args bigint[],
    max_delay bigint, refund boolean, act bigint)
RETURNS ratelimit_step LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    CASE name`)
	for _, f := range forms {
		fmt.Fprintf(&b, "\n    WHEN '%s' THEN RETURN %s(state, now_us, cost, peek, args,\n        max_delay, refund, act);", f.name, sqlFunction(f))
	}
	for _, h := range hand {
		fmt.Fprintf(&b, "\n    WHEN '%s' THEN RETURN ratelimit_%s(state, now_us, cost, peek, args,\n        max_delay, refund, act);", h.name, h.name)
	}
	b.WriteString("\n    END CASE;\nEND\n$$;\n")
	b.WriteString(sqlAllDriver)
	return b.String()
}

const sqlAllDoc = `-- all: the SQL form of a composite (algorithms.All, composite.go) of the
-- forms ratelimit_all_part names, each called through its own SQL form.
-- Calling convention: see algorithms/forms/forms.go (CompositeSQL).
--   ratelimit_all(state bigint[], now_us bigint, cost bigint, peek boolean,
--                 args bigint[], parts text[], max_delay bigint, refund boolean,
--                 act bigint) RETURNS ratelimit_all_step
-- parts: the parts' algorithm names; args: for each part in order, its ID
-- and its parameters. state: -1, then for each part that has state, its
-- ID, when its state expires, its length in bytes (8 per field) and its
-- fields (then the live entries of IDs no part has, carried as they are
-- while the state holds at most 16 entries); or NULL for a key with no
-- live state. A state of before parts
-- were keyed (no -1: for each part by place, its expiry, its length, 0
-- for none, and its fields) is read too. decisions: for each part,
-- [allowed (1 or 0), limit, remaining, retry_after, reset_after, delay].

`

const sqlAllDriver = `
CREATE OR REPLACE FUNCTION ratelimit_all(
    state bigint[], now_us bigint, cost bigint, peek boolean, args bigint[], parts text[],
    max_delay bigint, refund boolean, act bigint)
RETURNS ratelimit_all_step LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    n     int := cardinality(parts);
    pos   int := 1;         -- the next element of state
    apos  int := 1;         -- the next element of args
    ids   bigint[] := '{}'; -- each part's ID
    fpos  int[] := '{}';    -- where each part's live fields start in state (0: none)
    flen  int[] := '{}';    -- how many fields each part has
    fexp  bigint[] := '{}'; -- when each part's live state expires
    astart int[] := '{}';
    alen  int[] := '{}';
    seen  bigint[] := '{}'; -- the IDs of the entries read
    carry bigint[] := '{}'; -- the entries of IDs no part has, live at now_us
    ncarry int := 0;        -- how many entries carry holds
    nw    int := 0;         -- how many parts' entries nxt holds
    na    int;
    k     int;
    id    bigint;
    e     bigint;
    l     bigint;
    d     ratelimit_step;
    decs  bigint[] := '{}';
    ok    boolean := true;
    nxt   bigint[] := '{-1}';
    top   bigint := 0;
BEGIN
    FOR i IN 1 .. n LOOP
        na := ratelimit_all_nargs(parts[i]);
        IF na IS NULL THEN
            RAISE EXCEPTION 'ratelimit: no composite SQL form for %', parts[i];
        END IF;
        ids := ids || args[apos];
        astart := astart || apos + 1;
        alen := alen || na;
        apos := apos + 1 + na;
        fpos := fpos || 0; flen := flen || 0; fexp := fexp || 0::bigint;
    END LOOP;
    IF apos <> coalesce(cardinality(args), 0) + 1 THEN
        RAISE EXCEPTION 'ratelimit: % composite parameters, want %', cardinality(args), apos - 1;
    END IF;
    IF state IS NOT NULL AND cardinality(state) >= 1 AND state[1] = -1 THEN
        -- Keyed by part: each entry finds its part by ID; the live entries
        -- of IDs no part has are carried, as they are, at the next write.
        pos := 2;
        WHILE pos <= cardinality(state) LOOP
            IF pos + 2 > cardinality(state) THEN
                PERFORM ratelimit_corrupt(
                    format('composite state entry %s ends in its header', cardinality(seen) + 1));
            END IF;
            id := state[pos]; e := state[pos + 1]; l := state[pos + 2]; pos := pos + 3;
            IF id NOT BETWEEN 0 AND 4503599627370495 OR e NOT BETWEEN 1 AND 9007199254740992 OR l <= 0 OR l % 8 <> 0
                OR pos + l / 8 - 1 > cardinality(state) OR id = ANY(seen) OR cardinality(seen) >= 16 THEN
                PERFORM ratelimit_corrupt(format('composite state entry %s', cardinality(seen) + 1));
            END IF;
            seen := seen || id;
            k := array_position(ids, id);
            IF k IS NOT NULL AND now_us < e THEN
                fpos[k] := pos; flen[k] := (l / 8)::int; fexp[k] := e;
            ELSIF k IS NULL AND now_us < e THEN
                carry := carry || state[pos - 3 : pos + (l / 8)::int - 1]; ncarry := ncarry + 1;
            END IF;
            pos := pos + (l / 8)::int;
        END LOOP;
    ELSIF state IS NOT NULL THEN
        -- Before parts were keyed: by place.
        FOR i IN 1 .. n LOOP
            IF pos + 1 > cardinality(state) THEN
                PERFORM ratelimit_corrupt(format('composite state ends before part %s', i));
            END IF;
            e := state[pos]; l := state[pos + 1]; pos := pos + 2;
            IF e NOT BETWEEN 0 AND 9007199254740992 OR l < 0 OR l % 8 <> 0 OR pos + l / 8 - 1 > cardinality(state) THEN
                PERFORM ratelimit_corrupt(format('composite part %s', i));
            END IF;
            IF l > 0 AND now_us < e THEN
                fpos[i] := pos; flen[i] := (l / 8)::int; fexp[i] := e;
            END IF;
            pos := pos + (l / 8)::int;
        END LOOP;
        IF pos <> cardinality(state) + 1 THEN
            PERFORM ratelimit_corrupt(format('composite state of %s elements', cardinality(state)));
        END IF;
    END IF;
    -- Check: every part decides the request as a peek (a refund has none:
    -- every part gives back what it can).
    FOR i IN 1 .. n LOOP
        EXIT WHEN refund;
        d := ratelimit_all_part(parts[i],
            CASE WHEN fpos[i] > 0 THEN state[fpos[i] : fpos[i] + flen[i] - 1] END,
            now_us, cost, true, args[astart[i] : astart[i] + alen[i] - 1], max_delay, false, act);
        decs := decs || ARRAY[d.allowed::int::bigint, d.lim, d.remaining, d.retry_after, d.reset_after, d.delay];
        ok := ok AND d.allowed;
    END LOOP;
    IF NOT ok OR peek AND NOT refund THEN
        RETURN ROW(NULL, NULL, decs)::ratelimit_all_step;
    END IF;
    -- Commit: every part decides the request for real; the state holds
    -- every part's next state (or its state as it was, when it stores
    -- nothing), keyed by the part's ID; a part with no state is not
    -- written.
    decs := '{}';
    FOR i IN 1 .. n LOOP
        d := ratelimit_all_part(parts[i],
            CASE WHEN fpos[i] > 0 THEN state[fpos[i] : fpos[i] + flen[i] - 1] END,
            now_us, cost, false, args[astart[i] : astart[i] + alen[i] - 1], max_delay, refund, act);
        decs := decs || ARRAY[d.allowed::int::bigint, d.lim, d.remaining, d.retry_after, d.reset_after, d.delay];
        ok := ok AND (d.allowed OR refund);
        IF d.next_state IS NOT NULL AND cardinality(d.next_state) > 0 THEN
            e := now_us + greatest(d.ttl, 1);
            nxt := nxt || ids[i] || e || (8 * cardinality(d.next_state))::bigint || d.next_state;
            nw := nw + 1;
        ELSIF fpos[i] > 0 THEN
            e := fexp[i];
            nxt := nxt || ids[i] || e || (8 * flen[i])::bigint || state[fpos[i] : fpos[i] + flen[i] - 1];
            nw := nw + 1;
        ELSE
            e := 0;
        END IF;
        top := greatest(top, e);
    END LOOP;
    -- The entries carried, as they were, while the state holds at most 16.
    pos := 1;
    FOR j IN 1 .. least(ncarry, 16 - nw) LOOP
        top := greatest(top, carry[pos + 1]);
        l := carry[pos + 2];
        nxt := nxt || carry[pos : pos + 2 + (l / 8)::int];
        pos := pos + 3 + (l / 8)::int;
    END LOOP;
    IF NOT ok OR top <= now_us THEN
        RETURN ROW(NULL, NULL, decs)::ratelimit_all_step;
    END IF;
    RETURN ROW(nxt, top - now_us, decs)::ratelimit_all_step;
END
$$;
`
