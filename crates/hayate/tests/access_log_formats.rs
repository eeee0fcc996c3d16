//! Access log formats and slow requests end to end (issue 41, parts 2 and
//! 3): GoAccess reads the `combined` log with its stock COMBINED format, a
//! template renders every variable over HTTP/1.1 and HTTP/2 (curl), a
//! header cannot forge a line, `ecs` lines parse as JSON with Elastic
//! Common Schema names, and a slow upstream request is logged at WARN and
//! counted in `hayate_upstream_response_seconds`.

// Tests block on purpose (they are clients, not the server).
#![allow(clippy::disallowed_methods)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;

use hayate_testkit::origin::{Origin, OriginOptions};
use hayate_testkit::{eventually, Hayate};

const BIN: &str = env!("CARGO_BIN_EXE_hayate");

/// hayate with `extra` options, one worker, its access log at
/// `dir/access.log`, files from `dir/site` at `/files/` and everything
/// else proxied to `origin`; the admin socket at `dir/admin.sock`, the
/// control socket at `dir/control.sock`.
fn start(dir: &Path, origin: &Origin, extra: &str) -> Hayate {
    let site = dir.join("site");
    std::fs::create_dir_all(&site).expect("site dir");
    std::fs::write(site.join("hello.txt"), "hello world\n").expect("file");
    Hayate::start_config(BIN, &dir.join("hayate.toml"), &config(dir, origin, extra))
}

/// The config [`start`] starts with.
fn config(dir: &Path, origin: &Origin, extra: &str) -> String {
    format!(
        "listen = [\"127.0.0.1:0\"]\nworkers = 1\naccess_log = \"{log}\"\n\
         admin = \"unix:{admin}\"\ncontrol = \"{control}\"\n{extra}\n\
         [[site]]\nproxy = [\"{origin}\"]\n\
         [[site.route]]\nprefix = \"/files/\"\nroot = \"{site}\"\nstrip_prefix = true\n",
        log = dir.join("access.log").display(),
        admin = dir.join("admin.sock").display(),
        control = dir.join("control.sock").display(),
        origin = origin.url(),
        site = dir.join("site").display(),
    )
}

/// Rewrites the config with `extra` and reloads it: whether the reload
/// took, and what `hayate reload` said.
fn reload(dir: &Path, origin: &Origin, extra: &str) -> (bool, String) {
    std::fs::write(dir.join("hayate.toml"), config(dir, origin, extra)).expect("write");
    hayate_testkit::run_to_end(
        Command::new(BIN)
            .args(["reload", "--control"])
            .arg(dir.join("control.sock")),
    )
}

/// The access log's lines once hayate has stopped (and flushed them).
fn stopped_log(h: &mut Hayate, dir: &Path) -> Vec<String> {
    assert!(h.stop().success());
    std::fs::read_to_string(dir.join("access.log"))
        .expect("access log")
        .lines()
        .map(str::to_string)
        .collect()
}

/// curl's status code for `path` on `h`, over h2c with prior knowledge
/// (`http2`) or HTTP/1.1, with `headers`.
fn curl(h: &Hayate, path: &str, http2: bool, headers: &[&str]) -> u16 {
    hayate_testkit::curl::status(h.addr.port(), path, http2, headers)
}

/// Sends `raw` on a connection of its own and reads the answer to its end.
fn raw_request(h: &Hayate, raw: &[u8]) -> String {
    let mut s = TcpStream::connect(h.addr).expect("connect");
    s.write_all(raw).expect("send");
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).expect("answer");
    String::from_utf8_lossy(&answer).into_owned()
}

#[test]
fn goaccess_reads_the_combined_log_with_its_stock_format() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = Origin::start(OriginOptions::default());
    let mut h = start(dir.path(), &o, "");
    let mut c = h.client();
    assert_eq!(c.get("/files/hello.txt", &[]).status, 200);
    assert_eq!(c.get("/status?code=404", &[]).status, 404);
    assert_eq!(
        c.get(
            "/echo?q=1",
            &[("Referer", "http://r.test/"), ("User-Agent", "ua/1")]
        )
        .status,
        200
    );
    assert_eq!(c.request("HEAD", "/files/hello.txt", &[]).status, 200);
    // A quote in a value is escaped (\x22): the line stays one GoAccess reads.
    assert_eq!(c.get("/echo", &[("User-Agent", "say \"hi\"")]).status, 200);
    assert_eq!(curl(&h, "/echo?h2", true, &[]), 200);
    drop(c);
    let lines = stopped_log(&mut h, dir.path());
    assert_eq!(lines.len(), 6, "{lines:#?}");
    assert!(lines[4].contains("\"say \\x22hi\\x22\""), "{}", lines[4]);
    let out = Command::new("goaccess")
        .arg(dir.path().join("access.log"))
        .args(["--log-format=COMBINED", "-o", "json", "--no-global-config"])
        .output()
        .expect("goaccess (installed by scripts/test)");
    assert!(out.status.success(), "{out:?}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("GoAccess's JSON");
    let general = &report["general"];
    assert_eq!(general["total_requests"], 6, "{general}");
    assert_eq!(general["valid_requests"], 6, "{general}");
    assert_eq!(general["failed_requests"], 0, "{general}");
    assert_eq!(general["unique_not_found"], 1, "{general}");
}

