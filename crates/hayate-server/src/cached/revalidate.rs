//! stale-while-revalidate (RFC 5861): the stale copy answers while one
//! background fetch, the fill's leader, refreshes it.

use std::rc::Rc;
use std::sync::Arc;

use hayate_cache::store::Key;
use hayate_cache::{Role, Stored};
use hayate_core::client_body::NoBody;
use hayate_proxy::{CgiScript, ProxyRequest, UpstreamGroup};

use super::{fetch, RouteCache};

/// stale-while-revalidate: one background fetch (the fill's leader) while
/// the stale copy answers.
pub(super) fn refresh_in_background(
    rc: &RouteCache,
    group: &Rc<UpstreamGroup>,
    req: &ProxyRequest<'_>,
    key: &Key,
    stored: &Arc<Stored>,
) {
    let Role::Leader(leader) = rc.shared.fills.join(key) else {
        return; // someone is already fetching it
    };
    let rc = rc.clone();
    let group = group.clone();
    let key = key.clone();
    let stale = stored.clone();
    let target = req.target.to_vec();
    let host = req.host.map(<[u8]>::to_vec);
    let client_ip = req.client_ip.to_string();
    let forwarded_chain = req
        .forwarded_chain
        .map(|c| (c.hops.to_string(), c.peer.to_string()));
    let (scheme, ports) = (req.scheme, req.ports);
    let headers: Vec<(Vec<u8>, Vec<u8>)> = req
        .headers
        .iter()
        .map(|(n, v)| (n.to_vec(), v.to_vec()))
        .collect();
    // A FastCGI request's script, owned for the task.
    let cgi = req.cgi.map(|c| {
        let path = [c.url_prefix, c.script_name, c.path_info].concat();
        let (prefix_end, script_end) =
            (c.url_prefix.len(), c.url_prefix.len() + c.script_name.len());
        let root = c.document_root.to_string();
        (
            (root, c.request_uri.to_vec()),
            path,
            (prefix_end, script_end),
            c.server_port,
            c.remote_port,
            c.protocol,
        )
    });
    tokio::task::spawn_local(async move {
        let req = ProxyRequest {
            method: b"GET",
            target: &target,
            headers: headers.iter().map(|(n, v)| (&n[..], &v[..])).collect(),
            client_ip: &client_ip,
            forwarded_chain: forwarded_chain
                .as_ref()
                .map(|(hops, peer)| hayate_proxy::ForwardedChain { hops, peer }),
            host: host.as_deref(),
            scheme,
            cgi: cgi.as_ref().map(
                |(
                    (root, request_uri),
                    path,
                    (prefix_end, end),
                    server_port,
                    remote_port,
                    protocol,
                )| CgiScript {
                    document_root: root,
                    request_uri,
                    url_prefix: &path[..*prefix_end],
                    script_name: &path[*prefix_end..*end],
                    path_info: &path[*end..],
                    server_port: *server_port,
                    remote_port: *remote_port,
                    protocol,
                },
            ),
            ports,
            // A refresh in the background, on behalf of no one client.
            client_cert: None,
        };
        let stale_if_error = false;
        let _ = fetch(
            &rc,
            &group,
            &req,
            &mut NoBody,
            &key,
            Some((stale, stale_if_error)),
            Some(leader),
        )
        .await;
    });
}
