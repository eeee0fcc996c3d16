//! Cached time strings, recomputed at most once per second per thread (as
//! hyper's `common/date.rs` and nginx's `ngx_times.c` do): the `Date` header
//! line and the access-log timestamps.
//!
//! Formatting an IMF-fixdate costs ~100 ns; a cached copy costs a clock read
//! (vDSO, ~20 ns) and a memcpy.

use std::cell::{Cell, RefCell};
use std::time::{SystemTime, UNIX_EPOCH};

/// An HTTP-date field value (any of the three formats RFC 9110 §5.6.7
/// accepts: IMF-fixdate, RFC 850, asctime; surrounding whitespace
/// ignored); `None` when it is not one (a wrong weekday, a day that does
/// not exist, a time before 1970 included).
pub fn parse(raw: &[u8]) -> Option<SystemTime> {
    let raw = crate::field::trim_ows(raw);
    // The form every sender must use (and nearly all do), read without
    // allocating: a proxied response's Date is checked this way, which the
    // general path cost ~1,000 instructions per response
    // (bench/instructions/run, proxied TCP).
    if let Ok(fixed) = <[u8; 29]>::try_from(raw) {
        // An upstream's Date changes once a second: the last IMF-fixdate
        // read on this thread is remembered, and a proxied response's
        // compares 29 bytes instead of reading them (143 of its 18,637
        // instructions, bench/instructions/run).
        if let Some((last, t)) = LAST_FIXDATE.get() {
            if last == fixed {
                return Some(t);
            }
        }
        if let Some(t) = parse_imf_fixdate(raw) {
            LAST_FIXDATE.set(Some((fixed, t)));
            return Some(t);
        }
    }
    let s = std::str::from_utf8(raw).ok()?;
    match rfc850_as_imf(s, SystemTime::now()) {
        Some(imf) => httpdate::parse_http_date(&imf).ok(),
        None => httpdate::parse_http_date(s).ok(),
    }
}

thread_local! {
    /// The last IMF-fixdate [`parse`] read on this thread, and its time.
    static LAST_FIXDATE: Cell<Option<([u8; 29], SystemTime)>> = const { Cell::new(None) };
}

/// An IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), checked whole: the
/// weekday must be that date's, the day must exist, the year be 1970 or
/// later (as httpdate's parser, which the other forms go through).
fn parse_imf_fixdate(b: &[u8]) -> Option<SystemTime> {
    const WEEKDAYS: [&[u8]; 7] = [b"Thu", b"Fri", b"Sat", b"Sun", b"Mon", b"Tue", b"Wed"];
    if b.len() != 29 || &b[3..5] != b", " || &b[25..] != b" GMT" {
        return None;
    }
    if b[7] != b' ' || b[11] != b' ' || b[16] != b' ' || b[19] != b':' || b[22] != b':' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<u32> {
        b[r].iter().try_fold(0u32, |n, &d| {
            d.is_ascii_digit().then(|| n * 10 + u32::from(d - b'0'))
        })
    };
    let (day, year) = (num(5..7)?, num(12..16)?);
    let (hour, minute, second) = (num(17..19)?, num(20..22)?, num(23..25)?);
    let month = match &b[8..11] {
        b"Jan" => 1,
        b"Feb" => 2,
        b"Mar" => 3,
        b"Apr" => 4,
        b"May" => 5,
        b"Jun" => 6,
        b"Jul" => 7,
        b"Aug" => 8,
        b"Sep" => 9,
        b"Oct" => 10,
        b"Nov" => 11,
        b"Dec" => 12,
        _ => return None,
    };
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let month_days = match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    if year < 1970 || day == 0 || day > month_days || hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    // Days since 1970-01-01 (Howard Hinnant's days-from-civil).
    let (y, m) = (i64::from(year) - i64::from(month <= 2), i64::from(month));
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    if WEEKDAYS[days.rem_euclid(7) as usize] != &b[0..3] {
        return None;
    }
    let secs = days as u64 * 86_400 + u64::from(hour * 3_600 + minute * 60 + second);
    Some(UNIX_EPOCH + std::time::Duration::from_secs(secs))
}

