//! The request path, top-down (DESIGN.md, "The request path"):
//!
//! 1. The request head has been read and validated by its protocol module
//!    (HTTP/1: `hayate_core::h1::request`, limits and framing) into a
//!    protocol-neutral `RequestHead`; here the path is normalized and
//!    refused with 400 if it is unsafe.
//! 2. Route by Host and path prefix; the route's access policies
//!    (`policy`: rate and connection limits, allow/deny, basic auth) may
//!    answer instead, for the client identify decided (`policy::client`,
//!    before this); a request a conn_limit lets in has its slot held by its
//!    response until that is sent. On a route behind an auth service
//!    (`policy::forward_auth`) or a fleet-wide rate limit (counted in
//!    Redis), or for a request a rate limit delays, the rest waits
//!    ([`upstream`] waits).
//! 3. Origin: a file under the route's root if one matches (files come
//!    compressed once from the static root). On a FastCGI route (PHP) a
//!    path that names a script runs it instead (never served as a file; a
//!    script that may not run is a 404: `hayate_static::scripts`; a file or
//!    script behind a symlink the route does not follow is a 403, never
//!    "no file"), and one that matches no file runs the directory's index
//!    script or the front controller. Else
//! 4. the route's upstream group (try_files), through the response cache
//!    when the route caches (`cached.rs`: lookup, coalesced fetch, store);
//!    non-GET methods go straight to the upstream when there is one.
//! 5. Compression of proxied bodies as they stream (inside the cache's
//!    fetch when the route caches, so the compressed variant is what is
//!    stored); response headers common to every response are added by the
//!    protocol's writer (HTTP/1: `hayate_core::h1::response`).
//!
//! Answers the request path decides (400 for an unsafe path, 404, 405) are
//! made here; failures (a client's body, an upstream, a file's I/O, a
//! malformed head) become responses in one place, `hayate_core::error`.
//!
//! Steps 1-3 and the cache's lookup need no waiting and run as plain
//! functions ([`answer`]); only a request that reaches an upstream builds a
//! future ([`upstream`]). Files and cache hits, most requests, thus never
//! pay for the proxy's and the cache fill's state.

use std::borrow::Cow;
use std::rc::Rc;
use std::time::Instant;

use hayate_core::boxed::pinned;
use hayate_core::client_body::ClientBody;
use hayate_core::field::name_is;
use hayate_core::transport::{Peer, Scheme};
use hayate_core::{Response, Status};
use hayate_proxy::{CgiScript, ClientPorts, ProxyRequest, UpstreamGroup};
use hayate_static::scripts::{Script, ScriptRoot};

use crate::cached::{Miss, RouteCache};
use crate::policy::client_cert;
use crate::policy::conn_limit::ConnSlot;
use crate::policy::forward_auth::Verdict;
use crate::policy::headers::RequestFieldChanges;
use crate::policy::rewrite::Rewritten;
use crate::policy::{
    Access, AccessRequest, Admission, ForwardedClient, ResponseRequest, RoutePolicies,
};
use crate::router::{handler_path, Route, Router};

mod files;
pub(crate) use files::{serve_file, wants_json};
use hayate_core::request::{RequestHead, Version};

/// Where ACME's HTTP-01 challenges are fetched (RFC 8555 §8.3).
const ACME_CHALLENGE_PATH: &[u8] = b"/.well-known/acme-challenge/";

/// Who sent the request: the peer, or the client a trusted proxy named
/// (decided once, by the identify phase: `policy::client`).
#[derive(Debug, Clone, Copy)]
pub struct Client<'a> {
    /// The connection's other end: its address (`unix` on a Unix socket)
    /// and ports.
    pub peer: &'a Peer,
    /// The client a trusted proxy named; `None`: the client is the peer.
    pub forwarded: Option<&'a ForwardedClient>,
}

