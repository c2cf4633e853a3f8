-- The ending of a script whose keys span several slots of one cluster node
-- (run with the flag allow-cross-slot-keys; see Cross in luascript.go).
-- The keys are not declared, since a server refuses declared keys of
-- several slots (CROSSSLOT): ARGV[1] is their number n, ARGV[2] the number
-- d of decisions, ARGV[3..n+2] the keys (the d decisions', then the
-- override keys), and ARGV[n+3] the decisions' records, as ARGV[1] in
-- batch.lua.
-- Before anything is written, every key is read: a key this node does not
-- serve (its slot moved, is migrating without the key, or the node is a
-- replica or its cluster is down) fails that read, and the call replies
-- NOTLOCAL, having changed nothing, so that the caller may send its
-- decisions again, each to the node that serves it. When the algorithm's
-- decide only reads and flush writes (readsFirst), the decisions' own reads
-- are those reads: any error before flush (a read refused, or another) has
-- changed nothing, and replies NOTLOCAL (a decision that fails for another
-- reason fails again when sent alone). Otherwise, and for the override
-- keys (whose read override() takes for a malformed override when it
-- fails) and the penalty keys, each key is read first with EXISTS.
local n, d = tonumber(ARGV[1]), tonumber(ARGV[2])
local keys = {}
for i = 1, n do
  local k = ARGV[i + 2]
  keys[i] = k
  if i > d or not readsFirst then
    local r = redis.pcall('EXISTS', k)
    if type(r) == 'table' and r.err then
      return redis.error_reply('NOTLOCAL ' .. r.err)
    end
  end
end
local args = ARGV[n + 3]
if not readsFirst then
  local out = decideAll(keys, args)
  flush()
  penaltyFlush()
  return table.concat(out)
end
-- decideAll only reads: any error it raises has changed nothing. flush,
-- called after it and outside the pcall, may have begun to write when it
-- fails, and its error is raised as it is.
local ok, r = pcall(decideAll, keys, args)
if not ok then
  if type(r) == 'table' and r.err then
    r = r.err
  end
  return redis.error_reply('NOTLOCAL ' .. tostring(r))
end
flush()
penaltyFlush()
return table.concat(r)
