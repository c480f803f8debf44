//! Cipher suites, key derivation and AEAD record protection for TLS 1.2 and TLS 1.3.
//!
//! Input: secrets from an NSS key log (a TLS 1.2 master secret, or TLS 1.3 traffic secrets),
//! the hello randoms, the negotiated cipher suite, and protected records.
//! Output: per-direction [`RecordKey`]s that open records (and, for the tests, seal them),
//! the IANA name of any common suite, and the suites this module can read.
//! Invariants: no function here panics on any input; a record that does not authenticate
//! yields `None` and never a byte of unauthenticated plaintext; secrets never leave the
//! module except as keys.
//!
//! Crate choice: `ring`. AES-128-GCM open of a 16 KiB record, measured on this machine (2
//! shared cores, AES-NI and VAES present), best of three runs of a throwaway benchmark
//! (`cargo build --release && ./target/release/aeadbench`: 20,000 `open_in_place` of one
//! 16,384-byte record, copying the ciphertext back each time):
//!
//! | crate                          | AES-128-GCM open | ChaCha20-Poly1305 open |
//! | ------------------------------ | ---------------- | ---------------------- |
//! | ring 0.17.14                   | 6.3 GiB/s        | 1.4 GiB/s              |
//! | aws-lc-rs 1.19 (builds here)   | 10.5 GiB/s       | —                      |
//! | RustCrypto aes-gcm 0.10.3      | 1.0 GiB/s        | 0.75 GiB/s (chacha20poly1305 0.10.1) |
//!
//! aws-lc-rs is faster, but both it and ring open records far faster than a capture is read
//! and parsed, so the AEAD is never the bottleneck; ring is the smaller dependency (a clean
//! release build of ring alone took 21 s wall here, aws-lc-sys compiles a whole C library)
//! and it brings HKDF and HMAC for the key schedules in the same crate. RustCrypto would cost
//! 6x the time per byte.

use std::cell::OnceCell;
use std::ops::Range;

use ring::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use ring::{hkdf, hmac};

