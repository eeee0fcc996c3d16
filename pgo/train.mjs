// The training run of a profile-guided build (pgo/build): drives a hayate
// binary through the paths a deployment spends its time in, so that the
// compiler lays out and inlines for them. What is not run here is compiled
// as cold code (smaller, slower), so every protocol and feature a front
// serves under load is here: static files (304, ranges, precompressed and
// compressed-once variants, a large file), the proxy over TCP and a Unix
// socket (GET, POST with a body, on-the-fly compression), cache hits, HTTPS
// with HTTP/1.1 and HTTP/2, h2c, FastCGI, a site with rules and an
// X-Accel-Redirect route, and HTTP/3 when a client for it is given.
//
// usage: node pgo/train.mjs HAYATE_BIN [--seconds S] [--h3load H3LOAD_BIN]
//   S: seconds per phase (default 3; eleven phases, thirteen with HTTP/3).
//   Every answer is checked: a wrong status or body ends the run with an
//   error, so a profile is never taken from a hayate that failed its
//   requests.
//
// Node only (http, https, http2 are built in) but for HTTP/3: the training
// needs no tool a fresh machine lacks.
import { spawn } from "node:child_process";
import { mkdtempSync, mkdirSync, writeFileSync, readFileSync, rmSync, existsSync } from "node:fs";
import http from "node:http";
import https from "node:https";
import http2 from "node:http2";
import net from "node:net";
import os from "node:os";
import path from "node:path";

const args = process.argv.slice(2);
const bin = args[0];
if (!bin) {
    console.error("usage: node pgo/train.mjs HAYATE_BIN [--seconds S]");
    process.exit(2);
}
const si = args.indexOf("--seconds");
const SECONDS = si >= 0 ? Number(args[si + 1]) : 3;
// bench/h3load (quic-go's HTTP/3 client; pgo/build builds it where Go is):
// without it HTTP/3 is not trained, and its code is compiled as cold.
const hi = args.indexOf("--h3load");
const H3LOAD = hi >= 0 ? args[hi + 1] : null;
if (!(SECONDS > 0)) {
    console.error(`--seconds: not a positive number: ${args[si + 1]}`);
    process.exit(2);
}
// Connections per phase: enough that hayate's event loop serves many
// ready connections per wake-up, as under load.
const CONNS = 32;
// A request not answered by then fails the run: it ends, never hangs.
const ANSWER_WITHIN = 10_000;

const tmp = mkdtempSync(path.join(os.tmpdir(), "hayate-pgo-"));
const children = [];
function cleanup() {
    for (const c of children) if (c.exitCode === null) c.kill("SIGTERM");
}
process.on("exit", () => {
    cleanup();
    rmSync(tmp, { recursive: true, force: true });
});
for (const sig of ["SIGINT", "SIGTERM"]) process.on(sig, () => process.exit(1));

function fail(what) {
    console.error(`pgo/train: ${what}`);
    process.exit(1);
}

// ---------------------------------------------------------------- content

const site = path.join(tmp, "site");
mkdirSync(path.join(site, "assets"), { recursive: true });
const text1k = "hayate ".repeat(147).slice(0, 1024);
writeFileSync(path.join(site, "1k.txt"), text1k);
const page = "<!doctype html><title>t</title>" + "<p>a swift wind over the fields</p>\n".repeat(240);
writeFileSync(path.join(site, "page.html"), page);
writeFileSync(path.join(site, "assets", "app.js"), "function f(x){return x+1}\n".repeat(400));
const big = Buffer.alloc(1 << 20, 7);
writeFileSync(path.join(site, "big.bin"), big);

// ---------------------------------------------------------------- the app

