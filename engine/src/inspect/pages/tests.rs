use pretty_assertions::assert_eq;

use super::*;
use crate::clock::ManualClock;
use crate::store::Store;
use crate::testing::{Stage, interrupted};

const T0: i64 = 1_700_000_000_000;
const LATER: i64 = T0 + 60_000;

fn store() -> Store {
    Store::open_in_memory(&ManualClock::new(T0)).unwrap()
}

fn params() -> crate::recovery::Params {
    crate::recovery::Params {
        owner_id: "own_r".into(),
        owners: Owners::new("/nonexistent/owners"),
        lease_ms: 30_000,
        slack_ms: crate::recovery::CLOCK_SLACK_MS,
        killed: Default::default(),
    }
}

/// Every page of `fetch`, following the keys, until a short page.
fn all_pages<T>(
    limit: usize,
    mut fetch: impl FnMut(&PageRequest) -> Vec<T>,
    key: impl Fn(&T) -> String,
) -> Vec<Vec<T>> {
    let mut pages = Vec::new();
    let mut request = PageRequest::first(limit);
    loop {
        let page = fetch(&request);
        let short = page.len() < limit;
        request.after = page.last().map(&key);
        pages.push(page);
        if short {
            return pages;
        }
    }
}

#[test]
fn claims_are_paged_by_key_in_either_order_without_gaps_or_repeats() {
    let mut store = store();
    let mut ids: Vec<String> = (0..23)
        .map(|i| {
            interrupted(
                &mut store,
                &format!("ses_{:02}", 22 - i),
                Stage::Promoted,
                T0 + i,
            )
        })
        .collect();
    ids.sort();
    let pages = all_pages(
        10,
        |r| claims(store.conn(), ClaimOrder::Created, r, 0).unwrap(),
        |c| claim_key(c, ClaimOrder::Created),
    );
    assert_eq!(
        pages.iter().map(Vec::len).collect::<Vec<_>>(),
        vec![10, 10, 3]
    );
    let seen: Vec<String> = pages.concat().into_iter().map(|c| c.id).collect();
    assert_eq!(seen, ids);
    let by_session: Vec<String> = all_pages(
        7,
        |r| claims(store.conn(), ClaimOrder::Session, r, 0).unwrap(),
        |c| claim_key(c, ClaimOrder::Session),
    )
    .concat()
    .into_iter()
    .map(|c| c.session_id)
    .collect();
    let expected: Vec<String> = (0..23).map(|i| format!("ses_{i:02}")).collect();
    assert_eq!(by_session, expected);
}

#[test]
fn a_filter_narrows_every_page() {
    let mut store = store();
    for i in 0..12 {
        interrupted(&mut store, &format!("ses_{i:02}"), Stage::Promoted, T0 + i);
    }
    let request = PageRequest {
        filter: Some("ses_1".into()),
        ..PageRequest::first(50)
    };
    let found: Vec<String> = claims(store.conn(), ClaimOrder::Session, &request, 0)
        .unwrap()
        .into_iter()
        .map(|c| c.session_id)
        .collect();
    assert_eq!(found, vec!["ses_10", "ses_11"]);
    let found: Vec<String> = sessions(store.conn(), T0, &request)
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(found, vec!["ses_11", "ses_10"]);
    // `_` is matched literally, not as a wildcard.
    let underscore = PageRequest {
        filter: Some("s_1".into()),
        ..PageRequest::first(50)
    };
    assert_eq!(sessions(store.conn(), T0, &underscore).unwrap().len(), 2);
    let none = PageRequest {
        filter: Some("ses%1".into()),
        ..PageRequest::first(50)
    };
    assert_eq!(sessions(store.conn(), T0, &none).unwrap().len(), 0);
}

