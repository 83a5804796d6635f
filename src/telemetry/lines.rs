//! `--log-format json`: tracing-subscriber's JSON lines, fields at the top
//! level, with the audit trail's lines serialized by serde_json straight
//! into one buffer.
//!
//! Every call writes two audit lines, and tracing-subscriber's JSON format
//! writes each token of a line (a quote, a key, a colon, a piece of a
//! string) through an adapter that checks it is UTF-8 and appends it: the
//! two lines were 20% of the instructions of a one-`read_file` batch
//! (BENCHMARKS.md, "Session 13"). An audit line here holds the same keys in
//! the same order (`timestamp`, `level`, the message and fields, `target`)
//! with the same values; the audit trail opens no span, so it has no
//! `span`/`spans` keys. Every other line is tracing-subscriber's own.

use std::fmt;

use serde::Serializer as _;
use serde::ser::SerializeMap as _;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{Format, Json, JsonFields, Writer};
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

use super::audit;

/// The event format of `--log-format json` (with [`JsonFields`] for spans).
pub struct JsonLines {
    other: Format<Json>,
}

impl JsonLines {
    pub fn new() -> Self {
        Self {
            other: Format::default().json().flatten_event(true),
        }
    }

    /// The field formatter to install beside it.
    pub fn fields() -> JsonFields {
        JsonFields::new()
    }
}

impl Default for JsonLines {
    fn default() -> Self {
        Self::new()
    }
}

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        if meta.target() != audit::TARGET {
            return self.other.format_event(ctx, writer, event);
        }
        let mut timestamp = String::with_capacity(32);
        format_timestamp(&mut timestamp)?;
        let mut line = Vec::with_capacity(LINE_CAPACITY);
        let mut serializer = serde_json::Serializer::new(&mut line);
        let mut map = serializer.serialize_map(None).map_err(|_| fmt::Error)?;
        let mut fields = Fields {
            map: &mut map,
            failed: false,
        };
        fields.entry("timestamp", &timestamp);
        fields.entry("level", meta.level().as_str());
        event.record(&mut fields);
        fields.entry("target", meta.target());
        if fields.failed {
            return Err(fmt::Error);
        }
        map.end().map_err(|_| fmt::Error)?;
        line.push(b'\n');
        // serde_json writes UTF-8 only.
        writer.write_str(std::str::from_utf8(&line).map_err(|_| fmt::Error)?)
    }
}

/// The line's timestamp as tracing-subscriber writes it (RFC 3339, UTC,
/// microseconds: `2026-12-03T07:18:37.123456Z`), with the date and time of
/// day formatted once per second per thread: formatting the whole stamp
/// was a quarter of an audit line's instructions (BENCHMARKS.md, "Session
/// 15"). Before 1970 (a clock set wrong) it is tracing-subscriber's own.
fn format_timestamp(out: &mut String) -> fmt::Result {
    use std::cell::RefCell;
    use std::fmt::Write as _;
    thread_local! {
        /// The second last formatted on this thread, and its text.
        static SECOND: RefCell<(u64, String)> = const { RefCell::new((0, String::new())) };
    }
    let Ok(now) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) else {
        return SystemTime.format_time(&mut Writer::new(out));
    };
    let secs = now.as_secs();
    let formatted = SECOND.with_borrow_mut(|(second, text)| {
        if *second != secs || text.is_empty() {
            let Some(at) = i64::try_from(secs)
                .ok()
                .and_then(|s| chrono::DateTime::from_timestamp(s, 0))
            else {
                return false;
            };
            text.clear();
            write!(text, "{}", at.format("%Y-%m-%dT%H:%M:%S")).ok();
            *second = secs;
        }
        out.push_str(text);
        true
    });
    if !formatted {
        return SystemTime.format_time(&mut Writer::new(out));
    }
    // Six digits by hand: `write!("{:06}")` costs as much as the rest.
    let mut micros = now.subsec_micros();
    let mut digits = [b'0'; 6];
    for d in digits.iter_mut().rev() {
        *d = b'0' + (micros % 10) as u8;
        micros /= 10;
    }
    out.push('.');
    out.push_str(std::str::from_utf8(&digits).map_err(|_| fmt::Error)?);
    out.push('Z');
    Ok(())
}

/// Room for an audit line without regrowing (they are 450–650 bytes).
const LINE_CAPACITY: usize = 768;

/// Each field of an event as a top-level entry of the line.
struct Fields<'a, M> {
    map: &'a mut M,
    failed: bool,
}

impl<M: serde::ser::SerializeMap> Fields<'_, M> {
    fn entry<V: serde::Serialize + ?Sized>(&mut self, key: &str, value: &V) {
        if !self.failed {
            self.failed = self.map.serialize_entry(key, value).is_err();
        }
    }
}

