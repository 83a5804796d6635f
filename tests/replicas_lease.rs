//! Session ownership in the PostgreSQL store: a lease row per session
//! (owner, epoch, expiry). Two stores on one database stand for two
//! replicas; a lease is made to expire by the database's clock (as for a
//! paused replica that stopped renewing), never by waiting.

use crate::replicas_support;

use std::sync::Arc;
use std::time::Duration;

use replicas_support::{fresh_database, sql};
use toolsched::api::pb;
use toolsched::scheduler::BatchEvent;
use toolsched::store::{Begun, NewBatch, PostgresStore, Store, StoreError, StoreTiming};

/// Leases long enough that no renewal happens during a test.
const NO_RENEWAL: Duration = Duration::from_secs(3600);

async fn replica(url: &str) -> Arc<PostgresStore<BatchEvent>> {
    PostgresStore::connect_with(
        url,
        Default::default(),
        Arc::new(toolsched::api::WireCodec),
        timing(NO_RENEWAL),
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
        reads_only: false,
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
    expire_lease(&db, "s").await;
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
    let a = PostgresStore::<BatchEvent>::connect_with(
        &url,
        Default::default(),
        Arc::new(toolsched::api::WireCodec),
        timing(Duration::from_secs(3)),
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

#[tokio::test]
async fn batches_beginning_and_completing_together_each_get_their_own_row_and_fence() {
    let url = fresh_database().await;
    let db = sql(&url).await;
    let (a, b) = (replica(&url).await, replica(&url).await);
    // A holds three sessions; then s2's lease passes to B behind A's back
    // (A still thinks it fresh).
    let mut first = Vec::new();
    for s in ["s1", "s2", "s3"] {
        let Begun::New(w) = a.begin_batch(batch(s, &format!("{s}-a"))).await.unwrap() else {
            panic!("a new batch");
        };
        first.push(w);
    }
    expire_lease(&db, "s2").await;
    let Begun::New(_b_owns) = b.begin_batch(batch("s2", "s2-b")).await.unwrap() else {
        panic!("a new batch");
    };

    // Begun together (one statement when they crowd): each is told for
    // itself; s2's is fenced out and then refused by the claim.
    let ids = ["s1-x", "s1-y", "s2-x", "s3-x"];
    let begun = futures::future::join_all(ids.iter().map(|id| {
        let session = &id[..2];
        a.begin_batch(batch(session, id))
    }))
    .await;
    let mut writers = Vec::new();
    for (id, begun) in ids.iter().zip(begun) {
        match (id, begun) {
            (&"s2-x", Err(StoreError::OwnedElsewhere { owner, .. })) => {
                assert_eq!(owner, b.replica())
            }
            (&"s2-x", other) => panic!("s2-x must be refused, got {:?}", other.is_ok()),
            (id, Ok(Begun::New(w))) => writers.push((id.to_string(), w)),
            (id, _) => panic!("{id}: a new batch"),
        }
    }
    let rows: Vec<(String, i64)> = db
        .query(
            "SELECT batch_id, epoch FROM toolsched_batches ORDER BY batch_id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let expected: Vec<(String, i64)> = [
        ("s1-a", 1),
        ("s1-x", 1),
        ("s1-y", 1),
        ("s2-a", 1),
        ("s2-b", 2),
        ("s3-a", 1),
        ("s3-x", 1),
    ]
    .iter()
    .map(|(b, e)| (b.to_string(), *e))
    .collect();
    assert_eq!(rows, expected);

    // Completed together (one statement): every batch its own log and
    // ended calls; A's stale s2-a writes nothing.
    for (n, (id, w)) in writers.into_iter().enumerate() {
        for i in 0..n {
            w.append(BatchEvent::Started {
                batch_id: format!("{id}-{i}"),
            });
        }
        w.finish(BatchEvent::Started {
            batch_id: format!("{id}-end"),
        });
        let ended = (0..n)
            .map(|i| toolsched::store::EndedCall {
                call_id: format!("{id}-c{i}"),
                state: "success",
            })
            .collect();
        a.complete_batch(&id[..2], &id, ended);
    }
    let stale = first.remove(1);
    stale.finish(BatchEvent::Started {
        batch_id: "s2-a-end".into(),
    });
    a.complete_batch("s2", "s2-a", Vec::new());
    a.flush(Duration::from_secs(30)).await;

    let rows: Vec<(String, bool, Vec<i64>, Vec<String>)> = db
        .query(
            "SELECT batch_id, completed_at IS NOT NULL, coalesce(log_sequences, '{}'), ended_calls \
             FROM toolsched_batches WHERE batch_id IN ('s1-x', 's1-y', 's3-x', 's2-a') \
             ORDER BY batch_id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    assert_eq!(
        rows,
        vec![
            ("s1-x".to_string(), true, vec![1], vec![]),
            (
                "s1-y".to_string(),
                true,
                vec![1, 2],
                vec!["s1-y-c0".to_string()]
            ),
            ("s2-a".to_string(), false, vec![], vec![]),
            (
                "s3-x".to_string(),
                true,
                vec![1, 2, 3],
                vec!["s3-x-c0".to_string(), "s3-x-c1".to_string()]
            ),
        ]
    );
    // Read back by another replica, event for event (each as recorded: the
    // API's encoding of the event).
    let c = replica(&url).await;
    let log = c.batch("s3", "s3-x").await.unwrap();
    assert!(log.is_finished());
    let read: Vec<(u64, u64, String)> = log
        .entries()
        .iter()
        .map(|e| {
            let BatchEvent::Recorded(bytes) = &e.event else {
                panic!("a recorded event");
            };
            let message =
                <pb::ScheduleCallsResponse as prost::Message>::decode(&bytes[..]).unwrap();
            let Some(pb::schedule_calls_response::Event::BatchStarted(started)) = message.event
            else {
                panic!("a BatchStarted");
            };
            (e.sequence, message.sequence, started.batch_id)
        })
        .collect();
    assert_eq!(
        read,
        vec![
            (1, 1, "s3-x-0".to_string()),
            (2, 2, "s3-x-1".to_string()),
            (3, 3, "s3-x-end".to_string())
        ]
    );
}

#[tokio::test]
async fn a_completion_queued_under_an_older_epoch_is_not_written_beside_a_newer_one() {
    let url = fresh_database().await;
    let db = sql(&url).await;
    let (a, b) = (replica(&url).await, replica(&url).await);
    let Begun::New(x) = a.begin_batch(batch("s", "x")).await.unwrap() else {
        panic!("a new batch");
    };
    let Begun::New(z) = a.begin_batch(batch("u", "z")).await.unwrap() else {
        panic!("a new batch");
    };
    // The writer is held up on u's lease row (as behind a slow database):
    // what is queued after z waits and goes in one group.
    let mut holder = sql(&url).await;
    let hold = holder.transaction().await.unwrap();
    hold.execute(
        "SELECT 1 FROM toolsched_leases WHERE session_id = 'u' FOR UPDATE",
        &[],
    )
    .await
    .unwrap();
    z.finish(BatchEvent::Started {
        batch_id: "z-end".into(),
    });
    a.complete_batch("u", "z", Vec::new());
    // Once the writer waits on that lock (z alone in its group)...
    wait_for_a_lock_waiter(&db).await;
    // ...x completes under epoch 1 and waits in the queue...
    x.finish(BatchEvent::Started {
        batch_id: "x-end".into(),
    });
    a.complete_batch("s", "x", Vec::new());
    // ...while s passes to B (epoch 2) and back to A (epoch 3).
    expire_lease(&db, "s").await;
    let Begun::New(_on_b) = b.begin_batch(batch("s", "on-b")).await.unwrap() else {
        panic!("a new batch");
    };
    expire_lease(&db, "s").await;
    let Begun::New(y) = a.begin_batch(batch("s", "y")).await.unwrap() else {
        panic!("a new batch");
    };
    assert_eq!(lease(&db, "s").await, (a.replica().to_string(), 3));
    y.finish(BatchEvent::Started {
        batch_id: "y-end".into(),
    });
    a.complete_batch("s", "y", Vec::new());
    hold.commit().await.unwrap();
    a.flush(Duration::from_secs(30)).await;

    // x was A's under epoch 1 only: its completion is not written, though
    // y's of the same session, at epoch 3, is.
    let rows: Vec<(String, i64, bool)> = db
        .query(
            "SELECT batch_id, epoch, completed_at IS NOT NULL FROM toolsched_batches \
             ORDER BY batch_id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        rows,
        vec![
            ("on-b".to_string(), 2, false),
            ("x".to_string(), 1, false),
            ("y".to_string(), 3, true),
            ("z".to_string(), 1, true),
        ]
    );
}

/// A batch of reads with no request id.
fn reads(session: &str, id: &str) -> NewBatch {
    NewBatch {
        reads_only: true,
        ..batch(session, id)
    }
}

/// The store's timing with leases of `lease_ttl`.
fn timing(lease_ttl: Duration) -> StoreTiming {
    StoreTiming {
        lease_ttl,
        ..StoreTiming::default()
    }
}

/// Makes `session`'s lease run out now, by the database's clock (as a
/// paused or dead owner's would).
async fn expire_lease(db: &tokio_postgres::Client, session: &str) {
    db.execute(
        "UPDATE toolsched_leases SET expires_at = now() - interval '1 second' WHERE session_id = $1",
        &[&session],
    )
    .await
    .unwrap();
}

/// (batch id, completed, logged sequences) of `session`'s rows, in the
/// order they began.
async fn rows_of(db: &tokio_postgres::Client, session: &str) -> Vec<(String, bool, Vec<i64>)> {
    db.query(
        "SELECT batch_id, completed_at IS NOT NULL, coalesce(log_sequences, '{}') \
         FROM toolsched_batches WHERE session_id = $1 ORDER BY began_at",
        &[&session],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2)))
    .collect()
}

/// Holds the writer on `session`'s lease row (as behind a slow database):
/// a completion of `session` is queued and the writer waits on the lock;
/// what is queued after it waits and goes in one group once the returned
/// transaction ends.
async fn hold_writer<'a>(
    db: &tokio_postgres::Client,
    store: &PostgresStore<BatchEvent>,
    holder: &'a mut tokio_postgres::Client,
    session: &str,
    held: &str,
) -> tokio_postgres::Transaction<'a> {
    let Begun::New(w) = store.begin_batch(batch(session, held)).await.unwrap() else {
        panic!("a new batch");
    };
    let hold = holder.transaction().await.unwrap();
    hold.execute(
        "SELECT 1 FROM toolsched_leases WHERE session_id = $1 FOR UPDATE",
        &[&session],
    )
    .await
    .unwrap();
    w.finish(BatchEvent::Started {
        batch_id: "held-end".into(),
    });
    store.complete_batch(session, held, Vec::new());
    wait_for_a_lock_waiter(db).await;
    hold
}