const json = JSON.stringify({ items: Array.from({ length: 80 }, (_, i) => ({ id: i, name: `item ${i}` })) });
function app(req, res) {
    if (req.method === "POST") {
        const parts = [];
        req.on("data", (d) => parts.push(d));
        req.on("end", () => {
            const body = Buffer.concat(parts);
            res.writeHead(200, { "Content-Type": "application/octet-stream", "Content-Length": body.length });
            res.end(body);
        });
        return;
    }
    if (req.url.startsWith("/api/json")) {
        res.writeHead(200, { "Content-Type": "application/json" });
        res.end(json);
    } else if (req.url.startsWith("/download")) {
        // The front serves the file it names from an internal route.
        res.writeHead(200, { "Content-Type": "text/plain", "X-Accel-Redirect": "/protected/1k.txt" });
        res.end();
    } else if (req.url.startsWith("/cached")) {
        res.writeHead(200, { "Content-Type": "text/plain", "Cache-Control": "public, max-age=3600" });
        res.end(text1k);
    } else {
        res.writeHead(200, { "Content-Type": "text/plain", "Content-Length": 1024 });
        res.end(text1k);
    }
}
function listen(server, where) {
    return new Promise((resolve, reject) => {
        server.once("error", reject);
        server.listen(where, () => resolve(server.address()));
    });
}
const appTcp = http.createServer({ keepAliveTimeout: 60_000 }, app);
const appPort = (await listen(appTcp, { host: "127.0.0.1", port: 0 })).port;
const appSock = path.join(tmp, "app.sock");
const appUnix = http.createServer({ keepAliveTimeout: 60_000 }, app);
await listen(appUnix, appSock);

// A FastCGI responder (the records of the FastCGI 1.0 specification, as
// php-fpm speaks them): every request gets the 1 KiB text. It stands in for
// php-fpm, which a fresh machine does not have; hayate's side of the
// exchange is the same.
const FCGI = { BEGIN: 1, END: 3, PARAMS: 4, STDIN: 5, STDOUT: 6 };
function fcgiRecord(type, id, content) {
    const head = Buffer.alloc(8);
    head.writeUInt8(1, 0);
    head.writeUInt8(type, 1);
    head.writeUInt16BE(id, 2);
    head.writeUInt16BE(content.length, 4);
    return Buffer.concat([head, content]);
}
const fcgiAnswer = Buffer.from(`Status: 200 OK\r\nContent-Type: text/plain\r\n\r\n${text1k}`);
function fastcgi(socket) {
    let buf = Buffer.alloc(0);
    let keep = true;
    socket.on("data", (d) => {
        buf = Buffer.concat([buf, d]);
        while (buf.length >= 8) {
            const len = buf.readUInt16BE(4);
            const total = 8 + len + buf.readUInt8(6);
            if (buf.length < total) break;
            const type = buf.readUInt8(1);
            const id = buf.readUInt16BE(2);
            if (type === FCGI.BEGIN) keep = (buf.readUInt8(10) & 1) === 1;
            if (type === FCGI.STDIN && len === 0) {
                const end = Buffer.alloc(8);
                socket.write(Buffer.concat([
                    fcgiRecord(FCGI.STDOUT, id, fcgiAnswer),
                    fcgiRecord(FCGI.STDOUT, id, Buffer.alloc(0)),
                    fcgiRecord(FCGI.END, id, end),
                ]));
                if (!keep) socket.end();
            }
            buf = buf.subarray(total);
        }
    });
    socket.on("error", () => {});
}
const fcgiSock = path.join(tmp, "fcgi.sock");
await listen(net.createServer(fastcgi), fcgiSock);
writeFileSync(path.join(site, "index.php"), "<?php // answered by the training's FastCGI responder\n");

// ---------------------------------------------------------------- hayate

async function freePort() {
    const s = net.createServer();
    const { port } = await listen(s, { host: "127.0.0.1", port: 0 });
    await new Promise((r) => s.close(r));
    return port;
}

