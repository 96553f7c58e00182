-- wrk script of make bench-http (scripts/bench-http.sh). BENCH_PHASE picks
-- the request:
--   h  POST /v1/locks/acquire     a unique repo_url per request
--   a  POST /v1/applications      a unique name and repo_url per request
--   m  GET  /v1/me
--   z  GET  /healthz
--   l, L  POST /v1/leases (a unique key, ttl 1m) then DELETE /v1/leases/{id}:
--         one acquire+release is two requests; the ids come back through a
--         response hook (a per-thread queue, so any connection may send a
--         release); l and L differ only in the live leases set up before
--   k  POST /v1/leases/{id}/keepalive over BENCH_LEASES ("token:id,...")
-- Unique values are "t<thread>-<counter>": a per-thread counter and the
-- thread's number, so no two requests of a run repeat one. BENCH_TOKENS is
-- the tenants' tokens, comma-separated: requests take turns with them (the
-- binary limits each tenant's rate); BENCH_RUN keeps two binaries' runs
-- apart.
-- done() prints one "RESULT ..." line that bench-http.sh parses. Failed
-- responses are counted by wrk itself (errors.status): a Lua response hook
-- would make wrk hand every response's headers and body to Lua, load
-- generator CPU taken from the binary and Postgres on a small machine.

local phase = os.getenv("BENCH_PHASE") or "z"
local tokens = {}
for t in string.gmatch(os.getenv("BENCH_TOKENS") or "", "[^,]+") do
  table.insert(tokens, "Bearer " .. t)
end
local run = os.getenv("BENCH_RUN") or "r"

local leases = {}
for t, l in string.gmatch(os.getenv("BENCH_LEASES") or "", "([^,:]+):([^,]+)") do
  table.insert(leases, {"Bearer " .. t, l})
end

local thread_no = 0

function setup(thread)
  thread_no = thread_no + 1
  thread:set("id", thread_no)
end

function init(args)
  counter = 0
  if phase == "z" then
    wrk.method = "GET"
    wrk.path = "/healthz"
  end
end

local post_headers = {["Content-Type"] = "application/json"}
local get_headers = {}

if phase == "h" or phase == "a" or phase == "m" then
  function request()
    counter = counter + 1
    -- The threads start at different tenants and each walks all of them.
    local auth = tokens[((counter + id * 7919) % #tokens) + 1]
    if phase == "m" then
      get_headers["Authorization"] = auth
      return wrk.format("GET", "/v1/me", get_headers)
    end
    post_headers["Authorization"] = auth
    local u = string.format("%s-t%d-%d", run, id, counter)
    if phase == "h" then
      return wrk.format("POST", "/v1/locks/acquire", post_headers,
        '{"repo_url":"https://github.com/bench-h/' .. u .. '"}')
    end
    return wrk.format("POST", "/v1/applications", post_headers,
      '{"name":"app-' .. u .. '","repo_url":"https://github.com/bench-a/' .. u .. '","path":"deploy"}')
  end
end

if phase == "l" or phase == "L" then
  local releases = {}
  function request()
    local r = table.remove(releases)
    if r then
      get_headers["Authorization"] = r[1]
      return wrk.format("DELETE", "/v1/leases/" .. r[2], get_headers)
    end
    counter = counter + 1
    local ti = ((counter + id * 7919) % #tokens) + 1
    post_headers["Authorization"] = tokens[ti]
    -- The key names its tenant's token (a<index>): the answer gives the
    -- key back, and the release must go with the lease's own tenant
    -- whichever of the thread's connections answers first.
    return wrk.format("POST", "/v1/leases", post_headers,
      string.format('{"key":"bench/%s-a%d-t%d-%d","ttl":"1m"}', run, ti, id, counter))
  end
  function response(status, headers, body)
    if status == 201 then
      local lid = string.match(body, '"lease_id":"([^"]+)"')
      local ti = tonumber(string.match(body, '"key":"bench/[^"]*%-a(%d+)%-t'))
      if lid and ti then
        table.insert(releases, {tokens[ti], lid})
      end
    end
  end
end

if phase == "k" then
  function request()
    counter = counter + 1
    local l = leases[((counter + id * 7919) % #leases) + 1]
    get_headers["Authorization"] = l[1]
    return wrk.format("POST", "/v1/leases/" .. l[2] .. "/keepalive", get_headers)
  end
end

function done(summary, latency, requests)
  local e = summary.errors
  -- wrk counts every response with a status above 399 in errors.status
  -- (the routes measured answer no 1xx or 3xx).
  local bad = e.status
  io.write(string.format("RESULT requests=%d duration_us=%d p50_us=%d p99_us=%d non2xx=%d socket_errors=%d\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99), bad,
    e.connect + e.read + e.write + e.timeout))
end