impl<'a> Client<'a> {
    /// The client of a request from `peer`, as `forwarded` names it.
    pub fn new(peer: &'a Peer, forwarded: Option<&'a ForwardedClient>) -> Client<'a> {
        Client { peer, forwarded }
    }

    /// The addresses the request came through, when a trusted proxy named
    /// the client.
    pub fn forwarded_chain(&self) -> Option<hayate_proxy::ForwardedChain<'a>> {
        self.forwarded.map(|f| hayate_proxy::ForwardedChain {
            hops: &f.chain,
            peer: &self.peer.addr,
        })
    }

    /// Whether the client came through a Unix socket.
    pub fn over_unix_socket(&self) -> bool {
        self.peer.addr == "unix"
    }

    /// The client's address as text (`unix` for a Unix socket's peer).
    pub fn addr(&self) -> &'a str {
        match self.forwarded {
            Some(f) => f.text(),
            None => &self.peer.addr,
        }
    }

    /// The client's address (`None` for a Unix socket's peer).
    pub fn ip(&self) -> Option<std::net::IpAddr> {
        match self.forwarded {
            Some(f) => Some(f.ip),
            None => self.peer.ip,
        }
    }
}

/// What the request path decided without waiting.
pub enum Answer<'r> {
    /// The answer (a file, a cache hit, an error), and which route gave
    /// it (its index, for the per-route metrics).
    Now(Response, Option<usize>),
    /// The route's upstream must answer: [`upstream`] does, in a future
    /// that only requests reaching an upstream build.
    Upstream(ToUpstream<'r>),
}

/// A request whose answer waits: for its route's upstream group, or first
/// for the route's auth service.
pub struct ToUpstream<'r> {
    route: &'r Route,
    step: Step<'r>,
    /// For an X-Accel-Redirect to another route of the site.
    router: &'r Router,
    /// The request's conn_limit slot, which its response holds.
    slot: Option<ConnSlot>,
}

/// What a [`ToUpstream`] waits for first.
enum Step<'r> {
    /// The route's upstream group.
    Origin(Origin<'r>),
    /// The access phase waits: for Redis's count of a fleet-wide rate
    /// limit, for the request's turn at its rate (`delay`, when not zero),
    /// then for the route's auth service (`forward_auth`) when it has one;
    /// then steps 3-4 run as for any other request: files, the cache, the
    /// upstream. `path` is the normalized path
    /// (borrowed when normalizing changed nothing).
    Admit {
        path: Cow<'r, [u8]>,
        delay: std::time::Duration,
    },
}

/// What the route's upstream group is asked.
struct Origin<'r> {
    group: &'r Rc<UpstreamGroup>,
    /// The target to send (see [`upstream_target`]).
    target: Cow<'r, [u8]>,
    /// The route's cache, and why it could not answer.
    cache: Option<(&'r RouteCache, Miss)>,
    /// On a FastCGI route, the script to run.
    script: Option<ScriptPath>,
}

/// What steps 3-4a decided: an answer, or the route's upstream.
enum Served<'r> {
    Now(Response),
    Origin(Origin<'r>),
}

impl ToUpstream<'_> {
    /// The route's index, for the per-route metrics.
    pub fn route_index(&self) -> usize {
        self.route.index
    }
}

/// Step 1a, the rewrite phase: the site's rules (`policy::rewrite`) on the
/// request as it came, before [`answer`] routes it. A rewrite replaces
/// `req`'s target (the client's stays its `original_target`, for logs and
/// REQUEST_URI); a redirect or a respond is the answer. Plain HTTP that is
/// redirected to HTTPS and the ACME challenges hayate answers are left
/// alone: the rules see the HTTPS request, and a challenge is never
/// rewritten away.
#[inline(always)]
pub fn rewrite(
    req: &mut RequestHead,
    router: &Router,
    now: Instant,
    client: Client<'_>,
) -> Option<Response> {
    // A site without rules pays this test only.
    if !router.has_rules() {
        return None;
    }
    let to_https =
        router.https_port().is_some() && req.scheme == Scheme::Http && !client.over_unix_socket();
    if to_https {
        return None;
    }
    // A challenge hayate's own ACME order waits on is never rewritten
    // away; others (a webroot client's files, as certbot or acme.sh put
    // them) meet the rules as nginx's locations meet them.
    if let Some(token) = req.path().strip_prefix(ACME_CHALLENGE_PATH) {
        if router.acme_challenge(token).is_some() {
            return None;
        }
    }
    match router.rewrite(req, client.addr(), now) {
        Rewritten::Unchanged => None,
        Rewritten::Target(target) => {
            req.rewrite_target(&target);
            None
        }
        Rewritten::Answer(response) => Some(response),
    }
}

