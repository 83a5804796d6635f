//! Scenario `soak`: three `toolsched` replicas on loopback sharing one
//! PostgreSQL database (a fresh one per run) and one workspace, driven by
//! `--sessions` client loops for `--soak-secs`, with one replica killed
//! (SIGKILL) and restarted on its port every `--kill-every-secs`.
//!
//! Each client sends batches of a side-effecting shell call (it appends its
//! own unique id to `soak-effects.log`) between two read-only calls, each
//! to a replica picked per request (direct addresses, no proxy). A failed
//! or cut request is retried on another replica: before the client knows
//! the batch id, `ScheduleCalls` again with the same `request_id`; after,
//! `WatchBatch` from the last sequence seen (odd sessions) or the same
//! `ScheduleCalls` again (even sessions: a replay, deduplicated by
//! sequence). At the end it checks, and prints as rows of the table (a
//! failed check is a `FAILED` row, and the suite exits non-zero):
//!
//! - every batch accepted was completed;
//! - every call of every batch has exactly one terminal state, the one its
//!   `BatchCompleted` names (no call reported in two different terminal
//!   states), and only the expected ones (Success; the shell call may be
//!   `outcome_unknown`);
//! - no side effect happened twice: a Success shell call's id is in the
//!   effects file exactly once, an `outcome_unknown` call's at most once,
//!   no id twice;
//! - sequences only go up, without gaps within one replica's log (a batch
//!   taken over continues at n × 2^32 + 1);
//! - nothing is left running: no session has a running or queued batch on
//!   any replica, the store has no uncompleted batch, and no command of the
//!   run is still alive.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::json;
use tonic::transport::{Channel, Endpoint};
use toolsched::api::pb;
use toolsched::api::pb::schedule_calls_response::Event;
use toolsched::api::pb::tool_call_update::State;
use toolsched::api::pb::tool_scheduler_client::ToolSchedulerClient;

use super::{Env, Row, Served, Stat, batch, fcall, percentile, progress, start_logged};

/// The soak's settings (flags of `toolsched-bench`).
#[derive(Clone, Copy, Debug)]
pub struct SoakOptions {
    /// How long clients send new batches.
    pub secs: u64,
    /// Concurrent sessions, one client loop each.
    pub sessions: usize,
    /// A replica is killed and restarted this often (0: never).
    pub kill_every_secs: u64,
    /// The replicas' `--store-lease-secs`: how soon a dead replica's
    /// sessions can be taken over.
    pub lease_secs: u64,
}

/// Replicas in the soak (the set of three).
const REPLICAS: usize = 3;

/// Longest silence on a stream before the client counts it stalled and
/// re-attaches elsewhere: well above a takeover (a lease plus the relay
/// wait) and a batch's own run time (a fraction of a second).
const STALL: Duration = Duration::from_secs(30);

/// Longest a client keeps retrying one batch before it records the batch
/// as not completed (lost).
const GIVE_UP: Duration = Duration::from_secs(120);

/// Pause before a retry: a dead replica refuses connections at once, so
/// without it a client would spin.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// How long, after the last batch, the store's writes behind and the dead
/// replicas' commands get to settle before "nothing left running" fails.
const SETTLE: Duration = Duration::from_secs(30);

/// The killer stops this many leases before the clients do (and at
/// least QUIET_MIN before).
const QUIET_LEASES: u64 = 2;
const QUIET_MIN: Duration = Duration::from_secs(10);

/// The effects file in the shared workspace.
const EFFECTS: &str = "soak-effects.log";

/// Takeovers offset a batch's sequences by this per takeover
/// (`store::SEQUENCES_PER_OWNER`).
const PER_OWNER: u64 = toolsched::store::SEQUENCES_PER_OWNER;

// === the replicas ===

/// The three replica slots: each keeps its port across restarts.
struct Replicas {
    slots: Vec<Option<Served>>,
    addrs: Vec<SocketAddr>,
    args: Vec<String>,
    server: PathBuf,
    logs: PathBuf,
    starts: usize,
}

impl Replicas {
    fn start_all(env: &Env, args: Vec<String>, logs: PathBuf) -> anyhow::Result<Self> {
        let mut me = Replicas {
            slots: Vec::new(),
            addrs: Vec::new(),
            args,
            server: env.server.clone(),
            logs,
            starts: 0,
        };
        for i in 0..REPLICAS {
            let served = me.spawn(i, "127.0.0.1:0")?;
            me.addrs.push(served.addr);
            me.slots.push(Some(served));
        }
        Ok(me)
    }

