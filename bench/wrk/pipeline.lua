-- Pipelined mode: every send carries DEPTH requests (default 16) for wrk's URL path.
-- usage: wrk ... -s pipeline.lua URL -- [DEPTH]
-- done() prints the same machine-readable line as summary.lua.
local req

init = function(args)
   local depth = tonumber(args[1] or "16")
   local r = {}
   for i = 1, depth do
      r[i] = wrk.format(nil, wrk.path)
   end
   req = table.concat(r)
end

request = function()
   return req
end

done = function(summary, latency, requests)
   local e = summary.errors
   io.write(string.format(
      "WRK_RESULT requests=%d duration_us=%d bytes=%d connect=%d read=%d write=%d status=%d timeout=%d"
      .. " lat_mean_us=%.0f lat_p50_us=%d lat_p99_us=%d lat_max_us=%d\n",
      summary.requests, summary.duration, summary.bytes,
      e.connect, e.read, e.write, e.status, e.timeout,
      latency.mean, latency:percentile(50), latency:percentile(99), latency.max))
end
