//! TLS 1.3 and TLS 1.2 connections around plaintext byte runs, with their NSS key log lines.
//!
//! Input: a [`TlsSuite`], a seed and a connection identity (any bytes that differ between the
//! connections of a capture), the ALPN protocol the server picks and an optional SNI name;
//! then each side's plaintext writes, in order.
//! Output: the handshake flights ([`TlsSession::handshake`]: who sends which bytes, in order),
//! one or more records per plaintext write ([`TlsSession::seal`]: application_data, at most
//! 16 KiB of plaintext each), and the key log lines a stack would write for the connection
//! ([`TlsSession::key_log`]).
//! Invariants: every byte depends only on the inputs (the randoms, the "ECDHE" shared secret
//! and so every traffic secret are HMACs of the seed and the connection identity); the key
//! schedule is the real one (RFC 8446 §7.1, RFC 5246 §8.1 and §6.3) run on that fake shared
//! secret, so Finished messages verify against the logged secrets; certificates, key shares
//! and signatures are dummy bytes of the right shape, which no passive reader verifies.

use std::fmt::Write as _;
use std::io::{self, Write};

use ring::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use ring::{digest, hkdf, hmac};

use crate::Side;

/// Largest plaintext per record (RFC 8446 §5.1).
pub const MAX_RECORD_PLAINTEXT: usize = 16_384;
const TAG_LEN: usize = 16;

const CHANGE_CIPHER_SPEC: u8 = 20;
const HANDSHAKE: u8 = 22;
const APPLICATION_DATA: u8 = 23;

const CLIENT_HELLO: u8 = 1;
const SERVER_HELLO: u8 = 2;
const NEW_SESSION_TICKET: u8 = 4;
const ENCRYPTED_EXTENSIONS: u8 = 8;
const CERTIFICATE: u8 = 11;
const SERVER_KEY_EXCHANGE: u8 = 12;
const SERVER_HELLO_DONE: u8 = 14;
const CERTIFICATE_VERIFY: u8 = 15;
const CLIENT_KEY_EXCHANGE: u8 = 16;
const FINISHED: u8 = 20;

const EXT_SERVER_NAME: u16 = 0;
const EXT_SUPPORTED_GROUPS: u16 = 10;
const EXT_EC_POINT_FORMATS: u16 = 11;
const EXT_SIGNATURE_ALGORITHMS: u16 = 13;
const EXT_ALPN: u16 = 16;
const EXT_SUPPORTED_VERSIONS: u16 = 43;
const EXT_PSK_KEY_EXCHANGE_MODES: u16 = 45;
const EXT_KEY_SHARE: u16 = 51;
const EXT_RENEGOTIATION_INFO: u16 = 0xff01;
const GROUP_X25519: u16 = 0x001d;
const RSA_PSS_RSAE_SHA256: u16 = 0x0804;

/// The suites this writer speaks; each implies its protocol version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TlsSuite {
    /// TLS 1.3, TLS_AES_128_GCM_SHA256 (0x1301).
    Tls13Aes128Gcm,
    /// TLS 1.3, TLS_AES_256_GCM_SHA384 (0x1302).
    Tls13Aes256Gcm,
    /// TLS 1.3, TLS_CHACHA20_POLY1305_SHA256 (0x1303).
    Tls13ChaCha20Poly1305,
    /// TLS 1.2, TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 (0xC02F, OpenSSL's
    /// ECDHE-RSA-AES128-GCM-SHA256); explicit nonce = sequence number.
    Tls12EcdheRsaAes128Gcm,
}

impl TlsSuite {
    /// The IANA number.
    pub fn id(self) -> u16 {
        match self {
            TlsSuite::Tls13Aes128Gcm => 0x1301,
            TlsSuite::Tls13Aes256Gcm => 0x1302,
            TlsSuite::Tls13ChaCha20Poly1305 => 0x1303,
            TlsSuite::Tls12EcdheRsaAes128Gcm => 0xC02F,
        }
    }
    pub fn is_tls13(self) -> bool {
        self != TlsSuite::Tls12EcdheRsaAes128Gcm
    }
    fn aead(self) -> &'static aead::Algorithm {
        match self {
            TlsSuite::Tls13Aes128Gcm | TlsSuite::Tls12EcdheRsaAes128Gcm => &aead::AES_128_GCM,
            TlsSuite::Tls13Aes256Gcm => &aead::AES_256_GCM,
            TlsSuite::Tls13ChaCha20Poly1305 => &aead::CHACHA20_POLY1305,
        }
    }
    fn hash(self) -> Hash {
        match self {
            TlsSuite::Tls13Aes256Gcm => Hash::Sha384,
            _ => Hash::Sha256,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hash {
    Sha256,
    Sha384,
}

impl Hash {
    fn len(self) -> usize {
        match self {
            Hash::Sha256 => 32,
            Hash::Sha384 => 48,
        }
    }
    fn digest(self) -> &'static digest::Algorithm {
        match self {
            Hash::Sha256 => &digest::SHA256,
            Hash::Sha384 => &digest::SHA384,
        }
    }
    fn hkdf(self) -> hkdf::Algorithm {
        match self {
            Hash::Sha256 => hkdf::HKDF_SHA256,
            Hash::Sha384 => hkdf::HKDF_SHA384,
        }
    }
    fn hmac(self) -> hmac::Algorithm {
        match self {
            Hash::Sha256 => hmac::HMAC_SHA256,
            Hash::Sha384 => hmac::HMAC_SHA384,
        }
    }
}

/// What one connection's handshake is made of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsParams {
    pub suite: TlsSuite,
    /// Seeds every random and secret of the connection.
    pub seed: u64,
    /// Distinguishes this connection from every other one of the capture (4-tuple, ISNs, a
    /// counter): two connections with the same identity and seed get the same secrets.
    pub connection: Vec<u8>,
    /// The protocol the server selects (`http/1.1` or `h2`); the client offers it, and
    /// `http/1.1` besides.
    pub alpn: String,
    /// `server_name`, when the client sends one.
    pub sni: Option<String>,
}

