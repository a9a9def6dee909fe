//! Arbitrary bytes on the server's stdin: the framing reader must answer or skip everything,
//! never panic, and always end with `Closed`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rein::lsp::transport::{read_loop, Incoming};

fuzz_target!(|data: &[u8]| {
    let (tx, rx) = crossbeam_channel::unbounded();
    read_loop(std::io::BufReader::new(data), tx);
    let all: Vec<Incoming> = rx.into_iter().collect();
    assert!(matches!(all.last(), Some(Incoming::Closed)));
});