/// Steps 1-3 and the cache's lookup: everything that answers a request
/// without waiting. `now` is the request's time.
pub fn answer<'r>(
    req: &'r RequestHead,
    router: &'r Router,
    now: Instant,
    client: Client<'_>,
) -> Answer<'r> {
    // 1. Normalize the path.
    if req.target() == b"*" {
        let r = Response::error(Status::METHOD_NOT_ALLOWED).with_header("Allow", b"GET, HEAD");
        return Answer::Now(r, None);
    }
    let path = match hayate_core::path::normalize(req.path()) {
        Ok(p) => p,
        Err(e) => {
            log::debug!(
                "400 for {:?}: {}",
                String::from_utf8_lossy(req.path()),
                e.as_str()
            );
            return Answer::Now(Response::error(Status::BAD_REQUEST), None);
        }
    };

    // 1b. ACME's HTTP-01 challenges, answered while an order waits.
    let acme_token = path.strip_prefix(ACME_CHALLENGE_PATH);
    if let Some(answer) = acme_token.and_then(|t| router.acme_challenge(t)) {
        let mut r = Response::new(Status::OK);
        r.header("Content-Type", b"application/octet-stream");
        r.body = hayate_core::Body::Bytes(answer.into());
        return Answer::Now(r, None);
    }

    // 1c. Plain HTTP where HTTPS is served: to HTTPS, but for ACME's
    // HTTP-01 challenges, which must stay plain (RFC 8555 §8.3), and on
    // Unix sockets, which a local front or load balancer uses.
    if let Some(port) = router.https_port() {
        if req.scheme == Scheme::Http && !client.over_unix_socket() && acme_token.is_none() {
            return Answer::Now(https_redirect(req, port), None);
        }
    }

    // 2. Route. An internal route is there for X-Accel-Redirect and for
    // the site's rewrites only.
    let Some(route) = router.route(req.host(), &path) else {
        return Answer::Now(unrouted(router, req, client), None);
    };
    if route.internal && !req.was_rewritten() {
        let answer = finish(Response::error(Status::NOT_FOUND), route, req, client);
        return Answer::Now(answer, Some(route.index));
    }
    // Its site must verify client certificates as the handshake did.
    if route.client_cert.is_some() || client.peer.client_cert.is_some() {
        let cert = client.peer.client_cert.as_deref();
        if !client_cert::admits(route.client_cert.as_ref(), cert) {
            let answer = finish(
                Response::error(Status::MISDIRECTED_REQUEST),
                route,
                req,
                client,
            );
            return Answer::Now(answer, Some(route.index));
        }
    }

    // 2b. Access: the route's policies (rate limits, allow/deny,
    // authentication) decide who comes in, on the normalized path the route
    // was chosen by; a conn_limit's slot goes with the response. An auth
    // service to ask makes the rest wait.
    let mut slot = None;
    if let Some(policies) = &route.policies {
        let request = AccessRequest {
            head: req,
            client_ip: client.ip(),
            now,
        };
        let delay = match policies.access(&request) {
            Admission::After(delay, taken) => {
                slot = taken;
                delay
            }
            Admission::Refused(r) => {
                return Answer::Now(finish(r, route, req, client), Some(route.index));
            }
        };
        if !delay.is_zero() || policies.waits() {
            let step = Step::Admit { path, delay };
            return Answer::Upstream(ToUpstream {
                route,
                step,
                router,
                slot,
            });
        }
    }

    match serve(req, route, path, now, client) {
        Served::Now(response) => Answer::Now(holding(response, slot), Some(route.index)),
        Served::Origin(origin) => Answer::Upstream(ToUpstream {
            route,
            step: Step::Origin(origin),
            router,
            slot,
        }),
    }
}

