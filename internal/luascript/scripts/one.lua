-- The ending of a script whose keys share one slot, declared in KEYS.
return decideAll(KEYS, ARGV[1])
