-- wrk script: POSTs pre-signed SETs to /risc/events, each token once (tokens are split across threads).
-- Environment: RISC_BENCH_TOKENS (file, one SET per line), RISC_BENCH_THREADS, RISC_BENCH_CONNECTIONS,
-- RISC_BENCH_RATE (requests/s offered for the whole run, open loop; 0 = as fast as possible).
local threads = {}

function setup(thread)
  thread:set("id", #threads)
  table.insert(threads, thread)
end

function init(args)
  local nthreads = tonumber(os.getenv("RISC_BENCH_THREADS"))
  local connections = tonumber(os.getenv("RISC_BENCH_CONNECTIONS"))
  local rate = tonumber(os.getenv("RISC_BENCH_RATE") or "0")
  tokens = {}
  local i = 0
  for line in io.lines(os.getenv("RISC_BENCH_TOKENS")) do
    if i % nthreads == id then tokens[#tokens + 1] = line end
    i = i + 1
  end
  next_index = 0
  reused = 0
  not_accepted = 0
  -- Pacing (open loop): each thread sends at rate/threads, on a fixed schedule of slots. Every request takes
  -- the thread's next slot and waits for it, so a slow response does not lower the offered rate (the next
  -- free connection catches up) as a fixed pause per connection would.
  slot_ms = rate > 0 and (1000 * nthreads / rate) or 0
  next_slot_ms = nil
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/secevent+jwt"
end

function request()
  next_index = next_index + 1
  if next_index > #tokens then
    next_index = 1
    reused = reused + 1
  end
  return wrk.format(nil, "/risc/events", nil, tokens[next_index])
end

local ffi = require("ffi")
ffi.cdef[[
  typedef struct { long tv_sec; long tv_nsec; } risc_timespec;
  int clock_gettime(int clock, risc_timespec *ts);
]]
local now_ts = ffi.new("risc_timespec")
local function now_ms()
  ffi.C.clock_gettime(1, now_ts) -- CLOCK_MONOTONIC
  return tonumber(now_ts.tv_sec) * 1000 + tonumber(now_ts.tv_nsec) / 1e6
end

function delay()
  if slot_ms == 0 then return 0 end
  local now = now_ms()
  if next_slot_ms == nil then next_slot_ms = now end
  local wait = next_slot_ms - now
  next_slot_ms = next_slot_ms + slot_ms
  if wait > 0 then return wait end
  return 0
end

function response(status, headers, body)
  if status ~= 202 then not_accepted = not_accepted + 1 end
end

function done(summary, latency, requests)
  local reused_total, not_accepted_total = 0, 0
  for _, thread in ipairs(threads) do
    reused_total = reused_total + thread:get("reused")
    not_accepted_total = not_accepted_total + thread:get("not_accepted")
  end
  io.write(string.format(
    "RESULT requests=%d seconds=%.3f rate=%.1f not_202=%d socket_errors=%d token_reuse=%d p50_ms=%.3f p90_ms=%.3f p99_ms=%.3f max_ms=%.3f\n",
    summary.requests, summary.duration / 1e6, summary.requests / (summary.duration / 1e6), not_accepted_total,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout, reused_total,
    latency:percentile(50) / 1000, latency:percentile(90) / 1000, latency:percentile(99) / 1000, latency.max / 1000))
end
