//! TLS handshake messages: rebuilt across records, and the few hello facts the decryption
//! and the report need.
//!
//! Input: the plaintext of handshake records of one direction, in order (several messages per
//! record, or one message over several records).
//! Output: whole messages of the types this tool reads ([`HandshakeReader`]), and parsed
//! [`ClientHello`], [`ServerHello`] and [`EncryptedExtensions`] facts.
//! Invariants: a message body is kept only for the types listed in [`kept`], and only up to
//! [`MAX_KEPT_MESSAGE`] bytes; longer or other messages are skipped by count, so a 2^24
//! length field costs nothing. Parsers read with bounds checks only: truncated or
//! inconsistent input gives `None`, never a panic.
//!
//! Not rusticata's `tls-parser`: it would parse the whole message set into `Vec`-backed
//! structures through nom for the handful of fields used here (random, suite, versions, SNI,
//! ALPN, PSK presence, the HelloRetryRequest random), and its message parsers want a whole
//! record at once, while framing and reassembly here must be incremental and bounded anyway.
//! A cursor over the few structures read is shorter than the glue, and is fuzzed with the rest.

pub(crate) const CLIENT_HELLO: u8 = 1;
pub(crate) const SERVER_HELLO: u8 = 2;
pub(crate) const ENCRYPTED_EXTENSIONS: u8 = 8;
pub(crate) const FINISHED: u8 = 20;
pub(crate) const KEY_UPDATE: u8 = 24;

/// Longest message body kept; a ClientHello with a post-quantum key share is under 2 KiB.
pub(crate) const MAX_KEPT_MESSAGE: usize = 64 * 1024;
/// Offered ALPN protocols kept from one ClientHello.
const MAX_OFFERED_ALPN: usize = 32;

/// The special ServerHello random of a HelloRetryRequest: SHA-256("HelloRetryRequest").
pub(crate) const HELLO_RETRY_REQUEST_RANDOM: [u8; 32] = [
    0xcf, 0x21, 0xad, 0x74, 0xe5, 0x9a, 0x61, 0x11, 0xbe, 0x1d, 0x8c, 0x02, 0x1e, 0x65, 0xb8, 0x91,
    0xc2, 0xa2, 0x11, 0x16, 0x7a, 0xbb, 0x8c, 0x5e, 0x07, 0x9e, 0x09, 0xe2, 0xc8, 0xa8, 0x33, 0x9c,
];

const EXT_SERVER_NAME: u16 = 0;
const EXT_ALPN: u16 = 16;
const EXT_PRE_SHARED_KEY: u16 = 41;
const EXT_EARLY_DATA: u16 = 42;
const EXT_SUPPORTED_VERSIONS: u16 = 43;

/// Message types whose body is kept.
fn kept(msg_type: u8) -> bool {
    matches!(
        msg_type,
        CLIENT_HELLO | SERVER_HELLO | ENCRYPTED_EXTENSIONS | FINISHED | KEY_UPDATE
    )
}

/// One whole handshake message; `body` is `None` for types not kept, or bodies too long.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HandshakeMessage {
    pub msg_type: u8,
    pub body: Option<Vec<u8>>,
}

/// Rebuilds handshake messages from record plaintexts.
#[derive(Debug, Default)]
pub(crate) struct HandshakeReader {
    header: [u8; 4],
    /// Header bytes read so far (0 to 4). Narrow, as is `remaining`: every direction of every
    /// open TLS connection holds a reader.
    header_len: u8,
    /// Body bytes still to come for the current message (a 24-bit length).
    remaining: u32,
    keep: bool,
    body: Vec<u8>,
}

impl HandshakeReader {
    /// Adds one record's plaintext; whole messages are appended to `out`.
    pub(crate) fn feed(&mut self, mut bytes: &[u8], out: &mut Vec<HandshakeMessage>) {
        while !bytes.is_empty() {
            let have = usize::from(self.header_len);
            if have < 4 {
                let take = (4 - have).min(bytes.len());
                self.header[have..have + take].copy_from_slice(&bytes[..take]);
                self.header_len += take as u8;
                bytes = &bytes[take..];
                if self.header_len < 4 {
                    return;
                }
                let len = u32::from_be_bytes([0, self.header[1], self.header[2], self.header[3]]);
                self.remaining = len;
                self.keep = kept(self.header[0]) && len as usize <= MAX_KEPT_MESSAGE;
                self.body.clear();
            }
            let take = (self.remaining as usize).min(bytes.len());
            if self.keep {
                self.body.extend_from_slice(&bytes[..take]);
            }
            // `take` is at most `remaining`, a u32.
            self.remaining -= take as u32;
            bytes = &bytes[take..];
            if self.remaining == 0 {
                out.push(HandshakeMessage {
                    msg_type: self.header[0],
                    body: self.keep.then(|| std::mem::take(&mut self.body)),
                });
                self.header_len = 0;
            }
        }
    }

