//! Arbitrary bytes as a hand edit of the task state file: parsed and validated against a real
//! state, refused with a message or taken — never a panic, and a taken edit changes only the
//! plan and the constraints.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rein::state::{check_hand_edit, TaskState};

const CURRENT: &str = r#"{"version": 3, "task": {"id": "t", "goal": "g", "base": null, "agent": null,
 "started": "2026-01-01T00:00:00Z"}, "status": "running",
 "control": {"holder": "agent", "since": "2026-01-01T00:00:00Z", "reason": "r"},
 "plan": [{"id": "p1", "text": "a", "status": "done"}],
 "constraints": [{"id": "c1", "text": "x", "source": "command", "status": "delivered", "deliveredAtStep": 2}]}"#;

fuzz_target!(|data: &[u8]| {
    let current: TaskState = serde_json::from_str(CURRENT).expect("the fixture parses");
    if let Ok((taken, _)) = check_hand_edit(&current, data) {
        let mut same = taken.clone();
        same.plan = current.plan.clone();
        same.constraints = current.constraints.clone();
        assert_eq!(same, current, "only plan and constraints may change");
    }
    let _ = serde_json::from_slice::<TaskState>(data);
});
