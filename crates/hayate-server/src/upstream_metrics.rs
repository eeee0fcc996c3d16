//! Upstream members for `GET /metrics` (and so `/status.json`): each
//! route's members, their health, requests in flight and idle pooled
//! connections, summed over the workers (each worker has its own copy of a
//! group and publishes its figures once a second: hayate-proxy's
//! `figures.rs`), and each member's response head latencies. Labels stay
//! bounded: one set per configured member (`app[i]` for supervised slots).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use hayate_core::metrics::{
    family, latency_histogram, sample, Kind, MetricsSource, LATENCY_BUCKETS_US,
};
use hayate_proxy::{FiguresSlot, MemberState};

use crate::request_metrics::RequestMetrics;

const STATE: &str = "hayate_upstream_member_state";
const IN_FLIGHT: &str = "hayate_upstream_member_in_flight";
const IDLE: &str = "hayate_upstream_member_idle_connections";
const RESPONSE: &str = "hayate_upstream_response_seconds";

/// Every worker's published figures, by route (its metrics slot, whose
/// labels the request counters keep).
pub struct UpstreamMetrics {
    routes: Arc<RequestMetrics>,
    slots: Mutex<Vec<(usize, FiguresSlot)>>,
}

/// One member summed over workers.
struct Member {
    /// The worst state any worker sees it in.
    state: MemberState,
    in_flight: u64,
    idle: u64,
    response_counts: [u64; LATENCY_BUCKETS_US.len() + 1],
    response_sum_us: u64,
}

impl UpstreamMetrics {
    /// Figures labelled as `routes` labels its counters.
    pub fn new(routes: Arc<RequestMetrics>) -> Arc<UpstreamMetrics> {
        Arc::new(UpstreamMetrics {
            routes,
            slots: Mutex::new(Vec::new()),
        })
    }

    /// A new slot for one worker's group of route `route`.
    pub fn slot(&self, route: usize) -> FiguresSlot {
        let slot = FiguresSlot::default();
        if let Ok(mut slots) = self.slots.lock() {
            slots.push((route, slot.clone()));
        }
        slot
    }

    /// Per route index, its members in member order. The slots of groups
    /// that are gone (a reload replaced them) are forgotten: only this
    /// registry holds them then.
    fn totals(&self) -> BTreeMap<usize, Vec<(String, Member)>> {
        let slots = match self.slots.lock() {
            Ok(mut slots) => {
                slots.retain(|(_, slot)| Arc::strong_count(slot) > 1);
                slots.clone()
            }
            Err(_) => Vec::new(),
        };
        let mut routes: BTreeMap<usize, Vec<(String, Member)>> = BTreeMap::new();
        for (route, slot) in slots {
            let figures = slot.lock().map(|f| f.clone()).unwrap_or_default();
            let members = routes.entry(route).or_default();
            for f in figures {
                let i = match members.iter().position(|(l, _)| *l == f.label) {
                    Some(i) => i,
                    None => {
                        let m = Member {
                            state: MemberState::Up,
                            in_flight: 0,
                            idle: 0,
                            response_counts: [0; LATENCY_BUCKETS_US.len() + 1],
                            response_sum_us: 0,
                        };
                        members.push((f.label.clone(), m));
                        members.len() - 1
                    }
                };
                let m = &mut members[i].1;
                m.state = m.state.max(f.state);
                m.in_flight += u64::from(f.in_flight);
                m.idle += f.idle as u64;
                for (t, n) in m.response_counts.iter_mut().zip(f.response_counts) {
                    *t += n;
                }
                m.response_sum_us = m.response_sum_us.wrapping_add(f.response_sum_us);
            }
        }
        routes
    }
}

