-- wrk script of benchmarks/bench_api.py and bench_rest_e2e.py.
--   wrk ... -s orders.lua <url> -- <mode> <run prefix> <api key> [stop after N per thread] [products] [stop file]
-- mode "post": POST /orders, each request with its own Idempotency-Key
--   (<prefix>-<thread>-<counter>): the API is idempotent by that key, so a repeated key
--   would be one order answered twice, not a new order. mode "get": GET /healthz.
-- At the end it prints one JSON line (prefixed "WRKJSON ") for the Python side.

local threads = {}
local counter = 0

function setup(thread)
  thread:set("tid", #threads + 1)
  table.insert(threads, thread)
end

function init(args)
  mode = args[1] or "get"
  prefix = args[2] or "run"
  key = args[3] or ""
  limit = tonumber(args[4] or "0")
  ok = 0
  bad = 0
  seen = 0
  headers = { ["Content-Type"] = "application/json" }
  if key ~= "" then headers["Authorization"] = "Bearer " .. key end
  products = tonumber(args[5] or "200")
  stopfile = args[6]
  stopped = false
end

function request()
  if mode == "post" then
    counter = counter + 1
    headers["Idempotency-Key"] = prefix .. "-" .. tid .. "-" .. counter
    -- products and customers spread as bench_sagas spreads them (no single hot product)
    local body = '{"customer_id":"bench-' .. (counter % 1000) .. '","lines":[{"product_id":"p' ..
      (counter % products) .. '","quantity":1,"unit_price":"1.00"}],"payment":{"method":"card"}}'
    return wrk.format("POST", "/orders", headers, body)
  end
  return wrk.format("GET", "/healthz", headers)
end

function response(status, hdrs, resp_body)
  seen = seen + 1
  if status >= 200 and status < 300 then ok = ok + 1 else bad = bad + 1 end
  if limit > 0 and seen >= limit and not stopped then
    -- wrk waits out its -d duration even when every thread has stopped: say so in a file,
    -- and the Python side ends wrk with SIGINT (wrk then prints its results).
    stopped = true
    if stopfile then
      local f = io.open(stopfile, "a")
      f:write("stopped\n")
      f:close()
    end
    wrk.thread:stop()
  end
end

function done(summary, latency, requests)
  local ok_total, bad_total = 0, 0
  for _, t in ipairs(threads) do
    ok_total = ok_total + t:get("ok")
    bad_total = bad_total + t:get("bad")
  end
  io.write(string.format(
    'WRKJSON {"requests":%d,"duration_us":%d,"ok":%d,"non2xx":%d,"status_errors":%d,' ..
    '"connect":%d,"read":%d,"write":%d,"timeout":%d,"p50_us":%d,"p99_us":%d,"max_us":%d}\n',
    summary.requests, summary.duration, ok_total, bad_total, summary.errors.status,
    summary.errors.connect, summary.errors.read, summary.errors.write, summary.errors.timeout,
    latency:percentile(50), latency:percentile(99), latency.max))
end