async function startHayate(name, argv, probe) {
    const child = spawn(bin, argv, { stdio: ["ignore", "ignore", "pipe"] });
    children.push(child);
    let stderr = "";
    child.stderr.on("data", (d) => (stderr += d));
    const deadline = Date.now() + 30_000;
    for (;;) {
        if (child.exitCode !== null) fail(`${name} exited (${child.exitCode}): ${stderr}`);
        try {
            await probe();
            return child;
        } catch {
            if (Date.now() > deadline) fail(`${name} did not answer within 30 s: ${stderr}`);
            await new Promise((r) => setTimeout(r, 100));
        }
    }
}

function stop(child) {
    return new Promise((resolve) => {
        if (child.exitCode !== null) return resolve();
        child.once("exit", resolve);
        child.kill("SIGTERM");
    });
}

// ---------------------------------------------------------------- clients

// One HTTP/1.1 request on a keep-alive agent; resolves to [status, headers, body].
function h1(mod, agent, port, opts, body) {
    return new Promise((resolve, reject) => {
        const req = mod.request(
            { host: "127.0.0.1", port, agent, servername: "localhost", ...opts },
            (res) => {
                const parts = [];
                res.on("data", (d) => parts.push(d));
                res.on("end", () => resolve([res.statusCode, res.headers, Buffer.concat(parts)]));
                res.on("error", reject);
            },
        );
        req.on("error", reject);
        req.setTimeout(ANSWER_WITHIN, () => req.destroy(new Error(`no answer within ${ANSWER_WITHIN} ms`)));
        req.end(body);
    });
}

function h2(session, headers, body) {
    return new Promise((resolve, reject) => {
        const stream = session.request(headers, { endStream: body === undefined });
        let status = 0;
        let resHeaders = {};
        const parts = [];
        stream.on("response", (h) => {
            status = h[":status"];
            resHeaders = h;
        });
        stream.on("data", (d) => parts.push(d));
        stream.on("end", () => resolve([status, resHeaders, Buffer.concat(parts)]));
        stream.on("error", reject);
        stream.setTimeout(ANSWER_WITHIN, () => reject(new Error(`no answer within ${ANSWER_WITHIN} ms`)));
        if (body !== undefined) stream.end(body);
    });
}

// Runs `request(i)` from CONNS loops for SECONDS; every answer is checked by
// `check`. Returns the number of requests.
async function phase(name, request, check, conns = CONNS) {
    const until = Date.now() + SECONDS * 1000;
    let count = 0;
    await Promise.all(
        Array.from({ length: conns }, async (_, loop) => {
            let i = loop;
            while (Date.now() < until) {
                const answer = await request(i).catch((e) => fail(`${name}: ${e.message}`));
                const wrong = check(answer, i);
                if (wrong) fail(`${name}: ${wrong}`);
                count++;
                i += conns;
            }
        }),
    );
    if (count === 0) fail(`${name}: no request was answered in ${SECONDS} s`);
    console.log(`pgo/train: ${name}: ${count} requests`);
    return count;
}

const expect = (status, len) => ([s, , b]) =>
    s !== status ? `status ${s}, expected ${status}` : len !== undefined && b.length !== len ? `${b.length} bytes, expected ${len}` : null;

// ---------------------------------------------------------------- phases

const plain = await freePort();
const tls = await freePort();
const state = path.join(tmp, "state");
const front = await startHayate(
    "front",
    [site, "--listen", `127.0.0.1:${plain}`, "--listen", `https://127.0.0.1:${tls}`, "--tls", "internal",
     "--state-dir", state, "--https-redirect=false", "--workers", "1",
     "--access-log", path.join(tmp, "access.log"), "--proxy", `http://127.0.0.1:${appPort}`,
     ...(H3LOAD ? ["--http3", "true"] : [])],
    () => h1(http, undefined, plain, { path: "/1k.txt" }).then(([s]) => s === 200 || Promise.reject()),
);
const caPath = path.join(state, "local-ca", "ca.crt");
if (!existsSync(caPath)) fail(`no local CA at ${caPath}`);
const ca = readFileSync(caPath);

