//! The route table: sites chosen by Host, routes by path prefix. Built once
//! per worker from the config (each worker owns its static roots and their
//! file caches).

use std::io;

use hayate_config::{Config, RouteOptions};
use hayate_static::{CacheLimits, StaticOptions, StaticRoot};

/// What serves a route.
pub enum Handler {
    /// Files under a root.
    Static(StaticRoot),
}

/// A route: a path prefix and its handler.
pub struct Route {
    /// Prefix of the normalized path.
    pub prefix: Vec<u8>,
    /// Remove the prefix before handing the path to the handler.
    pub strip_prefix: bool,
    /// The handler.
    pub handler: Handler,
}

struct Site {
    hosts: Vec<String>,
    /// Longest prefix first.
    routes: Vec<Route>,
}

/// Sites and their routes.
pub struct Router {
    sites: Vec<Site>,
    default_site: usize,
}

impl Router {
    /// Builds the table, opening every static root.
    pub fn build(config: &Config) -> io::Result<Router> {
        let g = &config.global;
        let limits = CacheLimits {
            budget: g.file_cache_size.0,
            max_file: g.file_cache_max_file.0,
            revalidate: g.file_cache_revalidate.0,
        };
        let mut sites = Vec::new();
        for site in &config.sites {
            let mut routes = Vec::new();
            for r in &site.routes {
                let handler =
                    Handler::Static(StaticRoot::new(static_options(&r.options, &limits)?)?);
                routes.push(Route {
                    prefix: r.prefix.as_bytes().to_vec(),
                    strip_prefix: r.options.strip_prefix,
                    handler,
                });
            }
            sites.push(Site {
                hosts: site.hosts.clone(),
                routes,
            });
        }
        let default_site = sites.iter().position(|s| s.hosts.is_empty()).unwrap_or(0);
        Ok(Router {
            sites,
            default_site,
        })
    }

    /// Finds the route for `host` (as sent, maybe with a port) and the
    /// normalized `path`.
    pub fn route(&self, host: Option<&[u8]>, path: &[u8]) -> Option<&Route> {
        let site = host
            .and_then(|h| self.site_for(h))
            .unwrap_or(self.default_site);
        self.sites
            .get(site)?
            .routes
            .iter()
            .find(|r| prefix_matches(&r.prefix, path))
    }

    fn site_for(&self, host: &[u8]) -> Option<usize> {
        let name = strip_port(host);
        self.sites.iter().position(|s| {
            s.hosts.iter().any(|h| match h.strip_prefix("*.") {
                Some(suffix) => {
                    name.len() > suffix.len() + 1
                        && name[name.len() - suffix.len()..].eq_ignore_ascii_case(suffix.as_bytes())
                        && name[name.len() - suffix.len() - 1] == b'.'
                }
                None => name.eq_ignore_ascii_case(h.as_bytes()),
            })
        })
    }
}

/// Segment-aware prefix match: `/assets` matches `/assets` and `/assets/x`
/// but not `/assetsx`; `/assets/` matches what starts with it.
fn prefix_matches(prefix: &[u8], path: &[u8]) -> bool {
    path.starts_with(prefix)
        && (prefix.ends_with(b"/") || path.len() == prefix.len() || path[prefix.len()] == b'/')
}

/// The path a handler sees: without the prefix when the route strips it.
pub fn handler_path<'p>(route: &Route, path: &'p [u8]) -> std::borrow::Cow<'p, [u8]> {
    if !route.strip_prefix || route.prefix == b"/" {
        return path.into();
    }
    let rest = &path[route.prefix.len().min(path.len())..];
    if rest.first() == Some(&b'/') {
        rest.into()
    } else {
        let mut p = Vec::with_capacity(rest.len() + 1);
        p.push(b'/');
        p.extend_from_slice(rest);
        p.into()
    }
}

fn strip_port(host: &[u8]) -> &[u8] {
    if host.first() == Some(&b'[') {
        return host
            .iter()
            .position(|&b| b == b']')
            .map_or(host, |e| &host[..=e]);
    }
    host.iter()
        .rposition(|&b| b == b':')
        .map_or(host, |c| &host[..c])
}

fn static_options(o: &RouteOptions, limits: &CacheLimits) -> io::Result<StaticOptions> {
    let root = o
        .root
        .clone()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "route without root"))?;
    Ok(StaticOptions {
        root,
        index: o.index.clone(),
        listing: o.listing,
        fallback: o.fallback.clone(),
        dotfiles: o.dotfiles,
        symlinks_outside_root: o.symlinks_outside_root,
        cache_control: o.cache_control.clone(),
        immutable: o.immutable,
        precompressed: o.precompressed,
        cache: limits.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes() {
        assert!(prefix_matches(b"/", b"/x"));
        assert!(prefix_matches(b"/assets", b"/assets"));
        assert!(prefix_matches(b"/assets", b"/assets/x.js"));
        assert!(!prefix_matches(b"/assets", b"/assetsx"));
        assert!(prefix_matches(b"/assets/", b"/assets/x"));
        assert!(!prefix_matches(b"/assets/", b"/assets"));
    }

    #[test]
    fn ports_are_stripped() {
        assert_eq!(strip_port(b"example.com:8080"), b"example.com");
        assert_eq!(strip_port(b"[::1]:80"), b"[::1]");
        assert_eq!(strip_port(b"example.com"), b"example.com");
    }
}