#[test]
fn r5_12_session_states_and_counts_follow_claims_recoveries_and_wakes() {
    let mut store = store();
    interrupted(&mut store, "ses_a_recovered", Stage::Tools, T0);
    interrupted(&mut store, "ses_b_parked", Stage::Tools, T0);
    let running = interrupted(&mut store, "ses_c_running", Stage::Tools, LATER - 1_000);
    crate::recovery::pass(store.conn_mut(), &params(), LATER).unwrap();
    store
        .conn()
        .execute_batch(
            "UPDATE session_recovery SET wake_pending = 0, recovery_error = 'parked'
             WHERE session_id = 'ses_b_parked';",
        )
        .unwrap();
    store
        .write(|tx| {
            crate::store::sessions::create(tx, "idle", "/", T0).map(drop)?;
            Ok(())
        })
        .unwrap();
    let states: BTreeMap<String, SessionState> =
        sessions(store.conn(), LATER, &PageRequest::first(50))
            .unwrap()
            .into_iter()
            .map(|s| (s.id, s.state))
            .collect();
    assert_eq!(states["ses_a_recovered"], SessionState::Recovered);
    assert_eq!(states["ses_b_parked"], SessionState::Quarantined);
    assert_eq!(states["ses_c_running"], SessionState::Running);
    assert_eq!(
        states
            .values()
            .filter(|s| **s == SessionState::Idle)
            .count(),
        1
    );
    assert_eq!(
        counts(store.conn()).unwrap(),
        Counts {
            sessions: 4,
            claims: 1,
            quarantine: 1,
            wakes: 1,
            recoveries: 2,
            owners: 0,
        }
    );
    let waking: Vec<(&str, String)> = wakes(store.conn(), &PageRequest::first(10))
        .unwrap()
        .into_iter()
        .map(|w| (w.kind, w.session_id))
        .collect();
    assert_eq!(waking, vec![("recovery", "ses_a_recovered".to_string())]);
    let quarantined = quarantine(store.conn(), &PageRequest::first(10)).unwrap();
    assert_eq!(quarantined.len(), 1);
    assert_eq!(
        (quarantined[0].kind, quarantined[0].reason.as_str()),
        ("recovery", "parked")
    );
    let lines = claim_lines(
        store.conn(),
        &Owners::new("/nonexistent"),
        &claims(
            store.conn(),
            ClaimOrder::Created,
            &PageRequest::first(10),
            0,
        )
        .unwrap(),
        LATER,
    )
    .unwrap();
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0].claim.execution_id, running);
    assert_eq!(lines[0].claim.state, ClaimState::Live);
    assert_eq!(lines[0].owner, Liveness::Unknown);
}

#[test]
fn every_page_query_is_served_by_an_index() {
    let store = store();
    let plans = [
        "SELECT id FROM session WHERE id < 'x' ORDER BY id DESC LIMIT 50",
        "SELECT id FROM session_execution WHERE id > '' ORDER BY id LIMIT 50",
        "SELECT id FROM session_execution WHERE session_id > '' ORDER BY session_id LIMIT 50",
        "SELECT execution_id FROM session_recovery WHERE execution_id > '' ORDER BY execution_id LIMIT 50",
        "SELECT count(*) FROM session_recovery WHERE session_id = 'x'",
        "SELECT 1 FROM session_input WHERE session_id = 'x' AND promoted_seq IS NULL AND wake_pending = 1",
        "SELECT id FROM session_message WHERE session_id = 'x' AND seq < 5 ORDER BY seq DESC LIMIT 50",
    ];
    for sql in plans {
        let mut stmt = store
            .conn()
            .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
            .unwrap();
        let steps: Vec<String> = stmt
            .query_map([], |r| r.get(3))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert!(
            steps
                .iter()
                .all(|s| !s.starts_with("SCAN") || s.contains("INDEX")),
            "{sql}: {steps:?}"
        );
        assert!(
            steps.iter().all(|s| !s.contains("TEMP B-TREE")),
            "{sql} sorts: {steps:?}"
        );
    }
}

#[test]
fn paging_back_gives_the_page_before_in_the_tables_order() {
    let mut store = store();
    for i in 0..25 {
        interrupted(&mut store, &format!("ses_{i:02}"), Stage::Promoted, T0 + i);
    }
    let forward = all_pages(
        10,
        |r| sessions(store.conn(), T0, r).unwrap(),
        |s| s.id.clone(),
    );
    assert_eq!(
        forward.iter().map(Vec::len).collect::<Vec<_>>(),
        vec![10, 10, 5]
    );
    let back = PageRequest {
        before: Some(forward[2][0].id.clone()),
        ..PageRequest::first(10)
    };
    assert_eq!(sessions(store.conn(), T0, &back).unwrap(), forward[1]);
    let claims_forward = all_pages(
        10,
        |r| claims(store.conn(), ClaimOrder::Created, r, 0).unwrap(),
        |c| c.id.clone(),
    );
    let back = PageRequest {
        before: Some(claims_forward[1][0].id.clone()),
        ..PageRequest::first(10)
    };
    assert_eq!(
        claims(store.conn(), ClaimOrder::Created, &back, 0).unwrap(),
        claims_forward[0]
    );
}