#[test]
fn a_template_renders_every_variable_over_http1_and_http2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = Origin::start(OriginOptions::default());
    let template = "$client_ip|$remote_user|$request|$request_method|$request_uri|$host|\
                    $status|$body_bytes_sent|$http_referer|$http_user_agent|$http_x_thing|\
                    $request_id|$trace_id|$route|$protocol|$tls_version|$cache|$request_time|\
                    $upstream_connect_time|$upstream_header_time|[$time_local]|$time_iso8601";
    let mut h = start(
        dir.path(),
        &o,
        &format!("access_log_format = \"{template}\""),
    );
    let headers = [
        "Authorization: Basic YWxpY2U6c2VjcmV0",
        "X-Thing: thing one",
        "Referer: http://r.test/",
        "User-Agent: ua/2",
    ];
    for http2 in [false, true] {
        assert_eq!(curl(&h, "/echo?a=%20b", http2, &headers), 200);
        assert_eq!(
            curl(&h, "/files/hello.txt", http2, &["X-Request-Id: mine-1"]),
            200
        );
    }
    let lines = stopped_log(&mut h, dir.path());
    assert_eq!(lines.len(), 4, "{lines:#?}");
    for (line, protocol) in lines
        .iter()
        .zip(["HTTP/1.1", "HTTP/1.1", "HTTP/2.0", "HTTP/2.0"])
    {
        let v: Vec<&str> = line.split('|').collect();
        assert_eq!(v.len(), 22, "{line}");
        assert_eq!(v[0], "127.0.0.1", "{line}");
        assert_eq!(v[12], "-", "no trace id until tracing: {line}");
        assert_eq!(v[14], protocol, "{line}");
        assert_eq!(v[15], "-", "plain HTTP: {line}");
        assert_eq!(v[16], "-", "no cache: {line}");
        assert!(
            v[17].len() == 5 && v[17].starts_with("0."),
            "seconds.ms: {line}"
        );
        assert!(
            v[20].starts_with('[') && v[20].ends_with(" +0000]"),
            "{line}"
        );
        assert!(v[21].ends_with('Z') && v[21].contains('T'), "{line}");
    }
    let (proxied, file) = (&lines[0], &lines[1]);
    let p: Vec<&str> = proxied.split('|').collect();
    let want = [
        "127.0.0.1",
        "alice",
        "GET /echo?a=%20b HTTP/1.1",
        "GET",
        "/echo?a=%20b",
        &format!("127.0.0.1:{}", h.addr.port()),
        "200",
    ];
    assert_eq!(&p[..7], &want[..], "{proxied}");
    assert!(p[7].parse::<u64>().expect("bytes") > 0, "{proxied}");
    assert_eq!(
        &p[8..11],
        ["http://r.test/", "ua/2", "thing one"],
        "{proxied}"
    );
    // hayate made the request's id (16 hex digits, as the origin got it).
    assert!(
        p[11].len() == 16 && p[11].bytes().all(|b| b.is_ascii_hexdigit()),
        "{proxied}"
    );
    assert_eq!(p[13], "*/", "{proxied}");
    for t in [p[18], p[19]] {
        assert!(
            t.len() == 5 && t.starts_with("0."),
            "upstream times: {proxied}"
        );
    }
    let f: Vec<&str> = file.split('|').collect();
    assert_eq!(
        &f[1..5],
        [
            "-",
            "GET /files/hello.txt HTTP/1.1",
            "GET",
            "/files/hello.txt"
        ]
    );
    assert_eq!(&f[6..8], ["200", "12"], "{file}");
    assert_eq!((f[8], f[10]), ("-", "-"), "{file}");
    assert!(f[9].starts_with("curl/"), "curl's own agent: {file}");
    assert_eq!(f[11], "mine-1", "the client's id: {file}");
    assert_eq!(f[13], "*/files/", "{file}");
    assert_eq!(&f[18..20], ["-", "-"], "no upstream: {file}");
    // HTTP/2: the same values, :authority as the host.
    let p2: Vec<&str> = lines[2].split('|').collect();
    assert_eq!(p2[2], "GET /echo?a=%20b HTTP/2.0", "{}", lines[2]);
    assert_eq!(&p2[8..11], ["http://r.test/", "ua/2", "thing one"]);
    assert_eq!(lines[3].split('|').nth(11), Some("mine-1"));
}

