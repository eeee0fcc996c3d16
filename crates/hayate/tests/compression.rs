//! Compression end to end: files compressed once in the background (identity
//! first, the variant once it is ready), proxied bodies compressed as they
//! stream, and the metadata around them (Vary, ETag per coding, 304, 206,
//! HEAD), negotiation by q-values, and what is never compressed. Every
//! compressed body is decoded with the same crates' decoders and compared
//! with the original bytes.

// Tests poll with short sleeps (they are clients, not the server).
#![allow(clippy::disallowed_methods)]

use std::path::Path;
use std::time::Duration;

use hayate_compress::encode::decompress;
use hayate_core::Coding;
use hayate_testkit::{site, text_bytes, Client, Hayate, Origin, OriginOptions, Response};

const BIN: &str = env!("CARGO_BIN_EXE_hayate");

const CODINGS: [(Coding, &str, &str); 3] = [
    (Coding::Br, "br", "-br\""),
    (Coding::Zstd, "zstd", "-zst\""),
    (Coding::Gzip, "gzip", "-gz\""),
];

fn serve(root: &Path, args: &[&str]) -> Hayate {
    let mut all = vec![root.to_str().expect("utf8 path")];
    all.extend_from_slice(args);
    Hayate::start(BIN, &all)
}

fn ae(v: &str) -> [(&str, &str); 1] {
    [("Accept-Encoding", v)]
}

