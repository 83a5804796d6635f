//! Shell output kept beyond the output cap (issue 11 item 20).
//!
//! Owns: [`OutputKeeper`], the server's private directory of whole command
//! outputs, their per-call and per-session bounds and their expiry, and
//! which paths `read_file` may open there. A command whose output outgrows
//! `output_cap_bytes` still returns head and tail in its function
//! response; the whole output (up to `max_kept_output_bytes`) goes to a file
//! here, and the response names its path so that the model can page through
//! it with `read_file`, as Gemini CLI saves truncated output for the same
//! reason.
//!
//! The file names are random (128 bits), the directory is the server's own
//! (mode 0700, outside every workspace, left out of every sandbox grant), so
//! a path is a capability: only the call's client is told it. What is kept
//! per session is bounded (the oldest go first), and a file is deleted when
//! it expires or when the server stops.
//!
//! Not here: how output is captured (`sandbox::process`), what the shell
//! tool says (`shell.rs`), reading (`read.rs`).

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::scratch::{Kind, ScratchDir};

/// The bounds of kept output.
#[derive(Debug, Clone, PartialEq)]
pub struct KeptOutputConfig {
    /// The directory; `None`: a fresh private one in the system temp dir,
    /// removed when the server stops.
    pub dir: Option<PathBuf>,
    /// Bytes of one command's output kept (the first ones); 0 keeps none.
    pub per_call: u64,
    /// Bytes kept for one session; a new file pushes out its oldest.
    pub per_session: u64,
    /// How long a file stays.
    pub ttl: Duration,
}

impl Default for KeptOutputConfig {
    fn default() -> Self {
        Self {
            dir: None,
            // 64 MiB: a full build or test log; 4 per session by default.
            per_call: 64 * 1024 * 1024,
            per_session: 256 * 1024 * 1024,
            // 30 minutes: the session idle TTL's default, long enough for a
            // model to page through a log in the next turns.
            ttl: Duration::from_secs(1800),
        }
    }
}

struct Entry {
    session: String,
    path: PathBuf,
    bytes: u64,
    expires: Instant,
}

/// The kept outputs of one server.
pub struct OutputKeeper {
    config: KeptOutputConfig,
    dir: PathBuf,
    /// `dir` when it is ours: removed with its files at drop, swept by the
    /// next server when this one is killed.
    _owned: Option<ScratchDir>,
    entries: Mutex<VecDeque<Entry>>,
}

/// A file opened for one command's output.
pub struct KeptFile {
    pub file: File,
    pub path: PathBuf,
    /// Bytes it may take.
    pub cap: u64,
}

impl OutputKeeper {
    /// Creates (or opens) the directory, mode 0700.
    pub fn new(config: KeptOutputConfig) -> io::Result<Self> {
        use std::os::unix::fs::DirBuilderExt;
        let (dir, owned) = match &config.dir {
            Some(dir) => {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)?;
                (std::fs::canonicalize(dir)?, None)
            }
            None => {
                let dir = ScratchDir::create(Kind::Output)?;
                (std::fs::canonicalize(dir.path())?, Some(dir))
            }
        };
        Ok(Self {
            config,
            dir,
            _owned: owned,
            entries: Mutex::new(VecDeque::new()),
        })
    }

    /// The directory (for the sandbox to leave out).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// How long a file stays.
    pub fn ttl(&self) -> Duration {
        self.config.ttl
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new file for a command of `session`, after removing expired files
    /// and as many of the session's oldest as its bound needs. `None` when
    /// nothing is to be kept (`per_call` 0).
    pub fn create(&self, session: &str) -> io::Result<Option<KeptFile>> {
        let cap = self.config.per_call.min(self.config.per_session);
        if cap == 0 {
            return Ok(None);
        }
        let mut entries = self.lock();
        let now = Instant::now();
        let mut gone = Vec::new();
        entries.retain(|e| {
            let keep = e.expires > now;
            if !keep {
                gone.push(e.path.clone());
            }
            keep
        });
        let mut used: u64 = entries
            .iter()
            .filter(|e| e.session == session)
            .map(|e| e.bytes)
            .sum();
        while used + cap > self.config.per_session {
            let Some(i) = entries.iter().position(|e| e.session == session) else {
                break;
            };
            if let Some(e) = entries.remove(i) {
                used -= e.bytes;
                gone.push(e.path);
            }
        }
        let path = self.dir.join(format!("{}.txt", random_hex()));
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)?;
        entries.push_back(Entry {
            session: session.to_string(),
            path: path.clone(),
            // Reserved until [`OutputKeeper::settle`] says what it took.
            bytes: cap,
            expires: now + self.config.ttl,
        });
        drop(entries);
        for p in gone {
            let _ = std::fs::remove_file(p);
        }
        Ok(Some(KeptFile { file, path, cap }))
    }

    /// Records that `path` took `bytes`.
    pub fn settle(&self, path: &Path, bytes: u64) {
        if let Some(e) = self.lock().iter_mut().find(|e| e.path == path) {
            e.bytes = bytes;
        }
    }

    /// Whether `given` (a path as a client sent it) is a kept file that has
    /// not expired: the only paths outside the workspace `read_file` opens.
    pub fn lookup(&self, given: &str) -> Option<PathBuf> {
        self.lookup_owned(given).map(|(path, _)| path)
    }

    /// [`OutputKeeper::lookup`], with the session whose command kept it:
    /// only that session may read it (a path leaked to another session,
    /// another tenant's above all, opens nothing).
    pub fn lookup_owned(&self, given: &str) -> Option<(PathBuf, String)> {
        let path = Path::new(given);
        if path.parent() != Some(self.dir.as_path()) {
            return None;
        }
        let now = Instant::now();
        self.lock()
            .iter()
            .find(|e| e.path == path && e.expires > now)
            .map(|e| (e.path.clone(), e.session.clone()))
    }
}