#[test]
fn header_bytes_cannot_forge_a_line_in_any_format() {
    for format in [
        "combined",
        "common",
        "json",
        "ecs",
        "$request \\\"$http_user_agent\\\" $http_x_a",
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let o = Origin::start(OriginOptions::default());
        let mut h = start(dir.path(), &o, &format!("access_log_format = \"{format}\""));
        // Quotes, a tab and bytes past ASCII (obs-text), and a value that
        // imitates the end of a line and the start of another. (CR, LF,
        // NUL and DEL never pass the parsers; the unit tests give the
        // formats every byte.)
        let forged = "x\" 200 0 \"-\" \"-\"\t\u{e9} 127.0.0.1 - - [x] \"GET /forged HTTP/1.1\"";
        let raw = format!(
            "GET /echo HTTP/1.1\r\nHost: h\r\nUser-Agent: {forged}\r\nX-A: {forged}\r\nReferer: {forged}\r\nConnection: close\r\n\r\n"
        );
        let answer = raw_request(&h, raw.as_bytes());
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        let lines = stopped_log(&mut h, dir.path());
        assert_eq!(lines.len(), 1, "{format}: {lines:#?}");
        let line = &lines[0];
        assert!(
            line.bytes().all(|b| (0x20..0x7f).contains(&b)),
            "{format}: {line}"
        );
        match format {
            "json" | "ecs" => {
                let v: serde_json::Value = serde_json::from_str(line).expect("one JSON object");
                let ua = if format == "ecs" {
                    &v["user_agent"]["original"]
                } else {
                    &v["user_agent"]
                };
                assert_eq!(
                    ua.as_str().map(|s| s.starts_with("x\" 200 0")),
                    Some(true),
                    "{line}"
                );
            }
            _ => {
                // Every quote left unescaped is one the format wrote.
                let quotes = line.matches('"').count();
                let written = match format {
                    "combined" => 6,
                    _ => 2,
                };
                assert_eq!(quotes, written, "{format}: {line}");
                if format != "common" {
                    assert!(
                        line.contains("x\\x22 200 0 \\x22-\\x22"),
                        "{format}: {line}"
                    );
                }
            }
        }
    }
}

#[test]
fn ecs_lines_are_json_with_elastic_common_schema_names() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = Origin::start(OriginOptions::default());
    let mut h = start(dir.path(), &o, "access_log_format = \"ecs\"");
    assert_eq!(
        curl(
            &h,
            "/echo?x=1",
            false,
            &["User-Agent: ua/3", "Referer: http://r/"]
        ),
        200
    );
    assert_eq!(curl(&h, "/files/hello.txt", true, &[]), 200);
    let lines = stopped_log(&mut h, dir.path());
    assert_eq!(lines.len(), 2, "{lines:#?}");
    let docs: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).expect("a JSON object per line"))
        .collect();
    let field = |d: &serde_json::Value, path: &str| -> serde_json::Value {
        path.split('.').fold(d.clone(), |v, k| v[k].clone())
    };
    for d in &docs {
        assert!(
            field(d, "@timestamp")
                .as_str()
                .is_some_and(|t| t.ends_with('Z')),
            "{d}"
        );
        assert_eq!(field(d, "ecs.version"), "8.11.0");
        assert_eq!(field(d, "client.ip"), "127.0.0.1");
        assert_eq!(field(d, "http.request.method"), "GET");
        assert_eq!(field(d, "http.response.status_code"), 200);
        assert!(
            field(d, "event.duration").as_u64().is_some_and(|ns| ns > 0),
            "{d}"
        );
    }
    let (proxied, file) = (&docs[0], &docs[1]);
    assert_eq!(field(proxied, "url.original"), "/echo?x=1");
    assert_eq!(field(proxied, "http.version"), "1.1");
    assert_eq!(field(proxied, "user_agent.original"), "ua/3");
    assert_eq!(field(proxied, "http.request.referrer"), "http://r/");
    assert_eq!(
        field(proxied, "http.request.id").as_str().map(str::len),
        Some(16)
    );
    assert!(field(proxied, "http.response.body.bytes").as_u64() > Some(0));
    assert_eq!(field(proxied, "hayate.route"), "*/");
    assert!(field(proxied, "hayate.upstream.header_time").is_number());
    assert_eq!(field(file, "http.version"), "2");
    assert_eq!(field(file, "http.response.body.bytes"), 12);
    assert_eq!(field(file, "hayate.route"), "*/files/");
    assert!(field(file, "hayate.upstream").is_null(), "{file}");
}

