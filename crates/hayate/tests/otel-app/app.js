// A Node HTTP app traced by OpenTelemetry's SDK, for crates/hayate/tests/tracing.rs.
//   node app.js OTLP_HTTP_URL        (http://127.0.0.1:PORT/v1/traces)
// prints "listening PORT" (127.0.0.1, a free port); every request is answered
// with the traceparent it came with, and the instrumentation's SERVER span,
// a child of that traceparent, is exported at once (SimpleSpanProcessor); it
// prints "exported TRACE_ID" once the collector took it.
'use strict';
const { NodeTracerProvider } = require('@opentelemetry/sdk-trace-node');
const { SimpleSpanProcessor } = require('@opentelemetry/sdk-trace-base');
const { OTLPTraceExporter } = require('@opentelemetry/exporter-trace-otlp-proto');
const { resourceFromAttributes } = require('@opentelemetry/resources');
const { registerInstrumentations } = require('@opentelemetry/instrumentation');
const { HttpInstrumentation } = require('@opentelemetry/instrumentation-http');

const exporter = new OTLPTraceExporter({ url: process.argv[2] });
// Says when each span reached the collector.
const exportSpans = exporter.export.bind(exporter);
exporter.export = (spans, done) =>
  exportSpans(spans, (result) => {
    if (result.code === 0) {
      for (const s of spans) console.log(`exported ${s.spanContext().traceId}`);
    }
    done(result);
  });
const provider = new NodeTracerProvider({
  resource: resourceFromAttributes({ 'service.name': 'node-app' }),
  spanProcessors: [new SimpleSpanProcessor(exporter)],
});
provider.register();
registerInstrumentations({ instrumentations: [new HttpInstrumentation()] });

// Required after the instrumentation is registered, so it is patched.
const http = require('http');
const server = http.createServer((req, res) => {
  res.setHeader('content-type', 'application/json');
  res.end(JSON.stringify({ traceparent: req.headers.traceparent || null }));
});
server.listen(0, '127.0.0.1', () => console.log(`listening ${server.address().port}`));
