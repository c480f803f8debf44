//! Hops of one session: the copies a reverse proxy makes of each exchange.
//!
//! Input: one session's exchanges in capture order, and the servers whose hop earlier sessions
//! of the input showed.
//! Output: for each exchange, its hop (0: the copy nearest the client that the capture holds)
//! and, for a copy recognized as such, the exchange of the hop before that it relays.
//! Invariants:
//! - A capture taken where a proxy runs (`tcpdump -i any` on an nginx host), or a `--fleet` of
//!   captures on both sides of one, holds every exchange twice, on two connections: the
//!   client's to the proxy and the proxy's to the server. Audited as one stream of exchanges,
//!   the second copy of each event would read as a second delivery. So each hop is audited on
//!   its own, as if it were captured alone, and each copy is tied to the one it relays.
//! - A copy is told only by what a relay must do: the inner request has the same method and
//!   the same `Last-Event-ID` as the outer one, goes to another server, leaves after the outer
//!   request arrived and before the outer answer began, and its answer begins no later than the
//!   outer answer (a proxy cannot pass on what it has not received). One more sign is needed:
//!   the inner connection leaves from the address the outer one reached (a proxy with one
//!   address), or both answers begin with the same event id or the same event content.
//! - A copy the capture lost part of (its request, or the outer answer) is not paired; it
//!   still belongs to the hop of its server. Servers are placed by the copies that were paired,
//!   in this session or an earlier one of the input ([`HopMap`]): a proxy's place on the path is
//!   a fact of the deployment, not of one session.
//! - Two backends of a load balancer, captured on the backends, are one hop: their requests
//!   leave from the balancer's address, not from either backend's, and a resume carries a
//!   `Last-Event-ID` its first stream did not. Their exchanges stay audited together.
//! - Time: one pass over earlier exchanges per exchange, only in sessions whose exchanges
//!   reach more than one server; others cost one pass.

use std::collections::HashMap;

use crate::exchange::ExchangeSummary;
use crate::net::decode::Endpoint;

/// Where each exchange of a session sits on the path from client to server.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Hops {
    /// The hop of each exchange (index as in the session's exchanges).
    pub level: Vec<u32>,
    /// The exchange of the hop before that each one relays.
    pub relays: Vec<Option<usize>>,
    /// The highest hop.
    pub max: u32,
}

/// The hop of each server that paired copies placed, over the sessions of an input audited
/// so far; `None` for a server seen at two hops (it places nothing).
pub type HopMap = HashMap<Endpoint, Option<u32>, foldhash::quality::RandomState>;

/// Servers placed per input at most: past it, new servers are not learned (each session still
/// places its own).
const MAX_PLACED_SERVERS: usize = 4096;

/// Whether every exchange of a session that names its server names the same one: then
/// [`hops`] neither reads nor changes its `known` servers.
pub fn one_server(xs: &[Box<ExchangeSummary>]) -> bool {
    let first_server = xs.iter().find_map(|x| x.connection.server);
    xs.iter()
        .all(|x| x.connection.server.is_none() || x.connection.server == first_server)
}

