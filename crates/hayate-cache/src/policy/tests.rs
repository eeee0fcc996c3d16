use super::*;
use hayate_core::Fields;

const T0: u64 = 1_700_000_000;

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

fn facts(head: &str) -> ResponseFacts {
    ResponseFacts::from_fields(Fields::parse_wire(head.as_bytes()).iter())
}

fn store(status: u16, head: &str) -> Result<u64, NotStored> {
    storable(
        status,
        &facts(head),
        &RequestDirectives::default(),
        false,
        &RoutePolicy::default(),
        at(T0),
    )
    .map(|d| d.as_secs())
}

#[test]
fn storability_table() {
    use NotStored::*;
    let date = httpdate::fmt_http_date(at(T0));
    let expires = httpdate::fmt_http_date(at(T0 + 30));
    let lm = httpdate::fmt_http_date(at(T0 - 1000));
    let table: Vec<(u16, String, Result<u64, NotStored>)> = vec![
        (200, "Cache-Control: max-age=60\r\n".into(), Ok(60)),
        (
            200,
            "Cache-Control: max-age=60, s-maxage=5\r\n".into(),
            Ok(5),
        ),
        (
            200,
            format!("Date: {date}\r\nExpires: {expires}\r\n"),
            Ok(30),
        ),
        (200, "Expires: garbage\r\nETag: \"a\"\r\n".into(), Ok(0)),
        (200, "Expires: garbage\r\n".into(), Err(NoFreshness)),
        (200, format!("Last-Modified: {lm}\r\n"), Ok(100)),
        (200, "".into(), Err(NoFreshness)),
        (200, "ETag: \"x\"\r\n".into(), Ok(0)),
        (302, "ETag: \"x\"\r\n".into(), Ok(0)),
        (302, format!("Last-Modified: {lm}\r\n"), Ok(0)),
        (404, format!("Last-Modified: {lm}\r\n"), Ok(100)),
        (206, "Cache-Control: max-age=60\r\n".into(), Err(Status)),
        (304, "Cache-Control: max-age=60\r\n".into(), Err(Status)),
        (
            200,
            "Cache-Control: max-age=60, no-store\r\n".into(),
            Err(NoStore),
        ),
        (
            200,
            "Cache-Control: private, max-age=60\r\n".into(),
            Err(Private),
        ),
        (
            200,
            "Cache-Control: max-age=60\r\nSet-Cookie: a=b\r\n".into(),
            Err(SetCookie),
        ),
        (
            200,
            "Cache-Control: max-age=60\r\nVary: Accept, *\r\n".into(),
            Err(VaryStar),
        ),
        (
            200,
            "Cache-Control: public, max-age=60\r\nX-Accel-Redirect: /protected/a\r\n".into(),
            Err(InternalRedirect),
        ),
        (
            200,
            "Cache-Control: public, max-age=60\r\nX-Sendfile: /srv/a\r\n".into(),
            Err(InternalRedirect),
        ),
        (
            200,
            "Cache-Control: no-cache, max-age=60\r\n".into(),
            Err(NoFreshness),
        ),
        (
            200,
            "Cache-Control: no-cache\r\nETag: \"v\"\r\n".into(),
            Ok(0),
        ),
        (
            200,
            "Content-Type: text/event-stream\r\nCache-Control: max-age=9\r\n".into(),
            Err(EventStream),
        ),
    ];
    for (status, head, want) in table {
        assert_eq!(store(status, &head), want, "{status} {head:?}");
    }
}

/// §5.2.2.3 must-understand: stored only for status codes whose rules
/// hayate implements, and then no-store is ignored.
#[test]
fn must_understand_table() {
    let mu = "Cache-Control: must-understand, no-store, max-age=60\r\n";
    let table = [
        (200, mu, Ok(60)),
        (404, mu, Ok(60)),
        (308, mu, Ok(60)),
        (299, mu, Err(NotStored::MustUnderstand)),
        (418, mu, Err(NotStored::MustUnderstand)),
        (599, mu, Err(NotStored::MustUnderstand)),
        (206, mu, Err(NotStored::Status)),
        (
            200,
            "Cache-Control: must-understand, max-age=60\r\n",
            Ok(60),
        ),
        (299, "Cache-Control: max-age=60\r\n", Ok(60)),
        (
            299,
            "Cache-Control: no-store, max-age=60\r\n",
            Err(NotStored::NoStore),
        ),
        (
            200,
            "Cache-Control: must-understand, no-store, private\r\n",
            Err(NotStored::Private),
        ),
    ];
    for (status, head, want) in table {
        assert_eq!(store(status, head), want, "{status} {head:?}");
    }
}