impl Drop for OutputKeeper {
    fn drop(&mut self) {
        for e in self.lock().drain(..) {
            let _ = std::fs::remove_file(&e.path);
        }
        // `_owned` drops next: the directory goes with anything left in it.
    }
}

/// 122 random bits as hex (a v4 UUID from a CSPRNG).
fn random_hex() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn keeper(per_call: u64, per_session: u64, ttl: Duration) -> OutputKeeper {
        OutputKeeper::new(KeptOutputConfig {
            dir: None,
            per_call,
            per_session,
            ttl,
        })
        .unwrap()
    }

    #[test]
    fn a_session_keeps_its_newest_within_its_bound_and_others_are_untouched() {
        let k = keeper(10, 25, Duration::from_secs(60));
        let mut paths = Vec::new();
        for _ in 0..3 {
            let mut f = k.create("a").unwrap().unwrap();
            f.file.write_all(b"0123456789").unwrap();
            k.settle(&f.path, 10);
            paths.push(f.path);
        }
        let other = k.create("b").unwrap().unwrap().path;
        // 3 × 10 > 25: the oldest of "a" went, file and all.
        assert!(!paths[0].exists());
        assert_eq!(k.lookup(paths[0].to_str().unwrap()), None);
        for p in &paths[1..] {
            assert_eq!(k.lookup(p.to_str().unwrap()).as_ref(), Some(p));
        }
        assert!(k.lookup(other.to_str().unwrap()).is_some());
        // Each file names the session that kept it.
        assert_eq!(
            k.lookup_owned(other.to_str().unwrap()),
            Some((other.clone(), "b".to_string()))
        );
    }

    #[test]
    fn only_live_kept_files_are_found() {
        let k = keeper(10, 100, Duration::ZERO);
        let f = k.create("a").unwrap().unwrap();
        assert_eq!(k.lookup(f.path.to_str().unwrap()), None, "expired");
        let k = keeper(10, 100, Duration::from_secs(60));
        let f = k.create("a").unwrap().unwrap();
        let dir = k.dir().to_str().unwrap().to_string();
        for bad in [
            format!("{dir}/../{}", f.path.file_name().unwrap().to_str().unwrap()),
            format!("{dir}/nothere.txt"),
            "/etc/passwd".to_string(),
            f.path.file_name().unwrap().to_str().unwrap().to_string(),
        ] {
            assert_eq!(k.lookup(&bad), None, "{bad}");
        }
        let dir = k.dir().to_path_buf();
        drop(k);
        assert!(!dir.exists(), "removed with the server");
    }

    #[test]
    fn per_call_zero_keeps_nothing() {
        let k = keeper(0, 100, Duration::from_secs(60));
        assert!(k.create("a").unwrap().is_none());
    }
}