    fn spawn(&mut self, i: usize, listen: &str) -> anyhow::Result<Served> {
        self.starts += 1;
        let log = self.logs.join(format!("replica-{i}.{}.log", self.starts));
        let mut args: Vec<&str> = vec!["serve", "--listen", listen];
        args.extend(self.args.iter().map(String::as_str));
        start_logged(&self.server, &args, Some(log.as_path()))
    }

    /// `kill -9` of replica `i`, reaped.
    fn kill(&mut self, i: usize) {
        if let Some(mut served) = self.slots[i].take() {
            let _ = served.child.kill();
            let _ = served.child.wait();
        }
    }

    /// Starts replica `i` again on its port (retried while the port is
    /// still held by the dead process's last connections).
    fn restart(&mut self, i: usize) -> anyhow::Result<()> {
        let listen = self.addrs[i].to_string();
        let mut last = None;
        for _ in 0..50 {
            match self.spawn(i, &listen) {
                Ok(served) => {
                    self.slots[i] = Some(served);
                    return Ok(());
                }
                Err(e) => last = Some(e),
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Err(last.unwrap_or_else(|| anyhow::anyhow!("no attempt")))
            .with_context(|| format!("restart replica {i} on {listen}"))
    }
}

// === what the clients saw ===

#[derive(Default)]
struct Tally {
    /// Batches whose BatchAccepted a client saw.
    accepted: u64,
    /// Batches whose BatchCompleted a client saw.
    completed: u64,
    calls: u64,
    outcome_unknown: u64,
    /// Re-sent ScheduleCalls (same request_id) / WatchBatch re-attaches.
    retried_schedule: u64,
    retried_watch: u64,
    /// Streams silent for STALL.
    stalls: u64,
    /// Batches whose log continued past a takeover (sequence > 2^32).
    resumed: u64,
    /// Read-only calls reported terminal more than once (re-run after a
    /// takeover; harmless by design).
    reads_rerun: u64,
    latencies: Vec<Duration>,
    /// The shell call of each batch that got as far as a request: its
    /// effect id and final state (None: never completed).
    effects: Vec<(String, Option<Final>)>,
    /// Each completed batch as its client saw it live, for the replay
    /// after the run.
    finals: Vec<LiveBatch>,
    /// Anything a check found, with what the client saw.
    problems: Vec<String>,
    /// Retry causes, by kind, for the report.
    causes: BTreeMap<String, u64>,
}

/// A completed batch as its client saw it live.
struct LiveBatch {
    session_id: String,
    batch_id: String,
    /// Every call's final state (BatchCompleted), in request order.
    finals: Vec<(String, Final)>,
    /// Its log had continued past a takeover already.
    resumed: bool,
}

/// What replaying a completed batch after the run found.
#[derive(Default)]
struct Replays {
    replayed: u64,
    /// NOT_FOUND: past retention.
    not_retained: u64,
    /// Its log is a takeover's (sequences past 2^32) although its client
    /// saw it complete without one: run again after it completed.
    rerun_after_completion: u64,
    /// Final states other than the live ones, by (call, live, replayed).
    differ: BTreeMap<String, u64>,
    /// Streams that ended (OK) without BatchCompleted.
    no_completion: u64,
    /// Everything that does not hold, with an example each.
    problems: Vec<String>,
}

/// A call's terminal state as the clients compare them.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Final {
    Success,
    Error(i32),
    Cancelled,
}

impl Final {
    fn of_update(state: &State) -> Option<Final> {
        match state {
            State::Success(_) => Some(Final::Success),
            State::Error(e) => Some(Final::Error(e.r#type)),
            State::Cancelled(_) => Some(Final::Cancelled),
            _ => None,
        }
    }

    fn of_completed(c: &pb::CompletedCall) -> Option<Final> {
        match pb::FinalState::try_from(c.state) {
            Ok(pb::FinalState::Success) => Some(Final::Success),
            Ok(pb::FinalState::Error) => Some(Final::Error(c.error_type)),
            Ok(pb::FinalState::Cancelled) => Some(Final::Cancelled),
            _ => None,
        }
    }
}

/// One batch as a client follows it across replicas.
#[derive(Default)]
struct Following {
    batch_id: Option<String>,
    last_sequence: u64,
    terminal: HashMap<String, Vec<Final>>,
    completed: Option<pb::BatchCompleted>,
    resumed: bool,
}

/// How one attempt ended.
enum Attempt {
    Completed,
    /// Worth another attempt elsewhere, with the reason.
    Retry(String),
    /// Nothing to retry: the server refused the request for good.
    Fatal(String),
}

fn endpoint_channel(addr: SocketAddr) -> anyhow::Result<Channel> {
    Ok(Endpoint::from_shared(format!("http://{addr}"))?
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(5))
        .connect_lazy())
}

/// Feeds one stream into `f` until BatchCompleted, its end or a stall.
async fn follow(
    stream: &mut tonic::Streaming<pb::ScheduleCallsResponse>,
    f: &mut Following,
    problems: &mut Vec<String>,
    label: &str,
) -> Attempt {
    loop {
        let next = match tokio::time::timeout(STALL, stream.message()).await {
            Err(_) => return Attempt::Retry("stall".into()),
            Ok(Err(status)) => return Attempt::Retry(format!("cut: {:?}", status.code())),
            Ok(Ok(None)) => return Attempt::Retry("ended before BatchCompleted".into()),
            Ok(Ok(Some(m))) => m,
        };
        if let Some(Event::BatchAccepted(a)) = &next.event {
            match &f.batch_id {
                None => f.batch_id = Some(a.batch_id.clone()),
                Some(b) if *b != a.batch_id => {
                    problems.push(format!(
                        "{label}: request id attached to batch {} after {b}: two batches of one request",
                        a.batch_id
                    ));
                    return Attempt::Fatal("two batches".into());
                }
                Some(_) => {}
            }
        }
        if next.sequence <= f.last_sequence {
            continue; // a replay from the start: seen already
        }
        let continues = next.sequence == f.last_sequence + 1
            || (next.sequence > f.last_sequence && (next.sequence - 1) % PER_OWNER == 0);
        if !continues {
            problems.push(format!(
                "{label}: sequence {} after {}: a gap",
                next.sequence, f.last_sequence
            ));
        }
        f.last_sequence = next.sequence;
        if next.sequence > PER_OWNER {
            f.resumed = true;
        }
        match next.event {
            Some(Event::CallUpdate(u)) => {
                if let Some(state) = u.state.as_ref().and_then(Final::of_update) {
                    f.terminal.entry(u.call_id).or_default().push(state);
                }
            }
            Some(Event::BatchCompleted(c)) => {
                f.completed = Some(c);
                return Attempt::Completed;
            }
            _ => {}
        }
    }
}

/// Tiny deterministic generator for picking replicas (no `rand` in the
/// tree): splitmix64.
struct Pick(u64);

impl Pick {
    fn next(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) % n as u64) as usize
    }
}

