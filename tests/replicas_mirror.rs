//! A batch's mirror (its log copied into the store for a reader on
//! another replica) never writes an event before the batch's row is
//! committed, whatever the batch's completion is doing meanwhile: a
//! foreign key ties the events to the row, and a mirror that went ahead of
//! it failed with the store's "violates foreign key constraint" for the
//! client (a ScheduleCalls sent to a replica that does not run the
//! session, under load).
//!
//! The batch is one of reads with no request id under a fresh lease: its
//! row is written behind, by the store's writer or by whatever needs it
//! first. Driven on the store itself against the PostgreSQL of
//! tests/services.sh, with the one interleaving that went wrong forced:
//! the completion is held inside its encoding of the log (the codec
//! waits), the mirror starts then, and the store's writer is held behind a
//! table lock, so that nothing else writes the row meanwhile.

use crate::replicas_support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use replicas_support::{fresh_database, sql};
use toolsched::store::{
    Begun, Entry, EventCodec, LogEvent, NewBatch, PostgresStore, Retention, Store,
};

#[derive(Debug)]
struct Ev(String);

impl LogEvent for Ev {
    fn approx_bytes(&self) -> usize {
        self.0.len()
    }
}

/// Encodes an event as its text. Once armed, its first encoding tells
/// `waiting` and waits for `go`.
struct HeldCodec {
    armed: AtomicBool,
    waiting: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
    go: Mutex<Option<std::sync::mpsc::Receiver<()>>>,
}

impl EventCodec<Ev> for HeldCodec {
    fn encode(&self, entry: &Entry<Ev>) -> Vec<u8> {
        if self.armed.swap(false, Ordering::SeqCst) {
            if let Some(waiting) = self.waiting.lock().unwrap().take() {
                let _ = waiting.send(());
            }
            if let Some(go) = self.go.lock().unwrap().take() {
                // Bounded: a test failing elsewhere does not hang here.
                let _ = go.recv_timeout(Duration::from_secs(60));
            }
        }
        entry.event.0.as_bytes().to_vec()
    }

    fn decode(&self, bytes: bytes::Bytes) -> Ev {
        Ev(String::from_utf8_lossy(&bytes).into_owned())
    }
}

const SESSION: &str = "default/s-mirror";

fn batch(batch_id: &str, request_id: Option<&str>) -> NewBatch {
    NewBatch {
        session_id: SESSION.into(),
        batch_id: batch_id.into(),
        request_id: request_id.map(Into::into),
        digest: [7; 32],
        request: Some(b"request".to_vec()),
        reads_only: true,
    }
}

/// Statements inserting batch rows ([`INSERT_FENCED`]: the writer's and a
/// mirror's) waiting for a lock.
const WAITING_ROW_INSERTS: &str = "SELECT count(*) FROM pg_stat_activity \
     WHERE datname = current_database() AND wait_event_type = 'Lock' \
     AND query LIKE 'INSERT INTO toolsched_batches%'";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirror_started_while_its_batch_completes_writes_the_row_before_the_events() {
    let url = fresh_database().await;
    let (waiting_tx, waiting) = tokio::sync::oneshot::channel();
    let (go, go_rx) = std::sync::mpsc::channel();
    let codec = Arc::new(HeldCodec {
        armed: AtomicBool::new(false),
        waiting: Mutex::new(Some(waiting_tx)),
        go: Mutex::new(Some(go_rx)),
    });
    let store = PostgresStore::<Ev>::connect(&url, Retention::default(), codec.clone())
        .await
        .unwrap();
    // A batch with a request id claims the session's lease (its row is
    // written at once); it keeps running, so the lease stays fresh.
    let Begun::New(_claiming) = store
        .begin_batch(batch("b-claim", Some("r-claim")))
        .await
        .unwrap()
    else {
        panic!("b-claim is new");
    };

    // From here on no batch row can be inserted (SHARE blocks inserts; the
    // events' foreign key checks are not blocked).
    let lock = sql(&url).await;
    lock.batch_execute("BEGIN; LOCK TABLE toolsched_batches IN SHARE MODE")
        .await
        .unwrap();
    let watcher = sql(&url).await;

    // No round trip: its row is written behind (and held by the lock).
    let begun = tokio::time::timeout(
        Duration::from_secs(10),
        store.begin_batch(batch("b-read", None)),
    )
    .await
    .expect("a batch of reads with no request id under a fresh lease waits for no row")
    .unwrap();
    let Begun::New(writer) = begun else {
        panic!("b-read is new");
    };
    let log = writer.log().clone();
    writer.append(Ev("accepted".into()));
    writer.finish(Ev("completed".into()));

    // The completion, held while it encodes the log.
    codec.armed.store(true, Ordering::SeqCst);
    let completing = {
        let store = store.clone();
        std::thread::spawn(move || store.complete_batch(SESSION, "b-read", Vec::new()))
    };
    waiting.await.unwrap();
    // A mirror (a ScheduleCalls relayed from another replica) starts then.
    let mut mirror = {
        let store = store.clone();
        tokio::spawn(async move { store.mirror(SESSION, "b-read").await })
    };
    // It has looked at the batch once it reads its log.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while log.readers() == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the mirror never read the log"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    go.send(()).unwrap();
    completing.join().unwrap();

    // The mirror ends, or waits to insert the row behind the lock beside
    // the writer: the lock goes then. (A mirror that wrote the events
    // first ended with the foreign key's error, the row nowhere.)
    let ended = loop {
        tokio::select! {
            done = &mut mirror => break Some(done.unwrap()),
            _ = tokio::time::sleep(Duration::from_millis(10)) => {
                let waiting: i64 = watcher
                    .query_one(WAITING_ROW_INSERTS, &[])
                    .await
                    .unwrap()
                    .get(0);
                if waiting >= 2 {
                    break None;
                }
            }
        }
    };
    lock.batch_execute("COMMIT").await.unwrap();
    let mirrored = match ended {
        Some(ended) => ended,
        None => tokio::time::timeout(Duration::from_secs(30), mirror)
            .await
            .expect("the mirror ends once the row can be written")
            .unwrap(),
    };
    assert_eq!(mirrored, Ok(true));

    let events: i64 = watcher
        .query_one(
            "SELECT count(*) FROM toolsched_events WHERE session_id = $1 AND batch_id = 'b-read'",
            &[&SESSION],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(events, 2);
    // The completion, written behind, completes the same row.
    store.flush(Duration::from_secs(30)).await;
    let row = watcher
        .query_one(
            "SELECT completed_at IS NOT NULL, cardinality(log_bodies)::bigint \
             FROM toolsched_batches WHERE session_id = $1 AND batch_id = 'b-read'",
            &[&SESSION],
        )
        .await
        .unwrap();
    assert_eq!((row.get::<_, bool>(0), row.get::<_, i64>(1)), (true, 2));
}