const agent = new http.Agent({ keepAlive: true, maxSockets: CONNS });
const get = (p, headers = {}) => h1(http, agent, plain, { path: p, headers });

// Static files: a small file, conditional and range requests, compression.
const etag = (await get("/1k.txt"))[1].etag;
await phase("static 1 KiB", () => get("/1k.txt"), expect(200, 1024));
await phase(
    "static mixed",
    (i) => [
        () => get("/page.html", { "accept-encoding": "br, gzip" }),
        () => get("/assets/app.js", { "accept-encoding": "gzip" }),
        () => get("/1k.txt", { "if-none-match": etag }),
        () => h1(http, agent, plain, { path: "/1k.txt", method: "HEAD" }),
        () => get("/big.bin", { range: "bytes=100-4195" }),
        () => get("/big.bin"),
        () => get("/missing.txt"),
    ][i % 7](),
    ([s], i) => (s === [200, 200, 304, 200, 206, 200, 200][i % 7] ? null : `static mixed ${i % 7}: status ${s}`),
);

// The proxy over TCP: the app's answer, a POST with a body, compression on the fly.
const post = Buffer.alloc(2048, 97);
await phase("proxied GET", () => get("/"), expect(200, 1024));
await phase(
    "proxied mixed",
    (i) => [
        () => h1(http, agent, plain, { path: "/api/echo", method: "POST", headers: { "content-type": "text/plain" } }, post),
        () => get("/api/json", { "accept-encoding": "gzip, br" }),
        () => get("/api/json"),
    ][i % 3](),
    ([s, , b], i) => (s !== 200 ? `proxied mixed ${i % 3}: status ${s}` : i % 3 === 0 && b.length !== post.length ? "echo length" : null),
);

// HTTPS: HTTP/1.1 and HTTP/2 (ALPN), static and proxied; h2c on the plain listener.
const tlsAgent = new https.Agent({ keepAlive: true, maxSockets: CONNS, ca });
await phase(
    "https/1.1",
    (i) => h1(https, tlsAgent, tls, { path: i % 2 ? "/1k.txt" : "/", ca }),
    expect(200, 1024),
);
const sessions = await Promise.all(
    Array.from({ length: 4 }, () => {
        const s = http2.connect(`https://localhost:${tls}`, { ca, host: "127.0.0.1", servername: "localhost" });
        s.on("error", (e) => fail(`h2 session: ${e.message}`));
        return s;
    }),
);
await phase(
    "https/2",
    (i) => h2(sessions[i % 4], { ":path": i % 2 ? "/1k.txt" : "/", ":method": "GET" }),
    expect(200, 1024),
);
for (const s of sessions) s.close();
// HTTP/3 on the same listener's UDP port: a file and the proxy.
async function h3phase(name, p) {
    const [code, text] = await new Promise((resolve) => {
        const argv = ["-ca", caPath, "-c", "4", "-m", "8", "-d", String(SECONDS), `https://127.0.0.1:${tls}${p}`];
        const c = spawn(H3LOAD, argv, { stdio: ["ignore", "pipe", "pipe"] });
        let out = "";
        c.stdout.on("data", (d) => (out += d));
        c.stderr.on("data", (d) => (out += d));
        const killer = setTimeout(() => c.kill("SIGKILL"), SECONDS * 1000 + ANSWER_WITHIN);
        c.on("error", (e) => resolve([-1, e.message]));
        c.on("exit", (code) => {
            clearTimeout(killer);
            resolve([code, out]);
        });
    });
    const m = /(\d+) succeeded, (\d+) failed, (\d+) errored/.exec(text);
    if (code !== 0 || !m || m[1] === "0" || m[2] !== "0" || m[3] !== "0") fail(`${name}: ${text.trim()}`);
    console.log(`pgo/train: ${name}: ${m[1]} requests`);
}
if (H3LOAD) {
    await h3phase("http/3 static", "/1k.txt");
    await h3phase("http/3 proxied", "/");
}
const h2c = http2.connect(`http://127.0.0.1:${plain}`);
h2c.on("error", (e) => fail(`h2c session: ${e.message}`));
await phase("h2c", (i) => h2(h2c, { ":path": i % 2 ? "/page.html" : "/api/json", "accept-encoding": "gzip" }), expect(200));
h2c.close();
agent.destroy();
tlsAgent.destroy();
await stop(front);