/// The hops of a session's exchanges, given in capture order; `None` when every exchange
/// is on one hop (the common case: nothing relays anything). Learns into `known` the hop of
/// each server a pair placed.
pub fn hops(xs: &[Box<ExchangeSummary>], known: &mut HopMap) -> Option<Hops> {
    if one_server(xs) {
        return None;
    }
    let mut h = Hops {
        level: vec![0; xs.len()],
        relays: vec![None; xs.len()],
        max: 0,
    };
    let mut relayed = vec![false; xs.len()];
    for y in 0..xs.len() {
        // The latest earlier exchange that this one can relay.
        let Some(x) = (0..y)
            .rev()
            .find(|&x| !relayed[x] && relays(&xs[x], &xs[y]))
        else {
            continue;
        };
        relayed[x] = true;
        h.relays[y] = Some(x);
        h.level[y] = h.level[x] + 1;
    }
    // What the pairs say about servers, this session's first, then the input's.
    let mut placed: HashMap<Endpoint, Option<u32>> = HashMap::new();
    for (i, x) in xs.iter().enumerate() {
        if !(relayed[i] || h.relays[i].is_some()) {
            continue;
        }
        if let Some(server) = x.connection.server {
            let e = placed.entry(server).or_insert(Some(h.level[i]));
            if *e != Some(h.level[i]) {
                *e = None;
            }
        }
    }
    for (server, level) in &placed {
        if known.len() < MAX_PLACED_SERVERS || known.contains_key(server) {
            let e = known.entry(*server).or_insert(*level);
            if *e != *level {
                *e = None;
            }
        }
    }
    for (i, x) in xs.iter().enumerate() {
        if relayed[i] || h.relays[i].is_some() {
            continue;
        }
        let Some(server) = x.connection.server else {
            continue;
        };
        if let Some(Some(level)) = placed.get(&server).or_else(|| known.get(&server)) {
            h.level[i] = *level;
        }
    }
    let min = h.level.iter().copied().min().unwrap_or(0);
    for l in &mut h.level {
        *l -= min;
    }
    h.max = h.level.iter().copied().max().unwrap_or(0);
    (h.max > 0).then_some(h)
}

/// `inner` is the copy a proxy made of `outer`, by the rules of the module's header.
fn relays(outer: &ExchangeSummary, inner: &ExchangeSummary) -> bool {
    let (oc, ic) = (&outer.connection, &inner.connection);
    if oc.har_entry.is_some() || ic.har_entry.is_some() || oc.tcp_stream == ic.tcp_stream {
        return false;
    }
    let (Some(o_server), Some(i_server), Some(i_client)) = (oc.server, ic.server, ic.client) else {
        return false;
    };
    let (Some(oq), Some(iq)) = (outer.request, inner.request) else {
        return false;
    };
    if o_server == i_server
        || outer.method.is_none()
        || outer.method != inner.method
        || outer.last_event_id != inner.last_event_id
        || iq.time_ns < oq.time_ns
    {
        return false;
    }
    // Without the outer answer nothing bounds when a copy had to leave: any later request
    // of the session would fit. Such a copy is placed by its server instead.
    let Some(or) = outer.response else {
        return false;
    };
    if iq.time_ns > or.time_ns {
        return false;
    }
    match inner.response {
        Some(ir) if ir.time_ns > or.time_ns => return false,
        Some(_) if outer.status != inner.status => return false,
        _ => {}
    }
    i_client.ip == o_server.ip || same_start(outer, inner)
}

