-- Keep-alive mode: wrk's own static request, no Lua per request.
-- done() prints one machine-readable line (counters and latency in µs) that bench/lib.sh
-- and bench/lablib.py parse.
done = function(summary, latency, requests)
   local e = summary.errors
   io.write(string.format(
      "WRK_RESULT requests=%d duration_us=%d bytes=%d connect=%d read=%d write=%d status=%d timeout=%d"
      .. " lat_mean_us=%.0f lat_p50_us=%d lat_p99_us=%d lat_max_us=%d\n",
      summary.requests, summary.duration, summary.bytes,
      e.connect, e.read, e.write, e.status, e.timeout,
      latency.mean, latency:percentile(50), latency:percentile(99), latency.max))
end
