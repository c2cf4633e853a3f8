-- The ending of a script whose keys share one slot, declared in KEYS.
local out = decideAll(KEYS, ARGV[1])
flush() -- the state the algorithm kept for the end of the call
penaltyFlush()
return table.concat(out)