/// Length of an AEAD tag for every suite supported here.
pub(crate) const TAG_LEN: usize = 16;
/// Length of the explicit nonce TLS 1.2 AES-GCM records carry before the ciphertext.
pub(crate) const EXPLICIT_NONCE_LEN: usize = 8;
/// Longest secret any supported hash produces (SHA-384).
pub(crate) const MAX_SECRET_LEN: usize = 48;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Protocol {
    Tls12,
    Tls13,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AeadAlg {
    Aes128Gcm,
    Aes256Gcm,
    ChaCha20Poly1305,
}

impl AeadAlg {
    fn ring(self) -> &'static aead::Algorithm {
        match self {
            AeadAlg::Aes128Gcm => &aead::AES_128_GCM,
            AeadAlg::Aes256Gcm => &aead::AES_256_GCM,
            AeadAlg::ChaCha20Poly1305 => &aead::CHACHA20_POLY1305,
        }
    }
    fn key_len(self) -> usize {
        match self {
            AeadAlg::Aes128Gcm => 16,
            AeadAlg::Aes256Gcm | AeadAlg::ChaCha20Poly1305 => 32,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HashAlg {
    Sha256,
    Sha384,
}

impl HashAlg {
    pub(crate) fn len(self) -> usize {
        match self {
            HashAlg::Sha256 => 32,
            HashAlg::Sha384 => 48,
        }
    }
    fn hkdf(self) -> hkdf::Algorithm {
        match self {
            HashAlg::Sha256 => hkdf::HKDF_SHA256,
            HashAlg::Sha384 => hkdf::HKDF_SHA384,
        }
    }
    fn hmac(self) -> hmac::Algorithm {
        match self {
            HashAlg::Sha256 => hmac::HMAC_SHA256,
            HashAlg::Sha384 => hmac::HMAC_SHA384,
        }
    }
}

/// A cipher suite this module can decrypt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SuiteSpec {
    pub id: u16,
    pub protocol: Protocol,
    pub aead: AeadAlg,
    pub hash: HashAlg,
}

/// The readable suites: TLS 1.3's three AEAD suites, and TLS 1.2's AES-GCM and
/// ChaCha20-Poly1305 suites with RSA, DHE or ECDHE key exchange.
pub(crate) fn supported_suite(id: u16) -> Option<SuiteSpec> {
    use AeadAlg::*;
    use HashAlg::*;
    use Protocol::*;
    let (protocol, aead, hash) = match id {
        0x1301 => (Tls13, Aes128Gcm, Sha256),
        0x1302 => (Tls13, Aes256Gcm, Sha384),
        0x1303 => (Tls13, ChaCha20Poly1305, Sha256),
        0x009C | 0x009E | 0xC02B | 0xC02F => (Tls12, Aes128Gcm, Sha256),
        0x009D | 0x009F | 0xC02C | 0xC030 => (Tls12, Aes256Gcm, Sha384),
        0xCCA8..=0xCCAA => (Tls12, ChaCha20Poly1305, Sha256),
        _ => return None,
    };
    Some(SuiteSpec {
        id,
        protocol,
        aead,
        hash,
    })
}

/// IANA names of the suites a capture of today's clients and servers is likely to show.
const SUITE_NAMES: &[(u16, &str)] = &[
    (0x0000, "TLS_NULL_WITH_NULL_NULL"),
    (0x0001, "TLS_RSA_WITH_NULL_MD5"),
    (0x0002, "TLS_RSA_WITH_NULL_SHA"),
    (0x0004, "TLS_RSA_WITH_RC4_128_MD5"),
    (0x0005, "TLS_RSA_WITH_RC4_128_SHA"),
    (0x000A, "TLS_RSA_WITH_3DES_EDE_CBC_SHA"),
    (0x002F, "TLS_RSA_WITH_AES_128_CBC_SHA"),
    (0x0033, "TLS_DHE_RSA_WITH_AES_128_CBC_SHA"),
    (0x0035, "TLS_RSA_WITH_AES_256_CBC_SHA"),
    (0x0039, "TLS_DHE_RSA_WITH_AES_256_CBC_SHA"),
    (0x003B, "TLS_RSA_WITH_NULL_SHA256"),
    (0x003C, "TLS_RSA_WITH_AES_128_CBC_SHA256"),
    (0x003D, "TLS_RSA_WITH_AES_256_CBC_SHA256"),
    (0x0067, "TLS_DHE_RSA_WITH_AES_128_CBC_SHA256"),
    (0x006B, "TLS_DHE_RSA_WITH_AES_256_CBC_SHA256"),
    (0x009C, "TLS_RSA_WITH_AES_128_GCM_SHA256"),
    (0x009D, "TLS_RSA_WITH_AES_256_GCM_SHA384"),
    (0x009E, "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256"),
    (0x009F, "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384"),
    (0x00FF, "TLS_EMPTY_RENEGOTIATION_INFO_SCSV"),
    (0x1301, "TLS_AES_128_GCM_SHA256"),
    (0x1302, "TLS_AES_256_GCM_SHA384"),
    (0x1303, "TLS_CHACHA20_POLY1305_SHA256"),
    (0x1304, "TLS_AES_128_CCM_SHA256"),
    (0x1305, "TLS_AES_128_CCM_8_SHA256"),
    (0x5600, "TLS_FALLBACK_SCSV"),
    (0xC009, "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA"),
    (0xC00A, "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA"),
    (0xC013, "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA"),
    (0xC014, "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA"),
    (0xC023, "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256"),
    (0xC024, "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA384"),
    (0xC027, "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256"),
    (0xC028, "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384"),
    (0xC02B, "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"),
    (0xC02C, "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"),
    (0xC02F, "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"),
    (0xC030, "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"),
    (0xC09C, "TLS_RSA_WITH_AES_128_CCM"),
    (0xC09D, "TLS_RSA_WITH_AES_256_CCM"),
    (0xC0AC, "TLS_ECDHE_ECDSA_WITH_AES_128_CCM"),
    (0xC0AD, "TLS_ECDHE_ECDSA_WITH_AES_256_CCM"),
    (0xCCA8, "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256"),
    (0xCCA9, "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"),
    (0xCCAA, "TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256"),
];

/// The IANA name of a cipher suite, or its number as `0x1234` when the table lacks it.
pub(crate) fn cipher_suite_name(id: u16) -> String {
    match SUITE_NAMES.binary_search_by_key(&id, |&(k, _)| k) {
        Ok(i) => SUITE_NAMES[i].1.to_string(),
        Err(_) => format!("0x{id:04X}"),
    }
}

/// A secret as long as its hash (32 or 48 bytes), kept inline so a key log entry costs no
/// allocation per secret.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Secret {
    len: u8,
    bytes: [u8; MAX_SECRET_LEN],
}

impl Secret {
    /// `None` unless `bytes` is 32 or 48 bytes long, the only lengths TLS hashes produce.
    pub(crate) fn new(bytes: &[u8]) -> Option<Secret> {
        if bytes.len() != 32 && bytes.len() != 48 {
            return None;
        }
        let mut s = Secret {
            len: bytes.len() as u8,
            bytes: [0; MAX_SECRET_LEN],
        };
        s.bytes[..bytes.len()].copy_from_slice(bytes);
        Some(s)
    }
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl std::fmt::Debug for Secret {
    // Secrets stay out of debug output and panic messages.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret({} bytes)", self.len)
    }
}

/// Output length for ring's HKDF-Expand.
struct OutLen(usize);

impl hkdf::KeyType for OutLen {
    fn len(&self) -> usize {
        self.0
    }
}

/// HKDF-Expand-Label of RFC 8446 §7.1, filling `out` (at most 255 bytes here).
pub(crate) fn hkdf_expand_label(
    hash: HashAlg,
    secret: &[u8],
    label: &[u8],
    context: &[u8],
    out: &mut [u8],
) {
    let prk = hkdf::Prk::new_less_safe(hash.hkdf(), secret);
    expand_label(&prk, label, context, out);
}

/// HKDF-Expand-Label from a secret already made an HMAC key: a traffic secret gives its key
/// and its IV from one key (each key made costs two blocks of the hash).
fn expand_label(prk: &hkdf::Prk, label: &[u8], context: &[u8], out: &mut [u8]) {
    // Every caller asks for a key, an IV or a secret: all short, all fixed, so the length
    // bytes below cannot overflow and ring's expand cannot fail.
    let out_len = (out.len() as u16).to_be_bytes();
    let label_len = [(b"tls13 ".len() + label.len()) as u8];
    let context_len = [context.len() as u8];
    let info: [&[u8]; 6] = [
        &out_len,
        &label_len,
        b"tls13 ",
        label,
        &context_len,
        context,
    ];
    if let Ok(okm) = prk.expand(&info, OutLen(out.len())) {
        // Fails only when out is longer than 255 hash lengths, which no caller asks for.
        let _ = okm.fill(out);
    }
}

/// The next application traffic secret after a KeyUpdate (RFC 8446 §7.2).
pub(crate) fn next_traffic_secret(hash: HashAlg, secret: &Secret) -> Secret {
    let mut next = [0u8; MAX_SECRET_LEN];
    let len = hash.len();
    hkdf_expand_label(
        hash,
        secret.as_bytes(),
        b"traffic upd",
        b"",
        &mut next[..len],
    );
    Secret {
        len: len as u8,
        bytes: next,
    }
}

/// The TLS 1.2 PRF of RFC 5246 §5: P_hash(secret, label + seed), filling `out`.
pub(crate) fn tls12_prf(hash: HashAlg, secret: &[u8], label: &[u8], seed: &[u8], out: &mut [u8]) {
    let key = hmac::Key::new(hash.hmac(), secret);
    // A(1) = HMAC(secret, label + seed); A(i) = HMAC(secret, A(i-1)).
    let mut a = {
        let mut ctx = hmac::Context::with_key(&key);
        ctx.update(label);
        ctx.update(seed);
        ctx.sign()
    };
    let mut filled = 0;
    while filled < out.len() {
        let mut ctx = hmac::Context::with_key(&key);
        ctx.update(a.as_ref());
        ctx.update(label);
        ctx.update(seed);
        let block = ctx.sign();
        let take = block.as_ref().len().min(out.len() - filled);
        out[filled..filled + take].copy_from_slice(&block.as_ref()[..take]);
        filled += take;
        a = hmac::sign(&key, a.as_ref());
    }
}

/// How a record's nonce and additional data are built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RecordMode {
    /// RFC 8446 §5.2–5.3: nonce = iv XOR seq, AAD = the record header, inner content type.
    Tls13,
    /// RFC 5288: nonce = 4-byte salt ‖ 8-byte explicit nonce carried in the record.
    Tls12Explicit,
    /// RFC 7905: nonce = iv XOR seq, nothing explicit in the record.
    Tls12Xor,
}