/// Steps 3 and 4a on `route` for the normalized `path`: a file, a script,
/// a cache hit, or else the upstream to ask. Inlined: as a call of its own
/// it cost a file or cache hit 80 instructions more (the call and the
/// answer copied through `Served`; bench/instructions/run).
#[inline(always)]
fn serve<'r>(
    req: &'r RequestHead,
    route: &'r Route,
    path: Cow<'r, [u8]>,
    now: Instant,
    client: Client<'_>,
) -> Served<'r> {
    // 3. A file if one matches (GET and HEAD), else 4. the upstream. On a
    // FastCGI route a path that names a script runs it (never served as a
    // file), or is a 404 when that script may not run.
    let error = |status| Served::Now(finish(Response::error(status), route, req, client));
    let not_found = || error(Status::NOT_FOUND);
    let forbidden = || error(Status::FORBIDDEN);
    let handler_path = handler_path(route, &path);
    let mut script = match route.scripts.as_ref().map(|s| s.find(&handler_path, now)) {
        Some(Script::Found { end }) => Some(ScriptPath {
            path: handler_path.to_vec(),
            end,
        }),
        Some(Script::Missing) => return not_found(),
        Some(Script::Refused) => return forbidden(),
        Some(Script::NotAScript) | None => None,
    };
    let reads_files = matches!(req.method(), b"GET" | b"HEAD") || route.upstream.is_none();
    if let Some(files) = route
        .files
        .as_ref()
        .filter(|_| reads_files && script.is_none())
    {
        if let Some(response) = serve_file(files, req, req.method(), &handler_path, now) {
            return Served::Now(finish(response, route, req, client));
        }
    }
    if let (Some(scripts), None) = (&route.scripts, &script) {
        // 3b. No file: a directory's index script, else the front controller.
        script = match front_script(route, scripts, &handler_path, now) {
            Ok(Some(front)) => Some(front),
            Ok(None) => return not_found(),
            Err(Refused) => return forbidden(),
        };
    }
    let Some(group) = &route.upstream else {
        return not_found();
    };
    // The upstream is asked for the path its route strips the prefix off
    // (nginx's `proxy_pass http://app/;`, Caddy's handle_path).
    let target = match route.strip_prefix && route.prefix != b"/" {
        true => upstream_target(req, Cow::Owned(handler_path.into_owned())),
        false => {
            drop(handler_path);
            upstream_target(req, path)
        }
    };
    // 4a. The cache answers what it can.
    let cache = match &route.cache {
        Some(cache) => {
            match crate::cached::lookup(cache, group, &proxied(req, &target, client), now) {
                Ok(response) => return Served::Now(finish(response, route, req, client)),
                Err(miss) => Some((cache, miss)),
            }
        }
        None => None,
    };
    Served::Origin(Origin {
        group,
        target,
        cache,
        script,
    })
}

/// The script a FastCGI route runs for a path that names none and matches
/// no file: the directory's index script (`/blog/` → `/blog/index.php`),
/// else the front controller with the original URI (nginx's `try_files
/// $uri $uri/ /index.php?$query_string`). `None`: nothing runs (404);
/// `Refused`: the script is behind a symlink the route does not follow.
fn front_script(
    route: &Route,
    scripts: &ScriptRoot,
    path: &[u8],
    now: Instant,
) -> Result<Option<ScriptPath>, Refused> {
    let Some(front) = route.front_controller.as_deref() else {
        return Ok(None);
    };
    if path.ends_with(b"/") {
        let name = front.rsplit(|&b| b == b'/').next().unwrap_or(front);
        let index = [path, name].concat();
        match scripts.find(&index, now) {
            Script::Found { end } => return Ok(Some(ScriptPath { path: index, end })),
            Script::Refused => return Err(Refused),
            Script::Missing | Script::NotAScript => {}
        }
    }
    match scripts.find(front, now) {
        // nginx's `/index.php$request_uri`: the script, then the path.
        Script::Found { end } if route.front_path_info => Ok(Some(ScriptPath {
            path: [front, path].concat(),
            end,
        })),
        Script::Found { end } => Ok(Some(ScriptPath {
            path: front.to_vec(),
            end,
        })),
        Script::Refused => Err(Refused),
        Script::Missing | Script::NotAScript => Ok(None),
    }
}