#[test]
fn the_last_page_and_a_reversed_order_page_through_the_same_rows() {
    let mut store = store();
    for i in 0..25 {
        interrupted(&mut store, &format!("ses_{i:02}"), Stage::Promoted, T0 + i);
    }
    let newest_first: Vec<String> = all_pages(
        10,
        |r| sessions(store.conn(), T0, r).unwrap(),
        |s| s.id.clone(),
    )
    .concat()
    .into_iter()
    .map(|s| s.id)
    .collect();
    // The last page holds the last rows, in the table's order.
    let last: Vec<String> = sessions(store.conn(), T0, &PageRequest::last(10))
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(last, newest_first[15..].to_vec());
    // Reversed, every page follows the other order, and its last page is the
    // first page of the table's own order turned around.
    let reversed = |r: &PageRequest| PageRequest {
        reverse: true,
        ..r.clone()
    };
    let oldest_first: Vec<String> = all_pages(
        10,
        |r| sessions(store.conn(), T0, &reversed(r)).unwrap(),
        |s| s.id.clone(),
    )
    .concat()
    .into_iter()
    .map(|s| s.id)
    .collect();
    let mut expected = newest_first.clone();
    expected.reverse();
    assert_eq!(oldest_first, expected);
    let claims_last: Vec<String> = claims(
        store.conn(),
        ClaimOrder::Created,
        &reversed(&PageRequest::last(4)),
        0,
    )
    .unwrap()
    .into_iter()
    .map(|c| c.session_id)
    .collect();
    assert_eq!(claims_last, vec!["ses_03", "ses_02", "ses_01", "ses_00"]);
    assert!(PageRequest::first(3).is_first() && !PageRequest::last(3).is_first());
}

/// Protocol §3.6: the session list is most recently active first, paged by
/// (activity, id) without gaps or repeats, archived sessions only when asked for.
#[test]
fn r3_6_recent_sessions_page_by_activity_and_leave_archived_ones_out() {
    let mut store = store();
    // Created in id order, then made active in another order.
    let ids: Vec<String> = (0..7)
        .map(|i| {
            store
                .write(|tx| crate::store::sessions::create(tx, &format!("s{i}"), "/w", T0 + i))
                .unwrap()
                .id
        })
        .collect();
    for (k, i) in [3usize, 0, 5].iter().enumerate() {
        store
            .write(|tx| {
                crate::store::sessions::admit(
                    tx,
                    &ids[*i],
                    "p",
                    crate::events::Delivery::Admit,
                    T0 + 100 + k as i64,
                )
                .map(drop)
            })
            .unwrap();
    }
    store
        .write(|tx| crate::housekeeping::archive(tx, &ids[6], true, T0 + 50).map(drop))
        .unwrap();
    let pages = all_pages(
        2,
        |r| recent_sessions(store.conn(), T0, r, false).unwrap(),
        |s| session_key(s.time_updated, &s.id),
    );
    let order: Vec<String> = pages.concat().into_iter().map(|s| s.title).collect();
    assert_eq!(order, ["s5", "s0", "s3", "s4", "s2", "s1"]);
    let with_archived: Vec<String> =
        recent_sessions(store.conn(), T0, &PageRequest::first(3), true)
            .unwrap()
            .into_iter()
            .map(|s| format!("{}{}", s.title, if s.archived { " (archived)" } else { "" }))
            .collect();
    assert_eq!(with_archived, ["s5", "s0", "s3"]);
    // Back from the last page, and the last page itself.
    let last = recent_sessions(store.conn(), T0, &PageRequest::last(2), false).unwrap();
    assert_eq!(
        last.iter().map(|s| &s.title).collect::<Vec<_>>(),
        ["s2", "s1"]
    );
    let back = PageRequest {
        before: Some(session_key(last[0].time_updated, &last[0].id)),
        ..PageRequest::first(2)
    };
    let back = recent_sessions(store.conn(), T0, &back, false).unwrap();
    assert_eq!(
        back.iter().map(|s| &s.title).collect::<Vec<_>>(),
        ["s3", "s4"]
    );
    let filter = PageRequest {
        filter: Some("s6".into()),
        ..PageRequest::first(10)
    };
    assert_eq!(count_sessions(store.conn(), &filter, false).unwrap(), 0);
    assert_eq!(count_sessions(store.conn(), &filter, true).unwrap(), 1);
    assert_eq!(
        count_sessions(store.conn(), &PageRequest::default(), false).unwrap(),
        6
    );
}