/// The protection of one direction of one connection: key, IV and nonce construction. The
/// sequence number is the caller's, so resynchronisation can try several.
///
/// The key is kept as its bytes, and expanded (ring's round keys and GHASH table, about 540
/// bytes) when a record is first opened with it; [`RecordKey::park`] frees the expanded form
/// of a key not in use, and the next record expands it again.
pub(crate) struct RecordKey {
    /// `raw[..aead.key_len()]` is the key.
    raw: [u8; 32],
    aead: AeadAlg,
    expanded: OnceCell<Box<LessSafeKey>>,
    iv: [u8; 12],
    mode: RecordMode,
}

/// An authenticated record's content type, and where its plaintext lies in the payload
/// that was opened (a range, so the caller keeps the buffer and its borrows free).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Opened {
    pub content_type: u8,
    pub plaintext: Range<usize>,
}

impl RecordKey {
    /// Expanded at its first record, not here: a connection is given both directions' keys
    /// at once, and some come to use long after (an event stream's answer) or never.
    fn new(aead: AeadAlg, key: &[u8], iv: [u8; 12], mode: RecordMode) -> Option<RecordKey> {
        // The length is all ring checks of a key.
        if key.len() != aead.key_len() {
            return None;
        }
        let mut raw = [0u8; 32];
        raw.get_mut(..key.len())?.copy_from_slice(key);
        Some(RecordKey {
            raw,
            aead,
            expanded: OnceCell::new(),
            iv,
            mode,
        })
    }