/// RFC 9213: the first valid targeted field (Hayate-Cache-Control,
/// then CDN-Cache-Control) replaces Cache-Control and Expires.
#[test]
fn targeted_fields_take_precedence() {
    let expires = format!(
        "Date: {}\r\nExpires: {}\r\n",
        httpdate::fmt_http_date(at(T0)),
        httpdate::fmt_http_date(at(T0 + 90))
    );
    let table: Vec<(String, Result<u64, NotStored>)> = vec![
        ("Cache-Control: no-store\r\nCDN-Cache-Control: max-age=30\r\n".into(), Ok(30)),
        ("Cache-Control: max-age=60\r\nCDN-Cache-Control: no-store\r\n".into(), Err(NotStored::NoStore)),
        ("Cache-Control: private\r\nCDN-Cache-Control: max-age=30\r\n".into(), Ok(30)),
        (
            "Cache-Control: max-age=60\r\nHayate-Cache-Control: max-age=5\r\nCDN-Cache-Control: max-age=30\r\n".into(),
            Ok(5),
        ),
        (
            "CDN-Cache-Control: max-age=30\r\nhayate-cache-control: no-store\r\n".into(),
            Err(NotStored::NoStore),
        ),
        // Not a valid Dictionary: skipped, the next one decides.
        (
            "Cache-Control: max-age=60\r\nHayate-Cache-Control: Max-Age=5\r\nCDN-Cache-Control: max-age=30\r\n".into(),
            Ok(30),
        ),
        ("Cache-Control: max-age=60\r\nCDN-Cache-Control: max-age=30,\r\n".into(), Ok(60)),
        ("Cache-Control: max-age=60\r\nCDN-Cache-Control:\r\n".into(), Ok(60)),
        // Two lines are one list.
        (
            "CDN-Cache-Control: no-cache\r\nCDN-Cache-Control: max-age=30\r\n".into(),
            Err(NotStored::NoFreshness),
        ),
        // Expires is ignored too.
        (expires.clone(), Ok(90)),
        (format!("{expires}CDN-Cache-Control: must-revalidate\r\n"), Err(NotStored::NoFreshness)),
        (format!("{expires}CDN-Cache-Control: s-maxage=9\r\n"), Ok(9)),
    ];
    for (head, want) in table {
        assert_eq!(store(200, &head), want, "{head:?}");
    }
}

#[test]
fn authorization_needs_explicit_permission() {
    let run = |head: &str| {
        storable(
            200,
            &facts(head),
            &RequestDirectives::default(),
            true,
            &RoutePolicy::default(),
            at(T0),
        )
        .map(|d| d.as_secs())
    };
    assert_eq!(
        run("Cache-Control: max-age=60\r\n"),
        Err(NotStored::Authorization)
    );
    assert_eq!(run("Cache-Control: public, max-age=60\r\n"), Ok(60));
    assert_eq!(run("Cache-Control: s-maxage=60\r\n"), Ok(60));
    assert_eq!(
        run("Cache-Control: must-revalidate, max-age=60\r\n"),
        Ok(60)
    );
}

#[test]
fn micro_cache_ttl_only_without_freshness() {
    let route = RoutePolicy {
        default_ttl: Some(Duration::from_secs(5)),
        ..RoutePolicy::default()
    };
    let run = |status, head: &str| {
        storable(
            status,
            &facts(head),
            &RequestDirectives::default(),
            false,
            &route,
            at(T0),
        )
        .map(|d| d.as_secs())
    };
    assert_eq!(run(200, ""), Ok(5));
    assert_eq!(run(200, "Cache-Control: max-age=60\r\n"), Ok(60));
    assert_eq!(
        run(200, "Cache-Control: max-age=0\r\nETag: \"e\"\r\n"),
        Ok(0)
    );
    assert_eq!(run(500, ""), Err(NotStored::NoFreshness));
    assert_eq!(
        run(200, "Cache-Control: no-store\r\n"),
        Err(NotStored::NoStore)
    );
    let nostore = RequestDirectives::parse([&b"no-store"[..]], false);
    assert_eq!(
        storable(200, &facts(""), &nostore, false, &route, at(T0)),
        Err(NotStored::RequestNoStore)
    );
}