/// A script refused by the route's symlink setting (warned where found).
struct Refused;

/// The script a FastCGI request runs: `path[..end]` (SCRIPT_NAME), then
/// its PATH_INFO.
pub struct ScriptPath {
    path: Vec<u8>,
    end: usize,
}

/// Step 4 for what [`answer`] could not answer: the route's upstream group,
/// through the cache when the route caches; on a route behind an auth
/// service, that service first. `body` is the request body; `client` says
/// who sent it, for forwarding.
pub async fn upstream<B: ClientBody>(
    req: &RequestHead,
    to: ToUpstream<'_>,
    body: &mut B,
    client: Client<'_>,
) -> Response {
    let ToUpstream {
        route,
        step,
        router,
        slot,
    } = to;
    if let Err(refused) = route.limit_body(body) {
        return finish(refused.into_response(), route, req, client);
    }
    let forward_auth = route.policies.as_ref().and_then(|p| p.forward_auth());
    // Fields the auth service's answer adds to the request sent on.
    let mut authorized = Vec::new();
    let origin = match step {
        Step::Origin(origin) => origin,
        Step::Admit { path, mut delay } => {
            if let Some(fleet) = route.policies.as_ref().and_then(|p| p.fleet_rate()) {
                let request = AccessRequest {
                    head: req,
                    client_ip: client.ip(),
                    now: Instant::now(),
                };
                // Boxed: most requests never count in Redis.
                match Box::pin(fleet.check(&request)).await {
                    Access::Pass => {}
                    Access::Delay(wait) => delay = delay.max(wait),
                    Access::Refuse(answer) => return finish(answer, route, req, client),
                }
            }
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            if let Some(auth) = forward_auth {
                match auth.ask(req, client).await {
                    Verdict::Refuse(answer) => return finish(answer, route, req, client),
                    Verdict::Allow(fields) => authorized = fields,
                }
            }
            match serve(req, route, path, Instant::now(), client) {
                Served::Now(response) => return holding(response, slot),
                Served::Origin(origin) => origin,
            }
        }
    };
    let mut proxied = proxied(req, &origin.target, client);
    if let Some(auth) = forward_auth {
        // What the auth service vouches for comes from it alone.
        proxied.headers.retain(|(name, _)| !auth.is_copied(name));
        proxied
            .headers
            .extend(authorized.iter().map(|(n, v)| (&n[..], &v[..])));
    }
    // The route's request header rules, on what goes upstream.
    let rules = route.policies.as_ref().and_then(|p| p.request_headers());
    let RequestFieldChanges { removed, added } = match rules {
        Some(rules) => rules.request_fields(req, client.addr()),
        None => Default::default(),
    };
    if !removed.is_empty() {
        let kept = |name: &[u8]| !removed.iter().any(|r| r.eq_ignore_ascii_case(name));
        proxied.headers.retain(|(name, _)| kept(name));
    }
    proxied
        .headers
        .extend(added.iter().map(|(n, v)| (&n[..], &v[..])));
    if let (Some(script), Some(scripts)) = (&origin.script, &route.scripts) {
        let url_prefix = match route.strip_prefix {
            true => route.prefix.strip_suffix(b"/").unwrap_or(&route.prefix),
            false => &b""[..],
        };
        proxied.cgi = Some(CgiScript {
            document_root: scripts.root(),
            request_uri: req.original_target(),
            url_prefix,
            script_name: &script.path[..script.end],
            path_info: &script.path[script.end..],
            server_port: client.peer.local_port.unwrap_or_else(|| server_port(req)),
            // The peer's port is not the client's when a proxy named it.
            remote_port: client.peer.port.filter(|_| client.forwarded.is_none()),
            protocol: req.version.as_str(),
        });
    }
    // The caller boxes this future (`Conn::ask_upstream`, an HTTP/2
    // stream's task), so no state of it enlarges the future a connection
    // builds for every request. The forward lives in that box; the cache
    // fill, far larger and needed by caching routes only, has a box of its
    // own so an uncached request's stays small. (The forward was boxed too:
    // one allocation more per proxied request, 456 of 22,700 instructions,
    // bench/instructions/run.)
    let caches = origin.cache.is_some();
    let response = match origin.cache {
        Some((cache, miss)) => {
            let fill = (miss, req.trace.as_deref());
            pinned(|| crate::cached::from_origin(cache, origin.group, &proxied, body, fill)).await
        }
        None => origin.group.forward(&proxied, body).await,
    };
    // 4b. The app hands a file back to the server (X-Accel-Redirect,
    // X-Sendfile): looked for only where one could be followed.
    let redirect = match route.follows_internal_redirects {
        true => crate::accel::asked(&response),
        false => None,
    };
    let response = match redirect {
        Some(redirect) => {
            let follow = crate::accel::follow(req, router, route, response, redirect, client);
            Box::pin(follow).await
        }
        // 5. Compress the proxied body (in the cache's fill when it caches).
        None => match (&route.compression, caches) {
            (Some(policy), false) => {
                crate::compression::compress_proxied(response, &proxied, policy)
            }
            _ => response,
        },
    };
    holding(finish(response, route, req, client), slot)
}