    fn expand(aead: AeadAlg, key: &[u8]) -> Option<LessSafeKey> {
        UnboundKey::new(aead.ring(), key).ok().map(LessSafeKey::new)
    }

    /// The expanded key, made again if it was parked.
    fn key(&self) -> Option<&LessSafeKey> {
        if let Some(k) = self.expanded.get() {
            return Some(k);
        }
        let key = Self::expand(self.aead, &self.raw[..self.aead.key_len()])?;
        Some(self.expanded.get_or_init(|| Box::new(key)))
    }

    /// Frees the expanded key until a record needs it again.
    pub(crate) fn park(&mut self) {
        self.expanded.take();
    }

    /// Whether the key is expanded now (not parked).
    #[cfg(test)]
    pub(crate) fn is_expanded(&self) -> bool {
        self.expanded.get().is_some()
    }

    /// The TLS 1.3 key and IV derived from a traffic secret (RFC 8446 §7.3).
    pub(crate) fn tls13(suite: &SuiteSpec, secret: &Secret) -> Option<RecordKey> {
        let mut key = [0u8; 32];
        let key = &mut key[..suite.aead.key_len()];
        let mut iv = [0u8; 12];
        let prk = hkdf::Prk::new_less_safe(suite.hash.hkdf(), secret.as_bytes());
        expand_label(&prk, b"key", b"", key);
        expand_label(&prk, b"iv", b"", &mut iv);
        RecordKey::new(suite.aead, key, iv, RecordMode::Tls13)
    }

    /// The client and server keys of a TLS 1.2 connection, from its key block (RFC 5246
    /// §6.3). AEAD suites have no MAC keys; the IV is a 4-byte salt for GCM and a 12-byte
    /// mask for ChaCha20-Poly1305. The extended master secret changes only how the master
    /// secret is made, which the key log already gives.
    pub(crate) fn tls12_pair(
        suite: &SuiteSpec,
        master: &[u8],
        client_random: &[u8; 32],
        server_random: &[u8; 32],
    ) -> Option<(RecordKey, RecordKey)> {
        let key_len = suite.aead.key_len();
        let (iv_len, mode) = match suite.aead {
            AeadAlg::ChaCha20Poly1305 => (12, RecordMode::Tls12Xor),
            _ => (4, RecordMode::Tls12Explicit),
        };
        let mut seed = [0u8; 64];
        seed[..32].copy_from_slice(server_random);
        seed[32..].copy_from_slice(client_random);
        let mut block = [0u8; 2 * 32 + 2 * 12];
        let block = &mut block[..2 * key_len + 2 * iv_len];
        tls12_prf(suite.hash, master, b"key expansion", &seed, block);
        let (client_key, rest) = block.split_at(key_len);
        let (server_key, rest) = rest.split_at(key_len);
        let (client_iv, server_iv) = rest.split_at(iv_len);
        let mut civ = [0u8; 12];
        let mut siv = [0u8; 12];
        civ[..iv_len].copy_from_slice(client_iv);
        siv[..iv_len].copy_from_slice(server_iv);
        Some((
            RecordKey::new(suite.aead, client_key, civ, mode)?,
            RecordKey::new(suite.aead, server_key, siv, mode)?,
        ))
    }

