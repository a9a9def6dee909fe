//! Arbitrary text through the `rein:` comment scanner: no panic, and every result points at a
//! real, non-empty slice of its line.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    for c in rein::steer::scan(&text) {
        assert!(c.start < c.end);
        assert!(!c.text.trim().is_empty());
    }
});
