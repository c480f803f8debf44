//! The floor under TLS decryption: `ring`'s AEAD alone, record by record, as the TLS layer
//! calls it (the record copied into a buffer of its own, then opened in place).
//!
//! Input: one record sealed at start-up per size, under AES-128-GCM, AES-256-GCM and
//! ChaCha20-Poly1305. Output: criterion's report, throughput in plaintext bytes per second.
//! Sizes: 64 B, 330 B (the mean application_data record of the `gen-capture` workload, one
//! per server-sent event), 1 KiB, 4 KiB and 16 KiB (a full record). The fixed cost per
//! record (nonce, AAD, tag) dominates small records, so the per-byte floor of a capture
//! depends on its record sizes more than on its byte count.
//! `cargo bench --bench aead`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ring::aead::{
    AES_128_GCM, AES_256_GCM, Aad, CHACHA20_POLY1305, LessSafeKey, Nonce, UnboundKey,
};

const SIZES: [usize; 5] = [64, 330, 1024, 4096, 16384];
const HEADER: [u8; 5] = [23, 3, 3, 0, 0];

fn aead(c: &mut Criterion) {
    let mut g = c.benchmark_group("aead_open");
    g.measurement_time(Duration::from_secs(2));
    g.warm_up_time(Duration::from_millis(500));
    for (name, alg, key_len) in [
        ("aes128gcm", &AES_128_GCM, 16),
        ("aes256gcm", &AES_256_GCM, 32),
        ("chacha20poly1305", &CHACHA20_POLY1305, 32),
    ] {
        let Ok(unbound) = UnboundKey::new(alg, &vec![7u8; key_len]) else {
            panic!("{name}: a key of its own length");
        };
        let key = LessSafeKey::new(unbound);
        for size in SIZES {
            let mut sealed = vec![0x41u8; size];
            let nonce = Nonce::assume_unique_for_key([1; 12]);
            let Ok(tag) = key.seal_in_place_separate_tag(nonce, Aad::from(HEADER), &mut sealed)
            else {
                panic!("{name}: sealing {size} bytes");
            };
            sealed.extend_from_slice(tag.as_ref());
            let mut record = Vec::with_capacity(sealed.len());
            g.throughput(Throughput::Bytes(size as u64));
            g.bench_function(format!("{name}/{size}"), |b| {
                b.iter(|| {
                    record.clear();
                    record.extend_from_slice(black_box(&sealed));
                    let nonce = Nonce::assume_unique_for_key([1; 12]);
                    let opened = key.open_in_place(nonce, Aad::from(HEADER), &mut record);
                    black_box(opened.map(|p| p.len()).unwrap_or(0))
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, aead);
criterion_main!(benches);