    fn xor_nonce(&self, seq: u64) -> [u8; 12] {
        let mut nonce = self.iv;
        for (n, s) in nonce[4..].iter_mut().zip(seq.to_be_bytes()) {
            *n ^= s;
        }
        nonce
    }

    fn tls12_aad(seq: u64, header: &[u8; 5], plaintext_len: usize) -> [u8; 13] {
        let mut aad = [0u8; 13];
        aad[..8].copy_from_slice(&seq.to_be_bytes());
        aad[8..11].copy_from_slice(&header[..3]);
        aad[11..].copy_from_slice(&(plaintext_len as u16).to_be_bytes());
        aad
    }

    /// The explicit nonce of a TLS 1.2 AES-GCM record, which most stacks set to the
    /// sequence number; `None` for other record modes or a record too short to hold one.
    pub(crate) fn explicit_nonce(&self, payload: &[u8]) -> Option<u64> {
        if self.mode != RecordMode::Tls12Explicit {
            return None;
        }
        let bytes: [u8; 8] = payload.get(..EXPLICIT_NONCE_LEN)?.try_into().ok()?;
        Some(u64::from_be_bytes(bytes))
    }

    /// The smallest record this key can produce on the wire, header included: it bounds
    /// how many records a run of lost bytes can have held.
    pub(crate) fn min_record_len(&self) -> usize {
        5 + TAG_LEN
            + match self.mode {
                RecordMode::Tls13 => 1,
                RecordMode::Tls12Explicit => EXPLICIT_NONCE_LEN,
                RecordMode::Tls12Xor => 0,
            }
    }

    /// The bytes a record of `plaintext_len` bytes adds on the wire (no TLS 1.3 padding).
    pub(crate) fn overhead(&self) -> usize {
        self.min_record_len()
    }

    /// Opens the record with header `header` and body `payload` as record number `seq`,
    /// decrypting in place. `None` when it does not authenticate (or, in TLS 1.3, holds
    /// only padding).
    pub(crate) fn open(&self, seq: u64, header: &[u8; 5], payload: &mut [u8]) -> Option<Opened> {
        let key = self.key()?;
        match self.mode {
            RecordMode::Tls13 => {
                let nonce = Nonce::assume_unique_for_key(self.xor_nonce(seq));
                let inner = key.open_in_place(nonce, Aad::from(*header), payload).ok()?;
                // The content type is the last non-zero byte; zeros after it are padding.
                let end = inner.iter().rposition(|&b| b != 0)?;
                Some(Opened {
                    content_type: inner[end],
                    plaintext: 0..end,
                })
            }
            RecordMode::Tls12Explicit => {
                let body_len = payload.len().checked_sub(EXPLICIT_NONCE_LEN + TAG_LEN)?;
                let (explicit, sealed) = payload.split_at_mut(EXPLICIT_NONCE_LEN);
                let mut nonce = [0u8; 12];
                nonce[..4].copy_from_slice(&self.iv[..4]);
                nonce[4..].copy_from_slice(explicit);
                let aad = Self::tls12_aad(seq, header, body_len);
                let plaintext = key
                    .open_in_place(Nonce::assume_unique_for_key(nonce), Aad::from(aad), sealed)
                    .ok()?;
                Some(Opened {
                    content_type: header[0],
                    plaintext: EXPLICIT_NONCE_LEN..EXPLICIT_NONCE_LEN + plaintext.len(),
                })
            }
            RecordMode::Tls12Xor => {
                let body_len = payload.len().checked_sub(TAG_LEN)?;
                let nonce = Nonce::assume_unique_for_key(self.xor_nonce(seq));
                let aad = Self::tls12_aad(seq, header, body_len);
                let plaintext = key.open_in_place(nonce, Aad::from(aad), payload).ok()?;
                Some(Opened {
                    content_type: header[0],
                    plaintext: 0..plaintext.len(),
                })
            }
        }
    }