/// The calls of batch `n` of session `s`, and the shell call's effect id.
fn soak_request(token: &str, s: usize, n: u64) -> (pb::ScheduleCallsRequest, String) {
    let session = format!("soak-{token}-{s}");
    let effect = format!("{token}-{s}-{n}");
    let mut request = batch(
        &session,
        vec![
            fcall("r1", "read_file", json!({"file_path": "small.txt"}), false),
            // The sleep keeps the command running for a while, so that
            // some replicas are killed while it runs (outcome_unknown).
            fcall(
                "w",
                "run_shell_command",
                json!({"command": format!("echo {effect} >> {EFFECTS}; sleep 0.1")}),
                false,
            ),
            fcall("r2", "list_directory", json!({"dir_path": "."}), false),
        ],
    );
    request.request_id = format!("{effect}-req");
    // A client that reconnects within the grace keeps its batch running.
    request.disconnect_grace_secs = Some(60);
    (request, effect)
}

/// One session's client loop until `deadline`; what it saw.
async fn client_loop(
    s: usize,
    token: Arc<str>,
    channels: Arc<Vec<Channel>>,
    deadline: Instant,
    tally: Arc<std::sync::Mutex<Tally>>,
) {
    let mut pick = Pick(s as u64 * 7919 + 1);
    let mut n = 0u64;
    while Instant::now() < deadline {
        n += 1;
        let (request, effect) = soak_request(&token, s, n);
        let label = format!("session {s} batch {n} ({})", request.request_id);
        let t0 = Instant::now();
        let mut f = Following::default();
        let mut problems = Vec::new();
        let mut causes = Vec::new();
        let (mut retried_schedule, mut retried_watch, mut stalls) = (0, 0, 0);
        let mut replica = pick.next(REPLICAS);
        let mut first = true;
        let outcome = loop {
            if !first {
                tokio::time::sleep(RETRY_PAUSE).await;
                // Another replica than the one that failed.
                replica = (replica + 1 + pick.next(REPLICAS - 1)) % REPLICAS;
            }
            let mut client = ToolSchedulerClient::new(channels[replica].clone());
            let watch = f.batch_id.clone().filter(|_| s % 2 == 1);
            if !first {
                if watch.is_some() {
                    retried_watch += 1;
                } else {
                    retried_schedule += 1;
                }
            }
            first = false;
            let opened = match &watch {
                Some(b) => {
                    client
                        .watch_batch(pb::WatchBatchRequest {
                            session_id: request.session_id.clone(),
                            batch_id: b.clone(),
                            after_sequence: f.last_sequence,
                        })
                        .await
                }
                None => client.schedule_calls(request.clone()).await,
            };
            let attempt = match opened {
                Ok(stream) => follow(&mut stream.into_inner(), &mut f, &mut problems, &label).await,
                Err(status) => match status.code() {
                    tonic::Code::Unavailable
                    | tonic::Code::Unknown
                    | tonic::Code::Cancelled
                    | tonic::Code::DeadlineExceeded
                    | tonic::Code::Internal => {
                        Attempt::Retry(format!("refused: {:?}", status.code()))
                    }
                    // A batch the client saw accepted is not found: lost,
                    // unless another replica knows it (retried a while).
                    tonic::Code::NotFound if f.batch_id.is_some() => {
                        Attempt::Retry(format!("NotFound: {}", status.message()))
                    }
                    code => Attempt::Fatal(format!("{code:?}: {}", status.message())),
                },
            };
            match attempt {
                Attempt::Completed => break Ok(()),
                Attempt::Fatal(why) => break Err(why),
                Attempt::Retry(why) => {
                    if why == "stall" {
                        stalls += 1;
                    }
                    causes.push(why.split(':').next().unwrap_or("").to_string());
                    if t0.elapsed() > GIVE_UP {
                        break Err(format!("not completed within {GIVE_UP:?} (last: {why})"));
                    }
                }
            }
        };
        let latency = t0.elapsed();
        let mut shell = None;
        if let Err(why) = &outcome {
            problems.push(format!(
                "{label}: {why} (batch {:?}, last sequence {})",
                f.batch_id, f.last_sequence
            ));
        }
        if let Some(done) = &f.completed {
            shell = check_completed(done, &f, &label, &mut problems);
        }
        let mut t = tally.lock().unwrap_or_else(|e| e.into_inner());
        if f.batch_id.is_some() {
            t.accepted += 1;
        }
        if let Some(done) = &f.completed {
            t.finals.push(LiveBatch {
                session_id: request.session_id.clone(),
                batch_id: done.batch_id.clone(),
                finals: done
                    .calls
                    .iter()
                    .filter_map(|c| Some((c.call_id.clone(), Final::of_completed(c)?)))
                    .collect(),
                resumed: f.resumed,
            });
            t.completed += 1;
            t.calls += done.calls.len() as u64;
            t.outcome_unknown += done
                .calls
                .iter()
                .filter(|c| c.error_type == pb::ErrorType::OutcomeUnknown as i32)
                .count() as u64;
            t.latencies.push(latency);
            t.reads_rerun += f
                .terminal
                .iter()
                .filter(|(id, seen)| *id != "w" && seen.len() > 1)
                .count() as u64;
        }
        t.resumed += u64::from(f.resumed);
        t.retried_schedule += retried_schedule;
        t.retried_watch += retried_watch;
        t.stalls += stalls;
        for c in causes {
            *t.causes.entry(c).or_default() += 1;
        }
        t.effects.push((effect, shell));
        t.problems.extend(problems);
        if outcome.is_err() {
            // A client that cannot finish a batch stops: its session may be
            // in any state now, and the check says what.
            return;
        }
    }
}