impl MetricsSource for UpstreamMetrics {
    fn render(&self, out: &mut String) {
        let totals = self.totals();
        let labels = self.routes.labels();
        // (site, route, member) labels and figures, in route then member order.
        let rows: Vec<([(&str, &str); 3], &Member)> = totals
            .iter()
            .filter_map(|(route, members)| Some((labels.get(*route)?, members)))
            .flat_map(|((site, prefix), members)| {
                members.iter().map(move |(label, m)| {
                    let labels = [
                        ("site", site.as_str()),
                        ("route", prefix.as_str()),
                        ("member", label.as_str()),
                    ];
                    (labels, m)
                })
            })
            .collect();
        family(
            out,
            STATE,
            "Health of each upstream member (1 for its state: the worst any worker sees)",
            Kind::Gauge,
        );
        for ([site, route, member], m) in &rows {
            for state in MemberState::ALL {
                let labels = [*site, *route, *member, ("state", state.as_str())];
                sample(out, STATE, &labels, u8::from(m.state == state));
            }
        }
        family(
            out,
            IN_FLIGHT,
            "Requests in flight on each upstream member, across workers",
            Kind::Gauge,
        );
        for (labels, m) in &rows {
            sample(out, IN_FLIGHT, labels, m.in_flight);
        }
        family(
            out,
            IDLE,
            "Idle keep-alive connections pooled to each upstream member, across workers",
            Kind::Gauge,
        );
        for (labels, m) in &rows {
            sample(out, IDLE, labels, m.idle);
        }
        family(
            out,
            RESPONSE,
            "Time from the start of an upstream attempt (after the queue) to its response head, per member, across workers",
            Kind::Histogram,
        );
        for (labels, m) in &rows {
            latency_histogram(out, RESPONSE, labels, &m.response_counts, m.response_sum_us);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hayate_config::RouteLayer;
    use hayate_core::metrics::Metrics;
    use hayate_proxy::MemberFigures;

    #[test]
    fn members_are_summed_over_workers_with_the_worst_state() {
        let mut layer = RouteLayer::default();
        layer.set_strs("root", &[".".into()]).unwrap();
        let config = hayate_config::without_file(&hayate_config::Overrides {
            route: layer,
            ..Default::default()
        })
        .expect("config");
        let routes = RequestMetrics::new();
        let slot = routes.slots(&config)[0];
        let m = UpstreamMetrics::new(routes);
        let figures = |state, in_flight, idle| MemberFigures {
            label: "127.0.0.1:3000".into(),
            state,
            in_flight,
            idle,
            response_counts: std::array::from_fn(|i| u64::from(i == 1)),
            response_sum_us: 700,
        };
        // Two workers' copies of the group, alive while they hold them.
        let (one, two) = (m.slot(slot), m.slot(slot));
        *one.lock().unwrap() = vec![figures(MemberState::Up, 2, 5)];
        *two.lock().unwrap() = vec![figures(MemberState::Ejected, 1, 0)];
        let registry = Metrics::default();
        registry.register(m);
        let text = registry.render();
        let labels = "site=\"*\",route=\"/\",member=\"127.0.0.1:3000\"";
        for line in [
            format!("{STATE}{{{labels},state=\"up\"}} 0\n"),
            format!("{STATE}{{{labels},state=\"ejected\"}} 1\n"),
            format!("{STATE}{{{labels},state=\"probed-down\"}} 0\n"),
            format!("{IN_FLIGHT}{{{labels}}} 3\n"),
            format!("{IDLE}{{{labels}}} 5\n"),
            format!("{RESPONSE}_bucket{{{labels},le=\"0.0005\"}} 0\n"),
            format!("{RESPONSE}_bucket{{{labels},le=\"0.001\"}} 2\n"),
            format!("{RESPONSE}_bucket{{{labels},le=\"+Inf\"}} 2\n"),
            format!("{RESPONSE}_sum{{{labels}}} 0.0014\n"),
            format!("{RESPONSE}_count{{{labels}}} 2\n"),
        ] {
            assert!(text.contains(&line), "{line:?} in\n{text}");
        }
        drop((one, two));
        let text = registry.render();
        assert!(
            !text.contains("member=\""),
            "a group gone is forgotten:\n{text}"
        );
    }
}