/// An RFC 850 date (`Sunday, 06-Nov-94 08:49:37 GMT`) rewritten as an
/// IMF-fixdate with its century chosen as RFC 9110 §5.6.7 requires: a
/// two-digit year that would be more than 50 years in the future is the
/// most recent past year with those digits, any other is in this century
/// (httpdate's fixed 1970 pivot reads `75` as 1975 where the rule says
/// 2075). `None` for other formats.
fn rfc850_as_imf(s: &str, now: SystemTime) -> Option<String> {
    let (weekday, rest) = s.split_once(", ")?;
    // `Sun, 06 Nov 1994 ...` (IMF-fixdate) has a three-letter weekday.
    if weekday.len() <= 3 || rest.len() != 22 || rest.as_bytes()[2] != b'-' {
        return None;
    }
    let (day, month, yy) = (&rest[..2], &rest[3..6], &rest[7..9]);
    let yy: i64 = yy
        .parse()
        .ok()
        .filter(|_| yy.bytes().all(|b| b.is_ascii_digit()))?;
    let this_year =
        Civil::from_unix(now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())).year;
    let mut year = this_year - this_year.rem_euclid(100) + yy;
    if year > this_year + 50 {
        year -= 100;
    }
    Some(format!(
        "{}, {day} {month} {year} {}",
        weekday.get(..3)?,
        &rest[10..]
    ))
}

/// Length of `Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n`.
const DATE_LINE_LEN: usize = 37;

struct Cached {
    second: u64,
    date_line: [u8; DATE_LINE_LEN],
    clf: String,
    iso: String,
}

thread_local! {
    static CACHED: RefCell<Cached> = const {
        RefCell::new(Cached { second: u64::MAX, date_line: [0; DATE_LINE_LEN], clf: String::new(), iso: String::new() })
    };
}

fn with_cached<R>(now: SystemTime, f: impl FnOnce(&Cached) -> R) -> R {
    let second = now
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    CACHED.with(|cell| {
        let mut c = cell.borrow_mut();
        if c.second != second {
            c.second = second;
            let line = format!("Date: {}\r\n", httpdate::fmt_http_date(now));
            c.date_line
                .copy_from_slice(&line.as_bytes()[..DATE_LINE_LEN]);
            let t = Civil::from_unix(second);
            c.clf = format!(
                "{:02}/{}/{:04}:{:02}:{:02}:{:02} +0000",
                t.day,
                MONTHS[(t.month - 1) as usize],
                t.year,
                t.hour,
                t.minute,
                t.second
            );
            c.iso = format!(
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
                t.year, t.month, t.day, t.hour, t.minute, t.second
            );
        }
        f(&c)
    })
}

/// Appends the `Date: ...\r\n` header line for `now` to `out`.
pub fn append_date_line(out: &mut Vec<u8>, now: SystemTime) {
    with_cached(now, |c| out.extend_from_slice(&c.date_line));
}

/// The current time in the Common Log Format, `10/Oct/2000:13:55:36 +0000`.
pub fn clf_now(out: &mut String) {
    with_cached(SystemTime::now(), |c| out.push_str(&c.clf));
}

/// The current time in ISO 8601 / RFC 3339, `2000-10-10T13:55:36Z`.
pub fn iso_now(out: &mut String) {
    with_cached(SystemTime::now(), |c| out.push_str(&c.iso));
}

/// Appends the current time in the Common Log Format (as [`clf_now`]),
/// from the per-second cache: no allocation.
pub fn append_clf_now(out: &mut Vec<u8>) {
    with_cached(SystemTime::now(), |c| {
        out.extend_from_slice(c.clf.as_bytes())
    });
}