/// Checks a completed batch against what its streams said; the shell
/// call's final state.
fn check_completed(
    done: &pb::BatchCompleted,
    f: &Following,
    label: &str,
    problems: &mut Vec<String>,
) -> Option<Final> {
    let ids: Vec<&str> = done.calls.iter().map(|c| c.call_id.as_str()).collect();
    if ids != ["r1", "w", "r2"] || done.responses.len() != 3 {
        problems.push(format!(
            "{label}: BatchCompleted names calls {ids:?} with {} responses",
            done.responses.len()
        ));
        return None;
    }
    let mut shell = None;
    for c in &done.calls {
        let Some(end) = Final::of_completed(c) else {
            problems.push(format!("{label}: call {} has no final state", c.call_id));
            continue;
        };
        // Every terminal state a stream showed for the call is the one
        // BatchCompleted names: one terminal state per call.
        let seen = f.terminal.get(&c.call_id).map_or(&[][..], Vec::as_slice);
        if let Some(other) = seen.iter().find(|s| **s != end) {
            problems.push(format!(
                "{label}: call {} shown {other:?} on a stream, completed {end:?} (message {:?})",
                c.call_id, c.message
            ));
        }
        let expected = end == Final::Success
            || (c.call_id == "w" && end == Final::Error(pb::ErrorType::OutcomeUnknown as i32));
        if !expected {
            problems.push(format!(
                "{label}: call {} ended {end:?}: {:?}",
                c.call_id, c.message
            ));
        }
        if c.call_id == "w" {
            shell = Some(end);
        }
    }
    shell
}

