//! Plan progress: a plan the agent gives merged with the human's hand edits (an item the
//! human touched stays as they left it), the item a step works on, what a finish concludes,
//! and the plan as the agent is shown it.

use crate::agent::{ItemStatus, PlanEntry};
use crate::state::{next_number, PlanItem, PlanStatus};

/// The state's word for an agent's status.
pub(super) fn status(s: ItemStatus) -> PlanStatus {
    match s {
        ItemStatus::Pending => PlanStatus::Pending,
        ItemStatus::Active => PlanStatus::Active,
        ItemStatus::Done => PlanStatus::Done,
        ItemStatus::Skipped => PlanStatus::Skipped,
    }
}

fn item_status(s: PlanStatus) -> ItemStatus {
    match s {
        PlanStatus::Pending => ItemStatus::Pending,
        PlanStatus::Active => ItemStatus::Active,
        PlanStatus::Done => ItemStatus::Done,
        PlanStatus::Skipped => ItemStatus::Skipped,
    }
}

/// The plan as the agent is shown it.
pub(super) fn entries(plan: &[PlanItem]) -> Vec<PlanEntry> {
    plan.iter()
        .map(|p| PlanEntry {
            text: p.text.clone(),
            status: Some(item_status(p.status)),
            priority: p.priority.clone(),
        })
        .collect()
}

/// Whether a plan the agent gives reports progress (any item with a status).
pub(super) fn reports_progress(given: &[PlanEntry]) -> bool {
    given.iter().any(|e| e.status.is_some())
}

/// The plan after the agent gave `given` in place of `current`. An item it repeats (same
/// text) keeps its id, and its status when the agent gives none; an item it rewords keeps
/// the id of the item at its place. An item the human edited by hand stays exactly as it
/// is, where it was: it takes the place of the agent's item of the same text, else of the
/// agent's new item at its place (the agent's wording of what the human reworded), else it
/// is put back at its place.
pub(super) fn merge(current: &[PlanItem], given: &[PlanEntry]) -> Vec<PlanItem> {
    let mut used = vec![false; current.len()];
    let mut out: Vec<PlanItem> = Vec::with_capacity(given.len());
    for e in given {
        let same = current
            .iter()
            .enumerate()
            .position(|(i, c)| !used[i] && c.text == e.text);
        match same {
            Some(i) => {
                used[i] = true;
                let old = &current[i];
                if old.edited_by_human {
                    out.push(old.clone());
                    continue;
                }
                out.push(PlanItem {
                    status: e.status.map_or(old.status, status),
                    priority: e.priority.clone().or_else(|| old.priority.clone()),
                    ..old.clone()
                });
            }
            None => out.push(PlanItem {
                priority: e.priority.clone(),
                ..PlanItem::new(e.text.clone(), e.status.map_or(PlanStatus::Pending, status))
            }),
        }
    }
    for (i, old) in current.iter().enumerate() {
        if used[i] || !old.edited_by_human {
            continue;
        }
        used[i] = true;
        match out.get_mut(i) {
            Some(new) if new.id.is_empty() => *new = old.clone(),
            _ => out.insert(i.min(out.len()), old.clone()),
        }
    }
    // An item the agent reworded (Claude Code names the item in progress by its "active
    // form") is the one at the same place: it keeps its id.
    for (i, new) in out.iter_mut().enumerate() {
        match current.get(i) {
            Some(old) if new.id.is_empty() && !used[i] => {
                used[i] = true;
                new.id = old.id.clone();
            }
            _ => {}
        }
    }
    let mut next = next_number(current.iter().map(|p| p.id.as_str()), 'p');
    for item in &mut out {
        if item.id.is_empty() {
            item.id = format!("p{next}");
            next += 1;
        }
    }
    out
}

/// The index of the item `name` names: its id, else its text.
pub(super) fn find(plan: &[PlanItem], name: &str) -> Option<usize> {
    plan.iter()
        .position(|p| p.id == name)
        .or_else(|| plan.iter().position(|p| p.text == name))
}

