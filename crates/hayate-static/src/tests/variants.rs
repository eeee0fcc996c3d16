//! Generated (compressed-once) variants of static files: what the open-file
//! cache asks a variant source for, how it negotiates them with siblings on
//! disk, and how they count against the cache's budget. The source here is a
//! fake that "builds" `coding:content`; the real one is hayate-compress's.

use super::*;

/// A variant source that "builds" `coding:content` on the second request
/// for a variant, and records what it was told.
#[derive(Debug, Default)]
struct FakeSource {
    asked: std::cell::RefCell<Vec<(FileStamp, Coding)>>,
    forgotten: std::cell::RefCell<Vec<FileStamp>>,
}

impl VariantSource for FakeSource {
    fn codings(&self, content_type: &str, _len: u64) -> Vec<Coding> {
        match content_type.starts_with("text/") {
            true => vec![Coding::Br, Coding::Gzip],
            false => Vec::new(),
        }
    }

    fn variant(&self, fs_path: &Path, stamp: FileStamp, coding: Coding) -> VariantState {
        let mut asked = self.asked.borrow_mut();
        let seen = asked.contains(&(stamp, coding));
        asked.push((stamp, coding));
        if !seen {
            return VariantState::Pending;
        }
        let content = std::fs::read(fs_path).expect("read");
        let mut b = format!("{}:", coding.as_str()).into_bytes();
        b.extend_from_slice(&content);
        VariantState::Ready(Bytes::from(b))
    }

    fn forget(&self, stamp: FileStamp) {
        self.forgotten.borrow_mut().push(stamp);
    }
}

fn with_source() -> (Fixture, Rc<FakeSource>) {
    let source = Rc::new(FakeSource::default());
    let s = source.clone();
    let f = fixture(move |o| o.variants = Some(s));
    (f, source)
}

fn gz<'a>(path: &'a str) -> Req<'a> {
    Req {
        path,
        accept: Some(Coding::Gzip),
        ..Default::default()
    }
}

#[test]
fn generated_variants_kept_by_entries_count_against_the_budget() {
    // "hello world\n" is 12 bytes, its fake gzip variant 17.
    for (budget, kept) in [(1 << 20, true), (12 + 16, false)] {
        let source = Rc::new(FakeSource::default());
        let s = source.clone();
        let f = fixture(move |o| {
            o.variants = Some(s);
            o.cache.budget = budget;
        });
        serve(&f, gz("/hello.txt")); // identity; the variant is queued
        assert_eq!(f.root.cache.held_bytes(), 12);
        let r = serve(&f, gz("/hello.txt"));
        assert_eq!(body(&r), b"gzip:hello world\n", "budget {budget}");
        let asked = source.asked.borrow().len();
        let r = serve(&f, gz("/hello.txt"));
        assert_eq!(body(&r), b"gzip:hello world\n", "budget {budget}");
        if kept {
            assert_eq!(f.root.cache.held_bytes(), 12 + 17);
            assert_eq!(source.asked.borrow().len(), asked, "held by the entry");
        } else {
            assert_eq!(f.root.cache.held_bytes(), 12, "over budget: not kept");
            assert_eq!(source.asked.borrow().len(), asked + 1, "asked again");
        }
    }
}

