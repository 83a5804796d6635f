//! Session ownership in the PostgreSQL store: a lease row per session
//! (owner, epoch, expiry). Two stores on one database stand for two
//! replicas; a lease is made to expire by the database's clock (as for a
//! paused replica that stopped renewing), never by waiting.

use crate::replicas_support;

use std::sync::Arc;
use std::time::Duration;

use replicas_support::{fresh_database, sql};
use toolsched::scheduler::BatchEvent;
use toolsched::store::{Begun, NewBatch, PostgresStore, Store, StoreError};

/// Leases long enough that no renewal happens during a test.
const NO_RENEWAL: Duration = Duration::from_secs(3600);

async fn replica(url: &str) -> Arc<PostgresStore<BatchEvent>> {
    PostgresStore::connect_with_lease(
        url,
        Default::default(),
        Arc::new(toolsched::api::WireCodec),
        NO_RENEWAL,
    )
    .await
    .unwrap()
}

fn batch(session: &str, id: &str) -> NewBatch {
    NewBatch {
        session_id: session.into(),
        batch_id: id.into(),
        request_id: None,
        digest: [0; 32],
        request: None,
    }
}

async fn lease(db: &tokio_postgres::Client, session: &str) -> (String, i64) {
    let row = db
        .query_one(
            "SELECT owner, epoch FROM toolsched_leases WHERE session_id = $1",
            &[&session],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

#[tokio::test]
async fn a_replica_whose_lease_passed_to_another_writes_nothing_more() {
    let url = fresh_database().await;
    let db = sql(&url).await;
    let (a, b) = (replica(&url).await, replica(&url).await);

    // A owns the session: epoch 1.
    let Begun::New(writer_a) = a.begin_batch(batch("s", "b1")).await.unwrap() else {
        panic!("a new batch");
    };
    assert_eq!(lease(&db, "s").await, (a.replica().to_string(), 1));
    // A's own next batch keeps its lease and epoch.
    let Begun::New(_second) = a.begin_batch(batch("s", "b1bis")).await.unwrap() else {
        panic!("a new batch");
    };
    assert_eq!(lease(&db, "s").await, (a.replica().to_string(), 1));

    // B cannot run the session while A's lease holds.
    let Err(refused) = b.begin_batch(batch("s", "b2")).await else {
        panic!("B must be refused");
    };
    match &refused {
        StoreError::OwnedElsewhere {
            session_id,
            owner,
            expires_in,
        } => {
            assert_eq!(session_id, "s");
            assert_eq!(owner, a.replica());
            assert!(*expires_in <= NO_RENEWAL && *expires_in > Duration::from_secs(3500));
        }
        other => panic!("not OwnedElsewhere: {other:?}"),
    }
    // A different session is B's to take.
    let Begun::New(_other) = b.begin_batch(batch("t", "t1")).await.unwrap() else {
        panic!("a new batch");
    };

    // A stops renewing (paused): its lease runs out; B takes it over.
    db.execute(
        "UPDATE toolsched_leases SET expires_at = now() - interval '1 second' WHERE session_id = 's'",
        &[],
    )
    .await
    .unwrap();
    let Begun::New(_writer_b) = b.begin_batch(batch("s", "b2")).await.unwrap() else {
        panic!("a new batch");
    };
    assert_eq!(lease(&db, "s").await, (b.replica().to_string(), 2));

    // A wakes up: a side-effecting call of its batch may not start...
    let lost = a.record_executing("s", "b1", "c1").await.unwrap_err();
    assert_eq!(
        lost,
        StoreError::LeaseLost {
            session_id: "s".into()
        }
    );
    assert_eq!(
        lost.to_string(),
        "this replica no longer owns session 's' (its lease passed to another replica)"
    );
    // ...and its batch's end is not written.
    writer_a.finish(BatchEvent::Started {
        batch_id: "b1".into(),
    });
    a.complete_batch("s", "b1", Vec::new());
    a.flush(Duration::from_secs(30)).await;
    let row = db
        .query_one(
            "SELECT completed_at IS NULL, (SELECT count(*) FROM toolsched_events WHERE batch_id = 'b1') \
               + coalesce(cardinality(log_bodies), 0) \
             FROM toolsched_batches WHERE batch_id = 'b1'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!((row.get::<_, bool>(0), row.get::<_, i64>(1)), (true, 0));

    // B, the owner, writes.
    b.record_executing("s", "b2", "c1").await.unwrap();
    let executing: Vec<(String, String)> = db
        .query("SELECT batch_id, call_id FROM toolsched_executing", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(executing, vec![("b2".to_string(), "c1".to_string())]);
    let epochs: Vec<(String, i64)> = db
        .query(
            "SELECT batch_id, epoch FROM toolsched_batches WHERE session_id = 's' ORDER BY began_at",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        epochs,
        vec![
            ("b1".to_string(), 1),
            ("b1bis".to_string(), 1),
            ("b2".to_string(), 2)
        ]
    );
}

#[tokio::test]
async fn a_replica_shutting_down_releases_its_leases_for_the_next_request() {
    let url = fresh_database().await;
    let db = sql(&url).await;
    let (a, b) = (replica(&url).await, replica(&url).await);
    let Begun::New(_w) = a.begin_batch(batch("s", "b1")).await.unwrap() else {
        panic!("a new batch");
    };
    a.release().await;
    let Begun::New(_w2) = b.begin_batch(batch("s", "b2")).await.unwrap() else {
        panic!("a new batch");
    };
    assert_eq!(lease(&db, "s").await, (b.replica().to_string(), 2));
}

#[tokio::test]
async fn a_running_batch_keeps_its_lease_renewed() {
    let url = fresh_database().await;
    let db = sql(&url).await;
    let a = PostgresStore::<BatchEvent>::connect_with_lease(
        &url,
        Default::default(),
        Arc::new(toolsched::api::WireCodec),
        Duration::from_secs(3),
    )
    .await
    .unwrap();
    let Begun::New(_w) = a.begin_batch(batch("s", "b1")).await.unwrap() else {
        panic!("a new batch");
    };
    let first: std::time::SystemTime = db
        .query_one("SELECT renewed_at FROM toolsched_leases", &[])
        .await
        .unwrap()
        .get(0);
    // Renewed by the replica's own task (every second at a 3 s lease):
    // wait for the row to change, on the database's word.
    let renewed = async {
        loop {
            let now: std::time::SystemTime = db
                .query_one("SELECT renewed_at FROM toolsched_leases", &[])
                .await
                .unwrap()
                .get(0);
            if now > first {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), renewed)
        .await
        .expect("lease renewed");
    assert_eq!(lease(&db, "s").await, (a.replica().to_string(), 1));
}

/// A completed batch's log is one row (migration 6); a batch completed
/// before it has a `toolsched_events` row per event. Both read back the
/// same, in order, through another replica.
#[tokio::test]
async fn a_completed_log_reads_back_the_same_from_its_row_and_from_event_rows() {
    let url = fresh_database().await;
    let db = sql(&url).await;
    let a = replica(&url).await;
    let Begun::New(writer) = a.begin_batch(batch("s", "b1")).await.unwrap() else {
        panic!("a new batch");
    };
    writer.append(BatchEvent::Started {
        batch_id: "b1".into(),
    });
    writer.append(BatchEvent::Started {
        batch_id: "b1-second".into(),
    });
    writer.finish(BatchEvent::Started {
        batch_id: "b1-third".into(),
    });
    a.complete_batch("s", "b1", Vec::new());
    a.flush(Duration::from_secs(30)).await;
    let row = db
        .query_one(
            "SELECT cardinality(log_bodies), (SELECT count(*) FROM toolsched_events) \
             FROM toolsched_batches WHERE batch_id = 'b1'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!((row.get::<_, i32>(0), row.get::<_, i64>(1)), (3, 0));

    let read = |store: Arc<PostgresStore<BatchEvent>>| async move {
        let log = store.batch("s", "b1").await.unwrap();
        assert!(log.is_finished());
        log.entries()
            .iter()
            .map(|e| (e.sequence, e.event.clone()))
            .collect::<Vec<_>>()
    };
    let from_row = read(replica(&url).await).await;
    assert_eq!(
        from_row.iter().map(|e| e.0).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );

    // The layout of version 5: the events as rows, none in the batch's row.
    db.batch_execute(
        "INSERT INTO toolsched_events (session_id, batch_id, sequence, at, body) \
           SELECT session_id, batch_id, u.* FROM toolsched_batches, \
             unnest(log_sequences, log_at, log_bodies) u WHERE batch_id = 'b1'; \
         UPDATE toolsched_batches SET log_sequences = NULL, log_at = NULL, log_bodies = NULL",
    )
    .await
    .unwrap();
    let from_rows = read(replica(&url).await).await;
    assert_eq!(from_rows, from_row);
}