/// The agent starts item `i`: it becomes active, and the item it had active before is done.
/// Items the human edited are left as they are.
pub(super) fn start(plan: &mut [PlanItem], i: usize) {
    for (j, p) in plan.iter_mut().enumerate() {
        if p.edited_by_human {
            continue;
        }
        if j == i {
            p.status = PlanStatus::Active;
        } else if p.status == PlanStatus::Active {
            p.status = PlanStatus::Done;
        }
    }
}

/// The agent finished: the item it worked on is done; when it never reported progress,
/// every item not skipped is taken as done. Items the human edited are left as they are.
pub(super) fn finish(plan: &mut [PlanItem], progress: bool) {
    for p in plan.iter_mut().filter(|p| !p.edited_by_human) {
        let done = if progress {
            p.status == PlanStatus::Active
        } else {
            p.status != PlanStatus::Skipped
        };
        if done {
            p.status = PlanStatus::Done;
        }
    }
}

/// What the agent is told the plan now is: one line per item, and which the human edited.
pub(super) fn describe(plan: &[PlanItem]) -> String {
    let lines: Vec<String> = plan
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let by = if p.edited_by_human {
                " (edited by the human: kept as they wrote it)"
            } else {
                ""
            };
            format!(
                "{}. [{}] {}{by}",
                i + 1,
                item_status(p.status).as_str(),
                p.text
            )
        })
        .collect();
    format!("plan set ({} items):\n{}", plan.len(), lines.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn item(id: &str, text: &str, status: PlanStatus, human: bool) -> PlanItem {
        PlanItem {
            id: id.into(),
            edited_by_human: human,
            ..PlanItem::new(text, status)
        }
    }

    fn given(text: &str, s: Option<ItemStatus>) -> PlanEntry {
        PlanEntry {
            status: s,
            ..PlanEntry::text(text)
        }
    }

    #[test]
    fn a_repeated_item_keeps_its_id_and_status_and_new_ones_get_fresh_ids() {
        let current = vec![
            item("p1", "read", PlanStatus::Done, false),
            item("p2", "fix", PlanStatus::Active, false),
        ];
        let out = merge(
            &current,
            &[
                given("read", None),
                given("fix", Some(ItemStatus::Done)),
                given("test", None),
            ],
        );
        let got: Vec<(&str, &str, PlanStatus)> = out
            .iter()
            .map(|p| (p.id.as_str(), p.text.as_str(), p.status))
            .collect();
        assert_eq!(
            got,
            [
                ("p1", "read", PlanStatus::Done),
                ("p2", "fix", PlanStatus::Done),
                ("p3", "test", PlanStatus::Pending)
            ]
        );
    }

    #[test]
    fn an_item_reworded_in_place_keeps_its_id() {
        let current = vec![
            item("p1", "Write hello.txt", PlanStatus::Pending, false),
            item("p2", "Check it", PlanStatus::Pending, false),
        ];
        let out = merge(
            &current,
            &[
                given("Writing hello.txt", Some(ItemStatus::Active)),
                given("Check it", Some(ItemStatus::Pending)),
                given("Ship it", None),
            ],
        );
        let got: Vec<(&str, &str, PlanStatus)> = out
            .iter()
            .map(|p| (p.id.as_str(), p.text.as_str(), p.status))
            .collect();
        assert_eq!(
            got,
            [
                ("p1", "Writing hello.txt", PlanStatus::Active),
                ("p2", "Check it", PlanStatus::Pending),
                ("p3", "Ship it", PlanStatus::Pending)
            ]
        );
    }

    #[test]
    fn the_humans_items_stay_as_they_left_them() {
        let current = vec![
            item("p1", "read", PlanStatus::Done, false),
            item("p2", "fix it the right way", PlanStatus::Skipped, true),
            item("p3", "test", PlanStatus::Pending, false),
            item("p4", "ask me first", PlanStatus::Pending, true),
        ];
        // The agent rewords nothing of the human's but reorders and marks everything done.
        let out = merge(
            &current,
            &[
                given("read", Some(ItemStatus::Done)),
                given("fix", Some(ItemStatus::Done)),
                given("test", Some(ItemStatus::Active)),
            ],
        );
        let got: Vec<(&str, &str, PlanStatus)> = out
            .iter()
            .map(|p| (p.id.as_str(), p.text.as_str(), p.status))
            .collect();
        assert_eq!(
            got,
            [
                ("p1", "read", PlanStatus::Done),
                ("p2", "fix it the right way", PlanStatus::Skipped),
                ("p3", "test", PlanStatus::Active),
                ("p4", "ask me first", PlanStatus::Pending),
            ]
        );
    }

    #[test]
    fn starting_an_item_finishes_the_one_before_and_the_finish_closes_the_plan() {
        let mut plan = vec![
            item("p1", "a", PlanStatus::Active, false),
            item("p2", "b", PlanStatus::Pending, false),
            item("p3", "c", PlanStatus::Active, true),
            item("p4", "d", PlanStatus::Pending, false),
        ];
        let b = find(&plan, "b").unwrap();
        start(&mut plan, b);
        let st: Vec<PlanStatus> = plan.iter().map(|p| p.status).collect();
        use PlanStatus::*;
        assert_eq!(st, [Done, Active, Active, Pending]);
        assert_eq!(find(&plan, "p4"), Some(3));
        assert_eq!(find(&plan, "e"), None);
        let mut reported = plan.clone();
        finish(&mut reported, true);
        let st: Vec<PlanStatus> = reported.iter().map(|p| p.status).collect();
        assert_eq!(st, [Done, Done, Active, Pending], "pending stays pending");
        finish(&mut plan, false);
        let st: Vec<PlanStatus> = plan.iter().map(|p| p.status).collect();
        assert_eq!(
            st,
            [Done, Done, Active, Done],
            "no progress: all taken as done"
        );
        assert!(describe(&plan).contains("3. [active] c (edited by the human"));
    }

    fn status_strategy() -> impl Strategy<Value = PlanStatus> {
        prop_oneof![
            Just(PlanStatus::Pending),
            Just(PlanStatus::Active),
            Just(PlanStatus::Done),
            Just(PlanStatus::Skipped)
        ]
    }

    proptest! {
        /// Whatever the agent gives, every item the human edited comes out exactly as it
        /// was, ids stay unique, and every text the agent gave is in the plan.
        #[test]
        fn human_items_survive_any_agent_plan(
            current in prop::collection::vec(("[a-d]", status_strategy(), any::<bool>()), 0..6),
            given_items in prop::collection::vec(("[a-f]", prop::option::of(0u8..4)), 0..6),
        ) {
            let current: Vec<PlanItem> = current
                .into_iter()
                .enumerate()
                .map(|(i, (t, s, h))| item(&format!("p{}", i + 1), &t, s, h))
                .collect();
            let given_items: Vec<PlanEntry> = given_items
                .into_iter()
                .map(|(t, s)| given(&t, s.map(|s| [ItemStatus::Pending, ItemStatus::Active, ItemStatus::Done, ItemStatus::Skipped][s as usize])))
                .collect();
            let out = merge(&current, &given_items);
            for h in current.iter().filter(|p| p.edited_by_human) {
                prop_assert!(out.contains(h), "{h:?} lost from {out:?}");
            }
            let mut ids: Vec<&str> = out.iter().map(|p| p.id.as_str()).collect();
            ids.sort_unstable();
            let n = ids.len();
            ids.dedup();
            prop_assert_eq!(ids.len(), n);
            for e in &given_items {
                prop_assert!(out.iter().any(|p| p.text == e.text || p.edited_by_human));
            }
        }
    }
}
