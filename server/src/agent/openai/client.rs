//! One chat-completions call over HTTP: a streamed POST, read as Server-Sent Events into an
//! answer. Rate limits and server errors (429, 5xx, a stream cut short) are retried a few
//! times with exponential backoff and jitter, honouring `Retry-After`; everything else
//! becomes one message that says what to check. Dropping the future drops the response,
//! which closes the connection: the server stops generating for nobody.

use std::time::Duration;

use reqwest::header::{HeaderMap, ACCEPT, CONTENT_TYPE, RETRY_AFTER};
use reqwest::StatusCode;
use serde_json::Value;

use super::sse::SseParser;
use super::stream::{Answer, Assembler};

/// Attempts per call: the first and up to four retries.
const ATTEMPTS: u32 = 5;
/// The first backoff; it doubles with each retry.
const BACKOFF: Duration = Duration::from_millis(500);
/// The longest backoff.
const BACKOFF_CAP: Duration = Duration::from_secs(20);
/// The longest `Retry-After` honoured; a server asking for more is reported instead.
const RETRY_AFTER_CAP: Duration = Duration::from_secs(300);
/// How much of an error body is read.
const ERROR_BODY: usize = 64 * 1024;

/// Where and how to reach the model server.
#[derive(Debug, Clone)]
pub(crate) struct Client {
    http: reqwest::Client,
    url: String,
    base_url: String,
    key: Option<String>,
    key_env: Option<String>,
    timeout: Duration,
}

/// Why an attempt failed.
#[derive(Debug)]
enum Failure {
    /// Worth another try, after `after` when the server said.
    Retry {
        why: String,
        after: Option<Duration>,
    },
    /// Trying again would fail the same way.
    Fatal(String),
}