#[test]
fn facts_from_head() {
    let f = facts(
        "Vary: Accept-Encoding, accept-encoding\r\nVary: X-A\r\nAge: 7\r\nSurrogate-Key: a b\r\n\
         ETag: W/\"1\"\r\nSet-Cookie: x=1\r\nContent-Type: text/event-stream; charset=utf-8\r\n",
    );
    assert_eq!(
        f.vary,
        Some(vec![b"accept-encoding".to_vec(), b"x-a".to_vec()])
    );
    assert_eq!(f.age, 7);
    assert_eq!(f.tags, vec![b"a".to_vec(), b"b".to_vec()]);
    assert_eq!(f.etag.as_deref(), Some(&b"W/\"1\""[..]));
    assert!(f.set_cookie && f.event_stream);
}

#[test]
fn age_field_uses_the_first_member_and_ignores_an_invalid_one() {
    let table = [
        ("Age: 7\r\n", 7),
        ("Age: 7200, 0\r\n", 7200),
        ("Age: 7200\r\nAge: 0\r\n", 7200),
        ("Age: 0\r\nAge: 7200\r\n", 0),
        ("Age: x7200\r\n", 0),
        ("Age: junk, 7200\r\n", 0),
        ("Age: junk\r\nAge: 9\r\n", 0),
        ("Age: -5\r\n", 0),
        ("Age: 12s\r\n", 0),
        ("Age: 1.5\r\n", 0),
        ("Age: , 9\r\n", 0),
        ("Age:  42 \r\n", 42),
        ("Age: 99999999999999999999\r\n", 1 << 31),
        ("", 0),
    ];
    for (head, want) in table {
        assert_eq!(facts(head).age, want, "{head:?}");
    }
}

/// §4.2.3 with times as seconds from T0: `(Date, Age field, request
/// time, response time, corrected_initial_age)`.
#[test]
fn initial_age_table() {
    let date = |d: i64| {
        format!(
            "Date: {}\r\n",
            httpdate::fmt_http_date(at((T0 as i64 + d) as u64))
        )
    };
    let table: Vec<(String, &str, i64, i64, u64)> = vec![
        // apparent_age (10) beats corrected_age_value (3 + delay 2).
        (date(-10), "Age: 3\r\n", -2, 0, 10),
        // corrected_age_value: Age plus the response delay.
        (date(0), "Age: 3\r\n", -2, 0, 5),
        (String::new(), "Age: 3\r\n", -2, 0, 5),
        (String::new(), "", -4, 0, 4),
        // The origin's clock ahead: apparent_age is never negative.
        (date(100), "", 0, 0, 0),
        (date(100), "Age: 30\r\n", -1, 0, 31),
        // The origin's clock behind by a day.
        (date(-86_400), "", 0, 0, 86_400),
        // An invalid Date is none; an invalid Age is ignored.
        ("Date: soon\r\n".into(), "Age: x\r\n", 0, 0, 0),
        (date(0), "Age: 7200, 0\r\n", 0, 0, 7200),
        (String::new(), "", 0, 0, 0),
    ];
    for (d, a, req, resp, want) in table {
        let f = facts(&format!("{d}{a}"));
        let t = |o: i64| at((T0 as i64 + o) as u64);
        assert_eq!(
            initial_age(&f, t(req), t(resp)),
            want,
            "{d:?} {a:?} {req} {resp}"
        );
    }
}