// ---------------------------------------------------------------------------------------------
// Encoding helpers
// ---------------------------------------------------------------------------------------------

fn put_u16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_be_bytes());
}

fn put_u24(out: &mut Vec<u8>, v: usize) {
    out.extend_from_slice(&(v as u32).to_be_bytes()[1..]);
}

fn vec8(out: &mut Vec<u8>, body: &[u8]) {
    out.push(body.len() as u8);
    out.extend_from_slice(body);
}

fn vec16(out: &mut Vec<u8>, body: &[u8]) {
    put_u16(out, body.len() as u16);
    out.extend_from_slice(body);
}

fn vec24(out: &mut Vec<u8>, body: &[u8]) {
    put_u24(out, body.len());
    out.extend_from_slice(body);
}

fn ext(out: &mut Vec<u8>, ty: u16, data: &[u8]) {
    put_u16(out, ty);
    vec16(out, data);
}

/// A handshake message: type, 24-bit length, body.
fn message(ty: u8, body: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(4 + body.len());
    m.push(ty);
    vec24(&mut m, body);
    m
}

fn alpn_list(names: &[&str]) -> Vec<u8> {
    let mut list = Vec::new();
    for n in names {
        vec8(&mut list, n.as_bytes());
    }
    let mut data = Vec::new();
    vec16(&mut data, &list);
    data
}

/// A record in the clear.
fn plain_record(out: &mut Vec<u8>, content_type: u8, version: u16, body: &[u8]) {
    for piece in body.chunks(MAX_RECORD_PLAINTEXT) {
        out.push(content_type);
        put_u16(out, version);
        vec16(out, piece);
    }
}

fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Deterministic filler bytes of a given length (dummy certificates, key shares, signatures).
fn filler(key: &hmac::Key, label: &str, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    let mut counter = 0u32;
    while out.len() < len {
        let mut ctx = hmac::Context::with_key(key);
        ctx.update(label.as_bytes());
        ctx.update(&counter.to_be_bytes());
        let block = ctx.sign();
        let take = (len - out.len()).min(block.as_ref().len());
        out.extend_from_slice(&block.as_ref()[..take]);
        counter += 1;
    }
    out
}

fn array32(key: &hmac::Key, label: &str) -> [u8; 32] {
    let mut a = [0u8; 32];
    a.copy_from_slice(&filler(key, label, 32));
    a
}

// ---------------------------------------------------------------------------------------------
// Key schedules
// ---------------------------------------------------------------------------------------------

struct OutLen(usize);

impl hkdf::KeyType for OutLen {
    fn len(&self) -> usize {
        self.0
    }
}

/// HKDF-Expand-Label (RFC 8446 §7.1) from a PRK.
fn expand_label(prk: &hkdf::Prk, label: &[u8], context: &[u8], len: usize) -> Vec<u8> {
    let out_len = (len as u16).to_be_bytes();
    let label_len = [(6 + label.len()) as u8];
    let context_len = [context.len() as u8];
    let info: [&[u8]; 6] = [
        &out_len,
        &label_len,
        b"tls13 ",
        label,
        &context_len,
        context,
    ];
    let mut out = vec![0u8; len];
    // Lengths here are a key, an IV or one hash: far below HKDF's limit of 255 hashes.
    if let Ok(okm) = prk.expand(&info, OutLen(len)) {
        let _ = okm.fill(&mut out);
    }
    out
}

fn expand_label_secret(hash: Hash, secret: &[u8], label: &[u8], len: usize) -> Vec<u8> {
    expand_label(
        &hkdf::Prk::new_less_safe(hash.hkdf(), secret),
        label,
        b"",
        len,
    )
}

/// The TLS 1.2 PRF (RFC 5246 §5) with SHA-256.
fn prf(secret: &[u8], label: &[u8], seed: &[u8], len: usize) -> Vec<u8> {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret);
    let mut a = {
        let mut ctx = hmac::Context::with_key(&key);
        ctx.update(label);
        ctx.update(seed);
        ctx.sign()
    };
    let mut out = Vec::with_capacity(len + 32);
    while out.len() < len {
        let mut ctx = hmac::Context::with_key(&key);
        ctx.update(a.as_ref());
        ctx.update(label);
        ctx.update(seed);
        out.extend_from_slice(ctx.sign().as_ref());
        a = hmac::sign(&key, a.as_ref());
    }
    out.truncate(len);
    out
}