/// Appends the current time in ISO 8601 (as [`iso_now`]), from the
/// per-second cache: no allocation.
pub fn append_iso_now(out: &mut Vec<u8>) {
    with_cached(SystemTime::now(), |c| {
        out.extend_from_slice(c.iso.as_bytes())
    });
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// A UTC calendar time.
#[derive(Debug, PartialEq, Eq)]
struct Civil {
    year: i64,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
}

impl Civil {
    /// Converts Unix seconds to a UTC calendar date (Howard Hinnant's
    /// days-to-civil algorithm).
    fn from_unix(secs: u64) -> Civil {
        let days = (secs / 86_400) as i64;
        let rem = secs % 86_400;
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        let year = yoe + era * 400 + i64::from(month <= 2);
        Civil {
            year,
            month,
            day,
            hour: (rem / 3_600) as u32,
            minute: (rem % 3_600 / 60) as u32,
            second: (rem % 60) as u32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_three_http_date_forms() {
        let want = httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").ok();
        for raw in [
            &b" Sun, 06 Nov 1994 08:49:37 GMT\t"[..],
            b"Sunday, 06-Nov-94 08:49:37 GMT",
            b"Sun Nov  6 08:49:37 1994",
        ] {
            assert_eq!(parse(raw), want, "{}", String::from_utf8_lossy(raw));
        }
        assert_eq!(parse(b"yesterday"), None);
        assert_eq!(parse(b"\xff"), None);
        // Invalid: a wrong weekday, no 31st of November, before 1970, junk
        // after the date, the value "0" (which §5.3 names as expired).
        for raw in [
            &b"Mon, 06 Nov 1994 08:49:37 GMT"[..],
            b"Thu, 31 Nov 1994 08:49:37 GMT",
            b"Thu, 01 Jan 1960 00:00:00 GMT",
            b"Sun, 06 Nov 1994 08:49:37 GMT x",
            b"Sun, 06 Nov 1994 08:49:37 UTC",
            b"Sunday, 06-Nov-94 08:49:37",
            b"Sunday, 06-Nov-9x 08:49:37 GMT",
            b"0",
            b"",
        ] {
            assert_eq!(parse(raw), None, "{}", String::from_utf8_lossy(raw));
        }
    }

    #[test]
    fn the_fast_imf_fixdate_reader_agrees_with_httpdate() {
        // Every 7 hours 13 minutes 17 seconds from 1970 to 2100: weekdays,
        // month ends and leap days included.
        let mut t = 0u64;
        while t < 4_102_444_800 {
            let at = UNIX_EPOCH + std::time::Duration::from_secs(t);
            let text = httpdate::fmt_http_date(at);
            assert_eq!(parse_imf_fixdate(text.as_bytes()), Some(at), "{text}");
            t += 7 * 3_600 + 13 * 60 + 17;
        }
        for bad in [
            &b"Mon, 06 Nov 1994 08:49:37 GMT"[..],
            b"Thu, 29 Feb 2001 00:00:00 GMT",
            b"Thu, 31 Apr 2025 00:00:00 GMT",
            b"Sun, 06 Nov 1994 24:00:00 GMT",
            b"Sun, 06 Nov 1994 08:60:37 GMT",
            b"Sun, 06 Xyz 1994 08:49:37 GMT",
            b"Sun, 0a Nov 1994 08:49:37 GMT",
            b"Wed, 31 Dec 1969 23:59:59 GMT",
        ] {
            assert_eq!(
                parse_imf_fixdate(bad),
                None,
                "{}",
                String::from_utf8_lossy(bad)
            );
            let s = std::str::from_utf8(bad).expect("ascii");
            assert_eq!(
                httpdate::parse_http_date(s).ok(),
                None,
                "httpdate agrees: {s}"
            );
        }
        assert!(parse_imf_fixdate(b"Thu, 29 Feb 2024 12:00:00 GMT").is_some());
    }

    #[test]
    fn the_remembered_fixdate_answers_only_for_its_own_bytes() {
        let first = b"Sun, 06 Nov 1994 08:49:37 GMT";
        let next = b"Sun, 06 Nov 1994 08:49:38 GMT";
        let want = |s: &[u8]| httpdate::parse_http_date(std::str::from_utf8(s).unwrap()).ok();
        assert_eq!(parse(first), want(first));
        assert_eq!(parse(first), want(first), "read again");
        assert_eq!(parse(next), want(next), "the next second");
        assert_eq!(
            parse(b"Mon, 06 Nov 1994 08:49:38 GMT"),
            None,
            "wrong weekday"
        );
        assert_eq!(parse(next), want(next));
        assert_eq!(parse(first), want(first), "an earlier one again");
    }

    #[test]
    fn rfc850_years_within_fifty_years_ahead() {
        let at = |y: i64| {
            // 1 July of year `y`, as a clock reading.
            let days = (y - 1970) * 365 + (y - 1969) / 4 + 181;
            UNIX_EPOCH + std::time::Duration::from_secs(days as u64 * 86_400)
        };
        let year = |s: &str, now_year: i64| {
            rfc850_as_imf(s, at(now_year)).map(|imf| imf[12..16].to_string())
        };
        let d = |yy: &str| format!("Sunday, 06-Nov-{yy} 08:49:37 GMT");
        let table = [
            ("94", 2026, "1994"),
            ("75", 2026, "2075"),
            ("76", 2026, "2076"),
            ("77", 2026, "1977"),
            ("26", 2026, "2026"),
            ("00", 2026, "2000"),
            ("99", 2026, "1999"),
            ("10", 2090, "2010"),
            ("99", 2060, "2099"),
            ("50", 2090, "2050"),
        ];
        for (yy, now_year, want) in table {
            assert_eq!(
                year(&d(yy), now_year).as_deref(),
                Some(want),
                "{yy} in {now_year}"
            );
        }
        assert_eq!(
            rfc850_as_imf("Sun, 06 Nov 1994 08:49:37 GMT", at(2026)),
            None
        );
        assert_eq!(rfc850_as_imf("Sun Nov  6 08:49:37 1994", at(2026)), None);
        // 06-Nov-2075 is a Wednesday: the weekday decides validity after
        // the century is chosen.
        let wed = "Wednesday, 06-Nov-75 08:49:37 GMT";
        assert_eq!(
            rfc850_as_imf(wed, at(2026)).as_deref(),
            Some("Wed, 06 Nov 2075 08:49:37 GMT")
        );
        assert!(parse(wed.as_bytes()).is_some());
    }

    #[test]
    fn civil_dates() {
        assert_eq!(
            Civil::from_unix(0),
            Civil {
                year: 1970,
                month: 1,
                day: 1,
                hour: 0,
                minute: 0,
                second: 0
            }
        );
        // 2000-02-29T23:59:59Z, a leap day in a century leap year.
        assert_eq!(
            Civil::from_unix(951_868_799),
            Civil {
                year: 2000,
                month: 2,
                day: 29,
                hour: 23,
                minute: 59,
                second: 59
            }
        );
        // 1994-11-06T08:49:37Z, RFC 9110's example date.
        assert_eq!(
            Civil::from_unix(784_111_777),
            Civil {
                year: 1994,
                month: 11,
                day: 6,
                hour: 8,
                minute: 49,
                second: 37
            }
        );
    }

    #[test]
    fn date_line_shape() {
        let mut out = Vec::new();
        append_date_line(&mut out, SystemTime::now());
        let s = String::from_utf8(out).expect("ascii");
        assert!(s.starts_with("Date: ") && s.ends_with(" GMT\r\n"), "{s:?}");
        let mut clf = String::new();
        clf_now(&mut clf);
        assert!(clf.ends_with(" +0000"), "{clf}");
    }
}