impl<M: serde::ser::SerializeMap> Visit for Fields<'_, M> {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.entry(field.name(), &value);
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.entry(field.name(), &value);
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.entry(field.name(), &value);
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.entry(field.name(), &value);
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.entry(field.name(), value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.entry(field.name(), &format_args!("{value:?}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::fmt::MakeWriter;

    /// Lines written, shared with the test.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Captured {
        type Writer = Captured;

        fn make_writer(&'a self) -> Self::Writer {
            self.clone()
        }
    }

    fn emit(subscriber: impl Subscriber + Send + Sync + 'static) {
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(
                target: audit::TARGET,
                tenant = "acme",
                path = Some("a \"quoted\"\n\u{e9}.txt"),
                args_digest = None::<&str>,
                rule = %"allow-read",
                error = ?Some(3),
                duration_ms = 1.5,
                count = 7u64,
                delta = -2i64,
                ok = true,
                "call ended"
            );
        });
    }

    /// A line's entries in the order written.
    struct Ordered(Vec<(String, serde_json::Value)>);

    impl<'de> serde::Deserialize<'de> for Ordered {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct Entries;
            impl<'de> serde::de::Visitor<'de> for Entries {
                type Value = Ordered;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("a JSON object")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(
                    self,
                    mut map: A,
                ) -> Result<Ordered, A::Error> {
                    let mut out = Vec::new();
                    while let Some(entry) = map.next_entry()? {
                        out.push(entry);
                    }
                    Ok(Ordered(out))
                }
            }
            d.deserialize_map(Entries)
        }
    }

    fn parse(bytes: &[u8]) -> Vec<(String, serde_json::Value)> {
        let text = std::str::from_utf8(bytes).unwrap();
        assert!(
            text.ends_with('\n') && text.matches('\n').count() == 1,
            "{text}"
        );
        serde_json::from_str::<Ordered>(text).unwrap().0
    }

    fn get<'a>(line: &'a [(String, serde_json::Value)], key: &str) -> &'a serde_json::Value {
        &line.iter().find(|(k, _)| k == key).unwrap().1
    }

    /// An audit line holds what tracing-subscriber's flattened JSON holds,
    /// key for key and in the same order, but the timestamp's value.
    #[test]
    fn an_audit_line_is_the_line_tracing_subscriber_writes() {
        let ours = Captured::default();
        emit(
            tracing_subscriber::fmt()
                .with_writer(ours.clone())
                .fmt_fields(JsonLines::fields())
                .event_format(JsonLines::new())
                .finish(),
        );
        let theirs = Captured::default();
        emit(
            tracing_subscriber::fmt()
                .with_writer(theirs.clone())
                .json()
                .flatten_event(true)
                .finish(),
        );
        let (mut ours, mut theirs) = (
            parse(&ours.0.lock().unwrap()),
            parse(&theirs.0.lock().unwrap()),
        );
        let keys = |m: &[(String, serde_json::Value)]| -> Vec<String> {
            m.iter().map(|(k, _)| k.clone()).collect()
        };
        assert_eq!(keys(&ours), keys(&theirs));
        assert_eq!(
            keys(&ours),
            [
                "timestamp",
                "level",
                "message",
                "tenant",
                "path",
                "rule",
                "error",
                "duration_ms",
                "count",
                "delta",
                "ok",
                "target"
            ]
        );
        let (_, stamp) = ours.remove(0);
        theirs.remove(0);
        assert_eq!(ours, theirs);
        assert_eq!(get(&ours, "path"), "a \"quoted\"\n\u{e9}.txt");
        assert_eq!(get(&ours, "error"), "Some(3)");
        assert_eq!(get(&ours, "duration_ms"), 1.5);
        // RFC 3339, UTC, microseconds: 2026-12-02T20:27:09.088568Z.
        let stamp = stamp.as_str().unwrap();
        assert_eq!((stamp.len(), &stamp[10..11], &stamp[26..]), (27, "T", "Z"));
    }

    /// The cached stamp reads as tracing-subscriber's (the same format, a
    /// moment apart), on a second first seen and on one seen before.
    #[test]
    fn a_timestamp_is_the_one_tracing_subscriber_writes() {
        let parse = |s: &str| {
            assert_eq!(
                (s.len(), &s[4..5], &s[10..11], &s[19..20], &s[26..]),
                (27, "-", "T", ".", "Z"),
                "{s}"
            );
            chrono::DateTime::parse_from_rfc3339(s).unwrap_or_else(|e| panic!("{s}: {e}"))
        };
        for _ in 0..2 {
            let mut ours = String::new();
            format_timestamp(&mut ours).unwrap();
            let mut theirs = String::new();
            SystemTime
                .format_time(&mut Writer::new(&mut theirs))
                .unwrap();
            let (ours, theirs) = (parse(&ours), parse(&theirs));
            let apart = theirs.signed_duration_since(ours);
            assert!(
                apart >= chrono::TimeDelta::zero() && apart < chrono::TimeDelta::seconds(1),
                "{ours} then {theirs}"
            );
        }
    }

    #[test]
    fn other_lines_are_tracing_subscribers_own() {
        let ours = Captured::default();
        tracing::subscriber::with_default(
            tracing_subscriber::fmt()
                .with_writer(ours.clone())
                .fmt_fields(JsonLines::fields())
                .event_format(JsonLines::new())
                .finish(),
            || tracing::warn!(target: "toolsched::other", limit = 3, "held"),
        );
        let line = parse(&ours.0.lock().unwrap());
        assert_eq!(get(&line, "target"), "toolsched::other");
        assert_eq!(get(&line, "level"), "WARN");
        assert_eq!(get(&line, "limit"), 3);
        assert_eq!(get(&line, "message"), "held");
    }
}
