//! Time and ratio of each coding and level on one file, to choose the
//! defaults of `compress_static_levels` and `compress_dynamic_levels`:
//!
//! ```sh
//! cargo run --release -p hayate-compress --example levels -- FILE
//! ```
//!
//! Prints one line per coding and level: output size, ratio and the median
//! CPU time of a few runs (this thread's clock).

use std::time::Duration;

use hayate_compress::encode::{compress, decompress};
use hayate_core::Coding;

fn cpu() -> Duration {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(Duration::from)
        .unwrap_or_default()
}

fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: levels FILE");
        std::process::exit(2);
    };
    let data = std::fs::read(&path).unwrap_or_else(|e| {
        eprintln!("{path}: {e}");
        std::process::exit(1);
    });
    println!("{path}: {} bytes", data.len());
    println!("coding level      bytes  ratio   ms (median of runs)");
    let plan: [(Coding, &[i32]); 3] = [
        (Coding::Br, &[1, 2, 3, 4, 5, 6, 9, 10, 11]),
        (Coding::Zstd, &[1, 3, 6, 12, 15, 19, 22]),
        (Coding::Gzip, &[1, 4, 5, 6, 9]),
    ];
    for (coding, levels) in plan {
        for &level in levels {
            let runs = if level >= 10 { 3 } else { 7 };
            let mut times = Vec::new();
            let mut out = Vec::new();
            for _ in 0..runs {
                let start = cpu();
                out = compress(coding, level, &data).expect("compress");
                times.push(cpu() - start);
            }
            assert_eq!(decompress(coding, &out).expect("decode"), data);
            times.sort();
            println!(
                "{:<6} {level:>5} {:>10} {:>6.3} {:>8.2}",
                coding.as_str(),
                out.len(),
                out.len() as f64 / data.len() as f64,
                times[runs / 2].as_secs_f64() * 1e3
            );
        }
    }
}
