//! protocol §4 across processes: a claim held by a heartbeating process is never
//! displaced, and only after that process is killed does the lock probe prove it
//! dead so its claim can be expired early.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use steward_engine::claim::{self, Acquire};
use steward_engine::clock::{Clock, SystemClock};
use steward_engine::owner::{self, Liveness};
use steward_engine::store::Store;

use crate::support::{Env, helper_bin};

#[test]
fn r4_11_a_heartbeating_owner_is_never_displaced_and_is_proven_dead_only_after_sigkill() {
    let env = Env::new();
    std::fs::create_dir_all(&env.data).unwrap();
    let mut holder = Command::new(helper_bin())
        .args(["hold-claim", env.data.to_str().unwrap(), "ses_held", "300"])
        .env_remove("FAILPOINTS")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(holder.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let parts: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(parts.first(), Some(&"holding"), "{line}");
    let (owner_id, execution_id) = (parts[1].to_string(), parts[2].to_string());

    let clock = SystemClock::new();
    let mut store = Store::open(&env.db(), &clock).unwrap();
    let owners = owner::Owners::new(env.data.join("owners"));
    // Five leases' worth of attempts: the holder keeps renewing, nobody displaces it.
    let until = Instant::now() + Duration::from_millis(1_500);
    let mut attempts = 0;
    while Instant::now() < until {
        let now = clock.now_ms();
        let result = store
            .write(|tx| claim::acquire(tx, "ses_held", "own_test", now, 300))
            .unwrap();
        assert!(
            matches!(&result, Acquire::Busy(row) if row.id == execution_id),
            "{result:?}"
        );
        let row = owner::get(store.conn(), &owner_id).unwrap().unwrap();
        assert_eq!(owner::probe(&owners, &row), Liveness::Alive);
        assert_eq!(
            store
                .write(|tx| owner::expire_claims_of_dead(tx, "own_test", now))
                .unwrap(),
            0
        );
        attempts += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(attempts >= 10);

    holder.kill().unwrap(); // SIGKILL
    holder.wait().unwrap();
    let row = owner::get(store.conn(), &owner_id).unwrap().unwrap();
    assert_eq!(owner::probe(&owners, &row), Liveness::Dead);
    let now = clock.now_ms();
    let expired = store
        .write(|tx| owner::expire_claims_of_dead(tx, &owner_id, now))
        .unwrap();
    assert_eq!(expired, 1);
    let result = store
        .write(|tx| claim::acquire(tx, "ses_held", "own_test", now, 300))
        .unwrap();
    assert!(
        matches!(&result, Acquire::Expired(row) if row.id == execution_id),
        "{result:?}"
    );
}