/// The claims filter matches what the row shows (phase, state), not only ids, and
/// the tabs' counts follow the filter.
#[test]
fn a_claims_filter_matches_what_the_row_shows_and_counts_follow_it() {
    let mut store = store();
    for i in 0..3 {
        interrupted(&mut store, &format!("ses_{i:02}"), Stage::Promoted, T0 + i);
    }
    store
        .conn()
        .execute(
            "UPDATE session_execution SET recovery_error = 'bad row' WHERE session_id = 'ses_01'",
            [],
        )
        .unwrap();
    let request = |f: &str| PageRequest {
        filter: Some(f.into()),
        ..PageRequest::first(50)
    };
    let found = |f: &str| -> Vec<String> {
        claims(store.conn(), ClaimOrder::Session, &request(f), T0)
            .unwrap()
            .into_iter()
            .map(|c| c.session_id)
            .collect()
    };
    assert_eq!(found("quarantined"), ["ses_01"]);
    assert_eq!(found("bad row"), ["ses_01"]);
    assert_eq!(found("live"), ["ses_00", "ses_02"]);
    let counts = filtered_counts(store.conn(), &request("quarantined"), T0).unwrap();
    assert_eq!((counts.claims, counts.quarantine), (1, 0));
    let counts = filtered_counts(store.conn(), &request("ses_0"), T0).unwrap();
    assert_eq!((counts.claims, counts.sessions), (3, 3));
}

#[test]
fn sessions_by_recent_activity_page_without_gaps_or_repeats_and_a_new_event_moves_one_first() {
    let mut store = store();
    // Created in id order; sessions 3 and 7 share one time, so the id decides.
    let times = [5, 1, 9, 4, 4, 8, 2, 4, 6, 3];
    let ids: Vec<String> = times
        .iter()
        .enumerate()
        .map(|(i, t)| {
            store
                .write(|tx| {
                    let s =
                        crate::store::sessions::create(tx, &format!("s{i}"), "/w", T0 + i as i64)?;
                    tx.execute(
                        "UPDATE session SET time_updated = ?2 WHERE id = ?1",
                        rusqlite::params![s.id, T0 + 100 * t],
                    )?;
                    Ok(s.id)
                })
                .unwrap()
        })
        .collect();
    let mut expected: Vec<(i64, String)> = times.iter().copied().zip(ids.clone()).collect();
    expected.sort_by(|a, b| b.cmp(a));
    let expected: Vec<String> = expected.into_iter().map(|(_, id)| id).collect();
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let request = PageRequest {
            after: after.clone(),
            ..PageRequest::first(3)
        };
        let page = recent_sessions(store.conn(), LATER, &request, false).unwrap();
        after = page.last().map(|s| session_key(s.time_updated, &s.id));
        let short = page.len() < 3;
        seen.extend(page.into_iter().map(|s| s.id));
        if short {
            break;
        }
    }
    assert_eq!(seen, expected);
    // The filter narrows by title.
    let request = PageRequest {
        filter: Some("s7".into()),
        ..PageRequest::first(10)
    };
    let only = recent_sessions(store.conn(), LATER, &request, false).unwrap();
    assert_eq!(only.len(), 1);
    assert_eq!(only[0].id, ids[7]);
    // A prompt admitted to the least recently active session moves it first.
    store
        .write(|tx| {
            crate::store::sessions::admit(
                tx,
                &ids[1],
                "again",
                crate::events::Delivery::Queue,
                LATER,
            )
            .map(drop)
        })
        .unwrap();
    let first = recent_sessions(store.conn(), LATER, &PageRequest::first(1), false).unwrap();
    assert_eq!(first[0].id, ids[1]);
}
