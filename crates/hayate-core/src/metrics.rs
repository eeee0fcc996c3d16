//! The metrics registry: subsystems register [`MetricsSource`]s once, and a
//! scrape (`GET /metrics` on the admin listener) renders them all in the
//! Prometheus text format (version 0.0.4).
//!
//! Nothing here is on the request path: a source keeps its own counters
//! (per-worker plain or relaxed-atomic integers) and reads them only when
//! rendered. The registry's lock is taken at registration and at scrape.
//!
//! To add metrics from a subsystem (the response cache, compression):
//! ```
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use hayate_core::metrics::{family, sample, Kind, Metrics};
//!
//! let hits = Arc::new(AtomicU64::new(0));
//! let metrics = Metrics::default();
//! let h = hits.clone();
//! metrics.register_fn(move |out| {
//!     family(out, "hayate_cache_hits_total", "Responses served from the cache", Kind::Counter);
//!     sample(out, "hayate_cache_hits_total", &[], h.load(Ordering::Relaxed));
//! });
//! hits.fetch_add(1, Ordering::Relaxed);
//! assert!(metrics.render().contains("hayate_cache_hits_total 1\n"));
//! ```

use std::fmt::{Display, Write};
use std::sync::{Arc, Mutex};

/// A metric family's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (resets when its process or instance restarts).
    Counter,
    /// Goes up and down.
    Gauge,
    /// Cumulative `_bucket{le=...}` series with `_sum` and `_count`.
    Histogram,
}

impl Kind {
    /// The name in `# TYPE` lines.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// Something that renders metric families: a subsystem's counters.
pub trait MetricsSource: Send + Sync {
    /// Appends whole families (each [`family`] header followed by its
    /// [`sample`]s) to `out`. Family names must be unique across sources.
    fn render(&self, out: &mut String);
}

struct FnSource<F>(F);

impl<F: Fn(&mut String) + Send + Sync> MetricsSource for FnSource<F> {
    fn render(&self, out: &mut String) {
        (self.0)(out)
    }
}

/// The registry: every source, in registration order. Cloning is shallow
/// (one registry per server).
#[derive(Clone, Default)]
pub struct Metrics {
    sources: Arc<Mutex<Vec<Arc<dyn MetricsSource>>>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.sources.lock().map_or(0, |s| s.len());
        write!(f, "Metrics({n} sources)")
    }
}

impl Metrics {
    /// Adds a source; it is rendered at every scrape from now on.
    pub fn register(&self, source: Arc<dyn MetricsSource>) {
        if let Ok(mut sources) = self.sources.lock() {
            sources.push(source);
        }
    }

    /// Adds a closure as a source.
    pub fn register_fn(&self, render: impl Fn(&mut String) + Send + Sync + 'static) {
        self.register(Arc::new(FnSource(render)));
    }

    /// Renders every source (a scrape).
    pub fn render(&self) -> String {
        let sources: Vec<Arc<dyn MetricsSource>> =
            self.sources.lock().map(|s| s.clone()).unwrap_or_default();
        let mut out = String::with_capacity(4096);
        for s in sources {
            s.render(&mut out);
        }
        out
    }
}

/// Writes a family's `# HELP` and `# TYPE` lines.
pub fn family(out: &mut String, name: &str, help: &str, kind: Kind) {
    let help = help.replace('\\', "\\\\").replace('\n', "\\n");
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {}", kind.as_str());
}

/// Writes one sample line: `name{label="value",...} value`. Label values
/// are escaped as the format requires.
pub fn sample(out: &mut String, name: &str, labels: &[(&str, &str)], value: impl Display) {
    out.push_str(name);
    if !labels.is_empty() {
        out.push('{');
        for (i, (k, v)) in labels.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(k);
            out.push_str("=\"");
            for c in v.chars() {
                match c {
                    '\\' => out.push_str("\\\\"),
                    '"' => out.push_str("\\\""),
                    '\n' => out.push_str("\\n"),
                    c => out.push(c),
                }
            }
            out.push('"');
        }
        out.push('}');
    }
    let _ = writeln!(out, " {value}");
}

/// Upper bounds of latency histograms' buckets, in microseconds (0.5 ms
/// to 10 s; a last, +Inf bucket follows).
pub const LATENCY_BUCKETS_US: [u64; 14] = [
    500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000,
    2_500_000, 5_000_000, 10_000_000,
];

/// The bucket of a latency of `us` microseconds (the last is +Inf).
pub fn latency_bucket(us: u64) -> usize {
    LATENCY_BUCKETS_US
        .iter()
        .position(|&b| us <= b)
        .unwrap_or(LATENCY_BUCKETS_US.len())
}

