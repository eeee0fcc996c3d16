use super::*;

pub(crate) fn group(n: usize) -> UpstreamGroup {
    let addrs: Vec<UpstreamAddr> = (0..n)
        .map(|i| UpstreamAddr::parse(&format!("127.0.0.1:{}", 1000 + i)).expect("addr"))
        .collect();
    UpstreamGroup::new(
        &addrs,
        ProxySettings {
            max_fails: 2,
            ..Default::default()
        },
    )
}

#[test]
fn least_outstanding_then_rotation() {
    let g = group(3);
    let now = Instant::now();
    g.members[0].outstanding.set(2);
    g.members[1].outstanding.set(1);
    g.members[2].outstanding.set(1);
    let picks: Vec<usize> = (0..4)
        .map(|_| g.pick(now, &[], None).expect("member"))
        .collect();
    assert!(picks.iter().all(|&p| p == 1 || p == 2), "{picks:?}");
    assert!(
        picks.contains(&1) && picks.contains(&2),
        "ties rotate: {picks:?}"
    );
    assert_eq!(g.pick(now, &[1, 2], None), Ok(0));
    assert_eq!(g.pick(now, &[0, 1, 2], None), Err(Busy::Exhausted));
}

#[test]
fn hashing_is_consistent_and_round_robin_rotates() {
    let addrs: Vec<UpstreamAddr> = (0..4)
        .map(|i| UpstreamAddr::parse(&format!("127.0.0.1:{}", 2000 + i)).expect("addr"))
        .collect();
    let g = UpstreamGroup::new(
        &addrs,
        ProxySettings {
            balance: Balance::HashIp,
            ..Default::default()
        },
    );
    let now = Instant::now();
    for key in [&b"10.0.0.1"[..], b"10.0.0.2", b"user-42"] {
        let first = g.pick(now, &[], Some(key)).expect("member");
        assert!(
            (0..10).all(|_| g.pick(now, &[], Some(key)) == Ok(first)),
            "same key, same member"
        );
        // Another member failing does not move this key.
        let other = (first + 1) % 4;
        assert_eq!(g.pick(now, &[other], Some(key)), Ok(first));
    }
    let spread: std::collections::HashSet<usize> = (0..64)
        .map(|i| {
            g.pick(now, &[], Some(format!("k{i}").as_bytes()))
                .expect("member")
        })
        .collect();
    assert!(spread.len() >= 3, "keys spread over members: {spread:?}");
    let rr = UpstreamGroup::new(
        &addrs,
        ProxySettings {
            balance: Balance::RoundRobin,
            ..Default::default()
        },
    );
    let picks: Vec<usize> = (0..8)
        .map(|_| rr.pick(now, &[], None).expect("member"))
        .collect();
    assert_eq!(picks, vec![0, 1, 2, 3, 0, 1, 2, 3]);
}

#[test]
fn weights_shape_round_robin_and_least_outstanding() {
    let addrs: Vec<UpstreamAddr> = (0..2)
        .map(|i| UpstreamAddr::parse(&format!("127.0.0.1:{}", 3000 + i)).expect("addr"))
        .collect();
    let mut rr = UpstreamGroup::new(
        &addrs,
        ProxySettings {
            balance: Balance::RoundRobin,
            ..Default::default()
        },
    );
    rr.set_weights(&[3, 1]);
    let now = Instant::now();
    let picks: Vec<usize> = (0..8)
        .map(|_| rr.pick(now, &[], None).expect("member"))
        .collect();
    assert_eq!(picks.iter().filter(|&&p| p == 0).count(), 6, "{picks:?}");
    for window in picks.chunks(4) {
        assert_eq!(
            window.iter().filter(|&&p| p == 1).count(),
            1,
            "smooth, not bursty: {picks:?}"
        );
    }
    let mut lc = UpstreamGroup::new(&addrs, ProxySettings::default());
    lc.set_weights(&[3, 1]);
    lc.members[0].outstanding.set(2);
    lc.members[1].outstanding.set(1);
    // 2/3 < 1/1: the heavier member still has room.
    assert_eq!(lc.pick(now, &[], None), Ok(0));
}