// === the checks at the end ===

/// How one replay ended.
enum Replay {
    NotRetained,
    /// Its final states, and whether its log is a takeover's.
    Completed(Vec<(String, Final)>, bool),
    NoCompletion,
    Failed(String),
}

/// Replays one completed batch: WatchBatch from sequence 0.
async fn replay(channel: Channel, b: &LiveBatch) -> Replay {
    let mut c = ToolSchedulerClient::new(channel);
    let request = pb::WatchBatchRequest {
        session_id: b.session_id.clone(),
        batch_id: b.batch_id.clone(),
        after_sequence: 0,
    };
    let mut stream = match tokio::time::timeout(STALL, c.watch_batch(request)).await {
        Err(_) => return Replay::Failed("WatchBatch did not answer".into()),
        Ok(Err(status)) if status.code() == tonic::Code::NotFound => return Replay::NotRetained,
        Ok(Err(status)) => return Replay::Failed(format!("WatchBatch: {status:?}")),
        Ok(Ok(stream)) => stream.into_inner(),
    };
    let mut taken_over = false;
    loop {
        match tokio::time::timeout(STALL, stream.message()).await {
            Ok(Ok(Some(m))) => {
                taken_over |= m.sequence > PER_OWNER;
                if let Some(Event::BatchCompleted(done)) = m.event {
                    let finals = done
                        .calls
                        .iter()
                        .filter_map(|c| Some((c.call_id.clone(), Final::of_completed(c)?)))
                        .collect();
                    return Replay::Completed(finals, taken_over);
                }
            }
            Ok(Ok(None)) => return Replay::NoCompletion,
            Ok(Err(status)) => return Replay::Failed(format!("cut: {status:?}")),
            Err(_) => return Replay::Failed("stalled".into()),
        }
    }
}

/// Replays every completed batch (on the replicas in turn) and compares
/// it with what its client saw live.
async fn replay_all(channels: &[Channel], batches: &[LiveBatch]) -> Replays {
    use futures::StreamExt;
    let results: Vec<(usize, Replay)> = futures::stream::iter(batches.iter().enumerate())
        .map(|(i, b)| {
            let channel = channels[i % channels.len()].clone();
            async move { (i, replay(channel, b).await) }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    let mut r = Replays::default();
    for (i, outcome) in results {
        let b = &batches[i];
        let at = format!("{} {}", b.session_id, b.batch_id);
        match outcome {
            Replay::NotRetained => r.not_retained += 1,
            Replay::NoCompletion => {
                r.replayed += 1;
                r.no_completion += 1;
                r.problems
                    .push(format!("{at}: the replay ended without BatchCompleted"));
            }
            Replay::Failed(why) => {
                r.replayed += 1;
                r.problems.push(format!("{at}: {why}"));
            }
            Replay::Completed(finals, taken_over) => {
                r.replayed += 1;
                if taken_over && !b.resumed {
                    r.rerun_after_completion += 1;
                }
                if finals != b.finals {
                    for ((call, live), (_, now)) in b.finals.iter().zip(&finals) {
                        if live != now {
                            *r.differ
                                .entry(format!("{call}: {live:?} live, {now:?} replayed"))
                                .or_default() += 1;
                        }
                    }
                    r.problems
                        .push(format!("{at}: live {:?}, replayed {finals:?}", b.finals));
                }
            }
        }
    }
    r
}

/// Every id's lines in the effects file.
fn effect_counts(path: &Path) -> anyhow::Result<HashMap<String, u64>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        // No shell call ran at all.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("read {}", path.display())),
    };
    let mut counts = HashMap::new();
    for line in text.lines() {
        *counts.entry(line.trim().to_string()).or_default() += 1;
    }
    Ok(counts)
}

/// Live processes of the run's commands: cwd in the workspace, or the
/// effects file on their command line (`bash -c "echo … >> soak-effects.log
/// …"`). The replicas run elsewhere, and name the workspace only as a flag.
fn live_commands(workspace: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let cwd = std::fs::read_link(entry.path().join("cwd")).ok();
        let cmdline = std::fs::read(entry.path().join("cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default();
        if cwd.is_some_and(|c| c.starts_with(workspace)) || cmdline.contains(EFFECTS) {
            out.push(format!("{name}: {}", cmdline.trim()));
        }
    }
    out
}

/// A new empty database `name` on the server at `url`; its URL.
pub async fn fresh_database(url: &str, name: &str) -> anyhow::Result<String> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .with_context(|| "connect to --store (run `bash tests/services.sh`)".to_string())?;
    tokio::spawn(connection);
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .context("create the soak's database")?;
    let (base, _) = url
        .rsplit_once('/')
        .context("--store URL has no /database")?;
    let base = base.to_string();
    let query = url.split_once('?').map(|(_, q)| format!("?{q}"));
    Ok(format!("{base}/{name}{}", query.unwrap_or_default()))
}