#[test]
fn a_slow_upstream_request_is_logged_at_warn_and_counted_per_member() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = Origin::start(OriginOptions::default());
    let mut h = start(
        dir.path(),
        &o,
        "slow_request = \"100ms\"\naccess_log_format = \"common\"",
    );
    let mut c = h.client();
    // The origin takes 150 ms over this one: slow; the others are fast.
    assert_eq!(
        c.get("/slow?ms=150", &[("X-Request-Id", "slow-1")]).status,
        200
    );
    assert_eq!(c.get("/echo", &[]).status, 200);
    assert_eq!(c.get("/files/hello.txt", &[]).status, 200);
    drop(c);
    let warn = eventually("the slow request's line", || {
        let err = h.stderr();
        err.lines()
            .find(|l| l.contains("slow request:"))
            .map(str::to_string)
            .ok_or(err)
    });
    assert!(warn.contains("WARN"), "{warn}");
    for part in [
        "ms total (upstream connect ",
        "GET /slow?ms=150 from 127.0.0.1",
        "route */,",
        "status 200",
        "request id slow-1",
    ] {
        assert!(warn.contains(part), "{part:?} in {warn}");
    }
    let head_ms: f64 = warn
        .split("upstream head ")
        .nth(1)
        .and_then(|s| s.split(" ms").next())
        .and_then(|s| s.parse().ok())
        .expect("the head's time");
    assert!(head_ms >= 150.0, "{warn}");
    assert_eq!(
        h.stderr().matches("slow request:").count(),
        1,
        "{}",
        h.stderr()
    );
    // Both proxied requests in the member's histogram (figures published
    // once a second), the slow one past 0.1 s.
    let member = o.url();
    let metrics = eventually("the histogram", || {
        let text = hayate_testkit::unix_get(&dir.path().join("admin.sock"), "/metrics");
        text.contains(&format!(
            "hayate_upstream_response_seconds_count{{site=\"*\",route=\"/\",member=\"{member}\"}} 2\n"
        ))
        .then_some(text.clone())
        .ok_or(text)
    });
    for line in [
        format!("hayate_upstream_response_seconds_bucket{{site=\"*\",route=\"/\",member=\"{member}\",le=\"0.1\"}} 1\n"),
        format!("hayate_upstream_response_seconds_bucket{{site=\"*\",route=\"/\",member=\"{member}\",le=\"+Inf\"}} 2\n"),
        "# TYPE hayate_upstream_response_seconds histogram\n".to_string(),
    ] {
        assert!(metrics.contains(&line), "{line:?} in\n{metrics}");
    }
    let lines = stopped_log(&mut h, dir.path());
    assert_eq!(lines.len(), 3, "{lines:#?}");
    h.assert_no_errors();
}

#[test]
fn a_reload_changes_the_format_and_slow_request_and_a_bad_template_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = Origin::start(OriginOptions::default());
    let mut h = start(dir.path(), &o, "");
    assert_eq!(curl(&h, "/echo?before", false, &[]), 200);
    let (ok, said) = reload(
        dir.path(),
        &o,
        "access_log_format = \"$status $route $request_uri\"\nslow_request = \"50ms\"",
    );
    assert!(ok, "{said}");
    // Over HTTP/2 this time: its exchanges are checked the same way.
    assert_eq!(curl(&h, "/slow?ms=80", true, &[]), 200);
    eventually("the slow request's line", || {
        let err = h.stderr();
        err.contains("slow request:").then_some(()).ok_or(err)
    });
    let (ok, said) = reload(dir.path(), &o, "access_log_format = \"$status $nope\"");
    assert!(!ok, "{said}");
    assert!(
        said.contains("hayate.toml:") && said.contains("unknown variable $nope"),
        "file:line and the variable: {said}"
    );
    assert_eq!(curl(&h, "/echo?after", false, &[]), 200);
    let lines = stopped_log(&mut h, dir.path());
    assert_eq!(lines.len(), 3, "{lines:#?}");
    assert!(
        lines[0].contains("\"GET /echo?before HTTP/1.1\" 200 "),
        "{}",
        lines[0]
    );
    assert_eq!(lines[1], "200 */ /slow?ms=80");
    assert_eq!(lines[2], "200 */ /echo?after", "the running format stays");
}
