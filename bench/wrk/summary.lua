-- Keep-alive mode: wrk's own static request, no Lua per request.
-- done() prints one machine-readable line that bench/lib.sh parses.
done = function(summary, latency, requests)
   local e = summary.errors
   io.write(string.format(
      "WRK_RESULT requests=%d duration_us=%d bytes=%d connect=%d read=%d write=%d status=%d timeout=%d\n",
      summary.requests, summary.duration, summary.bytes,
      e.connect, e.read, e.write, e.status, e.timeout))
end