/// `response`, holding the request's conn_limit slot (if any) until it is
/// sent. By value and inlined, as [`finish`]: a response behind a `&mut`
/// is pinned to one place on the stack, and moving it on into the answer
/// then costs a memcpy call (3 of them, 87 instructions of a static
/// request: bench/instructions/run).
#[inline(always)]
fn holding(response: Response, slot: Option<ConnSlot>) -> Response {
    match slot {
        Some(slot) => {
            let mut response = response;
            response.hold(slot);
            response
        }
        None => response,
    }
}

/// The response phase, for every answer of a route: its
/// Strict-Transport-Security over HTTPS (RFC 6797 §7.2: never over plain
/// HTTP) unless the app set its own, Alt-Svc naming HTTP/3's port over
/// HTTPS on TCP (`http3`), then its response policies (header rules,
/// CORS).
#[inline(always)]
fn finish(response: Response, route: &Route, req: &RequestHead, client: Client<'_>) -> Response {
    let https = (route.hsts.as_deref(), route.alt_svc.as_deref());
    respond(response, https, route.policies.as_deref(), req, client)
}

/// The 404 of a request no route of its site takes, with the site's own
/// response phase. Out of line: in `answer`, its response was one more
/// the function's frame held, and a routed answer's moves became memcpy
/// calls (87 instructions a pipelined static request, bench/instructions/run).
#[cold]
#[inline(never)]
fn unrouted(router: &Router, req: &RequestHead, client: Client<'_>) -> Response {
    let answer = Response::error(Status::NOT_FOUND);
    match router.unrouted(req.host()) {
        Some(site) => {
            let https = (site.hsts.as_deref(), site.alt_svc.as_deref());
            respond(answer, https, site.policies.as_deref(), req, client)
        }
        None => answer,
    }
}

/// The response phase: HSTS and Alt-Svc on HTTPS answers, then the
/// policies'.
#[inline(always)]
fn respond(
    mut response: Response,
    (hsts, alt_svc): (Option<&[u8]>, Option<&[u8]>),
    policies: Option<&RoutePolicies>,
    req: &RequestHead,
    client: Client<'_>,
) -> Response {
    if let (Some(value), Scheme::Https) = (hsts, req.scheme) {
        if response.field(b"strict-transport-security").is_none() {
            response.header("Strict-Transport-Security", value);
        }
    }
    if let (Some(value), Scheme::Https) = (alt_svc, req.scheme) {
        if req.version != Version::Http3 && response.field(b"alt-svc").is_none() {
            response.header("Alt-Svc", value);
        }
    }
    if let Some(policies) = policies {
        let request = ResponseRequest {
            head: req,
            client_ip: client.addr(),
        };
        policies.respond(&mut response, &request);
    }
    response
}