impl Client {
    /// A client for `base_url`; the API key is read from `key_env` when that is set.
    /// `timeout` bounds the wait for the response to start and each pause in the stream.
    pub(crate) fn new(
        base_url: &str,
        key_env: Option<String>,
        timeout: Duration,
    ) -> Result<Self, String> {
        let parsed = url::Url::parse(base_url)
            .map_err(|e| format!("\"baseUrl\" {base_url:?} is not a URL ({e})"))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(format!(
                "\"baseUrl\" {base_url:?} must start with http:// or https://"
            ));
        }
        let mut builder = reqwest::Client::builder()
            .connect_timeout(timeout)
            .user_agent(concat!("rein/", env!("CARGO_PKG_VERSION")));
        // A proxy from the environment must not capture a model server on this machine.
        let local = match parsed.host() {
            Some(url::Host::Domain(d)) => d == "localhost",
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
            None => false,
        };
        if local {
            builder = builder.no_proxy();
        }
        let http = builder
            .build()
            .map_err(|e| format!("cannot set up the HTTP client: {}", chain(&e)))?;
        let key = key_env
            .as_deref()
            .and_then(|var| std::env::var(var).ok())
            .filter(|k| !k.trim().is_empty());
        let base = base_url.trim_end_matches('/');
        Ok(Client {
            http,
            url: format!("{base}/chat/completions"),
            base_url: base.to_owned(),
            key,
            key_env,
            timeout,
        })
    }

    /// Sends one request body and returns the model's answer, or what went wrong.
    pub(crate) async fn complete(&self, body: &Value) -> Result<Answer, String> {
        let bytes =
            serde_json::to_vec(body).map_err(|e| format!("cannot encode the request: {e}"))?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.attempt(bytes.clone()).await {
                Ok(answer) => return Ok(answer),
                Err(Failure::Fatal(why)) => return Err(why),
                Err(Failure::Retry { why, .. }) if attempt >= ATTEMPTS => {
                    return Err(format!("{why}; gave up after {ATTEMPTS} attempts"))
                }
                Err(Failure::Retry { why, after }) => {
                    let wait = match after {
                        Some(after) if after > RETRY_AFTER_CAP => {
                            return Err(format!(
                            "{why}; the server asks to wait {} s before trying again: resume later",
                            after.as_secs()
                        ))
                        }
                        Some(after) => after,
                        None => backoff(attempt),
                    };
                    tracing::warn!(
                        "{why}; retrying in {:.1} s (attempt {attempt} of {ATTEMPTS})",
                        wait.as_secs_f64()
                    );
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }

    async fn attempt(&self, body: Vec<u8>) -> Result<Answer, Failure> {
        let mut req = self
            .http
            .post(&self.url)
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "text/event-stream")
            .body(body);
        if let Some(key) = &self.key {
            req = req.bearer_auth(key);
        }
        let resp = match tokio::time::timeout(self.timeout, req.send()).await {
            Err(_) => return Err(Failure::Fatal(self.timed_out("to start answering"))),
            Ok(Err(e)) if e.is_connect() => {
                return Err(Failure::Fatal(format!(
                    "cannot connect to the model server at {} ({}); is it running? For Ollama run `ollama serve`; otherwise check \"baseUrl\" in the agent spec",
                    self.base_url,
                    root_cause(&e)
                )))
            }
            Ok(Err(e)) if e.is_timeout() => {
                return Err(Failure::Fatal(self.timed_out("to accept the connection")))
            }
            Ok(Err(e)) => {
                return Err(Failure::Retry {
                    why: format!("the request to {} failed ({})", self.url, chain(&e)),
                    after: None,
                })
            }
            Ok(Ok(resp)) => resp,
        };
        let status = resp.status();
        if !status.is_success() {
            let after = retry_after(resp.headers());
            let said = self.error_text(resp).await;
            return Err(self.refusal(status, &said, after));
        }
        let json = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json"));
        if json {
            self.whole(resp).await
        } else {
            self.stream(resp).await
        }
    }

    /// Reads an event stream to `[DONE]` (or its end).
    async fn stream(&self, mut resp: reqwest::Response) -> Result<Answer, Failure> {
        let mut parser = SseParser::default();
        let mut answer = Assembler::default();
        loop {
            let chunk = self.next_chunk(&mut resp).await?;
            let events = match &chunk {
                Some(bytes) => parser.feed(bytes),
                None => parser.finish(),
            }
            .map_err(|e| {
                Failure::Fatal(format!("the stream from {} is malformed: {e}", self.url))
            })?;
            for data in events {
                if data.trim() == "[DONE]" {
                    return Ok(answer.finish());
                }
                let v: Value = serde_json::from_str(&data).map_err(|e| {
                    Failure::Fatal(format!(
                        "the server sent malformed JSON in the stream ({e}): {}",
                        snippet(&data)
                    ))
                })?;
                answer.apply(&v).map_err(Failure::Fatal)?;
            }
            if chunk.is_none() {
                let done = answer.finish();
                // Some servers end the stream without [DONE]; a finish reason says it is whole.
                return match done.finish_reason {
                    Some(_) => Ok(done),
                    None => Err(Failure::Retry {
                        why: format!(
                            "the stream from {} ended before the answer was complete",
                            self.url
                        ),
                        after: None,
                    }),
                };
            }
        }
    }

    /// Reads a whole JSON completion (a server that ignored `stream: true`).
    async fn whole(&self, mut resp: reqwest::Response) -> Result<Answer, Failure> {
        let mut body = Vec::new();
        while let Some(bytes) = self.next_chunk(&mut resp).await? {
            body.extend_from_slice(&bytes);
            if body.len() > 16 * 1024 * 1024 {
                return Err(Failure::Fatal("the answer is longer than 16 MiB".into()));
            }
        }
        let v: Value = serde_json::from_slice(&body).map_err(|e| {
            Failure::Fatal(format!(
                "the server sent malformed JSON ({e}): {}",
                snippet(&String::from_utf8_lossy(&body))
            ))
        })?;
        let mut answer = Assembler::default();
        answer.apply(&v).map_err(Failure::Fatal)?;
        Ok(answer.finish())
    }

    async fn next_chunk(&self, resp: &mut reqwest::Response) -> Result<Option<Vec<u8>>, Failure> {
        match tokio::time::timeout(self.timeout, resp.chunk()).await {
            Err(_) => Err(Failure::Fatal(self.timed_out("to send more of the answer"))),
            Ok(Ok(chunk)) => Ok(chunk.map(|b| b.to_vec())),
            Ok(Err(e)) => Err(Failure::Retry {
                why: format!(
                    "the connection to {} broke mid-answer ({})",
                    self.base_url,
                    chain(&e)
                ),
                after: None,
            }),
        }
    }

    /// The server's own words about a refusal, from its error body.
    async fn error_text(&self, mut resp: reqwest::Response) -> String {
        let mut body = Vec::new();
        while body.len() < ERROR_BODY {
            match tokio::time::timeout(self.timeout, resp.chunk()).await {
                Ok(Ok(Some(bytes))) => body.extend_from_slice(&bytes),
                _ => break,
            }
        }
        let text = String::from_utf8_lossy(&body).into_owned();
        let said = serde_json::from_str::<Value>(&text).ok().and_then(|v| {
            let err = v.get("error").unwrap_or(&v);
            err.get("message")
                .or_else(|| err.get("detail"))
                .and_then(Value::as_str)
                .or_else(|| err.as_str())
                .map(str::to_owned)
        });
        snippet(&said.unwrap_or(text))
    }

    fn refusal(&self, status: StatusCode, said: &str, after: Option<Duration>) -> Failure {
        let code = status.as_u16();
        let said = if said.trim().is_empty() {
            String::new()
        } else {
            format!(": {said}")
        };
        match code {
            401 | 403 => Failure::Fatal(match (&self.key_env, &self.key) {
                (Some(var), Some(_)) => format!(
                    "the model server at {} refused the API key (HTTP {code}{said}); set {var} to a valid key where Rein starts (then restart the editor or Rein)",
                    self.base_url
                ),
                (Some(var), None) => format!(
                    "the model server at {} needs an API key (HTTP {code}{said}); {var} is not set: set it to your key where Rein starts (then restart the editor or Rein)",
                    self.base_url
                ),
                (None, _) => format!(
                    "the model server at {} needs an API key (HTTP {code}{said}); add \"apiKeyEnv\": \"OPENAI_API_KEY\" to the agent spec and set that variable where Rein starts",
                    self.base_url
                ),
            }),
            429 => Failure::Retry {
                why: format!("the model server is rate-limiting requests (HTTP 429{said})"),
                after,
            },
            500..=599 => Failure::Retry {
                why: format!("the model server failed (HTTP {code}{said})"),
                after,
            },
            404 => Failure::Fatal(format!(
                "{} was not found (HTTP 404{said}); check \"baseUrl\" (it usually ends in /v1) and that the model exists (for Ollama: `ollama pull <model>`)",
                self.url
            )),
            _ => Failure::Fatal(format!(
                "the model server refused the request (HTTP {code}{said})"
            )),
        }
    }

    fn timed_out(&self, what: &str) -> String {
        format!(
            "the model server at {} took longer than {} s {what} (timeoutS in the agent spec)",
            self.base_url,
            self.timeout.as_secs_f64()
        )
    }
}

