-- wrk script for POST /json (envoyproxy/ratelimit's HTTP form of ShouldRateLimit):
-- one descriptor per request, on 100,000 values picked at random.
-- Usage: wrk -t2 -c64 -d15s --latency -s docs/envoy-bench.lua http://127.0.0.1:8080
math.randomseed(os.time())
local headers = { ["Content-Type"] = "application/json" }
request = function()
  local body = string.format('{"domain":"bench","descriptors":[{"entries":[{"key":"remote_address","value":"%d"}]}]}', math.random(1, 100000))
  return wrk.format("POST", "/json", headers, body)
end
