//! A `tracing` layer that copies log events to the client as `window/logMessage`, so the
//! server's log shows in the editor as well as on stderr (`RUST_LOG` filters both).

use std::fmt::Write as _;

use crossbeam_channel::{Receiver, Sender};
use lsp_types::MessageType;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

/// One log line on its way to the client.
#[derive(Debug, Clone)]
pub struct LogLine {
    /// Its LSP severity.
    pub level: MessageType,
    /// The formatted event.
    pub text: String,
}

/// Forwards events to the event loop, which sends them as `window/logMessage`.
#[derive(Debug, Clone)]
pub struct LogLayer {
    tx: Sender<LogLine>,
}

/// A layer and the receiving end the server reads.
pub fn channel() -> (LogLayer, Receiver<LogLine>) {
    let (tx, rx) = crossbeam_channel::bounded(1024);
    (LogLayer { tx }, rx)
}

struct Text(String);

impl Visit for Text {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0.push_str(value);
        } else {
            let _ = write!(self.0, " {}={value}", field.name());
        }
    }
}

impl<S: Subscriber> Layer<S> for LogLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let meta = event.metadata();
        let level = match *meta.level() {
            Level::ERROR => MessageType::ERROR,
            Level::WARN => MessageType::WARNING,
            Level::INFO => MessageType::INFO,
            _ => MessageType::LOG,
        };
        let mut text = Text(format!("[{}] ", meta.target()));
        event.record(&mut text);
        // A full queue drops lines rather than block whoever is logging.
        let _ = self.tx.try_send(LogLine {
            level,
            text: text.0,
        });
    }
}