/// How a direction's records are protected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RecordMode {
    /// RFC 8446 §5.2: inner content type, nonce = iv XOR seq, AAD = the record header.
    Tls13,
    /// RFC 5288: nonce = 4-byte salt ‖ 8-byte explicit nonce (the sequence number, carried).
    Tls12Gcm,
}

/// One direction's record protection and sequence number.
struct Protection {
    key: LessSafeKey,
    iv: [u8; 12],
    mode: RecordMode,
    seq: u64,
}

impl Protection {
    fn new(alg: &'static aead::Algorithm, key: &[u8], iv: &[u8], mode: RecordMode) -> Self {
        let mut fixed = [0u8; 12];
        fixed[..iv.len()].copy_from_slice(iv);
        Protection {
            // Key lengths come from the suite's own algorithm, so this cannot fail.
            key: LessSafeKey::new(UnboundKey::new(alg, key).expect("key length of its suite")),
            iv: fixed,
            mode,
            seq: 0,
        }
    }

    fn tls13(suite: TlsSuite, secret: &[u8]) -> Self {
        let hash = suite.hash();
        let key = expand_label_secret(hash, secret, b"key", suite.aead().key_len());
        let iv = expand_label_secret(hash, secret, b"iv", 12);
        Protection::new(suite.aead(), &key, &iv, RecordMode::Tls13)
    }

