-- The ending of a script whose keys span several slots of one cluster node
-- (run with the flag allow-cross-slot-keys; see Cross in luascript.go).
-- The keys are not declared, since a server refuses declared keys of
-- several slots (CROSSSLOT): ARGV[1] is their number n, ARGV[2..n+1] the
-- keys (the decisions', then the override keys), and the decisions' eight
-- values each follow, as in batch.lua.
-- Before anything is written, every key is read once: a key this node does
-- not serve (its slot moved, is migrating without the key, or the node is
-- a replica or its cluster is down) fails that read, and the call replies
-- NOTLOCAL, having changed nothing, so that the caller may send its
-- decisions again, each to the node that serves it.
local n = tonumber(ARGV[1])
local keys = {}
for i = 1, n do
  local k = ARGV[i + 1]
  keys[i] = k
  local r = redis.pcall('EXISTS', k)
  if type(r) == 'table' and r.err then
    return redis.error_reply('NOTLOCAL ' .. r.err)
  end
end
return decideAll(keys, ARGV, n + 1)