/// Waits (bounded, 30 s) until a statement of the test's database waits on
/// a lock: the writer, held up on a lease row.
async fn wait_for_a_lock_waiter(db: &tokio_postgres::Client) {
    let mut waited = 0;
    while db
        .query_one(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE wait_event_type = 'Lock' AND datname = current_database()",
            &[],
        )
        .await
        .unwrap()
        .get::<_, i64>(0)
        == 0
    {
        waited += 1;
        assert!(waited < 3000, "the writer never waited on the lease row");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_batch_of_reads_without_a_request_id_is_recorded_behind_it_in_order() {
    let url = fresh_database().await;
    let db = sql(&url).await;
    let (a, b) = (replica(&url).await, replica(&url).await);
    // The first batch of a session claims its lease (and waits for its row).
    let Begun::New(first) = a.begin_batch(reads("s", "first")).await.unwrap() else {
        panic!("a new batch");
    };
    first.finish(BatchEvent::Started {
        batch_id: "first-end".into(),
    });
    a.complete_batch("s", "first", Vec::new());
    a.flush(Duration::from_secs(30)).await;
    assert_eq!(rows_of(&db, "s").await, [("first".into(), true, vec![1])]);

    let mut holder = sql(&url).await;
    let hold = hold_writer(&db, &a, &mut holder, "u", "held-1").await;
    // Under the fresh lease, a batch of reads begins without its row
    // (the writer is held up: nothing of it can have been written).
    let Begun::New(r1) = a.begin_batch(reads("s", "r1")).await.unwrap() else {
        panic!("a new batch");
    };
    assert_eq!(rows_of(&db, "s").await, [("first".into(), true, vec![1])]);
    // Another replica asked for it is sent to the owner (which mirrors it),
    // not told it is unknown.
    match b.batch("s", "r1").await {
        Err(StoreError::OwnedElsewhere { owner, .. }) => assert_eq!(owner, a.replica()),
        other => panic!("r1 on B: {:?}", other.map(|_| ())),
    }
    // A batch that waits for its row writes the earlier one first: a
    // replica taking the session over finds them both, in order.
    let Begun::New(w1) = a.begin_batch(batch("s", "w1")).await.unwrap() else {
        panic!("a new batch");
    };
    assert_eq!(
        rows_of(&db, "s").await,
        [
            ("first".into(), true, vec![1]),
            ("r1".into(), false, vec![]),
            ("w1".into(), false, vec![]),
        ]
    );
    // A mirror (a WatchBatch on another replica) needs the row of the
    // batch it copies: written first.
    let Begun::New(r2) = a.begin_batch(reads("s", "r2")).await.unwrap() else {
        panic!("a new batch");
    };
    r2.append(BatchEvent::Started {
        batch_id: "r2-0".into(),
    });
    assert!(a.mirror("s", "r2").await.unwrap());
    assert_eq!(
        db.query_one(
            "SELECT count(*) FROM toolsched_batches b JOIN toolsched_events e \
             USING (session_id, batch_id) WHERE b.batch_id = 'r2' AND b.completed_at IS NULL",
            &[],
        )
        .await
        .unwrap()
        .get::<_, i64>(0),
        1
    );
    // A batch of reads that completes before the writer reaches its row:
    // its row is written once, completed, with its log.
    let Begun::New(r3) = a.begin_batch(reads("s", "r3")).await.unwrap() else {
        panic!("a new batch");
    };
    r3.append(BatchEvent::Started {
        batch_id: "r3-0".into(),
    });
    r3.finish(BatchEvent::Started {
        batch_id: "r3-end".into(),
    });
    a.complete_batch("s", "r3", Vec::new());
    for (w, id) in [(r1, "r1"), (r2, "r2"), (w1, "w1")] {
        w.finish(BatchEvent::Started {
            batch_id: format!("{id}-end"),
        });
        a.complete_batch("s", id, Vec::new());
    }
    // A mirror asked for a batch completed here waits for its completion to
    // be written, then the store serves it.
    let mirrored = tokio::spawn({
        let a = a.clone();
        async move { a.mirror("s", "r3").await }
    });
    hold.commit().await.unwrap();
    assert!(mirrored.await.unwrap().unwrap());
    a.flush(Duration::from_secs(30)).await;
    let mut rows = rows_of(&db, "s").await;
    rows.sort();
    assert_eq!(
        rows,
        [
            ("first".into(), true, vec![1]),
            ("r1".into(), true, vec![1]),
            ("r2".into(), true, vec![1, 2]),
            ("r3".into(), true, vec![1, 2]),
            ("w1".into(), true, vec![1]),
        ]
    );
    // Read back elsewhere, event for event.
    let log = b.batch("s", "r3").await.unwrap();
    assert!(log.is_finished());
    assert_eq!(log.entries().len(), 2);

    // A row written behind while the lease has run out (the store was
    // lost a while, say) but passed to nobody: the writer's insert is
    // fenced out by the expiry, and the batch's completion, fenced by
    // owner and epoch as every completion, inserts it.
    let hold = hold_writer(&db, &a, &mut holder, "u", "held-3").await;
    let Begun::New(expired) = a.begin_batch(reads("s", "expired")).await.unwrap() else {
        panic!("a new batch");
    };
    expire_lease(&db, "s").await;
    hold.commit().await.unwrap();
    a.flush(Duration::from_secs(30)).await;
    assert!(
        !rows_of(&db, "s").await.iter().any(|r| r.0 == "expired"),
        "the row of 'expired' was written under an expired lease"
    );
    expired.finish(BatchEvent::Started {
        batch_id: "expired-end".into(),
    });
    a.complete_batch("s", "expired", Vec::new());
    a.flush(Duration::from_secs(30)).await;
    assert!(
        rows_of(&db, "s")
            .await
            .contains(&("expired".into(), true, vec![1])),
        "{:?}",
        rows_of(&db, "s").await
    );

    // A row written behind is fenced like any other: the lease passed to
    // B before A's writer reached it, so it is never written, nor its
    // completion.
    let hold = hold_writer(&db, &a, &mut holder, "u", "held-2").await;
    let Begun::New(late) = a.begin_batch(reads("s", "late")).await.unwrap() else {
        panic!("a new batch");
    };
    expire_lease(&db, "s").await;
    let Begun::New(_on_b) = b.begin_batch(batch("s", "on-b")).await.unwrap() else {
        panic!("a new batch");
    };
    late.finish(BatchEvent::Started {
        batch_id: "late-end".into(),
    });
    a.complete_batch("s", "late", Vec::new());
    hold.commit().await.unwrap();
    a.flush(Duration::from_secs(30)).await;
    let ids: Vec<String> = rows_of(&db, "s").await.into_iter().map(|r| r.0).collect();
    assert!(!ids.contains(&"late".to_string()), "{ids:?}");
    assert!(ids.contains(&"on-b".to_string()), "{ids:?}");
}