// The proxy over a Unix socket, as the lab measures it (no access log),
// FastCGI, then cache hits.
const empty = path.join(tmp, "empty");
mkdirSync(empty);
// One hayate serving `root` with `flags` (its upstream), probed at `p`,
// while `run` sends it requests.
async function backend(name, root, flags, p, run) {
    const port = await freePort();
    const child = await startHayate(
        name,
        [root, "--listen", `127.0.0.1:${port}`, "--workers", "1", "--access-log", "off", ...flags],
        () => h1(http, undefined, port, { path: p }).then(([s]) => s === 200 || Promise.reject()),
    );
    const a = new http.Agent({ keepAlive: true, maxSockets: CONNS });
    await run((q) => h1(http, a, port, { path: q }));
    a.destroy();
    await stop(child);
}
await backend("unix", empty, ["--proxy", `unix:${appSock}`], "/", (req) =>
    phase("proxied unix", () => req("/"), expect(200, 1024)),
);
// FastCGI: the front controller (index.php) for a path that is no file.
await backend("fastcgi", site, ["--fastcgi", `unix:${fcgiSock}`], "/app", (req) =>
    phase("fastcgi", (i) => req(`/app/item/${i}`), expect(200, 1024)),
);
// A site with rules a request passes through (5 prefix redirects, 10
// regex ones, header rules, as the lab's case R) and an internal route the
// app hands files to with X-Accel-Redirect (case X).
const rules = path.join(tmp, "rules.toml");
writeFileSync(
    rules,
    [
        "[[site]]",
        `proxy = ["http://127.0.0.1:${appPort}"]`,
        'response_headers = { "X-Frame-Options" = "DENY", "-X-Powered-By" = "", "?Cache-Control" = "no-cache" }',
        ...Array.from({ length: 5 }, (_, i) => `[[site.rule]]\nprefix = "/old${i}/"\nredirect_prefix = "/new${i}/"`),
        ...Array.from({ length: 10 }, (_, i) => `[[site.rule]]\nmatch = "^/blog${i}/(\\\\d+)/?$"\nredirect = "/posts${i}/$1"`),
        "[[site.route]]",
        'prefix = "/protected/"',
        `root = ${JSON.stringify(site)}`,
        "strip_prefix = true",
        "internal = true",
        "",
    ].join("\n"),
);
await backend("rules", empty, ["--config", rules], "/", (req) =>
    phase(
        "site rules, X-Accel-Redirect",
        (i) => [() => req("/"), () => req("/download"), () => req(`/blog${i % 10}/${i}`)][i % 3](),
        ([s, , b], i) =>
            [s === 200 && b.length === 1024, s === 200 && b.length === 1024, s === 302][i % 3]
                ? null
                : `site rules ${i % 3}: status ${s}, ${b.length} bytes`,
    ),
);
await backend("cache", empty, ["--proxy", `http://127.0.0.1:${appPort}`, "--cache", "1h"], "/cached", (req) =>
    phase("cache hit", (i) => req(`/cached?k=${i % 16}`), expect(200, 1024)),
);

appTcp.close();
appUnix.close();
for (const c of children) {
    if (c.exitCode !== 0 && c.signalCode === null) fail(`a hayate exited with ${c.exitCode}`);
}
console.log("pgo/train: done");
process.exit(0);