    /// Forgets a message cut by a loss.
    pub(crate) fn reset(&mut self) {
        self.header_len = 0;
        self.remaining = 0;
        self.body = Vec::new();
    }
}

/// Bounds-checked reads over a message body.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn u16(&mut self) -> Option<u16> {
        let b = self.take(2)?;
        Some(u16::from_be_bytes([b[0], b[1]]))
    }
    fn vec8(&mut self) -> Option<&'a [u8]> {
        let n = usize::from(self.u8()?);
        self.take(n)
    }
    fn vec16(&mut self) -> Option<&'a [u8]> {
        let n = usize::from(self.u16()?);
        self.take(n)
    }
    fn random(&mut self) -> Option<[u8; 32]> {
        self.take(32)?.try_into().ok()
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Calls `f(type, data)` for each extension of an extensions block (the bytes after the
/// hello's fixed fields). `None` when the block is malformed.
fn extensions<'a>(
    c: &mut Cursor<'a>,
    mut f: impl FnMut(u16, &'a [u8]) -> Option<()>,
) -> Option<()> {
    if c.is_empty() {
        return Some(()); // extensions are optional before TLS 1.3
    }
    let mut block = Cursor(c.vec16()?);
    while !block.is_empty() {
        let ty = block.u16()?;
        let data = block.vec16()?;
        f(ty, data)?;
    }
    Some(())
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// ALPN protocol names from a `ProtocolNameList`.
fn alpn_list(data: &[u8], limit: usize) -> Option<Vec<String>> {
    let mut c = Cursor(data);
    let mut list = Cursor(c.vec16()?);
    let mut names = Vec::new();
    while !list.is_empty() {
        let name = list.vec8()?;
        if names.len() < limit {
            names.push(text(name));
        }
    }
    Some(names)
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ClientHello {
    pub legacy_version: u16,
    pub random: [u8; 32],
    pub session_id_len: usize,
    pub sni: Option<String>,
    pub alpn: Vec<String>,
    /// `supported_versions` offered, when the extension is present.
    pub supported_versions: Vec<u16>,
    pub pre_shared_key: bool,
    pub early_data: bool,
}

pub(crate) fn parse_client_hello(body: &[u8]) -> Option<ClientHello> {
    let mut c = Cursor(body);
    let mut hello = ClientHello {
        legacy_version: c.u16()?,
        random: c.random()?,
        session_id_len: c.vec8()?.len(),
        ..ClientHello::default()
    };
    c.vec16()?; // cipher suites
    c.vec8()?; // compression methods
    extensions(&mut c, |ty, data| {
        match ty {
            EXT_SERVER_NAME => {
                let mut d = Cursor(data);
                let mut list = Cursor(d.vec16()?);
                while !list.is_empty() {
                    let name_type = list.u8()?;
                    let name = list.vec16()?;
                    if name_type == 0 && hello.sni.is_none() {
                        hello.sni = Some(text(name));
                    }
                }
            }
            EXT_ALPN => hello.alpn = alpn_list(data, MAX_OFFERED_ALPN)?,
            EXT_SUPPORTED_VERSIONS => {
                let mut d = Cursor(data);
                let mut list = Cursor(d.vec8()?);
                while !list.is_empty() {
                    let v = list.u16()?;
                    if hello.supported_versions.len() < 64 {
                        hello.supported_versions.push(v);
                    }
                }
            }
            EXT_PRE_SHARED_KEY => hello.pre_shared_key = true,
            EXT_EARLY_DATA => hello.early_data = true,
            _ => {}
        }
        Some(())
    })?;
    Some(hello)
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ServerHello {
    pub legacy_version: u16,
    pub random: [u8; 32],
    pub cipher_suite: u16,
    /// The `supported_versions` selection (TLS 1.3), when present.
    pub selected_version: Option<u16>,
    /// ALPN chosen in the ServerHello (TLS 1.2; TLS 1.3 puts it in EncryptedExtensions).
    pub alpn: Option<String>,
    pub pre_shared_key: bool,
}

impl ServerHello {
    pub(crate) fn is_hello_retry_request(&self) -> bool {
        self.random == HELLO_RETRY_REQUEST_RANDOM
    }
    /// The negotiated version: the `supported_versions` selection, else the legacy field.
    pub(crate) fn version(&self) -> u16 {
        self.selected_version.unwrap_or(self.legacy_version)
    }
}

pub(crate) fn parse_server_hello(body: &[u8]) -> Option<ServerHello> {
    let mut c = Cursor(body);
    let mut hello = ServerHello {
        legacy_version: c.u16()?,
        random: c.random()?,
        ..ServerHello::default()
    };
    c.vec8()?; // session id echo
    hello.cipher_suite = c.u16()?;
    c.u8()?; // compression method
    extensions(&mut c, |ty, data| {
        match ty {
            EXT_SUPPORTED_VERSIONS => hello.selected_version = Some(Cursor(data).u16()?),
            EXT_ALPN => hello.alpn = alpn_list(data, 1)?.into_iter().next(),
            EXT_PRE_SHARED_KEY => hello.pre_shared_key = true,
            _ => {}
        }
        Some(())
    })?;
    Some(hello)
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct EncryptedExtensions {
    pub alpn: Option<String>,
    pub early_data: bool,
}

pub(crate) fn parse_encrypted_extensions(body: &[u8]) -> Option<EncryptedExtensions> {
    let mut ee = EncryptedExtensions::default();
    let mut c = Cursor(body);
    if c.is_empty() {
        return None; // the extensions block is mandatory here
    }
    extensions(&mut c, |ty, data| {
        match ty {
            EXT_ALPN => ee.alpn = alpn_list(data, 1)?.into_iter().next(),
            EXT_EARLY_DATA => ee.early_data = true,
            _ => {}
        }
        Some(())
    })?;
    Some(ee)
}

/// Builders of hello messages, for the tests of this module and of the connection.
#[cfg(test)]
pub(crate) mod build {
    fn vec16(body: &[u8]) -> Vec<u8> {
        let mut v = (body.len() as u16).to_be_bytes().to_vec();
        v.extend_from_slice(body);
        v
    }
    fn ext(ty: u16, data: &[u8]) -> Vec<u8> {
        let mut v = ty.to_be_bytes().to_vec();
        v.extend(vec16(data));
        v
    }
    fn alpn(names: &[&str]) -> Vec<u8> {
        let mut list = Vec::new();
        for n in names {
            list.push(n.len() as u8);
            list.extend_from_slice(n.as_bytes());
        }
        vec16(&list)
    }
    /// A handshake message: type, 24-bit length, body.
    pub(crate) fn message(ty: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![ty];
        m.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        m.extend_from_slice(body);
        m
    }
    pub(crate) fn client_hello(
        random: [u8; 32],
        sni: &str,
        alpn_names: &[&str],
        tls13: bool,
        psk: bool,
    ) -> Vec<u8> {
        let mut b = vec![3, 3];
        b.extend_from_slice(&random);
        b.push(32);
        b.extend_from_slice(&[0xaa; 32]);
        b.extend(vec16(&[0x13, 0x01, 0xc0, 0x2f]));
        b.extend_from_slice(&[1, 0]);
        let mut exts = Vec::new();
        let mut name = vec![0];
        name.extend(vec16(sni.as_bytes()));
        exts.extend(ext(0, &vec16(&name)));
        exts.extend(ext(16, &alpn(alpn_names)));
        if tls13 {
            exts.extend(ext(43, &[4, 3, 4, 3, 3]));
        }
        if psk {
            exts.extend(ext(41, &[0, 0]));
        }
        b.extend(vec16(&exts));
        message(super::CLIENT_HELLO, &b)
    }
    pub(crate) fn server_hello(
        random: [u8; 32],
        suite: u16,
        version: u16,
        alpn_name: Option<&str>,
    ) -> Vec<u8> {
        let mut b = vec![3, 3];
        b.extend_from_slice(&random);
        b.push(0);
        b.extend_from_slice(&suite.to_be_bytes());
        b.push(0);
        let mut exts = Vec::new();
        if version == 0x0304 {
            exts.extend(ext(43, &[3, 4]));
        } else {
            b[0..2].copy_from_slice(&version.to_be_bytes());
        }
        if let Some(a) = alpn_name {
            exts.extend(ext(16, &alpn(&[a])));
        }
        b.extend(vec16(&exts));
        message(super::SERVER_HELLO, &b)
    }
    pub(crate) fn encrypted_extensions(alpn_name: Option<&str>) -> Vec<u8> {
        let exts = alpn_name.map(|a| ext(16, &alpn(&[a]))).unwrap_or_default();
        message(super::ENCRYPTED_EXTENSIONS, &vec16(&exts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(stream: &[u8], cuts: &[usize]) -> Vec<HandshakeMessage> {
        let mut r = HandshakeReader::default();
        let mut out = Vec::new();
        let mut last = 0;
        for &c in cuts.iter().chain(std::iter::once(&stream.len())) {
            r.feed(&stream[last..c], &mut out);
            last = c;
        }
        out
    }

    #[test]
    fn messages_whole_byte_by_byte_and_split() {
        let ch = build::client_hello([5; 32], "example.com", &["h2", "http/1.1"], true, true);
        let cert = build::message(11, &[7; 3000]);
        let fin = build::message(FINISHED, &[1; 32]);
        let stream = [ch.clone(), cert, fin].concat();
        let whole = messages(&stream, &[]);
        assert_eq!(whole.len(), 3);
        assert_eq!(whole[0].body.as_deref(), Some(&ch[4..]));
        assert_eq!(
            whole[1],
            HandshakeMessage {
                msg_type: 11,
                body: None
            }
        );
        let every: Vec<usize> = (1..stream.len()).collect();
        assert_eq!(messages(&stream, &every), whole);
        for step in [3, 17, 1000] {
            let cuts: Vec<usize> = (step..stream.len()).step_by(step).collect();
            assert_eq!(messages(&stream, &cuts), whole);
        }
    }

    #[test]
    fn hostile_lengths_are_skipped_by_count() {
        let mut r = HandshakeReader::default();
        let mut out = Vec::new();
        r.feed(&[CLIENT_HELLO, 0xff, 0xff, 0xff, 1, 2, 3], &mut out);
        assert!(out.is_empty());
        assert!(r.body.capacity() < 1024);
    }

    #[test]
    fn hellos_parse() {
        let ch = build::client_hello([5; 32], "example.com", &["h2", "http/1.1"], true, true);
        let h = parse_client_hello(&ch[4..]).unwrap();
        assert_eq!(h.random, [5; 32]);
        assert_eq!(h.sni.as_deref(), Some("example.com"));
        assert_eq!(h.alpn, vec!["h2", "http/1.1"]);
        assert_eq!(h.supported_versions, vec![0x0304, 0x0303]);
        assert!(h.pre_shared_key && !h.early_data);
        assert_eq!(h.session_id_len, 32);
        let sh = build::server_hello([6; 32], 0x1301, 0x0304, None);
        let s = parse_server_hello(&sh[4..]).unwrap();
        assert_eq!(
            (s.version(), s.cipher_suite, s.is_hello_retry_request()),
            (0x0304, 0x1301, false)
        );
        let sh = build::server_hello(HELLO_RETRY_REQUEST_RANDOM, 0x1301, 0x0304, None);
        assert!(
            parse_server_hello(&sh[4..])
                .unwrap()
                .is_hello_retry_request()
        );
        let sh = build::server_hello([6; 32], 0xc02f, 0x0303, Some("http/1.1"));
        let s = parse_server_hello(&sh[4..]).unwrap();
        assert_eq!((s.version(), s.alpn.as_deref()), (0x0303, Some("http/1.1")));
        let ee = build::encrypted_extensions(Some("h2"));
        assert_eq!(
            parse_encrypted_extensions(&ee[4..])
                .unwrap()
                .alpn
                .as_deref(),
            Some("h2")
        );
    }

    #[test]
    fn truncated_hellos_are_none_at_every_length() {
        let ch = build::client_hello([5; 32], "example.com", &["h2"], true, false);
        let sh = build::server_hello([6; 32], 0x1301, 0x0304, Some("h2"));
        for n in 0..ch.len() - 4 {
            // Cut inside the extensions block: never a panic, and never a full answer.
            let cut = parse_client_hello(&ch[4..4 + n]);
            assert!(cut.is_none() || n == 75, "{n}"); // 75: a hello without extensions
        }
        for n in 0..sh.len() - 4 {
            let _ = parse_server_hello(&sh[4..4 + n]);
        }
        assert!(parse_encrypted_extensions(&[0, 5, 0]).is_none());
    }
}
