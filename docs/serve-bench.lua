-- wrk script for POST /v1/check: one decision per request, on 100,000
-- distinct keys picked at random (so the numbers are not one hot key).
-- Usage: wrk -t2 -c64 -d20s --latency -s docs/serve-bench.lua http://127.0.0.1:8080
math.randomseed(os.time())
local headers = { ["Content-Type"] = "application/json" }
request = function()
  local body = string.format('{"policy":"bench","key":"user-%d","cost":1}', math.random(1, 100000))
  return wrk.format("POST", "/v1/check", headers, body)
end
