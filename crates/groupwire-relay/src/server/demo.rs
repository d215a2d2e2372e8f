//! The demo page the WebSocket listener serves to a plain HTTP `GET`: a
//! shared whiteboard with telepointers (`assets/demo.html`) and the
//! browser client it imports (`assets/groupwire.js`).
//!
//! `groupwire.js` is the TypeScript client of `clients/js` built and
//! bundled into one minified ES module (`npm run build` writes
//! `clients/js/dist/groupwire.js` with esbuild), committed here so building the relay
//! needs no Node.js. A test (`crates/groupwire-cli/tests/browser.rs`)
//! fails when the committed copy differs from a fresh build.

/// One page: its media type and bytes.
#[derive(Clone, Copy, Debug)]
pub(super) struct Page {
    pub(super) content_type: &'static str,
    pub(super) body: &'static str,
}

/// Headers of every page: no caching of a build that may change, no type
/// sniffing, no referrer, and a policy that lets the page reach only its
/// own origin (and the relay's WebSocket on it).
pub(super) const HEADERS: &str = "Cache-Control: no-cache\r\n\
X-Content-Type-Options: nosniff\r\n\
Referrer-Policy: no-referrer\r\n\
Content-Security-Policy: default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self' ws: wss:; frame-ancestors 'none'\r\n";

const HTML: Page = Page {
    content_type: "text/html; charset=utf-8",
    body: include_str!("../../assets/demo.html"),
};

const JS: Page = Page {
    content_type: "text/javascript; charset=utf-8",
    body: include_str!("../../assets/groupwire.js"),
};

/// The page at `path` (a query string is ignored), if there is one.
pub(super) fn page(path: &str) -> Option<Page> {
    match path.split_once('?').map_or(path, |(p, _)| p) {
        "/" | "/index.html" => Some(HTML),
        "/groupwire.js" => Some(JS),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serves_two_paths_and_nothing_else() {
        assert!(page("/").is_some_and(|p| p.content_type.starts_with("text/html")));
        assert!(page("/?board=x").is_some());
        assert!(page("/groupwire.js").is_some_and(|p| p.body.contains("export")));
        for other in [
            "/../etc/passwd",
            "/favicon.ico",
            "",
            "*",
            "//",
            "/groupwire.js/x",
        ] {
            assert!(page(other).is_none(), "{other}");
        }
    }

    #[test]
    fn the_page_imports_the_served_client() {
        assert!(HTML.body.contains("from '/groupwire.js'"));
    }
}