/// Expires in each HTTP-date format, relative to the origin's Date
/// (§4.2.1: expires - date, so a clock offset between origin and
/// cache changes nothing), and invalid values as already expired
/// (§5.3).
#[test]
fn expires_table() {
    let imf = |d: i64| httpdate::fmt_http_date(at((T0 as i64 + d) as u64));
    // T0 + 30 in the two obsolete formats.
    let rfc850 = "Tuesday, 14-Nov-23 22:13:50 GMT";
    let asctime = "Tue Nov 14 22:13:50 2023";
    let d0 = format!("Date: {}\r\n", imf(0));
    let table: Vec<(String, Result<u64, NotStored>)> = vec![
        (format!("{d0}Expires: {}\r\n", imf(30)), Ok(30)),
        (format!("{d0}Expires: {rfc850}\r\n"), Ok(30)),
        (format!("{d0}Expires: {asctime}\r\n"), Ok(30)),
        // Origin clock 100 s ahead of or behind ours.
        (
            format!("Date: {}\r\nExpires: {}\r\n", imf(100), imf(130)),
            Ok(30),
        ),
        (
            format!("Date: {}\r\nExpires: {}\r\n", imf(-100), imf(-70)),
            Ok(30),
        ),
        // Without Date, the response time stands in.
        (format!("Expires: {}\r\n", imf(30)), Ok(30)),
        // Expires before Date, and invalid values: already expired.
        (
            format!("{d0}Expires: {}\r\nETag: \"e\"\r\n", imf(-5)),
            Ok(0),
        ),
        (
            format!("{d0}Expires: {}\r\n", imf(-5)),
            Err(NotStored::NoFreshness),
        ),
        ("Expires: 0\r\nETag: \"e\"\r\n".into(), Ok(0)),
        ("Expires: 0\r\n".into(), Err(NotStored::NoFreshness)),
        (
            format!("{d0}Expires: Tue, 14 Nov 2023 22:13:50 UTC\r\n"),
            Err(NotStored::NoFreshness),
        ),
        // The first Expires counts; max-age and s-maxage override it.
        (
            format!("{d0}Expires: {}\r\nExpires: {}\r\n", imf(30), imf(90)),
            Ok(30),
        ),
        (
            format!("{d0}Expires: 0\r\nCache-Control: max-age=5\r\n"),
            Ok(5),
        ),
        (
            format!("{d0}Expires: {}\r\nCache-Control: s-maxage=7\r\n", imf(30)),
            Ok(7),
        ),
    ];
    for (head, want) in table {
        assert_eq!(store(200, &head), want, "{head:?}");
    }
}

fn fresh(lifetime: u64, age: u64, cc: &str) -> Freshness {
    Freshness {
        lifetime,
        age,
        cc: ResponseDirectives::parse([cc.as_bytes()]),
        swr_default: 0,
        sie_default: 0,
    }
}

#[test]
fn decisions() {
    let none = RequestDirectives::default();
    let rq = |v: &str| RequestDirectives::parse([v.as_bytes()], false);
    let reval = Use::Revalidate {
        stale_if_error: false,
    };
    let table = [
        (fresh(60, 10, ""), none, Use::Fresh),
        (fresh(60, 60, ""), none, reval),
        (fresh(60, 10, "no-cache"), none, reval),
        (fresh(60, 10, ""), rq("no-cache"), reval),
        (fresh(60, 10, ""), rq("max-age=5"), reval),
        (fresh(60, 10, ""), rq("max-age=10"), Use::Fresh),
        (fresh(60, 10, ""), rq("min-fresh=55"), reval),
        (fresh(60, 10, ""), rq("min-fresh=50"), Use::Fresh),
        (fresh(60, 70, ""), rq("max-stale"), Use::Fresh),
        (fresh(60, 70, ""), rq("max-stale=10"), Use::Fresh),
        (fresh(60, 70, ""), rq("max-stale=9"), reval),
        (fresh(60, 70, "must-revalidate"), rq("max-stale"), reval),
        (fresh(60, 70, "s-maxage=60"), rq("max-stale"), reval),
        (
            fresh(60, 70, "stale-while-revalidate=10"),
            none,
            Use::StaleWhileRevalidate,
        ),
        (fresh(60, 71, "stale-while-revalidate=10"), none, reval),
        (
            fresh(60, 70, "stale-if-error=10"),
            none,
            Use::Revalidate {
                stale_if_error: true,
            },
        ),
        (
            fresh(60, 80, "stale-if-error=10, must-revalidate"),
            none,
            reval,
        ),
        (fresh(0, 0, ""), none, reval),
    ];
    for (i, (f, r, want)) in table.into_iter().enumerate() {
        assert_eq!(f.decide(&r), want, "row {i}: {f:?} {r:?}");
    }
    let mut route_default = fresh(60, 65, "");
    route_default.swr_default = 10;
    assert_eq!(route_default.decide(&none), Use::StaleWhileRevalidate);
    assert_eq!(fresh(60, 65, "").ttl(), -5);
}
