//! How long one read waits for memory, by how much memory is read: the machine property that
//! bounds the analyzer on captures with thousands of connections open at once, where each
//! packet's first touch of its connection's state is a read of memory not used for a while.
//!
//! Input: none. Output: for working sets from 16 KiB to 512 MiB, the nanoseconds of one read
//! that depends on the one before it (a walk through 64-byte lines in a random cyclic order,
//! so that neither the prefetchers nor out-of-order execution hide the wait), and the ratio to
//! the smallest; then the same walk on two threads at once, each through a working set of its
//! own of that size (the slower thread's figure): where the two cores share their last level
//! of cache, two sets that each fit alone evict each other, as the two workers of `-j2` do.
//! `cargo bench --bench latency`. Alone on the machine it runs in about 40 seconds once built.

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
    walk(&cycle(bytes, rng))
}

/// The lines of `bytes` linked in one random cycle: each line's first slot holds where the
/// next line of the cycle starts.
fn cycle(bytes: usize, rng: &mut Rng) -> Vec<usize> {
    let lines = bytes / LINE;
    let mut order: Vec<usize> = (0..lines).collect();
    for i in (1..lines).rev() {
        let j = (rng.next() % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    let mut next = vec![0usize; lines * SLOTS];
    for (k, &line) in order.iter().enumerate() {
        next[line * SLOTS] = order[(k + 1) % lines] * SLOTS;
    }
    next
}

/// Nanoseconds per read along the cycle `next`, once it has been walked through (or a million
/// lines of it) to warm the caches.
fn walk(next: &[usize]) -> f64 {
    let lines = next.len() / SLOTS;
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

/// Nanoseconds per read on two threads walking at the same time, each its own cycle of
/// `bytes`: the slower thread's. Both cycles are built before either thread starts, and the
/// threads start their timed walks together.
fn ns_per_read_two_at_once(bytes: usize, rng: &mut Rng) -> f64 {
    let cycles = [cycle(bytes, rng), cycle(bytes, rng)];
    let start = std::sync::Barrier::new(2);
    std::thread::scope(|s| {
        let walks: Vec<_> = cycles
            .iter()
            .map(|next| {
                let start = &start;
                s.spawn(move || {
                    start.wait();
                    walk(next)
                })
            })
            .collect();
        walks
            .into_iter()
            .map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .fold(0.0, f64::max)
    })
}

fn main() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    println!(
        "| working set | ns per dependent read | × the 16 KiB read | two threads at once, \
         a set each: ns |"
    );
    println!("|---|---|---|---|");
    let mut first = None;
    for kib in [
        16, 256, 512, 1024, 2048, 3072, 4096, 6144, 8192, 16384, 32768, 131_072, 524_288,
    ] {
        let ns = ns_per_read(kib << 10, &mut rng);
        let base = *first.get_or_insert(ns);
        // Two sets of 512 MiB would be 1 GiB more; the curve is flat long before.
        let two = if kib <= 131_072 {
            format!("{:.1}", ns_per_read_two_at_once(kib << 10, &mut rng))
        } else {
            "".to_string()
        };
        let size = if kib >= 1024 {
            format!("{} MiB", kib / 1024)
        } else {
            format!("{kib} KiB")
        };
        println!("| {size} | {ns:.1} | {:.0} | {two} |", ns / base);
    }
}
