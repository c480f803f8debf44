//! How long one read waits for memory, by how much memory is read: the machine property that
//! bounds the analyzer on captures with thousands of connections open at once, where each
//! packet's first touch of its connection's state is a read of memory not used for a while.
//!
//! Input: none. Output: for working sets from 16 KiB to 512 MiB, the nanoseconds of one read
//! that depends on the one before it (a walk through 64-byte lines in a random cyclic order,
//! so that neither the prefetchers nor out-of-order execution hide the wait), and the ratio to
//! the smallest. `cargo bench --bench latency`. Alone on the machine it runs in about 20 seconds
//! once built.

use std::hint::black_box;
use std::time::Instant;

/// Bytes of a cache line: one read per line.
const LINE: usize = 64;
/// `usize` slots per line.
const SLOTS: usize = LINE / std::mem::size_of::<usize>();
/// Dependent reads timed per working set.
const READS: usize = 20_000_000;

/// A small deterministic generator (xorshift64*): the same order on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// Nanoseconds per read when `bytes` of lines are walked in a random cycle.
fn ns_per_read(bytes: usize, rng: &mut Rng) -> f64 {
    let lines = bytes / LINE;
    let mut order: Vec<usize> = (0..lines).collect();
    for i in (1..lines).rev() {
        let j = (rng.next() % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    // Each line's first slot holds where the next line of the cycle starts.
    let mut next = vec![0usize; lines * SLOTS];
    for (k, &line) in order.iter().enumerate() {
        next[line * SLOTS] = order[(k + 1) % lines] * SLOTS;
    }
    let mut at = 0;
    for _ in 0..lines.min(1 << 20) {
        at = next[at];
    }
    let start = Instant::now();
    for _ in 0..READS {
        at = next[at];
    }
    let elapsed = start.elapsed();
    black_box(at);
    elapsed.as_secs_f64() * 1e9 / READS as f64
}

fn main() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    println!("| working set | ns per dependent read | × the 16 KiB read |");
    println!("|---|---|---|");
    let mut first = None;
    for kib in [
        16, 256, 1024, 2048, 3072, 8192, 16384, 32768, 131_072, 524_288,
    ] {
        let ns = ns_per_read(kib << 10, &mut rng);
        let base = *first.get_or_insert(ns);
        let size = if kib >= 1024 {
            format!("{} MiB", kib / 1024)
        } else {
            format!("{kib} KiB")
        };
        println!("| {size} | {ns:.1} | {:.0} |", ns / base);
    }
}