/// Writes one labelled latency histogram: `name_bucket` per bound
/// (cumulative, from per-bucket `counts`), `name_sum` in seconds and
/// `name_count`.
pub fn latency_histogram(
    out: &mut String,
    name: &str,
    labels: &[(&str, &str)],
    counts: &[u64; LATENCY_BUCKETS_US.len() + 1],
    sum_us: u64,
) {
    let bucket = format!("{name}_bucket");
    let mut cumulative = 0;
    for (i, n) in counts.iter().enumerate() {
        cumulative += n;
        let le = match LATENCY_BUCKETS_US.get(i) {
            Some(us) => (*us as f64 / 1e6).to_string(),
            None => "+Inf".to_string(),
        };
        let mut with_le = labels.to_vec();
        with_le.push(("le", &le));
        sample(out, &bucket, &with_le, cumulative);
    }
    sample(out, &format!("{name}_sum"), labels, sum_us as f64 / 1e6);
    sample(out, &format!("{name}_count"), labels, cumulative);
}

/// One sample line of a scrape, read back: what `GET /status.json` is built
/// from, so its numbers are those of the `/metrics` scrape.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The metric name (with `_bucket`, `_sum`, `_count` for histograms).
    pub name: String,
    /// Label pairs, unescaped, in written order.
    pub labels: Vec<(String, String)>,
    /// The value (`+Inf`, `-Inf` and `NaN` as their floats).
    pub value: f64,
}

impl Sample {
    /// The value of label `key`.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Reads the sample lines of a scrape written with [`family`] and
/// [`sample`]; comment lines are skipped, a line that does not parse is
/// left out.
pub fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(parse_line)
        .collect()
}

fn parse_line(line: &str) -> Option<Sample> {
    let (name, mut rest) = match line.find(['{', ' ']) {
        Some(i) => line.split_at(i),
        None => return None,
    };
    let mut labels = Vec::new();
    if let Some(inner) = rest.strip_prefix('{') {
        rest = inner;
        while !rest.starts_with('}') {
            let (key, after) = rest.split_once("=\"")?;
            let mut value = String::new();
            let mut chars = after.char_indices();
            let end = loop {
                match chars.next()? {
                    (i, '"') => break i,
                    (_, '\\') => match chars.next()?.1 {
                        'n' => value.push('\n'),
                        c => value.push(c),
                    },
                    (_, c) => value.push(c),
                }
            };
            labels.push((key.to_string(), value));
            rest = &after[end + 1..];
            rest = rest.strip_prefix(',').unwrap_or(rest);
        }
        rest = &rest[1..];
    }
    let value = match rest.trim() {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_families_in_registration_order_with_escaped_labels() {
        let m = Metrics::default();
        m.register_fn(|out| {
            family(out, "a_total", "First\nline", Kind::Counter);
            sample(out, "a_total", &[("route", "/x\"y\\")], 3);
        });
        m.register_fn(|out| {
            family(out, "b", "Second", Kind::Gauge);
            sample(out, "b", &[], 1.5);
        });
        assert_eq!(
            m.render(),
            "# HELP a_total First\\nline\n# TYPE a_total counter\n\
             a_total{route=\"/x\\\"y\\\\\"} 3\n\
             # HELP b Second\n# TYPE b gauge\nb 1.5\n"
        );
    }

    #[test]
    fn parse_reads_back_what_sample_wrote() {
        let mut out = String::new();
        family(&mut out, "a_total", "A", Kind::Counter);
        sample(
            &mut out,
            "a_total",
            &[("route", "/x\"y\\"), ("n", "a\nb,c}")],
            3,
        );
        sample(&mut out, "b", &[], 1.5);
        sample(&mut out, "c", &[("le", "+Inf")], "+Inf");
        out.push_str("broken{x=\"1\" 2\n");
        let got = parse(&out);
        assert_eq!(got.len(), 3, "{got:?}");
        assert_eq!(got[0].name, "a_total");
        assert_eq!(got[0].label("route"), Some("/x\"y\\"));
        assert_eq!(got[0].label("n"), Some("a\nb,c}"));
        assert_eq!(got[0].value, 3.0);
        assert_eq!((got[1].name.as_str(), got[1].value), ("b", 1.5));
        assert!(got[1].labels.is_empty());
        assert_eq!(got[2].label("le"), Some("+Inf"));
        assert_eq!(got[2].value, f64::INFINITY);
    }
}