    /// Appends one protected record of `plaintext` (at most [`MAX_RECORD_PLAINTEXT`]).
    fn seal(&mut self, content_type: u8, plaintext: &[u8], out: &mut Vec<u8>) {
        let seq = self.seq;
        self.seq += 1;
        match self.mode {
            RecordMode::Tls13 => {
                let len = plaintext.len() + 1 + TAG_LEN;
                let header = [APPLICATION_DATA, 3, 3, (len >> 8) as u8, len as u8];
                let mut nonce = self.iv;
                for (n, s) in nonce[4..].iter_mut().zip(seq.to_be_bytes()) {
                    *n ^= s;
                }
                out.extend_from_slice(&header);
                let start = out.len();
                out.extend_from_slice(plaintext);
                out.push(content_type);
                let tag = self
                    .key
                    .seal_in_place_separate_tag(
                        Nonce::assume_unique_for_key(nonce),
                        Aad::from(header),
                        &mut out[start..],
                    )
                    .expect("a record is far below the AEAD's length limit");
                out.extend_from_slice(tag.as_ref());
            }
            RecordMode::Tls12Gcm => {
                let len = 8 + plaintext.len() + TAG_LEN;
                let header = [content_type, 3, 3, (len >> 8) as u8, len as u8];
                let mut aad = [0u8; 13];
                aad[..8].copy_from_slice(&seq.to_be_bytes());
                aad[8..11].copy_from_slice(&header[..3]);
                aad[11..].copy_from_slice(&(plaintext.len() as u16).to_be_bytes());
                let mut nonce = [0u8; 12];
                nonce[..4].copy_from_slice(&self.iv[..4]);
                nonce[4..].copy_from_slice(&seq.to_be_bytes());
                out.extend_from_slice(&header);
                out.extend_from_slice(&seq.to_be_bytes());
                let start = out.len();
                out.extend_from_slice(plaintext);
                let tag = self
                    .key
                    .seal_in_place_separate_tag(
                        Nonce::assume_unique_for_key(nonce),
                        Aad::from(aad),
                        &mut out[start..],
                    )
                    .expect("a record is far below the AEAD's length limit");
                out.extend_from_slice(tag.as_ref());
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Session
// ---------------------------------------------------------------------------------------------

/// One TLS connection: the handshake it opens with, the protection of each direction's
/// application data, and its key log lines.
pub struct TlsSession {
    suite: TlsSuite,
    client_random: [u8; 32],
    flights: Vec<(Side, Vec<u8>)>,
    key_log: String,
    /// Client, server.
    protection: [Protection; 2],
}

impl TlsSession {
    /// Runs the handshake: its flights, keys and key log lines are fixed from here on.
    pub fn new(p: &TlsParams) -> Self {
        let mut seed_key_bytes = b"mcp-resume-audit synth tls ".to_vec();
        seed_key_bytes.extend_from_slice(&p.seed.to_be_bytes());
        let seed_key = hmac::Key::new(hmac::HMAC_SHA256, &seed_key_bytes);
        let conn_key = hmac::Key::new(
            hmac::HMAC_SHA256,
            hmac::sign(&seed_key, &p.connection).as_ref(),
        );
        if p.suite.is_tls13() {
            Self::tls13(p, &conn_key)
        } else {
            Self::tls12(p, &conn_key)
        }
    }

    /// The handshake, flight by flight: the side that sends it and its bytes (whole records).
    /// Application data may follow once every flight is sent.
    pub fn handshake(&self) -> &[(Side, Vec<u8>)] {
        &self.flights
    }

    pub fn client_random(&self) -> [u8; 32] {
        self.client_random
    }

    pub fn suite(&self) -> TlsSuite {
        self.suite
    }

    /// The NSS key log lines of this connection (TLS 1.3: the four traffic secrets; TLS 1.2:
    /// `CLIENT_RANDOM`), each ending in a newline.
    pub fn key_log(&self) -> &str {
        &self.key_log
    }

    pub fn write_key_log<W: Write + ?Sized>(&self, out: &mut W) -> io::Result<()> {
        out.write_all(self.key_log.as_bytes())
    }

    /// Appends `plaintext` from `from` as application_data records of at most
    /// [`MAX_RECORD_PLAINTEXT`] bytes each. An empty write makes no record.
    pub fn seal(&mut self, from: Side, plaintext: &[u8], out: &mut Vec<u8>) {
        let records = plaintext.len().div_ceil(MAX_RECORD_PLAINTEXT);
        out.reserve(plaintext.len() + records * (5 + 8 + 1 + TAG_LEN));
        let p = &mut self.protection[side_index(from)];
        for piece in plaintext.chunks(MAX_RECORD_PLAINTEXT) {
            p.seal(APPLICATION_DATA, piece, out);
        }
    }

    /// Bytes on the wire for `len` bytes of plaintext.
    pub fn sealed_len(&self, len: usize) -> usize {
        let per = match self.suite.is_tls13() {
            true => 5 + 1 + TAG_LEN,
            false => 5 + 8 + TAG_LEN,
        };
        len + len.div_ceil(MAX_RECORD_PLAINTEXT) * per
    }

    fn client_hello(p: &TlsParams, random: &[u8; 32], key_share: &[u8]) -> Vec<u8> {
        let tls13 = p.suite.is_tls13();
        let mut b = Vec::with_capacity(256);
        put_u16(&mut b, 0x0303);
        b.extend_from_slice(random);
        vec8(&mut b, &[]);
        let mut suites = Vec::new();
        let offered: &[u16] = if tls13 {
            &[0x1301, 0x1302, 0x1303]
        } else {
            &[0xC02F, 0xC030, 0xCCA8]
        };
        for s in offered {
            put_u16(&mut suites, *s);
        }
        vec16(&mut b, &suites);
        vec8(&mut b, &[0]);
        let mut exts = Vec::new();
        if let Some(name) = &p.sni {
            let mut entry = vec![0];
            vec16(&mut entry, name.as_bytes());
            let mut list = Vec::new();
            vec16(&mut list, &entry);
            ext(&mut exts, EXT_SERVER_NAME, &list);
        }
        ext(&mut exts, EXT_SUPPORTED_GROUPS, &[0, 2, 0x00, 0x1d]);
        ext(&mut exts, EXT_SIGNATURE_ALGORITHMS, &[0, 4, 8, 4, 4, 3]);
        let offered_alpn: Vec<&str> = if p.alpn == "http/1.1" {
            vec!["http/1.1"]
        } else {
            vec![p.alpn.as_str(), "http/1.1"]
        };
        ext(&mut exts, EXT_ALPN, &alpn_list(&offered_alpn));
        if tls13 {
            ext(&mut exts, EXT_SUPPORTED_VERSIONS, &[2, 3, 4]);
            ext(&mut exts, EXT_PSK_KEY_EXCHANGE_MODES, &[1, 1]);
            let mut share = Vec::new();
            put_u16(&mut share, GROUP_X25519);
            vec16(&mut share, key_share);
            let mut shares = Vec::new();
            vec16(&mut shares, &share);
            ext(&mut exts, EXT_KEY_SHARE, &shares);
        } else {
            ext(&mut exts, EXT_EC_POINT_FORMATS, &[1, 0]);
            ext(&mut exts, EXT_RENEGOTIATION_INFO, &[0]);
        }
        vec16(&mut b, &exts);
        message(CLIENT_HELLO, &b)
    }

    fn server_hello(p: &TlsParams, random: &[u8; 32], key_share: &[u8]) -> Vec<u8> {
        let mut b = Vec::with_capacity(128);
        put_u16(&mut b, 0x0303);
        b.extend_from_slice(random);
        vec8(&mut b, &[]);
        put_u16(&mut b, p.suite.id());
        b.push(0);
        let mut exts = Vec::new();
        if p.suite.is_tls13() {
            ext(&mut exts, EXT_SUPPORTED_VERSIONS, &[3, 4]);
            let mut share = Vec::new();
            put_u16(&mut share, GROUP_X25519);
            vec16(&mut share, key_share);
            ext(&mut exts, EXT_KEY_SHARE, &share);
        } else {
            ext(&mut exts, EXT_RENEGOTIATION_INFO, &[0]);
            ext(&mut exts, EXT_EC_POINT_FORMATS, &[1, 0]);
            ext(&mut exts, EXT_ALPN, &alpn_list(&[&p.alpn]));
        }
        vec16(&mut b, &exts);
        message(SERVER_HELLO, &b)
    }

    /// A certificate chain of one dummy DER-looking certificate.
    fn certificate(conn_key: &hmac::Key, tls13: bool) -> Vec<u8> {
        let mut der = vec![0x30, 0x82, 0x03, 0x00];
        der.extend(filler(conn_key, "certificate", 0x300));
        let mut entry = Vec::new();
        vec24(&mut entry, &der);
        let mut b = Vec::new();
        if tls13 {
            vec16(&mut entry, &[]); // certificate extensions
            vec8(&mut b, &[]); // certificate_request_context
        }
        vec24(&mut b, &entry);
        message(CERTIFICATE, &b)
    }

    fn tls13(p: &TlsParams, conn_key: &hmac::Key) -> Self {
        let suite = p.suite;
        let hash = suite.hash();
        let client_random = array32(conn_key, "client random");
        let server_random = array32(conn_key, "server random");
        let shared = array32(conn_key, "ecdhe shared secret");
        let client_hello =
            Self::client_hello(p, &client_random, &array32(conn_key, "client key share"));
        let server_hello =
            Self::server_hello(p, &server_random, &array32(conn_key, "server key share"));
        let mut transcript = digest::Context::new(hash.digest());
        transcript.update(&client_hello);
        transcript.update(&server_hello);
        let hello_hash = transcript.clone().finish();

        // RFC 8446 §7.1, with no PSK: early secret from zeros, then the (fake) ECDHE secret.
        let zeros = vec![0u8; hash.len()];
        let early = hkdf::Salt::new(hash.hkdf(), &zeros).extract(&zeros);
        let empty_hash = digest::digest(hash.digest(), b"");
        let derived = expand_label(&early, b"derived", empty_hash.as_ref(), hash.len());
        let handshake_secret = hkdf::Salt::new(hash.hkdf(), &derived).extract(&shared);
        let c_hs = expand_label(
            &handshake_secret,
            b"c hs traffic",
            hello_hash.as_ref(),
            hash.len(),
        );
        let s_hs = expand_label(
            &handshake_secret,
            b"s hs traffic",
            hello_hash.as_ref(),
            hash.len(),
        );
        let derived = expand_label(
            &handshake_secret,
            b"derived",
            empty_hash.as_ref(),
            hash.len(),
        );
        let master = hkdf::Salt::new(hash.hkdf(), &derived).extract(&zeros);

        let mut ee = Vec::new();
        let mut exts = Vec::new();
        ext(&mut exts, EXT_ALPN, &alpn_list(&[&p.alpn]));
        vec16(&mut ee, &exts);
        let ee = message(ENCRYPTED_EXTENSIONS, &ee);
        let cert = Self::certificate(conn_key, true);
        let mut cv = Vec::new();
        put_u16(&mut cv, RSA_PSS_RSAE_SHA256);
        vec16(&mut cv, &filler(conn_key, "signature", 256));
        let cv = message(CERTIFICATE_VERIFY, &cv);
        for m in [&ee, &cert, &cv] {
            transcript.update(m);
        }
        let finished = |base: &[u8], at: &digest::Digest| {
            let key = expand_label_secret(hash, base, b"finished", hash.len());
            let tag = hmac::sign(&hmac::Key::new(hash.hmac(), &key), at.as_ref());
            message(FINISHED, tag.as_ref())
        };
        let server_finished = finished(&s_hs, &transcript.clone().finish());
        transcript.update(&server_finished);
        let app_hash = transcript.clone().finish();
        let c_ap = expand_label(&master, b"c ap traffic", app_hash.as_ref(), hash.len());
        let s_ap = expand_label(&master, b"s ap traffic", app_hash.as_ref(), hash.len());
        let client_finished = finished(&c_hs, &app_hash);

        let mut server_hs = Protection::tls13(suite, &s_hs);
        let mut client_hs = Protection::tls13(suite, &c_hs);
        let mut server_ap = Protection::tls13(suite, &s_ap);
        let client_ap = Protection::tls13(suite, &c_ap);

        let mut flights = Vec::new();
        let mut ch = Vec::new();
        plain_record(&mut ch, HANDSHAKE, 0x0301, &client_hello);
        flights.push((Side::Client, ch));
        let mut sf = Vec::new();
        plain_record(&mut sf, HANDSHAKE, 0x0303, &server_hello);
        // The middlebox-compatibility ChangeCipherSpec most servers send (RFC 8446 §D.4).
        plain_record(&mut sf, CHANGE_CIPHER_SPEC, 0x0303, &[1]);
        for m in [&ee, &cert, &cv, &server_finished] {
            server_hs.seal(HANDSHAKE, m, &mut sf);
        }
        flights.push((Side::Server, sf));
        let mut cf = Vec::new();
        plain_record(&mut cf, CHANGE_CIPHER_SPEC, 0x0303, &[1]);
        client_hs.seal(HANDSHAKE, &client_finished, &mut cf);
        flights.push((Side::Client, cf));
        // A session ticket, as servers send right after the handshake: the first record
        // under the server's application key, consumed by the reader.
        let mut ticket = Vec::new();
        ticket.extend_from_slice(&7200u32.to_be_bytes());
        ticket.extend_from_slice(&array32(conn_key, "ticket age add")[..4]);
        vec8(&mut ticket, &[0]);
        vec16(&mut ticket, &filler(conn_key, "ticket", 96));
        vec16(&mut ticket, &[]);
        let mut st = Vec::new();
        server_ap.seal(HANDSHAKE, &message(NEW_SESSION_TICKET, &ticket), &mut st);
        flights.push((Side::Server, st));

        let cr = hex(&client_random);
        let mut key_log = String::with_capacity(4 * (40 + 64 + 2 * hash.len()));
        for (label, secret) in [
            ("CLIENT_HANDSHAKE_TRAFFIC_SECRET", &c_hs),
            ("SERVER_HANDSHAKE_TRAFFIC_SECRET", &s_hs),
            ("CLIENT_TRAFFIC_SECRET_0", &c_ap),
            ("SERVER_TRAFFIC_SECRET_0", &s_ap),
        ] {
            let _ = writeln!(key_log, "{label} {cr} {}", hex(secret));
        }
        TlsSession {
            suite,
            client_random,
            flights,
            key_log,
            protection: [client_ap, server_ap],
        }
    }

    fn tls12(p: &TlsParams, conn_key: &hmac::Key) -> Self {
        let suite = p.suite;
        let client_random = array32(conn_key, "client random");
        let server_random = array32(conn_key, "server random");
        let premaster = array32(conn_key, "ecdhe shared secret");
        let client_hello = Self::client_hello(p, &client_random, &[]);
        let server_hello = Self::server_hello(p, &server_random, &[]);
        let cert = Self::certificate(conn_key, false);
        let mut ske = vec![3]; // named_curve
        put_u16(&mut ske, GROUP_X25519);
        vec8(&mut ske, &array32(conn_key, "server key share"));
        put_u16(&mut ske, RSA_PSS_RSAE_SHA256);
        vec16(&mut ske, &filler(conn_key, "signature", 256));
        let ske = message(SERVER_KEY_EXCHANGE, &ske);
        let done = message(SERVER_HELLO_DONE, &[]);
        let mut cke = Vec::new();
        vec8(&mut cke, &array32(conn_key, "client key share"));
        let cke = message(CLIENT_KEY_EXCHANGE, &cke);

        let mut randoms = client_random.to_vec();
        randoms.extend_from_slice(&server_random);
        let master = prf(&premaster, b"master secret", &randoms, 48);
        let mut swapped = server_random.to_vec();
        swapped.extend_from_slice(&client_random);
        let block = prf(&master, b"key expansion", &swapped, 2 * 16 + 2 * 4);
        let alg = suite.aead();
        let mut client = Protection::new(alg, &block[0..16], &block[32..36], RecordMode::Tls12Gcm);
        let mut server = Protection::new(alg, &block[16..32], &block[36..40], RecordMode::Tls12Gcm);

        let mut transcript = digest::Context::new(&digest::SHA256);
        for m in [&client_hello, &server_hello, &cert, &ske, &done, &cke] {
            transcript.update(m);
        }
        let verify = |label: &[u8], at: digest::Digest| {
            message(FINISHED, &prf(&master, label, at.as_ref(), 12))
        };
        let client_finished = verify(b"client finished", transcript.clone().finish());
        transcript.update(&client_finished);
        let server_finished = verify(b"server finished", transcript.finish());

        let mut flights = Vec::new();
        let mut ch = Vec::new();
        plain_record(&mut ch, HANDSHAKE, 0x0301, &client_hello);
        flights.push((Side::Client, ch));
        let mut sf = Vec::new();
        let server_flight = [server_hello, cert, ske, done].concat();
        plain_record(&mut sf, HANDSHAKE, 0x0303, &server_flight);
        flights.push((Side::Server, sf));
        let mut cf = Vec::new();
        plain_record(&mut cf, HANDSHAKE, 0x0303, &cke);
        plain_record(&mut cf, CHANGE_CIPHER_SPEC, 0x0303, &[1]);
        client.seal(HANDSHAKE, &client_finished, &mut cf);
        flights.push((Side::Client, cf));
        let mut sfin = Vec::new();
        plain_record(&mut sfin, CHANGE_CIPHER_SPEC, 0x0303, &[1]);
        server.seal(HANDSHAKE, &server_finished, &mut sfin);
        flights.push((Side::Server, sfin));

        let key_log = format!("CLIENT_RANDOM {} {}\n", hex(&client_random), hex(&master));
        TlsSession {
            suite,
            client_random,
            flights,
            key_log,
            protection: [client, server],
        }
    }
}

fn side_index(side: Side) -> usize {
    match side {
        Side::Client => 0,
        Side::Server => 1,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn params(suite: TlsSuite, alpn: &str) -> TlsParams {
        TlsParams {
            suite,
            seed: 7,
            connection: b"10.0.0.2:4000-10.0.0.1:443".to_vec(),
            alpn: alpn.to_string(),
            sni: Some("mcp.example".to_string()),
        }
    }

    const ALL: [TlsSuite; 4] = [
        TlsSuite::Tls13Aes128Gcm,
        TlsSuite::Tls13Aes256Gcm,
        TlsSuite::Tls13ChaCha20Poly1305,
        TlsSuite::Tls12EcdheRsaAes128Gcm,
    ];

    /// Splits a byte run into records: (content type, version, body).
    pub(crate) fn records(mut bytes: &[u8]) -> Vec<(u8, u16, Vec<u8>)> {
        let mut out = Vec::new();
        while !bytes.is_empty() {
            let len = usize::from(u16::from_be_bytes([bytes[3], bytes[4]]));
            out.push((
                bytes[0],
                u16::from_be_bytes([bytes[1], bytes[2]]),
                bytes[5..5 + len].to_vec(),
            ));
            bytes = &bytes[5 + len..];
        }
        out
    }

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Opens a TLS 1.3 record with a logged traffic secret, independently of the writer's
    /// `Protection` (ring's open, the RFC's nonce and AAD rules).
    pub(crate) fn open13(
        suite: TlsSuite,
        secret: &[u8],
        seq: u64,
        record: &(u8, u16, Vec<u8>),
    ) -> Vec<u8> {
        let hash = suite.hash();
        let key = expand_label_secret(hash, secret, b"key", suite.aead().key_len());
        let iv = expand_label_secret(hash, secret, b"iv", 12);
        let key = LessSafeKey::new(UnboundKey::new(suite.aead(), &key).unwrap());
        let mut nonce = [0u8; 12];
        nonce.copy_from_slice(&iv);
        for (n, s) in nonce[4..].iter_mut().zip(seq.to_be_bytes()) {
            *n ^= s;
        }
        let len = record.2.len();
        let header = [record.0, 3, 3, (len >> 8) as u8, len as u8];
        let mut body = record.2.clone();
        let plain = key
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(header),
                &mut body,
            )
            .expect("authenticates");
        plain.to_vec()
    }

    pub(crate) fn key_log_secret(log: &str, label: &str) -> Vec<u8> {
        let line = log
            .lines()
            .find(|l| l.starts_with(&format!("{label} ")))
            .unwrap();
        unhex(line.split(' ').nth(2).unwrap())
    }

    #[test]
    fn same_inputs_same_bytes_other_connection_other_secrets() {
        for suite in ALL {
            let a = TlsSession::new(&params(suite, "h2"));
            let b = TlsSession::new(&params(suite, "h2"));
            assert_eq!(a.handshake(), b.handshake());
            assert_eq!(a.key_log(), b.key_log());
            let mut other = params(suite, "h2");
            other.connection.push(1);
            let c = TlsSession::new(&other);
            assert_ne!(a.client_random(), c.client_random());
            assert_ne!(a.key_log(), c.key_log());
        }
    }

    #[test]
    fn tls13_flights_open_with_the_logged_secrets() {
        for suite in ALL.into_iter().filter(|s| s.is_tls13()) {
            let mut s = TlsSession::new(&params(suite, "h2"));
            let log = s.key_log().to_string();
            assert_eq!(log.lines().count(), 4);
            let cr = hex(&s.client_random());
            assert!(log.lines().all(|l| l.split(' ').nth(1) == Some(&cr)));
            let flights = s.handshake().to_vec();
            assert_eq!(
                flights.iter().map(|f| f.0).collect::<Vec<_>>(),
                [Side::Client, Side::Server, Side::Client, Side::Server]
            );
            let ch = records(&flights[0].1);
            assert_eq!((ch[0].0, ch[0].1, ch[0].2[0]), (HANDSHAKE, 0x0301, 1));
            let server = records(&flights[1].1);
            assert_eq!(server[0].2[0], SERVER_HELLO);
            assert_eq!(server[1].0, CHANGE_CIPHER_SPEC);
            let s_hs = key_log_secret(&log, "SERVER_HANDSHAKE_TRAFFIC_SECRET");
            let opened: Vec<Vec<u8>> = server[2..]
                .iter()
                .enumerate()
                .map(|(i, r)| open13(suite, &s_hs, i as u64, r))
                .collect();
            let types: Vec<(u8, u8)> = opened.iter().map(|p| (p[0], *p.last().unwrap())).collect();
            assert_eq!(
                types,
                [
                    (ENCRYPTED_EXTENSIONS, HANDSHAKE),
                    (CERTIFICATE, HANDSHAKE),
                    (CERTIFICATE_VERIFY, HANDSHAKE),
                    (FINISHED, HANDSHAKE)
                ]
            );
            // EncryptedExtensions names the ALPN protocol.
            assert!(opened[0].windows(3).any(|w| w == b"\x02h2"));
            let c_hs = key_log_secret(&log, "CLIENT_HANDSHAKE_TRAFFIC_SECRET");
            let cf = records(&flights[2].1);
            assert_eq!(open13(suite, &c_hs, 0, &cf[1])[0], FINISHED);
            let s_ap = key_log_secret(&log, "SERVER_TRAFFIC_SECRET_0");
            let ticket = records(&flights[3].1);
            assert_eq!(open13(suite, &s_ap, 0, &ticket[0])[0], NEW_SESSION_TICKET);

            // Application data: records of at most 16 KiB, sequence numbers running on.
            let body: Vec<u8> = (0..40_000u32).map(|i| (i % 251) as u8).collect();
            let mut out = Vec::new();
            s.seal(Side::Server, &body, &mut out);
            assert_eq!(out.len(), s.sealed_len(body.len()));
            let recs = records(&out);
            assert_eq!(recs.len(), 3);
            let mut joined = Vec::new();
            for (i, r) in recs.iter().enumerate() {
                assert_eq!((r.0, r.1), (APPLICATION_DATA, 0x0303));
                let mut p = open13(suite, &s_ap, 1 + i as u64, r);
                assert_eq!(p.pop(), Some(APPLICATION_DATA));
                assert!(p.len() <= MAX_RECORD_PLAINTEXT);
                joined.extend(p);
            }
            assert_eq!(joined, body);
            let c_ap = key_log_secret(&log, "CLIENT_TRAFFIC_SECRET_0");
            let mut out = Vec::new();
            s.seal(Side::Client, b"GET / HTTP/1.1\r\n\r\n", &mut out);
            let r = &records(&out)[0];
            assert_eq!(open13(suite, &c_ap, 0, r), b"GET / HTTP/1.1\r\n\r\n\x17");
        }
    }

    #[test]
    fn tls12_records_open_with_the_key_block_of_the_logged_master_secret() {
        let mut s = TlsSession::new(&params(TlsSuite::Tls12EcdheRsaAes128Gcm, "http/1.1"));
        let log = s.key_log().to_string();
        assert_eq!(log.lines().count(), 1);
        let master = key_log_secret(&log, "CLIENT_RANDOM");
        assert_eq!(master.len(), 48);
        let flights = s.handshake().to_vec();
        let server = records(&flights[1].1);
        let hello = &server[0].2;
        // The ServerHello's random, right after the message header and version.
        let server_random = &hello[6..38];
        let mut seed = server_random.to_vec();
        seed.extend_from_slice(&s.client_random());
        let block = prf(&master, b"key expansion", &seed, 40);
        let open = |key: &[u8], salt: &[u8], record: &(u8, u16, Vec<u8>)| {
            let key = LessSafeKey::new(UnboundKey::new(&aead::AES_128_GCM, key).unwrap());
            let explicit = &record.2[..8];
            let seq = u64::from_be_bytes(explicit.try_into().unwrap());
            let mut nonce = [0u8; 12];
            nonce[..4].copy_from_slice(salt);
            nonce[4..].copy_from_slice(explicit);
            let mut aad = [0u8; 13];
            aad[..8].copy_from_slice(explicit);
            aad[8] = record.0;
            aad[9..11].copy_from_slice(&[3, 3]);
            let plain_len = record.2.len() - 8 - TAG_LEN;
            aad[11..].copy_from_slice(&(plain_len as u16).to_be_bytes());
            let mut body = record.2[8..].to_vec();
            let p = key
                .open_in_place(
                    Nonce::assume_unique_for_key(nonce),
                    Aad::from(aad),
                    &mut body,
                )
                .expect("authenticates")
                .to_vec();
            (seq, p)
        };
        let cf = records(&flights[2].1);
        assert_eq!(cf[1].0, CHANGE_CIPHER_SPEC);
        let (seq, fin) = open(&block[0..16], &block[32..36], &cf[2]);
        assert_eq!((seq, fin[0], fin.len()), (0, FINISHED, 16));
        let sf = records(&flights[3].1);
        let (seq, fin) = open(&block[16..32], &block[36..40], &sf[1]);
        assert_eq!((seq, fin[0]), (0, FINISHED));
        let mut out = Vec::new();
        s.seal(Side::Server, &[9u8; 20_000], &mut out);
        assert_eq!(out.len(), s.sealed_len(20_000));
        let recs = records(&out);
        let opened: Vec<(u64, usize)> = recs
            .iter()
            .map(|r| {
                let (seq, p) = open(&block[16..32], &block[36..40], r);
                (seq, p.len())
            })
            .collect();
        assert_eq!(opened, [(1, 16_384), (2, 20_000 - 16_384)]);
    }

    #[test]
    fn tls13_key_schedule_matches_rfc8448_derived_secret() {
        // RFC 8448 §3: "derived" from the early secret of an all-zero PSK.
        let zeros = [0u8; 32];
        let early = hkdf::Salt::new(hkdf::HKDF_SHA256, &zeros).extract(&zeros);
        let empty = digest::digest(&digest::SHA256, b"");
        let derived = expand_label(&early, b"derived", empty.as_ref(), 32);
        assert_eq!(
            hex(&derived),
            "6f2615a108c702c5678f54fc9dbab69716c076189c48250cebeac3576c3611ba"
        );
    }
}
