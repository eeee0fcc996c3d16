//! Raw HTTP/2 frames, for clients that hold a connection in a state the
//! `h2` crate would never choose (silent after the preface, flooding
//! PINGs, never opening a window): the preface, frames built and parsed by
//! hand, a GET's HEADERS in plain HPACK.

/// The client's connection preface (RFC 9113 §3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// DATA (RFC 9113 §6.1).
pub const DATA: u8 = 0x0;
/// HEADERS (§6.2).
pub const HEADERS: u8 = 0x1;
/// RST_STREAM (§6.4).
pub const RST_STREAM: u8 = 0x3;
/// SETTINGS (§6.5).
pub const SETTINGS: u8 = 0x4;
/// PING (§6.7).
pub const PING: u8 = 0x6;
/// GOAWAY (§6.8).
pub const GOAWAY: u8 = 0x7;
/// WINDOW_UPDATE (§6.9).
pub const WINDOW_UPDATE: u8 = 0x8;

/// A frame's bytes: 9-byte header, then `payload`.
pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).expect("small frame");
    let mut out = len.to_be_bytes()[1..].to_vec();
    out.extend_from_slice(&[kind, flags]);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// The (type, flags, payload) of each whole frame in what a server sent
/// after its preface.
pub fn frames(mut bytes: &[u8]) -> Vec<(u8, u8, Vec<u8>)> {
    let mut out = Vec::new();
    while bytes.len() >= 9 {
        let len = u32::from_be_bytes([0, bytes[0], bytes[1], bytes[2]]) as usize;
        if bytes.len() < 9 + len {
            break;
        }
        out.push((bytes[3], bytes[4], bytes[9..9 + len].to_vec()));
        bytes = &bytes[9 + len..];
    }
    out
}

/// Frames as (type, flags, payload length), for failure messages.
pub fn summary(bytes: &[u8]) -> Vec<(u8, u8, usize)> {
    frames(bytes)
        .into_iter()
        .map(|(t, f, p)| (t, f, p.len()))
        .collect()
}

/// The error code of a GOAWAY frame's payload.
pub fn goaway_code(payload: &[u8]) -> u32 {
    u32::from_be_bytes(payload[4..8].try_into().expect("GOAWAY payload"))
}

/// HEADERS (END_STREAM | END_HEADERS) of `GET path` on stream 1, HPACK
/// without Huffman: indexed :method GET and :scheme http, literal :path and
/// :authority.
pub fn get(path: &str) -> Vec<u8> {
    let mut block = vec![0x82, 0x86, 0x04, u8::try_from(path.len()).expect("short")];
    block.extend_from_slice(path.as_bytes());
    block.extend_from_slice(&[0x01, 9]);
    block.extend_from_slice(b"localhost");
    frame(HEADERS, 0x5, 1, &block)
}

/// The opening of a client that takes whatever is sent: the preface,
/// SETTINGS with the largest stream window, and the connection window
/// opened as wide (so a server's writes, not flow control, are what stall).
pub fn wide_open() -> Vec<u8> {
    let max_window = 0x7fff_ffffu32;
    let mut settings = 0x4u16.to_be_bytes().to_vec(); // INITIAL_WINDOW_SIZE
    settings.extend_from_slice(&max_window.to_be_bytes());
    [
        PREFACE,
        &frame(SETTINGS, 0, 0, &settings),
        &frame(WINDOW_UPDATE, 0, 0, &(max_window - 65_535).to_be_bytes()),
    ]
    .concat()
}