/// 308 to the same URL over HTTPS on `port` (308, unlike 301, keeps the
/// method and body of a POST). The host is the request's, without its
/// port; one that is not a plain name or address is refused with 400, as
/// it would otherwise be written into Location.
fn https_redirect(req: &RequestHead, port: u16) -> Response {
    let host = req
        .host()
        .map(hayate_core::field::strip_port)
        .unwrap_or_default();
    let plain = |b: &u8| b.is_ascii_alphanumeric() || b"-.[]:".contains(b);
    if host.is_empty() || !host.iter().all(plain) {
        return Response::error(Status::BAD_REQUEST);
    }
    let mut location = b"https://".to_vec();
    location.extend_from_slice(host);
    if port != 443 {
        location.push(b':');
        location.extend_from_slice(port.to_string().as_bytes());
    }
    location.extend_from_slice(req.original_target());
    let mut r = Response::new(Status::PERMANENT_REDIRECT);
    r.header("Location", &location);
    r
}

/// The target sent upstream. A path that needed normalizing is sent
/// normalized, so the upstream sees the path the route was chosen for (no
/// `/api/../admin` past a prefix route).
fn upstream_target<'r>(req: &'r RequestHead, path: Cow<'_, [u8]>) -> Cow<'r, [u8]> {
    match path {
        Cow::Borrowed(_) => Cow::Borrowed(req.target()),
        Cow::Owned(p) => {
            let mut t = hayate_core::path::encode(&p).into_bytes();
            if let Some(q) = req.query() {
                t.push(b'?');
                t.extend_from_slice(q);
            }
            Cow::Owned(t)
        }
    }
}

/// The port the client asked for, when it came over a Unix socket (on TCP,
/// SERVER_PORT is the listener's, as nginx sends): the Host's, else the
/// scheme's default.
fn server_port(req: &RequestHead) -> u16 {
    let host = req.host().unwrap_or_default();
    let port = host
        .rsplit(|&b| b == b':')
        .next()
        .filter(|p| p.len() < host.len() && !p.contains(&b']'));
    port.and_then(|p| std::str::from_utf8(p).ok()?.parse().ok())
        .unwrap_or(match req.scheme {
            Scheme::Https => 443,
            Scheme::Http => 80,
        })
}

/// The request as the proxy and the cache see it. A traced request's
/// `traceparent` names hayate's span as the parent (to every upstream
/// protocol alike: FastCGI's HTTP_TRACEPARENT comes from it too).
pub(crate) fn proxied<'r>(
    req: &'r RequestHead,
    target: &'r [u8],
    client: Client<'r>,
) -> ProxyRequest<'r> {
    let headers = match &req.trace {
        None => req.fields().collect(),
        Some(trace) => traced_fields(req, &trace.traceparent),
    };
    ProxyRequest {
        method: req.method(),
        target,
        headers,
        client_ip: client.addr(),
        forwarded_chain: client.forwarded_chain(),
        scheme: req.scheme,
        host: req.host(),
        cgi: None,
        ports: ClientPorts {
            // The peer's port is not the client's when a proxy named it.
            client: client.peer.port.filter(|_| client.forwarded.is_none()),
            local: client.peer.local_port,
        },
        client_cert: client.peer.client_cert.as_deref(),
    }
}

/// The fields of a traced request, its `traceparent` replaced by `ours`.
#[cold]
#[inline(never)]
fn traced_fields<'r>(req: &'r RequestHead, ours: &'r [u8]) -> hayate_proxy::RequestFields<'r> {
    // Sized once: collected from the filter, the list grew (a realloc
    // and a free more per traced request).
    let all = req.fields();
    let mut fields = Vec::with_capacity(all.size_hint().0 + 1);
    fields.extend(all.filter(|(name, _)| !name_is(name, b"traceparent")));
    fields.push((b"traceparent", ours));
    fields
}
