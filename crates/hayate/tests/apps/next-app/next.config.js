// No telemetry, no image optimizer: a test build.
module.exports = { images: { unoptimized: true } };