#[test]
fn generated_variant_identity_first_then_compressed_with_own_etag() {
    let (f, source) = with_source();
    let first = serve(&f, gz("/hello.txt"));
    assert_eq!(body(&first), b"hello world\n", "identity until ready");
    assert_eq!(header(&first, "Vary").as_deref(), Some("Accept-Encoding"));
    assert_eq!(header(&first, "Content-Encoding"), None);
    let second = serve(&f, gz("/hello.txt"));
    assert_eq!(body(&second), b"gzip:hello world\n");
    assert_eq!(header(&second, "Content-Encoding").as_deref(), Some("gzip"));
    assert_eq!(header(&second, "Vary").as_deref(), Some("Accept-Encoding"));
    assert_eq!(
        header(&second, "Content-Type").as_deref(),
        Some("text/plain; charset=utf-8")
    );
    let id_tag = header(&first, "ETag").expect("etag");
    let gz_tag = header(&second, "ETag").expect("etag");
    assert_eq!(gz_tag, format!("{}-gz\"", id_tag.trim_end_matches('"')));
    // Kept by the entry: the source is not asked again.
    let asked = source.asked.borrow().len();
    let third = serve(&f, gz("/hello.txt"));
    assert_eq!(body(&third), b"gzip:hello world\n");
    assert_eq!(source.asked.borrow().len(), asked);

    // If-None-Match with each variant's tag.
    for (tag, accept, want) in [
        (&gz_tag, Some(Coding::Gzip), Status::NOT_MODIFIED),
        (&id_tag, None, Status::NOT_MODIFIED),
        (&gz_tag, None, Status::OK),
        (&id_tag, Some(Coding::Gzip), Status::OK),
    ] {
        let r = serve(
            &f,
            Req {
                path: "/hello.txt",
                accept,
                pre: Preconditions {
                    if_none_match: Some(tag.as_bytes()),
                    ..Default::default()
                },
                ..Default::default()
            },
        );
        assert_eq!(r.status, want, "{tag} {accept:?}");
        assert_eq!(header(&r, "Vary").as_deref(), Some("Accept-Encoding"));
    }
    // A range of the compressed bytes.
    let r = serve(
        &f,
        Req {
            range: Some("bytes=0-4"),
            ..gz("/hello.txt")
        },
    );
    assert_eq!(
        (r.status, body(&r)),
        (Status::PARTIAL_CONTENT, b"gzip:".to_vec())
    );
    assert_eq!(header(&r, "Vary").as_deref(), Some("Accept-Encoding"));
    assert_eq!(header(&r, "Content-Encoding").as_deref(), Some("gzip"));
}

#[test]
fn generated_variants_follow_the_file_and_skip_other_types() {
    let (f, source) = with_source();
    let p = f.dir.path().join("hello.txt");
    serve(&f, gz("/hello.txt"));
    assert_eq!(body(&serve(&f, gz("/hello.txt"))), b"gzip:hello world\n");
    std::fs::write(&p, "HELLO WORLD, longer\n").expect("write");
    // The old variant is never served; the source is told to drop it.
    assert_eq!(body(&serve(&f, gz("/hello.txt"))), b"HELLO WORLD, longer\n");
    assert_eq!(source.forgotten.borrow().len(), 1);
    assert_eq!(
        body(&serve(&f, gz("/hello.txt"))),
        b"gzip:HELLO WORLD, longer\n"
    );
    // Not offered for other types: no Vary, the source is not asked.
    let before = source.asked.borrow().len();
    let r = serve(&f, gz("/big.bin"));
    assert_eq!(header(&r, "Vary"), None);
    assert_eq!(source.asked.borrow().len(), before);
}

#[test]
fn a_sibling_wins_over_generation() {
    let (f, source) = with_source();
    std::fs::write(f.dir.path().join("hello.txt.gz"), "GZ").expect("write");
    assert_eq!(body(&serve(&f, gz("/hello.txt"))), b"GZ");
    assert!(source.asked.borrow().is_empty());
    // br is generated; until it is ready the client gets its next best
    // choice among what is ready (here: the gzip sibling, were it asked
    // for; this client only takes br, so identity).
    let br = |f: &Fixture| {
        serve(
            f,
            Req {
                path: "/hello.txt",
                accept: Some(Coding::Br),
                ..Default::default()
            },
        )
    };
    assert_eq!(body(&br(&f)), b"hello world\n");
    assert_eq!(body(&br(&f)), b"br:hello world\n");
}

#[test]
fn a_preferred_coding_is_generated_next_to_a_sibling_which_serves_meanwhile() {
    let (f, _source) = with_source();
    std::fs::write(f.dir.path().join("hello.txt.gz"), "GZ").expect("write");
    // A client taking br and gzip equally: the route prefers br.
    let both = |f: &Fixture| {
        hayate_core::epoch::advance();
        let choose = |available: &[Coding]| {
            available
                .iter()
                .copied()
                .find(|c| matches!(c, Coding::Br | Coding::Gzip))
        };
        f.root.serve(&StaticRequest {
            method: b"GET",
            path: b"/hello.txt",
            raw_path: b"/hello.txt",
            query: None,
            preconditions: Preconditions::default(),
            range: None,
            choose_coding: &choose,
            wants_json: false,
            now: Instant::now(),
        })
    };
    assert_eq!(body(&both(&f)), b"GZ");
    assert_eq!(body(&both(&f)), b"br:hello world\n");
}