/// Drops database `name` of the server at `url` (its servers stopped);
/// best effort: a database left behind is only disk.
pub async fn drop_database(url: &str, name: &str) {
    if let Ok(admin) = sql(url).await {
        let _ = admin
            .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .await;
    }
}

async fn sql(url: &str) -> anyhow::Result<tokio_postgres::Client> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .context("connect to the soak's database")?;
    tokio::spawn(connection);
    Ok(client)
}

fn row(metric: String, value: f64, target: &str) -> Row {
    Row {
        scenario: "soak",
        metric,
        toolsched: Stat::of(vec![value]),
        floor: None,
        ratio: None,
        target: target.into(),
    }
}

/// A check: a row saying it holds, or a FAILED row with what was found.
fn check(rows: &mut Vec<Row>, what: &str, problems: &[String]) {
    let metric = if problems.is_empty() {
        format!("check: {what}")
    } else {
        let shown: Vec<&str> = problems.iter().take(5).map(String::as_str).collect();
        format!(
            "FAILED: {what}: {} found, e.g. {}",
            problems.len(),
            shown.join("; ")
        )
    };
    rows.push(row(
        metric,
        problems.len() as f64,
        if problems.is_empty() { "holds" } else { "0" },
    ));
}

pub async fn soak(env: &Env, o: SoakOptions) -> anyhow::Result<Vec<Row>> {
    let Some(url) = env.store.as_deref() else {
        bail!("scenario 'soak' needs --store postgres://… (see tests/services.sh)");
    };
    if o.sessions == 0 {
        bail!("--sessions must be at least 1");
    }
    let token = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    let db = fresh_database(url, &format!("soak_{token}")).await?;
    // Outside the suite's temp workspace, which goes at its end: a failed
    // run's logs and effects stay for a look (a passed run removes them).
    let run_dir = std::env::temp_dir().join(format!("toolsched-soak-{token}"));
    let workspace = run_dir.join("workspace");
    std::fs::create_dir_all(&workspace)?;
    let workspace = workspace.canonicalize()?;
    std::fs::write(workspace.join("small.txt"), "a small file\nof two lines\n")?;
    let logs = run_dir.join("logs");
    std::fs::create_dir_all(&logs)?;
    let (workspace_arg, lease_arg) = (
        workspace.to_string_lossy().to_string(),
        o.lease_secs.to_string(),
    );
    let args: Vec<String> = [
        "--log-format",
        "json",
        "--workspace",
        workspace_arg.as_str(),
        "--store",
        db.as_str(),
        "--store-lease-secs",
        lease_arg.as_str(),
        "--approval-mode",
        "yolo",
        "--max-sessions",
        "1000000",
        "--max-concurrent-streams",
        "100000",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    progress(&format!("[soak] starting {REPLICAS} replicas"));
    let replicas = Replicas::start_all(env, args, logs.clone())?;
    let addrs = replicas.addrs.clone();
    let channels = Arc::new(
        addrs
            .iter()
            .map(|a| endpoint_channel(*a))
            .collect::<anyhow::Result<Vec<_>>>()?,
    );
    let replicas = Arc::new(std::sync::Mutex::new(replicas));

    // The killer: every kill_every, the next replica in turn is killed
    // and started again on its port.
    let stop = Arc::new(AtomicBool::new(false));
    let kills = Arc::new(AtomicU64::new(0));
    let killer = {
        let (replicas, stop, kills) = (replicas.clone(), stop.clone(), kills.clone());
        let every = Duration::from_secs(o.kill_every_secs);
        // No kill in the last QUIET_LEASES leases (at least QUIET_MIN):
        // the sessions of the last one killed are taken over by their
        // clients' next requests before the clients stop.
        let last_kill = (Instant::now() + Duration::from_secs(o.secs))
            .checked_sub(QUIET_MIN.max(Duration::from_secs(o.lease_secs * QUIET_LEASES)))
            .unwrap_or_else(Instant::now);
        std::thread::spawn(move || -> anyhow::Result<()> {
            if every.is_zero() {
                return Ok(());
            }
            let mut next = Instant::now() + every;
            let mut victim = 0;
            while !stop.load(Ordering::Relaxed) && next <= last_kill {
                if Instant::now() < next {
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
                let mut r = replicas.lock().unwrap_or_else(|e| e.into_inner());
                r.kill(victim);
                kills.fetch_add(1, Ordering::Relaxed);
                r.restart(victim)?;
                drop(r);
                victim = (victim + 1) % REPLICAS;
                next += every;
            }
            Ok(())
        })
    };

    let tally = Arc::new(std::sync::Mutex::new(Tally::default()));
    let start = Instant::now();
    let deadline = start + Duration::from_secs(o.secs);
    let token_arc: Arc<str> = token.clone().into();
    let mut tasks = Vec::new();
    for s in 0..o.sessions {
        tasks.push(tokio::spawn(client_loop(
            s,
            token_arc.clone(),
            channels.clone(),
            deadline,
            tally.clone(),
        )));
    }
    let progress_task = {
        let (tally, kills) = (tally.clone(), kills.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let t = tally.lock().unwrap_or_else(|e| e.into_inner());
                progress(&format!(
                    "[soak] {:.0}/{} s: {} batches completed, {} retries, {} kills",
                    start.elapsed().as_secs_f64(),
                    o.secs,
                    t.completed,
                    t.retried_schedule + t.retried_watch,
                    kills.load(Ordering::Relaxed)
                ));
            }
        })
    };
    for t in tasks {
        t.await.context("a client task panicked")?;
    }
    let elapsed = start.elapsed();
    progress_task.abort();
    stop.store(true, Ordering::Relaxed);
    let killer = tokio::task::spawn_blocking(move || killer.join())
        .await?
        .map_err(|_| anyhow::anyhow!("the killer thread panicked"))?;
    let mut tally = std::mem::take(&mut *tally.lock().unwrap_or_else(|e| e.into_inner()));
    let mut rows = Vec::new();
    if let Err(e) = killer {
        tally.problems.push(format!("killer: {e:#}"));
    }
    progress("[soak] checking");

    // Nothing left running: on every replica, no session has a running or
    // queued batch; the store has no uncompleted batch; no command of the
    // run is alive. Writes behind and dying commands get SETTLE.
    let mut left = Vec::new();
    let settle_until = Instant::now() + SETTLE;
    loop {
        left.clear();
        for (i, ch) in channels.iter().enumerate() {
            let mut c = ToolSchedulerClient::new(ch.clone());
            for s in 0..o.sessions {
                let session_id = format!("soak-{token}-{s}");
                match c
                    .get_session(pb::GetSessionRequest {
                        session_id: session_id.clone(),
                    })
                    .await
                {
                    Ok(v) => {
                        let v = v.into_inner();
                        if !v.running_batch_id.is_empty() || !v.queued_batch_ids.is_empty() {
                            left.push(format!(
                                "replica {i} runs {session_id}: running {:?}, queued {:?}",
                                v.running_batch_id, v.queued_batch_ids
                            ));
                        }
                    }
                    Err(status) if status.code() == tonic::Code::NotFound => {}
                    Err(status) => left.push(format!("replica {i} GetSession: {status:?}")),
                }
            }
        }
        let store = sql(&db).await?;
        let open: i64 = store
            .query_one(
                "SELECT count(*) FROM toolsched_batches WHERE completed_at IS NULL",
                &[],
            )
            .await?
            .get(0);
        if open > 0 {
            left.push(format!("the store has {open} uncompleted batches"));
        }
        left.extend(
            live_commands(&workspace)
                .into_iter()
                .map(|p| format!("still running: {p}")),
        );
        if left.is_empty() || Instant::now() > settle_until {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let store = sql(&db).await?;
    let owner_changes: i64 = store
        .query_one(
            "SELECT coalesce(sum(epoch - 1), 0)::bigint FROM toolsched_leases",
            &[],
        )
        .await?
        .get(0);

    // Every completed batch replayed now says what its client saw live.
    progress("[soak] replaying completed batches");
    let replays = replay_all(&channels, &tally.finals).await;

    // No side effect twice.
    let counts = effect_counts(&workspace.join(EFFECTS))?;
    let mut twice = Vec::new();
    let known: HashSet<&str> = tally.effects.iter().map(|(e, _)| e.as_str()).collect();
    for (id, n) in &counts {
        if *n > 1 {
            twice.push(format!("{id} ran {n} times"));
        }
        if !known.contains(id.as_str()) {
            twice.push(format!("{id}: an effect no client asked for"));
        }
    }
    let mut missing = Vec::new();
    for (id, end) in &tally.effects {
        let n = counts.get(id).copied().unwrap_or(0);
        if *end == Some(Final::Success) && n != 1 {
            missing.push(format!("{id}: Success with {n} effects"));
        }
    }
    twice.sort();

    let t = &tally;
    let secs = elapsed.as_secs_f64();
    let killing = if o.kill_every_secs == 0 {
        "no replica killed".to_string()
    } else {
        format!(
            "a replica killed (SIGKILL) and restarted on its port every {} s",
            o.kill_every_secs
        )
    };
    rows.push(row(
        format!(
            "{} sessions over {REPLICAS} replicas (one PostgreSQL database, one workspace, lease {} s) for {secs:.0} s, {killing}: replicas killed",
            o.sessions, o.lease_secs
        ),
        kills.load(Ordering::Relaxed) as f64,
        "reported",
    ));
    rows.push(row(
        "batches accepted (BatchAccepted seen)".into(),
        t.accepted as f64,
        "= completed",
    ));
    rows.push(row(
        "batches completed (BatchCompleted seen)".into(),
        t.completed as f64,
        "= accepted",
    ));
    rows.push(row(
        format!(
            "calls completed (3 per batch: read_file, run_shell_command, list_directory); {:.0} batches/s",
            t.completed as f64 / secs
        ),
        t.calls as f64,
        "reported",
    ));
    rows.push(row(
        "shell calls ended outcome_unknown (running when their replica was killed)".into(),
        t.outcome_unknown as f64,
        "reported",
    ));
    rows.push(row(
        format!(
            "retries: ScheduleCalls again with the same request_id {}, WatchBatch re-attaches {}; causes {:?}",
            t.retried_schedule, t.retried_watch, t.causes
        ),
        (t.retried_schedule + t.retried_watch) as f64,
        "reported",
    ));
    rows.push(row(
        "batches taken over mid-run by another replica (a sequence past 2^32 seen)".into(),
        t.resumed as f64,
        "reported",
    ));
    rows.push(row(
        "session owner changes (lease epochs bumped in the store)".into(),
        owner_changes as f64,
        "reported",
    ));
    rows.push(row(
        "read-only calls shown terminal twice (re-run after a takeover)".into(),
        t.reads_rerun as f64,
        "reported",
    ));
    rows.push(row(
        "streams silent 30 s (stalled, re-attached)".into(),
        t.stalls as f64,
        "reported",
    ));
    rows.push(row(
        "batch latency p50 (ms), first request to BatchCompleted, retries included".into(),
        percentile(&t.latencies, 0.5) / 1e3,
        "reported",
    ));
    rows.push(row(
        "batch latency p99 (ms)".into(),
        percentile(&t.latencies, 0.99) / 1e3,
        "reported",
    ));
    let unmatched: Vec<String> = if t.accepted == t.completed {
        Vec::new()
    } else {
        vec![format!(
            "{} accepted, {} completed",
            t.accepted, t.completed
        )]
    };
    check(
        &mut rows,
        "batches accepted = batches completed",
        &unmatched,
    );
    check(
        &mut rows,
        "every call one terminal state, the expected one; one batch per request; sequences without gaps",
        &t.problems,
    );
    check(&mut rows, "no side effect twice", &twice);
    check(
        &mut rows,
        "every Success shell call's effect exactly once",
        &missing,
    );
    check(&mut rows, "nothing left running", &left);
    rows.push(row(
        format!(
            "completed batches replayed after the run (WatchBatch from 0); {} no longer retained",
            replays.not_retained
        ),
        replays.replayed as f64,
        "reported",
    ));
    rows.push(row(
        "of them run again by another replica after their client saw them complete (a takeover's log)".into(),
        replays.rerun_after_completion as f64,
        "0",
    ));
    rows.push(row(
        format!(
            "of them with other final states than their client saw live: {:?}",
            replays.differ
        ),
        replays.differ.values().sum::<u64>() as f64,
        "0",
    ));
    rows.push(row(
        "of them whose replay ended (OK) without BatchCompleted".into(),
        replays.no_completion as f64,
        "0",
    ));
    check(
        &mut rows,
        "a replay shows the final states its client saw live",
        &replays.problems,
    );
    drop(replicas);
    if rows.iter().any(|r| r.metric.starts_with("FAILED")) {
        eprintln!(
            "\n[soak] replica logs and workspace in {}, database {db}",
            run_dir.display()
        );
    } else {
        // Passed: the run's database and files are not needed any more.
        drop(store);
        drop_database(url, &format!("soak_{token}")).await;
        let _ = std::fs::remove_dir_all(&run_dir);
    }
    Ok(rows)
}