#[test]
fn cookie_and_header_keys() {
    let g = UpstreamGroup::new(
        &[UpstreamAddr::parse("127.0.0.1:1").expect("addr")],
        ProxySettings {
            balance: Balance::HashCookie("sid".into()),
            ..Default::default()
        },
    );
    let headers: Vec<(&[u8], &[u8])> = vec![(b"Cookie", b"a=1; sid=xyz; b=2")];
    assert_eq!(g.balance_key(&headers, "1.2.3.4"), Some(&b"xyz"[..]));
    assert_eq!(g.balance_key(&[], "1.2.3.4"), None);
}

#[test]
fn members_at_their_limit_are_full() {
    let addrs = [UpstreamAddr::parse("127.0.0.1:1000").expect("addr")];
    let g = UpstreamGroup::new(
        &addrs,
        ProxySettings {
            max_conns: 2,
            ..Default::default()
        },
    );
    let now = Instant::now();
    g.members[0].outstanding.set(1);
    assert_eq!(g.pick(now, &[], None), Ok(0));
    g.members[0].outstanding.set(2);
    assert_eq!(g.pick(now, &[], None), Err(Busy::Full));
}

#[test]
fn an_ejected_app_slot_is_up_again_once_its_instance_is_replaced() {
    use hayate_core::app::{AppAddr, AppInstance};
    let app = AppSlots::new(1);
    let instance = |id| AppInstance::new(AppAddr::Unix(format!("/i{id}").into()), id);
    app.slots[0].replace(Some(instance(1)));
    let g = UpstreamGroup::for_app(&app, ProxySettings::default());
    let now = Instant::now();
    for _ in 0..g.settings.max_fails {
        g.members[0].failed(&g.settings);
    }
    assert!(!g.members[0].is_up(now), "ejected after max_fails");
    // The crashed instance's slot is empty until its replacement is
    // ready: still ejected.
    app.slots[0].replace(None);
    assert!(!g.members[0].is_up(now));
    app.slots[0].replace(Some(instance(2)));
    assert!(g.members[0].is_up(now), "a new instance takes requests");
    assert_eq!(g.pick(now, &[], None), Ok(0));
}

#[test]
fn failures_eject_and_success_restores() {
    let g = group(2);
    let now = Instant::now();
    g.members[0].failed(&g.settings);
    assert!(
        (0..4).any(|_| g.pick(now, &[], None) == Ok(0)),
        "one failure does not eject"
    );
    g.members[0].failed(&g.settings);
    assert!(
        (0..4).all(|_| g.pick(now, &[], None) == Ok(1)),
        "ejected after max_fails"
    );
    // Every member down: the one back soonest is still tried.
    g.members[1].failed(&g.settings);
    g.members[1].failed(&g.settings);
    assert_eq!(g.pick(now, &[], None), Ok(0));
    g.members[0].succeeded();
    assert_eq!(g.pick(now, &[], None), Ok(0));
}

#[test]
fn max_fails_zero_never_ejects_and_a_failure_after_the_timeout_ejects_again() {
    let never = UpstreamGroup::new(
        &[UpstreamAddr::parse("127.0.0.1:1000").expect("addr")],
        ProxySettings {
            max_fails: 0,
            ..Default::default()
        },
    );
    for _ in 0..10 {
        never.members[0].failed(&never.settings);
    }
    assert!(never.members[0].is_up(Instant::now()));

    let g = group(2);
    g.members[0].failed(&g.settings);
    g.members[0].failed(&g.settings);
    let back = g.members[0].down_until.get().expect("ejected");
    assert!(!g.members[0].is_up(Instant::now()));
    assert!(
        g.members[0].is_up(back),
        "tried again once the timeout ends"
    );
    // Still failing when tried again: one failure is enough.
    g.members[0].down_until.set(None);
    g.members[0].failed(&g.settings);
    assert!(!g.members[0].is_up(Instant::now()));
}