/// Both answers begin with the same event id, or with the same event content.
fn same_start(a: &ExchangeSummary, b: &ExchangeSummary) -> bool {
    let (Some(sa), Some(sb)) = (a.stream(), b.stream()) else {
        return false;
    };
    match (&sa.first_id, &sb.first_id) {
        (Some(ia), Some(ib)) => return ia.text == ib.text,
        (None, None) => {}
        _ => return false,
    }
    match (sa.content.iter().next(), sb.content.iter().next()) {
        (Some(ca), Some(cb)) => ca.hash == cb.hash,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exchange::{ConnectionRef, IdSeen, StreamSummary, held_stream};
    use crate::record::Mark;

    fn at(ip: [u8; 4], port: u16) -> Endpoint {
        Endpoint {
            ip: std::net::IpAddr::from(ip),
            port,
        }
    }

    /// An exchange on connection `conn` from `client` to `server`: request at `req`, answer
    /// at `resp` (times in the units of frames), its stream opening with `first` id.
    fn x(
        conn: u64,
        client: Endpoint,
        server: Endpoint,
        last: Option<&str>,
        req: u64,
        resp: Option<u64>,
        first: Option<&str>,
    ) -> ExchangeSummary {
        let mark = |f: u64| Mark::new(f, f as i64 * 1000);
        let held = held_stream(first.map(|id| {
            Box::new(StreamSummary {
                first_id: Some(IdSeen {
                    text: id.into(),
                    mark: Mark::default(),
                    id_index: 0,
                }),
                ..Default::default()
            })
        }));
        ExchangeSummary {
            connection: ConnectionRef {
                tcp_stream: Some(conn),
                client: Some(client),
                server: Some(server),
                ..Default::default()
            },
            exchange: 0,
            session_id: Some("s".into()),
            method: Some("GET".into()),
            target: Some("/mcp".into()),
            last_event_id: last.map(str::to_string),
            protocol_version: None,
            request: Some(mark(req)),
            status: resp.map(|_| 200),
            response: resp.map(mark),
            event_stream: true,
            end: None,
            stream_facts: held.facts,
            stream_empty: held.empty,
            stream_room: held.room,
            stream_distinctive: held.distinctive,
            opens_session: false,
        }
    }

    /// The hops of one session alone in its input.
    fn hops_alone(xs: &[ExchangeSummary]) -> Option<Hops> {
        hops(&boxed(xs), &mut HopMap::default())
    }

    /// The summaries as the session stage holds them.
    #[allow(clippy::vec_box)]
    fn boxed(xs: &[ExchangeSummary]) -> Vec<Box<ExchangeSummary>> {
        xs.iter().cloned().map(Box::new).collect()
    }

    const CLIENT: [u8; 4] = [10, 0, 0, 1];
    const PROXY: [u8; 4] = [10, 0, 0, 2];
    const BACKEND: [u8; 4] = [10, 0, 0, 3];

    #[test]
    fn a_proxys_copies_are_the_next_hop() {
        let (c, p, b) = (at(CLIENT, 5000), at(PROXY, 443), at(BACKEND, 8000));
        let xs = [
            x(0, c, p, None, 1, Some(4), Some("1")),
            x(1, at(PROXY, 6000), b, None, 2, Some(3), Some("1")),
            x(2, c, p, Some("3"), 10, Some(13), Some("4")),
            x(3, at(PROXY, 6001), b, Some("3"), 11, Some(12), Some("4")),
        ];
        let h = hops_alone(&xs).expect("two hops");
        assert_eq!(h.level, [0, 1, 0, 1]);
        assert_eq!(h.relays, [None, Some(0), None, Some(2)]);
        assert_eq!(h.max, 1);
    }

    #[test]
    fn a_chain_of_proxies_counts_its_hops() {
        let lb = at([10, 0, 0, 9], 443);
        let xs = [
            x(0, at(CLIENT, 5000), lb, Some("7"), 1, Some(6), None),
            x(
                1,
                at([10, 0, 0, 9], 7000),
                at(PROXY, 80),
                Some("7"),
                2,
                Some(5),
                None,
            ),
            x(
                2,
                at(PROXY, 6000),
                at(BACKEND, 8000),
                Some("7"),
                3,
                Some(4),
                None,
            ),
        ];
        assert_eq!(hops_alone(&xs).expect("three hops").level, [0, 1, 2]);
    }

    #[test]
    fn a_copy_must_ask_the_same_and_fit_inside_the_outer_exchange() {
        let (c, p, b) = (at(CLIENT, 5000), at(PROXY, 443), at(BACKEND, 8000));
        let q = at(PROXY, 6000);
        // Another cursor: another request, not a copy.
        assert_eq!(
            hops_alone(&[
                x(0, c, p, Some("3"), 1, Some(4), None),
                x(1, q, b, Some("2"), 2, Some(3), None)
            ]),
            None
        );
        // Sent after the outer answer began: not relayed by this exchange.
        assert_eq!(
            hops_alone(&[
                x(0, c, p, Some("3"), 1, Some(4), None),
                x(1, q, b, Some("3"), 5, Some(6), None)
            ]),
            None
        );
        // Answered after the outer answer: a proxy cannot pass on what it has not received.
        assert_eq!(
            hops_alone(&[
                x(0, c, p, Some("3"), 1, Some(4), None),
                x(1, q, b, Some("3"), 2, Some(5), None)
            ]),
            None
        );
        // The outer answer was not captured: nothing bounds when its copy left.
        let mut unanswered = x(0, c, p, Some("3"), 1, None, None);
        unanswered.status = None;
        assert_eq!(
            hops_alone(&[unanswered, x(1, q, b, Some("3"), 2, Some(3), None)]),
            None
        );
        // Sent before the outer request.
        assert_eq!(
            hops_alone(&[
                x(0, q, b, Some("3"), 1, Some(3), None),
                x(1, c, p, Some("3"), 2, Some(4), None)
            ]),
            None
        );
    }

    #[test]
    fn backends_of_a_balancer_stay_one_hop() {
        // Captured on two backends: both requests come from the balancer, neither from the
        // address the other reached, and their streams begin differently.
        let lb = at([10, 0, 0, 9], 40000);
        let (a, b) = (at([10, 0, 1, 1], 8000), at([10, 0, 1, 2], 8000));
        let xs = [
            x(0, lb, a, None, 1, Some(2), Some("1")),
            x(1, at([10, 0, 0, 9], 40001), b, None, 1, Some(2), Some("9")),
        ];
        assert_eq!(hops_alone(&xs), None);
        // One server only: nothing to look for.
        let xs = [
            x(0, at(CLIENT, 1), a, None, 1, Some(5), Some("1")),
            x(1, at(CLIENT, 2), a, None, 2, Some(3), Some("1")),
        ];
        assert_eq!(hops_alone(&xs), None);
    }

    #[test]
    fn a_proxy_with_two_addresses_is_told_by_the_stream_it_passes_on() {
        // The proxy reached at one address leaves from another: the same first id ties the
        // copies; a different one does not.
        let (c, p, b) = (at(CLIENT, 5000), at(PROXY, 443), at(BACKEND, 8000));
        let inner = at([192, 168, 0, 2], 6000);
        let same = [
            x(0, c, p, Some("3"), 1, Some(4), Some("4")),
            x(1, inner, b, Some("3"), 2, Some(3), Some("4")),
        ];
        assert_eq!(hops_alone(&same).map(|h| h.level), Some(vec![0, 1]));
        let other = [
            x(0, c, p, Some("3"), 1, Some(4), Some("4")),
            x(1, inner, b, Some("3"), 2, Some(3), Some("1")),
        ];
        assert_eq!(hops_alone(&other), None);
    }

    #[test]
    fn a_copy_the_capture_lost_part_of_is_on_its_servers_hop() {
        let (c, p, b) = (at(CLIENT, 5000), at(PROXY, 443), at(BACKEND, 8000));
        let q = at(PROXY, 6000);
        // The second copy lost its request: it cannot be paired, but its server is the
        // backend, which the first pair placed at hop 1.
        let mut lost = x(3, q, b, Some("3"), 11, Some(12), Some("4"));
        lost.request = None;
        lost.method = None;
        let xs = [
            x(0, c, p, None, 1, Some(4), Some("1")),
            x(1, q, b, None, 2, Some(3), Some("1")),
            x(2, c, p, Some("3"), 10, Some(13), Some("4")),
            lost.clone(),
        ];
        let mut known = HopMap::default();
        let h = hops(&boxed(&xs), &mut known).expect("two hops");
        assert_eq!(h.level, [0, 1, 0, 1]);
        assert_eq!(h.relays, [None, Some(0), None, None]);
        // A later session of the input with no pair of its own: the servers keep their hops.
        let later = [x(4, c, p, Some("3"), 20, Some(23), Some("4")), lost];
        assert_eq!(
            hops(&boxed(&later), &mut known).map(|h| h.level),
            Some(vec![0, 1])
        );
        assert_eq!(hops_alone(&later), None);
        // A server seen at two hops places nothing.
        assert_eq!(
            hops(&boxed(&later), &mut HopMap::from_iter([(b, None)])),
            None
        );
    }

    #[test]
    fn a_session_holding_only_inner_hops_starts_at_hop_zero() {
        let (p, b) = (at(PROXY, 443), at(BACKEND, 8000));
        let mut known = HopMap::from_iter([(p, Some(0)), (b, Some(1))]);
        let xs = [x(0, at(CLIENT, 1), b, None, 1, Some(2), None)];
        assert_eq!(hops(&boxed(&xs), &mut known), None);
    }
}
