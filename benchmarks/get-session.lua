-- wrk script: GET a path with a rotating bearer token (RISC_BENCH_SESSIONS session tokens
-- "bench-session-1".."bench-session-N"), counting answers other than 200.
local threads = {}

function setup(thread)
  thread:set("id", #threads)
  table.insert(threads, thread)
end

function init(args)
  sessions = tonumber(os.getenv("RISC_BENCH_SESSIONS") or "1000")
  path = os.getenv("RISC_BENCH_PATH") or "/v1/session"
  index = id
  not_ok = 0
end

function request()
  index = index % sessions + 1
  return wrk.format("GET", path, { ["Authorization"] = "Bearer bench-session-" .. index }, nil)
end

function response(status, headers, body)
  if status ~= 200 then not_ok = not_ok + 1 end
end

function done(summary, latency, requests)
  local not_ok_total = 0
  for _, thread in ipairs(threads) do not_ok_total = not_ok_total + thread:get("not_ok") end
  io.write(string.format("RESULT requests=%d rate=%.1f not_200=%d socket_errors=%d p50_ms=%.3f p99_ms=%.3f\n",
    summary.requests, summary.requests / (summary.duration / 1e6), not_ok_total,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000))
end