    /// Seals one record as a peer would: the whole record, header included. TLS 1.3 adds
    /// `padding` zero bytes after the inner content type; TLS 1.2 GCM uses `seq` as the
    /// explicit nonce, as most stacks do.
    #[cfg(test)]
    pub(crate) fn seal(
        &self,
        seq: u64,
        content_type: u8,
        plaintext: &[u8],
        padding: usize,
    ) -> Vec<u8> {
        let key = self
            .key()
            .expect("a key whose length was checked when it was made");
        let mut body = plaintext.to_vec();
        let mut header = [content_type, 3, 3, 0, 0];
        let wire_len;
        match self.mode {
            RecordMode::Tls13 => {
                header[0] = 23;
                body.push(content_type);
                body.resize(body.len() + padding, 0);
                wire_len = body.len() + TAG_LEN;
                header[3..].copy_from_slice(&(wire_len as u16).to_be_bytes());
                let nonce = Nonce::assume_unique_for_key(self.xor_nonce(seq));
                key.seal_in_place_append_tag(nonce, Aad::from(header), &mut body)
                    .expect("seal");
            }
            RecordMode::Tls12Explicit => {
                wire_len = EXPLICIT_NONCE_LEN + body.len() + TAG_LEN;
                header[3..].copy_from_slice(&(wire_len as u16).to_be_bytes());
                let mut nonce = [0u8; 12];
                nonce[..4].copy_from_slice(&self.iv[..4]);
                nonce[4..].copy_from_slice(&seq.to_be_bytes());
                let aad = Self::tls12_aad(seq, &header, body.len());
                key.seal_in_place_append_tag(
                    Nonce::assume_unique_for_key(nonce),
                    Aad::from(aad),
                    &mut body,
                )
                .expect("seal");
                body.splice(0..0, seq.to_be_bytes());
            }
            RecordMode::Tls12Xor => {
                wire_len = body.len() + TAG_LEN;
                header[3..].copy_from_slice(&(wire_len as u16).to_be_bytes());
                let aad = Self::tls12_aad(seq, &header, body.len());
                let nonce = Nonce::assume_unique_for_key(self.xor_nonce(seq));
                key.seal_in_place_append_tag(nonce, Aad::from(aad), &mut body)
                    .expect("seal");
            }
        }
        let mut record = header.to_vec();
        record.extend_from_slice(&body);
        record
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Hex with any whitespace, as the RFCs print it.
    pub(crate) fn hex(s: &str) -> Vec<u8> {
        let digits: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
        digits
            .chunks(2)
            .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
            .collect()
    }

    fn suite(id: u16) -> SuiteSpec {
        supported_suite(id).unwrap()
    }

    // RFC 8448 §3, "Simple 1-RTT Handshake": traffic secrets and the keys derived from them.
    pub(crate) const RFC8448_SERVER_HS_SECRET: &str = "b6 7b 7d 69 0c c1 6c 4e 75 e5 42 13 cb 2d 37 b4 e9 c9 12 bc de d9 10 5d 42 be fd 59 d3 91 ad 38";
    pub(crate) const RFC8448_CLIENT_HS_SECRET: &str = "b3 ed db 12 6e 06 7f 35 a7 80 b3 ab f4 5e 2d 8f 3b 1a 95 07 38 f5 2e 96 00 74 6a 0e 27 a5 5a 21";
    pub(crate) const RFC8448_SERVER_AP_SECRET: &str = "a1 1a f9 f0 55 31 f8 56 ad 47 11 6b 45 a9 50 32 82 04 b4 f4 4b fb 6b 3a 4b 4f 1f 3f cb 63 16 43";
    pub(crate) const RFC8448_CLIENT_AP_SECRET: &str = "9e 40 64 6c e7 9a 7f 9d c0 5a f8 88 9b ce 65 52 87 5a fa 0b 06 df 00 87 f7 92 eb b7 c1 75 04 a5";
    /// The client's Finished under its handshake keys (sequence 0).
    pub(crate) const RFC8448_CLIENT_FINISHED_RECORD: &str = "17 03 03 00 35 75 ec 4d c2 38 cc e6 0b 29 80 44
        a7 1e 21 9c 56 cc 77 b0 51 7f e9 b9 3c 7a 4b fc 44 d8 7f 38 f8 03 38 ac 98 fc 46 de b3 84 bd 1c
        ae ac ab 68 67 d7 26 c4 05 46";
    /// 50 bytes 00..31 from the client under its application keys (sequence 0).
    pub(crate) const RFC8448_CLIENT_APP_RECORD: &str = "17 03 03 00 43 a2 3f 70 54 b6 2c 94 d0 af fa fe
        82 28 ba 55 cb ef ac ea 42 f9 14 aa 66 bc ab 3f 2b 98 19 a8 a5 b4 6b 39 5b d5 4a 9a 20 44 1e 2b
        62 97 4e 1f 5a 62 92 a2 97 70 14 bd 1e 3d ea e6 3a ee bb 21 69 49 15 e4";
    /// The same 50 bytes from the server, after its NewSessionTicket (sequence 1).
    pub(crate) const RFC8448_SERVER_APP_RECORD: &str = "17 03 03 00 43 2e 93 7e 11 ef 4a c7 40 e5 38 ad
        36 00 5f c4 a4 69 32 fc 32 25 d0 5f 82 aa 1b 36 e3 0e fa f9 7d 90 e6 df fc 60 2d cb 50 1a 59 a8
        fc c4 9c 4b f2 e5 f0 a2 1c 00 47 c2 ab f3 32 54 0d d0 32 e1 67 c2 95 5d";

    fn split(record: &[u8]) -> ([u8; 5], Vec<u8>) {
        (record[..5].try_into().unwrap(), record[5..].to_vec())
    }

    #[test]
    fn rfc8448_traffic_keys() {
        let cases = [
            (
                RFC8448_SERVER_HS_SECRET,
                "3f ce 51 60 09 c2 17 27 d0 f2 e4 e8 6e e4 03 bc",
                "5d 31 3e b2 67 12 76 ee 13 00 0b 30",
            ),
            (
                RFC8448_CLIENT_HS_SECRET,
                "db fa a6 93 d1 76 2c 5b 66 6a f5 d9 50 25 8d 01",
                "5b d3 c7 1b 83 6e 0b 76 bb 73 26 5f",
            ),
            (
                RFC8448_SERVER_AP_SECRET,
                "9f 02 28 3b 6c 9c 07 ef c2 6b b9 f2 ac 92 e3 56",
                "cf 78 2b 88 dd 83 54 9a ad f1 e9 84",
            ),
            (
                RFC8448_CLIENT_AP_SECRET,
                "17 42 2d da 59 6e d5 d9 ac d8 90 e3 c6 3f 50 51",
                "5b 78 92 3d ee 08 57 90 33 e5 23 d9",
            ),
        ];
        for (secret, key, iv) in cases {
            let mut k = [0u8; 16];
            let mut i = [0u8; 12];
            hkdf_expand_label(HashAlg::Sha256, &hex(secret), b"key", b"", &mut k);
            hkdf_expand_label(HashAlg::Sha256, &hex(secret), b"iv", b"", &mut i);
            assert_eq!(k.to_vec(), hex(key));
            assert_eq!(i.to_vec(), hex(iv));
        }
    }

    #[test]
    fn rfc8448_records_open() {
        let s = suite(0x1301);
        let open = |secret: &str, seq: u64, record: &str| {
            let key = RecordKey::tls13(&s, &Secret::new(&hex(secret)).unwrap()).unwrap();
            let (header, mut payload) = split(&hex(record));
            let opened = key.open(seq, &header, &mut payload);
            opened.map(|o| (o.content_type, payload[o.plaintext].to_vec()))
        };
        let app: Vec<u8> = (0u8..=0x31).collect();
        assert_eq!(
            open(RFC8448_CLIENT_AP_SECRET, 0, RFC8448_CLIENT_APP_RECORD),
            Some((23, app.clone()))
        );
        assert_eq!(
            open(RFC8448_SERVER_AP_SECRET, 1, RFC8448_SERVER_APP_RECORD),
            Some((23, app))
        );
        let (ty, fin) = open(RFC8448_CLIENT_HS_SECRET, 0, RFC8448_CLIENT_FINISHED_RECORD).unwrap();
        assert_eq!((ty, fin[0], fin.len()), (22, 20, 36));
        // The wrong sequence number, or the wrong key, never authenticates.
        assert_eq!(
            open(RFC8448_CLIENT_AP_SECRET, 1, RFC8448_CLIENT_APP_RECORD),
            None
        );
        assert_eq!(
            open(RFC8448_SERVER_AP_SECRET, 0, RFC8448_CLIENT_APP_RECORD),
            None
        );
    }

    #[test]
    fn seal_open_round_trip_every_suite() {
        let master = [0x42u8; 48];
        let (cr, sr) = ([1u8; 32], [2u8; 32]);
        for id in [
            0x1301, 0x1302, 0x1303, 0xC02F, 0xC030, 0x009C, 0xCCA8, 0xCCA9,
        ] {
            let s = suite(id);
            let key = match s.protocol {
                Protocol::Tls13 => {
                    RecordKey::tls13(&s, &Secret::new(&[7u8; 48][..s.hash.len()]).unwrap()).unwrap()
                }
                Protocol::Tls12 => RecordKey::tls12_pair(&s, &master, &cr, &sr).unwrap().1,
            };
            // Made with its bytes alone: expanded by its first record.
            assert!(!key.is_expanded());
            let mut key = key;
            for seq in [0u64, 1, 77] {
                // The second record with the key parked before it: expanded again, alike.
                if seq == 1 {
                    key.park();
                    assert!(!key.is_expanded());
                }
                let record = key.seal(seq, 23, b"hello", 3);
                assert_eq!(
                    record.len(),
                    5 + usize::from(u16::from_be_bytes([record[3], record[4]]))
                );
                let (header, mut payload) = split(&record);
                let o = key.open(seq, &header, &mut payload).expect("opens");
                assert_eq!(
                    (o.content_type, &payload[o.plaintext]),
                    (23, &b"hello"[..]),
                    "{}",
                    cipher_suite_name(id)
                );
                let (header, mut payload) = split(&record);
                assert!(key.open(seq + 1, &header, &mut payload).is_none());
            }
        }
    }

    #[test]
    fn tls12_key_block_sides_differ_and_explicit_nonce_is_seq() {
        let s = suite(0xC02F);
        let (c, srv) = RecordKey::tls12_pair(&s, &[9u8; 48], &[1; 32], &[2; 32]).unwrap();
        let record = c.seal(5, 23, b"x", 0);
        assert_eq!(c.explicit_nonce(&record[5..]), Some(5));
        let (header, mut payload) = split(&record);
        assert!(srv.open(5, &header, &mut payload).is_none());
    }

    #[test]
    fn prf_sha256_known_answer() {
        // The widely circulated P_SHA256 test vector (secret, "test label", seed → 100 bytes);
        // first bytes checked.
        let secret = hex("9b be 43 6b a9 40 f0 17 b1 76 52 84 9a 71 db 35");
        let seed = hex("a0 ba 9f 93 6c da 31 18 27 a6 f7 96 ff d5 19 8c");
        let mut out = [0u8; 100];
        tls12_prf(HashAlg::Sha256, &secret, b"test label", &seed, &mut out);
        assert_eq!(
            out[..16].to_vec(),
            hex("e3 f2 29 ba 72 7b e1 7b 8d 12 26 20 55 7c d4 53")
        );
    }

    #[test]
    fn names() {
        assert_eq!(cipher_suite_name(0x1301), "TLS_AES_128_GCM_SHA256");
        assert_eq!(
            cipher_suite_name(0xC013),
            "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA"
        );
        assert_eq!(cipher_suite_name(0xABCD), "0xABCD");
        assert!(SUITE_NAMES.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn key_update_changes_secret() {
        let s = Secret::new(&hex(RFC8448_CLIENT_AP_SECRET)).unwrap();
        let n = next_traffic_secret(HashAlg::Sha256, &s);
        assert_eq!(n.as_bytes().len(), 32);
        assert_ne!(n, s);
    }
}