/// GETs `path` until the response is encoded with `coding` (at most ~3 s).
fn until_encoded(c: &mut Client, path: &str, coding: &str) -> Response {
    for _ in 0..150 {
        let r = c.get(path, &ae(coding));
        assert_eq!(r.status, 200);
        if r.header("content-encoding") == Some(coding) {
            return r;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("{path} never came {coding}-encoded");
}

/// Asserts two bodies are equal without printing megabytes when not.
fn same(got: &[u8], want: &[u8], label: &str) {
    if got != want {
        let at = got.iter().zip(want).position(|(a, b)| a != b);
        panic!(
            "{label}: body of {} bytes, want {}; first difference at {at:?}",
            got.len(),
            want.len()
        );
    }
}

/// The body decoded per its Content-Encoding.
fn decoded(r: &Response) -> Vec<u8> {
    let coding = match r.header("content-encoding") {
        None => Coding::Identity,
        Some(t) => Coding::from_token(t.as_bytes()).expect("known coding"),
    };
    decompress(coding, &r.body).expect("decodes")
}

#[test]
fn files_are_served_identity_first_then_compressed_once_per_coding() {
    let dir = site();
    let js = text_bytes(100 * 1024);
    for (_, name, _) in CODINGS {
        std::fs::write(dir.path().join(format!("app-{name}.js")), &js).expect("write");
    }
    let h = serve(dir.path(), &["--workers", "2"]);
    let mut c = h.client();
    for (_, name, suffix) in CODINGS {
        let path = format!("/app-{name}.js");
        let first = c.get(&path, &ae(name));
        assert_eq!(first.status, 200);
        assert_eq!(first.header("content-encoding"), None, "no request waits");
        same(&first.body, &js, "first response");
        assert_eq!(first.header("vary"), Some("Accept-Encoding"));
        let id_tag = first.header("etag").expect("etag").to_string();

        let r = until_encoded(&mut c, &path, name);
        same(&decoded(&r), &js, name);
        assert!(r.body.len() < js.len() / 4, "{name}: {}", r.body.len());
        assert_eq!(r.header("content-length"), Some(&*r.body.len().to_string()));
        assert_eq!(r.header("vary"), Some("Accept-Encoding"));
        let tag = r.header("etag").expect("etag").to_string();
        assert_eq!(tag, format!("{}{suffix}", id_tag.trim_end_matches('"')));
        assert_eq!(r.header("content-type"), first.header("content-type"));

        // Every worker serves the same variant (compressed once per process).
        for _ in 0..4 {
            let mut other = h.client();
            let again = until_encoded(&mut other, &path, name);
            assert_eq!((again.header("etag"), &again.body), (Some(&*tag), &r.body));
        }

        // 304 for this coding's tag, with Vary; identity's tag no longer
        // matches the coded representation.
        let nm = c.get(&path, &[("Accept-Encoding", name), ("If-None-Match", &tag)]);
        assert_eq!(
            (nm.status, nm.header("vary")),
            (304, Some("Accept-Encoding"))
        );
        assert_eq!(nm.header("etag"), Some(&*tag));
        let nm = c.get(
            &path,
            &[("Accept-Encoding", name), ("If-None-Match", &id_tag)],
        );
        assert_eq!(nm.status, 200);
        let nm = c.get(&path, &[("If-None-Match", &id_tag)]);
        assert_eq!(
            (nm.status, nm.header("vary")),
            (304, Some("Accept-Encoding"))
        );

        // A range is of the compressed bytes.
        let part = c.get(&path, &[("Accept-Encoding", name), ("Range", "bytes=0-9")]);
        assert_eq!(part.status, 206);
        assert_eq!(part.body, r.body[..10]);
        assert_eq!(part.header("content-encoding"), Some(name));
        assert_eq!(part.header("vary"), Some("Accept-Encoding"));
        let total = format!("bytes 0-9/{}", r.body.len());
        assert_eq!(part.header("content-range"), Some(&*total));
        // If-Range with the coded tag keeps the range.
        let part = c.get(
            &path,
            &[
                ("Accept-Encoding", name),
                ("Range", "bytes=5-"),
                ("If-Range", &tag),
            ],
        );
        assert_eq!((part.status, &part.body[..]), (206, &r.body[5..]));

        // HEAD announces the coded length.
        let head = c.request("HEAD", &path, &ae(name));
        assert_eq!(head.header("content-length"), r.header("content-length"));
        assert_eq!(head.header("content-encoding"), Some(name));
    }
    drop(c);
    let mut h = h;
    h.stop();
    // Compressed once per process, not once per worker, and the CPU it
    // took is reported.
    let log = h.stderr();
    assert!(
        log.contains("compression: 3 file variants built once, "),
        "{log}"
    );
    h.assert_no_errors();
}

#[test]
fn sizes_around_the_minimum() {
    let dir = site();
    for n in [1023, 1024, 1025, 4096] {
        std::fs::write(dir.path().join(format!("f{n}.txt")), text_bytes(n)).expect("write");
    }
    let h = serve(dir.path(), &["--compress-min-size", "1KiB"]);
    let mut c = h.client();
    for _ in 0..3 {
        let r = c.get("/f1023.txt", &ae("gzip"));
        assert_eq!(
            (r.header("content-encoding"), r.header("vary")),
            (None, None)
        );
        assert_eq!(r.body, text_bytes(1023));
    }
    for n in [1024, 1025, 4096] {
        for (_, name, _) in CODINGS {
            let r = until_encoded(&mut c, &format!("/f{n}.txt"), name);
            same(&decoded(&r), &text_bytes(n), &format!("{n} {name}"));
        }
    }
    h.assert_no_errors();
}

#[test]
fn a_changed_file_never_gets_an_old_variant() {
    let dir = site();
    let p = dir.path().join("page.html");
    std::fs::write(&p, text_bytes(8000)).expect("write");
    let h = serve(dir.path(), &[]);
    let mut c = h.client();
    let old = until_encoded(&mut c, "/page.html", "gzip");
    same(&decoded(&old), &text_bytes(8000), "");

    // Rewritten in place with the same length, then with another length,
    // then replaced by rename: each response decodes to the new bytes.
    let mut versions = Vec::new();
    let mut same_len = text_bytes(8000);
    same_len[0] = b'X';
    versions.push(same_len);
    versions.push(text_bytes(9000));
    for (i, v) in versions.iter().enumerate() {
        std::fs::write(&p, v).expect("write");
        let r = c.get("/page.html", &ae("gzip"));
        same(&decoded(&r), v, &format!("version {i}, first response"));
        let r = until_encoded(&mut c, "/page.html", "gzip");
        same(&decoded(&r), v, &format!("version {i}"));
        assert_ne!(r.header("etag"), old.header("etag"));
    }
    let tmp = dir.path().join("tmp.html");
    let renamed = text_bytes(7000);
    std::fs::write(&tmp, &renamed).expect("write");
    std::fs::rename(&tmp, &p).expect("rename");
    for _ in 0..5 {
        let r = c.get("/page.html", &ae("gzip"));
        same(&decoded(&r), &renamed, "");
    }
    let r = until_encoded(&mut c, "/page.html", "gzip");
    same(&decoded(&r), &renamed, "");
    h.assert_no_errors();
}

#[test]
fn negotiation_q_values_identity_refusal_and_preference() {
    let dir = site();
    let body = text_bytes(5000);
    std::fs::write(dir.path().join("a.css"), &body).expect("write");
    let h = serve(dir.path(), &[]);
    let mut c = h.client();
    // Warm every coding.
    for (_, name, _) in CODINGS {
        until_encoded(&mut c, "/a.css", name);
    }
    let cases: &[(&str, Option<&str>)] = &[
        ("gzip;q=0.5, br;q=0.9", Some("br")),
        ("gzip, zstd;q=0.999", Some("gzip")),
        ("br;q=0, *", Some("zstd")),
        ("*", Some("br")),
        ("gzip, deflate, br, zstd", Some("br")),
        ("identity;q=0, gzip;q=0.1", Some("gzip")),
        // Nothing acceptable but identity refused: identity anyway, no 406
        // (RFC 9110 §12.5.3 allows ignoring the header).
        ("identity;q=0", None),
        ("*;q=0", None),
        ("br;q=0, gzip;q=0, zstd;q=0", None),
        ("compress, deflate", None),
        ("gzip;q=2, br;q=x", None),
        ("", None),
    ];
    for (header, want) in cases {
        let r = c.get("/a.css", &ae(header));
        assert_eq!(r.status, 200, "{header:?}");
        assert_eq!(r.header("content-encoding"), *want, "{header:?}");
        same(&decoded(&r), &body, &format!("{header:?}"));
        assert_eq!(r.header("vary"), Some("Accept-Encoding"), "{header:?}");
    }
    drop(c);
    // The route's order decides ties.
    let h2 = serve(dir.path(), &["--compress-encodings", "gzip,br"]);
    let mut c = h2.client();
    until_encoded(&mut c, "/a.css", "gzip");
    until_encoded(&mut c, "/a.css", "br");
    assert_eq!(
        c.get("/a.css", &ae("*")).header("content-encoding"),
        Some("gzip")
    );
    assert_eq!(
        c.get("/a.css", &ae("zstd")).header("content-encoding"),
        None
    );
    h.assert_no_errors();
    h2.assert_no_errors();
}

#[test]
fn what_is_never_compressed() {
    let dir = site();
    std::fs::write(dir.path().join("page.html"), text_bytes(5000)).expect("write");
    std::fs::write(dir.path().join("pic.png"), text_bytes(5000)).expect("write");
    let h = serve(dir.path(), &[]);
    let mut c = h.client();
    for _ in 0..20 {
        for path in ["/pic.png", "/big.bin"] {
            let r = c.get(path, &ae("gzip, br, zstd"));
            assert_eq!(
                (r.header("content-encoding"), r.header("vary")),
                (None, None),
                "{path}"
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // Off for the route: no Vary either.
    let off = serve(dir.path(), &["--compress=false"]);
    let mut c = off.client();
    for _ in 0..20 {
        let r = c.get("/page.html", &ae("gzip"));
        assert_eq!(
            (r.header("content-encoding"), r.header("vary")),
            (None, None)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    h.assert_no_errors();
    off.assert_no_errors();
}

/// hayate proxying everything to a fresh origin.
fn proxied(args: &[&str]) -> (Hayate, Origin) {
    let origin = Origin::start(OriginOptions::default());
    let mut all = vec!["--proxy".to_string(), origin.url()];
    all.extend(args.iter().map(|a| a.to_string()));
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    (Hayate::start(BIN, &all), origin)
}

#[test]
fn proxied_bodies_stream_compressed_and_decode_for_every_coding_and_size() {
    let (h, _origin) = proxied(&[]);
    let mut c = h.client();
    for (_, name, _) in CODINGS {
        for (n, chunked) in [
            (1023, false),
            (1024, false),
            (1025, false),
            (200_000, false),
            (500, true),
            (200_000, true),
        ] {
            let path = format!("/text?n={n}&chunked={}&etag=1", u8::from(chunked));
            let r = c.get(&path, &ae(name));
            assert_eq!(r.status, 200);
            let label = format!("{name} n={n} chunked={chunked}");
            same(&decoded(&r), &text_bytes(n), &label);
            if n < 1024 && !chunked {
                assert_eq!(r.header("content-encoding"), None, "{label}");
                assert_eq!(r.header("vary"), None, "{label}");
                assert_eq!(r.header("etag"), Some("\"v1\""), "{label}");
                continue;
            }
            assert_eq!(r.header("content-encoding"), Some(name), "{label}");
            assert_eq!(r.header("vary"), Some("Accept-Encoding"), "{label}");
            assert_eq!(r.header("transfer-encoding"), Some("chunked"), "{label}");
            assert_eq!(r.header("content-length"), None, "{label}");
            assert_eq!(r.header("etag"), Some("W/\"v1\""), "{label}");
        }
        // A stalled upstream: the bytes before the pause are flushed, the
        // whole still decodes.
        let r = c.get("/text?n=300000&chunked=1&stall_ms=200", &ae(name));
        same(&decoded(&r), &text_bytes(300_000), "");
    }
    // Without Accept-Encoding: identity, but it varies.
    let r = c.get("/text?n=5000", &[]);
    assert_eq!(
        (r.header("content-encoding"), r.header("vary")),
        (None, Some("Accept-Encoding"))
    );
    assert_eq!(r.body, text_bytes(5000));
    h.assert_no_errors();
}

#[test]
fn proxied_bodies_left_alone() {
    let (h, _origin) = proxied(&[]);
    let mut c = h.client();
    let body = text_bytes(5000);
    for path in [
        "/text?n=5000&nt=1",
        "/text?n=5000&type=event&chunked=1",
        "/text?n=5000&type=png",
        "/text?n=5000&ce=1",
    ] {
        let r = c.get(path, &ae("gzip, br"));
        assert_eq!(r.body, body, "{path}");
        let ce = if path.contains("ce=1") {
            Some("gzip")
        } else {
            None
        };
        assert_eq!(r.header("content-encoding"), ce, "{path}");
        assert_eq!(r.header("vary"), None, "{path}");
    }
    // A Range request is never compressed (the origin ignores the range).
    let r = c.get(
        "/text?n=5000&etag=1",
        &[("Accept-Encoding", "gzip"), ("Range", "bytes=0-9")],
    );
    assert_eq!((r.header("content-encoding"), &r.body), (None, &body));
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));
    assert_eq!(r.header("etag"), Some("\"v1\""));
    // HEAD: the length as the upstream gave it.
    let r = c.request("HEAD", "/text?n=5000", &ae("gzip"));
    assert_eq!(r.header("content-encoding"), None);
    assert_eq!(r.header("content-length"), Some("5000"));
    // 304: varies, and its strong tag is weakened like the 200's.
    let r = c.get(
        "/status?code=304&etag=1",
        &[("Accept-Encoding", "gzip"), ("If-None-Match", "W/\"v1\"")],
    );
    assert_eq!(r.status, 304);
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));
    assert_eq!(r.header("etag"), Some("W/\"v1\""));
    drop(c);
    // Off for the route.
    let (off, _o) = proxied(&["--compress=false"]);
    let r = off.client().get("/text?n=5000", &ae("gzip"));
    assert_eq!(
        (r.header("content-encoding"), r.header("vary")),
        (None, None)
    );
    h.assert_no_errors();
    off.assert_no_errors();
}