/// `Retry-After` in seconds (the HTTP-date form is rare from model servers; backoff applies).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let v = headers
        .get(RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse::<f64>()
        .ok()?;
    (v.is_finite() && v >= 0.0).then(|| Duration::from_secs_f64(v.min(1e6)))
}

/// Exponential backoff before retry `attempt` (1-based), with jitter in [50 %, 100 %] so
/// clients rate-limited together do not come back together.
fn backoff(attempt: u32) -> Duration {
    use std::hash::BuildHasher;
    let full = BACKOFF
        .saturating_mul(1 << attempt.saturating_sub(1).min(16))
        .min(BACKOFF_CAP);
    let random = std::collections::hash_map::RandomState::new().hash_one(attempt) % 1000;
    full.mul_f64(0.5 + random as f64 / 2000.0)
}

/// An error with its causes, on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cur = c.source();
    }
    out
}

/// The innermost cause (e.g. "Connection refused (os error 111)").
fn root_cause(e: &dyn std::error::Error) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

/// At most 300 characters of a text, for messages.
fn snippet(text: &str) -> String {
    let text = text.trim();
    if text.chars().count() > 300 {
        format!("{}…", text.chars().take(300).collect::<String>())
    } else {
        text.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_is_jittered_and_capped() {
        for attempt in 1..10 {
            let full = BACKOFF.saturating_mul(1 << (attempt - 1)).min(BACKOFF_CAP);
            let b = backoff(attempt);
            assert!(b <= full && b >= full / 2, "{attempt}: {b:?}");
        }
        assert!(backoff(60) <= BACKOFF_CAP);
    }

    #[test]
    fn retry_after_takes_seconds_and_ignores_dates() {
        let mut h = HeaderMap::new();
        h.insert(RETRY_AFTER, "3".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(3)));
        h.insert(
            RETRY_AFTER,
            "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap(),
        );
        assert_eq!(retry_after(&h), None);
        h.insert(RETRY_AFTER, "-1".parse().unwrap());
        assert_eq!(retry_after(&h), None);
    }

    #[test]
    fn bad_base_urls_are_refused() {
        let t = Duration::from_secs(1);
        assert!(Client::new("localhost:11434", None, t).is_err());
        assert!(Client::new("ftp://x/v1", None, t).is_err());
        let c = Client::new("http://127.0.0.1:11434/v1/", None, t).unwrap();
        assert_eq!(c.url, "http://127.0.0.1:11434/v1/chat/completions");
    }
}
