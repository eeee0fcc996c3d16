// A Node HTTP app traced by OpenTelemetry's SDK, for crates/hayate/tests/tracing.rs.
//   node app.js OTLP_HTTP_URL [--h2c] (http://127.0.0.1:PORT/v1/traces)
// prints "listening PORT" (127.0.0.1, a free port); every request is answered
// with the traceparent it came with, and the instrumentation's SERVER span,
// a child of that traceparent, is exported at once (SimpleSpanProcessor).
// With --h2c it serves HTTP/2 with prior knowledge instead (not traced: the
// http instrumentation does not cover http2), to show what reached it.
'use strict';
const { NodeTracerProvider } = require('@opentelemetry/sdk-trace-node');
const { SimpleSpanProcessor } = require('@opentelemetry/sdk-trace-base');
const { OTLPTraceExporter } = require('@opentelemetry/exporter-trace-otlp-proto');
const { resourceFromAttributes } = require('@opentelemetry/resources');
const { registerInstrumentations } = require('@opentelemetry/instrumentation');
const { HttpInstrumentation } = require('@opentelemetry/instrumentation-http');

const exporter = new OTLPTraceExporter({ url: process.argv[2] });
const provider = new NodeTracerProvider({
  resource: resourceFromAttributes({ 'service.name': 'node-app' }),
  spanProcessors: [new SimpleSpanProcessor(exporter)],
});
provider.register();
registerInstrumentations({ instrumentations: [new HttpInstrumentation()] });

// Required after the instrumentation is registered, so it is patched.
const http = require('http');
const http2 = require('http2');
const serve = process.argv.includes('--h2c') ? http2.createServer : http.createServer;
const server = serve((req, res) => {
  res.setHeader('content-type', 'application/json');
  res.end(JSON.stringify({ traceparent: req.headers.traceparent || null }));
});
server.listen(0, '127.0.0.1', () => console.log(`listening ${server.address().port}`));
